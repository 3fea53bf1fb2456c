"""The demo gallery: every scenario finds its demo trajectory and step, offline prompted
scenarios show labelled samples (never as a model's output), deterministic ones run live
through a real worker, and a model configured runs them all."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command
from django.urls import reverse

from studio.demo_data.scenarios import SCENARIOS, scenario
from studio.models import Membership, Project, Role, SimulationJob, Trajectory
from studio.services.endpoints import EndpointData, save_endpoint
from studio.services.gallery import run_scenario, scenario_state
from tests.support.jobs import wait_job


@pytest.fixture
def demo(make_user):
    call_command("load_demo", stdout=StringIO())
    project = Project.objects.get(name="Demo")
    user = make_user("gallery-researcher")
    Membership.objects.create(project=project, user=user, role=Role.RESEARCHER)
    return project, user


@pytest.mark.django_db
def test_every_scenario_has_its_trajectory_step_and_a_valid_perturbation(demo):
    from inference import perturbations as P

    project, _ = demo
    assert {s.domain for s in SCENARIOS} == {"mcp", "search", "terminal", "swe", "android",
                                             "web", "os"}  # fmt: skip
    for s in SCENARIOS:
        trajectory = Trajectory.objects.get(project=project, title=s.trajectory_title)
        assert trajectory.domain == s.domain
        assert trajectory.root_branch.steps.filter(index=s.step).exists(), s.key
        p = P.build(s.perturbation["kind"], s.perturbation["params"], s.perturbation["mode"])
        assert (p.mode == "prompted") == bool(s.sample), s.key  # offline needs a sample


@pytest.mark.django_db
def test_offline_prompted_scenarios_show_labelled_samples(client, demo):
    project, user = demo
    client.force_login(user)
    page = client.get(reverse("gallery", args=[project.pk])).content.decode()
    assert "No world model is configured" in page
    prompted = [s for s in SCENARIOS if s.sample]
    assert page.count("Sample result written for this demo: no model produced it") == len(prompted)
    s = scenario("web-cookie-wall")
    jobs = run_scenario(project, s)
    assert [j.params["scenario"]["variant"] for j in jobs] == ["plain"]  # no model: no fake run
    state = scenario_state(project, s)
    assert state.perturbed.sample and state.perturbed.job is None


@pytest.mark.django_db(transaction=True)
@pytest.mark.worker
def test_a_deterministic_scenario_runs_live_side_by_side(client, demo, default_worker):
    project, user = demo
    client.force_login(user)
    s = scenario("terminal-permission")
    response = client.post(reverse("gallery_run", args=[project.pk, s.key]))
    assert response.status_code == 302
    jobs = list(SimulationJob.objects.filter(params__scenario__key=s.key))
    assert len(jobs) == 2
    for job in jobs:
        assert wait_job(job).status == "succeeded"
    state = scenario_state(project, s)
    assert state.perturbed.step.observation == "df: /var/backups: Permission denied\n[exit code 1]"
    assert state.perturbed.step.observation_source == "perturbed"
    assert state.plain.step.observation_source == "simulated"
    card = client.get(
        reverse("gallery_card", args=[project.pk, s.key]), headers={"HX-Request": "true"}
    )
    assert card.status_code == 286  # finished: polling stops
    html = card.content.decode()
    assert "perturbed: df refused" in html and "Compare" in html
    assert "Sample result" not in html


@pytest.mark.django_db
def test_with_a_model_configured_prompted_scenarios_run_too(demo):
    project, _ = demo
    save_endpoint(
        project,
        EndpointData(name="lab", role="world", kind="openai", base_url="http://127.0.0.1:9/v1",
                     model="m"),
    )  # fmt: skip
    project.endpoints.filter(name="lab").update(is_default=True)
    project.endpoints.exclude(name="lab").filter(role="world").update(is_default=False)
    jobs = run_scenario(project, scenario("os-modal"))
    assert [j.params["scenario"]["variant"] for j in jobs] == ["plain", "perturbed"]
    assert jobs[1].perturbations[0]["mode"] == "prompted" and jobs[1].backend == "openai"
    assert not scenario_state(project, scenario("os-modal")).perturbed.sample
