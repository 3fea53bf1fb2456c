"""Branch housekeeping (rename, star, delete with descendants), the branch tree figure and
the step-aligned comparison of branches with word/line diffs."""

from __future__ import annotations

import difflib
import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction
from django.db.models import Count, Max
from django.urls import reverse
from django.utils.html import escape, format_html
from django.utils.safestring import SafeString, mark_safe

from studio.models import Branch, Step, Trajectory
from studio.models.trajectories import BranchStatus

ACTIVE_STATUSES = (BranchStatus.QUEUED, BranchStatus.RUNNING)


class BranchError(Exception):
    """A branch operation that cannot be done; the message says why."""


# ---- rename / star / delete -------------------------------------------------------------


def do_rename_branch(branch: Branch, name: str) -> Branch:
    branch.name = name
    branch.save(update_fields=["name"])
    return branch


def do_toggle_star(branch: Branch) -> Branch:
    branch.starred = not branch.starred
    branch.save(update_fields=["starred"])
    return branch


def descendant_ids(branch: Branch) -> list[int]:
    """Ids of the branch's descendants (not the branch itself), in one query."""
    rows = Branch.objects.filter(trajectory_id=branch.trajectory_id).values_list("pk", "parent_id")
    children: dict[int | None, list[int]] = defaultdict(list)
    for pk, parent_id in rows:
        children[parent_id].append(pk)
    found: list[int] = []
    stack = list(children.get(branch.pk, []))
    while stack:
        pk = stack.pop()
        found.append(pk)
        stack.extend(children.get(pk, []))
    return found


def check_delete_branch(branch: Branch) -> list[Branch]:
    """The branches a delete would remove (the branch first), or BranchError saying why not."""
    if branch.is_root:
        raise BranchError("The recorded branch is the trajectory itself and cannot be deleted.")
    ids = [branch.pk, *descendant_ids(branch)]
    doomed = list(Branch.objects.filter(pk__in=ids).order_by("pk"))
    active = [b for b in doomed if b.status in ACTIVE_STATUSES]
    if active:
        names = ", ".join(b.name for b in active[:5])
        raise BranchError(
            f"{len(active)} of these branches are still being simulated ({names}); cancel "
            "their jobs first."
        )
    doomed.sort(key=lambda b: (b.pk != branch.pk, b.pk))
    return doomed


@transaction.atomic
def do_delete_branch(branch: Branch) -> int:
    """Delete the branch and all its descendants (their steps go with them). Returns how many
    branches were removed."""
    locked = Branch.objects.select_for_update().get(pk=branch.pk)
    doomed = check_delete_branch(locked)
    # Children cascade through Branch.parent; delete explicitly so the count is exact.
    Branch.objects.filter(pk__in=[b.pk for b in doomed]).delete()
    return len(doomed)


# ---- tree layout and figure -------------------------------------------------------------


@dataclass
class TreeNode:
    pk: int
    parent_id: int | None
    fork_index: int
    own_steps: int = 0
    name: str = ""
    origin: str = ""
    status: str = ""
    starred: bool = False
    sample_index: int = 0
    job_id: int | None = None
    # filled by layout_tree
    x: float = 0.0
    y: int = 0
    depth: int = 0
    # (fork step, number of children) of this branch's forks with 2+ children (views fill it)
    fork_groups: list[tuple[int, int]] = field(default_factory=list)

    @property
    def total_steps(self) -> int:
        return self.fork_index + self.own_steps

    @property
    def last_index(self) -> float:
        """x of the branch's last own step (its segment ends here)."""
        return self.fork_index + max(self.own_steps - 1, 0)


def layout_tree(nodes: Sequence[TreeNode]) -> list[TreeNode]:
    """Place each branch on its own row, in tidy depth-first order: a branch, then its
    subtrees one after another (children by fork step, then sample, then id), so every
    subtree occupies a contiguous band of rows right below its root. x is the fork step.

    Returns the nodes in row order (y = 0, 1, 2, ...). Orphans (parent not in `nodes`) are
    treated as roots, so a partial tree still lays out."""
    by_id = {n.pk: n for n in nodes}
    children: dict[int | None, list[TreeNode]] = defaultdict(list)
    for n in nodes:
        parent = n.parent_id if n.parent_id in by_id else None
        children[parent].append(n)
    for kids in children.values():
        kids.sort(key=lambda n: (n.fork_index, n.sample_index, n.pk))
    ordered: list[TreeNode] = []
    # Iterative DFS: trees can be deep (a chain of re-simulations) and Python's recursion
    # limit is not a design constraint.
    stack: list[tuple[TreeNode, int]] = [(n, 0) for n in reversed(children[None])]
    while stack:
        node, depth = stack.pop()
        node.y = len(ordered)
        node.depth = depth
        node.x = node.fork_index
        ordered.append(node)
        stack.extend((kid, depth + 1) for kid in reversed(children.get(node.pk, [])))
    return ordered


STATUS_COLORS: dict[str, str] = {
    BranchStatus.READY: "#3b5bdb",
    BranchStatus.SUCCEEDED: "#2b8a3e",
    BranchStatus.QUEUED: "#b7791f",
    BranchStatus.RUNNING: "#f08c00",
    BranchStatus.FAILED: "#c92a2a",
    BranchStatus.CANCELLED: "#868e96",
}
ORIGIN_SYMBOLS = {"recorded": "square", "simulated": "circle", "edited": "diamond"}
# Above this many branches, per-node labels would overlap: hover text carries them instead.
LABEL_LIMIT = 40


def tree_nodes(trajectory: Trajectory) -> list[TreeNode]:
    """All branches of the trajectory with their own step counts, in one query."""
    rows = (
        Branch.objects.filter(trajectory=trajectory)
        .annotate(n_own=Count("steps"))
        .values(
            "pk",
            "parent_id",
            "fork_index",
            "n_own",
            "name",
            "origin",
            "status",
            "starred",
            "sample_index",
            "job_id",
        )
    )
    return [
        TreeNode(
            pk=r["pk"],
            parent_id=r["parent_id"],
            fork_index=r["fork_index"],
            own_steps=r["n_own"],
            name=r["name"],
            origin=r["origin"],
            status=r["status"],
            starred=r["starred"],
            sample_index=r["sample_index"],
            job_id=r["job_id"],
        )
        for r in rows
    ]


def plotly_text(value: str) -> str:
    """Escape user text for Plotly's text/hover strings, which understand a few HTML-like
    tags (<b>, <br>, <a>) and only a few named entities: neutralise tags, keep quotes."""
    return value.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def node_label(n: TreeNode) -> str:
    star = "★ " if n.starred else ""
    fork = "root" if n.parent_id is None else f"@{n.fork_index}"
    return f"{star}{fork} · {n.origin} · {n.status} · {n.total_steps} steps"


def build_tree_figure(
    trajectory: Trajectory,
    current_id: int | None = None,
    nodes: list[TreeNode] | None = None,
    *,
    compact: bool = False,
) -> dict[str, Any]:
    """A Plotly figure (plain dict, for json_script) of the trajectory's branch tree.

    Each branch is a row: a marker at its fork step (colour = status, symbol = origin), a line
    over its own steps, a connector from the parent's row, and a label at its end. Clicking a
    marker or label opens the branch (customdata holds its URL). `compact` (a narrow side
    panel) and large trees drop the labels: hover text carries them."""
    nodes = layout_tree(nodes if nodes is not None else tree_nodes(trajectory))
    by_id = {n.pk: n for n in nodes}
    page = reverse("trajectory", args=[trajectory.pk])
    urls = [f"{page}?branch={n.pk}" for n in nodes]
    many = compact or len(nodes) > LABEL_LIMIT

    seg_x: list[float | None] = []
    seg_y: list[float | None] = []
    link_x: list[float | None] = []
    link_y: list[float | None] = []
    for n in nodes:
        seg_x += [n.fork_index, n.last_index, None]
        seg_y += [n.y, n.y, None]
        parent = by_id.get(n.parent_id) if n.parent_id else None
        if parent is not None:
            # Elbow: along the parent's row to the fork step, then down to the child's row.
            link_x += [parent.x, n.fork_index, n.fork_index, None]
            link_y += [parent.y, parent.y, n.y, None]

    hover = [
        "<br>".join(
            [
                f"<b>{plotly_text(n.name)}</b> (branch {n.pk})",
                f"fork step: {n.fork_index if n.parent_id else 'root'}",
                f"origin: {n.origin} · status: {n.status}",
                f"steps: {n.total_steps} ({n.own_steps} own)",
                "click to open",
            ]
        )
        for n in nodes
    ]
    # An en space keeps each label clear of the marker drawn at the same point.
    labels = ["\u2002" + plotly_text(node_label(n)) for n in nodes]
    current = by_id.get(current_id) if current_id else None
    data: list[dict[str, Any]] = [
        {
            "type": "scatter",
            "mode": "lines",
            "x": link_x,
            "y": link_y,
            "line": {"color": "#adb5bd", "width": 1},
            "hoverinfo": "skip",
            "showlegend": False,
            "name": "forks",
        },
        {
            "type": "scatter",
            "mode": "lines",
            "x": seg_x,
            "y": seg_y,
            "line": {"color": "#ced4da", "width": 4},
            "hoverinfo": "skip",
            "showlegend": False,
            "name": "steps",
        },
        {
            "type": "scatter",
            "mode": "markers",
            "x": [n.x for n in nodes],
            "y": [n.y for n in nodes],
            "customdata": urls,
            "ids": [str(n.pk) for n in nodes],
            "hovertext": hover,
            "hoverinfo": "text",
            "marker": {
                "size": 9 if many else 12,
                "color": [STATUS_COLORS.get(n.status, "#495057") for n in nodes],
                "symbol": [ORIGIN_SYMBOLS.get(n.origin, "circle") for n in nodes],
                "line": {"color": "#fff", "width": 1},
            },
            "showlegend": False,
            "name": "branches",
        },
    ]
    if not many:
        data.append(
            {
                "type": "scatter",
                "mode": "text",
                "x": [n.last_index for n in nodes],
                "y": [n.y for n in nodes],
                "text": labels,
                "textposition": "middle right",
                "cliponaxis": False,  # the root's label sits right of the last step
                "textfont": {"size": 11, "color": "#344054"},
                "customdata": urls,
                "hovertext": hover,
                "hoverinfo": "text",
                "showlegend": False,
                "name": "labels",
            }
        )
    if current is not None:
        data.append(
            {
                "type": "scatter",
                "mode": "markers",
                "x": [current.x],
                "y": [current.y],
                "customdata": [f"{page}?branch={current.pk}"],
                "hovertext": [f"current branch: {plotly_text(current.name)}"],
                "hoverinfo": "text",
                "marker": {
                    "size": 20,
                    "color": "rgba(0,0,0,0)",
                    "line": {"color": "#111827", "width": 3},
                },
                "showlegend": False,
                "name": "current",
            }
        )
    max_x = max((n.last_index for n in nodes), default=0)
    # ~22 px a row while labels show; denser rows for big trees (the plot div scrolls).
    row_px = 22 if len(nodes) <= LABEL_LIMIT else 14
    height = max(220, 60 + row_px * len(nodes))
    layout: dict[str, Any] = {
        "height": height,
        "margin": {
            "l": 20,
            "r": 20 if many else 320,
            "t": 50 if len(nodes) > LABEL_LIMIT else 10,
            "b": 10 if len(nodes) > LABEL_LIMIT else 40,
        },
        "xaxis": {
            "title": {"text": "step"},
            # Tall trees scroll: keep the step axis at the top where it is seen first.
            "side": "top" if len(nodes) > LABEL_LIMIT else "bottom",
            "range": [-0.7, max_x + 0.7],
            "zeroline": False,
            "dtick": 1 if max_x <= 30 else None,
        },
        "yaxis": {
            # Reversed (row 0 on top) with a fixed range: no autorange padding at 200 rows.
            "range": [len(nodes) - 0.5, -0.7],
            "showticklabels": False,
            "zeroline": False,
            "showgrid": False,
        },
        "hovermode": "closest",
        "plot_bgcolor": "#fff",
        "paper_bgcolor": "#fff",
        "dragmode": "pan",
    }
    if layout["xaxis"]["dtick"] is None:
        del layout["xaxis"]["dtick"]
    return {
        "data": data,
        "layout": layout,
        "config": {"displaylogo": False, "responsive": True, "scrollZoom": False},
        "meta": {"branches": len(nodes), "current": current.pk if current else None},
    }


# ---- comparison -------------------------------------------------------------------------

_WORD = re.compile(r"\s+|\w+|[^\w\s]", re.UNICODE)
# Word diffs of huge observations are quadratic in the worst case: above this, diff lines.
WORD_DIFF_LIMIT = 20_000


def _diff_pieces(a: list[str], b: list[str]) -> SafeString:
    out: list[str] = []
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op == "equal":
            out.append(escape("".join(b[j1:j2])))
            continue
        if op in ("delete", "replace"):
            out.append(format_html("<del>{}</del>", "".join(a[i1:i2])))
        if op in ("insert", "replace"):
            out.append(format_html("<ins>{}</ins>", "".join(b[j1:j2])))
    # Every piece above is escaped (escape/format_html): joining them is safe.
    return mark_safe("".join(out))


def word_diff(reference: str, text: str) -> SafeString:
    """`text` against `reference`, word by word: removed words in <del>, added in <ins>;
    every piece of user text escaped."""
    if len(reference) + len(text) > WORD_DIFF_LIMIT:
        return line_diff(reference, text)
    return _diff_pieces(_WORD.findall(reference), _WORD.findall(text))


def line_diff(reference: str, text: str) -> SafeString:
    return _diff_pieces(reference.splitlines(keepends=True), text.splitlines(keepends=True))


def similarity(reference: str, text: str) -> float:
    if reference == text:
        return 1.0
    if len(reference) + len(text) > WORD_DIFF_LIMIT:
        a, b = reference.splitlines(), text.splitlines()
    else:
        a, b = _WORD.findall(reference), _WORD.findall(text)
    return difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()


@dataclass
class CompareCell:
    branch: Branch
    step: Step | None
    action_diff: SafeString | None = None
    observation_diff: SafeString | None = None
    reference: str = ""  # "recorded", a branch name, or "" (this cell is the reference)
    same: bool = False
    ratio: float | None = None


@dataclass
class CompareRow:
    index: int
    cells: list[CompareCell]
    has_recorded: bool = False


@dataclass
class Comparison:
    branches: list[Branch]
    rows: list[CompareRow] = field(default_factory=list)
    shared_until: int = 0  # steps 0..shared_until-1 are the same Step rows in every branch
    recorded: Branch | None = None
    start: int = 0  # the rows shown: start..start+len(rows)-1
    prev_start: int | None = None
    next_start: int | None = None
    last: int = -1  # the highest step index in any selected branch


def _owner(lineage: list[list[int]], index: int) -> int:
    owner = lineage[0][0]
    for branch_id, start in lineage:
        if start <= index:
            owner = branch_id
    return owner


def shared_prefix_length(lineages: Iterable[list[list[int]]]) -> int:
    """The number of leading step indexes whose step row is the same in every lineage (the
    part all branches inherit from a common ancestor). Step existence is not checked."""
    lineages = [lin for lin in lineages if lin]
    if not lineages:
        return 0
    breakpoints = sorted({start for lin in lineages for _, start in lin})
    for point in breakpoints:
        if len({_owner(lin, point) for lin in lineages}) > 1:
            return point
    return 2**31 - 1  # identical lineages: everything is shared (fits an int column)


# Rows of one compare page: diffs of long observations cost CPU; a 2,000-step replay pages.
COMPARE_ROWS = 50


def build_comparison(
    trajectory: Trajectory,
    branches: list[Branch],
    *,
    diff: str = "words",
    start: int | None = None,
    limit: int = COMPARE_ROWS,
) -> Comparison:
    """Branches step-aligned by index, `limit` rows from `start` (default: the first step
    that is not shared by all). Each observation is diffed against the recorded one where the
    recorded branch has that step, else against the first selected branch that has it."""
    differ = line_diff if diff == "lines" else word_diff
    recorded = Branch.objects.get(trajectory=trajectory, parent__isnull=True)
    lineages = [b.lineage or b.compute_lineage() for b in branches]
    shared = shared_prefix_length(lineages)
    ends = [b.all_steps().aggregate(last=Max("index"))["last"] for b in branches]
    last = max((e for e in ends if e is not None), default=-1)
    if shared > last:
        shared = 0  # identical branches: show them rather than nothing
    lo = shared if start is None else min(max(shared, start), max(last, shared))
    hi = min(last, lo + limit - 1)
    steps: dict[int, dict[int, Step]] = {
        b.pk: {s.index: s for s in b.all_steps().filter(index__gte=lo, index__lte=hi)}
        for b in branches
    }
    recorded_steps = {
        s.index: s for s in Step.objects.filter(branch=recorded, index__gte=lo, index__lte=hi)
    }
    comparison = Comparison(
        branches=branches,
        shared_until=shared,
        recorded=recorded,
        start=lo,
        prev_start=max(shared, lo - limit) if lo > shared else None,
        next_start=hi + 1 if hi < last else None,
        last=last,
    )
    for index in range(lo, hi + 1):
        ref_step = recorded_steps.get(index)
        ref_label = "recorded"
        if ref_step is None:
            # The first selected branch that has this step (a shorter first column must not
            # leave the longer ones undiffed past its end).
            ref_branch = next((b for b in branches if index in steps[b.pk]), None)
            if ref_branch is not None:
                ref_step = steps[ref_branch.pk][index]
                ref_label = ref_branch.name
        cells = []
        for b in branches:
            step = steps[b.pk].get(index)
            cell = CompareCell(branch=b, step=step)
            if step is not None and ref_step is not None and ref_step.pk != step.pk:
                cell.reference = ref_label
                cell.same = (
                    step.observation == ref_step.observation and step.action == ref_step.action
                )
                cell.ratio = similarity(ref_step.observation, step.observation)
                cell.observation_diff = differ(ref_step.observation, step.observation)
                if step.action != ref_step.action:
                    cell.action_diff = differ(ref_step.action, step.action)
            cells.append(cell)
        comparison.rows.append(
            CompareRow(index=index, cells=cells, has_recorded=index in recorded_steps)
        )
    return comparison
