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
names the phase and the cause."""

from __future__ import annotations

import logging
import os
import shutil
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from studio.jobs.dispatch import send_again
from studio.jobs.runtime import JobMonitor, claim, finish
from studio.models import FineTuneRun, JobStatus

log = logging.getLogger(__name__)

FINETUNE_TASK = "studio.run_finetune"
WRITE_EVERY_S = 1.0  # progress and the loss curve go to the row at most this often


class NothingToTrain(Exception):
    """The version gives no training row (its message says why)."""


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


def task_deadline(message_id: str) -> float | None:
    """When a worker task hands over (None in the shell: no task time limit there)."""
    if not message_id or message_id.startswith("shell-"):
        return None
    from studio.jobs.evaluations import task_budget_s

    return time.monotonic() + task_budget_s()


class Progress:
    """`on_progress` of the trainer: the row's step, progress, tokens, time and loss curve,
    given to the monitor at most every WRITE_EVERY_S (and at the last step)."""

    def __init__(self, run: FineTuneRun, monitor: JobMonitor, report: Callable | None = None):
        self.monitor = monitor
        self.history: list[list[Any]] = [list(p) for p in (run.loss_history or [])]
        self.first_step: int | None = None
        self.last_write = 0.0
        self.report = report
        self.latest: dict[str, Any] = {}

    def __call__(self, p: Any) -> None:
        if self.first_step is None:
            # the model is loaded and its first step done: from here on it trains (unless
            # it was asked to stop meanwhile: the row says "cancelling" then)
            if not self.monitor.cancel_requested:
                self.monitor.set_job(phase="training")
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
        if last or now - self.last_write >= WRITE_EVERY_S:
            self.last_write = now
            fields = {**self.latest, "loss_history": list(self.history)}
            if last:
                fields["phase"] = "saving"
            self.monitor.set_job(**fields)
        if self.report is not None:
            self.report(p)


def run_finetune(run_id: int, message_id: str = "", *, report: Callable | None = None) -> None:
    """The body of the Celery task (and of `manage.py finetune`): claim, train, end.
    `report(progress)`: also told of every step (the command's bar)."""
    from studio.services import finetunes as service

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
    with JobMonitor(FineTuneRun, run.pk) as monitor:
        progress = Progress(run, monitor, report)
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
                raise NothingToTrain(f"its settings are not valid: {exc}") from None
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
                )
            except FineTuneCancelled as stopped:
                if monitor.cancel_requested:
                    status = JobStatus.CANCELLED
                    fields = {"phase": "cancelled", "step": int(stopped.step)}
                else:
                    handed_over = True
            else:
                phase = "saving"
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
                    "resumed_from_step": result.resumed_from_step or run.resumed_from_step,
                }
        except NothingToTrain as exc:
            status, fields = JobStatus.FAILED, {"phase": "failed", "error": f"Not trained: {exc}."}
        except Exception as exc:  # noqa: BLE001 - the row says what went wrong
            log.exception("fine-tune %s failed", run.pk)
            status = JobStatus.FAILED
            fields = {
                "phase": "failed",
                "error": f"The fine-tune failed while {phase} ({type(exc).__name__}): {exc}. "
                "Resume goes on from its last checkpoint, if it saved one.",
            }
    if status != JobStatus.SUCCEEDED or handed_over:
        # what the trainer reached, and the curve so far, are kept for Resume
        fields = {**progress.latest, "loss_history": progress.history, **fields}
        if progress.history:
            fields["first_loss"] = progress.history[0][1]
    mine = FineTuneRun.objects.filter(pk=run.pk, status=JobStatus.RUNNING, claimed_by=message_id)
    if handed_over:
        if mine.update(status=JobStatus.QUEUED, phase="queued", **fields):
            send_again(FineTuneRun, run.pk, run.message_id, FINETUNE_TASK)
        return
    finish(FineTuneRun, run.pk, status, **fields)
