"""The AgentWorldBench judge on the studio's simulated steps, web side: which steps a judge
job scores, the judge's row for each (built from the step's branch, as `agentworldbench
judge` reads rows), the latest judgement of steps, the fidelity of a branch (per step and
dimension) and how the judge agrees with people. The worker side is `studio.jobs.judging`.

A step's reference is the recorded observation of the same step, when the trajectory's
recorded branch took the same action there: then all five dimensions are scored (sim vs
real). Without one (a rollout's own actions, an episode, a fictional world, a perturbed
observation, which is meant to differ from reality) the judge scores consistency and realism
only."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import groupby
from typing import Any

from django.db import transaction
from django.db.models import F, QuerySet

from inference.judge import DIMENSIONS
from inference.prompts import format_observation, format_turn_prompt
from inference.simulation.meaning import same_meaning
from studio.models import (
    AnnotationQueue,
    ArenaRun,
    Branch,
    BranchOrigin,
    Campaign,
    CampaignEpisode,
    JudgeJob,
    JudgeTarget,
    ModelEndpoint,
    ObservationSource,
    Project,
    QueueItem,
    SimulationJob,
    Step,
    StepAnnotation,
    StepJudgement,
)
from studio.queues import queue_name
from studio.services import job_limits
from studio.services.blinding import SEES_ALL, Blindness
from studio.services.jobs import STOPPED, reopen, request_cancel
from studio.services.simulation import system_prompt_for, turn_of

JUDGED_SOURCES = (ObservationSource.SIMULATED, ObservationSource.PERTURBED)
TURN_FIELDS = (
    "pk", "index", "action", "observation", "state", "raw_prompt", "meta", "observation_source",
)  # fmt: skip
MAX_STEPS = 5000


@dataclass(frozen=True)
class JudgeData:
    """A validated request for a judge job (`studio.forms.judging.JudgeForm` makes it)."""

    judge: ModelEndpoint
    target: str
    branch: Branch | None = None
    fork: SimulationJob | None = None
    queue: AnnotationQueue | None = None
    arena: ArenaRun | None = None
    campaign: Campaign | None = None
    temperature: float = 0.6
    max_tokens: int = 32768
    concurrency: int = 8


def describe(
    target: str,
    branch: Branch | None = None,
    fork: SimulationJob | None = None,
    queue: AnnotationQueue | None = None,
    arena: ArenaRun | None = None,
    campaign: Campaign | None = None,
) -> str:
    """What a judge job scores, in words."""
    if target == JudgeTarget.BRANCH and branch is not None:
        return f"branch {branch.name!r} of {branch.trajectory.title!r}"
    if target == JudgeTarget.FORK and fork is not None:
        return f"the {fork.n} futures of simulation {fork.pk} at step {fork.fork_index}"
    if target == JudgeTarget.QUEUE and queue is not None:
        return f"queue {queue.name!r}"
    if target == JudgeTarget.ARENA and arena is not None:
        return f"the futures of arena {arena.pk} at step {arena.fork_index}"
    if target == JudgeTarget.CAMPAIGN and campaign is not None:
        return f"the episodes of campaign {campaign.pk} {campaign.name!r}"
    raise ValueError("a judge job needs a branch, a fork, a queue, an arena or a campaign")


def start_judging(project: Project, user, data: JudgeData) -> JudgeJob:
    """The job row (the caller enqueues it); ValueError when the target has no simulated
    step to judge."""
    description = describe(
        data.target, data.branch, data.fork, data.queue, data.arena, data.campaign
    )
    job = JudgeJob(
        project=project,
        requester=user,
        target=data.target,
        branch=data.branch,
        fork=data.fork,
        annotation_queue=data.queue,
        arena=data.arena,
        campaign=data.campaign,
        description=description,
        judge_endpoint=data.judge,
        judge_model=data.judge.model,
        judge_base_url=data.judge.base_url,
        params={"temperature": data.temperature, "max_tokens": data.max_tokens},
        concurrency=data.concurrency,
        queue=queue_name("default"),
    )
    count = judged_steps(job).count()
    if count > MAX_STEPS:
        raise ValueError(
            f"{description} has {count} simulated steps; a judge job takes at most {MAX_STEPS} "
            "(judge a queue or branches of it)"
        )
    if not count:
        raise ValueError(
            f"{description} has no simulated step to judge (the judge scores simulated and "
            "perturbed observations; recorded ones are the reference)"
        )
    with transaction.atomic():
        job_limits.check_room(project.pk)  # TooManyJobs (a ValueError) past the limit
        job.save()
    return job


def cancel_judging(job: JudgeJob) -> None:
    request_cancel(JudgeJob, job.pk)


def resume_judging(job: JudgeJob) -> bool:
    """A stopped job (failed, cancelled, its worker lost) goes on with the steps it has not
    judged, and tries its failed ones again; its judgements are kept. The caller enqueues.
    TooManyJobs (nothing changed) when the project has as many jobs at once as it may."""
    with transaction.atomic():
        if JudgeJob.objects.filter(pk=job.pk, status__in=STOPPED).exists():
            job_limits.check_room(job.project_id)  # one more job at once
        resumed = reopen(JudgeJob, job.pk)
        if resumed:
            failed = StepJudgement.objects.filter(job=job, ok=False)
            count = failed.count()
            failed.delete()
            JudgeJob.objects.filter(pk=job.pk).update(steps_failed=F("steps_failed") - count)
    return resumed


def target_steps(job: JudgeJob) -> QuerySet[Step]:
    """Every step the job is about (judged or not), in branch and step order."""
    rows = Step.objects.all()
    if job.target == JudgeTarget.BRANCH:
        rows = rows.filter(branch=job.branch)
    elif job.target == JudgeTarget.FORK:
        rows = rows.filter(branch__job=job.fork)
    elif job.target == JudgeTarget.ARENA and job.arena is not None:
        # every model's futures, at the fork only: the step all of them answered
        rows = rows.filter(branch__job__arena_id=job.arena_id, index=job.arena.fork_index)
    elif job.target == JudgeTarget.CAMPAIGN and job.campaign_id is not None:
        # the episodes its slots played last, as played: their root branches
        episodes = CampaignEpisode.objects.filter(
            campaign_id=job.campaign_id, trajectory__isnull=False
        ).values("trajectory_id")
        rows = rows.filter(branch__trajectory_id__in=episodes, branch__parent__isnull=True)
    else:
        rows = rows.filter(
            pk__in=QueueItem.objects.filter(queue=job.annotation_queue).values("step")
        )
    return rows.filter(branch__trajectory__project_id=job.project_id).order_by("branch_id", "index")


def judged_steps(job: JudgeJob) -> QuerySet[Step]:
    return target_steps(job).filter(observation_source__in=JUDGED_SOURCES).exclude(observation="")


# ---- rows -----------------------------------------------------------------------------------


def _recorded_path(branch: Branch) -> dict[int, Step]:
    """The steps of the nearest recorded branch on the branch's lineage (the recorded path it
    forked from), by index: those with a recorded observation."""
    lineage = branch.lineage or branch.compute_lineage()
    ids = [seg for seg, _ in lineage]
    origins = dict(Branch.objects.filter(pk__in=ids).values_list("pk", "origin"))
    recorded = next(
        (seg for seg in reversed(ids) if origins.get(seg) == BranchOrigin.RECORDED), None
    )
    if recorded is None:
        return {}
    root = Branch.objects.get(pk=recorded)
    steps = root.all_steps().filter(observation_source=ObservationSource.RECORDED)
    return {s.index: s for s in steps.only(*TURN_FIELDS)}


def _reference_of(path: list[Step], at: int, recorded: dict[int, Step]) -> Step | None:
    """The recorded step that is the reference of `path[at]`: only a simulated step (not a
    perturbed one, not one in a fictional world) whose path to it took the recorded actions
    at every step (the same meaning, see `same_meaning`) with no perturbation before it."""
    step = path[at]
    if step.observation_source != ObservationSource.SIMULATED or (step.meta or {}).get("world"):
        return None
    real = recorded.get(step.index)
    if real is None or real.pk == step.pk:
        return None
    for earlier in path[: at + 1]:
        if earlier.observation_source == ObservationSource.PERTURBED or (earlier.meta or {}).get(
            "world"
        ):
            return None
        match = recorded.get(earlier.index)
        if match is None or not same_meaning(match.action, earlier.action):
            return None
    return real


def reference_step(branch: Branch, step: Step) -> Step | None:
    """The recorded step the judge takes as `step`'s reference on `branch` (see
    `_reference_of`), for pages that show it beside the step (the annotation item)."""
    path = list(branch.all_steps().filter(index__lte=step.index))
    at = next((i for i, s in enumerate(path) if s.pk == step.pk), None)
    if at is None:
        return None
    return _reference_of(path, at, _recorded_path(branch))


@dataclass
class JudgeItem:
    step: Step
    row: dict[str, Any]
    reference: Step | None


def items_for(steps: Iterable[Step]) -> Iterator[JudgeItem]:
    """The judge's row of each step (steps in branch order), one branch's path in memory at
    a time: `prompt`/`response` hold the branch's turns up to the step, the response of its
    own turn is the reference (or the row is marked `no_reference`), and the prediction is
    the step's observation."""
    for branch_id, group in groupby(steps, key=lambda s: s.branch_id):
        branch = Branch.objects.select_related("trajectory").filter(pk=branch_id).first()
        if branch is None:  # deleted while the job ran: its steps went with it
            continue
        trajectory = branch.trajectory
        path = list(branch.all_steps().only(*TURN_FIELDS))
        recorded = _recorded_path(branch)
        task = trajectory.task_instruction or ""
        prompts = [format_turn_prompt(n, turn_of(s), task) for n, s in enumerate(path, 1)]
        responses = [
            format_observation(turn_of(s), n) if s.observation else ""
            for n, s in enumerate(path, 1)
        ]
        position = {s.index: i for i, s in enumerate(path)}
        system = system_prompt_for(trajectory)
        for step in group:
            at = position.get(step.index)
            if at is None:
                continue
            reference = _reference_of(path, at, recorded)
            turn_responses = responses[: at + 1]
            if reference is not None:
                turn_responses[at] = format_observation(turn_of(reference), at + 1)
            row = {
                "task": trajectory.domain,
                "id": f"{trajectory.pk}:{branch_id}:{step.index}",
                "system_str": system,
                "prompt": prompts[: at + 1],
                "response": turn_responses,
                "turn_idx": at + 1,
                "predicted_observation": step.observation,
                "no_reference": reference is None,
            }
            yield JudgeItem(step, row, reference)


# ---- reading judgements -------------------------------------------------------------------


def latest_judgements(
    step_ids: Iterable[int], job: JudgeJob | None = None
) -> dict[int, StepJudgement]:
    """The newest successful judgement of each step (of `job` only, when given)."""
    found: dict[int, StepJudgement] = {}
    rows = StepJudgement.objects.filter(step_id__in=list(step_ids), ok=True)
    if job is not None:
        rows = rows.filter(job=job)
    rows = rows.defer("raw").order_by("step_id", "-created_at", "-id")
    for judgement in rows:
        found.setdefault(judgement.step_id, judgement)
    return found


def steps_judged_below(project: Project, threshold: float) -> QuerySet[Step]:
    """Steps whose newest successful judgement totals below `threshold` (1-5)."""
    from django.db.models import OuterRef, Subquery

    newest = StepJudgement.objects.filter(step=OuterRef("pk"), ok=True).order_by(
        "-created_at", "-id"
    )
    return (
        Step.objects.filter(branch__trajectory__project=project)
        .annotate(judge_total=Subquery(newest.values("total_score")[:1]))
        .filter(judge_total__lt=threshold)
    )


@dataclass
class Fidelity:
    """Per step of a branch, the judge's score on each dimension (None: not scored)."""

    indexes: list[int]
    scores: dict[str, list[float | None]]  # dimension -> one per index
    totals: list[float | None]
    with_reference: list[bool]
    judged: int
    mean: dict[str, float | None]
    # judged steps left out because they are hidden from the reader (blind review)
    hidden: tuple[int, ...] = ()


def fidelity(branch: Branch, blindness: Blindness = SEES_ALL) -> Fidelity:
    """The branch's judged steps, less those `blindness` hides (their count is `hidden`)."""
    steps = list(branch.all_steps().only("pk", "index"))
    latest = latest_judgements(s.pk for s in steps)
    hidden = tuple(blindness.hidden(s.pk for s in steps if s.pk in latest))
    judged_steps = [s for s in steps if s.pk in latest and not blindness.hides(s.pk)]
    scores: dict[str, list[float | None]] = {d: [] for d in DIMENSIONS}
    totals, refs = [], []
    for step in judged_steps:
        j = latest[step.pk]
        for dim in DIMENSIONS:
            scores[dim].append((j.scores or {}).get(dim))
        totals.append(j.total_score)
        refs.append(j.with_reference)
    mean: dict[str, float | None] = {}
    for dim, values in scores.items():
        present = [v for v in values if v is not None]
        mean[dim] = round(sum(present) / len(present), 2) if present else None
    return Fidelity(
        indexes=[s.index for s in judged_steps],
        scores=scores,
        totals=totals,
        with_reference=refs,
        judged=len(judged_steps),
        mean=mean,
        hidden=hidden,
    )


@dataclass
class JudgeVsHuman:
    """How the judge agrees with people, per dimension, over steps both scored: Krippendorff's
    alpha (ordinal) between the judge and the people's median rating, and the mean absolute
    difference."""

    rows: list[dict[str, Any]]  # dimension, pairs, alpha, mean_abs_diff, note
    steps: int
    # steps asked about and left out because they are hidden from the reader (blind review)
    hidden: tuple[int, ...] = ()


def judge_vs_human(
    step_ids: Iterable[int],
    job: JudgeJob | None = None,
    blindness: Blindness = SEES_ALL,
    queue: AnnotationQueue | None = None,
) -> JudgeVsHuman:
    """Over `step_ids` less those `blindness` hides: a hidden step's judge score and people's
    ratings would both show through the alpha and the mean difference. The people are those
    of `queue` (or of the job's queue) when there is one: a queue's annotations are its own;
    otherwise every annotation of the steps counts."""
    import krippendorff
    import numpy as np

    asked = list(step_ids)
    hidden = tuple(blindness.hidden(asked))
    ids = blindness.visible(asked)
    latest = latest_judgements(ids, job)
    if queue is None and job is not None and job.annotation_queue_id is not None:
        queue = job.annotation_queue
    annotations = StepAnnotation.objects.filter(step_id__in=list(latest))
    if queue is not None:
        annotations = annotations.filter(queue=queue)
    people: dict[int, list[dict[str, Any]]] = {}
    for step_id, ratings in annotations.values_list("step_id", "ratings"):
        people.setdefault(step_id, []).append(ratings or {})
    rows = []
    both = [pk for pk in latest if pk in people]
    for dim in DIMENSIONS:
        judge_values, human_values = [], []
        for pk in both:
            j = (latest[pk].scores or {}).get(dim)
            rated = [r[dim] for r in people[pk] if isinstance(r.get(dim), int)]
            if j is None or not rated:
                continue
            judge_values.append(float(j))
            human_values.append(float(np.median(rated)))
        entry: dict[str, Any] = {"dimension": dim, "pairs": len(judge_values)}
        entry["alpha"], entry["mean_abs_diff"], entry["note"] = None, None, ""
        if not judge_values and both:
            judged_dim = any(dim in (latest[pk].scores or {}) for pk in both)
            entry["note"] = (
                "people have not rated it on the steps the judge scored"
                if judged_dim
                else "the judge scored it on none of these steps (no reference)"
            )
        if judge_values:
            diffs = [abs(a - b) for a, b in zip(judge_values, human_values, strict=True)]
            entry["mean_abs_diff"] = round(sum(diffs) / len(diffs), 2)
            if len(set(judge_values + human_values)) < 2:
                entry["note"] = "every score is the same value: alpha is undefined"
            elif len(judge_values) < 2:
                entry["note"] = "one step scored by both: too few for alpha"
            else:
                value = float(
                    krippendorff.alpha(
                        reliability_data=np.array([judge_values, human_values]),
                        level_of_measurement="ordinal",
                    )
                )
                entry["alpha"] = None if np.isnan(value) else round(value, 3)
        elif not entry["note"]:
            entry["note"] = "no step scored by both yet"
        rows.append(entry)
    return JudgeVsHuman(rows=rows, steps=len(both), hidden=hidden)
