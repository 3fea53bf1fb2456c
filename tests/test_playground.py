"""The playground through the Django client: the first action forks a played branch, each
later one is appended to it (run in-process, as a worker would); the model picked stays
picked; undo forks a new played branch; hand-over opens the rollout editor (the agent's
first action included) or says how to add an agent model; typed actions are labelled as a
person's."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from inference.simulation.request import ForkFacts, SimulationRequest
from inference.simulation.runner import run_simulation
from inference.simulation.sink import MemorySink
from inference.worlds import parse_world
from studio.jobs.episode_steps import run_episode_step
from studio.jobs.simulation import run_simulation_job
from studio.models import Branch, BranchOrigin, JobStatus, Perturbation, SimulationJob, Step
from studio.services import simulation
from studio.services.endpoints import EndpointData, save_endpoint
from studio.services.worlds import save_world, start_trajectory
from tests.support.branching import make_child, make_trajectory
from tests.support.fake_backends import ScriptedAgent, ScriptedBackend
from tests.support.fake_openai import fake_openai_server

pytestmark = pytest.mark.django_db

WORLD = {"name": "Flights", "domain": "terminal", "description": "A booking desk.", "files": {}}


def play_post(project, action: str, endpoint=None, **extra) -> dict:
    world = endpoint or project.endpoints.get(kind="retrieval")
    return {"action": action, "action_format": "auto", "world_endpoint": str(world.pk), **extra}


def _fake_world_model(project, base_url: str, name: str = "fake"):
    data = EndpointData(name=name, role="world", kind="openai", base_url=base_url, model="m")
    return save_endpoint(project, data).endpoint


def _in_world(project):
    version = save_world(project, parse_world(WORLD)).version
    trajectory = start_trajectory(version, "Book a flight to Oslo.")
    return version, trajectory, trajectory.root_branch


def _run(job: SimulationJob) -> SimulationJob:
    """What the worker runs for the job's message, here in the test process."""
    (run_episode_step if job.appends else run_simulation_job)(job.pk)
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED, job.error
    return job


def _selected(page: str, endpoint) -> bool:
    """Whether the page's select picks `endpoint` (the editor's options carry data-*)."""
    return re.search(rf'<option value="{endpoint.pk}"[^>]* selected[ >]', page) is not None


@pytest.mark.django_db(transaction=True)
def test_five_played_steps_stay_on_one_branch_with_the_model_kept(
    researcher_client, project, isolated_queues
):
    """(Run here, as a worker would: no worker consumes this test's own queues.) The issue's
    report: after five steps the trajectory opened on an empty root and the
    steps sat on ten chained branches, and the model went back to the baseline each step."""
    _, trajectory, root = _in_world(project)
    with fake_openai_server() as srv:
        other = _fake_world_model(project, srv.base_url, "another")
        chosen = _fake_world_model(project, srv.base_url, "chosen")
        page = researcher_client.get(reverse("playground", args=[root.pk])).content.decode()
        # in a world the baseline is never the default: a model that reads the world is
        assert not _selected(page, project.endpoints.get(kind="retrieval"))
        assert "in the world <strong>Flights</strong> (version 1)" in page
        assert "On in the world" not in page and "in the world in world" not in page
        url = reverse("playground", args=[root.pk])
        response = researcher_client.post(url, play_post(project, "search OSL", chosen))
        first = SimulationJob.objects.get()
        assert response["Location"].endswith(f"?at=0&job={first.pk}") and not first.appends
        played = Branch.objects.get(job=first)
        assert (played.origin, played.parent_id, played.name) == (
            BranchOrigin.PLAYED,
            root.pk,
            "played @0 · search OSL",
        )
        _run(first)
        # the page follows the played branch once its step is in
        done = researcher_client.get(response["Location"])
        assert done["Location"] == reverse("playground", args=[played.pk])
        for k, action in enumerate(["pick 2", "seat 14A", "pay", "confirm"], start=1):
            page = researcher_client.get(reverse("playground", args=[played.pk])).content
            page = page.decode()
            assert _selected(page, chosen) and not _selected(page, other), k  # kept
            assert "added to this branch as its next step" in page
            url = reverse("playground", args=[played.pk])
            response = researcher_client.post(url, play_post(project, action, chosen))
            job = SimulationJob.objects.latest("pk")
            assert response["Location"].endswith(f"?job={job.pk}")
            assert (job.appends, job.branch_id, job.fork_index) == (True, played.pk, k)
            assert job.world_endpoint_id == chosen.pk and job.params["world"]["name"] == "Flights"
            _run(job)
            after = researcher_client.get(response["Location"])
            assert after["Location"] == reverse("playground", args=[played.pk])
    job_page = researcher_client.get(reverse("simulation_job", args=[job.pk])).content.decode()
    assert "A step played in the playground (the action typed by a person)" in job_page
    assert "episode played by an outside agent" not in job_page
    steps = list(Step.objects.filter(branch__trajectory=trajectory).order_by("index"))
    assert [s.branch_id for s in steps] == [played.pk] * 5  # one branch holds all five
    assert [s.action for s in steps] == ["search OSL", "pick 2", "seat 14A", "pay", "confirm"]
    assert {s.provenance for s in steps} == {"typed"}  # a person's actions, not edits
    assert all(s.meta["world"]["name"] == "Flights" for s in steps)
    assert Branch.objects.filter(trajectory=trajectory).count() == 2  # the root and one more
    # the trajectory opens on the branch that was played, which shows the typed badge
    page = researcher_client.get(reverse("trajectory", args=[trajectory.pk]))
    assert page.context["branch"].pk == played.pk
    assert "prov-typed" in page.content.decode()
    # undo: playing from step 3 forks a new played branch there; nothing is lost
    response = researcher_client.post(
        reverse("playground", args=[played.pk]) + "?at=3", play_post(project, "pay later", chosen)
    )
    undo = SimulationJob.objects.latest("pk")
    fork = Branch.objects.get(job=undo)
    assert not undo.appends and (fork.parent_id, fork.fork_index, fork.origin) == (
        played.pk,
        3,
        BranchOrigin.PLAYED,
    )
    assert played.steps.count() == 5


def test_the_first_action_forks_a_played_branch_at_the_end(researcher_client, project):
    t, root = make_trajectory(project)
    url = reverse("playground", args=[root.pk])
    page = researcher_client.get(url).content.decode()
    assert "Action at step 5" in page and "starts a new branch of its own" in page
    response = researcher_client.post(url + "?at=5", play_post(project, "make test"))
    assert response.status_code == 302
    job = SimulationJob.objects.get()
    assert (job.fork_index, job.n, job.mode, job.action) == (5, 1, "next", "make test")
    assert response["Location"].endswith(f"?at=5&job={job.pk}")
    assert job.params["played"] == {"action_format": "auto"}
    child = Branch.objects.get(job=job)
    assert child.parent_id == root.pk and child.fork_index == 5
    assert child.origin == BranchOrigin.PLAYED  # not "edited"
    pending = researcher_client.get(response["Location"]).content.decode()
    assert 'id="play-pending"' in pending and "make test" in pending


def test_a_played_step_tried_again_is_still_played(researcher_client, project):
    t, root = make_trajectory(project)
    researcher_client.post(reverse("playground", args=[root.pk]), play_post(project, "ls -a"))
    job = SimulationJob.objects.get()
    SimulationJob.objects.filter(pk=job.pk).update(status=JobStatus.FAILED)
    job.refresh_from_db()
    again = simulation.retry_simulation(job)
    assert again.params["played"] == job.params["played"]
    assert Branch.objects.get(job=again).origin == BranchOrigin.PLAYED


def test_undo_plays_one_step_earlier_without_losing_anything(researcher_client, project):
    t, root = make_trajectory(project)
    url = reverse("playground", args=[root.pk])
    page = researcher_client.get(url + "?at=4").content.decode()
    assert "the next action replaces step 4" in page
    assert f'href="{url}?at=3"' in page  # undo again
    researcher_client.post(url + "?at=4", play_post(project, "echo again"))
    job = SimulationJob.objects.get()
    assert job.fork_index == 4 and job.action == "echo again" and not job.appends
    assert root.steps.count() == 5  # the branch keeps its steps
    assert researcher_client.get(url + "?at=9").status_code == 404


def test_a_second_step_while_one_is_answered_is_refused_on_the_form(researcher_client, project):
    t, root = make_trajectory(project)
    played = make_child(root, 5, ["one"])
    Branch.objects.filter(pk=played.pk).update(origin=BranchOrigin.PLAYED)
    url = reverse("playground", args=[played.pk])
    assert researcher_client.post(url, play_post(project, "ls")).status_code == 302
    again = researcher_client.post(url, play_post(project, "pwd"))
    assert again.status_code == 400 and "is still being answered" in again.content.decode()
    assert SimulationJob.objects.filter(appends=True).count() == 1


def test_a_perturbation_for_the_next_step_and_errors_on_the_form(researcher_client, project):
    t, root = make_trajectory(project)
    cut = Perturbation.objects.create(
        project=project, name="Told", kind="custom", params={"instruction": "x"}, mode="prompted"
    )
    url = reverse("playground", args=[root.pk])
    page = researcher_client.post(url, play_post(project, "ls", perturbation=str(cut.pk)))
    assert (
        page.status_code == 400 and "cannot follow a prompted perturbation" in page.content.decode()
    )
    empty = researcher_client.post(url, play_post(project, "   "))
    assert empty.status_code == 400 and "the action is empty" in empty.content.decode()
    assert not SimulationJob.objects.exists()


def test_the_pending_step_moves_to_the_new_branch_when_done(researcher_client, project):
    t, root = make_trajectory(project)
    researcher_client.post(reverse("playground", args=[root.pk]), play_post(project, "ls -a"))
    job = SimulationJob.objects.get()
    child = Branch.objects.get(job=job)
    status = researcher_client.get(
        reverse("playground_job", args=[job.pk]), headers={"HX-Request": "true"}
    )
    assert status.status_code == 200 and "Queued" in status.content.decode()
    SimulationJob.objects.filter(pk=job.pk).update(status=JobStatus.SUCCEEDED)
    done = researcher_client.get(
        reverse("playground_job", args=[job.pk]), headers={"HX-Request": "true"}
    )
    assert done["HX-Redirect"] == reverse("playground", args=[child.pk])


# ---- a world-started trajectory never simulates without its world --------------------------


def test_the_baseline_is_refused_in_a_world_everywhere(researcher_client, project):
    version, trajectory, root = _in_world(project)
    baseline = project.endpoints.get(kind="retrieval")
    url = reverse("playground", args=[root.pk])
    page = researcher_client.post(url, play_post(project, "search OSL", baseline))
    text = page.content.decode()
    assert page.status_code == 400
    assert "This trajectory was started in world &#x27;Flights&#x27; v1" in text
    assert "never reads a world&#x27;s prompt" in text
    # the editor (and every caller of the service: API, gallery, rollouts) says the same
    editor = researcher_client.post(
        reverse("branch_fork", args=[root.pk, 0]),
        {"action": "search OSL", "action_format": "auto", "mode": "next", "n": "1",
         "temperature": "0.7", "top_p": "1", "max_tokens": "64",
         "world_endpoint": str(baseline.pk)},
    )  # fmt: skip
    assert editor.status_code == 400 and "started in world" in editor.content.decode()
    request = simulation.build_request(
        root, {"fork_index": 0, "action": "ls", "backend": "retrieval"}
    )
    with pytest.raises(simulation.InvalidRequest, match="started in world 'Flights' v1"):
        simulation.start_simulation(user=None, branch=root, request=request)
    assert not SimulationJob.objects.exists()


def test_a_deleted_world_version_is_said_not_dropped(researcher_client, project):
    version, trajectory, root = _in_world(project)
    endpoint = _fake_world_model(project, "http://127.0.0.1:9/v1")
    version.world.delete()
    request = simulation.build_request(
        root,
        {"fork_index": 0, "action": "ls", "backend": "openai", "model": "m",
         "base_url": "http://127.0.0.1:9/v1"},
    )  # fmt: skip
    with pytest.raises(simulation.InvalidRequest, match="that version was deleted"):
        simulation.start_simulation(
            user=None, branch=root, request=request, world_endpoint=endpoint
        )
    page = researcher_client.get(reverse("playground", args=[root.pk])).content.decode()
    assert 'id="play-world-missing"' in page and "which was deleted" in page
    assert not SimulationJob.objects.exists()


# ---- hand over to the agent ----------------------------------------------------------------


def test_hand_over_without_an_agent_model_says_how_to_add_one(client, project):
    t, root = make_trajectory(project)
    url = reverse("playground", args=[root.pk])
    client.force_login(project.users["admin"])
    page = client.get(url).content.decode()
    assert '<button type="button" class="button" id="play-handover" disabled' in page
    add = reverse("endpoint_create", kwargs={"project_id": project.pk}) + "?role=agent"
    assert f'href="{add}" id="play-add-agent"' in page
    client.force_login(project.users["researcher"])
    page = client.get(url).content.decode()
    assert "Ask a project admin to add one" in page and 'id="play-add-agent"' not in page


def test_hand_over_opens_a_rollout_whose_first_action_is_the_agents(researcher_client, project):
    t, root = make_trajectory(project)
    agent = save_endpoint(
        project,
        EndpointData(
            name="planner", role="agent", kind="openai", base_url="http://127.0.0.1:9/v1",
            model="agent-m",
        ),
    ).endpoint  # fmt: skip
    baseline = project.endpoints.get(kind="retrieval")
    page = researcher_client.get(reverse("playground", args=[root.pk])).content.decode()
    link = (
        reverse("branch_fork", args=[root.pk, 5])
        + f"?mode=rollout&amp;handover=1&amp;agent={agent.pk}&amp;world={baseline.pk}"
    )
    assert f'href="{link}"' in page
    editor = researcher_client.get(link.replace("&amp;", "&")).content.decode()
    assert '<option value="rollout" selected>' in editor
    assert _selected(editor, agent) and 'id="handover-note"' in editor
    assert (
        '<textarea name="action" cols="40" rows="10" spellcheck="false" id="id_action">\n</textarea>'
        in editor
    )
    response = researcher_client.post(
        reverse("branch_fork", args=[root.pk, 5]),
        {"action": "", "action_format": "auto", "mode": "rollout", "max_steps": "3", "n": "1",
         "temperature": "0.7", "top_p": "1", "max_tokens": "64",
         "world_endpoint": str(baseline.pk), "agent_endpoint": str(agent.pk)},
    )  # fmt: skip
    assert response.status_code == 302, response.content.decode()[:2000]
    job = SimulationJob.objects.get()
    assert (job.mode, job.action, job.agent_name) == ("rollout", "", "planner")
    request = simulation.request_input_of(job)
    assert simulation.build_request(root, request).agent_first  # rebuilt the same


def test_an_agent_first_rollout_takes_the_forks_step_too():
    """The runner: with no action at the fork, the agent proposes it, and every step of the
    rollout is the agent's."""
    from inference.simulation.request import AgentChoice, Defaults
    from inference.simulation.world import WorldContext
    from inference.types import Turn

    request = SimulationRequest.build(
        {"fork_index": 1, "action": "", "mode": "rollout", "max_steps": 2, "backend": "retrieval"},
        fork=ForkFacts(step_count=1, recorded_action=None, domain="terminal"),
        defaults=Defaults(agent=AgentChoice("a", "http://127.0.0.1:9/v1")),
    )
    assert request.agent_first and not request.edited
    agent = ScriptedAgent(lambda messages: f"echo {len(messages)}")
    sink = MemorySink()
    world = WorldContext(
        domain="terminal",
        task_instruction="t",
        system_prompt="s",
        history=iter([Turn(action="ls", observation="a")]),
        recorded=[],
    )
    outcome = run_simulation(request, world, ScriptedBackend(), sink, agent=agent)
    assert outcome.status == "succeeded", outcome.error
    assert [(s.index, s.provenance) for s in sink.steps[0]] == [(1, "agent"), (2, "agent")]
    assert len(agent.calls) == 2


def test_annotators_cannot_play(annotator_client, project):
    t, root = make_trajectory(project)
    assert annotator_client.get(reverse("playground", args=[root.pk])).status_code == 403


def test_the_editor_in_a_world_starts_on_a_model_that_reads_it(researcher_client, project):
    _, trajectory, root = _in_world(project)
    reader = _fake_world_model(project, "http://127.0.0.1:9/v1")
    editor = researcher_client.get(reverse("branch_fork", args=[root.pk, 0])).content.decode()
    assert _selected(editor, reader)
    assert not _selected(editor, project.endpoints.get(kind="retrieval"))
