"""The pulse file: on SQLite only, the liveness and progress of a job that the database's single
writer (an import's long transaction) keeps from reaching its row. On PostgreSQL rows say
everything."""

from datetime import timedelta

import pytest
from django.utils import timezone

from studio.jobs import runtime
from studio.jobs.sweeper import reap_stale_jobs
from studio.models import ImportJob, JobStatus, SimulationJob
from studio.services.jobs import shown_progress, silent_for_s
from tests.support.branching import make_job, make_trajectory


def _running_import(project, *, beat_age_s: float) -> ImportJob:
    return ImportJob.objects.create(
        project=project,
        original_name="big.jsonl",
        stored_path="/nowhere",
        status=JobStatus.RUNNING,
        progress=0.5,
        heartbeat_at=timezone.now() - timedelta(seconds=beat_age_s),
    )


@pytest.fixture
def single_writer(monkeypatch):
    monkeypatch.setattr(runtime, "single_writer_db", lambda: True)


def test_a_fresh_pulse_keeps_an_import_with_a_stale_row_alive(project, settings, single_writer):
    settings.STUDIO_JOB_STALE_S = 60
    job = _running_import(project, beat_age_s=600)
    runtime.write_pulse(ImportJob, job.pk, {"progress": 0.8})
    try:
        assert reap_stale_jobs() == 0
        job.refresh_from_db()
        assert job.status == JobStatus.RUNNING
        assert shown_progress(job) == 0.8  # the pulse is ahead of the row
        assert silent_for_s(job) is None
    finally:
        runtime.clear_pulse(ImportJob, job.pk)
    assert shown_progress(job) == 0.5
    assert silent_for_s(job) >= 600
    assert reap_stale_jobs() == 1  # no pulse, stale row: the worker is gone
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED and "stopped without finishing" in job.error


def test_finished_jobs_show_their_row_progress_not_a_pulse(project, single_writer):
    job = _running_import(project, beat_age_s=0)
    runtime.write_pulse(ImportJob, job.pk, {"progress": 0.9})
    try:
        ImportJob.objects.filter(pk=job.pk).update(status=JobStatus.FAILED, progress=0.3)
        job.refresh_from_db()
        assert shown_progress(job) == 0.3
    finally:
        runtime.clear_pulse(ImportJob, job.pk)


def test_without_a_single_writer_rows_alone_decide(project, settings, monkeypatch):
    monkeypatch.setattr(runtime, "single_writer_db", lambda: False)
    settings.STUDIO_JOB_STALE_S = 60
    job = _running_import(project, beat_age_s=600)
    runtime.write_pulse(ImportJob, job.pk, {"progress": 0.8})  # a stray file is ignored
    try:
        assert shown_progress(job) == 0.5
        assert reap_stale_jobs() == 1
    finally:
        runtime._pulse_path(ImportJob, job.pk).unlink(missing_ok=True)
    # and no job keeps a pulse at all there
    _, root = make_trajectory(project)
    sim = make_job(root, 1, n=1, status="running")
    SimulationJob.objects.filter(pk=sim.pk).update(heartbeat_at=timezone.now())
    assert not runtime.uses_pulse(SimulationJob)
    assert reap_stale_jobs() == 0  # a fresh heartbeat: alive
