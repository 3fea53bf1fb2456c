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
from tests.support.worker import running_worker, wait_for

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
