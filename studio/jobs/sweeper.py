"""The sweeper: every worker runs it on a timer (`studio.celery`'s bootstep), so jobs of dead
workers are failed without anyone opening a page, and jobs whose broker message was lost are
sent again.

- RUNNING, no heartbeat for `lost_after_s()` (and no fresh pulse): failed as "worker lost".
  With a sweep every `sweep_interval_s()`, within STUDIO_JOB_STALE_S of the worker's death,
  as long as one worker is alive (one that starts sweeps at once).
- Sooner, RUNNING and orphaned (`runtime.orphaned`): the worker that claimed it is gone by
  its own heartbeat row (silent for STUDIO_WORKER_GONE_S, shut down, or restarted since the
  claim) and the job's heartbeat is as old: failed (or cancelled, if its user asked) the
  same way, within about twice STUDIO_WORKER_GONE_S of the death.
- QUEUED for longer than STUDIO_JOB_STALE_S since its message was sent, and the broker no
  longer holds that message: sent again with a new message id. A duplicate is harmless: the
  claim runs a job once and ignores any other message for it.
- QUEUED steps of episodes that no agent waits for anymore (its web process marks a step it
  waits for every STUDIO_JOB_STALE_S / 4, `studio.services.step_watch`): cancelled after
  STUDIO_JOB_STALE_S unmarked, so that a message a dead worker held, given back hours later,
  never writes a step nobody asked for anymore.
- Every FILE_SWEEP_EVERY_S: uploads whose import succeeded or stopped longer than
  STUDIO_UPLOAD_RETENTION_DAYS ago, and leftover files (`studio.jobs.file_retention`).
- Steps imports wrote unindexed (`studio.search.indexer`) that no indexer took on since the
  last sweep, with no indexer message in the queue: the indexer's message sent again.
- Every minute: episodes that took no step for STUDIO_EMPTY_EPISODE_TTL_S since their reset
  (a reset alone records nothing), and MCP sessions idle for a day
  (`studio.services.episode_library.sweep_empty_episodes`)."""

from __future__ import annotations

import logging
from datetime import timedelta

from django.db import connection
from django.utils import timezone

from studio.jobs.broker import message_ids_held
from studio.jobs.file_retention import sweep_files_if_due
from studio.jobs.runtime import (
    JobModel,
    fail_lost,
    lost_after_s,
    orphaned,
    pulse_is_fresh,
    stale_after_s,
)
from studio.models import (
    ArenaRun,
    BehaviourSearch,
    Campaign,
    EvaluationRun,
    ExportJob,
    FineTuneRun,
    ImportJob,
    JobStatus,
    JudgeJob,
    SimulationJob,
)
from studio.search.indexer import sweep_unindexed
from studio.services.episode_library import sweep_empty_episodes

log = logging.getLogger(__name__)

# An arena is RUNNING (with heartbeats) only while it compares; while it waits for its
# simulations and judge job it is QUEUED, its message re-sent on a timer (`studio.jobs.arena`),
# so a lost one is sent again like any job's.
JOB_MODELS: tuple[JobModel, ...] = (
    SimulationJob,
    ImportJob,
    EvaluationRun,
    JudgeJob,
    ExportJob,
    ArenaRun,
    Campaign,
    FineTuneRun,
    BehaviourSearch,
)


def reap_stale_jobs() -> int:
    """Fail RUNNING jobs whose heartbeat stopped. Cheap; safe to run anywhere, often."""
    now = timezone.now()
    cutoff = now - timedelta(seconds=lost_after_s())
    reaped = 0
    for model in JOB_MODELS:
        for row in model.objects.filter(status=JobStatus.RUNNING, heartbeat_at__lt=cutoff):
            if pulse_is_fresh(model, row.pk):
                continue  # alive, only kept from writing its row (SQLite's single writer)
            reaped += fail_lost(model, row, now)
        # the worker that claimed it said it is gone: no need to wait for lost_after_s
        rows = model.objects.filter(status=JobStatus.RUNNING, heartbeat_at__gte=cutoff).exclude(
            worker=""
        )
        for row in rows:
            if orphaned(row, now):
                reaped += fail_lost(model, row, now)
    if reaped:
        log.warning("marked %d job(s) failed: worker lost", reaped)
    return reaped


def cancel_unwaited_steps() -> int:
    """Cancel the queued steps of episodes whose agent stopped waiting (see the module)."""
    from django.db.models import Q

    from studio.services.step_watch import ABANDONED_MESSAGE, unwaited_after_s

    now = timezone.now()
    cutoff = now - timedelta(seconds=unwaited_after_s())
    rows = SimulationJob.objects.filter(
        status=JobStatus.QUEUED, appends=True, trajectory__source_format="episode"
    ).filter(Q(heartbeat_at__lt=cutoff) | Q(heartbeat_at__isnull=True, created_at__lt=cutoff))
    # a person's step in the playground waits on its page, not on an agent: never these
    unwaited = [
        pk for pk, params in rows.values_list("pk", "params") if not (params or {}).get("played")
    ]
    cancelled = SimulationJob.objects.filter(pk__in=unwaited, status=JobStatus.QUEUED).update(
        status=JobStatus.CANCELLED, error=ABANDONED_MESSAGE, phase="cancelled", finished_at=now
    )
    if cancelled:
        log.warning("cancelled %d queued episode step(s) no agent waits for", cancelled)
    return cancelled


def resend_lost_messages(app=None) -> int:
    """Send again the queued jobs whose message the broker no longer holds. `app`: the
    Celery app to ask (default: the current one)."""
    from studio.tasks import redispatch

    cutoff = timezone.now() - timedelta(seconds=stale_after_s())
    waiting = []
    for model in JOB_MODELS:
        rows = model.objects.filter(status=JobStatus.QUEUED, created_at__lt=cutoff).exclude(
            dispatched_at__gt=cutoff
        )
        waiting += [(model, row) for row in rows]
    if not waiting:
        return 0
    queues = {_queue_of(row) for _, row in waiting}
    held = message_ids_held(queues, app)
    if held is None:
        return 0  # this broker cannot be asked; never send blind duplicates
    resent = 0
    for model, row in waiting:
        if row.message_id and row.message_id in held:
            continue  # still waiting its turn in the queue
        resent += redispatch(model, row.pk, previous=row.message_id)
    if resent:
        log.warning("sent %d job message(s) again: the broker had lost them", resent)
    return resent


def _queue_of(row) -> str:
    from studio.queues import queue_name

    return getattr(row, "queue", "") or queue_name("default")


def sweep(app=None) -> None:
    """One sweep (the worker's timer calls this, with its app); never raises."""
    try:
        reap_stale_jobs()
        cancel_unwaited_steps()  # before re-sending: nobody waits for these
        resend_lost_messages(app)
        sweep_files_if_due()
        sweep_empty_episodes()
        sweep_unindexed(app)
    except Exception:
        log.exception("job sweep failed; the next one tries again")
    finally:
        # The worker's main process forks pool processes: never leave them a connection.
        connection.close()
