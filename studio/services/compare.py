"""The step-aligned comparison of branches, in windows that stay small whatever the branches.

Only the steps where the selected branches differ are rows: a run of steps whose action and
observation are the same in every branch is one `CompareRun` ("N identical steps (k–m)"),
which opens window by window. A step that no selected branch has is no row at all; one that
some lack is a row whose cells for them are empty. The page holds the first window; each window says where the
next one starts, and the page loads it when it scrolls into view.

Telling identical steps apart costs what the database reads, so it reads as little as it
can: a step inherited by every branch (one Step row) is identical without reading it; steps
whose texts differ in length differ without reading them (lengths come from the row headers:
`OctetLength`); only steps of equal lengths have their texts read and compared.

A window's work is bounded by what it handles, not by the clock (the same request gives the
same window on a busy server and an idle one; see `Budget`): rows, bytes of texts read to
tell identical steps apart, characters of texts diffed for its rows (each diff is bounded
too, see `studio.services.diffs`); the first row is always built, so every window moves on.
The page's own window has smaller budgets (FIRST_WINDOW), so that the page comes at once:
the windows after it go on where it stopped. Cells carry whole texts; the presenters show
excerpts of long ones (CELL_CHARS) and "Show all" asks for one cell in full
(`compare_row`). The find bar goes to a step that is not in the page by asking for its row in
place of the folded run, loader or gap that holds it (`jump_window`): the steps it jumps over
stay a folded run, or a gap (`CompareGap`) compared when asked.

Nothing here builds HTML: `studio.presenters.diff` and the compare template render it."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from django.db.models import Func, IntegerField, Max

from studio.models import Branch, Step, Trajectory
from studio.services.branches import owner_at, shared_prefix_length
from studio.services.diffs import (
    DiffPieces,
    MeaningDiff,
    line_pieces,
    meaning_diff,
    meaning_similarity,
    word_pieces,
)


@dataclass(frozen=True)
class Budget:
    """What one window may do: rows, bytes of step texts read to tell identical steps apart
    (100 KB reads in about 0.2 ms), characters of texts diffed for its rows (a pair of
    100 KB observations diffs in a few ms)."""

    rows: int = 10
    read_bytes: int = 150_000_000
    diff_chars: int = 12_000_000


WINDOW = Budget()
# The page's own window: about a tenth of a second of work on 100 KB observations.
FIRST_WINDOW = Budget(read_bytes=20_000_000, diff_chars=3_000_000)
ROWS_PER_WINDOW = WINDOW.rows
# Step indexes whose lengths are read in one query while scanning.
SCAN_CHUNK = 25
# A cell shows about this many characters of each text (or diff); more is behind "Show all".
CELL_CHARS = 2000
# ... and at most this many JSON changes.
CELL_CHANGES = 12


class OctetLength(Func):
    """The length of a text in bytes. On PostgreSQL it comes from the value's header, where
    LENGTH() would decompress a 100 KB observation to count its characters."""

    function = "OCTET_LENGTH"
    output_field = IntegerField()

    def as_sqlite(self, compiler, connection, **extra_context):
        return self.as_sql(
            compiler, connection, template="LENGTH(CAST(%(expressions)s AS BLOB))", **extra_context
        )


@dataclass
class CompareCell:
    branch: Branch
    step: Step | None
    # The diff against the reference step: a MeaningDiff (the default: JSON structure,
    # normalised text) or raw pieces (None: nothing to diff; no action diff when the actions
    # mean the same). `studio.presenters.diff` renders them.
    action_diff: MeaningDiff | DiffPieces | None = None
    observation_diff: MeaningDiff | DiffPieces | None = None
    reference: str = ""  # "recorded", a branch name, or "" (this cell is the reference)
    same: bool = False  # action and observation mean what the reference's do
    ratio: float | None = None  # similarity of the observations, formatting ignored
    # A text of this step or of its reference is longer than CELL_CHARS (or the diff lists
    # more than CELL_CHANGES changes): the cell shows an excerpt.
    truncated: bool = False
    diffed: int = 0  # characters of the texts diffed for this cell (the window's budget)

    @property
    def characters(self) -> int:
        """The length of the step's action and observation ("Show all" loads them)."""
        return len(self.step.action) + len(self.step.observation) if self.step else 0


@dataclass
class CompareRow:
    index: int
    cells: list[CompareCell]
    has_recorded: bool = False
    kind: str = "row"


@dataclass
class CompareRun:
    """Steps start..end (inclusive): the same action and observation in every branch."""

    start: int
    end: int
    kind: str = "run"

    @property
    def count(self) -> int:
        return self.end - self.start + 1


@dataclass
class CompareGap:
    """Steps start..end not compared yet: the find bar went past them to a later step
    (`jump_window`); they are compared when asked (`scan_window` up to `end`). `open_run`: a
    run of identical steps began there and goes on at `start`."""

    start: int
    end: int
    open_run: int | None = None
    kind: str = "gap"


@dataclass
class CompareWindow:
    items: list[CompareRow | CompareRun | CompareGap] = field(default_factory=list)
    next_start: int | None = None  # the next window starts here (None: nothing follows)
    # A run of identical steps that goes on past this window began here: the next window
    # continues it (its row then says the whole run).
    open_run: int | None = None
    # The window is part of an opened run, which ends here (its next windows stop there).
    stop: int | None = None
    # The window compares the steps of a gap, which ends here: what it leaves is a gap too.
    until: int | None = None


@dataclass
class Comparison:
    branches: list[Branch]
    recorded: Branch
    diff: str = "meaning"
    shared_until: int = 0  # steps 0..shared_until-1 are the same Step rows in every branch
    last: int = -1  # the highest step index in any selected branch
    start: int = 0  # where the first window starts
    window: CompareWindow = field(default_factory=CompareWindow)
    lineages: list[list[list[int]]] = field(default_factory=list)

    @property
    def step_branch_ids(self) -> list[int]:
        """Every branch whose steps the selected ones show (their lineages), and the root."""
        ids = {self.recorded.pk}
        for lineage in self.lineages:
            ids.update(branch_id for branch_id, _ in lineage)
        return sorted(ids)


def start_comparison(trajectory: Trajectory, branches: list[Branch], *, diff: str) -> Comparison:
    """What every window of this comparison needs: lineages, the shared prefix, the last
    step. A few queries, whatever the branches' lengths."""
    recorded = Branch.objects.get(trajectory=trajectory, parent__isnull=True)
    lineages = [b.lineage or b.compute_lineage() for b in branches]
    shared = shared_prefix_length(lineages)
    ends = [b.all_steps().aggregate(last=Max("index"))["last"] for b in branches]
    last = max((e for e in ends if e is not None), default=-1)
    if shared > last:
        shared = 0  # identical branches: show them rather than nothing
    return Comparison(
        branches=branches,
        recorded=recorded,
        diff=diff,
        shared_until=shared,
        last=last,
        start=shared,
        lineages=lineages,
    )


def build_comparison(
    trajectory: Trajectory,
    branches: list[Branch],
    *,
    diff: str = "meaning",
    start: int | None = None,
) -> Comparison:
    """The comparison with its first window: from `start` (default: the first step that is
    not shared by all), the rows where the branches differ and the runs between them."""
    comparison = start_comparison(trajectory, branches, diff=diff)
    if start is not None:
        comparison.start = min(max(comparison.shared_until, start), max(comparison.last, 0))
    comparison.window = scan_window(comparison, comparison.start, budget=FIRST_WINDOW)
    return comparison


# ---- which steps differ ---------------------------------------------------------------------

# (step pk, action bytes, observation bytes) of each (owner branch id, index)
_Meta = dict[tuple[int, int], tuple[int, int, int]]


def _step_meta(comparison: Comparison, lo: int, hi: int) -> _Meta:
    rows = (
        Step.objects.filter(branch_id__in=comparison.step_branch_ids, index__gte=lo, index__lte=hi)
        .annotate(action_bytes=OctetLength("action"), observation_bytes=OctetLength("observation"))
        .values_list("pk", "branch_id", "index", "action_bytes", "observation_bytes")
    )
    return {(branch_id, index): (pk, a, o) for pk, branch_id, index, a, o in rows}


def _column_steps(comparison: Comparison, meta: _Meta, index: int) -> list[int | None]:
    """The pk of the step each selected branch shows at `index` (None: it has none)."""
    out: list[int | None] = []
    for lineage in comparison.lineages:
        found = meta.get((owner_at(lineage, index), index))
        out.append(found[0] if found else None)
    return out


def _identical_indexes(comparison: Comparison, lo: int, hi: int) -> tuple[set[int], set[int], int]:
    """The indexes lo..hi where every selected branch shows the same action and observation,
    those where none has a step (no row at all), and how many bytes of step texts were read
    to find them."""
    meta = _step_meta(comparison, lo, hi)
    by_pk = {pk: (a, o) for pk, a, o in meta.values()}
    identical: set[int] = set()
    empty: set[int] = set()
    to_read: dict[int, list[int]] = {}
    for index in range(lo, hi + 1):
        pks = _column_steps(comparison, meta, index)
        distinct = set(pks)
        if distinct == {None}:
            empty.add(index)
            continue
        if None in distinct:
            continue  # a branch without this step differs from one with it
        if len(distinct) == 1:
            identical.add(index)  # one Step row, inherited by every branch
        elif len({by_pk[pk] for pk in distinct if pk is not None}) == 1:
            to_read[index] = [pk for pk in distinct if pk is not None]
    if not to_read:
        return identical, empty, 0
    texts = {
        pk: (action, observation)
        for pk, action, observation in Step.objects.filter(
            pk__in=[pk for pks in to_read.values() for pk in pks]
        ).values_list("pk", "action", "observation")
    }
    for index, read in to_read.items():
        first = texts[read[0]]
        if all(texts[pk] == first for pk in read[1:]):  # memcmp, no hashing of 100 KB texts
            identical.add(index)
    return identical, empty, sum(sum(by_pk[pk]) for read in to_read.values() for pk in read)


def scan_window(
    comparison: Comparison,
    start: int,
    *,
    open_run: int | None = None,
    budget: Budget = WINDOW,
    until: int | None = None,
) -> CompareWindow:
    """From `start`: the rows where the branches differ and the runs of identical steps
    between them, until the budget is spent or the last step (`until`: or that step; what
    the budget leaves of a gap is a gap). `open_run`: a run of identical steps began there
    and went on to `start`."""
    window = CompareWindow(until=until)
    last = comparison.last if until is None else min(until, comparison.last)
    layout: list[int | CompareRun] = []  # an index: the row of that step, built below
    run = open_run
    lo, read, found = start, 0, 0
    while lo <= last and found < budget.rows and read < budget.read_bytes:
        hi = min(last, lo + SCAN_CHUNK - 1)
        identical, empty, cost = _identical_indexes(comparison, lo, hi)
        read += cost
        for index in range(lo, hi + 1):
            if index in empty:
                # no selected branch has this step (a gap): no row, and a run of identical
                # steps ends before it (its count and range stay true)
                if run is not None:
                    layout.append(CompareRun(run, index - 1))
                    run = None
                continue
            if index in identical:
                if run is None:
                    run = index
                continue
            if run is not None:
                layout.append(CompareRun(run, index - 1))
                run = None
            layout.append(index)
            found += 1
            if found == budget.rows:
                hi = index
                break
        lo = hi + 1
    if lo > last:
        if run is not None:
            layout.append(CompareRun(run, last))
    else:
        window.next_start, window.open_run = lo, run
    _fill(window, comparison, layout, budget)
    if until is not None and window.next_start is not None:
        # the rest of the gap stays one, compared when asked (no loader that fires as it
        # shows: it sits just above the step jumped to, in view)
        window.items.append(CompareGap(window.next_start, last, window.open_run))
        window.next_start = window.open_run = None
    return window


def jump_window(
    comparison: Comparison,
    start: int,
    index: int,
    *,
    open_run: int | None = None,
    run_end: int | None = None,
    until: int | None = None,
) -> CompareWindow:
    """What the find bar puts in place of the row that holds step `index` (`start` <=
    `index`) when that step is not in the page: the row of `index`, whether or not it
    differs, with the steps around it as they were.

    `run_end`: steps start..run_end are a run of identical steps (folded, or being opened):
    the run before `index` and the one after stay folded. Otherwise steps from `start` on
    are not compared yet (a loader, or a gap): those before `index` become a gap (with
    `open_run`, a run of identical steps that began before `start`), and the steps after it
    are compared as a window from there (up to `until`: the end of the gap it was in)."""
    window = CompareWindow()
    row = build_rows(comparison, [index])
    if run_end is not None:
        run_end = min(run_end, comparison.last)
        if start < index:
            window.items.append(CompareRun(start, index - 1))
        window.items += row
        if index < run_end:
            window.items.append(CompareRun(index + 1, run_end))
        window.stop = run_end  # no end-of-comparison row: what follows the run is in the page
        return window
    if start < index:
        window.items.append(CompareGap(start, index - 1, open_run))
    elif open_run is not None and open_run < index:
        window.items.append(CompareRun(open_run, index - 1))
    window.items += row
    last = comparison.last if until is None else min(until, comparison.last)
    if index >= last:
        window.until = until
        return window
    after = scan_window(comparison, index + 1, until=until)
    window.items += after.items
    window.next_start, window.open_run, window.until = after.next_start, after.open_run, until
    return window


def run_window(
    comparison: Comparison, start: int, stop: int, *, budget: Budget = WINDOW
) -> CompareWindow:
    """The rows start..stop of an opened run of identical steps, a window at a time."""
    stop = min(stop, comparison.last)
    indexes = list(range(start, min(stop, start + budget.rows - 1) + 1))
    window = CompareWindow(stop=stop)
    if indexes and indexes[-1] < stop:
        window.next_start = indexes[-1] + 1
    layout: list[int | CompareRun] = list(indexes)
    _fill(window, comparison, layout, budget)
    return window


def _fill(
    window: CompareWindow, comparison: Comparison, layout: list[int | CompareRun], budget: Budget
) -> None:
    """The window's items from its layout, each index built into its row. Rows left unbuilt
    (over the diff budget) and what follows them go to the next window."""
    indexes = [i for i in layout if isinstance(i, int)]
    built = {
        row.index: row for row in build_rows(comparison, indexes, diff_chars=budget.diff_chars)
    }
    # the rows built are the first steps any branch has; an index before the last of them
    # (or any, when none was built) that has no row is a step no branch has: skipped
    last_built = max(built, default=None)
    for item in layout:
        if isinstance(item, CompareRun):
            window.items.append(item)
        elif item in built:
            window.items.append(built[item])
        elif last_built is None or item < last_built:
            continue
        else:
            window.next_start, window.open_run = item, None
            break


# ---- rows and cells -------------------------------------------------------------------------


def build_rows(
    comparison: Comparison, indexes: Iterable[int], *, diff_chars: int = WINDOW.diff_chars
) -> list[CompareRow]:
    """The rows at these indexes, in order, with every cell diffed against its reference:
    the first row always, the next ones while the texts diffed so far are under
    `diff_chars`."""
    indexes = list(indexes)
    if not indexes:
        return []
    meta = _step_meta(comparison, min(indexes), max(indexes))
    recorded_id = comparison.recorded.pk
    columns = {index: _column_steps(comparison, meta, index) for index in indexes}
    recorded = {index: meta.get((recorded_id, index), (None,))[0] for index in indexes}
    pks = {pk for pks in columns.values() for pk in pks if pk} | {
        pk for pk in recorded.values() if pk
    }
    steps = {s.pk: s for s in Step.objects.filter(pk__in=pks).defer("raw_prompt", "raw_output")}
    rows: list[CompareRow] = []
    diffed = 0
    for index in indexes:
        if rows and diffed >= diff_chars:
            break
        if not any(columns[index]):
            continue  # no selected branch has this step: no row
        recorded_pk = recorded[index]
        rows.append(
            _row(
                comparison,
                index,
                [steps[pk] if pk else None for pk in columns[index]],
                recorded=steps[recorded_pk] if recorded_pk else None,
            )
        )
        diffed += sum(cell.diffed for cell in rows[-1].cells)
    return rows


def _row(
    comparison: Comparison, index: int, columns: list[Step | None], *, recorded: Step | None
) -> CompareRow:
    ref_step, ref_label = recorded, "recorded"
    if ref_step is None:
        # The first selected branch that has this step (a shorter first column must not
        # leave the longer ones undiffed past its end).
        for branch, step in zip(comparison.branches, columns, strict=True):
            if step is not None:
                ref_step, ref_label = step, branch.name
                break
    cells = [
        compare_cell(branch, step, ref_step, ref_label, diff=comparison.diff)
        for branch, step in zip(comparison.branches, columns, strict=True)
    ]
    return CompareRow(index=index, cells=cells, has_recorded=recorded is not None)


def compare_row(comparison: Comparison, index: int) -> CompareRow | None:
    """One row (for "Show all" on one of its cells), or None past the last step or where no
    branch has this step."""
    if not 0 <= index <= comparison.last:
        return None
    rows = build_rows(comparison, [index])
    return rows[0] if rows else None


def compare_cell(
    branch: Branch, step: Step | None, ref_step: Step | None, ref_label: str, *, diff: str
) -> CompareCell:
    cell = CompareCell(branch=branch, step=step)
    if step is None:
        return cell
    texts = [step.action, step.observation]
    if ref_step is not None and ref_step.pk != step.pk:
        texts += [ref_step.action, ref_step.observation]
        cell.diffed = sum(len(t) for t in texts)
        cell.reference = ref_label
        observation = meaning_diff(ref_step.observation, step.observation)
        action = meaning_diff(ref_step.action, step.action)
        cell.same = observation.same and action.same
        cell.ratio = (
            1.0 if observation.same else meaning_similarity(ref_step.observation, step.observation)
        )
        differ: Callable[[str, str], DiffPieces] | None = {
            "lines": line_pieces,
            "words": word_pieces,
        }.get(diff)
        cell.observation_diff = (
            observation if differ is None else differ(ref_step.observation, step.observation)
        )
        if not action.same or (differ is not None and step.action != ref_step.action):
            cell.action_diff = action if differ is None else differ(ref_step.action, step.action)
        cell.truncated = any(
            len(d.changes) > CELL_CHANGES
            for d in (cell.observation_diff, cell.action_diff)
            if isinstance(d, MeaningDiff)
        )
    cell.truncated = cell.truncated or max(len(t) for t in texts) > CELL_CHARS
    return cell
