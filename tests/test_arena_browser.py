"""The arena as a person uses it, in headless Chromium through a real worker: open a demo
trajectory, press Arena at a step, tick two world models (two endpoints on the fake
OpenAI-compatible server), start, watch it finish, read each model's scores and win rate,
and find it on the project's leaderboard beside AgentWorldBench's."""

from __future__ import annotations

import json
import re
from io import StringIO

import pytest
from django.core.management import call_command
from playwright.sync_api import expect

from studio.models import ArenaRun, JobStatus, Project, Trajectory
from studio.services.endpoints import EndpointData, save_endpoint
from tests.support.browser import shot
from tests.support.fake_openai import fake_openai_server

pytestmark = [pytest.mark.browser, pytest.mark.worker, pytest.mark.django_db(transaction=True)]


def responder(body, index):
    """world-a is the better model: the judge scores its futures 4, world-b's 2, and prefers
    world-a's in every pair."""
    if body["model"] in ("world-a", "world-b"):
        return f"<predicted_observation>answer of {body['model']}</predicted_observation>"
    system, user = body["messages"][0]["content"], body["messages"][1]["content"]
    if "You compare two world models" in system:
        first = user.split("## Prediction A\n")[1].split("\n\n## Prediction B")[0]
        block = json.dumps({"winner": "A" if "world-a" in first else "B", "reason": "closer"})
        return f"<final_verdict>\n```json\n{block}\n```\n</final_verdict>"
    score = 4 if "answer of world-a" in user.split("## Predicted observation")[-1] else 2
    dims = ("format", "factuality", "consistency", "realism", "quality")
    dims = dims if "## Reference observation" in user else ("consistency", "realism")
    block = {"scores": dict.fromkeys(dims, score), "strengths": [], "weaknesses": []}
    return f"<final_evaluation>\n```json\n{json.dumps(block)}\n```\n</final_evaluation>"


def test_an_arena_at_a_step_of_a_demo_trajectory(page, login, live_server, default_worker):
    call_command("load_demo", stdout=StringIO())
    demo = Project.objects.get(name="Demo")
    trajectory = Trajectory.objects.filter(project=demo, domain="terminal").order_by("pk").first()
    # the world models' streams wait after their first chunk until the test lets them go:
    # the page is seen running, then polls its way to the end
    with fake_openai_server(responder, hold_after_chunks=1) as srv:
        for name, role, model in (
            ("model-a", "world", "world-a"),
            ("model-b", "world", "world-b"),
            ("fake judge", "judge", "judge-m"),
        ):
            data = EndpointData(name=name, role=role, kind="openai", base_url=srv, model=model)
            save_endpoint(demo, data)
        login(page, "researcher")
        page.goto(f"{live_server.url}/trajectories/{trajectory.pk}/")
        page.locator("#step-1").wait_for()
        page.locator("#step-1 .arena-here").click()
        page.wait_for_url(re.compile(r"/steps/1/arena/$"))
        seed = page.input_value("input[name=seed]")
        assert seed.isdigit()  # drawn at random, shown
        page.get_by_label("model-a · world-a").check()
        page.get_by_label("model-b · world-b").check()
        page.fill("input[name=n]", "2")
        page.select_option("select[name=judge]", label="fake judge")
        shot(page, "arena-form")
        page.click("#arena-start")
        page.wait_for_url(re.compile(r"/arenas/\d+/$"))
        page.locator("#arena-phases li[data-phase=simulating][data-state=current]").wait_for()
        expect(page.locator("#arena-status")).to_have_text("Running")
        expect(page.locator("#arena-phases li[data-phase=comparing]")).to_contain_text(
            "not started"
        )
        shot(page, "arena-running")
        srv.release.set()
        page.locator("#arena-state[data-arena-status=succeeded]").wait_for(timeout=90_000)
    arena = ArenaRun.objects.get()
    assert arena.status == JobStatus.SUCCEEDED and arena.seed == int(seed)
    rows = page.locator("#arena-models tbody tr")
    expect(rows).to_have_count(2)
    a = page.locator("#arena-models tbody tr", has_text="model-a")
    b = page.locator("#arena-models tbody tr", has_text="model-b")
    assert a.locator("td.score[data-column=realism]").inner_text() == "4.00 (n 2)"
    assert b.locator("td.score[data-column=realism]").inner_text() == "2.00 (n 2)"
    assert a.locator("td.win-rate").inner_text() == "100% (95% CI 34–100%, n 2)"
    assert b.locator("td.win-rate").inner_text() == "0% (95% CI 0–66%, n 2)"
    expect(page.locator("#arena-phases li[data-state=done]")).to_have_count(3)
    expect(page.locator("#arena-grid tbody tr[data-sample]")).to_have_count(2)
    expect(page.locator("#arena-grid")).to_contain_text("answer of world-a")
    shot(page, "arena-page")

    page.goto(f"{live_server.url}/projects/{demo.pk}/leaderboard/")
    board = page.locator("#arena-board")
    board.wait_for()
    expect(board.locator("tbody tr").first).to_contain_text("model-a")
    expect(board.locator("tbody tr").first.locator("td.win-rate")).to_have_text(
        "100% (95% CI 34–100%, n 2)"
    )
    shot(page, "arena-leaderboard")
