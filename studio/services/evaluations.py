"""World-model evaluations, web side: make a run (the caller enqueues it), cancel, resume;
which recorded steps become samples; the AgentWorldBench row of a sample, rebuilt from its
trajectory; the figures of a run and the leaderboard of a project. The worker side is
`studio.jobs.evaluations`; the figures are computed by `inference.scoring`, as the reference
pipeline computes them."""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction
from django.db.models import Count, F
from django.db.models.fields.json import KT

from inference.judge import DIMENSIONS
from inference.scoring import score_rows
from studio.models import (
    DOMAINS,
    EvaluationRun,
    EvaluationSample,
    FineTuneRun,
    JobStatus,
    ModelEndpoint,
    Project,
    Provenance,
    SampleStage,
    Step,
    Trajectory,
)
from studio.queues import queue_name
from studio.services import job_limits
from studio.services.jobs import STOPPED, reopen, request_cancel

SOURCES = {
    "recorded": "Every recorded trajectory of the project",
    "benchmark": "Only trajectories imported from AgentWorldBench files",
}
# Made only from a fine-tune's "Evaluate" (not offered by the general form): its held-out
# trajectories, which no training item comes from.
HELDOUT = "heldout"
ALL_SOURCES = {**SOURCES, HELDOUT: "The held-out trajectories of a fine-tune (never trained on)"}
MAX_SAMPLES_PER_DOMAIN = 5000


@dataclass(frozen=True)
class EvaluationData:
    """A validated request for a run (`studio.forms.evaluations.EvaluationForm` makes it)."""

    name: str
    world: ModelEndpoint
    judge: ModelEndpoint
    source: str = "recorded"
    files: list[str] = field(default_factory=list)  # benchmark source: these files (empty: all)
    domains: list[str] = field(default_factory=list)  # empty: all
    limit_per_domain: int = 50
    # with the source, files, domains and limit, fixes the samples: the same five, the same set
    sample_seed: int = 0
    temperature: float = 0.6
    max_tokens: int = 32768
    top_p: float | None = None
    judge_temperature: float = 0.6
    judge_max_tokens: int = 32768
    concurrency: int = 8
    # a run of a fine-tune's "Evaluate": the fine-tune (its held-out split is the "heldout"
    # source; the trajectories it trained on are left out of every source) and which
    # comparison it is part of ({"batch": ..., "side": "base" | "tuned"})
    finetune: FineTuneRun | None = None
    comparison: dict[str, str] = field(default_factory=dict)


def start_evaluation(project: Project, user, data: EvaluationData) -> EvaluationRun:
    """The run's row (the caller enqueues it); TooManyJobs when the project has as many
    jobs at once as it may."""
    with transaction.atomic():
        job_limits.check_room(project.pk)
        return _create_run(project, user, data)


def _create_run(project: Project, user, data: EvaluationData) -> EvaluationRun:
    return EvaluationRun.objects.create(
        project=project,
        requester=user,
        name=data.name,
        world_endpoint=data.world,
        world_kind=data.world.kind,
        world_model=data.world.model,
        world_base_url=data.world.base_url,
        judge_endpoint=data.judge,
        judge_model=data.judge.model,
        judge_base_url=data.judge.base_url,
        params={
            "temperature": data.temperature,
            "max_tokens": data.max_tokens,
            **({"top_p": data.top_p} if data.top_p is not None else {}),
            "judge_temperature": data.judge_temperature,
            "judge_max_tokens": data.judge_max_tokens,
            **({"files": list(data.files)} if data.files else {}),
            **({"comparison": dict(data.comparison)} if data.comparison else {}),
        },
        source=data.source,
        finetune=data.finetune,
        domains=list(data.domains),
        limit_per_domain=data.limit_per_domain,
        sample_seed=data.sample_seed,
        concurrency=data.concurrency,
        # an in-process model runs on a gpu worker; served ones and the baseline anywhere
        queue=queue_name("gpu" if data.world.kind == "hf" else "default"),
    )


def cancel_evaluation(run: EvaluationRun) -> None:
    """A queued run ends at once; a running one stops after the requests in flight (its
    finished samples are kept)."""
    request_cancel(EvaluationRun, run.pk)


def resume_evaluation(run: EvaluationRun) -> bool:
    """A run that stopped (failed, cancelled, its worker lost) goes on with the samples not
    done yet, and tries the failed ones again (a model fixed meanwhile); the finished ones
    are kept. The caller enqueues it. TooManyJobs (nothing changed) when the project has
    as many jobs at once as it may."""
    with transaction.atomic():
        if EvaluationRun.objects.filter(pk=run.pk, status__in=STOPPED).exists():
            job_limits.check_room(run.project_id)  # one more job at once
        resumed = reopen(EvaluationRun, run.pk)
        if resumed:
            run.samples.filter(stage=SampleStage.INFER_FAILED).update(
                stage=SampleStage.PENDING, error=""
            )
            run.samples.filter(stage=SampleStage.JUDGE_FAILED).exclude(gen="").update(
                stage=SampleStage.PREDICTED, error="", judgement={}, total_score=None
            )
    return resumed


# ---- samples --------------------------------------------------------------------------------


def benchmark_files(project: Project) -> list[str]:
    """The AgentWorldBench files imported into the project (by the name they had)."""
    return list(
        Trajectory.objects.filter(project=project, source_format="agentworldbench")
        .exclude(source_file="")
        .values_list("source_file", flat=True)
        .distinct()
        .order_by("source_file")
    )


@dataclass(frozen=True)
class Candidate:
    """A recorded step a run may sample. `identity` names it apart from database ids (the
    trajectory's import identity, its content hash, and the step's index), so the draw does
    not depend on the order rows were written in."""

    trajectory_id: int
    step_index: int
    domain: str
    identity: str


def candidate_steps(run: EvaluationRun) -> list[Candidate]:
    """The recorded steps a run may sample: on each trajectory's recorded branch, with a
    recorded observation; by domain, then identity. A run of a fine-tune never samples a
    trajectory the fine-tune trained on; its "heldout" source reads only the held-out split
    (nothing, once the fine-tune is gone)."""
    trajectories = Trajectory.objects.filter(project_id=run.project_id)
    finetune = run.finetune if run.finetune_id is not None else None
    if run.source == HELDOUT:
        trajectories = trajectories.filter(
            pk__in=list(finetune.heldout_trajectory_ids) if finetune is not None else []
        )
    if finetune is not None and finetune.train_trajectory_ids:
        trajectories = trajectories.exclude(pk__in=list(finetune.train_trajectory_ids))
    if run.source == "benchmark":
        trajectories = trajectories.filter(source_format="agentworldbench")
        files = (run.params or {}).get("files")
        if files:
            trajectories = trajectories.filter(source_file__in=files)
    if run.domains:
        trajectories = trajectories.filter(domain__in=run.domains)
    found = Step.objects.filter(
        branch__trajectory__in=trajectories,
        branch__parent__isnull=True,
        provenance=Provenance.RECORDED,
    ).exclude(observation="")
    candidates = [
        Candidate(t, i, d, f"{key}:{i}")
        for t, i, d, key in found.values_list(
            "branch__trajectory_id",
            "index",
            "branch__trajectory__domain",
            "branch__trajectory__source_key",
        )
    ]
    return sorted(candidates, key=lambda c: (c.domain, c.identity))


@dataclass
class SampleSet:
    """The samples a run scores, the digest that names them (`EvaluationRun.sample_set`) and
    how many steps of each domain they were drawn from."""

    samples: list[EvaluationSample]
    digest: str
    pool: dict[str, int]


def sample_set_digest(identities: list[str]) -> str:
    """sha256 of the sorted identities of the samples: two runs with the same digest scored
    the same steps."""
    return hashlib.sha256("\n".join(sorted(identities)).encode()).hexdigest()


def draw_samples(run: EvaluationRun) -> SampleSet:
    """At most `limit_per_domain` steps of each domain, drawn with the run's `sample_seed`
    from the candidates in a fixed order: the same source (and files), domains, limit and
    seed give the same samples, whatever the run and whenever it is made."""
    by_domain: dict[str, list[Candidate]] = {}
    for candidate in candidate_steps(run):
        by_domain.setdefault(candidate.domain, []).append(candidate)
    chosen: list[EvaluationSample] = []
    identities: list[str] = []
    for domain, steps in sorted(by_domain.items()):
        picked = steps
        if len(steps) > run.limit_per_domain:
            # a string seed: random hashes it with sha512, the same in every process
            rng = random.Random(f"{run.sample_seed}-{domain}")
            picked = sorted(rng.sample(steps, run.limit_per_domain), key=lambda c: c.identity)
        identities += [c.identity for c in picked]
        chosen += [
            EvaluationSample(
                run=run,
                domain=domain,
                trajectory_id=c.trajectory_id,
                step_index=c.step_index,
                key=f"{c.trajectory_id}:{c.step_index}",
            )
            for c in picked
        ]
    pool = {domain: len(steps) for domain, steps in sorted(by_domain.items())}
    return SampleSet(chosen, sample_set_digest(identities), pool)


def sample_set_of_saved(run: EvaluationRun) -> str:
    """The digest of a run's saved samples (a run sampled before digests were kept); a
    sample whose trajectory was deleted counts by its key."""
    identities = [
        f"{source_key}:{index}" if source_key is not None else f"deleted:{key}"
        for source_key, index, key in run.samples.values_list(
            "trajectory__source_key", "step_index", "key"
        )
    ]
    return sample_set_digest(identities)


def rows_of(trajectory: Trajectory) -> list[dict[str, Any]]:
    """The AgentWorldBench row of every step of the trajectory's recorded branch, as the
    reference pipeline reads rows: `prompt` and `response` hold every turn (imported
    AgentWorldBench turns verbatim, others in the studio's turn format), `turn_idx` is the
    step's turn, `system_str` the world-model system prompt."""
    from inference.prompts import format_observation, format_turn_prompt
    from studio.services.simulation import system_prompt_for, turn_of

    steps = list(
        trajectory.root_branch.all_steps().only(
            "index", "action", "observation", "state", "raw_prompt", "meta"
        )
    )
    task = trajectory.task_instruction or ""
    prompts, responses = [], []
    for number, step in enumerate(steps, 1):
        turn = turn_of(step)
        prompts.append(format_turn_prompt(number, turn, task))
        responses.append(format_observation(turn, number))
    base = {
        "task": trajectory.domain,
        "id": str(trajectory.pk),
        "system_str": system_prompt_for(trajectory),
        "prompt": prompts,
        "response": responses,
        "total_turns": len(steps),
    }
    return [
        {**base, "turn_idx": position + 1, "step_index": step.index}
        for position, step in enumerate(steps)
    ]


def row_of(sample: EvaluationSample) -> dict[str, Any] | None:
    """One sample's row (None when its trajectory was deleted)."""
    if sample.trajectory is None:
        return None
    for row in rows_of(sample.trajectory):
        if row["step_index"] == sample.step_index:
            return row
    return None


# ---- figures ----------------------------------------------------------------------------------


SCORE_KEYS = (*DIMENSIONS, "total_score", "failed")


def judged_rows(run: EvaluationRun) -> Iterator[dict[str, Any]]:
    """The run's finished samples as judged rows (the reference's fields), for the scoring:
    a sample not done yet (waiting, or predicted and waiting for the judge) is left out, not
    counted as failed. Only the score keys are read (not the judge's whole answer)."""
    lookups = {f"j_{k}": KT(f"judgement__{k}") for k in SCORE_KEYS}
    finished = run.samples.exclude(stage__in=[SampleStage.PENDING, SampleStage.PREDICTED])
    for values in finished.values("domain", "stage", **lookups).iterator():
        found: dict[str, Any] = dict(values)
        row: dict[str, Any] = {"task": found["domain"]}
        for key in SCORE_KEYS:
            value = found[f"j_{key}"]
            if value is not None:
                row[key] = _number(value)
        if found["stage"] != SampleStage.JUDGED:
            row["failed"] = 1.0
        yield row


def _number(value: Any) -> Any:
    """A JSON number read through a key lookup (it may come back as text)."""
    if isinstance(value, str):
        try:
            return float(value) if "." in value else int(value)
        except ValueError:
            return value
    return value


def figures(run: EvaluationRun) -> dict[str, Any]:
    return score_rows(list(judged_rows(run)))


def sample_counts(run: EvaluationRun) -> dict[str, int]:
    counts = dict.fromkeys(SampleStage.values, 0)
    for row in run.samples.values("stage").annotate(n=Count("pk")):
        counts[row["stage"]] = row["n"]
    return counts


def samples_for(run: EvaluationRun, domain: str = "", order: str = "score") -> Any:
    rows = run.samples.select_related("trajectory")
    if domain:
        rows = rows.filter(domain=domain)
    # unscored samples (failed, not done) last either way, on every database
    if order == "score":  # worst first
        return rows.order_by(F("total_score").asc(nulls_last=True), "trajectory_id", "step_index")
    if order == "-score":
        return rows.order_by(F("total_score").desc(nulls_last=True), "trajectory_id", "step_index")
    return rows.order_by("trajectory_id", "step_index")


def same_sample_in(other: EvaluationRun, sample: EvaluationSample) -> EvaluationSample | None:
    return other.samples.filter(key=sample.key).first()


def runs_with_sample(sample: EvaluationSample) -> Any:
    """The project's other runs that scored the same step (to set side by side)."""
    return (
        EvaluationRun.objects.filter(project_id=sample.run.project_id, samples__key=sample.key)
        .exclude(pk=sample.run_id)
        .order_by("-created_at")
    )


@dataclass
class LeaderRow:
    label: str
    run: EvaluationRun | None  # None: published figures
    cells: dict[str, dict[str, Any]]  # domain (and "overall") -> figures
    note: str = ""
    samples: int | None = None  # the samples of its set (None: published, not known here)


@dataclass
class LeaderGroup:
    """The rows scored on one sample set (ranked among themselves), or the published ones.
    `full`: every run of the set scored every recorded step of all seven domains of the
    AgentWorldBench files imported here (no file, domain or limit left any out)."""

    key: str  # the sample set's digest, or "published"
    rows: list[LeaderRow]
    samples: int | None = None
    full: bool = False

    @property
    def published(self) -> bool:
        return self.key == "published"

    @property
    def runs(self) -> list[EvaluationRun]:
        return [r.run for r in self.rows if r.run is not None]


def is_full_benchmark(run: EvaluationRun) -> bool:
    """Whether the run scored every recorded step of the seven domains of the AgentWorldBench
    files imported into its project: what the published figures were scored on, as far as
    this project holds the benchmark."""
    params = run.params or {}
    pool = params.get("sample_pool")
    if run.source != "benchmark" or params.get("files") or run.domains or not pool:
        return False
    if set(pool) != set(DOMAINS):
        return False
    if run.finetune_id is not None and trained_on_benchmark(run):
        return False  # its training trajectories were left out of the benchmark
    return all(count <= run.limit_per_domain for count in pool.values())


def trained_on_benchmark(run: EvaluationRun) -> bool:
    """Whether the fine-tune of the run trained on trajectories imported from AgentWorldBench
    files (which its runs then leave out)."""
    finetune = run.finetune
    if finetune is None or not finetune.train_trajectory_ids:
        return False
    return Trajectory.objects.filter(
        pk__in=list(finetune.train_trajectory_ids), source_format="agentworldbench"
    ).exists()


def _rank(row: LeaderRow) -> tuple[float, float]:
    """By the overall figure; runs without every domain (no overall) after, by their pooled
    figure."""
    cell = row.cells.get("overall", {})
    total, pooled = cell.get("total"), cell.get("pooled")
    return (-1.0 if total is None else float(total), -1.0 if pooled is None else float(pooled))


def leaderboard(project: Project) -> list[LeaderGroup]:
    """The project's finished runs, grouped by the sample set they scored (runs are ranked
    only against runs that scored the same samples), newest set first; then the published
    figures, a group of their own. Within a group, best overall first."""
    from studio.services.published import PUBLISHED, PUBLISHED_SOURCE

    groups: dict[str, LeaderGroup] = {}
    runs = (
        EvaluationRun.objects.filter(project=project, status=JobStatus.SUCCEEDED)
        .select_related("world_endpoint", "finetune")
        .order_by("-created_at", "-pk")
    )
    for run in runs:
        result = run.results or figures(run)
        domains = result.get("domains", {})
        pooled = result.get("overall", {})
        totals = [domains.get(d, {}).get("total") for d in DOMAINS]
        # as the published table: the mean of the seven domain figures (a run without every
        # domain has none); the pooled figure `score` prints is on the run's page
        mean = round(sum(totals) / len(totals), 2) if all(t is not None for t in totals) else None
        cells = {**domains, "overall": {**pooled, "total": mean, "pooled": pooled.get("total")}}
        # a run sampled before sample sets were kept: named by what it holds (GET never
        # writes, so it is not stored here)
        digest = run.sample_set or sample_set_of_saved(run)
        group = groups.setdefault(digest, LeaderGroup(digest, [], run.samples_total, True))
        group.full = group.full and is_full_benchmark(run)
        group.rows.append(
            LeaderRow(run.name, run, cells, run.world_model or run.world_kind, run.samples_total)
        )
    published = LeaderGroup(
        "published",
        [
            LeaderRow(
                model,
                None,
                {d: {"total": v, "published": True} for d, v in row.items()},
                PUBLISHED_SOURCE,
            )  # fmt: skip
            for model, row in PUBLISHED.items()
        ],
    )
    ordered = [*groups.values(), published]
    for group in ordered:
        group.rows.sort(key=_rank, reverse=True)
    return ordered


LEADER_COLUMNS = [*DOMAINS, "overall"]
DIMENSION_COLUMNS = list(DIMENSIONS)
