"""Branch housekeeping (rename, star, delete with descendants), the branch tree as plain
nodes, and which steps branches share (their lineages); the comparison of branches is
`studio.services.compare`.

Nothing here builds presentation: the Plotly figure and the diff HTML are made from this data
by `studio.presenters`."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from django.db import transaction
from django.db.models import Count

from studio.models import Branch, Trajectory
from studio.models.trajectories import BranchStatus
from studio.services.model_identity import (
    ModelIdentity,
    identities_of_jobs,
    models_of_episode_branches,
)

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


# ---- tree layout ------------------------------------------------------------------------


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
    # A collapsed group of sibling futures (`group_forks`): how many, their statuses, ids.
    members: list[int] = field(default_factory=list)
    statuses: dict[str, int] = field(default_factory=dict)
    # The world model of its future (None: recorded or hand-made; `name_tree_models`); a
    # group's when all its members share one model, else None and `models` > 1.
    identity: ModelIdentity | None = None
    models: int = 0

    @property
    def is_group(self) -> bool:
        return bool(self.members)

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


# Siblings of one fork above this many are drawn as one collapsible group (the futures of a
# job read as "26 futures @4", not 26 rows of look-alike labels).
GROUP_AT = 8


def group_key(parent_id: int, fork_index: int) -> str:
    return f"{parent_id}:{fork_index}"


def group_forks(
    nodes: Sequence[TreeNode], *, expanded: set[str] | None = None, threshold: int = GROUP_AT
) -> list[TreeNode]:
    """The nodes with each large set of sibling leaves (same parent, same fork step, no
    children of their own) replaced by one group node, unless its `group_key` is in
    `expanded` (or `expanded` holds "all"). A group node has a negative pk, the parent and
    fork step of its members, `members` and the count of each status."""
    expanded = expanded or set()
    if "all" in expanded:
        return list(nodes)
    has_children = {n.parent_id for n in nodes if n.parent_id is not None}
    siblings: dict[tuple[int, int], list[TreeNode]] = defaultdict(list)
    for n in nodes:
        if n.parent_id is not None and n.pk not in has_children:
            siblings[(n.parent_id, n.fork_index)].append(n)
    grouped: set[int] = set()
    groups: list[TreeNode] = []
    for (parent_id, at), members in siblings.items():
        if len(members) <= threshold or group_key(parent_id, at) in expanded:
            continue
        grouped.update(m.pk for m in members)
        statuses: dict[str, int] = defaultdict(int)
        for m in members:
            statuses[m.status] += 1
        jobs = sorted({m.job_id for m in members if m.job_id})
        groups.append(
            TreeNode(
                pk=-(len(groups) + 1),
                parent_id=parent_id,
                fork_index=at,
                own_steps=max(m.own_steps for m in members),
                name=f"{len(members)} futures @{at}"
                + (
                    f" (job{'s' if len(jobs) > 1 else ''} {', '.join(map(str, jobs))})"
                    if jobs
                    else ""
                ),
                origin="group",
                status=max(statuses, key=lambda k: statuses[k]),
                sample_index=min(m.sample_index for m in members),
                members=[m.pk for m in members],
                statuses=dict(statuses),
                identity=_shared_identity(members),
                models=len({m.identity.model_key for m in members if m.identity is not None}),
            )
        )
    return [n for n in nodes if n.pk not in grouped] + groups


def _shared_identity(members: Sequence[TreeNode]) -> ModelIdentity | None:
    keys = {m.identity.model_key if m.identity is not None else None for m in members}
    return members[0].identity if len(keys) == 1 else None


def name_tree_models(nodes: Sequence[TreeNode], *, episode: bool = False) -> None:
    """Fill each node's `identity` (one query for all the tree's jobs). `episode`: the tree
    is an episode's, whose branch of no job holds steps a served model wrote (no job row):
    named by the one model they name (two more queries)."""
    identities = identities_of_jobs(n.job_id for n in nodes)
    served = models_of_episode_branches(n.pk for n in nodes if n.job_id is None) if episode else {}
    for n in nodes:
        n.identity = identities.get(n.job_id) if n.job_id is not None else None
        models = served.get(n.pk, [])
        if n.job_id is None and len(models) == 1:
            n.identity = models[0]


def filter_tree_by_model(nodes: Sequence[TreeNode], token: str) -> tuple[list[TreeNode], int]:
    """The futures of one model (`ModelIdentity.token`) and their ancestors, which keep the
    tree connected whatever model made them; and how many nodes are that model's own."""
    by_id = {n.pk: n for n in nodes}
    kept: set[int] = set()
    matching = 0
    for n in nodes:
        if n.identity is None or n.identity.token != token:
            continue
        matching += 1
        node: TreeNode | None = n
        while node is not None and node.pk not in kept:
            kept.add(node.pk)
            node = by_id.get(node.parent_id) if node.parent_id is not None else None
    return [n for n in nodes if n.pk in kept], matching


# ---- shared steps -------------------------------------------------------------------------


def owner_at(lineage: list[list[int]], index: int) -> int:
    """The branch whose Step row a branch of this lineage shows at `index`."""
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
        if len({owner_at(lin, point) for lin in lineages}) > 1:
            return point
    return 2**31 - 1  # identical lineages: everything is shared (fits an int column)
