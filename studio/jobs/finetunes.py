"""A fine-tune run in a gpu worker (or in `manage.py finetune`'s process): claim the row once,
build the training rows of its dataset version with the export's own code (the `wm-turns`
rows an export of the version writes), then train (`inference.finetune.train`) with its
progress and loss curve written to the row, and register the model it made.

Phases: preparing (rows built; the tiny base model built if it is the base and missing; the
model loaded), training (from its first step), saving, done. Cancel (the row's `cancel_requested`, read by the job's monitor) stops
the training at the end of its step in flight (of its first step, when asked while the model
loads): the run is CANCELLED and keeps its checkpoint, from which Resume goes on
(`resumed_from_step`). A worker task whose time is nearly up stops the same
way and hands the rest to a new message of itself. An error fails the run with a message that
names the phase and the cause: a failure of its settings or its data (`NothingToTrain`, or
the trainer's ValueError before its first step: rows too long, nothing to train, a base model
that does not load) is phase `not-trainable`, whose message says which setting to change in
a new fine-tune (Resume would fail the same way, so it is not offered); any other failure
(a lost worker, the time limit, an error while it trains) can be resumed.

Beside the trainer's config, the row's `settings` gets "resumed_from" (the checkpoint step of
every resume, written when the resumed run starts training) and "fit" (the rows trimmed or
left out to fit max_length, once the trainer reports them): the model has no fields for
them."""

from __future__ import annotations

import logging
import os
import shutil
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from inference.finetune import last_checkpoint
from studio.jobs.dispatch import send_again
from studio.jobs.runtime import JobMonitor, claim, finish
from studio.models import FineTuneRun, JobStatus
from studio.services import finetunes as service

log = logging.getLogger(__name__)

FINETUNE_TASK = "studio.run_finetune"
WRITE_EVERY_S = 1.0  # progress and the loss curve go to the row at most this often
MAX_DROPPED_SHOWN = 100  # the numbers of the rows left out that the row keeps


class NothingToTrain(Exception):
    """The version gives no training row, or the settings cannot train (its message says
    why; `change`: what a new fine-tune should change)."""

    def __init__(self, message: str, *, change: str = "another dataset version"):
        super().__init__(message)
        self.change = change


def change_for(exc: BaseException) -> str:
    """What a new fine-tune should change, for the trainer's ValueError: the config field its
    FineTuneInputError names (`field`), else the one its message starts with ("lora_rank:
    ..."), else what the message speaks of ("max_length=...", "base model folder ...")."""
    message = str(exc)
    field = getattr(exc, "field", None) or message.split(":", 1)[0].strip()
    if field == "max_length":
        return "a larger max length (or a dataset version with shorter rows)"
    if field in service.FIELD_WORDS:
        return f"a different {service.FIELD_WORDS[field]}"
    text = message.lower()
    if "max_length" in text or "max length" in text:
        return "a larger max length (or a dataset version with shorter rows)"
    if "base model" in text or "tokenizer" in text:
        return "another base model"
    if text.startswith("row ") or "rows to train" in text:
        return "another dataset version"
    return "other settings"


def not_trainable_message(exc: Exception, change: str) -> str:
    reason = str(exc).rstrip(".")
    return (
        f"Not trained: {reason}. This comes from the fine-tune's settings or data, so Resume "
        f"would fail the same way: start a new fine-tune with {change}."
    )


def training_rows(run: FineTuneRun) -> list[dict[str, Any]]:
    """The `wm-turns` rows of the run's dataset version, as an export of it writes them."""
    import orjson

    from studio.exports.formats import ExportOptions
    from studio.services.datasets import ExportCounts, rows_of, version_examples

    version = run.dataset_version
    if version is None:
        raise NothingToTrain(
            f"its dataset version ({run.dataset_name} v{run.version_number}) was deleted"
        )
    counts = ExportCounts()
    lines = rows_of(version_examples(version, counts), "wm-turns", ExportOptions(), counts)
    rows = [orjson.loads(line) for line in lines]
    if not rows:
        raise NothingToTrain(
            f"{run.dataset_name} v{run.version_number} gives no world-model turn to train on "
            f"({counts.items} item(s): {counts.deleted} deleted, {counts.no_row} with no "
            "world-model turn)"
        )
    return rows


def ensure_tiny_model(path: Path) -> None:
    """The tiny base model in `path`, built (in this process: it imports torch) when missing;
    written beside it and moved into place, so a half-built folder is never used."""
    if (path / "config.json").is_file():
        return
    from inference.tiny import build_tiny_model

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}-{uuid.uuid4().hex[:8]}"
    try:
        build_tiny_model(tmp)
        try:
            os.replace(tmp, path)
        except OSError:  # another worker built it meanwhile
            if not (path / "config.json").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def model_description(run: FineTuneRun) -> dict[str, Any]:
    """The lineage the trainer writes into the model's card and studio_lineage.json (its
    "name" also names the module in the card's serving lines)."""
    return {
        "name": run.name,
        "fine_tune": f"#{run.pk} of AgentWorld Studio",
        "project": run.project.name,
        "dataset": run.dataset_name,
        "dataset_version": run.version_number,
        "held_out_trajectories": len(run.heldout_trajectory_ids or []),
        "code_version": run.code_version,
    }


def task_deadline(message_id: str) -> float | None:
    """When a worker task hands over (None in the shell: no task time limit there)."""
    if not message_id or message_id.startswith("shell-"):
        return None
    from studio.jobs.evaluations import task_budget_s

    return time.monotonic() + task_budget_s()


class Progress:
    """`on_progress` of the trainer: the row's step, progress, tokens, time and loss curve,
    given to the monitor at most every WRITE_EVERY_S (and at the last step)."""

    def __init__(
        self,
        run: FineTuneRun,
        monitor: JobMonitor,
        report: Callable | None = None,
        *,
        resumed_from: int | None = None,
    ):
        self.monitor = monitor
        self.history: list[list[Any]] = [list(p) for p in (run.loss_history or [])]
        self.first_step: int | None = None
        self.last_write = 0.0
        self.loss_owed: int | None = None  # a step written before its loss was logged
        self.report = report
        self.latest: dict[str, Any] = {}
        # the step of the checkpoint this call goes on from (None: it starts afresh)
        self.resumed_from = resumed_from
        self.settings: dict[str, Any] = dict(run.settings or {})

    def note_fit(self, source: Any) -> None:
        """The rows trimmed / left out to fit max_length, as the trainer reports them (its
        progress and its result): settings["fit"] = {"rows_trimmed": n, "rows_dropped": n,
        "dropped": [row numbers, the first MAX_DROPPED_SHOWN]}."""
        trimmed = getattr(source, "rows_trimmed", None)
        dropped = getattr(source, "rows_dropped", None)
        if trimmed is None or dropped is None:
            return
        numbers = [int(n) for n in dropped]
        fit = {
            "rows_trimmed": int(trimmed),
            "rows_dropped": len(numbers),
            "dropped": numbers[:MAX_DROPPED_SHOWN],
        }
        if fit != self.settings.get(service.FIT_KEY):
            self.settings[service.FIT_KEY] = fit
            self.monitor.set_job(settings=dict(self.settings))

    def __call__(self, p: Any) -> None:
        self.note_fit(p)
        if self.first_step is None:
            # the model is loaded and its first step done: from here on it trains (unless
            # it was asked to stop meanwhile: the row says "cancelling" then)
            if not self.monitor.cancel_requested:
                self.monitor.set_job(phase="training")
            if self.resumed_from is not None:
                # a resume: said from its first step on, and kept with every earlier one
                steps = [int(s) for s in self.settings.get(service.RESUMES_KEY) or []]
                self.settings[service.RESUMES_KEY] = [*steps, int(self.resumed_from)]
                self.monitor.set_job(
                    resumed_from_step=int(self.resumed_from), settings=dict(self.settings)
                )
            # a resumed run: the curve of the steps it goes on from is kept, later ones dropped
            self.first_step = int(p.step)
            self.history = [h for h in self.history if int(h[0]) < self.first_step]
        if p.loss is not None:
            self.history = [h for h in self.history if int(h[0]) < int(p.step)]
            self.history.append([int(p.step), float(p.loss), float(p.learning_rate or 0.0)])
        total = max(1, int(p.total_steps or 0))
        self.latest = {
            "step": int(p.step),
            "total_steps": int(p.total_steps or 0),
            "progress": min(1.0, int(p.step) / total),
            "tokens_seen": int(p.tokens_seen or 0),
            "train_s": float(p.elapsed_s or 0.0),
        }
        last = int(p.step) >= total
        now = time.monotonic()
        # A step's end comes a moment before its loss is logged: a write made at the step's
        # end owes the page that loss, and the loss is written as soon as it comes (else the
        # page's "latest" loss would be the step before's until the next write).
        owed = p.loss is not None and self.loss_owed == int(p.step)
        if last or owed or now - self.last_write >= WRITE_EVERY_S:
            self.last_write = now
            has_loss = bool(self.history) and int(self.history[-1][0]) >= int(p.step)
            self.loss_owed = None if has_loss else int(p.step)
            fields = {**self.latest, "loss_history": list(self.history)}
            if self.history:  # the first loss is known from the first logged step on
                fields["first_loss"] = float(self.history[0][1])
            if last:
                fields["phase"] = "saving"
            self.monitor.set_job(**fields)
        if self.report is not None:
            self.report(p)


def failed_fields(run: FineTuneRun, phase: str, exc: Exception) -> dict[str, Any]:
    """A failure Resume may get past (it goes on from the last checkpoint)."""
    log.exception("fine-tune %s failed", run.pk)
    return {
        "phase": "failed",
        "error": f"The fine-tune failed while {phase} ({type(exc).__name__}): {exc}. "
        "Resume goes on from its last checkpoint, if it saved one.",
    }


def run_finetune(run_id: int, message_id: str = "", *, report: Callable | None = None) -> None:
    """The body of the Celery task (and of `manage.py finetune`): claim, train, end.
    `report(progress)`: also told of every step (the command's bar)."""
    deadline = task_deadline(message_id)
    run = claim(
        FineTuneRun,
        run_id,
        message_id,
        related=("dataset_version__dataset", "project", "requester"),
        phase="preparing",
    )
    if run is None:
        return
    status = JobStatus.SUCCEEDED
    fields: dict[str, Any] = {}
    handed_over = False
    phase = "preparing"
    # the checkpoint `train(resume=True)` goes on from, if any
    checkpoint = last_checkpoint(service.run_folder(run))
    with JobMonitor(FineTuneRun, run.pk) as monitor:
        progress = Progress(
            run, monitor, report, resumed_from=checkpoint[1] if checkpoint else None
        )
        try:
            from inference.finetune import FineTuneCancelled, train

            rows = training_rows(run)
            monitor.set_job(examples=len(rows))
            if Path(run.base_model) == service.tiny_model_path():
                ensure_tiny_model(service.tiny_model_path())
            config = service.trainer_config({**run.settings, "base_model": run.base_model})
            try:
                config.validate()
            except ValueError as exc:
                raise NothingToTrain(
                    f"its settings are not valid: {exc}", change=change_for(exc)
                ) from None
            phase = "training"  # (the row says so from its first step: `Progress`)

            def should_stop() -> bool:
                # asked before its first step ends (while the model loads), it stops after
                # that step: Resume then has a checkpoint to go on from
                if progress.first_step is None:
                    return False
                return monitor.cancel_requested or (
                    deadline is not None and time.monotonic() >= deadline
                )

            try:
                result = train(
                    rows,
                    config,
                    service.run_folder(run),
                    on_progress=progress,
                    should_stop=should_stop,
                    resume=True,
                    description=model_description(run),
                )
            except FineTuneCancelled as stopped:
                if stopped.elapsed_s is not None:  # the run's training time, resumes included
                    progress.latest["train_s"] = float(stopped.elapsed_s)
                if monitor.cancel_requested:
                    status = JobStatus.CANCELLED
                    fields = {"phase": "cancelled", "step": int(stopped.step)}
                else:
                    handed_over = True
            else:
                phase = "saving"
                progress.note_fit(result)
                monitor.set_job(phase="saving")
                service.register_model(run, str(result.result_dir))
                history = progress.history or [
                    [int(s), float(v), 0.0] for s, v in (result.losses or [])
                ]
                fields = {
                    "phase": "done",
                    "progress": 1.0,
                    "step": int(result.steps),
                    "total_steps": int(result.total_steps),
                    "tokens_seen": int(result.tokens_seen),
                    "train_s": float(result.train_s),
                    # a resumed run's curve starts with the steps it had before
                    "first_loss": history[0][1] if history else result.first_loss,
                    "final_loss": result.final_loss,
                    "loss_history": history,
                    "result_dir": str(result.result_dir),
                    "resumed_from_step": (
                        result.resumed_from_step or progress.resumed_from or run.resumed_from_step
                    ),
                    "settings": dict(progress.settings),
                }
        except NothingToTrain as exc:
            status = JobStatus.FAILED
            fields = {
                "phase": service.NOT_TRAINABLE,
                "error": not_trainable_message(exc, exc.change),
            }
        except ValueError as exc:
            if progress.first_step is not None:  # it trained: not its settings (see below)
                status, fields = JobStatus.FAILED, failed_fields(run, phase, exc)
            else:
                # the trainer refused the rows or the settings before its first step
                log.info("fine-tune %s not trained: %s", run.pk, exc)
                status = JobStatus.FAILED
                fields = {
                    "phase": service.NOT_TRAINABLE,
                    "error": not_trainable_message(exc, change_for(exc)),
                }
        except Exception as exc:  # noqa: BLE001 - the row says what went wrong
            status, fields = JobStatus.FAILED, failed_fields(run, phase, exc)
    if status != JobStatus.SUCCEEDED or handed_over:
        # what the trainer reached, and the curve so far, are kept for Resume
        fields = {
            **progress.latest,
            "loss_history": progress.history,
            "settings": dict(progress.settings),
            **fields,
        }
        if progress.history:
            fields["first_loss"] = progress.history[0][1]
    mine = FineTuneRun.objects.filter(pk=run.pk, status=JobStatus.RUNNING, claimed_by=message_id)
    if handed_over:
        if mine.update(status=JobStatus.QUEUED, phase="queued", **fields):
            send_again(FineTuneRun, run.pk, run.message_id, FINETUNE_TASK)
        return
    finish(FineTuneRun, run.pk, status, **fields)
