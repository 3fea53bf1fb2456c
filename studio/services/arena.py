"""The world-model arena, web side: start one (an `ArenaRun` and one `SimulationJob` per model,
on the same fork with the same action, sampling and seed), cancel one, and read its results:
per-model judge scores per dimension, pairwise win rates with Wilson intervals, the futures
side by side, and the project's roll-up over every finished arena. The worker side (waiting,
judging, comparing) is `studio.jobs.arena`; `studio.tasks.enqueue_arena` sends it.

Win rates count a tie as half a win for each model (the page says so): a model's rate over n
judged pairs is (wins + ties / 2) / n, and its 95% interval is Wilson's for that proportion.
A pair whose judgement failed counts for neither model and is reported as failed."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import combinations

from django.db import transaction

from inference.judge import DIMENSIONS
from inference.simulation.request import SimulationRequest
from studio.models import (
    ArenaPair,
    ArenaRun,
    Branch,
    JobStatus,
    JudgeJob,
    ModelEndpoint,
    PairWinner,
    Project,
    SimulationJob,
    Step,
    StepJudgement,
)
from studio.models.trajectories import BranchStatus
from studio.queues import queue_name
from studio.services.jobs import request_cancel
from studio.services.model_identity import ModelIdentity, identity_of_job
from studio.services.simulation import cancel_simulation, start_simulation

# The phases an arena goes through, in order (`ArenaRun.phase`).
PHASES = ("simulating", "judging", "comparing", "done")
Z95 = 1.959963984540054  # the normal quantile of a two-sided 95% interval


@dataclass(frozen=True)
class ArenaData:
    """A validated arena (`studio.forms.arena.ArenaForm` makes it): one request per model,
    each already checked against the fork, all with the same action, sampling and seed."""

    branch: Branch
    fork_index: int
    models: tuple[tuple[ModelEndpoint, SimulationRequest], ...]
    n: int
    seed: int
    judge: ModelEndpoint
    judge_temperature: float = 0.6
    judge_max_tokens: int = 32768
    concurrency: int = 4


def start_arena(user, data: ArenaData) -> ArenaRun:
    """The arena and its simulations, in one transaction: every job or none. The caller
    enqueues them (`studio.tasks.enqueue_arena`: its simulations and its first look, once
    the transaction commits). Raises InvalidRequest (a limit of the installation,
    TooManyJobs) with nothing made."""
    first = data.models[0][1]
    sampling = first.sampling.as_dict()
    with transaction.atomic():
        arena = ArenaRun.objects.create(
            project=data.branch.trajectory.project,
            requester=user if getattr(user, "pk", None) else None,
            trajectory=data.branch.trajectory,
            branch=data.branch,
            fork_index=data.fork_index,
            action=first.action,
            edited=first.edited,
            n=data.n,
            seed=data.seed,
            params={
                k: sampling[k] for k in ("temperature", "top_p", "max_tokens") if k in sampling
            },
            judge_endpoint=data.judge,
            judge_model=data.judge.model,
            judge_base_url=data.judge.base_url,
            judge_params={
                "temperature": data.judge_temperature,
                "max_tokens": data.judge_max_tokens,
                "concurrency": data.concurrency,
            },
            phase="simulating",
            queue=queue_name("default"),  # its looks and comparisons are short: any worker
            description=f"{len(data.models)} world models at step {data.fork_index} of "
            f"{data.branch.name!r}",
        )
        for endpoint, request in data.models:
            job = start_simulation(
                user=user, branch=data.branch, request=request, world_endpoint=endpoint
            )
            # the job is the arena's from its first commit: no page shows it on its own
            SimulationJob.objects.filter(pk=job.pk).update(arena=arena)
    return arena


def cancel_arena(arena: ArenaRun) -> None:
    """Stop the arena and every job of it still going: a queued arena ends at once, a
    comparing one after the pairs in flight (its worker ends it); finished futures, scores
    and pairs are kept."""
    request_cancel(ArenaRun, arena.pk)
    for job in SimulationJob.objects.filter(
        arena=arena, status__in=[JobStatus.QUEUED, JobStatus.RUNNING]
    ):
        cancel_simulation(job)
    if arena.judge_job_id is not None:
        request_cancel(JudgeJob, arena.judge_job_id)


# ---- statistics ---------------------------------------------------------------------------


def wilson(successes: float, n: int, z: float = Z95) -> tuple[float, float] | None:
    """Wilson's score interval for a proportion `successes / n` (successes may be a half
    count: ties), clamped to [0, 1]; None for n = 0."""
    if n <= 0:
        return None
    p = successes / n
    denominator = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denominator
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass
class WinRate:
    wins: int = 0
    losses: int = 0
    ties: int = 0
    failed: int = 0  # pairs whose judgement failed: in no rate

    @property
    def n(self) -> int:
        return self.wins + self.losses + self.ties

    @property
    def rate(self) -> float | None:
        return (self.wins + self.ties / 2) / self.n if self.n else None

    @property
    def interval(self) -> tuple[float, float] | None:
        return wilson(self.wins + self.ties / 2, self.n)

    def add(self, outcome: str) -> None:
        """`outcome` from this model's side: "win", "loss", "tie" or "failed"."""
        if outcome == "win":
            self.wins += 1
        elif outcome == "loss":
            self.losses += 1
        elif outcome == "tie":
            self.ties += 1
        else:
            self.failed += 1

    def merge(self, other: WinRate) -> None:
        self.wins += other.wins
        self.losses += other.losses
        self.ties += other.ties
        self.failed += other.failed


@dataclass
class Mean:
    total: float = 0.0
    n: int = 0

    def add(self, value: float) -> None:
        self.total += value
        self.n += 1

    @property
    def value(self) -> float | None:
        return self.total / self.n if self.n else None


def outcome_for(pair: ArenaPair, side: str) -> str:
    """The pair's outcome for model `side` ("a" or "b")."""
    if not pair.ok or pair.winner not in (PairWinner.A, PairWinner.B, PairWinner.TIE):
        return "failed"
    if pair.winner == PairWinner.TIE:
        return "tie"
    return "win" if pair.winner == side else "loss"


# ---- one arena's results ----------------------------------------------------------------


@dataclass
class ModelResult:
    """One model of an arena: its job, its futures at the fork and their scores."""

    job: SimulationJob
    identity: ModelIdentity
    steps: dict[int, Step]  # sample index -> the future's step at the fork
    branches: dict[int, Branch]  # sample index -> the future
    judgements: dict[int, StepJudgement]  # step id -> its judgement in the arena's judge job
    scores: dict[str, Mean] = field(default_factory=dict)  # dimension (and "total") -> mean
    overall: WinRate = field(default_factory=WinRate)


@dataclass
class PairResult:
    first: ModelResult
    second: ModelResult
    rate: WinRate  # from the first model's side
    pairs: list[ArenaPair]


@dataclass
class ArenaResults:
    arena: ArenaRun
    models: list[ModelResult]
    pairs: list[PairResult]
    judge_job: JudgeJob | None

    def model_of(self, job_id: int) -> ModelResult | None:
        return next((m for m in self.models if m.job.pk == job_id), None)


def arena_jobs(arena: ArenaRun) -> list[SimulationJob]:
    """The arena's simulations, in the order the models were picked."""
    return list(SimulationJob.objects.filter(arena=arena).order_by("pk"))


def arena_results(arena: ArenaRun) -> ArenaResults:
    """Everything the arena page shows, in a few queries."""
    jobs = arena_jobs(arena)
    branches = list(Branch.objects.filter(job__in=jobs).order_by("job_id", "sample_index"))
    steps = {
        s.branch_id: s
        for s in Step.objects.filter(branch__in=branches, index=arena.fork_index).only(
            "pk", "branch_id", "index", "action", "observation", "parse_status", "timings"
        )
    }
    judge_job = (
        JudgeJob.objects.filter(pk=arena.judge_job_id).first() if arena.judge_job_id else None
    )
    judgements: dict[int, StepJudgement] = {}
    if judge_job is not None:
        for j in StepJudgement.objects.filter(job=judge_job).defer("raw").order_by("id"):
            judgements[j.step_id] = j  # one per step and job (the job's unique rule)
    results = []
    for job in jobs:
        mine = [b for b in branches if b.job_id == job.pk]
        result = ModelResult(
            job=job,
            identity=identity_of_job(job),
            steps={b.sample_index: steps[b.pk] for b in mine if b.pk in steps},
            branches={b.sample_index: b for b in mine},
            judgements={},
        )
        for step in result.steps.values():
            judgement = judgements.get(step.pk)
            if judgement is None:
                continue
            result.judgements[step.pk] = judgement
            if not judgement.ok:
                continue
            for dim in DIMENSIONS:
                value = (judgement.scores or {}).get(dim)
                if isinstance(value, int | float):
                    result.scores.setdefault(dim, Mean()).add(float(value))
            if judgement.total_score is not None:
                result.scores.setdefault("total", Mean()).add(float(judgement.total_score))
        results.append(result)
    by_job = {r.job.pk: r for r in results}
    pair_rows = list(ArenaPair.objects.filter(arena=arena).order_by("sample_index", "id"))
    pairs = []
    for first, second in combinations(results, 2):
        rate = WinRate()
        between = [
            p for p in pair_rows if {p.job_a_id, p.job_b_id} == {first.job.pk, second.job.pk}
        ]
        for pair in between:
            side = "a" if pair.job_a_id == first.job.pk else "b"
            rate.add(outcome_for(pair, side))
        pairs.append(PairResult(first, second, rate, between))
    for pair in pair_rows:
        for job_id, side in ((pair.job_a_id, "a"), (pair.job_b_id, "b")):
            if job_id in by_job:
                by_job[job_id].overall.add(outcome_for(pair, side))
    return ArenaResults(arena=arena, models=results, pairs=pairs, judge_job=judge_job)


def planned_pairs(arena: ArenaRun) -> list[tuple[SimulationJob, SimulationJob, int, Step, Step]]:
    """The pairs the arena compares: every two models (in the order picked), every sample
    index at which both have a future with an observation at the fork."""
    jobs = arena_jobs(arena)
    at_fork: dict[tuple[int, int], Step] = {}
    rows = Step.objects.filter(
        branch__job__in=jobs,
        branch__status=BranchStatus.SUCCEEDED,
        index=arena.fork_index,
    ).select_related("branch")
    for step in rows:
        if step.observation:
            at_fork[(step.branch.job_id or 0, step.branch.sample_index)] = step
    planned = []
    for a, b in combinations(jobs, 2):
        for i in range(arena.n):
            if (a.pk, i) in at_fork and (b.pk, i) in at_fork:
                planned.append((a, b, i, at_fork[(a.pk, i)], at_fork[(b.pk, i)]))
    return planned


# ---- the project's roll-up ----------------------------------------------------------------


@dataclass
class RollupRow:
    identity: ModelIdentity
    arenas: set[int] = field(default_factory=set)
    forks: set[tuple[int, int, int]] = field(default_factory=set)  # (trajectory, branch, step)
    futures: int = 0
    scores: dict[str, Mean] = field(default_factory=dict)
    overall: WinRate = field(default_factory=WinRate)

    @property
    def label(self) -> str:
        return self.identity.label


def rollup(project: Project, arenas: Iterable[ArenaRun] | None = None) -> list[RollupRow]:
    """Per model (its `model_key`: endpoint and model, settings apart), over every finished
    (succeeded) arena of the project: mean judge score per dimension, overall win rate
    (ties half) with its interval, and how many arenas, forks and futures it counts. Best
    win rate first; models never compared last."""
    if arenas is None:
        arenas = ArenaRun.objects.filter(project=project, status=JobStatus.SUCCEEDED).order_by("pk")
    rows: dict[str, RollupRow] = {}
    for arena in arenas:
        found = arena_results(arena)
        for model in found.models:
            row = rows.setdefault(model.identity.model_key, RollupRow(model.identity))
            row.arenas.add(arena.pk)
            row.forks.add((arena.trajectory_id, arena.branch_id, arena.fork_index))
            row.futures += len(model.steps)
            for dim, mean in model.scores.items():
                into = row.scores.setdefault(dim, Mean())
                into.total += mean.total
                into.n += mean.n
            row.overall.merge(model.overall)
    ordered = sorted(
        rows.values(),
        key=lambda r: (r.overall.rate is None, -(r.overall.rate or 0.0), r.label),
    )
    return ordered
