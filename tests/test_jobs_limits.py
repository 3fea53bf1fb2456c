"""Time limits from settings: a job that runs too long ends failed with a readable message."""

from __future__ import annotations

import pytest

from studio.models import JobStatus, Step
from tests.support.fake_openai import fake_openai_server
from tests.support.jobs import make_trajectory, start_job, wait_job
from tests.support.worker import running_worker

# A worker of its own (a short time limit) on queues of its own.
pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.worker,
    pytest.mark.usefixtures("isolated_queues"),
]


def test_job_past_its_time_limit_fails_readably(project):
    slow = "<predicted_observation>" + "drip " * 400 + "</predicted_observation>"  # ~25 s
    trajectory = make_trajectory(project)
    # hard limit 6 s -> soft limit 3 s in settings; the run stops itself just before
    env = {"STUDIO_JOB_HARD_LIMIT_S": "6"}
    with fake_openai_server(lambda b, i: slow, chunk_delay_s=0.05) as srv:
        with running_worker(("default",), extra_env=env):
            job = start_job(
                user=None,
                branch=trajectory.root_branch,
                fork_index=1,
                action="yes",
                n=2,
                backend="openai",
                base_url=srv.base_url,
                model="m",
            )
            job = wait_job(job, timeout=60)
    assert job.status == JobStatus.FAILED
    assert job.error.startswith("Stopped: the job ran past its time limit of 3 s")
    assert (job.finished_at - job.started_at).total_seconds() < 6
    assert set(job.branches.values_list("status", flat=True)) == {"failed"}
    assert not Step.objects.filter(branch__job=job).exists()


def test_killed_at_the_hard_limit_is_told_apart_from_an_earlier_death(settings):
    from datetime import datetime, timedelta
    from types import SimpleNamespace

    from studio.jobs.runtime import reached_hard_limit

    start = datetime(2026, 12, 1, 9, 0)

    def ran(seconds):
        return SimpleNamespace(started_at=start, heartbeat_at=start + timedelta(seconds=seconds))

    settings.STUDIO_JOB_STALE_S = 120  # heartbeats every 15 s
    settings.STUDIO_JOB_HARD_LIMIT_S = 3600
    assert reached_hard_limit(ran(3560)) and not reached_hard_limit(ran(3500))
    # a short limit: the slack shrinks with it (a death at 50 s of 60 is no time-out)
    settings.STUDIO_JOB_HARD_LIMIT_S = 60
    assert reached_hard_limit(ran(55)) and not reached_hard_limit(ran(50))
    assert not reached_hard_limit(SimpleNamespace(started_at=start, heartbeat_at=None))
