"""Simulation jobs: the job body in-process against the database (the rows a worker leaves),
and the real path through a Celery worker and the broker."""

from __future__ import annotations

import pytest

from studio.jobs.simulation import run_simulation_job
from studio.models import Branch, JobStatus, SimulationJob
from studio.models.trajectories import BranchStatus
from studio.services.simulation import (
    InvalidRequest,
    build_request,
    cancel_simulation,
    retry_simulation,
    start_simulation,
)
from tests.support.jobs import (  # noqa: F401
    TERMINAL_STEPS,
    make_trajectory,
    start_job,
    wait_job,
)

pytestmark = [pytest.mark.django_db(transaction=True)]


def queued_job(branch, **data) -> SimulationJob:
    """A job as the web creates it, not sent to any broker."""
    return start_simulation(user=None, branch=branch, request=build_request(branch, data))


def test_job_body_stores_each_future_as_a_child_branch(project):
    trajectory = make_trajectory(project)
    root = trajectory.root_branch
    job = queued_job(root, fork_index=1, action="cat /srv/app/requirements.txt", n=3)
    run_simulation_job(job.pk)  # what the task runs, here in the test process
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED, job.error
    assert (job.attempts, job.progress, job.phase, job.live) == (1, 1.0, "done", {})
    assert job.queue_wait_s is not None and job.decode_s is not None
    assert job.tokens_per_s is None  # no decoding rate for a non-neural baseline
    children = list(job.branches.order_by("sample_index"))
    assert [b.name for b in children] == [
        f"job {job.pk} #{i} @1 · cat /srv/app/requirements.txt" for i in (1, 2, 3)
    ]
    observations = []
    for child in children:
        assert child.status == BranchStatus.SUCCEEDED and child.origin == "simulated"
        assert child.lineage == [[root.pk, 0], [child.pk, 1]]
        steps = list(child.all_steps())
        assert [s.index for s in steps] == [0, 1]
        assert steps[0].branch_id == root.pk and steps[1].branch_id == child.pk
        simulated = steps[1]
        assert simulated.provenance == "replayed" and simulated.raw_output
        assert simulated.observation_source == "simulated"
        assert simulated.meta["backend"] == "retrieval" and simulated.meta["job"] == job.pk
        assert simulated.meta["baseline"] == "retrieval (non-neural)"
        assert set(simulated.timings) >= {"duration_s", "tokens_in", "tokens_out"}
        observations.append(simulated.observation)
    # sample 1 is the recorded answer to that very action; the N samples differ
    assert observations[0] == "flask==3.0.2\ngunicorn==22.0.0"
    assert len(set(observations)) == 3
    assert job.tokens_out == sum(s.timings["tokens_out"] for c in children for s in c.steps.all())


def test_job_body_replay_rewrites_every_later_step(project):
    trajectory = make_trajectory(project)
    root = trajectory.root_branch
    job = queued_job(
        root, fork_index=1, action="cat /srv/app/static/index.html", mode="replay", n=2
    )
    run_simulation_job(job.pk)
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED, job.error
    recorded = list(root.all_steps())
    for child in job.branches.all():
        assert child.origin == "edited"
        steps = list(child.all_steps())
        assert [s.index for s in steps] == [0, 1, 2, 3]
        assert [s.action for s in steps[2:]] == [s.action for s in recorded[2:]]
        assert [s.provenance for s in steps[1:]] == ["edited", "replayed", "replayed"]
        assert all(s.branch_id == child.pk and s.observation for s in steps[1:])


def test_job_body_fails_readably_and_settles_every_branch(project):
    trajectory = make_trajectory(project, domain="web", steps=[("Click [1]", "")])
    job = queued_job(trajectory.root_branch, fork_index=0, n=2)
    run_simulation_job(job.pk)
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED
    assert job.error == (
        "The retrieval backend failed: retrieval baseline: no recorded steps of domain 'web' "
        "to answer from; import trajectories of this domain or configure a model"
    )
    assert set(job.branches.values_list("status", flat=True)) == {"failed"}
    assert job.live == {} and job.phase == "failed"


def test_a_claimed_job_runs_once(project):
    trajectory = make_trajectory(project)
    job = queued_job(trajectory.root_branch, fork_index=1)
    run_simulation_job(job.pk, "message-1")
    run_simulation_job(job.pk, "message-2")  # a duplicate message: nothing happens
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED and job.attempts == 1
    assert job.claimed_by == "message-1"
    assert job.branches.get().steps.count() == 1


def test_routing_cancel_queued_and_retry(project, settings):
    root = make_trajectory(project).root_branch
    hf_job = queued_job(root, fork_index=0, action="ls", backend="hf", model="/models/tiny")
    assert hf_job.queue == f"{settings.STUDIO_QUEUE_PREFIX}gpu"
    # no worker listens: the job stays queued and cancelling it is immediate
    hf_job = cancel_simulation(hf_job)
    assert hf_job.status == JobStatus.CANCELLED
    assert set(hf_job.branches.values_list("status", flat=True)) == {"cancelled"}
    retried = retry_simulation(hf_job)
    assert retried.pk != hf_job.pk and retried.status == JobStatus.QUEUED
    assert retried.branches.count() == 1 and hf_job.branches.count() == 1
    assert (retried.backend, retried.model, retried.fork_index) == ("hf", "/models/tiny", 0)
    with pytest.raises(InvalidRequest, match="still queued"):
        retry_simulation(retried)
    cancel_simulation(retried)
    assert Branch.objects.filter(status=BranchStatus.QUEUED).count() == 0


@pytest.mark.worker
def test_worker_runs_jobs_sent_through_the_broker(project, default_worker):
    trajectory = make_trajectory(project)
    job = start_job(
        trajectory.root_branch,
        fork_index=1,
        action="cat /srv/app/static/index.html",
        n=2,
        mode="replay",
    )
    assert job.queue.endswith("default")
    job = wait_job(job)
    assert job.status == JobStatus.SUCCEEDED, job.error
    assert job.message_id and job.claimed_by == job.message_id
    assert job.attempts == 1 and job.queue_wait_s >= 0
    for child in job.branches.all():
        assert child.status == BranchStatus.SUCCEEDED
        assert [s.provenance for s in child.steps.order_by("index")] == [
            "edited",
            "replayed",
            "replayed",
        ]
