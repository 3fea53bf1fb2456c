"""A worker killed mid-job leaves no job stuck: the job ends failed with a readable message.
(Policy: never retried automatically; see studio/services/job_runtime.py.)"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from studio.models import JobStatus, SimulationJob
from studio.services.simulation import do_start_simulation
from tests.support.fake_openai import fake_openai_server
from tests.support.jobs import make_trajectory, wait_job
from tests.support.worker import running_worker, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]

STALE_S = 2
SLOW = "<predicted_observation>" + "tock " * 400 + "</predicted_observation>"


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


def start_slow_job(project, base_url: str) -> SimulationJob:
    trajectory = make_trajectory(project)
    job = do_start_simulation(
        user=None,
        branch=trajectory.root_branch,
        fork_index=1,
        action="cat /etc/hostname",
        n=2,
        backend="openai",
        base_url=base_url,
        model="m",
    )

    def decoding():
        return any("tock" in b.progress.get("text", "") for b in job.branches.all())

    wait_for(decoding, timeout=60)
    assert SimulationJob.objects.get(pk=job.pk).status == JobStatus.RUNNING
    return job


def assert_failed_as_lost(job: SimulationJob) -> None:
    job = wait_job(job, timeout=60)
    assert job.status == JobStatus.FAILED
    assert "stopped without finishing" in job.error and "Retry" in job.error
    assert job.finished_at is not None and job.attempts == 1
    assert set(job.branches.values_list("status", flat=True)) == {"failed"}


def test_whole_worker_killed_is_failed_when_a_worker_starts(project, settings):
    settings.STUDIO_JOB_STALE_S = STALE_S
    env = {"STUDIO_JOB_STALE_S": str(STALE_S)}
    with fake_openai_server(lambda b, i: SLOW, chunk_delay_s=0.05) as srv:
        with running_worker(("default",), extra_env=env) as proc:
            job = start_slow_job(project, srv.base_url)
            os.killpg(proc.pid, signal.SIGKILL)  # the worker and its pool, no cleanup
            proc.wait()
        time.sleep(0.5)
        assert SimulationJob.objects.get(pk=job.pk).status == JobStatus.RUNNING
        time.sleep(STALE_S + 1)  # no heartbeat any more
        # the next worker to start sweeps jobs of lost workers (worker_ready)
        with running_worker(("default",), extra_env=env):
            assert_failed_as_lost(job)


def test_worker_restarted_at_once_sweeps_again_when_the_heartbeat_is_stale(project, settings):
    stale = 8  # longer than a worker takes to start: the sweep at worker_ready finds nothing
    settings.STUDIO_JOB_STALE_S = stale
    env = {"STUDIO_JOB_STALE_S": str(stale)}
    with fake_openai_server(lambda b, i: SLOW, chunk_delay_s=0.05) as srv:
        with running_worker(("default",), extra_env=env) as proc:
            job = start_slow_job(project, srv.base_url)
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        killed_at = time.monotonic()
        with running_worker(("default",), extra_env=env):
            assert time.monotonic() - killed_at < stale
            assert SimulationJob.objects.get(pk=job.pk).status == JobStatus.RUNNING
            # the delayed sweep the new worker scheduled fails it, with nobody polling
            assert_failed_as_lost(job)


def test_killed_pool_process_redelivers_and_the_claim_fails_the_job(project):
    with fake_openai_server(lambda b, i: SLOW, chunk_delay_s=0.05) as srv:
        with running_worker(("default",)) as proc:
            job = start_slow_job(project, srv.base_url)
            children = child_pids(proc.pid)
            assert children, "the prefork worker has no pool process"
            for pid in children:
                os.kill(pid, signal.SIGKILL)
            # reject_on_worker_lost puts the message back; the redelivery finds the job
            # RUNNING and marks it failed instead of running it twice
            assert_failed_as_lost(job)
