"""The pulse file: progress and liveness that SQLite's single writer cannot hold back."""

from datetime import timedelta

from django.utils import timezone

from studio.models import ImportJob, JobStatus
from studio.services.job_runtime import (
    clear_pulse,
    live_progress,
    reap_stale_jobs,
    write_pulse,
)


def _running_import(project, *, beat_age_s: float) -> ImportJob:
    return ImportJob.objects.create(
        project=project,
        original_name="big.jsonl",
        stored_path="/nowhere",
        status=JobStatus.RUNNING,
        progress=0.5,
        heartbeat_at=timezone.now() - timedelta(seconds=beat_age_s),
    )


def test_a_fresh_pulse_keeps_a_job_with_a_stale_row_alive(project, settings):
    settings.STUDIO_JOB_STALE_S = 60
    job = _running_import(project, beat_age_s=600)
    write_pulse(ImportJob, job.pk, {"progress": 0.8})
    try:
        assert reap_stale_jobs() == 0
        job.refresh_from_db()
        assert job.status == JobStatus.RUNNING
        assert live_progress(job) == 0.8  # the pulse is ahead of the row
    finally:
        clear_pulse(ImportJob, job.pk)
    assert live_progress(job) == 0.5
    assert reap_stale_jobs() == 1  # no pulse, stale row: the worker is gone
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED and "stopped without finishing" in job.error


def test_finished_jobs_show_their_row_progress_not_a_pulse(project):
    job = _running_import(project, beat_age_s=0)
    write_pulse(ImportJob, job.pk, {"progress": 0.9})
    try:
        ImportJob.objects.filter(pk=job.pk).update(status=JobStatus.FAILED, progress=0.3)
        job.refresh_from_db()
        assert live_progress(job) == 0.3
    finally:
        clear_pulse(ImportJob, job.pk)
