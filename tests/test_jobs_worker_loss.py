"""A worker killed mid-job leaves no job stuck: the workers' sweeper fails it with a readable
message, with no page open; a job whose broker message was lost is sent again.
(Policy: never rerun automatically; see studio/jobs/runtime.py.)"""

from __future__ import annotations

import os
import signal
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from studio.jobs.sweeper import resend_lost_messages
from studio.models import JobStatus, SimulationJob
from studio.services.simulation import build_request, start_simulation
from studio.tasks import enqueue_simulation
from tests.support.fake_openai import fake_openai_server
from tests.support.jobs import live_texts, make_trajectory, start_job, wait_job
from tests.support.worker import other_workers_paused, running_worker, wait_for

# Workers of their own (a short STUDIO_JOB_STALE_S, one killed) on queues of their own.
pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.worker,
    pytest.mark.usefixtures("isolated_queues"),
]

STALE_S = 4  # heartbeats every 0.5 s, lost after 3 s, a sweep every second
STALE_ENV = {"STUDIO_JOB_STALE_S": str(STALE_S)}
ANSWER = "<predicted_observation>" + "tock " * 50 + "</predicted_observation>"


def child_pids(pid: int) -> list[int]:
    children = Path(f"/proc/{pid}/task/{pid}/children")
    if children.exists():
        return [int(p) for p in children.read_text().split()]
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def start_held_job(project, base_url: str) -> SimulationJob:
    """A job that streams a few chunks, then waits (the fake server holds its streams)."""
    trajectory = make_trajectory(project)
    job = start_job(
        trajectory.root_branch,
        fork_index=1,
        action="cat /etc/hostname",
        n=2,
        backend="openai",
        base_url=base_url,
        model="m",
    )
    wait_for(lambda: any("tock" in t for t in live_texts(job)), timeout=60)
    assert SimulationJob.objects.get(pk=job.pk).status == JobStatus.RUNNING
    return job


def assert_failed_as_lost(job: SimulationJob) -> None:
    job = wait_job(job, timeout=60)
    assert job.status == JobStatus.FAILED
    assert "stopped without finishing" in job.error and "Retry" in job.error
    assert job.finished_at is not None and job.attempts == 1 and job.live == {}
    assert set(job.branches.values_list("status", flat=True)) == {"failed"}


def test_another_workers_sweeper_fails_the_job_of_a_killed_worker(project, settings):
    settings.STUDIO_JOB_STALE_S = STALE_S
    with fake_openai_server(lambda b, i: ANSWER, hold_after_chunks=10) as srv:
        # a second worker on another queue: it runs nothing here, it only sweeps
        with running_worker(("gpu",), extra_env=STALE_ENV):
            with running_worker(("default",), extra_env=STALE_ENV) as proc:
                job = start_held_job(project, srv.base_url)
                os.killpg(proc.pid, signal.SIGKILL)  # the worker and its pool, no cleanup
                proc.wait()
            # nobody polls a page, no worker starts: the sweeper's timer finds it
            assert_failed_as_lost(job)
        job.refresh_from_db()
        assert job.finished_at - job.heartbeat_at >= timedelta(seconds=STALE_S * 0.75)


def test_a_worker_that_starts_sweeps_at_once(project, settings):
    settings.STUDIO_JOB_STALE_S = STALE_S
    with fake_openai_server(lambda b, i: ANSWER, hold_after_chunks=10) as srv:
        with running_worker(("default",), extra_env=STALE_ENV) as proc:
            job = start_held_job(project, srv.base_url)
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        lost_at = SimulationJob.objects.get(pk=job.pk).heartbeat_at + timedelta(
            seconds=STALE_S * 0.75
        )
        wait_for(lambda: timezone.now() > lost_at, timeout=30)
        assert SimulationJob.objects.get(pk=job.pk).status == JobStatus.RUNNING
        with running_worker(("gpu",), extra_env=STALE_ENV):
            assert_failed_as_lost(job)


def test_a_killed_pool_process_fails_its_job_which_never_runs_twice(project, settings, tmp_path):
    settings.STUDIO_JOB_STALE_S = STALE_S
    log = tmp_path / "worker.log"
    with fake_openai_server(lambda b, i: ANSWER, hold_after_chunks=10) as srv:
        with running_worker(("default",), extra_env=STALE_ENV, log_path=log) as proc:
            job = start_held_job(project, srv.base_url)
            requests = len(srv.requests)
            children = child_pids(proc.pid)
            assert children, "the prefork worker has no pool process"
            for pid in children:
                os.kill(pid, signal.SIGKILL)
            # reject_on_worker_lost gives the message back; the job already runs, so it is
            # not run again; its heartbeat stops and this worker's sweeper fails it
            assert_failed_as_lost(job)
            assert len(srv.requests) == requests  # no second run asked the model anything
            # the message came back (before or after the sweep) and was not run again
            ignored = (
                "is already running; its message redelivered is ignored",
                f"SimulationJob {job.pk} is failed; not running it again",
            )
            try:
                wait_for(lambda: any(line in log.read_text() for line in ignored), timeout=60)
            except AssertionError:  # say what the worker did instead
                raise AssertionError(f"worker log:\n{log.read_text()[-4000:]}") from None
            assert len(srv.requests) == requests


def test_a_lost_message_is_sent_again_and_a_waiting_one_is_not(project, settings):
    settings.STUDIO_JOB_STALE_S = STALE_S
    root = make_trajectory(project).root_branch
    request = build_request(root, {"fork_index": 1, "backend": "hf", "model": "/models/x"})
    waiting = start_simulation(user=None, branch=root, request=request)  # gpu: nobody consumes
    enqueue_simulation(waiting)
    lost = start_simulation(
        user=None, branch=root, request=build_request(root, {"fork_index": 2})
    )  # never sent: as if the broker lost it
    long_ago = timezone.now() - timedelta(seconds=10 * STALE_S)
    SimulationJob.objects.update(created_at=long_ago)
    SimulationJob.objects.filter(pk=waiting.pk).update(dispatched_at=long_ago)
    waiting.refresh_from_db()
    assert waiting.message_id

    assert resend_lost_messages() == 1  # the waiting job's message is still in its queue
    waiting_after = SimulationJob.objects.get(pk=waiting.pk)
    assert waiting_after.message_id == waiting.message_id
    lost.refresh_from_db()
    assert lost.message_id and lost.dispatched_at > long_ago
    assert resend_lost_messages() == 0  # just sent: not again
    # a worker takes the re-sent message and runs the job
    with running_worker(("default",), extra_env=STALE_ENV):
        assert wait_job(lost).status == JobStatus.SUCCEEDED
    from studio.services.simulation import cancel_simulation

    cancel_simulation(waiting)


# ---- the workers' heartbeat rows (studio.services.workers) ---------------------------------


def test_a_worker_writes_its_heartbeat_row_and_says_when_it_stops(project):
    from studio.models import WorkerHeartbeat
    from studio.queues import queue_name
    from studio.services.workers import queue_consumers

    with running_worker(("default",)) as proc:
        row = wait_for(lambda: WorkerHeartbeat.objects.filter(pid=proc.pid).first(), timeout=30)
        assert row.name.startswith("test-") and row.queues == [queue_name("default")]
        assert row.pool == "prefork" and row.concurrency == 1 and row.stopped_at is None
        assert [w.name for w in queue_consumers(queue_name("default"))] == [row.name]
        first_seen = row.seen_at
        # it beats on (every STUDIO_WORKER_GONE_S / 3 s)
        wait_for(lambda: WorkerHeartbeat.objects.get(pk=row.pk).seen_at > first_seen, timeout=15)
        os.kill(proc.pid, signal.SIGTERM)  # a clean (warm) shutdown
        proc.wait(timeout=60)
    row.refresh_from_db()
    assert row.stopped_at is not None
    assert queue_consumers(queue_name("default")) == []


def test_the_page_of_a_killed_workers_job_says_so_within_15_s(project, researcher_client):
    """The default liveness windows (STUDIO_WORKER_GONE_S=15, STUDIO_JOB_STALE_S=120): the
    page says that the worker stopped answering long before the sweeper's 90 s rule, and
    Cancel then ends the job as cancelled at once."""
    import time

    from django.urls import reverse

    # No other worker of this run (the session's shared one) sweeps meanwhile: its sweeper
    # fails the job as lost once its worker is gone, in the moment the page would say so.
    with fake_openai_server(lambda b, i: ANSWER, hold_after_chunks=10) as srv:
        with running_worker(("default",)) as proc, other_workers_paused(proc):
            job = start_held_job(project, srv.base_url)
            assert SimulationJob.objects.get(pk=job.pk).worker.startswith("test-")
            url = reverse("simulation_job", args=[job.pk])
            page = researcher_client.get(url, HTTP_HX_REQUEST="true").content.decode()
            assert "data-worker-status" not in page  # alive: nothing to say
            os.killpg(proc.pid, signal.SIGKILL)
            killed = time.monotonic()
            proc.wait()

            def says_gone() -> str | None:
                page = researcher_client.get(url, HTTP_HX_REQUEST="true").content.decode()
                return page if 'data-worker-status="gone"' in page else None

            page = wait_for(says_gone, timeout=25, interval=0.5)
            assert time.monotonic() - killed <= 16.5
            assert "stopped answering" in page and 'id="job-cancel"' in page
            assert SimulationJob.objects.get(pk=job.pk).status == JobStatus.RUNNING
            researcher_client.post(reverse("simulation_job_cancel", args=[job.pk]))
            job.refresh_from_db()
            assert job.status == JobStatus.CANCELLED, job.status
            assert "Cancelled. Its worker had stopped without finishing" in job.error


def test_a_worker_shutting_down_warm_beats_on_until_its_job_is_done(project, tmp_path):
    """A warm shutdown finishes the jobs it runs: meanwhile its row stays alive (no page says
    its job lost, no sweeper fails it), and it says stopped only once they are done."""
    from django.utils import timezone

    from studio.models import WorkerHeartbeat
    from studio.services.workers import worker_state

    log = tmp_path / "worker.log"
    with fake_openai_server(lambda b, i: ANSWER, hold_after_chunks=10) as srv:
        with running_worker(("default",), log_path=log) as proc:
            job = start_held_job(project, srv.base_url)
            os.kill(proc.pid, signal.SIGTERM)
            wait_for(lambda: "Warm shutdown" in log.read_text(), timeout=30)
            asked = timezone.now()
            row = WorkerHeartbeat.objects.get(pid=proc.pid)
            wait_for(lambda: WorkerHeartbeat.objects.get(pk=row.pk).seen_at > asked, timeout=15)
            row.refresh_from_db()
            assert row.stopped_at is None
            assert worker_state(SimulationJob.objects.get(pk=job.pk)).alive
            srv.release.set()
            assert wait_job(job).status == JobStatus.SUCCEEDED
            proc.wait(timeout=60)
    row.refresh_from_db()
    assert row.stopped_at is not None and row.stopped_at >= asked
