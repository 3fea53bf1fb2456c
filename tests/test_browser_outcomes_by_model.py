"""The outcomes of a fork with futures of two world models, in headless Chromium: each model
has its own heading, counts and chart trace, and at 1280 px the compare table of 6 columns
of long JSON observations stays within the page (it wraps inside its cells)."""

from __future__ import annotations

import json

import pytest

from studio.models import SimulationJob
from tests.support.branching import make_child, make_trajectory
from tests.support.browser import shot

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _long_json(seed: int) -> str:
    rows = [
        {
            "flight": f"AF{1000 + k}",
            "route": "LYS-CDG-AMS-FRA-MAD-LIS" * 2,
            "price_eur": 100 + seed * k,
            "note": "no_spaces_in_this_very_long_token_" * 6,
        }
        for k in range(12)
    ]
    return json.dumps({"results": rows, "page": seed})


def test_outcomes_per_model_and_no_sideways_overflow(page, live_server, login, project):
    trajectory, root = make_trajectory(
        project,
        domain="mcp",
        key="two-models-browser",
        steps=[
            (json.dumps({"name": "search", "arguments": {"page": i}}), _long_json(i))
            for i in range(4)
        ],
    )
    jobs = []
    for name, model, temperature in (("alpha", "m-a", 0.7), ("beta", "m-b", 1.0)):
        jobs.append(
            SimulationJob.objects.create(
                trajectory=trajectory,
                branch=root,
                fork_index=2,
                action=root.all_steps().get(index=2).action,
                n=4,
                status="succeeded",
                backend="openai",
                model=model,
                world_name=name,
                params={"temperature": temperature, "max_tokens": 512},
            )
        )
    sample, futures = 0, []
    for job, seeds in ((jobs[0], [5, 6, 7, 7]), (jobs[1], [8, 9, 9])):
        for seed in seeds:
            futures.append(
                make_child(
                    root, 2, [_long_json(seed)], job=job, sample_index=sample, name=f"f{sample}"
                )
            )
            sample += 1
    login(page, "researcher")
    page.set_viewport_size({"width": 1280, "height": 900})
    page.goto(f"{live_server.url}/trajectories/{trajectory.pk}/compare/?fork={root.pk}&at=2")
    headings = page.locator(".model-outcomes .model-heading")
    assert headings.count() == 2
    assert (
        "alpha · m-a" in headings.nth(0).inner_text()
        and "4 futures" in headings.nth(0).inner_text()
    )
    assert (
        "beta · m-b" in headings.nth(1).inner_text() and "3 futures" in headings.nth(1).inner_text()
    )
    assert "T 0.7" in page.inner_text("#model-group-1 .model-setting")
    assert "T 1" in page.inner_text("#model-group-2 .model-setting")
    page.wait_for_selector(".outcome-plot[data-ready='1']")
    figure = json.loads(page.inner_text("#outcome-figure"))
    assert [sum(t["y"]) for t in figure["data"]] == [4, 3]
    # six columns ticked: the recorded one, then futures of both models
    picked = "".join(f"&b={b.pk}" for b in [root, *futures[:3], *futures[4:6]])
    page.goto(
        f"{live_server.url}/trajectories/{trajectory.pk}/compare/?fork={root.pk}&at=2{picked}"
    )
    page.wait_for_selector(".outcome-plot[data-ready='1']")
    heads = page.locator(".compare-table thead th[data-branch-id]")
    assert heads.count() == 6
    assert "recorded" in heads.nth(0).inner_text()
    names = " ".join(heads.all_inner_texts())
    assert "alpha · m-a" in names and "beta · m-b" in names
    shot(page, "outcomes-two-models")
    overflow = page.evaluate(
        "[document.documentElement.scrollWidth, document.documentElement.clientWidth]"
    )
    assert overflow[0] <= overflow[1], overflow
    table = page.evaluate(
        "[document.querySelector('.compare-table').getBoundingClientRect().right,"
        " document.documentElement.clientWidth]"
    )
    assert table[0] <= table[1], table
    # the plain compare: the pick list names each branch's model, the filter keeps one model
    token = page.get_attribute(".compare-table thead th[data-branch-id]:last-child", "data-model")
    page.goto(
        f"{live_server.url}/trajectories/{trajectory.pk}/compare/?b={root.pk}"
        + "".join(f"&b={b.pk}" for b in futures[:5])
    )
    page.select_option("#compare-model", token)
    page.click(".compare-select button[type=submit]")
    page.wait_for_url(lambda url: f"model={token}" in url)
    heads = page.locator(".compare-table thead th[data-branch-id]")
    assert heads.count() == 2 and "beta · m-b" in heads.nth(1).inner_text()
    shot(page, "compare-filtered-by-model")
