"""A non-neural baseline: answer with the observation of the most similar recorded step.

The corpus is a list of recorded steps `(domain, action, observation)` (the studio passes those
of the trajectory's domain). The query is the action of the last user message (the text after
`**Action:**` when the turn prompt has one, else the whole message). Similarity is the TF-IDF
cosine between the query and each recorded action. With n > 1 the samples are the top-n
DISTINCT observations. Ties are broken by a seeded shuffle, so results are deterministic given
the seed. The output is wrapped in `<predicted_observation>` with a `<think>` note saying where
it came from, so it parses like a model's output and is labelled as a baseline."""

from __future__ import annotations

import math
import random
import re
import time
from collections import Counter
from collections.abc import Sequence

from inference.backends.errors import BackendError
from inference.types import (
    Completion,
    GenerationRequest,
    Message,
    StreamCallback,
    StreamEvent,
)

MODEL_NAME = "retrieval baseline (non-neural)"

_TOKEN = re.compile(r"[a-z0-9_]+|[^\sa-z0-9_]", re.IGNORECASE)
_ACTION = re.compile(r"\*\*Action:\*\*\s*(.*?)(?=\n\s*\*\*[^*\n]+:\*\*|\Z)", re.DOTALL)


def tokenize(text: str) -> list[str]:
    return [t.lower() for t in _TOKEN.findall(text)]


def query_of(messages: Sequence[Message]) -> str:
    """The action the world model is asked about: from the last user message."""
    for message in reversed(messages):
        if message.get("role") == "user":
            content = message.get("content") or ""
            found = _ACTION.findall(content)
            return found[-1].strip() if found else content
    raise BackendError("retrieval baseline: the prompt has no user message with an action")


class TfidfIndex:
    def __init__(self, docs: Sequence[str]):
        self.doc_tokens = [Counter(tokenize(d)) for d in docs]
        df: Counter[str] = Counter()
        for counts in self.doc_tokens:
            df.update(counts.keys())
        n = len(docs)
        self.idf = {t: math.log((1 + n) / (1 + c)) + 1.0 for t, c in df.items()}
        self.doc_vectors = [self._weigh(c) for c in self.doc_tokens]

    def _weigh(self, counts: Counter[str]) -> dict[str, float]:
        vec = {t: c * self.idf.get(t, 0.0) for t, c in counts.items()}
        norm = math.sqrt(sum(v * v for v in vec.values()))
        return {t: v / norm for t, v in vec.items()} if norm else {}

    def scores(self, query: str) -> list[float]:
        q = self._weigh(Counter(tokenize(query)))
        return [sum(w * d.get(t, 0.0) for t, w in q.items()) for d in self.doc_vectors]


class RetrievalBackend:
    name = "retrieval"
    model = MODEL_NAME
    is_neural = False

    def __init__(self, corpus: Sequence[tuple[str, str, str]], domain: str | None = None):
        steps = [tuple(s) for s in corpus if domain is None or s[0] == domain]
        self.steps: list[tuple[str, str, str]] = [
            (str(d), str(a), str(o)) for d, a, o in steps if o is not None
        ]
        self.domain = domain
        self._index = TfidfIndex([a for _, a, _ in self.steps]) if self.steps else None

    def rank(self, query: str, seed: int | None = None) -> list[tuple[float, int]]:
        """(score, corpus index) best first; ties in a seeded order."""
        if self._index is None:
            where = f" of domain {self.domain!r}" if self.domain else ""
            raise BackendError(
                f"retrieval baseline: no recorded steps{where} to answer from; import "
                "trajectories of this domain or configure a model"
            )
        scores = self._index.scores(query)
        rng = random.Random(seed if seed is not None else 0)
        tiebreak = [rng.random() for _ in scores]
        order = sorted(range(len(scores)), key=lambda i: (-scores[i], tiebreak[i]))
        return [(scores[i], i) for i in order]

    def answer(self, messages: Sequence[Message], n: int, seed: int | None) -> list[str]:
        query = query_of(messages)
        picked: list[tuple[float, int]] = []
        seen: set[str] = set()
        for score, i in self.rank(query, seed):
            obs = self.steps[i][2]
            if obs in seen:
                continue
            seen.add(obs)
            picked.append((score, i))
            if len(picked) == n:
                break
        texts = []
        for k in range(n):
            score, i = picked[k % len(picked)]
            _, action, obs = self.steps[i]
            texts.append(
                f"<think>{MODEL_NAME}: recorded step with the most similar action "
                f"(TF-IDF cosine {score:.2f}, rank {k % len(picked) + 1}):\n{action}</think>\n"
                f"<predicted_observation>\n{obs}\n</predicted_observation>"
            )
        return texts

    def generate(
        self, request: GenerationRequest, on_event: StreamCallback | None = None
    ) -> list[Completion]:
        params = request.params
        start = time.perf_counter()
        if request.branches is None:
            assert request.messages is not None
            texts = self.answer(request.messages, max(1, params.n), params.seed)
        else:
            # Each branch asks about its own action: its best match.
            texts = [self.answer(m, 1, params.seed)[0] for m in request.branches]
        elapsed = time.perf_counter() - start
        out = []
        for i, text in enumerate(texts):
            if on_event is not None:
                on_event(
                    StreamEvent(sample=i, text=text, tokens_out=len(tokenize(text)), phase="done")
                )
            out.append(
                Completion(
                    text=text,
                    tokens_in=0,
                    tokens_out=len(tokenize(text)),
                    decode_s=elapsed / len(texts),
                    finish_reason="stop",
                )
            )
        return out
