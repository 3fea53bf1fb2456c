"""Fine-tune runs: making one (its split, its base model as a registered endpoint, its
lineage, in one transaction), stopping and resuming it, and registering the model it trained.
The training is `studio.jobs.finetunes` (in a gpu worker, or in `manage.py finetune`'s
process); the words and keys are those of `studio.models.finetunes`.

The split is fixed when the run is made: the trajectories the version's items come from are
the training trajectories; the held-out ones are recorded trajectories of the project (with a
recorded step on their root branch) that none of the items come from, drawn with the run's
seed. Nothing here imports torch: the tiny base model is built by the worker that trains."""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import transaction

# the trainer's bounds, which the form's fields name too (that module imports torch only
# inside its training functions: the web process never does)
from inference.finetune import (  # noqa: F401 - the bounds are the form's too
    MAX_LORA_RANK,
    MAX_MAX_LENGTH,
    MAX_SEED,
    MAX_STEPS,
    FineTuneConfig,
)
from studio.models import (
    DatasetVersion,
    EndpointRole,
    FineTuneMethod,
    FineTuneRun,
    JobStatus,
    ModelEndpoint,
    Project,
    Provenance,
    Step,
)
from studio.queues import queue_name

TINY = "tiny"
TINY_FOLDER = "tiny-qwen3_5_moe"
DEFAULT_HELDOUT = 20
MAX_HELDOUT = 10_000
ROOT = Path(__file__).resolve().parents[2]
# The phase of a run that failed on its settings or its data (the trainer's ValueError before
# its first step, or `NothingToTrain`): Resume would fail the same way, so none is offered.
NOT_TRAINABLE = "not-trainable"
# Keys of `FineTuneRun.settings` the job adds beside the trainer's config (no field of their
# own): "fit", how many rows were trimmed or left out to fit max_length, once known; and
# "resumed_from", the checkpoint step of every resume, in order.
FIT_KEY = "fit"
RESUMES_KEY = "resumed_from"
RUN_KEYS = (FIT_KEY, RESUMES_KEY)


# the trainer's field names (`FineTuneConfig.validate`'s messages) in the form's words
FIELD_WORDS = {
    "base_model": "base model",
    "method": "method",
    "lora_rank": "LoRA rank",
    "lora_alpha": "LoRA alpha",
    "lora_targets": "LoRA target modules",
    "epochs": "epochs",
    "learning_rate": "learning rate",
    "max_length": "max length",
    "seed": "seed",
    "max_steps": "max steps",
}


class FineTuneError(ValueError):
    """What is wrong with a fine-tune's input; the message starts with the field it is about."""


@dataclass(frozen=True)
class FineTuneData:
    name: str
    dataset_version: DatasetVersion
    # "tiny" (the tiny model built in code), a local path, or the model of `base_endpoint`
    base: str
    base_endpoint: ModelEndpoint | None = None
    method: str = FineTuneMethod.LORA
    lora_rank: int = 8
    lora_alpha: int = 16
    lora_targets: tuple[str, ...] = ()  # () = every linear layer
    epochs: float = 1.0
    learning_rate: float = 2e-4
    max_length: int = 2048
    seed: int = 0
    heldout: int = DEFAULT_HELDOUT
    max_steps: int | None = None  # stop after this many optimizer steps (None: the epochs)
    output_dir: str = ""  # blank: STUDIO_DATA_DIR/finetunes/<id>


def tiny_model_path() -> Path:
    """Where the tiny base model lives (built by the first worker that trains on it)."""
    return Path(settings.DATA_DIR) / "models" / TINY_FOLDER


def base_path(data: FineTuneData) -> str:
    if data.base_endpoint is not None:
        return data.base_endpoint.model
    if data.base == TINY:
        return str(tiny_model_path())
    return data.base


def run_folder(run: FineTuneRun) -> Path:
    return Path(run.output_dir)


def new_run_folder(pk: int) -> Path:
    """STUDIO_DATA_DIR/finetunes/<id>-<random>: never a folder an earlier run left (a database
    made again hands out its ids again, and a run goes on from the checkpoints it finds)."""
    return Path(settings.DATA_DIR) / "finetunes" / f"{pk}-{uuid.uuid4().hex[:8]}"


def code_version() -> str:
    """The studio's package version and, where the checkout's .git is readable, its commit
    ("0.1.0+3f2a9c1d0b7e"); read from files, never by running git."""
    try:
        version = metadata.version("agentworld-studio")
    except metadata.PackageNotFoundError:
        version = "unknown"
    commit = _git_commit(ROOT / ".git")
    return f"{version}+{commit[:12]}" if commit else version


def _git_commit(git: Path) -> str:
    try:
        if git.is_file():  # a worktree: "gitdir: <path>"
            git = Path(git.read_text().split(":", 1)[1].strip())
        head = (git / "HEAD").read_text().strip()
        if not head.startswith("ref:"):
            return head
        ref = head.split(":", 1)[1].strip()
        loose = git / ref
        if loose.is_file():
            return loose.read_text().strip()
        common = git / "commondir"
        base = (git / common.read_text().strip()) if common.is_file() else git
        if (base / ref).is_file():
            return (base / ref).read_text().strip()
        for line in (base / "packed-refs").read_text().splitlines():
            if line.endswith(" " + ref):
                return line.split(" ", 1)[0]
    except (OSError, IndexError):
        pass
    return ""


# ---- the split ----------------------------------------------------------------------------


def train_trajectories(version: DatasetVersion) -> list[int]:
    """The trajectories the version's items come from (their steps' branches'), sorted."""
    ids = version.items.exclude(step__isnull=True).values_list(
        "step__branch__trajectory_id", flat=True
    )
    return sorted({int(i) for i in ids if i is not None})


def recorded_trajectories(project: Project) -> list[int]:
    """The project's recorded trajectories: those with a recorded step (and observation) on
    their root branch, as an evaluation of recorded steps samples them; sorted."""
    ids = (
        Step.objects.filter(
            branch__trajectory__project=project,
            branch__parent__isnull=True,
            provenance=Provenance.RECORDED,
        )
        .exclude(observation="")
        .values_list("branch__trajectory_id", flat=True)
        .distinct()
    )
    return sorted({int(i) for i in ids})


def heldout_split(project: Project, train: list[int], count: int, seed: int) -> list[int]:
    """Up to `count` recorded trajectories of the project that are not in `train`, drawn
    with random.Random(seed) from the sorted candidates: the same draw for the same data and
    seed. Sorted."""
    trained = set(train)
    pool = [t for t in recorded_trajectories(project) if t not in trained]
    if count >= len(pool):
        return pool
    return sorted(random.Random(seed).sample(pool, count))


# ---- making one ---------------------------------------------------------------------------


def trainer_settings(data: FineTuneData) -> dict[str, Any]:
    """What the trainer is given (`inference.finetune.FineTuneConfig`'s fields), as a dict."""
    return {
        "base_model": base_path(data),
        "method": data.method,
        "lora_rank": int(data.lora_rank),
        "lora_alpha": int(data.lora_alpha),
        "lora_dropout": 0.0,
        "lora_targets": list(data.lora_targets),
        "epochs": float(data.epochs),
        "learning_rate": float(data.learning_rate),
        "max_length": int(data.max_length),
        "batch_size": 1,
        "grad_accum": 1,
        "seed": int(data.seed),
        "max_steps": data.max_steps,
        "save_every": 20,
        "logging_every": 1,
    }


def check(project: Project, data: FineTuneData) -> None:
    """FineTuneError naming the field for what a form cannot see (the other callers, the
    command, go through here too)."""
    name = (data.name or "").strip()
    if not name:
        raise FineTuneError("name: a fine-tune needs a name")
    if len(name) > 200:
        raise FineTuneError("name: at most 200 characters")
    version = data.dataset_version
    if version is None or version.dataset.project_id != project.pk:
        raise FineTuneError("dataset version: not a dataset version of this project")
    if not version.items.exclude(step__isnull=True).exists():
        raise FineTuneError(
            f"dataset version: {version.dataset.name} v{version.number} has no step to train on"
        )
    if data.method not in FineTuneMethod.values:
        raise FineTuneError(f"method: one of {', '.join(FineTuneMethod.values)}")
    endpoint = data.base_endpoint
    if endpoint is not None and (
        endpoint.project_id != project.pk
        or endpoint.role != EndpointRole.WORLD
        or endpoint.kind != "hf"
    ):
        raise FineTuneError("base model: not an in-process (hf) world model of this project")
    if endpoint is None and data.base != TINY and not Path(data.base).is_absolute():
        raise FineTuneError("base model: an absolute path to a model folder, or tiny")
    if not 0 <= int(data.heldout) <= MAX_HELDOUT:
        raise FineTuneError(f"held-out trajectories: a whole number from 0 to {MAX_HELDOUT}")
    try:
        trainer_config(trainer_settings(data)).validate()
    except ValueError as exc:
        field, _, problem = str(exc).partition(":")
        words = FIELD_WORDS.get(field.strip(), field.strip())
        raise FineTuneError(f"{words}: {problem.strip()}") from None


def trainer_config(settings_dict: dict[str, Any]) -> FineTuneConfig:
    """The trainer's config of a run's settings (`inference.finetune.FineTuneConfig`; that
    module imports torch only inside its training functions, never here)."""
    return FineTuneConfig.from_dict(settings_dict)


def _unique_name(wanted: str, taken: set[str], limit: int = 100) -> str:
    """`wanted` (cut to `limit` characters), or with " (2)", " (3)"... when `taken` has it."""
    base = wanted.strip()[:limit] or "model"
    if base not in taken:
        return base
    n = 2
    while True:
        suffix = f" ({n})"
        candidate = base[: limit - len(suffix)] + suffix
        if candidate not in taken:
            return candidate
        n += 1


def unique_endpoint_name(project: Project, wanted: str) -> str:
    """`wanted` (cut to the field's 100 characters), or with " (2)", " (3)"... when another
    model of the project has that name."""
    names = set(ModelEndpoint.objects.filter(project=project).values_list("name", flat=True))
    return _unique_name(wanted, names)


def default_run_name(project: Project, wanted: str) -> str:
    """A name no fine-tune and no model of the project has (`wanted`, or with " (2)", " (3)"...;
    at most an endpoint name's 100 characters): the run, the model it registers (named after
    it), the leaderboard and the serving lines' module name then all differ from another
    run's."""
    taken = set(FineTuneRun.objects.filter(project=project).values_list("name", flat=True))
    taken |= set(ModelEndpoint.objects.filter(project=project).values_list("name", flat=True))
    return _unique_name(wanted, taken)


def base_endpoint_for(project: Project, path: str, user: Any, *, tiny: bool) -> ModelEndpoint:
    """The project's in-process world model whose model is `path`, made when it has none (so
    "base vs fine-tuned" evaluations can run the base)."""
    found = (
        ModelEndpoint.objects.filter(
            project=project, role=EndpointRole.WORLD, kind="hf", model=path
        )
        .order_by("pk")
        .first()
    )
    if found is not None:
        return found
    wanted = f"{TINY_FOLDER} (base)" if tiny else f"{Path(path).name or path} (base)"
    return ModelEndpoint.objects.create(
        project=project,
        name=unique_endpoint_name(project, wanted),
        role=EndpointRole.WORLD,
        kind="hf",
        model=path,
        created_by=user if getattr(user, "pk", None) else None,
        is_default=not project.endpoints.filter(role=EndpointRole.WORLD).exists(),
    )


def start_finetune(project: Project, user: Any, data: FineTuneData) -> FineTuneRun:
    """The run's row with its split, its base endpoint and its lineage, in one transaction.
    The caller enqueues it (`studio.tasks.enqueue_finetune`). FineTuneError names what is
    wrong."""
    check(project, data)
    version = data.dataset_version
    path = base_path(data)
    with transaction.atomic():
        base = data.base_endpoint or base_endpoint_for(project, path, user, tiny=data.base == TINY)
        train = train_trajectories(version)
        run = FineTuneRun.objects.create(
            project=project,
            requester=user if getattr(user, "pk", None) else None,
            name=data.name.strip(),
            dataset_version=version,
            dataset_name=version.dataset.name,
            version_number=version.number,
            base_model=path,
            base_endpoint=base,
            method=data.method,
            lora_rank=int(data.lora_rank),
            lora_alpha=int(data.lora_alpha),
            lora_targets=list(data.lora_targets),
            epochs=float(data.epochs),
            learning_rate=float(data.learning_rate),
            max_length=int(data.max_length),
            seed=int(data.seed),
            settings=trainer_settings(data),
            code_version=code_version(),
            train_trajectory_ids=train,
            heldout_trajectory_ids=heldout_split(project, train, int(data.heldout), data.seed),
            output_dir=data.output_dir,
            # in-process training: a gpu worker's (whose process holds the model)
            queue=queue_name("gpu"),
        )
        if not run.output_dir:
            run.output_dir = str(new_run_folder(run.pk))
            FineTuneRun.objects.filter(pk=run.pk).update(output_dir=run.output_dir)
    return run


# ---- stopping and going on ----------------------------------------------------------------


def cancel_finetune(run: FineTuneRun) -> None:
    """A queued run is cancelled at once; a running one stops at its next step, keeping its
    last checkpoint (Resume goes on from there)."""
    from studio.services.jobs import request_cancel

    request_cancel(FineTuneRun, run.pk)


def failed_on_its_settings(run: FineTuneRun) -> bool:
    """It failed on its settings or its data (rows too long, nothing to train, a base model
    that does not load...): Resume would fail the same way."""
    return run.status == JobStatus.FAILED and run.phase == NOT_TRAINABLE


def resumable(run: FineTuneRun) -> bool:
    """Cancelled, or failed on anything but its settings or data (a lost worker, the time
    limit, an error while it trained)."""
    return run.status in (JobStatus.FAILED, JobStatus.CANCELLED) and not failed_on_its_settings(run)


def resume_finetune(run: FineTuneRun) -> bool:
    """A resumable run (`resumable`) back to queued (the caller enqueues it, in the same
    transaction): it goes on from its last checkpoint. False when it had not stopped, or
    failed on its settings or data."""
    from studio.services.jobs import reopen

    with transaction.atomic():
        row = FineTuneRun.objects.select_for_update().filter(pk=run.pk).first()
        if row is None or not resumable(row):
            return False
        return reopen(FineTuneRun, run.pk)


def register_model(run: FineTuneRun, result_dir: str) -> ModelEndpoint:
    """The fine-tuned model as a world model of the project (kind hf, the adapter or model
    folder as its model), named after the run, linked as the run's endpoint. Registered
    once: a run that has one keeps it."""
    with transaction.atomic():
        row = FineTuneRun.objects.select_for_update().select_related("project").get(pk=run.pk)
        if row.endpoint_id is not None:
            found = ModelEndpoint.objects.filter(pk=row.endpoint_id).first()
            if found is not None:
                return found
        endpoint = ModelEndpoint.objects.create(
            project=row.project,
            name=unique_endpoint_name(row.project, row.name),
            role=EndpointRole.WORLD,
            kind="hf",
            model=str(result_dir),
            created_by=row.requester,
            is_default=False,
        )
        FineTuneRun.objects.filter(pk=row.pk).update(endpoint=endpoint, result_dir=str(result_dir))
    run.endpoint, run.result_dir = endpoint, str(result_dir)
    return endpoint


def runs_by_endpoint(project: Project) -> dict[int, FineTuneRun]:
    """The runs that registered a model of the project, by that model's id (the Models page's
    lineage), each with `adapter_ready`: its model folder is on this machine."""
    runs = FineTuneRun.objects.filter(project=project, endpoint__isnull=False).select_related(
        "dataset_version__dataset"
    )
    out: dict[int, FineTuneRun] = {}
    for run in runs:
        if run.endpoint_id is None:
            continue
        # whether its folder is here to download (a project archive carries no model files)
        run.adapter_ready = bool(run.result_dir) and Path(run.result_dir).is_dir()  # type: ignore[attr-defined]
        out[run.endpoint_id] = run
    return out
