"""The futures of one fork at a glance: the N children of a branch at one step, their
observations at a step grouped into outcomes (the same meaning first, then near-duplicates),
with each outcome's count and share, a representative, and its diff against the recorded
observation. Failed futures and malformed outputs are counted apart, never in an outcome.

Plain data: `studio.presenters.futures` draws the bar chart."""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field

from studio.models import Branch, Step
from studio.models.trajectories import BranchStatus, ParseStatus
from studio.services.diffs import (
    MeaningDiff,
    meaning_diff,
    meaning_key,
    meaning_similarity,
    normalise_text,
)

# Two observations this similar (formatting ignored) are near-duplicates: the same outcome.
NEAR_DUPLICATE = 0.9
MALFORMED = (ParseStatus.NO_TAG, ParseStatus.UNCLOSED)


@dataclass
class Outcome:
    label: str  # "A", "B", ... by size
    branches: list[Branch]
    representative: Branch
    step: Step  # the representative's step
    share: float = 0.0
    exact: bool = True  # every member means exactly what the representative does
    vs_recorded: MeaningDiff | None = None
    similarity_to_recorded: float | None = None

    @property
    def size(self) -> int:
        return len(self.branches)


@dataclass
class FutureSummary:
    parent: Branch
    fork_index: int
    at: int  # the step whose observations are grouped
    children: list[Branch]
    outcomes: list[Outcome] = field(default_factory=list)
    malformed: list[Branch] = field(default_factory=list)  # no or unclosed tag
    failed: list[Branch] = field(default_factory=list)  # failed, or no step there
    unfinished: list[Branch] = field(default_factory=list)  # queued, running, cancelled
    recorded: Step | None = None  # the recorded observation at `at`, when there is one

    @property
    def counted(self) -> int:
        """Futures in an outcome: the base of the shares."""
        return sum(o.size for o in self.outcomes)

    def representatives(self, limit: int) -> list[Branch]:
        return [o.representative for o in self.outcomes[:limit]]


def _label(i: int) -> str:
    label = ""
    i += 1
    while i:
        i, rest = divmod(i - 1, 26)
        label = chr(65 + rest) + label
    return label


def _near(a: str, b: str) -> bool:
    """Similar enough to be one outcome (cheap upper bounds first)."""
    x, y = normalise_text(a), normalise_text(b)
    matcher = difflib.SequenceMatcher(None, x, y, autojunk=False)
    if matcher.real_quick_ratio() < NEAR_DUPLICATE or matcher.quick_ratio() < NEAR_DUPLICATE:
        return False
    return meaning_similarity(a, b) >= NEAR_DUPLICATE


def summarise_fork(parent: Branch, fork_index: int, *, at: int | None = None) -> FutureSummary:
    """Group the observations at step `at` (default: the fork step) of `parent`'s children
    forked at `fork_index`."""
    at = fork_index if at is None else at
    children = list(
        Branch.objects.filter(parent=parent, fork_index=fork_index).order_by("sample_index", "pk")
    )
    summary = FutureSummary(parent=parent, fork_index=fork_index, at=at, children=children)
    root = Branch.objects.get(trajectory_id=parent.trajectory_id, parent__isnull=True)
    summary.recorded = root.all_steps().filter(index=at).first()
    steps = {s.branch_id: s for s in Step.objects.filter(branch__in=children, index=at)}
    # exact groups, in the order of first appearance
    groups: dict[str, list[Branch]] = {}
    for child in children:
        step = steps.get(child.pk)
        if child.status in (BranchStatus.QUEUED, BranchStatus.RUNNING) or (
            step is None and child.status == BranchStatus.CANCELLED
        ):
            summary.unfinished.append(child)
        elif step is None or child.status == BranchStatus.FAILED:
            summary.failed.append(child)
        elif step.parse_status in MALFORMED:
            summary.malformed.append(child)
        else:
            groups.setdefault(meaning_key(step.observation), []).append(child)
    # near-duplicates join the largest similar group (groups largest first)
    merged: list[dict] = []
    for members in sorted(groups.values(), key=len, reverse=True):
        text = steps[members[0].pk].observation
        target = next(
            (g for g in merged if _near(steps[g["members"][0].pk].observation, text)), None
        )
        if target is None:
            merged.append({"members": list(members), "exact": True})
        else:
            target["members"].extend(members)
            target["exact"] = False
    merged.sort(key=lambda g: len(g["members"]), reverse=True)
    counted = sum(len(g["members"]) for g in merged)
    for i, group in enumerate(merged):
        members, exact = group["members"], group["exact"]
        rep = members[0]
        step = steps[rep.pk]
        outcome = Outcome(
            label=_label(i),
            branches=members,
            representative=rep,
            step=step,
            share=len(members) / counted if counted else 0.0,
            exact=exact,
        )
        if summary.recorded is not None:
            outcome.vs_recorded = meaning_diff(summary.recorded.observation, step.observation)
            outcome.similarity_to_recorded = meaning_similarity(
                summary.recorded.observation, step.observation
            )
        summary.outcomes.append(outcome)
    return summary


def default_columns(summary: FutureSummary, limit: int = 6) -> list[Branch]:
    """What a fork's compare shows by default: the recorded branch (the fork's parent when
    the recorded trajectory has no such step) and one representative per outcome, then the
    malformed and failed futures, at most `limit` columns."""
    reference = summary.parent
    if summary.recorded is not None:
        reference = Branch.objects.get(pk=summary.recorded.branch_id)
    columns = [reference]
    for branch in [*summary.representatives(limit), *summary.malformed, *summary.failed]:
        if len(columns) == limit:
            break
        if branch.pk != reference.pk:
            columns.append(branch)
    return columns
