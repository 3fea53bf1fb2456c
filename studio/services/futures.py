"""The futures of one fork at a glance: the simulated children of a branch at one step that
were given the same action, their observations at a step grouped into outcomes (the same
meaning first, then near-duplicates), with each outcome's count and share, a representative,
and its diff against the recorded observation. Failed futures and malformed outputs are
counted apart, never in an outcome. Futures of different actions are different experiments:
each action at the fork has its own summary (`ActionGroup`, `?action=` on the page).
Recorded alternatives (a ToolBench search's explored branches) are not futures.

Plain data: `studio.presenters.futures` draws the bar chart."""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from inference.simulation.meaning import canonical_json, json_value, normalise_text
from studio.models import Branch, Step
from studio.models.trajectories import BranchOrigin, BranchStatus, ParseStatus
from studio.services.diffs import (
    MeaningDiff,
    by_lines,
    meaning_diff,
    meaning_key,
    meaning_similarity,
    token_similarity,
    tokens_of,
)
from studio.services.model_identity import ModelIdentity, identity_of_branch

# Two observations this similar (formatting ignored) are near-duplicates: the same outcome.
NEAR_DUPLICATE = 0.9
# Full comparisons of near-duplicate candidates per summary (64 distinct futures would be
# 2016 pairs); past it the remaining outcomes stay exact groups, and the page says so.
NEAR_PAIR_BUDGET = 400
# Token lists longer than this are compared with difflib's junk heuristic (see diffs).
NEAR_AUTOJUNK_TOKENS = 1000
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

    @property
    def jobs(self) -> list[tuple[int, int]]:
        """(job id, futures of this outcome from it), in order of first appearance."""
        counts = Counter(b.job_id for b in self.branches if b.job_id is not None)
        return list(counts.items())


@dataclass
class ActionGroup:
    """The futures of a fork given one action (the same meaning)."""

    key: str  # a short stable id of the action's meaning (and sweep entry), for ?action=
    action: str  # as the first of them has it
    branches: list[Branch]
    edited: bool  # not the recorded action
    perturbation: str = ""  # the perturbation these futures had at the fork step

    @property
    def size(self) -> int:
        return len(self.branches)

    @property
    def short(self) -> str:
        from studio.services.simulation import short_action

        short = short_action(self.action) or "(no action)"
        return f"{short} · {self.perturbation}" if self.perturbation else short

    @property
    def action_short(self) -> str:
        from studio.services.simulation import short_action

        return short_action(self.action) or "(no action)"


@dataclass
class ModelGroup:
    """The futures of one action made by one model run one way (`ModelIdentity.key`): their
    outcomes, with shares of this group alone."""

    key: str  # identity.key, or "" for futures no job made (or whose job was deleted)
    identity: ModelIdentity | None
    children: list[Branch]
    number: int = 1  # 1, 2, ... in the order of the page (largest group first)
    outcomes: list[Outcome] = field(default_factory=list)
    malformed: list[Branch] = field(default_factory=list)  # no or unclosed tag
    failed: list[Branch] = field(default_factory=list)  # no step there, and the future failed
    ended: list[Branch] = field(default_factory=list)  # no step there: it stopped before
    unfinished: list[Branch] = field(default_factory=list)  # queued, running, cancelled
    near_incomplete: bool = False  # NEAR_PAIR_BUDGET ran out before every pair was checked

    @property
    def size(self) -> int:
        return len(self.children)

    @property
    def counted(self) -> int:
        """Futures in an outcome: the base of this group's shares."""
        return sum(o.size for o in self.outcomes)

    @property
    def jobs(self) -> list[int]:
        """The jobs these futures came from, in order of first appearance."""
        return list(dict.fromkeys(b.job_id for b in self.children if b.job_id is not None))

    @property
    def apart(self) -> list[tuple[str, list[Branch]]]:
        """The futures without an outcome, by why (the page's rows and bars)."""
        return [
            ("malformed", self.malformed),
            ("failed", self.failed),
            ("ended before", self.ended),
            ("unfinished", self.unfinished),
        ]


@dataclass
class FutureSummary:
    parent: Branch
    fork_index: int
    at: int  # the step whose observations are grouped
    children: list[Branch]  # the futures summarised: those of `action`
    actions: list[ActionGroup] = field(default_factory=list)  # every action, largest first
    action: ActionGroup | None = None
    models: list[ModelGroup] = field(default_factory=list)  # of `action`, largest first
    recorded: Step | None = None  # the recorded observation at `at`, when there is one

    @property
    def perturbed(self) -> bool:
        """Some futures had a perturbation at the fork step."""
        return any(g.perturbation for g in self.actions)

    # Totals over the model groups: counts only (a share is of one group, never of these).
    @property
    def outcomes(self) -> list[Outcome]:
        return [o for g in self.models for o in g.outcomes]

    @property
    def malformed(self) -> list[Branch]:
        return [b for g in self.models for b in g.malformed]

    @property
    def failed(self) -> list[Branch]:
        return [b for g in self.models for b in g.failed]

    @property
    def ended(self) -> list[Branch]:
        return [b for g in self.models for b in g.ended]

    @property
    def unfinished(self) -> list[Branch]:
        return [b for g in self.models for b in g.unfinished]

    @property
    def counted(self) -> int:
        """Futures in an outcome, over every model group."""
        return sum(g.counted for g in self.models)

    @property
    def near_incomplete(self) -> bool:
        return any(g.near_incomplete for g in self.models)

    @property
    def jobs(self) -> list[int]:
        return list(dict.fromkeys(b.job_id for b in self.children if b.job_id is not None))

    def representatives(self, limit: int) -> list[Branch]:
        """The representatives of the largest outcomes, each model's in turn (its first
        outcome, then every model's second, ...), so that every model shows."""
        out: list[Branch] = []
        depth = max((len(g.outcomes) for g in self.models), default=0)
        for k in range(depth):
            for group in self.models:
                if k < len(group.outcomes) and len(out) < limit:
                    out.append(group.outcomes[k].representative)
        return out


def _label(i: int) -> str:
    label = ""
    i += 1
    while i:
        i, rest = divmod(i - 1, 26)
        label = chr(65 + rest) + label
    return label


def action_key(action: str, perturbation: str = "") -> str:
    text = meaning_key(action) + (f"\x00{perturbation}" if perturbation else "")
    return hashlib.sha1(text.encode()).hexdigest()[:10]


def _perturbed_under(step: Step | None) -> str:
    """The perturbation a future had at the fork step ("" for none): futures under different
    perturbations are different experiments, each with its own outcomes (a sweep's above
    all)."""
    perturbation = (step.meta or {}).get("perturbation") if step is not None else None
    return str(perturbation.get("label", "")) if isinstance(perturbation, dict) else ""


def _swept_entry(child: Branch) -> str:
    """A sweep's future without its fork step (failed, queued, cancelled) still belongs to
    its entry's experiment: its label, from the job's copy of the sweep."""
    from inference import perturbations as perturbing

    job = child.job
    sweep = (job.params or {}).get("sweep") if job is not None else None
    if job is None or not sweep:
        return ""
    per = max(1, job.n // len(sweep))
    entry = sweep[min(child.sample_index // per, len(sweep) - 1)]
    try:
        return perturbing.from_dict(entry).label
    except perturbing.PerturbationError:
        return ""


class _Compared:
    """One observation as the near-duplicate test compares it (`meaning_similarity`'s
    tokens), each token list and its counts computed once however many pairs it is in."""

    def __init__(self, text: str):
        is_json, value = json_value(text)
        self.canonical = canonical_json(value) if is_json else None
        self.normal = normalise_text(text)
        self._tokens: dict[tuple[bool, bool], tuple[list[str], Counter[str]]] = {}

    def tokens(self, as_json: bool, lines: bool) -> tuple[list[str], Counter[str]]:
        key = (as_json, lines)
        if key not in self._tokens:
            text = self.canonical if as_json and self.canonical is not None else self.normal
            toks = tokens_of(text, lines=lines)
            self._tokens[key] = (toks, Counter(toks))
        return self._tokens[key]

    def text(self, as_json: bool) -> str:
        return self.canonical if as_json and self.canonical is not None else self.normal


def _near(a: _Compared, b: _Compared) -> tuple[bool, bool]:
    """(similar enough to be one outcome, a full comparison was needed). Upper bounds on
    the same tokens as the similarity first: lengths, then shared token counts."""
    as_json = a.canonical is not None and b.canonical is not None
    lines = by_lines(a.text(as_json), b.text(as_json))
    (ta, ca), (tb, cb) = a.tokens(as_json, lines), b.tokens(as_json, lines)
    total = len(ta) + len(tb)
    if not total:
        return True, False
    if 2.0 * min(len(ta), len(tb)) / total < NEAR_DUPLICATE:
        return False, False
    if 2.0 * sum((ca & cb).values()) / total < NEAR_DUPLICATE:
        return False, False
    ratio = token_similarity(ta, tb, autojunk_above=NEAR_AUTOJUNK_TOKENS, cutoff=NEAR_DUPLICATE)
    return ratio >= NEAR_DUPLICATE, True


def _futures_of(parent: Branch, fork_index: int) -> list[Branch]:
    return list(
        Branch.objects.filter(parent=parent, fork_index=fork_index)
        .exclude(origin=BranchOrigin.RECORDED)
        .select_related("job")
        .order_by("sample_index", "pk")
    )


def _group_by_action(
    futures: list[Branch], fork_steps: dict[int, Step], recorded_action: str | None
) -> list[ActionGroup]:
    groups: dict[str, ActionGroup] = {}
    recorded_key = action_key(recorded_action) if recorded_action is not None else None
    for child in futures:
        step = fork_steps.get(child.pk)
        action = step.action if step is not None else (child.job.action if child.job else "")
        swept = _perturbed_under(step) or _swept_entry(child)
        key = action_key(action, swept)
        if key not in groups:
            edited = action_key(action) != recorded_key
            groups[key] = ActionGroup(key, action, [], edited=edited, perturbation=swept)
        groups[key].branches.append(child)
    return sorted(groups.values(), key=lambda g: -g.size)  # stable: first seen first


def _group_by_model(children: list[Branch]) -> list[ModelGroup]:
    """The futures by model identity (`ModelIdentity.key`), largest group first (stable:
    first seen first among equals)."""
    groups: dict[str, ModelGroup] = {}
    for child in children:
        identity = identity_of_branch(child)
        key = identity.key if identity is not None else ""
        if key not in groups:
            groups[key] = ModelGroup(key=key, identity=identity, children=[])
        groups[key].children.append(child)
    ordered = sorted(groups.values(), key=lambda g: -g.size)
    for number, group in enumerate(ordered, start=1):
        group.number = number
    return ordered


def summarise_fork(
    parent: Branch, fork_index: int, *, at: int | None = None, action: str | None = None
) -> FutureSummary:
    """Group the observations at step `at` (default: the fork step) of `parent`'s futures
    forked at `fork_index` that were given the action whose key is `action` (default: the
    action most futures were given), each model's futures apart."""
    at = fork_index if at is None else at
    futures = _futures_of(parent, fork_index)
    root = Branch.objects.get(trajectory_id=parent.trajectory_id, parent__isnull=True)
    recorded_steps = {s.index: s for s in root.all_steps().filter(index__in={at, fork_index})}
    fork_steps = {
        s.branch_id: s
        for s in Step.objects.filter(branch__in=futures, index=fork_index).defer(
            "raw_prompt", "raw_output", "thinking"
        )
    }
    recorded_fork = recorded_steps.get(fork_index)
    actions = _group_by_action(
        futures, fork_steps, recorded_fork.action if recorded_fork is not None else None
    )
    chosen = next((g for g in actions if g.key == action), actions[0] if actions else None)
    children = chosen.branches if chosen is not None else []
    summary = FutureSummary(
        parent=parent,
        fork_index=fork_index,
        at=at,
        children=children,
        actions=actions,
        action=chosen,
        models=_group_by_model(children),
        recorded=recorded_steps.get(at),
    )
    if at == fork_index:
        mine = {c.pk for c in children}
        steps = {pk: s for pk, s in fork_steps.items() if pk in mine}
    else:
        steps = {
            s.branch_id: s
            for s in Step.objects.filter(branch__in=children, index=at).defer(
                "raw_prompt", "raw_output", "thinking"
            )
        }
    budget = [NEAR_PAIR_BUDGET]  # shared by the groups: it bounds the page's work
    for group in summary.models:
        _summarise_group(group, steps, summary.recorded, budget)
    return summary


def _summarise_group(
    group: ModelGroup, steps: dict[int, Step], recorded: Step | None, budget: list[int]
) -> None:
    """The outcomes of one model's futures. A future with an observation at the step counts
    there whatever became of it later (a rollout that failed two steps on still has this
    outcome); one without is failed, stopped before, or not finished yet."""
    groups: dict[str, list[Branch]] = {}
    for child in group.children:
        step = steps.get(child.pk)
        if step is None:
            if child.status in (BranchStatus.QUEUED, BranchStatus.RUNNING, BranchStatus.CANCELLED):
                group.unfinished.append(child)
            elif child.status == BranchStatus.FAILED:
                group.failed.append(child)
            else:  # succeeded or ready without this step: its run ended before it
                group.ended.append(child)
        elif step.parse_status in MALFORMED:
            group.malformed.append(child)
        else:
            groups.setdefault(meaning_key(step.observation), []).append(child)
    # near-duplicates join the largest similar group (groups largest first)
    merged: list[dict] = []
    for members in sorted(groups.values(), key=len, reverse=True):
        compared = _Compared(steps[members[0].pk].observation)
        target = None
        for candidate in merged:
            if budget[0] <= 0:
                group.near_incomplete = True
                break
            near, full = _near(candidate["compared"], compared)
            budget[0] -= full
            if near:
                target = candidate
                break
        if target is None:
            merged.append({"members": list(members), "exact": True, "compared": compared})
        else:
            target["members"].extend(members)
            target["exact"] = False
    merged.sort(key=lambda g: len(g["members"]), reverse=True)
    counted = sum(len(g["members"]) for g in merged)
    for i, found in enumerate(merged):
        members, exact = found["members"], found["exact"]
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
        if recorded is not None:
            outcome.vs_recorded = meaning_diff(recorded.observation, step.observation)
            outcome.similarity_to_recorded = (
                1.0
                if outcome.vs_recorded.same
                else meaning_similarity(recorded.observation, step.observation)
            )
        group.outcomes.append(outcome)


def default_columns(
    summary: FutureSummary, limit: int = 6, *, keep: Callable[[Branch], bool] | None = None
) -> list[Branch]:
    """What a fork's compare shows by default: the recorded branch (the fork's parent when
    the recorded trajectory has no such step) and one representative per outcome (each
    model's largest first), then the malformed and failed futures, at most `limit` columns.
    `keep`: only futures it keeps (a filter by model)."""
    reference = summary.parent
    if summary.recorded is not None:
        reference = Branch.objects.get(pk=summary.recorded.branch_id)
    columns = [reference]
    candidates = [
        *summary.representatives(limit),
        *summary.malformed,
        *summary.failed,
        *summary.ended,
    ]
    if summary.perturbed:
        # perturbations at the fork (a sweep): side by side, one future of each (this
        # one's representative first)
        others = [g.branches[0] for g in summary.actions if g is not summary.action]
        candidates = [*summary.representatives(1), *others, *candidates]
    if keep is not None:
        candidates = [b for b in candidates if keep(b)]
    for branch in candidates:
        if len(columns) == limit:
            break
        if branch.pk != reference.pk and branch not in columns:
            columns.append(branch)
    return columns
