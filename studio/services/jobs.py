"""Stopping and resuming the jobs that can (evaluations, judge jobs, exports), and what pages show of a job's liveness, read from its row (and, for an import on SQLite, its
pulse file) without writing anything: a request never changes a job's state. The workers'
sweeper (`studio.jobs.sweeper`) is what marks a dead worker's job failed."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.utils import timezone

from studio.jobs.runtime import fail_lost, is_silent, lost_after_s, pulse_is_fresh, read_pulse
from studio.models import JobStatus


def silent_for_s(job: Any) -> float | None:
    """Seconds since a RUNNING job's last heartbeat, when that is long enough for its worker
    to count as gone (the sweeper will fail it); None while it is alive or not running."""
    if job.status != JobStatus.RUNNING or job.heartbeat_at is None:
        return None
    age = (timezone.now() - job.heartbeat_at).total_seconds()
    if age < lost_after_s() or pulse_is_fresh(type(job), job.pk):
        return None
    return age


def shown_progress(job: Any) -> float:
    """The progress to show: the row's, or the pulse's when the row lags behind (an import
    on SQLite, whose write transaction keeps the monitor from writing the row)."""
    progress = float(job.progress or 0.0)
    if job.status == JobStatus.RUNNING:
        pulse = read_pulse(type(job), job.pk) or {}
        progress = max(progress, float(pulse.get("progress") or 0.0))
    return progress


def request_cancel(model: Any, pk: int) -> None:
    """A queued job ends at once (cancelled); a running one is asked to stop, and its worker
    ends it after the work in flight."""
    now = timezone.now()
    with transaction.atomic():
        if not model.objects.filter(pk=pk, status=JobStatus.QUEUED).update(
            status=JobStatus.CANCELLED, cancel_requested=True, finished_at=now, phase="cancelled"
        ):
            model.objects.filter(pk=pk, status=JobStatus.RUNNING).update(cancel_requested=True)
    row = model.objects.filter(pk=pk, status=JobStatus.RUNNING).first()
    if row is not None and is_silent(row, now):
        fail_lost(model, row, now)  # its worker is gone and will never stop it: settle it now


# A job in these may go on again (`reopen`).
STOPPED = (JobStatus.FAILED, JobStatus.CANCELLED)


def reopen(model: Any, pk: int) -> bool:
    """A stopped job (failed or cancelled) back to queued for its worker to go on (the caller
    enqueues it, in the same transaction); False when it had not stopped."""
    return bool(
        model.objects.filter(pk=pk, status__in=STOPPED).update(
            status=JobStatus.QUEUED,
            error="",
            finished_at=None,
            cancel_requested=False,
            phase="queued",
            message_id="",
        )
    )
