"""Perturbations in headless Chromium through a real worker: add a domain's presets on the
library page, perturb a fork deterministically with N=3 and see each step's badge, then sweep
three perturbations from one fork and compare them side by side."""

from __future__ import annotations

import re

import pytest

from studio.models import Branch, JobStatus, SimulationJob
from tests.support.branching import make_trajectory

pytestmark = [pytest.mark.browser, pytest.mark.worker, pytest.mark.django_db(transaction=True)]


def submit(page) -> SimulationJob:
    page.click("#simulate-submit")
    page.wait_for_url(re.compile(r"/jobs/\d+/$"))
    page.wait_for_selector(".job-summary[data-done='1']", timeout=60_000)
    job = SimulationJob.objects.get(pk=int(re.search(r"/jobs/(\d+)/$", page.url).group(1)))
    assert job.status == JobStatus.SUCCEEDED, job.error
    return job


def test_presets_perturb_a_fork_and_a_sweep_compares_them(
    page, live_server, login, project, default_worker
):
    trajectory, root = make_trajectory(project, key="perturb-browser")
    login(page, "researcher")
    page.goto(f"{live_server.url}/projects/{project.pk}/")
    page.click("#perturbations-link")
    assert "None yet" in page.inner_text("#no-perturbations")
    # the branch editor offers the trajectory's domain's presets in one click, comes back,
    # and keeps the action typed so far
    page.goto(f"{live_server.url}/branches/{root.pk}/steps/2/fork/")
    page.fill("textarea[name=action]", "df -h /srv")
    page.click("#presets-add")
    page.wait_for_selector("[name=perturbation] option:has-text('Disk full')", state="attached")
    assert "Added 3 Terminal presets" in page.inner_text(".messages")
    assert page.input_value("textarea[name=action]") == "df -h /srv"
    page.goto(f"{live_server.url}/projects/{project.pk}/perturbations/")
    page.wait_for_selector(".perturbation-row[data-name='Disk full']")

    # one perturbation on the fork step, applied without a model, three futures
    page.goto(f"{live_server.url}/branches/{root.pk}/steps/2/fork/")
    page.select_option("[name=perturbation]", label="Disk full")
    page.select_option("[name=perturbation_mode]", "deterministic")
    page.fill("input[name=n]", "3")
    job = submit(page)
    badges = page.locator(".job-branch .sim-step .obs-perturbed").all_inner_texts()
    assert badges == ["perturbed: Disk full"] * 3
    assert "No space left on device" in page.inner_text(".job-branches")
    assert "Disk full (deterministic) · step 2" in page.inner_text(".job-summary")
    for child in Branch.objects.filter(job=job):
        step = child.steps.get()
        assert step.observation_source == "perturbed"
        assert step.meta["perturbation"]["name"] == "Disk full"

    # three perturbations swept from the same fork, two futures each, compared
    page.goto(f"{live_server.url}/branches/{root.pk}/steps/2/fork/")
    page.fill("input[name=n]", "2")
    page.locator(".perturb-sweep summary").click()
    for name in ("Disk full", "Command not found", "Slow command killed"):
        page.get_by_label(name, exact=True).check()
    sweep = submit(page)
    assert sweep.n == 6
    page.goto(
        f"{live_server.url}/trajectories/{trajectory.pk}/compare/?fork={root.pk}&at=2"
        f"&action="  # the most tried experiment by default
    )
    nav = page.inner_text("#fork-actions")
    # the first job's 3 futures and the sweep's 2 had the same action and perturbation
    assert "3 experiments (an action, perturbed or not) at step 2" in nav
    assert "Disk full (5)" in nav and "Command not found (2)" in nav
    assert "Slow command killed (2)" in nav
    title = page.inner_text(".fork-summary h2")
    assert "given the recorded action python -m pytest -q under Disk full" in title
    headers = page.locator(".compare-table thead th").all_inner_texts()
    assert len(headers) <= 7  # the step column and at most 6 branches
    shown = " ".join(headers)
    assert "Command not found" in shown and "Slow command killed" in shown
