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
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
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


@dataclass(frozen=True)
class ShownStep:
    """What a page shows at one step index, in its reading order: (step id, column, field,
    the field's text as shown) for each text."""

    index: int
    texts: list[tuple[int, int, str, str]]

    def count(self, pattern: re.Pattern[str]) -> int:
        # The hits of a step outside the window are only counted: no hit is built for them
        # (building them was most of the time of a far window; scripts/bench_find.py).
        return sum(len(pattern.findall(text)) for *_where, text in self.texts)

    def hits(self, pattern: re.Pattern[str]) -> list[StepHit]:
        found: list[StepHit] = []
        for step_id, column, field, text in self.texts:
            for occurrence, match in enumerate(pattern.finditer(text)):
                found.append(
                    StepHit(
                        step_id=step_id,
                        index=self.index,
                        field=field,
                        occurrence=occurrence,
                        start=match.start(),
                        end=match.end(),
                        length=len(text),
                        column=column,
                        nth=len(found),
                    )
                )
        return found


# The shown steps that may hold the query, in order of index, from the first index to the
# last (None: to the end), both included.
ShownSteps = Callable[[int, int | None], Iterable[ShownStep]]


def window(
    steps: ShownSteps,
    pattern: re.Pattern[str],
    *,
    at: tuple[int, int] | None = (0, 0),
    back: bool = False,
    limit: int = HIT_LIMIT,
    count_limit: int | None = None,
) -> FindWindow:
    """The window of the hits of `pattern` in `steps` (in reading order) from place `at`
    (step index, nth hit of the step) on; with `back`, the `limit` hits just before `at`
    (None: the last ones)."""
    if limit < 1:
        raise ValueError(f"a window holds at least one hit (got limit={limit})")
    count_limit = COUNT_LIMIT if count_limit is None else count_limit
    if back:
        return _window_before(steps, pattern, at, limit, count_limit)
    assert at is not None  # only a window back may end at the last hit
    before = after = 0
    shown: list[StepHit] = []
    for step in steps(0, None):
        if step.index < at[0]:
            before += step.count(pattern)
        elif len(shown) == limit:
            after += step.count(pattern)
        else:
            for hit in step.hits(pattern):
                if hit.place < at:
                    before += 1
                elif len(shown) < limit:
                    shown.append(hit)
                else:
                    after += 1
        if after > count_limit:
            return FindWindow(shown, before, before + len(shown) + count_limit, True)
    return FindWindow(shown, before, before + len(shown) + after)


def _window_before(
    steps: ShownSteps,
    pattern: re.Pattern[str],
    at: tuple[int, int] | None,
    limit: int,
    count_limit: int,
) -> FindWindow:
    """The `limit` hits just before `at` (None: the last ones), the hits after it counted as
    a window on counts them. Every step is counted; then the few steps the window's hits are
    in are read again and their hits built (holding the texts of the steps of a window back
    meanwhile could be gigabytes)."""
    counts: list[tuple[int, int]] = []  # (index, hits before `at`) of the steps with hits
    after = 0
    for step in steps(0, None):
        if at is not None and step.index > at[0]:
            after += step.count(pattern)
        elif at is not None and step.index == at[0]:
            at_step = step.hits(pattern)
            before_at = sum(1 for hit in at_step if hit.place < at)
            after += len(at_step) - before_at
            if before_at:
                counts.append((step.index, before_at))
        elif count := step.count(pattern):
            counts.append((step.index, count))
        if after > count_limit:
            break
    more = after > count_limit
    after = min(after, count_limit)
    kept, first = 0, len(counts)
    while first > 0 and kept < limit:
        first -= 1
        kept += counts[first][1]
    if first == len(counts):
        return FindWindow([], 0, after, more)
    # Read again up to the last step counted, not on: a step written meanwhile (a live
    # episode's) is neither in the window nor in the count. What the second read finds is what
    # the window shows and counts.
    last = counts[-1][0] if at is None else at[0]
    again = [
        hit
        for step in steps(counts[first][0], last)
        for hit in step.hits(pattern)
        if at is None or hit.place < at
    ]
    shown = again[-limit:]
    before = sum(count for _index, count in counts[:first]) + len(again) - len(shown)
    return FindWindow(shown, before, before + len(shown) + after, more)


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


def _shown(text: str | None) -> str:
    """A field's text as the pages show it: without a terminal's escape sequences."""
    return without_ansi(text or "") or ""


def _in_range(steps: QuerySet[Step], first: int, last: int | None) -> QuerySet[Step]:
    steps = steps.filter(index__gte=first)
    return steps if last is None else steps.filter(index__lte=last)


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
    matching = branch.all_steps().filter(_matching(query, BRANCH_FIELDS))

    def steps(first: int, last: int | None) -> Iterator[ShownStep]:
        rows = (
            _in_range(matching, first, last)
            .values_list("pk", "index", *BRANCH_FIELDS)
            .iterator(chunk_size=CHUNK)
        )
        for pk, index, *texts in rows:
            yield ShownStep(
                index,
                [
                    (pk, 0, field, _shown(text))
                    for field, text in zip(BRANCH_FIELDS, texts, strict=True)
                ],
            )

    return window(steps, _pattern(query), at=at, back=back, limit=limit)


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
    matching = _comparison_steps(comparison, query, start=start)

    def steps(first: int, last: int | None) -> Iterator[ShownStep]:
        rows = (
            _in_range(matching, first, last)
            .values_list("pk", "index", "branch_id", *COMPARE_FIELDS)
            .order_by("index", "branch_id")
            .iterator(chunk_size=CHUNK)
        )
        for index, at_index in groupby(rows, key=lambda row: row[1]):
            cells = sorted(
                (
                    (column, row)
                    for row in at_index
                    for column, lineage in enumerate(comparison.lineages)
                    if owner_at(lineage, index) == row[2]
                ),
                key=lambda cell: cell[0],
            )
            yield ShownStep(
                index,
                [
                    (row[0], column, field, _shown(text))
                    for column, row in cells
                    for field, text in zip(COMPARE_FIELDS, row[3:], strict=True)
                ],
            )

    return window(steps, _pattern(query), at=at, back=back, limit=limit)


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
            if any(pattern.search(_shown(getattr(step, field))) for field in COMPARE_FIELDS)
        }
    )
