"""Step search: `search_steps(project_ids, query, ...)` -> `StepResults`, the same on
PostgreSQL and SQLite (`studio.search.backends` holds each one's SQL).

Indexed: a step's action and observation (their first `INDEXED_CHARS` characters each).
Scanned (case-insensitive substring, the tables are small next to the steps): trajectory
titles and tasks and world names (`trajectory_matches`). Regular expressions run in Python
over a bounded candidate set (`STUDIO_SEARCH_REGEX_CANDIDATES`, default 20,000 steps): the
steps the rest of the query matches when it has words, else the newest steps; the result
says which (`regex_scope`)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from django.conf import settings
from django.db import connection
from django.db.models import Q
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

from studio.search.backends import INDEXED_CHARS, Compiled, compile_where, source_of
from studio.search.query import Query, RegexTerm, TextTerm, parse
from studio.services.model_identity import identities_of_jobs, identity_of_step

SORTS = ("relevance", "newest", "oldest")
COUNT_LIMIT = 1000  # beyond this many hits the total reads "more than 1,000"
MAX_PER_PAGE = 100
MAX_OFFSET = 10_000
SNIPPET_BEFORE, SNIPPET_AFTER = 60, 180


def regex_candidates() -> int:
    return int(settings.STUDIO_SEARCH_REGEX_CANDIDATES)


@dataclass(frozen=True)
class Snippet:
    """A piece of a step's text around a match: (text, marked) pieces, escaped on output."""

    field: str  # "action" / "observation"
    pieces: tuple[tuple[str, bool], ...]
    cut_before: bool = False
    cut_after: bool = False

    def html(self) -> SafeString:
        out = "…" if self.cut_before else ""
        for text, marked in self.pieces:
            out += f"<mark>{escape(text)}</mark>" if marked else str(escape(text))
        return mark_safe(out + ("…" if self.cut_after else ""))  # noqa: S308 - escaped above

    @property
    def text(self) -> str:
        return "".join(t for t, _ in self.pieces)


@dataclass(frozen=True)
class StepHit:
    step_id: int
    trajectory_id: int
    trajectory_title: str
    branch_id: int
    branch_name: str
    index: int
    source: str  # recorded / simulated / perturbed / episode
    model: str  # the model that wrote the observation ("" when recorded)
    snippet: Snippet | None


@dataclass(frozen=True)
class TrajectoryGroup:
    trajectory_id: int
    title: str
    hits: tuple[StepHit, ...]


@dataclass
class StepResults:
    query: Query
    hits: list[StepHit]
    page: int
    per_page: int
    sort: str
    total: int  # hits counted, at most `COUNT_LIMIT` (then `total_is_lower_bound`)
    total_is_lower_bound: bool = False
    has_next: bool = False
    regex_scope: str = ""  # what a regular expression was applied to, in words
    trajectory_matches: list[int] = field(default_factory=list)  # titles/tasks/worlds

    @property
    def total_label(self) -> str:
        if self.total_is_lower_bound:
            return f"more than {self.total:,}"
        return f"{self.total:,}"

    @property
    def groups(self) -> list[TrajectoryGroup]:
        """This page's hits grouped by trajectory, in the order of each one's first hit."""
        order: dict[int, list[StepHit]] = {}
        for hit in self.hits:
            order.setdefault(hit.trajectory_id, []).append(hit)
        return [
            TrajectoryGroup(tid, hits[0].trajectory_title, tuple(hits))
            for tid, hits in order.items()
        ]


def search_steps(
    project_ids: list[int],
    query: Query | str,
    *,
    page: int = 1,
    per_page: int = 25,
    sort: str = "relevance",
) -> StepResults:
    """The steps of `project_ids` that `query` matches (a string is parsed: `QueryError`).
    `sort`: relevance (best first; newest first when the query has no words), newest,
    oldest."""
    if isinstance(query, str):
        query = parse(query)
    if sort not in SORTS:
        raise ValueError(f"sort must be one of {', '.join(SORTS)}")
    page = max(1, int(page))
    per_page = max(1, min(int(per_page), MAX_PER_PAGE))
    results = StepResults(query, [], page, per_page, sort, 0)
    ids = sorted({int(p) for p in project_ids})
    if not ids or query.is_empty:
        return results
    results.trajectory_matches = _trajectory_matches(ids, query)
    compiled = compile_where(query, connection.vendor, ids)
    order, order_params = _order(compiled, sort)
    offset = min((page - 1) * per_page, MAX_OFFSET)
    if query.regexes:
        step_ids, results.total, results.regex_scope = _regex_page(
            compiled, order, order_params, query, offset, per_page
        )
    else:
        sql = (
            f"SELECT s.id FROM {compiled.from_sql} WHERE {compiled.where_sql} "
            f"ORDER BY {order} LIMIT %s OFFSET %s"
        )
        with connection.cursor() as cursor:
            cursor.execute(sql, [*compiled.params, *order_params, per_page + 1, offset])
            step_ids = [r[0] for r in cursor.fetchall()]
            cursor.execute(
                f"SELECT COUNT(*) FROM (SELECT 1 FROM {compiled.from_sql} "
                f"WHERE {compiled.where_sql} LIMIT %s) AS found",
                [*compiled.params, COUNT_LIMIT + 1],
            )
            counted = cursor.fetchone()[0]
        results.total = min(counted, COUNT_LIMIT)
        results.total_is_lower_bound = counted > COUNT_LIMIT
    results.has_next = len(step_ids) > per_page
    results.hits = _hits(step_ids[:per_page], query)
    return results


def trajectory_ids_sql(project_ids: list[int], query: Query) -> tuple[str, list[Any]]:
    """SQL selecting the ids of trajectories with a step the query's index terms and
    filters match (for the library; regular expressions are not part of it)."""
    compiled = compile_where(query, connection.vendor, sorted(project_ids))
    return (
        f"SELECT b.trajectory_id FROM {compiled.from_sql} WHERE {compiled.where_sql}",
        compiled.params,
    )


def trajectory_ids_by_regex(project_ids: list[int], query: Query) -> list[int]:
    """The trajectories with a step the whole query matches, regular expressions included,
    over the bounded candidates of `search_steps`."""
    compiled = compile_where(query, connection.vendor, sorted(project_ids))
    step_ids, _, _ = _regex_page(compiled, "s.id DESC", [], query, 0, regex_candidates())
    from studio.models import Step

    return list(
        Step.objects.filter(pk__in=step_ids)
        .values_list("branch__trajectory_id", flat=True)
        .distinct()
    )


def _order(compiled: Compiled, sort: str) -> tuple[str, list[Any]]:
    if sort == "oldest":
        return "s.id ASC", []
    if sort == "relevance" and compiled.rank_sql:
        return f"{compiled.rank_sql}, s.id DESC", list(compiled.rank_params)
    return "s.id DESC", []


def _regex_page(
    compiled: Compiled,
    order: str,
    order_params: list[Any],
    query: Query,
    offset: int,
    per_page: int,
) -> tuple[list[int], int, str]:
    """A page of the candidates the regular expressions match, how many match among them,
    and what the candidates were, in words."""
    limit = regex_candidates()
    patterns = [(r.compiled(), r.negated) for r in query.regexes]
    sql = (
        f"SELECT s.id, s.action, s.observation FROM {compiled.from_sql} "
        f"WHERE {compiled.where_sql} ORDER BY {order} LIMIT %s"
    )
    matched: list[int] = []
    seen = 0
    with connection.cursor() as cursor:
        cursor.execute(sql, [*compiled.params, *order_params, limit])
        while rows := cursor.fetchmany(1000):
            for step_id, action, observation in rows:
                seen += 1
                a, o = (action or "")[:INDEXED_CHARS], (observation or "")[:INDEXED_CHARS]
                if all(bool(p.search(a) or p.search(o)) != neg for p, neg in patterns):
                    matched.append(step_id)
    capped = seen >= limit
    what = "matching the rest of the query" if (query.text or query.filters) else "in the project"
    order_words = (
        "best"
        if order.startswith(("ts_rank", "bm25"))
        else ("oldest" if order.startswith("s.id ASC") else "newest")
    )
    if capped:
        scope = (
            f"The regular expression was applied to the {order_words} {limit:,} steps {what} "
            f"only (STUDIO_SEARCH_REGEX_CANDIDATES); there are more."
        )
    else:
        scope = f"The regular expression was applied to all {seen:,} steps {what}."
    page_ids = matched[offset : offset + per_page + 1]
    return page_ids, len(matched), scope


def _trajectory_matches(project_ids: list[int], query: Query) -> list[int]:
    """Trajectories whose title, task or world name holds every positive word (scanned)."""
    from studio.models import Trajectory

    words = [t for t in query.positive_text if t.field is None]
    if not words:
        return []
    qs = Trajectory.objects.filter(project_id__in=project_ids)
    for term in words:
        text = " ".join(term.words)
        qs = qs.filter(
            Q(title__icontains=text)
            | Q(task_instruction__icontains=text)
            | Q(metadata__world__name__icontains=text)
        )
    return list(qs.order_by("-id").values_list("id", flat=True)[:50])


def _hits(step_ids: list[int], query: Query) -> list[StepHit]:
    from studio.models import Step

    if not step_ids:
        return []
    rows = {
        s.pk: s
        for s in Step.objects.filter(pk__in=step_ids)
        .select_related("branch__trajectory")
        .only(
            "id",
            "index",
            "action",
            "observation",
            "observation_source",
            "provenance",
            "meta",
            "branch__id",
            "branch__name",
            "branch__job_id",
            "branch__trajectory__id",
            "branch__trajectory__title",
            "branch__trajectory__source_format",
        )
    }
    branch_jobs = {s.branch_id: s.branch.job_id for s in rows.values()}
    job_ids = set(branch_jobs.values())
    job_ids |= {
        s.meta.get("job")
        for s in rows.values()
        if isinstance(s.meta, dict) and isinstance(s.meta.get("job"), int)
    }
    identities = identities_of_jobs(job_ids)
    markers = _markers(query)
    hits = []
    for pk in step_ids:
        s = rows.get(pk)
        if s is None:  # deleted since
            continue
        trajectory = s.branch.trajectory
        identity = identity_of_step(
            SimpleNamespace(
                observation_source=s.observation_source, meta=s.meta, branch_id=s.branch_id
            ),
            branch_jobs,
            identities,
        )
        hits.append(
            StepHit(
                step_id=s.pk,
                trajectory_id=trajectory.pk,
                trajectory_title=trajectory.title,
                branch_id=s.branch_id,
                branch_name=s.branch.name,
                index=s.index,
                source=source_of(s.observation_source, s.provenance, trajectory.source_format),
                model=identity.short if identity is not None else "",
                snippet=snippet(s.action, s.observation, markers),
            )
        )
    return hits


@dataclass(frozen=True)
class _Marker:
    pattern: re.Pattern[str]
    field: str | None


def _markers(query: Query) -> list[_Marker]:
    out = [_Marker(_term_pattern(t), t.field) for t in query.positive_text]
    out += [_Marker(_regex_pattern(r), None) for r in query.regexes if not r.negated]
    return out


def _term_pattern(term: TextTerm) -> re.Pattern[str]:
    words = [re.escape(w) for w in term.words]
    if term.prefix:
        words[-1] += r"[^\W_]*"
    else:
        words[-1] += r"(?![^\W_])"
    # the words in order, anything that is not a letter or digit between them
    return re.compile(r"(?<![^\W_])" + r"[\W_]+".join(words), re.IGNORECASE)


def _regex_pattern(term: RegexTerm) -> re.Pattern[str]:
    return term.compiled()


def snippet(action: str, observation: str, markers: list[_Marker]) -> Snippet | None:
    """The first match of any marker in the action, else the observation, with every
    marker's matches in that window marked. None when nothing matches (a filter-only
    query: the start of the action then)."""
    texts = {
        "action": (action or "")[:INDEXED_CHARS],
        "observation": (observation or "")[:INDEXED_CHARS],
    }
    for name, text in texts.items():
        relevant = [m for m in markers if m.field in (None, name)]
        first = min(
            (found.start() for m in relevant if (found := m.pattern.search(text))), default=None
        )
        if first is None:
            continue
        start = max(0, first - SNIPPET_BEFORE)
        end = min(len(text), first + SNIPPET_AFTER)
        spans: list[tuple[int, int]] = []
        for m in relevant:
            for found in m.pattern.finditer(text, start, end):
                if found.end() > found.start():
                    spans.append((found.start(), min(found.end(), end)))
        return Snippet(name, _pieces(text, start, end, spans), start > 0, end < len(text))
    if not markers and (action or observation):
        name = "action" if action else "observation"
        text = texts[name]
        return Snippet(name, ((text[:SNIPPET_AFTER], False),), False, len(text) > SNIPPET_AFTER)
    return None


def _pieces(
    text: str, start: int, end: int, spans: list[tuple[int, int]]
) -> tuple[tuple[str, bool], ...]:
    merged: list[list[int]] = []
    for a, b in sorted(spans):
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    pieces: list[tuple[str, bool]] = []
    pos = start
    for a, b in merged:
        if a > pos:
            pieces.append((text[pos:a], False))
        pieces.append((text[a:b], True))
        pos = b
    if pos < end:
        pieces.append((text[pos:end], False))
    return tuple(pieces)
