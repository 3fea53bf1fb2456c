"""Step search: `search_steps(project_ids, query, ...)` -> `StepResults`, the same on
PostgreSQL and SQLite (`studio.search.backends` holds each one's SQL).

Indexed: a step's action and observation (their first `INDEXED_CHARS` characters each).
Scanned (case-insensitive substring, the tables are small next to the steps): trajectory
titles and tasks and world names (`trajectory_matches`). Regular expressions run in Python
over a bounded candidate set (`STUDIO_SEARCH_REGEX_CANDIDATES`, default 20,000 steps): the
steps the rest of the query matches when it has words, else the newest steps; the result
says which (`regex_scope`). They run in a bounded time too (`STUDIO_SEARCH_REGEX_MS` for a
search, `MARK_MS` for marking a snippet): past it a search raises `RegexTimeout`."""

from __future__ import annotations

import re
import time
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from types import SimpleNamespace
from typing import Any

import regex
from django.conf import settings
from django.db import connection
from django.db.models import Q
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

from studio.search.backends import (
    INDEXED_CHARS,
    SEES_ALL,
    UNTESTED,
    Compiled,
    Viewer,
    candidates_sql,
    compile_branches,
    count_sql,
    page_sql,
    source_of,
    trajectory_where,
)
from studio.search.backends import trajectory_ids_sql as steps_trajectory_ids_sql
from studio.search.query import (
    ANNOTATION_FIELDS,
    STEP_FIELDS,
    Query,
    RegexTerm,
    RegexTimeout,
    TextTerm,
    parse,
)
from studio.search.text import without_ansi
from studio.services.model_identity import identities_of_jobs, identity_of_step

SORTS = ("relevance", "newest", "oldest")
COUNT_LIMIT = 1000  # beyond this many hits the total reads "more than 1,000"
# PostgreSQL: a phrase or field term is tested on at most this many steps holding its words
PHRASE_CANDIDATES = 10_000
MAX_PER_PAGE = 100
MAX_OFFSET = 10_000
SNIPPET_BEFORE, SNIPPET_AFTER = 60, 180
# marking one text of a hit for one pattern takes at most this long (a regular expression
# that backtracks for ever on the text it matched leaves the snippet unmarked)
MARK_MS = 100


def regex_candidates() -> int:
    return int(settings.STUDIO_SEARCH_REGEX_CANDIDATES)


def regex_seconds() -> float:
    return int(settings.STUDIO_SEARCH_REGEX_MS) / 1000


@dataclass(frozen=True)
class Snippet:
    """A piece of a step's text around a match: (text, marked) pieces, escaped on output."""

    field: str  # "action" / "observation", or an annotation's "comment" / "tag" / "correction"
    pieces: tuple[tuple[str, bool], ...]
    cut_before: bool = False
    cut_after: bool = False
    author: str = ""  # whose annotation it is from (an annotation's field)

    @property
    def heading(self) -> str:
        if self.field in ("action", "observation"):
            return self.field
        return f"{self.field} by {self.author}" if self.author else self.field

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
    trajectory_domain: str
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
    domain: str
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
    # sorted by relevance with more than `COUNT_LIMIT` hits (PostgreSQL): the newest
    # `ranked_among` hits were ranked, and come first; the others follow, newest first
    ranked_among: int = 0
    # a phrase or field term was tested on the newest `PHRASE_CANDIDATES` steps holding
    # its words only (the oldest, sorted oldest first), and there are more: `total` hits at
    # least (PostgreSQL)
    total_is_partial: bool = False
    # ranked by meaning (`studio.search.meaning`): among which hits, and each one's cosine
    meaning_scope: str = ""
    similarity: dict[int, float] = field(default_factory=dict)

    @property
    def ranking_label(self) -> str:
        """How the hits are ordered by relevance when not all were ranked ("" otherwise)."""
        if not self.ranked_among:
            return ""
        return (
            f"best first among the newest {self.ranked_among:,} hits, then the older ones "
            "newest first"
        )

    @property
    def total_label(self) -> str:
        if self.total_is_partial:
            # sorted oldest first, the oldest candidates were tested (`candidates_sql`)
            end, rest = ("oldest", "newer") if self.sort == "oldest" else ("newest", "older")
            return (
                f"{self.total:,} in the {end} {PHRASE_CANDIDATES:,} steps that hold every word "
                f"({rest} ones not searched)"
            )
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
            TrajectoryGroup(tid, hits[0].trajectory_title, hits[0].trajectory_domain, tuple(hits))
            for tid, hits in order.items()
        ]


def viewer_for(membership) -> Viewer:
    """How `membership`'s user searches its project: researchers and admins see every
    annotation; anyone else not the others' annotations of the steps a blind queue hides
    from them (`studio.services.blinding`)."""
    from studio.services.blinding import hidden_items, sees_everything

    if membership is None or sees_everything(membership):
        return SEES_ALL
    rows = hidden_items(membership.project_id, membership.user_id).values("step_id")
    sql, params = rows.query.sql_with_params()
    return Viewer(membership.user_id, sql, tuple(params))


def search_steps(
    project_ids: list[int],
    query: Query | str,
    *,
    page: int = 1,
    per_page: int = 25,
    sort: str = "relevance",
    viewer: Viewer = SEES_ALL,
) -> StepResults:
    """The steps of `project_ids` that `query` matches (a string is parsed: `QueryError`),
    as `viewer` may see them (pages pass `viewer_for(membership)`). `sort`: relevance (best
    first; newest first when the query has no words), newest, oldest."""
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
    results.trajectory_matches = trajectory_matches(ids, query)
    branches = compile_branches(query, connection.vendor, ids, viewer)
    offset = min((page - 1) * per_page, MAX_OFFSET)
    if query.regexes:
        step_ids, results.total, results.regex_scope = _regex_page(
            branches, sort, query, offset, per_page
        )
    elif connection.vendor == "postgresql":
        step_ids, counted, results.ranked_among, results.total_is_partial = _candidates_page(
            branches, sort, per_page, offset
        )
        results.total = min(counted, COUNT_LIMIT)
        results.total_is_lower_bound = counted > COUNT_LIMIT
    else:
        with connection.cursor() as cursor:
            cursor.execute(*page_sql(branches, sort, per_page + 1, offset))
            step_ids = [r[0] for r in cursor.fetchall()]
            cursor.execute(*count_sql(branches, COUNT_LIMIT + 1))
            counted = cursor.fetchone()[0]
        results.total = min(counted, COUNT_LIMIT)
        results.total_is_lower_bound = counted > COUNT_LIMIT
    results.has_next = len(step_ids) > per_page
    results.hits = _hits(step_ids[:per_page], query, viewer)
    return results


def _candidates_page(
    branches: list[Compiled], sort: str, per_page: int, offset: int
) -> tuple[list[int], int, int, bool]:
    """PostgreSQL: the page's step ids (one more than `per_page`, to tell a next page), the
    hits counted (up to `COUNT_LIMIT` + 1) and how many were ranked (0: all, or not by
    relevance). One query reads the newest `COUNT_LIMIT` + 1 hits (`candidates_sql`):
    their number is the count, and by relevance these are ranked; past them the hits follow
    in newest order (oldest order for oldest), which a second query reads for deep pages."""
    with connection.cursor() as cursor:
        cursor.execute(*candidates_sql(branches, sort, COUNT_LIMIT + 1, PHRASE_CANDIDATES))
        rows = cursor.fetchall()
        untested = any(row[0] == UNTESTED for row in rows)
        rows = [row for row in rows if row[0] != UNTESTED][: COUNT_LIMIT + 1]
        counted = len(rows)
        # past `COUNT_LIMIT` hits the count reads "more than" whatever was left untested
        partial = untested and counted <= COUNT_LIMIT
        kept = rows[:COUNT_LIMIT]
        ranked = sort == "relevance" and all(b.rank_vector for b in branches)
        if ranked:
            kept.sort(key=lambda row: (-row[1], -row[0]))
        want = per_page + 1
        step_ids = [row[0] for row in kept[offset : offset + want]]
        if len(step_ids) < want and counted > COUNT_LIMIT and not partial:
            tail = "oldest" if sort == "oldest" else "newest"
            start = max(offset, COUNT_LIMIT)
            cursor.execute(*page_sql(branches, tail, want - len(step_ids), start))
            step_ids += [r[0] for r in cursor.fetchall()]
    return step_ids, counted, COUNT_LIMIT if ranked and counted > COUNT_LIMIT else 0, partial


def best_step_ids(branches: list[Compiled], limit: int) -> list[int]:
    """The ids of the best `limit` matches (relevance; newest first where the query has no
    words to rank by), bounded as a page is on PostgreSQL (the newest `COUNT_LIMIT` hits
    ranked)."""
    if connection.vendor == "postgresql":
        step_ids, _, _, _ = _candidates_page(branches, "relevance", limit - 1, 0)
        return step_ids[:limit]
    with connection.cursor() as cursor:
        cursor.execute(*page_sql(branches, "relevance", limit, 0))
        return [r[0] for r in cursor.fetchall()]


def matching_step_ids(
    project_ids: list[int], query: Query | str, limit: int, *, viewer: Viewer = SEES_ALL
) -> list[int]:
    """The ids of the newest `limit` steps the whole query matches (regular expressions
    over the bounded candidates of `search_steps`); every step of the projects when the
    query is empty."""
    if isinstance(query, str):
        query = parse(query)
    ids = sorted({int(p) for p in project_ids})
    if not ids or limit <= 0:
        return []
    if query.is_empty:
        from studio.models import Step

        return list(
            Step.objects.filter(branch__trajectory__project_id__in=ids)
            .order_by("-id")
            .values_list("id", flat=True)[:limit]
        )
    branches = compile_branches(query, connection.vendor, ids, viewer)
    if query.regexes:
        step_ids, _, _ = _regex_page(branches, "newest", query, 0, limit)
        return step_ids[:limit]
    with connection.cursor() as cursor:
        cursor.execute(*page_sql(branches, "newest", limit, 0))
        return [r[0] for r in cursor.fetchall()]


def trajectory_ids_sql(
    project_ids: list[int], query: Query, viewer: Viewer = SEES_ALL
) -> tuple[str, list[Any]]:
    """SQL selecting the ids of trajectories with a step the query's index terms and
    filters match, or whose title, task or world name hold its words (for the library;
    regular expressions are not part of it)."""
    ids = sorted(project_ids)
    sql, params = steps_trajectory_ids_sql(compile_branches(query, connection.vendor, ids, viewer))
    titled = trajectory_where(query, connection.vendor, ids)
    if titled is not None:
        sql += f" UNION SELECT t.id FROM {titled.from_sql} WHERE {titled.where_sql}"
        params = [*params, *titled.params]
    return sql, params


def trajectory_ids_by_regex(
    project_ids: list[int], query: Query, viewer: Viewer = SEES_ALL
) -> list[int]:
    """The trajectories with a step the whole query matches, regular expressions included,
    over the bounded candidates of `search_steps`."""
    branches = compile_branches(query, connection.vendor, sorted(project_ids), viewer)
    step_ids, _, _ = _regex_page(branches, "newest", query, 0, regex_candidates())
    from studio.models import Step

    return list(
        Step.objects.filter(pk__in=step_ids)
        .values_list("branch__trajectory_id", flat=True)
        .distinct()
    )


def _regex_page(
    branches: list[Compiled], sort: str, query: Query, offset: int, per_page: int
) -> tuple[list[int], int, str]:
    """A page of the candidates the regular expressions match, how many match among them,
    and what the candidates were, in words."""
    limit = regex_candidates()
    patterns = [(r.compiled(), r.negated, r.pattern) for r in query.regexes]
    budget = regex_seconds()
    started = time.monotonic()
    # the module's timeout counts the process's CPU time (every thread's): the wall clock
    # bounds it too, and the message says how long it ran
    deadline = started + budget
    matched: list[int] = []
    tested = 0

    def holds(pattern: regex.Pattern[str], text: str) -> bool:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError
        # concurrent: the GIL is let go while it matches, so the process's other threads
        # (other requests) go on meanwhile
        return pattern.search(text, concurrent=True, timeout=left) is not None

    with connection.cursor() as cursor:
        cursor.execute(*page_sql(branches, sort, limit, 0))
        candidates = [r[0] for r in cursor.fetchall()]
        for start in range(0, len(candidates), 1000):
            chunk = candidates[start : start + 1000]
            marks = ", ".join(["%s"] * len(chunk))
            cursor.execute(
                f"SELECT id, action, observation FROM studio_step WHERE id IN ({marks})", chunk
            )
            texts = {row[0]: row[1:] for row in cursor.fetchall()}
            for step_id in chunk:
                if step_id not in texts:
                    continue
                action, observation = texts[step_id]
                a, o = (action or "")[:INDEXED_CHARS], (observation or "")[:INDEXED_CHARS]
                for pattern, negated, source in patterns:
                    try:
                        found = holds(pattern, a) or holds(pattern, o)
                    except TimeoutError:
                        took = time.monotonic() - started
                        raise RegexTimeout(source, took, tested, len(candidates)) from None
                    if found == negated:
                        break
                else:
                    matched.append(step_id)
                tested += 1
    seen = len(candidates)
    capped = seen >= limit
    what = "matching the rest of the query" if (query.text or query.filters) else "in the project"
    ranked = sort == "relevance" and all(b.rank_sql for b in branches)
    order_words = "best" if ranked else ("oldest" if sort == "oldest" else "newest")
    if capped:
        scope = (
            f"The regular expression was applied to the {order_words} {limit:,} steps {what} "
            f"only (STUDIO_SEARCH_REGEX_CANDIDATES); there are more."
        )
    else:
        scope = f"The regular expression was applied to all {seen:,} steps {what}."
    page_ids = matched[offset : offset + per_page + 1]
    return page_ids, len(matched), scope


def trajectory_matches(project_ids: list[int], query: Query, limit: int = 50) -> list[int]:
    """Trajectories whose title, task or world name hold the query's words (the index),
    best first."""
    compiled = trajectory_where(query, connection.vendor, sorted(project_ids))
    if compiled is None:
        return []
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT t.id FROM {compiled.from_sql} WHERE {compiled.where_sql} "
            f"ORDER BY {compiled.order_rank}, t.id DESC LIMIT %s",
            [*compiled.params, *compiled.rank_params, limit],
        )
        return [r[0] for r in cursor.fetchall()]


def _hits(step_ids: list[int], query: Query, viewer: Viewer) -> list[StepHit]:
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
            "branch__trajectory__domain",
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
    annotations = _annotation_texts(step_ids, viewer) if _annotation_markers(query) else {}
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
                trajectory_domain=trajectory.domain,
                branch_id=s.branch_id,
                branch_name=s.branch.name,
                index=s.index,
                source=source_of(s.observation_source, s.provenance, trajectory.source_format),
                model=identity.short if identity is not None else "",
                snippet=_hit_snippet(s, markers, annotations.get(pk, ()), query),
            )
        )
    return hits


@dataclass(frozen=True)
class _Marker:
    pattern: regex.Pattern[str]
    field: str | None

    def first(self, text: str) -> int | None:
        """Where its first match in `text` starts (None: none, or not found in MARK_MS)."""
        try:
            found = self.pattern.search(text, concurrent=True, timeout=MARK_MS / 1000)
        except TimeoutError:
            return None
        return found.start() if found else None

    def spans(self, text: str, start: int, end: int) -> list[tuple[int, int]]:
        """Its matches in text[start:end] (those found in MARK_MS)."""
        out: list[tuple[int, int]] = []
        try:
            matches = self.pattern.finditer(
                text, start, end, concurrent=True, timeout=MARK_MS / 1000
            )
            for match in matches:
                if match.end() > match.start():
                    out.append((match.start(), min(match.end(), end)))
        except TimeoutError:
            pass
        return out


def _markers(query: Query) -> list[_Marker]:
    """What a step's own text is marked for: its words and fields and the regexes."""
    out = [
        _Marker(_term_pattern(t), t.field)
        for t in query.positive_text
        if t.field in (None, *STEP_FIELDS)
    ]
    out += [_Marker(_regex_pattern(r), None) for r in query.regexes if not r.negated]
    return out


def _annotation_markers(query: Query) -> list[_Marker]:
    """What an annotation's text is marked for: the words and the annotation fields."""
    return [
        _Marker(_term_pattern(t), t.field)
        for t in query.positive_text
        if t.field in (None, *ANNOTATION_FIELDS)
    ]


def _term_pattern(term: TextTerm) -> regex.Pattern[str]:
    words = [re.escape(w) for w in term.words]
    if term.prefix:
        words[-1] += r"[^\W_]*"
    else:
        words[-1] += r"(?![^\W_])"
    # the words in order, anything that is not a letter or digit between them
    return regex.compile(r"(?<![^\W_])" + r"[\W_]+".join(words), regex.IGNORECASE | regex.V0)


def _regex_pattern(term: RegexTerm) -> regex.Pattern[str]:
    return term.compiled()


def snippet(action: str, observation: str, markers: list[_Marker]) -> Snippet | None:
    """The first match of any marker in the action, else the observation, with every
    marker's matches in that window marked. None when nothing matches; the start of the
    action when the query has nothing to mark in a step (filters only)."""
    texts = {"action": action or "", "observation": observation or ""}
    found = _first_window(texts, markers)
    if found is None and not markers and (action or observation):
        name = "action" if action else "observation"
        text = texts[name][:INDEXED_CHARS]
        return Snippet(
            name, ((_plain(text[:SNIPPET_AFTER]), False),), False, len(text) > SNIPPET_AFTER
        )
    return found


def _hit_snippet(step, markers: list[_Marker], annotations, query: Query) -> Snippet | None:
    """Where the hit matched: the step's own text, else an annotation the viewer sees; the
    start of the action when the query marks nothing (filters only)."""
    found = _first_window({"action": step.action, "observation": step.observation}, markers)
    annotation_markers = _annotation_markers(query)
    if found is None and annotation_markers:
        found = annotation_snippet(annotations, annotation_markers)
    if found is None and not markers and not annotation_markers:
        found = snippet(step.action, step.observation, [])
    return found


def annotation_snippet(
    annotations: Iterable[tuple[str, dict[str, str]]], markers: list[_Marker]
) -> Snippet | None:
    """The first match in the annotations (author, {field: text}) the viewer sees."""
    for author, texts in annotations:
        found = _first_window(texts, markers)
        if found is not None:
            return replace(found, author=author)
    return None


def _first_window(texts: dict[str, str], markers: list[_Marker]) -> Snippet | None:
    for name, whole in texts.items():
        # what the index read: the escapes glued to a coloured word are out, as in the index
        text = without_ansi(whole[:INDEXED_CHARS]) or ""
        relevant = [m for m in markers if m.field in (None, name)]
        first = min((at for m in relevant if (at := m.first(text)) is not None), default=None)
        if first is None:
            continue
        start = max(0, first - SNIPPET_BEFORE)
        end = min(len(text), first + SNIPPET_AFTER)
        spans = [span for m in relevant for span in m.spans(text, start, end)]
        return Snippet(name, _pieces(text, start, end, spans), start > 0, end < len(text))
    return None


def _annotation_texts(step_ids: list[int], viewer: Viewer) -> dict[int, list[tuple[str, dict]]]:
    """The texts of the annotations of those steps that `viewer` sees: step -> [(author,
    {"comment", "tag", "correction"})], oldest first."""
    from django.db.models.expressions import RawSQL

    from studio.models import StepAnnotation

    rows = StepAnnotation.objects.filter(step_id__in=step_ids)
    if viewer.hidden_sql:
        rows = rows.filter(
            Q(author_id=viewer.user_id)
            | ~Q(step_id__in=RawSQL(viewer.hidden_sql, viewer.hidden_params))
        )
    out: dict[int, list[tuple[str, dict]]] = {}
    for step_id, author, comment, tags, correction in rows.order_by("created_at", "id").values_list(
        "step_id", "author__username", "comment", "tags", "corrected_observation"
    ):
        tag_text = " ".join(str(t) for t in tags) if isinstance(tags, list) else str(tags or "")
        out.setdefault(step_id, []).append(
            (author or "", {"comment": comment, "tag": tag_text, "correction": correction})
        )
    return out


# control characters (a tab and a line break stay): a snippet is plain text, and a recorded
# terminal's escapes (`without_ansi`, the one definition) or controls would show as boxes
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def _plain(text: str) -> str:
    return _CONTROL.sub("", without_ansi(text) or "")


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
            pieces.append((_plain(text[pos:a]), False))
        pieces.append((_plain(text[a:b]), True))
        pos = b
    if pos < end:
        pieces.append((_plain(text[pos:end]), False))
    return tuple(pieces)
