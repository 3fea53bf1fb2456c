"""What every background job shares: claiming its row exactly once, the monitor thread that
writes its progress and heartbeat, and finishing the row.

Job state lives in the job row: status, phase, progress, figures, the heartbeat, and for a
simulation the live state of each future (`SimulationJob.live`). The monitor thread writes
it, one UPDATE per tick through its own connection, so progress shows while the main thread
works (or holds a long transaction).

Worker loss (documented choice): a job whose worker died is marked FAILED with a readable
"worker lost" message, never rerun automatically (a half-run job may have written steps, and
a job that kills its worker, e.g. out of memory, would kill the next one too); the user
retries it. What decides that a worker died is its heartbeat, never a message alone: a
message the broker gives back (reject_on_worker_lost when a pool process dies, but also a
broker connection that dropped while the job runs on) finds the job RUNNING and is ignored;
the sweeper (`studio.jobs.sweeper`), run by every worker, fails a job whose heartbeat stopped,
within STUDIO_JOB_STALE_S.

SQLite has one writer: while an import holds its all-or-nothing write transaction nobody
else can write, heartbeats included. On SQLite only, the monitor therefore also keeps a small
"pulse" file per job in the data dir; pages overlay its progress and the sweeper treats a
fresh pulse as a heartbeat. On PostgreSQL there is none."""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import close_old_connections, connection, transaction
from django.db.models import F
from django.utils import timezone

from studio.models import (
    ArenaRun,
    BehaviourSearch,
    Branch,
    Campaign,
    EvaluationRun,
    ExportJob,
    FineTuneRun,
    ImportJob,
    JobStatus,
    JudgeJob,
    SimulationJob,
)
from studio.models.trajectories import BranchStatus

JobModel = (
    type[ImportJob]
    | type[SimulationJob]
    | type[EvaluationRun]
    | type[JudgeJob]
    | type[ExportJob]
    | type[ArenaRun]
    | type[Campaign]
    | type[FineTuneRun]
    | type[BehaviourSearch]
)


def cancellable(model: JobModel) -> bool:
    """Jobs a user can stop while they run (they have cancel_requested and a phase)."""
    return model in (
        SimulationJob,
        EvaluationRun,
        JudgeJob,
        ExportJob,
        ImportJob,
        ArenaRun,
        Campaign,
        FineTuneRun,
        BehaviourSearch,
    )


log = logging.getLogger(__name__)

WORKER_LOST_MESSAGE = (
    "The worker running this job stopped without finishing it (killed, restarted or out of "
    "memory); no heartbeat for {age:.0f} s. The job was not retried automatically: use Retry."
)
HARD_LIMIT_MESSAGE = (
    "Stopped at the time limit: the job ran for the longest a job may run ({limit} s, "
    "STUDIO_JOB_HARD_LIMIT_S) and was killed there. Try fewer futures, fewer steps or fewer "
    "max_tokens; the finished futures are kept."
)
CANCELLED_LOST_MESSAGE = (
    "Cancelled. Its worker had stopped without finishing (no heartbeat for {age:.0f} s); the "
    "finished futures are kept."
)


def stale_after_s() -> float:
    """STUDIO_JOB_STALE_S: a job whose worker died is failed within this many seconds."""
    return float(getattr(settings, "STUDIO_JOB_STALE_S", 120))


def heartbeat_interval_s() -> float:
    return max(0.25, stale_after_s() / 8)


def lost_after_s() -> float:
    """No heartbeat for this long: the worker is gone. With a sweep every
    `sweep_interval_s`, a dead worker's job is failed within STUDIO_JOB_STALE_S."""
    return stale_after_s() * 0.75


def sweep_interval_s() -> float:
    return max(0.25, stale_after_s() / 4)


def single_writer_db() -> bool:
    """SQLite: one writer at a time, so a long transaction blocks every other write."""
    return connection.vendor == "sqlite"


def uses_pulse(model: JobModel) -> bool:
    return single_writer_db()


def drop_failed_connection() -> None:
    """Close this thread's database connection if it no longer answers (the database
    restarted, or dropped it while idle), so that the next query opens a new one: workers
    reuse connections across tasks (CELERY_DB_REUSE_MAX), and a dead one would fail the
    task that meets it. Costs one round trip when a connection is open."""
    if connection.connection is not None and not connection.is_usable():
        connection.close()
    connection.errors_occurred = False


# ---- claim and finish -------------------------------------------------------------------


def claim(
    model: JobModel,
    pk: int,
    message_id: str = "",
    *,
    related: tuple[str, ...] = (),
    branches: bool = True,
    worker: str | None = None,
    **fields: Any,
) -> Any:
    """QUEUED -> RUNNING exactly once (writing `fields` too). Returns the row, with
    `related` rows joined, when this call claimed it, else None (already running,
    cancelled, finished or deleted: nothing to do). `branches=False`: a job without child
    branches (a step of an episode) saves the query that starts them. `worker`: the Celery
    hostname to record as the job's worker (default: that of the task running this call),
    whose heartbeat row then tells within seconds if it goes away (`services.workers`)."""
    now = timezone.now()
    if worker is None:
        worker = current_worker()
    starts_branches = model is SimulationJob and branches
    # a simulation's branches start with it, never before; with no branches to start, the
    # one UPDATE is atomic on its own (a step of an episode saves the BEGIN and COMMIT)
    with transaction.atomic() if starts_branches else nullcontext():
        claimed = model.objects.filter(pk=pk, status=JobStatus.QUEUED).update(
            status=JobStatus.RUNNING,
            started_at=now,
            heartbeat_at=now,
            claimed_by=message_id,
            worker=worker,
            attempts=F("attempts") + 1,
            **fields,
        )
        if claimed == 1 and starts_branches:
            Branch.objects.filter(job_id=pk, status=BranchStatus.QUEUED).update(
                status=BranchStatus.RUNNING
            )
    if claimed == 1:
        return model.objects.select_related(*related).get(pk=pk)
    row = model.objects.filter(pk=pk).first()
    if row is None:
        log.warning("%s %s no longer exists; nothing to do", model.__name__, pk)
    elif row.status == JobStatus.RUNNING:
        # A message given back while the job runs on (a broker connection that dropped), a
        # pool process that died (its heartbeat stops: the sweeper fails the job), or a
        # duplicate sent after a presumed loss: never run a job twice.
        again = "redelivered" if row.claimed_by == message_id else "sent again"
        log.warning(
            "%s %s is already running; its message %s is ignored", model.__name__, pk, again
        )
    else:
        log.info("%s %s is %s; not running it again", model.__name__, pk, row.status)
    return None


def current_worker() -> str:
    """The hostname ("jobs@host") of the Celery worker whose task is running in this thread,
    in any pool; "" outside a task."""
    from celery import current_task

    request = getattr(current_task, "request", None)
    return str(getattr(request, "hostname", "") or "")


def fail_lost(model: JobModel, row: Any, now: Any) -> bool:
    """Settle a RUNNING job whose worker is gone (only if nothing changed since): failed, or
    cancelled when its user had asked it to stop (what they asked for is what happened).
    The job and its open branches change together."""
    beat = row.heartbeat_at or row.started_at or row.created_at
    age = (now - beat).total_seconds()
    status, branch_status = JobStatus.FAILED, BranchStatus.FAILED
    message = WORKER_LOST_MESSAGE.format(age=age)
    if model is EvaluationRun:  # its button is Resume, and it keeps what it finished
        message = message.replace("use Retry.", "use Resume (its finished samples are kept).")
    if model is JudgeJob:
        message = message.replace("use Retry.", "use Resume (the steps it judged are kept).")
    if model is BehaviourSearch:
        message = message.replace("use Retry.", "use Resume (its labels are kept).")
    if model is ArenaRun:  # it has no Retry: a new arena at the same step is the way on
        message = message.replace(
            "use Retry.",
            "start another arena at its step (its futures, scores and pairs are kept).",
        )
    if model is Campaign:  # its button is Resume, and it keeps the episodes that ended
        message = message.replace("use Retry.", "use Resume (its ended episodes are kept).")
    if model is FineTuneRun:  # its button is Resume, from its last checkpoint
        message = message.replace("use Retry.", "use Resume (it goes on from its last checkpoint).")
    if model is ExportJob:  # no file was kept: a new export is the way on
        message = message.replace("use Retry.", "export the version again (no file was kept).")
    if reached_hard_limit(row):
        message = HARD_LIMIT_MESSAGE.format(limit=settings.STUDIO_JOB_HARD_LIMIT_S)
        if model is ExportJob:
            message = (
                f"Stopped at the time limit ({settings.STUDIO_JOB_HARD_LIMIT_S} s, "
                "STUDIO_JOB_HARD_LIMIT_S); no file was kept: export a smaller version, or "
                "use manage.py export_dataset."
            )
        elif model is EvaluationRun or model is JudgeJob or model is BehaviourSearch:
            message = (
                f"Stopped at the time limit ({settings.STUDIO_JOB_HARD_LIMIT_S} s, "
                "STUDIO_JOB_HARD_LIMIT_S); what it finished is kept: use Resume."
            )
    extra: dict[str, Any] = {}
    if cancellable(model):
        extra = {"phase": "failed", **({"live": {}} if model is SimulationJob else {})}
        if row.cancel_requested:
            status, branch_status = JobStatus.CANCELLED, BranchStatus.CANCELLED
            message = CANCELLED_LOST_MESSAGE.format(age=age)
            if model is ImportJob:  # all or nothing: its transaction died with the worker
                message = message.replace("the finished futures are kept", "nothing was imported")
            extra["phase"] = "cancelled"
    with transaction.atomic():
        done = model.objects.filter(
            pk=row.pk, status=JobStatus.RUNNING, heartbeat_at=row.heartbeat_at
        ).update(status=status, error=message, finished_at=now, **extra)
        if done and model is SimulationJob:
            Branch.objects.filter(
                job_id=row.pk, status__in=[BranchStatus.QUEUED, BranchStatus.RUNNING]
            ).update(
                status=branch_status,
                error="" if branch_status == BranchStatus.CANCELLED else message,
            )
    if done:
        clear_pulse(model, row.pk)
    return bool(done)


def reached_hard_limit(row: Any) -> bool:
    """Its worker beat until about the hard time limit: Celery killed it there (a worker that
    dies of something else stops beating earlier)."""
    if row.started_at is None or row.heartbeat_at is None:
        return False
    ran = (row.heartbeat_at - row.started_at).total_seconds()
    # A few heartbeats' slack, but never so much that a short limit (tests, 6 s) makes every
    # job that died early look like one Celery killed at the limit.
    limit = settings.STUDIO_JOB_HARD_LIMIT_S
    margin = min(max(10.0, 3 * heartbeat_interval_s()), 0.1 * limit)
    return ran >= limit - margin


def is_silent(row: Any, now: Any) -> bool:
    """A RUNNING job whose worker has not beaten for `lost_after_s()`, or that is
    `orphaned`: no worker will settle it."""
    beat = row.heartbeat_at or row.started_at or row.created_at
    if row.status != JobStatus.RUNNING:
        return False
    return (now - beat).total_seconds() >= lost_after_s() or orphaned(row, now)


def orphaned(row: Any, now: Any) -> bool:
    """A RUNNING job whose claiming worker is gone by its own heartbeat row, and whose own
    heartbeat (and pulse) stopped with it: silent for `orphan_after_s()` when the worker
    stopped answering or shut down, older than the new process when the worker was restarted
    under the same name. Two signals, so that neither a worker row that could not be
    written nor a job row held up by a long transaction fails a live job on its own."""
    from studio.services.workers import orphan_after_s, worker_state

    if row.status != JobStatus.RUNNING or not getattr(row, "worker", ""):
        return False
    state = worker_state(row)
    if state is None or state.alive:
        return False
    beat = row.heartbeat_at or row.started_at or row.created_at
    pulse = read_pulse(type(row), row.pk)
    pulse_at = float(pulse.get("at", 0)) if pulse is not None else 0.0
    if state.restarted:  # the job's monitor died with the old process
        return beat <= state.since and pulse_at <= state.since.timestamp()
    quiet = orphan_after_s()
    return (now - beat).total_seconds() >= quiet and time.time() - pulse_at >= quiet


def finish(
    model: JobModel, pk: int, status: str, *, branches: dict[str, Any] | None = None, **fields: Any
) -> bool:
    """RUNNING -> a final status, and (a simulation) its open branches -> `branches`, in one
    transaction. Does nothing if the row was swept or finished meanwhile."""
    fields.setdefault("finished_at", timezone.now())
    if model is SimulationJob:
        fields.setdefault("live", {})
    with transaction.atomic():
        done = bool(
            model.objects.filter(pk=pk, status=JobStatus.RUNNING).update(status=status, **fields)
        )
        if done and branches:
            Branch.objects.filter(
                job_id=pk, status__in=[BranchStatus.QUEUED, BranchStatus.RUNNING]
            ).update(**branches)
    clear_pulse(model, pk)
    return done


# ---- the pulse (SQLite imports only) ------------------------------------------------------


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
    if not uses_pulse(model):
        return None
    try:
        return json.loads(_pulse_path(model, pk).read_text())
    except (OSError, ValueError):
        return None


def clear_pulse(model: JobModel, pk: int) -> None:
    if uses_pulse(model):
        _pulse_path(model, pk).unlink(missing_ok=True)


def pulse_is_fresh(model: JobModel, pk: int) -> bool:
    pulse = read_pulse(model, pk)
    return pulse is not None and time.time() - float(pulse.get("at", 0)) < lost_after_s()


# ---- the monitor thread -----------------------------------------------------------------


class JobMonitor:
    """A thread that owns the job row's progress writes: every `interval` seconds (the pages
    poll every 0.5 s) it writes the latest pending fields and, when any future moved, the
    live state of all futures, with the heartbeat, in one UPDATE; it reads
    `cancel_requested`."""

    def __init__(self, model: JobModel, pk: int, *, interval: float = 0.5):
        self.model = model
        self.pk = pk
        self.interval = interval
        self.cancel_requested = False
        self._job_fields: dict[str, Any] = {}
        self._live: dict[str, dict[str, Any]] = {}
        self._live_dirty = False
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._last_beat = 0.0
        self._pulse: dict[str, Any] = {}
        self._pulse_on = uses_pulse(model)
        self._thread = threading.Thread(target=self._run, name=f"monitor-{pk}", daemon=True)

    def __enter__(self) -> JobMonitor:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def cancelled_now(self) -> bool:
        """Whether the job was asked to stop, read from its row now when this monitor has not
        seen it yet (it looks once a tick): a job looks here just before it sends another
        request, so none goes out after a Cancel. The monitor still marks the phase
        "cancelling" on its next tick."""
        if self.cancel_requested or not cancellable(self.model):
            return self.cancel_requested
        model: Any = self.model  # one with cancel_requested
        state = model.objects.filter(pk=self.pk).values("cancel_requested", "status").first()
        return bool(
            state is None or state["cancel_requested"] or state["status"] != JobStatus.RUNNING
        )

    def set_job(self, **fields: Any) -> None:
        with self._lock:
            self._job_fields.update(fields)

    def set_live(self, sample: int, state: dict[str, Any]) -> None:
        with self._lock:
            self._live[str(sample)] = state
            self._live_dirty = True

    def drop_live(self, sample: int) -> None:
        with self._lock:
            if self._live.pop(str(sample), None) is not None:
                self._live_dirty = True

    def _run(self) -> None:
        try:
            while not self._stop.wait(self.interval):
                self._flush()
            self._flush()
        finally:
            connection.close()

    def _flush(self) -> None:
        with self._lock:
            fields, self._job_fields = self._job_fields, {}
            if self._live_dirty:
                fields["live"] = dict(self._live)
                self._live_dirty = False
        now = time.monotonic()
        if self._pulse_on:
            # The pulse first: it never waits on a database lock.
            self._pulse.update({k: v for k, v in fields.items() if k in ("progress", "phase")})
            write_pulse(self.model, self.pk, self._pulse)
        try:
            close_old_connections()
            rows = self.model.objects.filter(pk=self.pk, status=JobStatus.RUNNING)
            if fields or now - self._last_beat >= heartbeat_interval_s():
                self._last_beat = now
                rows.update(heartbeat_at=timezone.now(), **fields)
            if cancellable(self.model):
                model: Any = self.model  # one with cancel_requested and a phase
                state = (
                    model.objects.filter(pk=self.pk).values("cancel_requested", "status").first()
                )
                cancel = bool(
                    state is None
                    or state["cancel_requested"]
                    or state["status"] != JobStatus.RUNNING
                )
                if cancel and not self.cancel_requested:
                    # the page can say the worker is stopping, not only that it was asked to
                    model.objects.filter(pk=self.pk, status=JobStatus.RUNNING).update(
                        phase="cancelling"
                    )
                    with self._lock:
                        self._job_fields.pop("phase", None)
                # one way: a job seen stopped (cancelled, or swept as lost and perhaps
                # claimed again by another worker) never goes back to running here
                self.cancel_requested = self.cancel_requested or cancel
        except Exception:  # a flaky DB must not kill the job; the next tick retries
            log.exception("progress write for %s %s failed", self.model.__name__, self.pk)
            with self._lock:  # write these fields again next tick
                self._job_fields = {**fields, **self._job_fields}
                if "live" in fields:
                    self._live_dirty = True
