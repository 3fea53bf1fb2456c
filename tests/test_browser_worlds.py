"""Worlds and the playground in headless Chromium through a real worker: build a world with a
tool schema and a file, watch the prompt preview change as you type, attach the world to a
fork and run N=3 with a deterministic perturbation, then play three steps in a new
trajectory in the world, one of them perturbed; play five steps with a chosen model and find
them on one branch, the model kept, the trajectory opening on that branch."""

from __future__ import annotations

import json
import re

import pytest

from studio.models import Branch, JobStatus, Perturbation, SimulationJob, World
from studio.services.endpoints import EndpointData, make_default, save_endpoint
from tests.support.branching import make_trajectory
from tests.support.browser import shot, step_indices
from tests.support.fake_openai import fake_openai_server

pytestmark = [pytest.mark.browser, pytest.mark.worker, pytest.mark.django_db(transaction=True)]

PARAMS = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
MCP_STEPS = [
    ('{"name": "get_weather", "arguments": {"city": "Lyon"}}', '{"temp_c": 14, "sky": "rain"}'),
    ('{"name": "get_weather", "arguments": {"city": "Nice"}}', '{"temp_c": 19, "sky": "sun"}'),
]


def answer(request: dict, index: int) -> str:
    return '<predicted_observation>{"temp_c": 12, "sky": "rain"}</predicted_observation>'


def test_build_a_world_fork_into_it_and_play_it(page, live_server, login, project, default_worker):
    with fake_openai_server(answer) as srv:
        # a world model that reads the world's prompt (the baseline does not): the default
        save_endpoint(project, EndpointData(name="Fake world model", role="world", kind="openai",
                                            base_url=srv.base_url, model="w"))  # fmt: skip
        make_default(project.endpoints.get(name="Fake world model"))
        build_fork_and_play(page, live_server, login, project)


def build_fork_and_play(page, live_server, login, project):
    trajectory, root = make_trajectory(project, domain="mcp", steps=MCP_STEPS, key="w-browser")
    Perturbation.objects.create(
        project=project, name="Tool down", kind="tool_error",
        params={"message": "weather service down", "code": 503},
    )  # fmt: skip
    login(page, "researcher")
    page.goto(f"{live_server.url}/projects/{project.pk}/worlds/")
    page.click("#world-add")
    page.fill("#id_world-name", "Rainy Lyon")
    page.select_option("#id_world-domain", "mcp")
    page.fill("#id_world-description", "A weather service where it always rains in Lyon.")
    page.fill("#id_tools-0-name", "get_weather")
    page.fill("#id_tools-0-parameters", json.dumps(PARAMS))
    # an MCP world folds its file tree away: open it
    assert not page.locator("#id_files-0-path").is_visible()
    page.locator("#part-files > summary").click()
    page.fill("#id_files-0-path", "/etc/weather/stations.txt")
    page.fill("#id_files-0-content", "LYON-01 active")
    # the preview follows the typing: the file's content and the tool appear in the prompt
    # functions, not expression strings: an expression needs eval, which the CSP forbids
    page.wait_for_function(
        "() => document.querySelector('#world-prompt') &&"
        " document.querySelector('#world-prompt').textContent.includes('LYON-01 active')"
    )
    before = page.inner_text("#preview-size")
    page.locator("#part-knowledge .add-row").click()
    page.fill("#id_knowledge-1-text", "The river Saône floods every Tuesday.")
    page.wait_for_function(
        "() => document.querySelector('#world-prompt').textContent.includes('floods every Tuesday')"
    )
    assert '"get_weather"' in page.inner_text("#world-prompt")
    assert page.inner_text("#preview-size") != before  # the size moved with the text
    shot(page, "world-editor")
    page.click("#world-save")
    page.wait_for_url(re.compile(r"/worlds/\d+/edit/$"))
    world = World.objects.get()
    assert world.latest.data["tools"][0]["function"]["parameters"] == PARAMS
    assert world.latest.data["files"] == {"/etc/weather/stations.txt": "LYON-01 active"}

    # attach it to a fork, N=3, with a deterministic perturbation: the badges say both
    page.goto(f"{live_server.url}/branches/{root.pk}/steps/1/fork/")
    page.select_option("[name=world]", label="Rainy Lyon")
    page.select_option("[name=perturbation]", label="Tool down")
    page.fill("input[name=n]", "3")
    page.click("#simulate-submit")
    page.wait_for_url(re.compile(r"/jobs/\d+/$"))
    page.wait_for_selector(".job-summary[data-done='1']", timeout=60_000)
    job = SimulationJob.objects.get()
    assert job.status == JobStatus.SUCCEEDED, job.error
    assert "in world Rainy Lyon v1" in page.inner_text(".job-summary")
    assert (
        page.locator(".job-branch .sim-step .obs-perturbed").all_inner_texts()
        == ["perturbed: Tool down"] * 3
    )
    assert (
        page.locator(".job-branch .sim-step .obs-world").all_inner_texts()
        == ["world: Rainy Lyon v1"] * 3
    )
    shot(page, "world-fork-job")

    # a new trajectory in the world, played for three steps, the second one perturbed
    page.goto(f"{live_server.url}/projects/{project.pk}/worlds/")
    row = page.locator(f"#world-{world.pk}")
    row.locator(".world-start summary").click()
    row.locator("textarea[name=task]").fill("Find out whether it rains in Lyon.")
    row.locator("button[value=playground]").click()
    page.wait_for_url(re.compile(r"/branches/\d+/play/$"))
    assert "No step yet" in page.inner_text("#play-steps")
    for k, city in enumerate(["Lyon", "Paris", "Nice"]):
        page.fill("textarea[name=action]", json.dumps({"name": "get_weather",
                                                       "arguments": {"city": city}}))  # fmt: skip
        if k == 1:
            page.select_option("[name=perturbation]", label="Tool down")
        page.click("#play-submit")
        page.wait_for_selector(f"#play-step-{k}", timeout=60_000)  # moved to the new branch
    steps = page.locator(".play-step").all_inner_texts()
    assert len(steps) == 3 and "perturbed: Tool down" in steps[1]
    assert all("world: Rainy Lyon v1" in s for s in steps)  # played in the world, and says so
    assert "weather service down" in steps[1] and "perturbed" not in steps[2]
    shot(page, "playground")
    newest = Branch.objects.get(pk=int(re.search(r"/branches/(\d+)/play/", page.url).group(1)))
    assert newest.all_steps().count() == 3
    # the three steps are on one played branch (not a chain of one-step branches)
    assert Branch.objects.filter(trajectory=newest.trajectory).count() == 2
    assert newest.steps.count() == 3 and newest.origin == "played"


WORLD_FILE = {
    "name": "Flight desk",
    "domain": "mcp",
    "description": "An airline's booking service.",
    "tools": [{"type": "function", "function": {"name": "search_flights", "description": "Find",
               "parameters": {"type": "object", "properties": {"to": {"type": "string"}}}}}],
}  # fmt: skip


def flight_answer(request: dict, index: int) -> str:
    return f'<predicted_observation>{{"flights": [{{"id": "LH{index}"}}]}}</predicted_observation>'


def test_five_played_steps_with_a_chosen_model_stay_on_one_branch(
    page, live_server, login, project, default_worker
):
    """The issue's report, as a researcher plays: the model reset to the baseline at every
    step, the steps sat on a chain of branches and the trajectory opened on its empty root."""
    from inference.worlds import parse_world
    from studio.services.worlds import save_world, start_trajectory

    with fake_openai_server(flight_answer) as srv:
        for name in ("Default model", "Chosen model"):
            save_endpoint(project, EndpointData(name=name, role="world", kind="openai",
                                                base_url=srv.base_url, model=name))  # fmt: skip
        make_default(project.endpoints.get(name="Default model"))
        save_endpoint(project, EndpointData(name="Agent", role="agent", kind="openai",
                                            base_url=srv.base_url, model="agent"))  # fmt: skip
        chosen = project.endpoints.get(name="Chosen model")
        version = save_world(project, parse_world(WORLD_FILE)).version
        trajectory = start_trajectory(version, "Book the cheapest flight to Oslo.")
        login(page, "researcher")
        page.goto(f"{live_server.url}/branches/{trajectory.root_branch.pk}/play/")
        assert "in the world Flight desk (version 1)" in page.inner_text("#play-where")
        page.select_option("[name=world_endpoint]", label="Chosen model")
        for k in range(5):
            # the model picked at the first step is still picked: nothing to choose again
            assert page.locator("[name=world_endpoint] option:checked").inner_text() == (
                "Chosen model"
            ), k
            page.fill("textarea[name=action]",
                      json.dumps({"name": "search_flights", "arguments": {"to": f"OSL{k}"}}))  # fmt: skip
            page.click("#play-submit")
            page.wait_for_selector(f"#play-step-{k}", timeout=60_000)
        shot(page, "playground-five-steps")
        # hand over names the world model picked now, not the one the page was drawn with
        assert f"world={chosen.pk}" in page.get_attribute("#play-handover", "href")
        other = project.endpoints.get(name="Default model")
        page.select_option("[name=world_endpoint]", label="Default model")
        assert f"world={other.pk}" in page.get_attribute("#play-handover", "href")
        page.select_option("[name=world_endpoint]", label="Chosen model")
        assert page.locator(".play-step .prov-typed").count() == 5  # typed by a person
        played = Branch.objects.get(trajectory=trajectory, origin="played", parent__isnull=False)
        assert page.url.endswith(f"/branches/{played.pk}/play/")
        jobs = SimulationJob.objects.filter(trajectory=trajectory).order_by("pk")
        assert [j.world_endpoint_id for j in jobs] == [chosen.pk] * 5
        assert [j.status for j in jobs] == [JobStatus.SUCCEEDED] * 5
    assert played.steps.count() == 5  # all five on the one played branch
    assert Branch.objects.filter(trajectory=trajectory).count() == 2  # and the empty root
    # the trajectory opens on the branch that was played
    page.goto(f"{live_server.url}/trajectories/{trajectory.pk}/")
    assert step_indices(page) == [0, 1, 2, 3, 4]
    assert played.name in page.inner_text("main")
    shot(page, "trajectory-opens-on-played")
