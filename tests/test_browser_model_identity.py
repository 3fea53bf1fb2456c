"""Which world model said this, in headless Chromium through a real worker: a demo
trajectory forked at one step by two world models (the retrieval baseline and an
OpenAI-compatible server on 127.0.0.1), each future's model named on the trajectory page,
and the tree coloured by model with a legend and a filter."""

from __future__ import annotations

import json
import os
import re
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command

from studio.models import Branch, Membership, Project, Role, Trajectory
from studio.services.endpoints import EndpointData, save_endpoint
from tests.support.fake_openai import fake_openai_server

pytestmark = [
    pytest.mark.browser,
    pytest.mark.worker,
    pytest.mark.django_db(transaction=True),
]

SHOTS = os.environ.get("STUDIO_TEST_SCREENSHOTS", "")


def responder(request: dict, index: int) -> str:
    return '<predicted_observation>{"status": "ok", "from": "fake"}</predicted_observation>'


def fork_with(page, live_server, trajectory, at: int, world: str) -> int:
    page.goto(f"{live_server.url}/trajectories/{trajectory.pk}/?step={at}")
    page.locator(f"#step-{at} .step-actions a.branch-here").click()
    page.wait_for_url(re.compile(rf"/steps/{at}/fork/$"))
    page.select_option("select[name=world_endpoint]", label=world)
    page.fill("input[name=n]", "1")
    page.fill("input[name=max_tokens]", "32")
    page.fill("input[name=temperature]", "0.4")
    page.fill("input[name=seed]", "5")
    page.click("#simulate-submit")
    page.wait_for_url(re.compile(r"/jobs/\d+/$"))
    job = int(re.search(r"/jobs/(\d+)/$", page.url).group(1))
    page.wait_for_selector(".job-summary[data-done='1']", timeout=120_000)
    assert page.inner_text("#job-status") == "Succeeded"
    return job


def shot(page, name: str) -> None:
    if SHOTS:
        Path(SHOTS).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(SHOTS) / f"{name}.png"), full_page=True)


def test_two_models_at_one_fork_are_named_and_coloured(
    page, live_server, login, make_user, default_worker
):
    call_command("load_demo", stdout=StringIO())
    demo = Project.objects.get(name="Demo")
    user = make_user("ident-browser")
    Membership.objects.create(project=demo, user=user, role=Role.RESEARCHER)
    trajectory = Trajectory.objects.filter(project=demo, domain="mcp").order_by("pk").first()
    assert trajectory is not None
    with fake_openai_server(responder, model="fake/world-a") as srv:
        save_endpoint(
            demo,
            EndpointData(
                name="fake-world",
                role="world",
                kind="openai",
                base_url=srv.base_url,
                model="fake/world-a",
            ),
        )
        login(page, user.username)
        base_job = fork_with(page, live_server, trajectory, 1, "Retrieval baseline")
        fake_job = fork_with(page, live_server, trajectory, 1, "fake-world")
        assert srv.requests, "the fake server was asked"
        shot(page, "job-page")
        assert "fake-world · fake/world-a" in page.inner_text("#job-model")
        assert "T 0.4" in page.inner_text("#job-model")

    base = Branch.objects.get(job_id=base_job)
    fake = Branch.objects.get(job_id=fake_job)
    # the trajectory page: the step of each future names its model, the recorded ones say so
    page.goto(f"{live_server.url}/trajectories/{trajectory.pk}/?branch={fake.pk}")
    step = page.locator("#step-1 .step-head")
    assert "fake-world · fake/world-a" in step.inner_text()
    assert "T 0.4" in step.inner_text() and "seed 5" in step.inner_text()
    assert "future by" in page.inner_text("#branch-model")
    assert "recorded" in page.locator("#step-0 .step-head").inner_text()
    page.wait_for_selector("#branch-tree .tree-model-legend")
    shot(page, "trajectory-fake")
    page.goto(f"{live_server.url}/trajectories/{trajectory.pk}/?branch={base.pk}")
    assert "retrieval baseline" in page.locator("#step-1 .step-head").inner_text()

    # the tree: a legend naming both, nodes filled with each model's colour, a filter
    page.goto(f"{live_server.url}/trajectories/{trajectory.pk}/tree/")
    page.wait_for_selector(".branch-tree-plot[data-ready='1']")
    legend = page.inner_text("#tree-model-legend")
    assert "retrieval baseline" in legend and "fake-world · fake/world-a" in legend
    fig = json.loads(page.inner_text("script[id^=branch-tree-figure-]"))
    markers = next(tr for tr in fig["data"] if tr["name"] == "branches")
    colour = dict(zip(markers["ids"], markers["marker"]["color"], strict=True))
    swatches = page.eval_on_selector_all(
        "#tree-model-legend .legend-model .dot", "els => els.map(e => e.style.background)"
    )
    assert colour[str(base.pk)] != colour[str(fake.pk)]
    assert len(set(swatches)) == 2
    # what Plotly drew: two fills among the future nodes
    drawn = page.eval_on_selector_all(
        ".branch-tree-plot .scatterlayer path.point", "els => els.map(e => e.style.fill)"
    )
    assert len(set(drawn)) >= 3  # recorded, the baseline and the fake server's model
    shot(page, "tree")
    page.select_option(".tree-model-filter select", label="fake-world · fake/world-a (1)")
    page.click(".tree-model-filter button")
    page.wait_for_url(re.compile(r"model="))
    page.wait_for_selector(".branch-tree-plot[data-ready='1']")
    assert "1 future of fake-world · fake/world-a" in page.inner_text("#tree-count")
    fig = json.loads(page.inner_text("script[id^=branch-tree-figure-]"))
    ids = next(tr for tr in fig["data"] if tr["name"] == "branches")["ids"]
    assert str(fake.pk) in ids and str(base.pk) not in ids
    shot(page, "tree-filtered")
