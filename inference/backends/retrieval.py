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
from array import array
from collections import Counter
from collections.abc import Callable, Sequence

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
    """TF-IDF cosine over documents, as an inverted index of compact arrays: memory grows
    with the number of distinct (document, token) pairs, not with Python objects per
    document, so 20,000 recorded actions stay a few megabytes."""

    def __init__(self, docs: Sequence[str]):
        self.n_docs = len(docs)
        vocabulary: dict[str, int] = {}
        doc_terms: list[tuple[array, array]] = []  # per doc: token ids, their counts
        df: list[int] = []
        for doc in docs:
            counts = Counter(tokenize(doc))
            ids = array("i")
            tfs = array("i")
            for token, count in counts.items():
                tid = vocabulary.setdefault(token, len(vocabulary))
                if tid == len(df):
                    df.append(0)
                df[tid] += 1
                ids.append(tid)
                tfs.append(count)
            doc_terms.append((ids, tfs))
        n = self.n_docs
        self.vocabulary = vocabulary
        self.idf = array("d", (math.log((1 + n) / (1 + c)) + 1.0 for c in df))
        postings_docs: list[array] = [array("i") for _ in df]
        postings_weights: list[array] = [array("f") for _ in df]
        for doc_id, (ids, tfs) in enumerate(doc_terms):
            weights = [tf * self.idf[tid] for tid, tf in zip(ids, tfs, strict=True)]
            norm = math.sqrt(sum(w * w for w in weights)) or 1.0
            for tid, w in zip(ids, weights, strict=True):
                postings_docs[tid].append(doc_id)
                postings_weights[tid].append(w / norm)
        self.postings = list(zip(postings_docs, postings_weights, strict=True))

    def scores(self, query: str) -> list[float]:
        counts = Counter(t for t in tokenize(query) if t in self.vocabulary)
        weights = {t: c * self.idf[self.vocabulary[t]] for t, c in counts.items()}
        norm = math.sqrt(sum(w * w for w in weights.values()))
        scores = [0.0] * self.n_docs
        if not norm:
            return scores
        for token, w in weights.items():
            docs, doc_weights = self.postings[self.vocabulary[token]]
            q = w / norm
            for doc_id, dw in zip(docs, doc_weights, strict=True):
                scores[doc_id] += q * dw
        return scores


class RetrievalBackend:
    name = "retrieval"
    model = MODEL_NAME
    is_neural = False

    def __init__(self, corpus: Sequence[tuple[str, str, str]], domain: str | None = None):
        steps = [
            (str(a), str(o))
            for d, a, o in corpus
            if (domain is None or d == domain) and o is not None
        ]
        observations = [o for _, o in steps]
        self._setup([a for a, _ in steps], lambda positions: [observations[p] for p in positions])
        self.domain = domain

    @classmethod
    def from_lookup(
        cls,
        actions: Sequence[str],
        observations: Callable[[Sequence[int]], list[str]],
        domain: str | None = None,
    ) -> RetrievalBackend:
        """A corpus whose observations stay where they are (a database): only the actions
        are indexed in memory; `observations(positions)` fetches the answers."""
        backend = cls.__new__(cls)
        backend._setup(actions, observations)
        backend.domain = domain
        return backend

    def _setup(
        self, actions: Sequence[str], observations: Callable[[Sequence[int]], list[str]]
    ) -> None:
        self.actions = list(actions)
        self._observations = observations
        self._index = TfidfIndex(self.actions) if self.actions else None

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

    def _distinct(self, ranked: list[tuple[float, int]], n: int) -> list[tuple[float, int, str]]:
        """The best `n` entries with distinct observations, fetched a batch at a time."""
        picked: list[tuple[float, int, str]] = []
        seen: set[int] = set()  # hashes of the observations picked (they can be large)
        start, size = 0, max(2 * n, 8)
        while len(picked) < n and start < len(ranked):
            batch = ranked[start : start + size]
            start += len(batch)
            size *= 2  # many duplicates at the top: fetch more at a time
            for (score, i), obs in zip(
                batch, self._observations([i for _, i in batch]), strict=True
            ):
                key = hash(obs)
                if key in seen:
                    continue
                seen.add(key)
                picked.append((score, i, obs))
                if len(picked) == n:
                    break
        return picked

    def answer(self, messages: Sequence[Message], n: int, seed: int | None) -> list[str]:
        query = query_of(messages)
        picked = self._distinct(self.rank(query, seed), n)
        texts = []
        for k in range(n):
            score, i, obs = picked[k % len(picked)]
            action = self.actions[i]
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
