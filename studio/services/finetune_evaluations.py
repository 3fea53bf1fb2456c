"""Base vs fine-tuned: a fine-tune's "Evaluate" makes one evaluation run per comparison
source (its held-out trajectories; the AgentWorldBench trajectories imported into the
project) and per model (the base, the fine-tuned one), every run with the same judge, seed,
limit, domains and sampling, so each pair scores the same samples; the figures of a pair
once both ended, over the samples both judged; and the fine-tunes with finished pairs, for
the leaderboard. Every run of a fine-tune leaves out the trajectories it trained on
(`studio.services.evaluations.candidate_steps`)."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction
from django.db.models.fields.json import KT

from inference.judge import DIMENSIONS
from inference.scoring import COLUMNS, normalise, valid_values
from studio.demo_data.scripted_judge import JUDGE_MODEL as SCRIPTED_JUDGE
from studio.models import (
    DOMAINS,
    EndpointRole,
    EvaluationRun,
    FineTuneRun,
    JobStatus,
    Membership,
    ModelEndpoint,
    Project,
    SampleStage,
    Trajectory,
)
from studio.services import job_limits
from studio.services.evaluations import (
    HELDOUT,
    SCORE_KEYS,
    EvaluationData,
    _create_run,
    _number,
    benchmark_files,
)
from studio.services.finetunes import recorded_trajectories

# The comparisons a fine-tune is evaluated on, in the order the page shows them; how its
# runs' names say which one they are.
COMPARISONS = {
    HELDOUT: "Held-out trajectories",
    "benchmark": "AgentWorldBench",
}
RUN_SOURCE_NAMES = {HELDOUT: "held-out", "benchmark": "AgentWorldBench"}
SIDES = {"base": "Base", "tuned": "Fine-tuned"}
NO_BENCHMARK = "import an AgentWorldBench file to compare on the benchmark"
BENCHMARK_TRAINED_ON = (
    "every AgentWorldBench trajectory imported here was trained on: none is left to compare on"
)
ALL_TRAINED_ON = "every recorded trajectory of the project was trained on: nothing is held out"
NONE_HELD_OUT = "this fine-tune holds out no trajectory: none was set aside when it was made"
# the demo's rules-based judge (studio.demo_data.scripted_judge): its figures are not judged
SCRIPTED_JUDGE_NOTE = (
    "judged by the scripted demo judge: text overlap measurements, not a model's judgement"
)


def judged_by_script(*runs: EvaluationRun | None) -> bool:
    """Whether any of the runs was judged by the demo's scripted judge (rules, not a model)."""
    return any(run is not None and run.judge_model == SCRIPTED_JUDGE for run in runs)


class EvaluationRefused(Exception):
    """The fine-tune cannot be evaluated (yet): the message says why."""

    def __init__(self, message: str):
        self.message = message
        super().__init__(message)


@dataclass(frozen=True)
class FineTuneEvaluationData:
    """A validated "Evaluate" (`studio.forms.finetune_evaluations.FineTuneEvaluationForm`)."""

    judge: ModelEndpoint
    sources: list[str]
    limit_per_domain: int = 50
    sample_seed: int = 0
    domains: list[str] = field(default_factory=list)  # empty: every domain


def judges(project: Project) -> Any:
    """The project's judge models (as the evaluation form offers them)."""
    return ModelEndpoint.objects.filter(
        project=project, role=EndpointRole.JUDGE, kind="openai"
    ).order_by("-is_default", "name")


def unavailable(run: FineTuneRun | None, project: Project) -> dict[str, str]:
    """The comparisons the fine-tune cannot be evaluated on, each with why: held-out when
    it holds out no trajectory, the benchmark when the project has no AgentWorldBench
    trajectory it did not train on."""
    trained = list(run.train_trajectory_ids or []) if run is not None else []
    found: dict[str, str] = {}
    if run is None or not run.heldout_trajectory_ids:
        recorded = set(recorded_trajectories(project))
        everything = run is not None and bool(recorded) and recorded <= set(trained)
        found[HELDOUT] = ALL_TRAINED_ON if everything else NONE_HELD_OUT
    if not benchmark_files(project):
        found["benchmark"] = NO_BENCHMARK
    elif (
        trained
        and not Trajectory.objects.filter(project=project, source_format="agentworldbench")
        .exclude(source_file="")
        .exclude(pk__in=trained)
        .exists()
    ):
        found["benchmark"] = BENCHMARK_TRAINED_ON
    return found


def offered(run: FineTuneRun | None, project: Project) -> dict[str, str]:
    """The comparisons the fine-tune can be evaluated on (those `unavailable` leaves)."""
    left_out = unavailable(run, project)
    return {s: label for s, label in COMPARISONS.items() if s not in left_out}


def status_refusal(run: FineTuneRun) -> str:
    """Why a fine-tune that has not succeeded cannot be evaluated yet, for its status
    ("" once it succeeded)."""
    lead = "Evaluate is offered once this fine-tune has succeeded; "
    if run.status == JobStatus.SUCCEEDED:
        return ""
    if run.status == JobStatus.QUEUED:
        return lead + "it is queued and has not started training yet."
    if run.status == JobStatus.RUNNING:
        if run.cancel_requested:
            return lead + "it is being cancelled."
        return lead + "it is still training."
    if run.status == JobStatus.FAILED:
        reason = (run.error or "").strip().splitlines()
        said = reason[0].rstrip(".") if reason else "no reason was recorded"
        if len(said) > 300:
            said = said[:299] + "…"
        if run.phase == "not-trainable":  # its settings or data cannot train: no Resume
            return lead + (
                "it could not train with its settings (the error is on this page): a new "
                "fine-tune with other settings can be started."
            )
        return lead + f"it failed: {said}. It can be resumed, or another started."
    if run.status == JobStatus.CANCELLED:
        return lead + "it was cancelled: it can be resumed, or another started."
    return lead + f"it is {run.get_status_display().lower()}."


def refusal(run: FineTuneRun) -> str:
    """Why the fine-tune cannot be evaluated now ("" when it can)."""
    message = status_refusal(run)
    if message:
        return message
    if run.base_endpoint_id is None:
        return (
            "No base model is registered for this fine-tune, so there is nothing to compare it "
            "with: an admin adds the base model on the Models page."
        )
    if run.endpoint_id is None:
        return "The fine-tuned model was not registered, so it cannot be evaluated."
    for endpoint in (run.base_endpoint, run.endpoint):
        if endpoint is not None and endpoint.kind == "openai" and not endpoint.model:
            return (
                f"The model {endpoint.name!r} names no served model: an admin sets it on the "
                "Models page."
            )
    return ""


def run_name(finetune: FineTuneRun, side: str, source: str, model: ModelEndpoint) -> str:
    """A run's name: the model's (its endpoint's name), then which fine-tune, side and
    comparison it is, e.g. "tiny (base) (base of fine-tune #4, held-out)"."""
    which = f"fine-tune #{finetune.pk}, {RUN_SOURCE_NAMES.get(source, source)}"
    suffix = f" (base of {which})" if side == "base" else f" ({which})"
    return model.name[: 200 - len(suffix)] + suffix


def model_name(run: EvaluationRun | None) -> str:
    """The model a run scored, by its endpoint's name (a path is no name); without the
    endpoint, the model it recorded (a path's last part)."""
    if run is None:
        return ""
    if run.world_endpoint_id is not None and run.world_endpoint is not None:
        return run.world_endpoint.name
    model = run.world_model or run.world_kind
    if "/" in model and (model.startswith(("/", "~", ".")) or model.count("/") > 1):
        return model.rstrip("/").rsplit("/", 1)[-1] or model
    return model


def start_finetune_evaluation(
    run: FineTuneRun, user: Any, data: FineTuneEvaluationData
) -> list[EvaluationRun]:
    """One run per (source, model), base and fine-tuned, made in one transaction with the
    same settings (the caller enqueues them). EvaluationRefused when the fine-tune cannot be
    evaluated; TooManyJobs (nothing made) when they do not fit the project's job limit."""
    message = refusal(run)
    if message:
        raise EvaluationRefused(message)
    project = run.project
    wanted = [s for s in COMPARISONS if s in data.sources]
    left_out = unavailable(run, project)
    missing = [s for s in wanted if s in left_out]
    if missing:
        raise EvaluationRefused(
            "; ".join(f"{COMPARISONS[s]}: {left_out[s]}" for s in missing) + "."
        )
    if not wanted:
        raise EvaluationRefused("Pick a comparison this fine-tune offers.")
    assert run.base_endpoint is not None and run.endpoint is not None  # refusal() saw to it
    batch = uuid.uuid4().hex[:12]
    made = []
    with transaction.atomic():
        job_limits.check_room(project.pk, adding=2 * len(wanted))
        for source in wanted:
            for side, model in (("base", run.base_endpoint), ("tuned", run.endpoint)):
                evaluation = EvaluationData(
                    name=run_name(run, side, source, model),
                    world=model,
                    judge=data.judge,
                    source=source,
                    domains=list(data.domains),
                    limit_per_domain=data.limit_per_domain,
                    sample_seed=data.sample_seed,
                    finetune=run,
                    comparison={"batch": batch, "side": side},
                )
                made.append(_create_run(project, user, evaluation))
    return made


# ---- the figures of a pair ------------------------------------------------------------------


def judged_by_key(run: EvaluationRun) -> dict[str, tuple[str, dict[str, float]]]:
    """The run's judged samples that count (as the scoring counts them), by sample key: the
    domain and the raw score of each column (the five dimensions and the total)."""
    lookups = {f"j_{k}": KT(f"judgement__{k}") for k in SCORE_KEYS}
    found = {}
    judged = run.samples.filter(stage=SampleStage.JUDGED)
    for read in judged.values("key", "domain", **lookups).iterator():
        values: dict[str, Any] = dict(read)
        row = {k: _number(values[f"j_{k}"]) for k in SCORE_KEYS if values[f"j_{k}"] is not None}
        scores = valid_values(row)
        if scores is not None:
            found[values["key"]] = (values["domain"], scores)
    return found


@dataclass(frozen=True)
class Cell:
    """Base and fine-tuned figures (0-100) over the `n` samples both scored on this column,
    and the delta (fine-tuned minus base, from the unrounded means)."""

    base: float | None
    tuned: float | None
    n: int
    delta: float | None = None

    @property
    def delta_text(self) -> str:
        delta = self.delta
        if delta is None:
            return "–"
        return "±0.00" if delta == 0 else f"{delta:+.2f}"


def _cell(pairs: list[tuple[float, float]]) -> Cell:
    if not pairs:
        return Cell(None, None, 0)
    base = sum(b for b, _ in pairs) / len(pairs)
    tuned = sum(t for _, t in pairs) / len(pairs)
    # on the figures' scale: (raw - 1) / 4 * 100, so a difference is (tuned - base) / 4 * 100
    delta = round((tuned - base) / 4 * 100, 2) + 0.0  # + 0.0: no "-0.0"
    return Cell(normalise(base), normalise(tuned), len(pairs), delta)


@dataclass
class Line:
    """One domain (or "overall", pooled over every common sample): a cell per column."""

    name: str
    cells: dict[str, Cell]

    @property
    def total(self) -> Cell:
        return self.cells["total"]

    @property
    def dimensions(self) -> list[tuple[str, Cell]]:
        return [(d, self.cells[d]) for d in DIMENSIONS]


def _line(name: str, keys: Iterable[str], base: dict, tuned: dict) -> Line:
    keys = list(keys)
    cells = {}
    for column in COLUMNS:
        pairs = [
            (base[k][1][column], tuned[k][1][column])
            for k in keys
            if column in base[k][1] and column in tuned[k][1]
        ]
        cells[column] = _cell(pairs)
    return Line(name, cells)


@dataclass
class Comparison:
    """A base run and a fine-tuned run of one source and one "Evaluate"."""

    source: str
    base: EvaluationRun | None
    tuned: EvaluationRun | None
    batch: str = ""
    lines: list[Line] = field(default_factory=list)  # per domain, when both succeeded
    overall: Line | None = None
    common: int = 0  # samples both judged (and counted)
    base_judged: int = 0
    tuned_judged: int = 0

    @property
    def label(self) -> str:
        return COMPARISONS.get(self.source, self.source)

    @property
    def done(self) -> bool:
        return self.overall is not None

    @property
    def runs(self) -> list[EvaluationRun]:
        return [r for r in (self.base, self.tuned) if r is not None]

    @property
    def base_model(self) -> str:
        return model_name(self.base)

    @property
    def tuned_model(self) -> str:
        return model_name(self.tuned)

    @property
    def scripted(self) -> bool:
        """Judged (on either side) by the demo's scripted judge, not a model."""
        return judged_by_script(self.base, self.tuned)

    @property
    def scripted_note(self) -> str:
        return SCRIPTED_JUDGE_NOTE if self.scripted else ""

    @property
    def same_samples(self) -> bool:
        """Both drew the same sample set (their digests are equal)."""
        if self.base is None or self.tuned is None or not self.base.sample_set:
            return False
        return self.base.sample_set == self.tuned.sample_set

    @property
    def dimension_rows(self) -> list[dict[str, Any]]:
        """Per dimension: the overall cell, then one per domain (for a table by dimension)."""
        if self.overall is None:
            return []
        return [
            {
                "dimension": d,
                "overall": self.overall.cells[d],
                "domains": [line.cells[d] for line in self.lines],
            }
            for d in DIMENSIONS
        ]


def compare(comparison: Comparison) -> Comparison:
    """Fill in the figures when both runs succeeded: only samples both judged (the same
    keys) count, and each cell says over how many."""
    base, tuned = comparison.base, comparison.tuned
    if not (base and tuned and base.status == tuned.status == JobStatus.SUCCEEDED):
        return comparison
    base_rows, tuned_rows = judged_by_key(base), judged_by_key(tuned)
    common = sorted(set(base_rows) & set(tuned_rows))
    by_domain: dict[str, list[str]] = {}
    for key in common:
        by_domain.setdefault(base_rows[key][0], []).append(key)
    order = {d: i for i, d in enumerate(DOMAINS)}
    comparison.lines = [
        _line(domain, keys, base_rows, tuned_rows)
        for domain, keys in sorted(by_domain.items(), key=lambda kv: (order.get(kv[0], 99), kv[0]))
    ]
    comparison.overall = _line("overall", common, base_rows, tuned_rows)
    comparison.common = len(common)
    comparison.base_judged = len(base_rows)
    comparison.tuned_judged = len(tuned_rows)
    return comparison


def _side(run: EvaluationRun, finetune: FineTuneRun) -> str:
    side = ((run.params or {}).get("comparison") or {}).get("side")
    if side in SIDES:
        return side
    if run.world_endpoint_id is not None and run.world_endpoint_id == finetune.endpoint_id:
        return "tuned"
    return "base"


def comparisons(finetune: FineTuneRun, runs: list[EvaluationRun] | None = None) -> list[Comparison]:
    """The fine-tune's evaluations as pairs, newest "Evaluate" first, then by source; the
    figures of each pair whose runs both succeeded."""
    if runs is None:
        runs = list(
            EvaluationRun.objects.filter(finetune=finetune)
            .select_related("world_endpoint")
            .order_by("-created_at", "-pk")
        )
    pairs: dict[tuple[str, str], Comparison] = {}
    for run in runs:  # newest first: a pair's newest run of each side
        batch = ((run.params or {}).get("comparison") or {}).get("batch") or f"run-{run.pk}"
        pair = pairs.setdefault((batch, run.source), Comparison(run.source, None, None, batch))
        if _side(run, finetune) == "base":
            pair.base = pair.base or run
        else:
            pair.tuned = pair.tuned or run
    order = list(COMPARISONS)
    batches = list(dict.fromkeys(batch for batch, _ in pairs))
    ordered = sorted(
        pairs.values(),
        key=lambda c: (
            batches.index(c.batch),
            order.index(c.source) if c.source in order else 99,
        ),
    )
    return [compare(c) for c in ordered]


def lineage(finetune: FineTuneRun) -> list[tuple[str, str]]:
    """What the fine-tuned model is, in words: its data, method and settings, its code and
    its base."""
    method = finetune.get_method_display()
    if finetune.method == "lora":
        method += f" (rank {finetune.lora_rank}, alpha {finetune.lora_alpha})"
    # a step limit overrides the epochs (the trainer stops at max_steps whatever they make)
    max_steps = (finetune.settings or {}).get("max_steps")
    training = (
        ("Training", f"at most {max_steps} step{'s' if max_steps != 1 else ''}")
        if max_steps
        else ("Epochs", f"{finetune.epochs:g}")
    )
    base = finetune.base_model
    if finetune.base_endpoint is not None:
        base = f"{finetune.base_endpoint.name} ({finetune.base_model})"
    return [
        ("Dataset", f"{finetune.dataset_name} v{finetune.version_number}"),
        ("Method", method),
        training,
        ("Learning rate", f"{finetune.learning_rate:g}"),
        ("Seed", str(finetune.seed)),
        ("Code version", finetune.code_version or "not recorded"),
        ("Base model", base),
    ]


def evaluation_context(run: FineTuneRun, membership: Membership, form: Any = None) -> dict:
    """What `templates/finetunes/_evaluate.html` needs on the fine-tune page, under one key
    (`ft_eval`); `form`: a bound "Evaluate" form with its errors (else a new one)."""
    from studio.forms.finetune_evaluations import FineTuneEvaluationForm

    project = run.project
    found = comparisons(run)
    runs = [r for c in found for r in c.runs]
    left_out = unavailable(run, project)
    return {
        "ft_eval": {
            "finetune": run,
            "label": f"#{run.pk} {run.name}",
            "can_edit": membership.can_edit,
            # the fine-tune is not done: the section shows why (to everyone) and is fetched
            # again when the run page says it ended ("finetune-ended")
            "not_done": status_refusal(run),
            "refusal": refusal(run),
            "form": form or FineTuneEvaluationForm(project=project, finetune=run),
            "has_judge": judges(project).exists(),
            "offered": {s: c for s, c in COMPARISONS.items() if s not in left_out},
            "no_heldout": left_out.get(HELDOUT, ""),
            "no_benchmark": left_out.get("benchmark", ""),
            "comparisons": found,
            "running": any(not r.is_finished for r in runs),
            "trained_on": len(run.train_trajectory_ids or []),
            "heldout": len(run.heldout_trajectory_ids or []),
            "dimensions": list(DIMENSIONS),
        }
    }


# ---- the leaderboard's section --------------------------------------------------------------


@dataclass
class BoardEntry:
    """A fine-tune with finished comparisons: the newest finished pair of each source."""

    finetune: FineTuneRun
    lineage: list[tuple[str, str]]
    comparisons: list[Comparison]


def leaderboard_entries(project: Project) -> list[BoardEntry]:
    """The project's fine-tunes with at least one pair whose runs both succeeded, newest
    fine-tune first."""
    runs = list(
        EvaluationRun.objects.filter(
            project=project, finetune__isnull=False, status=JobStatus.SUCCEEDED
        )
        .select_related("world_endpoint")
        .order_by("-created_at", "-pk")
    )
    by_finetune: dict[int, list[EvaluationRun]] = {}
    for run in runs:
        by_finetune.setdefault(run.finetune_id, []).append(run)  # type: ignore[arg-type]
    finetunes = FineTuneRun.objects.filter(pk__in=list(by_finetune)).select_related(
        "base_endpoint", "endpoint"
    )
    entries = []
    for finetune in finetunes.order_by("-created_at", "-pk"):
        newest: dict[str, Comparison] = {}
        for comparison in comparisons(finetune, by_finetune[finetune.pk]):
            if comparison.done and comparison.source not in newest:
                newest[comparison.source] = comparison
        if newest:
            entries.append(BoardEntry(finetune, lineage(finetune), list(newest.values())))
    return entries
