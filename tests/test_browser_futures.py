"""Honest labels and futures at a glance, in headless Chromium through a real worker: an
unchanged multi-line action is no edit, and 32 futures of one fork read as a few outcomes
with their shares, in at most 6 columns."""

from __future__ import annotations

import json
import re

import pytest

from studio.models import Branch, JobStatus, SimulationJob
from tests.support.branching import make_trajectory

pytestmark = [pytest.mark.browser, pytest.mark.worker, pytest.mark.django_db(transaction=True)]

SWE_STEPS = [
    ("open src/app.py", "[File: src/app.py (40 lines total)]\n1:import os"),
    ("edit 10:12\n    return total\nend_of_edit", "File updated. Edit your file if needed."),
    ("python -m pytest -q", "4 passed in 0.21s"),
    ("git diff", "diff --git a/src/app.py b/src/app.py"),
    ("submit", "Submitted."),
]


@pytest.fixture
def worker(default_worker):
    return default_worker


def simulate(page, *, n: int) -> SimulationJob:
    page.fill("input[name=n]", str(n))
    page.click("#simulate-submit")
    page.wait_for_url(re.compile(r"/jobs/\d+/$"))
    page.wait_for_selector(".job-summary[data-done='1']", timeout=60_000)
    job = SimulationJob.objects.get(pk=int(re.search(r"/jobs/(\d+)/$", page.url).group(1)))
    assert job.status == JobStatus.SUCCEEDED, job.error
    return job


def test_an_unchanged_multi_line_action_is_replayed_not_edited(
    page, live_server, login, project, worker
):
    trajectory, root = make_trajectory(project, domain="swe", steps=SWE_STEPS, key="swe-ml")
    login(page, "researcher")
    page.goto(f"{live_server.url}/branches/{root.pk}/steps/1/fork/")
    # the browser sends the textarea with \r\n line endings, and a trailing newline
    assert page.input_value("textarea[name=action]") == SWE_STEPS[1][0]
    page.locator("textarea[name=action]").press("Control+End")
    page.locator("textarea[name=action]").press("Enter")
    job = simulate(page, n=2)
    for child in Branch.objects.filter(job=job):
        assert child.origin == "simulated"
        step = child.steps.get()
        assert (step.provenance, step.observation_source) == ("replayed", "simulated")
        assert step.action == SWE_STEPS[1][0]  # the recorded action, byte for byte
    badges = page.locator(".job-branch .sim-step .prov").all_inner_texts()
    assert "replayed" in badges and "simulated obs" in badges and "edited" not in badges
    assert "edited" not in page.inner_text(".job-branches .badge.origin-simulated")


def test_thirty_two_futures_read_as_a_few_outcomes(page, live_server, login, project, worker):
    trajectory, root = make_trajectory(project, key="fork-32")
    login(page, "researcher")
    page.goto(f"{live_server.url}/branches/{root.pk}/steps/2/fork/")
    # the baseline answers with the recorded observations it finds most similar: 32 futures
    # over 5 recorded steps come out as a handful of outcomes
    job = simulate(page, n=32)
    page.click("#job-compare")
    page.wait_for_url(re.compile(rf"/compare/\?fork={root.pk}&at=2$"))
    summary = page.locator("#fork-summary")
    assert "32 futures of recorded at step 2" in summary.locator("h2").inner_text()
    rows = summary.locator("tr.outcome-row")
    counts = [int(rows.nth(i).locator("td.num").first.inner_text()) for i in range(rows.count())]
    assert sum(counts) == 32 and 2 <= len(counts) <= 5 and counts == sorted(counts, reverse=True)
    shares = [rows.nth(i).locator("td.num").nth(1).inner_text() for i in range(rows.count())]
    assert all(s.endswith("%") for s in shares)
    page.wait_for_selector(".outcome-plot[data-ready='1']")
    figure = json.loads(page.inner_text("#outcome-figure"))
    assert sum(figure["data"][0]["y"]) == 32
    columns = page.locator(".compare-table thead th[data-branch-id]").count()
    assert columns <= 6 and columns == 1 + len(counts)
    assert page.locator(".compare-table thead th[data-branch-id]").first.get_attribute(
        "data-branch-id"
    ) == str(root.pk)
    # the tree shows the 32 as one group, which opens their outcomes
    page.goto(f"{live_server.url}/trajectories/{trajectory.pk}/tree/")
    assert page.locator("tr.branch-group").count() == 1
    assert "32 futures @2" in page.inner_text("tr.branch-group")
    assert job.branches.count() == 32
