"""An OpenAI-compatible embeddings client (`POST /v1/embeddings`), plain Python: texts in,
one vector per text out, in order, asked in batches; and cosine similarity.

    embedder = Embedder("http://127.0.0.1:8002/v1", "bge-small-en")
    vectors = embedder.embed(["the agent deletes files", "rm -rf /tmp/cache"])
    cosine(vectors[0], vectors[1])"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

BATCH = 64  # texts per request
TEXT_CHARS = 8000  # each text is cut to this many characters before it is sent


class EmbeddingError(RuntimeError):
    """The server did not answer with one embedding per text (the message says what)."""


class Embedder:
    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        timeout: float = 60.0,
        *,
        batch_size: int = BATCH,
        max_retries: int = 1,
    ):
        from openai import DefaultHttpxClient, OpenAI

        self.base_url = base_url
        self.model = model
        self.batch_size = max(1, int(batch_size))
        self.tokens = 0  # prompt tokens the server counted, over every request
        self.client = OpenAI(
            base_url=base_url,
            api_key=api_key or "EMPTY",
            timeout=timeout,
            max_retries=max_retries,
            http_client=DefaultHttpxClient(follow_redirects=False),
        )

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One vector per text, in the order given (an empty text is sent as one space: some
        servers refuse empty input)."""
        out: list[list[float]] = []
        for start in range(0, len(texts), self.batch_size):
            batch = [(t or " ")[:TEXT_CHARS] for t in texts[start : start + self.batch_size]]
            out.extend(self._batch(batch))
        return out

    def _batch(self, batch: list[str]) -> list[list[float]]:
        try:
            response: Any = self.client.embeddings.create(
                model=self.model, input=batch, encoding_format="float"
            )
        except Exception as exc:  # noqa: BLE001 - said with the server's words
            raise EmbeddingError(
                f"the embeddings model {self.model!r} at {self.base_url} did not answer: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        data = list(getattr(response, "data", None) or [])
        if len(data) != len(batch):
            raise EmbeddingError(
                f"the embeddings model {self.model!r} at {self.base_url} answered "
                f"{len(data)} embeddings for {len(batch)} texts"
            )
        usage = getattr(response, "usage", None)
        self.tokens += int(getattr(usage, "prompt_tokens", 0) or 0)
        ordered = sorted(data, key=lambda d: getattr(d, "index", 0))
        vectors = []
        for item in ordered:
            vector = getattr(item, "embedding", None)
            if not isinstance(vector, list) or not vector:
                raise EmbeddingError(
                    f"the embeddings model {self.model!r} at {self.base_url} answered an "
                    "embedding that is not a list of numbers"
                )
            vectors.append([float(x) for x in vector])
        return vectors


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    """The cosine similarity of two vectors (0.0 when either is all zeros)."""
    if len(a) != len(b):
        raise ValueError(f"vectors of {len(a)} and {len(b)} numbers cannot be compared")
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    na = math.sqrt(sum(x * x for x in a))
    nb = math.sqrt(sum(y * y for y in b))
    if na == 0 or nb == 0:
        return 0.0
    return dot / (na * nb)
