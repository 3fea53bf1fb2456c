"""Hits ranked by meaning: the best `MEANING_CANDIDATES` matches of a query (by the index's
rank; the newest where it has no words to rank by) ordered by the cosine similarity of their
text to the query's words, as the project's embedding model sees them
(`studio.services.embeddings`).

The index finds; the embeddings only reorder what it found, so the hits are the query's and
the page says among how many it ranked. Vectors are kept in the cache (Django's, per
process) under the model, the server and a digest of the text, so paging asks the server
only for texts it has not seen."""

from __future__ import annotations

import hashlib

from django.core.cache import cache
from django.db import connection

from inference.embeddings import Embedder, cosine
from studio.search.backends import SEES_ALL, Viewer, compile_branches
from studio.search.query import Query, parse
from studio.search.service import (
    COUNT_LIMIT,
    MAX_PER_PAGE,
    StepResults,
    _hits,
    _regex_page,
    best_step_ids,
    trajectory_matches,
)

MEANING_CANDIDATES = 200
TEXT_CHARS = 2000  # of a step's action and observation, together
CACHE_S = 24 * 3600


def query_text(query: Query) -> str:
    """What the query means, in words: its positive terms (not its filters or exclusions)."""
    return " ".join(" ".join(t.words) for t in query.positive_text)


def search_by_meaning(
    project_ids: list[int],
    query: Query | str,
    embedder: Embedder,
    *,
    page: int = 1,
    per_page: int = 25,
    viewer: Viewer = SEES_ALL,
) -> StepResults:
    """The query's best `MEANING_CANDIDATES` matches, closest in meaning first.
    `EmbeddingError` when the model does not answer; ValueError when the query has no words
    to compare with."""
    if isinstance(query, str):
        query = parse(query)
    text = query_text(query)
    if not text:
        raise ValueError("closest in meaning needs words to compare the steps with")
    page = max(1, int(page))
    per_page = max(1, min(int(per_page), MAX_PER_PAGE))
    results = StepResults(query, [], page, per_page, "meaning", 0)
    ids = sorted({int(p) for p in project_ids})
    if not ids:
        return results
    results.trajectory_matches = trajectory_matches(ids, query)
    branches = compile_branches(query, connection.vendor, ids, viewer)
    if query.regexes:
        candidates, _, results.regex_scope = _regex_page(
            branches, "relevance", query, 0, MEANING_CANDIDATES
        )
        candidates = candidates[:MEANING_CANDIDATES]
    else:
        candidates = best_step_ids(branches, MEANING_CANDIDATES + 1)
    more = len(candidates) > MEANING_CANDIDATES
    candidates = candidates[:MEANING_CANDIDATES]
    texts = _step_texts(candidates)
    present = [pk for pk in candidates if pk in texts]
    vectors = _vectors(embedder, [text, *(texts[pk] for pk in present)])
    target = vectors[0]
    similarity = {pk: cosine(target, v) for pk, v in zip(present, vectors[1:], strict=True)}
    ordered = sorted(present, key=lambda pk: (-similarity[pk], -pk))
    start = min((page - 1) * per_page, len(ordered))
    results.total = len(ordered)
    results.has_next = start + per_page < len(ordered)
    results.hits = _hits(ordered[start : start + per_page], query, viewer)
    results.similarity = {pk: similarity[pk] for pk in ordered[start : start + per_page]}
    best = "best" if any(b.rank_sql for b in branches) else "newest"
    results.meaning_scope = (
        f"Ranked by meaning among the {best} {len(ordered):,} matches"
        + (f" (the query has more, up to {COUNT_LIMIT:,} counted)" if more else "")
        + f", by the embedding model {embedder.model!r}."
    )
    return results


def _step_texts(step_ids: list[int]) -> dict[int, str]:
    from studio.models import Step

    out = {}
    for pk, action, observation in Step.objects.filter(pk__in=step_ids).values_list(
        "pk", "action", "observation"
    ):
        out[pk] = f"{action or ''}\n{observation or ''}"[:TEXT_CHARS]
    return out


def _key(embedder: Embedder, text: str) -> str:
    digest = hashlib.sha256(f"{embedder.base_url}\0{embedder.model}\0{text}".encode()).hexdigest()
    return f"studio:embedding:{digest}"


def _vectors(embedder: Embedder, texts: list[str]) -> list[list[float]]:
    keys = [_key(embedder, t) for t in texts]
    known = cache.get_many(keys)
    missing = [i for i, k in enumerate(keys) if k not in known]
    if missing:
        fresh = embedder.embed([texts[i] for i in missing])
        cache.set_many({keys[i]: v for i, v in zip(missing, fresh, strict=True)}, CACHE_S)
        known.update({keys[i]: v for i, v in zip(missing, fresh, strict=True)})
    return [known[k] for k in keys]
