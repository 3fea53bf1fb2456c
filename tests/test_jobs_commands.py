"""`manage.py simulate` through a real worker."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from inference.perturbations import TRUNCATION_MARKER
from studio.models import JobStatus, SimulationJob, Step
from studio.services.endpoints import EndpointData, save_endpoint
from tests.support.fake_openai import fake_openai_server
from tests.support.jobs import make_trajectory

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]


def test_simulate_wait_prints_the_predictions(project, default_worker):
    trajectory = make_trajectory(project)
    out = StringIO()
    call_command(
        "simulate", "--trajectory", str(trajectory.pk), "--step", "1",
        "--action", "cat /srv/app/requirements.txt", "--n", "2", "--backend", "retrieval",
        "--wait", "--timeout", "90", stdout=out,
    )  # fmt: skip
    text = out.getvalue()
    job = SimulationJob.objects.get()
    assert job.status == JobStatus.SUCCEEDED and job.n == 2
    assert f"job {job.pk} queued on" in text and f"job {job.pk} succeeded" in text
    assert f"--- job {job.pk} #1 @1 · cat /srv/app/requirements.txt" in text
    assert f"--- job {job.pk} #2 @1" in text
    assert "step 1 predicted observation:\nflask==3.0.2\ngunicorn==22.0.0" in text


def test_simulate_wait_exits_non_zero_on_failure(project, default_worker):
    trajectory = make_trajectory(project)
    with fake_openai_server(lambda b, i: (400, "model m is not served here")) as srv:
        with pytest.raises(CommandError, match="failed: The openai backend failed"):
            call_command(
                "simulate", "--trajectory", str(trajectory.pk), "--step", "0", "--n", "1",
                "--backend", "openai", "--base-url", srv.base_url, "--model", "m", "--wait",
                stdout=StringIO(),
            )  # fmt: skip
    assert SimulationJob.objects.get().status == JobStatus.FAILED


def test_simulate_runs_a_named_endpoint(project, default_worker):
    trajectory = make_trajectory(project)
    answer = "<predicted_observation>Flask 3.0.2</predicted_observation>"
    with fake_openai_server(lambda b, i: answer) as srv:
        save_endpoint(
            project,
            EndpointData(
                name="lab vLLM", role="world", kind="openai", base_url=srv.base_url, model="w",
                api_key="lab-key", temperature=0.2, max_tokens=77,
            ),
        )  # fmt: skip
        out = StringIO()
        call_command(
            "simulate", "--trajectory", str(trajectory.pk), "--step", "2",
            "--endpoint", "lab vLLM", "--wait", stdout=out,
        )  # fmt: skip
        assert srv.authorizations == ["Bearer lab-key"]
        # the endpoint's default sampling, no flag given
        assert (srv.requests[0]["temperature"], srv.requests[0]["max_tokens"]) == (0.2, 77)
    job = SimulationJob.objects.get()
    assert job.world_endpoint.name == "lab vLLM" and (job.backend, job.model) == ("openai", "w")
    assert "model 'lab vLLM'" in out.getvalue() and "Flask 3.0.2" in out.getvalue()


def test_simulate_perturbs_with_a_spec_through_the_worker(project, default_worker):
    trajectory = make_trajectory(project)
    out = StringIO()
    call_command(
        "simulate", "--trajectory", str(trajectory.pk), "--step", "0", "--mode", "replay",
        "--backend", "retrieval", "--perturbation", "truncated:chars=10", "--wait",
        "--timeout", "90", stdout=out,
    )  # fmt: skip
    job = SimulationJob.objects.get()
    assert job.status == JobStatus.SUCCEEDED, job.error
    steps = list(Step.objects.filter(branch__job=job).order_by("index"))
    assert len(steps) == 4
    for step in steps:  # every step at most 10 characters plus the marker, and says so
        body = step.observation.removesuffix(TRUNCATION_MARKER)
        assert len(body) <= 10
        assert step.meta["perturbation"]["label"] == "truncated:chars=10"
    cut = [s for s in steps if s.observation.endswith(TRUNCATION_MARKER)]
    assert cut and all(s.observation_source == "perturbed" for s in cut)
    assert "[perturbed: truncated:chars=10 (deterministic)]" in out.getvalue()


def test_simulate_rejects_bad_perturbations(project):
    trajectory = make_trajectory(project)
    with pytest.raises(CommandError, match=r"--perturbation: perturbation 'truncated:chars=x'"):
        call_command(
            "simulate", "--trajectory", str(trajectory.pk), "--step", "0",
            "--perturbation", "truncated:chars=x",
        )  # fmt: skip
    with pytest.raises(CommandError, match="--perturbation: .*cannot follow a prompted"):
        call_command(
            "simulate", "--trajectory", str(trajectory.pk), "--step", "0", "--backend",
            "retrieval", "--perturbation", "custom:instruction=the disk is full",
        )  # fmt: skip
    assert not SimulationJob.objects.exists()


def test_simulate_rejects_bad_arguments(project):
    trajectory = make_trajectory(project)
    with pytest.raises(CommandError, match="no trajectory with id 999999"):
        call_command("simulate", "--trajectory", "999999", "--step", "0")
    with pytest.raises(CommandError, match="fork_index 7 is outside"):
        call_command("simulate", "--trajectory", str(trajectory.pk), "--step", "7")
    with pytest.raises(CommandError, match="must be 1 to 64"):
        call_command("simulate", "--trajectory", str(trajectory.pk), "--step", "0", "--n", "100")
    with pytest.raises(CommandError, match="no model endpoint named 'nope'.*Retrieval baseline"):
        call_command(
            "simulate", "--trajectory", str(trajectory.pk), "--step", "0", "--endpoint", "nope"
        )
    with pytest.raises(CommandError, match="--agent-endpoint: an agent rollout .* needs an agent"):
        call_command(
            "simulate", "--trajectory", str(trajectory.pk), "--step", "0", "--mode", "rollout",
            "--max-steps", "3",
        )  # fmt: skip
    with pytest.raises(CommandError, match="--max-steps -5: a rollout takes 1 to 50 steps"):
        call_command(
            "simulate", "--trajectory", str(trajectory.pk), "--step", "0", "--mode", "replay",
            "--max-steps", "-5",
        )  # fmt: skip
    with pytest.raises(CommandError, match="--max-steps is for --mode rollout only"):
        call_command(
            "simulate", "--trajectory", str(trajectory.pk), "--step", "0", "--max-steps", "3"
        )
    assert not SimulationJob.objects.exists()
