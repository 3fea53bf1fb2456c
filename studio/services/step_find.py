"""Find in steps (the find bar): every occurrence of a text, case-insensitively, in the steps
a page shows, found on the server since a page holds only a few windows of them.

Text is searched as the pages show it: without a terminal's escape sequences (colours, titles),
so "failed result" is found where the page shows it, colours between the words.

Two pages have the bar: the trajectory page (one branch, its inherited steps too: each
step's thinking, action and observation) and the compare view (every compared branch from
the first step it shows: each cell's action and observation, a step shown in several columns
once per column). Only the texts those pages show are searched, never annotations or judge
scores (which blind review hides), so a member finds nothing the page would not show them.

The hits come in the pages' reading order (step, then column, then field, then place in the
field), a window of at most `limit` of them at a time (`FindWindow`): from a place in that
order (a step, and which of its hits) on, or the `limit` hits just before it, or the last
ones; with how many hits come before the window and how many there are in all (counted up to
`COUNT_LIMIT` past the window), so that a page says "hit 1,234 of 5,678" and reaches every
hit, window by window. Where a page shows a hit (an excerpt, a preview, a diff) is the
presentation's business: each hit carries where its match starts and ends in the field and
the field's length. Reads only."""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from itertools import groupby

from django.db.models import Q, QuerySet

from studio.models import Branch, Step
from studio.search.text import without_ansi
from studio.services.branches import owner_at
from studio.services.compare import Comparison

HIT_LIMIT = 1000  # hits in a window
COUNT_LIMIT = 10_000  # hits counted past a window ("of 11,000+" beyond)
QUERY_CHARS = 200
# The fields each page shows of a step, in the order it shows them.
BRANCH_FIELDS = ("thinking", "action", "observation")
COMPARE_FIELDS = ("action", "observation")
# Steps read from the database at a time.
CHUNK = 50


@dataclass(frozen=True)
class StepHit:
    step_id: int
    index: int
    field: str
    occurrence: int  # which match of the query in this field (0: the first)
    start: int  # where the match starts and ends in the field's text
    end: int
    length: int  # the field's length
    column: int = 0  # the compare view: which compared branch shows the step (0: the first)
    nth: int = 0  # which hit of its step (its place among the step's hits, all fields)

    @property
    def place(self) -> tuple[int, int]:
        return (self.index, self.nth)


@dataclass(frozen=True)
class FindWindow:
    """A window of the hits in reading order, and where it lies among them all."""

    hits: list[StepHit]
    before: int  # hits before the window's first
    total: int  # hits counted: all of them, or (more) those up to COUNT_LIMIT past the window
    more: bool = False  # more hits than `total` (not counted)

    @property
    def after(self) -> bool:
        """Hits follow the window."""
        return self.more or self.before + len(self.hits) < self.total


def window(
    hits: Iterable[StepHit],
    *,
    at: tuple[int, int] | None = (0, 0),
    back: bool = False,
    limit: int = HIT_LIMIT,
    count_limit: int | None = None,
) -> FindWindow:
    """The window of `hits` (in reading order) from place `at` (step index, nth hit of the
    step) on; with `back`, the `limit` hits just before `at` (None: the last ones). The hits
    are numbered in their step here (`nth`)."""
    count_limit = COUNT_LIMIT if count_limit is None else count_limit
    before = after = 0
    shown: deque[StepHit] = deque()
    for hit in _numbered(hits):
        if back:
            if at is None or hit.place < at:
                if len(shown) == limit:
                    shown.popleft()
                    before += 1
                shown.append(hit)
                continue
        elif hit.place < at:  # type: ignore[operator]  # at is None only with back
            before += 1
            continue
        elif len(shown) < limit:
            shown.append(hit)
            continue
        after += 1
        if after > count_limit:
            return FindWindow(list(shown), before, before + len(shown) + count_limit, True)
    return FindWindow(list(shown), before, before + len(shown) + after)


def _numbered(hits: Iterable[StepHit]) -> Iterator[StepHit]:
    step, nth = None, 0
    for hit in hits:
        if hit.index != step:
            step, nth = hit.index, 0
        yield replace(hit, nth=nth)
        nth += 1


def _pattern(query: str) -> re.Pattern[str]:
    return re.compile(re.escape(query), re.IGNORECASE)


def _matching(query: str, fields: Sequence[str]) -> Q:
    """Steps that may hold the query in one of `fields`: the database's case-insensitive
    match, and the steps with a terminal escape (the pages show their text without the
    escapes, which may sit inside what the page shows as the query). The matches themselves
    are found here, in order, in the text as shown."""
    q = Q()
    for field in fields:
        q |= Q(**{f"{field}__icontains": query}) | Q(**{f"{field}__contains": "\x1b"})
    return q


def _shown(step: Step, field: str) -> str:
    """A field's text as the pages show it: without a terminal's escape sequences."""
    return without_ansi(getattr(step, field) or "") or ""


def _field_hits(
    step: Step, pattern: re.Pattern[str], fields: Sequence[str], column: int = 0
) -> Iterator[StepHit]:
    for field in fields:
        text = _shown(step, field)
        for occurrence, match in enumerate(pattern.finditer(text)):
            yield StepHit(
                step_id=step.pk,
                index=step.index,
                field=field,
                occurrence=occurrence,
                start=match.start(),
                end=match.end(),
                length=len(text),
                column=column,
            )


def _branch_hits(branch: Branch, query: str) -> Iterator[StepHit]:
    pattern = _pattern(query)
    steps = (
        branch.all_steps()
        .filter(_matching(query, BRANCH_FIELDS))
        .only("pk", "index", *BRANCH_FIELDS)
        .iterator(chunk_size=CHUNK)
    )
    for step in steps:
        yield from _field_hits(step, pattern, BRANCH_FIELDS)


def find_in_branch(
    branch: Branch,
    query: str,
    *,
    at: tuple[int, int] | None = (0, 0),
    back: bool = False,
    limit: int = HIT_LIMIT,
) -> FindWindow:
    """A window (`window`) of the hits of `query` in every step the trajectory page shows
    of `branch` (its inherited steps too), ordered by step."""
    return window(_branch_hits(branch, query), at=at, back=back, limit=limit)


def _shown_steps(comparison: Comparison) -> Q:
    """The Step rows the compared branches show (each one's lineage: the steps it inherits
    up to where its own begin, then its own)."""
    q = Q(pk__in=[])
    for lineage in comparison.lineages:
        for i, (branch_id, start) in enumerate(lineage):
            part = Q(branch_id=branch_id, index__gte=start)
            if i + 1 < len(lineage):
                part &= Q(index__lt=lineage[i + 1][1])
            q |= part
    return q


def _comparison_steps(comparison: Comparison, query: str, *, start: int) -> QuerySet[Step]:
    return Step.objects.filter(
        _shown_steps(comparison), _matching(query, COMPARE_FIELDS), index__gte=start
    )


def find_in_comparison(
    comparison: Comparison,
    query: str,
    *,
    start: int,
    at: tuple[int, int] | None = (0, 0),
    back: bool = False,
    limit: int = HIT_LIMIT,
) -> FindWindow:
    """A window (`window`) of the hits of `query` in every cell the compare view shows from
    step `start` on: each compared branch's action and observation at each step, row by row
    and column by column (a step several branches show, inherited from a common ancestor or
    in a run of identical steps, is a hit in each of their columns)."""
    pattern = _pattern(query)
    steps = (
        _comparison_steps(comparison, query, start=start)
        .only("pk", "index", "branch_id", *COMPARE_FIELDS)
        .order_by("index", "branch_id")
        .iterator(chunk_size=CHUNK)
    )

    def hits() -> Iterator[StepHit]:
        for index, at_index in groupby(steps, key=lambda step: step.index):
            cells = sorted(
                (
                    (column, step)
                    for step in at_index
                    for column, lineage in enumerate(comparison.lineages)
                    if owner_at(lineage, index) == step.branch_id
                ),
                key=lambda cell: cell[0],
            )
            for column, step in cells:
                yield from _field_hits(step, pattern, COMPARE_FIELDS, column)

    return window(hits(), at=at, back=back, limit=limit)


def earlier_in_comparison(comparison: Comparison, query: str, *, start: int) -> int:
    """How many step indexes before `start` (which the compare view does not show: the steps
    every branch shares, or those before where the page was asked to start) have the query
    in a compared branch's action or observation."""
    if start <= 0:
        return 0
    pattern = _pattern(query)
    steps = (
        Step.objects.filter(
            _shown_steps(comparison), _matching(query, COMPARE_FIELDS), index__lt=start
        )
        .only("pk", "index", *COMPARE_FIELDS)
        .iterator(chunk_size=CHUNK)
    )
    return len(
        {
            step.index
            for step in steps
            if any(pattern.search(_shown(step, field)) for field in COMPARE_FIELDS)
        }
    )
