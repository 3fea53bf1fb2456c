"""Simulation jobs through a real Celery worker and the real Redis broker."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from studio.models import Branch, JobStatus, SimulationJob
from studio.models.trajectories import BranchStatus
from studio.services.simulation import do_cancel_job, do_retry_job, do_start_simulation
from tests.support.jobs import (  # noqa: F401
    TERMINAL_STEPS,
    default_worker,
    make_trajectory,
    wait_job,
)

pytestmark = [pytest.mark.django_db(transaction=True)]


@pytest.mark.worker
def test_retrieval_next_observation_succeeds_with_timings(project, default_worker):  # noqa: F811
    trajectory = make_trajectory(project)
    root = trajectory.root_branch
    job = do_start_simulation(
        user=project.users["researcher"],
        branch=root,
        fork_index=1,
        action="cat /srv/app/requirements.txt",
        n=3,
        backend="retrieval",
    )
    assert job.queue.endswith("default")
    job = wait_job(job)
    assert job.status == JobStatus.SUCCEEDED, job.error
    assert job.attempts == 1
    assert job.queue_wait_s is not None and job.queue_wait_s >= 0
    assert job.decode_s is not None and job.decode_s >= 0
    assert job.progress == 1.0 and job.phase == "done"
    children = list(job.branches.order_by("sample_index"))
    assert [b.name for b in children] == [f"sim #{i} · step 1" for i in (1, 2, 3)]
    for child in children:
        assert child.status == BranchStatus.SUCCEEDED
        assert child.origin == "simulated"  # the recorded action: not an edit
        steps = list(child.all_steps())
        # inherits step 0 from the root, owns the simulated step 1
        assert [s.index for s in steps] == [0, 1]
        assert steps[0].branch_id == root.pk and steps[1].branch_id == child.pk
        simulated = steps[1]
        assert simulated.provenance == "simulated"
        # the non-neural baseline answers with recorded observations of the domain
        assert simulated.observation in {o for _, o in TERMINAL_STEPS}
        assert simulated.raw_output
        assert simulated.parse_status in ("well_formed", "no_tag")
        assert simulated.meta["backend"] == "retrieval"
        assert set(simulated.timings) >= {"duration_s", "tokens_in", "tokens_out"}
        assert child.progress["phase"] == "done"
    observations = [c.steps.get().observation for c in children]
    # sample 1 is the best match: the recorded answer to that very action; the N samples differ
    assert observations[0] == "flask==3.0.2\ngunicorn==22.0.0"
    assert len(set(observations)) == 3
    assert job.tokens_out == sum(s.timings["tokens_out"] for c in children for s in c.steps.all())
    assert job.tokens_per_s is None  # no decoding rate for a non-neural baseline


@pytest.mark.worker
def test_replay_resimulates_every_later_step(project, default_worker):  # noqa: F811
    trajectory = make_trajectory(project)
    root = trajectory.root_branch
    job = do_start_simulation(
        user=None,
        branch=root,
        fork_index=1,
        action="cat /srv/app/static/index.html",
        mode="replay",
        n=2,
        backend="retrieval",
    )
    job = wait_job(job)
    assert job.status == JobStatus.SUCCEEDED, job.error
    recorded = list(root.all_steps())
    for child in job.branches.all():
        assert child.origin == "edited"
        steps = list(child.all_steps())
        assert [s.index for s in steps] == [0, 1, 2, 3]
        assert steps[1].action == "cat /srv/app/static/index.html"
        assert steps[1].provenance == "edited"
        # later recorded actions kept, their observations re-simulated by the worker
        assert [s.action for s in steps[2:]] == [s.action for s in recorded[2:]]
        assert all(s.branch_id == child.pk for s in steps[1:])
        assert [s.provenance for s in steps[1:]] == ["edited", "simulated", "simulated"]
        assert all(s.observation and s.raw_output for s in steps[1:])


def test_validation_names_the_problem(project):
    root = make_trajectory(project).root_branch
    cases = [
        ({"n": 0}, "n (number of futures) must be 1 to 64"),
        ({"n": 65}, "must be 1 to 64"),
        ({"fork_index": 9}, "fork_index 9 is outside the branch's steps (0 to 3, or 4 to add"),
        ({"backend": "gpt"}, "unknown backend 'gpt'"),
        ({"params": {"temperature": 3}}, "temperature must be in [0.0, 2.0]"),
        ({"params": {"top_p": 0}}, "top_p must be in (0.0, 1.0]"),
        ({"params": {"max_tokens": "many"}}, "max_tokens must be an integer"),
        ({"params": {"beam": 2}}, "unknown sampling parameter 'beam'"),
        ({"mode": "dream"}, "mode must be one of next, replay, rollout"),
        ({"backend": "openai", "base_url": ""}, "the openai backend needs a base URL"),
        ({"fork_index": 4, "action": ""}, "an action is required to simulate a new step"),
    ]
    for overrides, message in cases:
        kwargs = {
            "user": None,
            "branch": root,
            "fork_index": 1,
            "action": "ls",
            "backend": "retrieval",
        }
        kwargs.update(overrides)
        with pytest.raises(ValidationError) as info:
            do_start_simulation(**kwargs)
        assert any(message in m for m in info.value.messages), (overrides, info.value.messages)
    assert not SimulationJob.objects.exists()
    assert Branch.objects.count() == 1  # nothing half-created


def test_routing_cancel_queued_and_retry(project, settings):
    settings.WORLD_MODEL_PATH = ""
    root = make_trajectory(project).root_branch
    hf_job = do_start_simulation(
        user=None, branch=root, fork_index=0, action="ls", backend="hf", model="/models/tiny"
    )
    assert hf_job.queue == f"{settings.STUDIO_QUEUE_PREFIX}gpu"
    # no worker listens: the job stays queued and cancelling it is immediate
    hf_job = do_cancel_job(hf_job)
    assert hf_job.status == JobStatus.CANCELLED
    assert set(hf_job.branches.values_list("status", flat=True)) == {"cancelled"}
    retried = do_retry_job(hf_job)
    assert retried.pk != hf_job.pk and retried.status == JobStatus.QUEUED
    assert retried.branches.count() == 1 and hf_job.branches.count() == 1
    assert (retried.backend, retried.model, retried.fork_index) == ("hf", "/models/tiny", 0)
    with pytest.raises(ValidationError, match="still queued"):
        do_retry_job(retried)
    do_cancel_job(retried)
