"""What every background job shares: claiming a row idempotently, a heartbeat/progress thread,
finishing the row, and the safety net that fails jobs whose worker disappeared.

Worker loss policy (documented choice): a job whose worker died is marked FAILED with a
readable "worker lost" message, never retried automatically (a half-run job may have written
steps, and a job that kills its worker, e.g. out of memory, would kill the next one too); the
user retries it (a retry of a simulation creates a new job and new branches and keeps the old
ones). Two paths find such jobs:
- a redelivered message (acks_late + reject_on_worker_lost: the pool process died and the
  message went back to the queue) for a job that is still RUNNING: the claim marks it failed;
- a whole worker killed (its messages stay unacked in Redis until the visibility timeout): every
  worker start (`worker_ready`, plus one delayed sweep STUDIO_JOB_STALE_S later for a worker
  restarted at once) and every poll of a job's status runs `reap_stale_jobs`.
A RUNNING job beats every STUDIO_JOB_STALE_S / 6 seconds from a thread, so a long prefill or a
slow remote model never looks dead."""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import close_old_connections, connection
from django.db.models import F
from django.utils import timezone

from studio.models import Branch, ImportJob, JobStatus, SimulationJob
from studio.models.trajectories import BranchStatus

# The job tables this module runs: both share JobBase's status/heartbeat fields.
JobModel = type[ImportJob] | type[SimulationJob]

log = logging.getLogger(__name__)

WORKER_LOST_MESSAGE = (
    "The worker running this job stopped without finishing it (killed, restarted or out of "
    "memory); no heartbeat for {age:.0f} s. The job was not retried automatically: use Retry."
)


def stale_after_s() -> float:
    return float(getattr(settings, "STUDIO_JOB_STALE_S", 120))


def heartbeat_interval_s() -> float:
    return max(0.5, stale_after_s() / 6)


def claim(model: JobModel, pk: int) -> Any:
    """QUEUED -> RUNNING exactly once. Returns the row when this call claimed it, else None
    (already taken, cancelled or finished; a dead RUNNING claim is marked failed here)."""
    now = timezone.now()
    claimed = model.objects.filter(pk=pk, status=JobStatus.QUEUED).update(
        status=JobStatus.RUNNING, started_at=now, heartbeat_at=now, attempts=F("attempts") + 1
    )
    if claimed == 1:
        return model.objects.get(pk=pk)
    row = model.objects.filter(pk=pk).first()
    if row is None:
        log.warning("%s %s no longer exists; nothing to do", model.__name__, pk)
    elif row.status == JobStatus.RUNNING:
        # Only a redelivery runs a task twice for one job: the broker gave the message back
        # because the worker running it died (reject_on_worker_lost), or the visibility
        # timeout (longer than the hard time limit) passed. Either way the first run is dead.
        log.warning("%s %s redelivered after its worker was lost", model.__name__, pk)
        _fail_lost(model, row, now)
    else:
        log.info("%s %s is %s; not running it again", model.__name__, pk, row.status)
    return None


def _fail_lost(model: JobModel, row: Any, now: Any) -> bool:
    beat = row.heartbeat_at or row.started_at or row.created_at
    message = WORKER_LOST_MESSAGE.format(age=(now - beat).total_seconds())
    extra = {"phase": "failed"} if model is SimulationJob else {}
    done = model.objects.filter(
        pk=row.pk, status=JobStatus.RUNNING, heartbeat_at=row.heartbeat_at
    ).update(status=JobStatus.FAILED, error=message, finished_at=now, **extra)
    if done:
        clear_pulse(model, row.pk)
    if done and model is SimulationJob:
        Branch.objects.filter(
            job_id=row.pk, status__in=[BranchStatus.QUEUED, BranchStatus.RUNNING]
        ).update(status=BranchStatus.FAILED, error=message)
    return bool(done)


# ---- the pulse: progress and liveness outside the database --------------------------------
# SQLite has one writer at a time: while an import holds its all-or-nothing write transaction,
# the monitor thread cannot write progress or heartbeats to the job row. The monitor therefore
# also keeps a small "pulse" file in the data dir (shared by web and workers, also across
# containers through the data volume); pages overlay its progress and the lost-worker sweep
# treats a fresh pulse as a live heartbeat.


def _pulse_path(model: JobModel, pk: int) -> Path:
    return Path(settings.DATA_DIR) / "pulse" / f"{model._meta.model_name}-{pk}.json"


def write_pulse(model: JobModel, pk: int, fields: dict[str, Any]) -> None:
    path = _pulse_path(model, pk)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_text(json.dumps({"at": time.time(), **fields}))
        os.replace(tmp, path)  # readers never see half a file
    except OSError:
        log.exception("could not write the pulse of %s %s", model.__name__, pk)


def read_pulse(model: JobModel, pk: int) -> dict[str, Any] | None:
    try:
        return json.loads(_pulse_path(model, pk).read_text())
    except (OSError, ValueError):
        return None


def clear_pulse(model: JobModel, pk: int) -> None:
    _pulse_path(model, pk).unlink(missing_ok=True)


def live_progress(job: Any) -> float:
    """The progress to show: the row's, or the pulse's when the row lags behind (a worker
    blocked from writing the row by a long SQLite transaction)."""
    progress = float(job.progress or 0.0)
    if job.status == JobStatus.RUNNING:
        pulse = read_pulse(type(job), job.pk) or {}
        progress = max(progress, float(pulse.get("progress") or 0.0))
    return progress


def _pulse_is_fresh(model: JobModel, pk: int) -> bool:
    pulse = read_pulse(model, pk)
    return pulse is not None and time.time() - float(pulse.get("at", 0)) < stale_after_s()


def reap_stale_jobs() -> int:
    """Mark RUNNING jobs without a recent heartbeat as failed. Cheap; safe to call often."""
    now = timezone.now()
    cutoff = now - timedelta(seconds=stale_after_s())
    reaped = 0
    models_: tuple[JobModel, ...] = (SimulationJob, ImportJob)
    for model in models_:
        for row in model.objects.filter(status=JobStatus.RUNNING, heartbeat_at__lt=cutoff):
            if _pulse_is_fresh(model, row.pk):
                continue  # alive, only kept from writing its row (SQLite's single writer)
            reaped += _fail_lost(model, row, now)
    if reaped:
        log.warning("marked %d job(s) failed: worker lost", reaped)
    return reaped


def finish(model: JobModel, pk: int, status: str, **fields: Any) -> bool:
    """RUNNING -> a final status. Does nothing if the row was reaped or finished meanwhile."""
    fields.setdefault("finished_at", timezone.now())
    done = bool(
        model.objects.filter(pk=pk, status=JobStatus.RUNNING).update(status=status, **fields)
    )
    clear_pulse(model, pk)
    return done


class JobMonitor:
    """A thread that owns the job's progress writes: every `interval` seconds it writes the
    latest pending fields of the job and its branches, beats the heartbeat and reads
    `cancel_requested`. Writes go through the thread's own DB connection, so progress shows
    even while the main thread holds a long transaction (an atomic import)."""

    def __init__(self, model: JobModel, pk: int, *, interval: float = 0.3):
        self.model = model
        self.pk = pk
        self.interval = interval
        self.cancel_requested = False
        self._job_fields: dict[str, Any] = {}
        self._branch_fields: dict[int, dict[str, Any]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._last_beat = 0.0
        self._pulse: dict[str, Any] = {}
        self._thread = threading.Thread(target=self._run, name=f"monitor-{pk}", daemon=True)

    def __enter__(self) -> JobMonitor:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def set_job(self, **fields: Any) -> None:
        with self._lock:
            self._job_fields.update(fields)

    def set_branch(self, branch_id: int, **fields: Any) -> None:
        with self._lock:
            self._branch_fields.setdefault(branch_id, {}).update(fields)

    def _run(self) -> None:
        try:
            while not self._stop.wait(self.interval):
                self._flush()
            self._flush()
        finally:
            connection.close()

    def _flush(self) -> None:
        with self._lock:
            job_fields, self._job_fields = self._job_fields, {}
            branch_fields, self._branch_fields = self._branch_fields, {}
        now = time.monotonic()
        # The pulse first: it never waits on a database lock.
        self._pulse.update({k: v for k, v in job_fields.items() if k in ("progress", "phase")})
        write_pulse(self.model, self.pk, self._pulse)
        try:
            close_old_connections()
            if job_fields or now - self._last_beat >= heartbeat_interval_s():
                self._last_beat = now
                self.model.objects.filter(pk=self.pk, status=JobStatus.RUNNING).update(
                    heartbeat_at=timezone.now(), **job_fields
                )
            for branch_id, fields in branch_fields.items():
                Branch.objects.filter(pk=branch_id, status=BranchStatus.RUNNING).update(**fields)
            if self.model is SimulationJob:
                rows = SimulationJob.objects.filter(pk=self.pk)
                state = rows.values("cancel_requested", "status").first()
                self.cancel_requested = bool(
                    state is None
                    or state["cancel_requested"]
                    or state["status"] != JobStatus.RUNNING
                )
        except Exception:  # a flaky DB must not kill the job; the next tick retries
            log.exception("progress write for %s %s failed", self.model.__name__, self.pk)
