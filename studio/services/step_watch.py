"""A step of an episode on the job path, watched while its agent waits (`studio.serving.steps`):
the agent hears within seconds, as a retryable EpisodeUnavailable (HTTP 503, Retry-After),
that the worker answering its step went away or that no worker consumes the step's queue,
instead of waiting minutes for the sweeper's timeouts and then reading a failure as its own.

What decides is the workers' heartbeat rows (`studio.services.workers`: every worker writes
its row every STUDIO_WORKER_GONE_S / 3 s), never a message alone. The rules, so that no step
is lost or written twice:

- RUNNING, and its worker gone by its heartbeat row and the job's own heartbeat as old
  (`runtime.orphaned`, the sweeper's rule): the waiting web process fails the job itself
  (`runtime.fail_lost`, only if nothing changed since) and tells the agent to send the step
  again. A failed job writes nothing later: its worker's answer, or a redelivered message
  on another worker, finds it no longer RUNNING (`claim`, `episode_steps.settle`).
- QUEUED and no live worker consumes its queue, for QUEUED_GRACE_S: failed the same way,
  naming the queue and the command that starts a worker for it.
- QUEUED, with a live consumer, and a worker of its queue died (or restarted) since its
  message was sent: that worker may have taken the message (prefetched) and died with it
  unacknowledged, where the broker keeps it for hours. The step is sent again, with a new
  message id, and runs on a live worker: its agent still waits for it, so its answer is
  wanted. The old message, if it comes back, finds the job claimed and is ignored.
- The agent stopped waiting (its connection closed, `abandon`): a step still QUEUED is
  cancelled, so that no message delivered later writes a step nobody asked for anymore. A
  waiting web process marks its queued step as wanted every STUDIO_JOB_STALE_S / 4 (the
  row's `heartbeat_at`); the sweeper fails an episode's queued step unmarked for
  STUDIO_JOB_STALE_S (its web process went away with the agent's connection)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import timedelta

from django.utils import timezone

from studio.jobs.runtime import WORKER_LOST_MESSAGE, fail_lost, orphaned, stale_after_s
from studio.models import JobStatus, SimulationJob, WorkerHeartbeat
from studio.services import episodes
from studio.services.episodes import EpisodeUnavailable
from studio.services.workers import (
    beat_interval_s,
    describe_start,
    gone_after_s,
    heartbeats,
    is_alive,
)

log = logging.getLogger(__name__)

QUEUED_GRACE_S = 2.0  # a step may wait this long for a queue nobody consumes (a worker starting)
HEARTBEATS_TTL_S = 1.0  # the workers' rows, read once a second per process for every waiter

LOST_PREFIX = WORKER_LOST_MESSAGE.split("{", 1)[0]  # how a job failed as "worker lost" begins
NO_CONSUMER_PREFIX = "No worker consumes queue"
ABANDONED_MESSAGE = "Cancelled: the agent stopped waiting for this step before a worker took it."

_cache: tuple[float, list[WorkerHeartbeat]] = (0.0, [])
_cache_lock = threading.Lock()


def _heartbeats() -> list[WorkerHeartbeat]:
    global _cache
    with _cache_lock:
        at, rows = _cache
        if time.monotonic() - at < HEARTBEATS_TTL_S:
            return rows
    rows = heartbeats()
    with _cache_lock:
        _cache = (time.monotonic(), rows)
    return rows


def waiter_mark_s() -> float:
    """How often a waiting agent's web process marks its queued step as still wanted (its
    `heartbeat_at`, which a QUEUED job has no other use for)."""
    return stale_after_s() / 4


def unwaited_after_s() -> float:
    """A queued step of an episode not marked for this long has no agent waiting for it."""
    return stale_after_s()


def retry_after_s() -> float:
    """How soon a retry may find a worker: about one heartbeat of a worker that starts."""
    return float(max(1, round(beat_interval_s())))


def watch(
    job_id: int,
    *,
    unclaimed_after_s: float | None = None,
    look_at_workers: bool = True,
    resend: Callable[[int, str], bool] | None = None,
) -> SimulationJob | None:
    """The job if it ended, else None; with `look_at_workers`, raises EpisodeUnavailable
    when it cannot end because its worker is gone or no worker consumes its queue (the job
    is failed first, so nothing of it is written later), and sends a queued step's message
    again with `resend(job id, its message id)` when a worker that may hold it died (see
    the module; the caller sends: services never import the tasks)."""
    job = episodes.finished_job(job_id, unclaimed_after_s=unclaimed_after_s)
    if job is not None or not look_at_workers:
        return job
    job = SimulationJob.objects.filter(pk=job_id).first()
    if job is None or job.is_finished:
        return job
    now = timezone.now()
    if job.status == JobStatus.RUNNING:
        if job.worker and orphaned(job, now):
            if fail_lost(SimulationJob, job, now):
                raise EpisodeUnavailable(lost_message(job, now), retry_after=retry_after_s())
        return None  # alive, or it ended meanwhile (the next look reads how)
    if job.status != JobStatus.QUEUED:
        return None
    if (now - (job.heartbeat_at or job.created_at)).total_seconds() >= waiter_mark_s():
        # its agent still waits: the sweeper fails a queued step nobody waits for
        SimulationJob.objects.filter(pk=job.pk, status=JobStatus.QUEUED).update(heartbeat_at=now)
    workers = _heartbeats()
    queue = job.queue
    of_queue = [w for w in workers if queue in (w.queues or [])]
    if not any(is_alive(w, now) for w in of_queue):
        if (now - job.created_at).total_seconds() < QUEUED_GRACE_S:
            return None
        message = (
            f"{NO_CONSUMER_PREFIX} {queue}: no worker of it has written its heartbeat in the "
            f"last {gone_after_s():.0f} s (STUDIO_WORKER_GONE_S). Nothing of the step was "
            f"recorded: send it again once one runs. {describe_start(queue)}"
        )
        failed = SimulationJob.objects.filter(pk=job.pk, status=JobStatus.QUEUED).update(
            status=JobStatus.FAILED, error=message, phase="failed", finished_at=now
        )
        if failed:
            raise EpisodeUnavailable(message, retry_after=retry_after_s())
        return None
    sent = job.dispatched_at or job.created_at
    if resend is not None and any(_died_since(w, sent, now) for w in of_queue):
        if resend(job.pk, job.message_id):
            log.warning(
                "episode step %s: a worker of queue %s died since its message was sent; sent again",
                job.pk,
                queue,
            )
    return None


def _died_since(worker: WorkerHeartbeat, sent, now) -> bool:
    """A worker that could have taken a message sent at `sent` and is gone now: silent or
    stopped after it was sent, or restarted since (a new process under its name)."""
    if worker.started_at > sent + timedelta(seconds=1):
        # a new process: it took nothing before it started, but one of its name before it
        # did (a restart), or it is new; sending again costs one message either way
        return worker.seen_at >= sent
    return not is_alive(worker, now) and worker.seen_at >= sent


def lost_message(job: SimulationJob, now) -> str:
    """What the agent is told of a step whose worker was lost, whichever process noticed
    first (this waiting one, or the sweeper: `now` is then when it failed the job)."""
    beat = job.heartbeat_at or job.started_at or job.created_at
    worker = f" ({job.worker})" if job.worker else ""
    return (
        f"The worker running this step{worker} was lost: its heartbeat stopped "
        f"{max(0.0, (now - beat).total_seconds()):.0f} s ago (killed, restarted or out of "
        "memory). Nothing of the step was recorded: send it again."
    )


def is_worker_lost(job: SimulationJob) -> bool:
    """A step failed as "worker lost", as `runtime.fail_lost` leaves it (the sweeper's or
    this process's): its job page's text (`WORKER_LOST_MESSAGE`) is not the agent's."""
    return (
        job.status == JobStatus.FAILED
        and job.phase == "failed"
        and (job.error or "").startswith(LOST_PREFIX)
    )


def is_unavailable(job: SimulationJob) -> bool:
    """A failed step whose failure was the studio's (a worker lost, no worker for its queue,
    nobody took it): the agent may send it again as it was."""
    error = job.error or ""
    return job.status == JobStatus.FAILED and (
        error.startswith(LOST_PREFIX)
        or error.startswith(NO_CONSUMER_PREFIX)
        or error.startswith("no worker took this step")
    )


def abandon(job_id: int) -> bool:
    """The agent stopped waiting: cancel the step if no worker has taken it yet."""
    return bool(
        SimulationJob.objects.filter(pk=job_id, status=JobStatus.QUEUED).update(
            status=JobStatus.CANCELLED,
            error=ABANDONED_MESSAGE,
            phase="cancelled",
            finished_at=timezone.now(),
        )
    )
