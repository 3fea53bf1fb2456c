"""The whole branching loop in headless Chromium through a real Celery worker and Redis:
open a trajectory, branch at a step, edit the action, simulate N futures, watch the live
progress finish, compare, open the tree and click a node."""

from __future__ import annotations

import json
import re

import pytest

from studio.models import Branch, JobStatus, ModelEndpoint, SimulationJob
from tests.support.branching import make_trajectory
from tests.support.tiny_model import tiny_model_path  # noqa: F401

pytestmark = [
    pytest.mark.browser,
    pytest.mark.worker,
    pytest.mark.django_db(transaction=True),
]


@pytest.fixture
def worker(default_worker):
    """The shared real worker, on both queues (retrieval runs on `default`, hf on `gpu`)."""
    return default_worker


def open_editor(page, live_server, trajectory, root, index):
    page.goto(f"{live_server.url}/trajectories/{trajectory.pk}/")
    link = page.locator(f"#step-{index} .step-actions a.branch-here")
    link.click()
    page.wait_for_url(re.compile(rf"/branches/{root.pk}/steps/{index}/fork/$"))


def submit_simulation(page, *, action, n, world="Retrieval baseline", max_tokens=16):
    page.fill("textarea[name=action]", action)
    page.select_option("select[name=world_endpoint]", label=world)
    page.fill("input[name=n]", str(n))
    page.fill("input[name=max_tokens]", str(max_tokens))
    page.fill("input[name=seed]", "3")
    page.click("#simulate-submit")
    page.wait_for_url(re.compile(r"/jobs/\d+/$"))
    return int(re.search(r"/jobs/(\d+)/$", page.url).group(1))


def watch_job_finish(page, timeout_ms=240_000):
    """The job page updates itself (htmx polling) until done: no reload happens."""
    page.evaluate("window.__noReload = 'still here'")
    page.wait_for_selector(".job-summary[data-done='1']", timeout=timeout_ms)
    assert page.evaluate("window.__noReload") == "still here"
    return page.inner_text("#job-status")


def tree_figure(page) -> dict:
    return json.loads(page.inner_text("script[id^=branch-tree-figure-]"))


def node_position(page, branch_id: int) -> dict:
    """Where Plotly drew the node of `branch_id` (page coordinates)."""
    page.wait_for_selector(".branch-tree-plot[data-ready='1']")
    return page.evaluate(
        """(bid) => {
            const gd = document.querySelector('.branch-tree-plot');
            const trace = gd.data.findIndex(t => t.name === 'branches');
            const i = gd.data[trace].ids.indexOf(String(bid));
            const pts = gd.querySelectorAll('.scatterlayer .trace')[trace].querySelectorAll('path.point');
            const r = pts[i].getBoundingClientRect();
            return {x: r.x + r.width / 2, y: r.y + r.height / 2};
        }""",
        branch_id,
    )


def click_tree_node(page, branch_id: int):
    box = node_position(page, branch_id)
    page.mouse.move(box["x"], box["y"])
    page.mouse.click(box["x"], box["y"])


def tiny_endpoint(project, path) -> str:
    """The tiny model registered as the project's in-process world model."""
    ModelEndpoint.objects.create(
        project=project, name="tiny qwen3.5-moe", role="world", kind="hf", model=str(path)
    )
    return "tiny qwen3.5-moe"


def run_flow(page, live_server, login, project, *, world):
    trajectory, root = make_trajectory(project, key=f"browser-{world}")
    login(page, "researcher")
    open_editor(page, live_server, trajectory, root, 2)
    # The editor holds the step's action; edit it (a snippet, then our own change).
    assert page.input_value("textarea[name=action]") == "python -m pytest -q"
    page.click("button.snippet >> text=List files")
    assert page.input_value("textarea[name=action]") == "ls -la"
    job_id = submit_simulation(page, action="python -m pytest -q -k smoke", n=3, world=world)
    initially_done = page.get_attribute(".job-summary", "data-done")
    status = watch_job_finish(page)
    job = SimulationJob.objects.get(pk=job_id)
    assert job.status == JobStatus.SUCCEEDED, (status, job.error)
    assert status == "Succeeded"
    kids = list(Branch.objects.filter(job=job).order_by("sample_index"))
    assert len(kids) == 3 and all(k.status == "succeeded" for k in kids)
    assert all(k.origin == "edited" for k in kids)
    cards = page.locator(".job-branch")
    assert cards.count() == 3
    assert page.locator(".job-branch .sim-observation").count() == 3
    # Compare: the parent and the three futures, step-aligned from the fork.
    page.click("#job-compare")
    page.wait_for_url(re.compile(r"/compare/\?"))
    assert page.locator(".compare-table thead th").count() == 1 + 4
    assert page.locator("#compare-step-2").count() == 1
    assert "python -m pytest -q -k smoke" in page.inner_text("#compare-step-2")
    # Tree: a node per branch; clicking one opens that branch.
    page.goto(f"{live_server.url}/trajectories/{trajectory.pk}/tree/")
    fig = tree_figure(page)
    assert fig["meta"]["branches"] == 4
    click_tree_node(page, kids[1].pk)
    # a branch opens at its fork step
    page.wait_for_url(re.compile(rf"/trajectories/{trajectory.pk}/\?branch={kids[1].pk}&step=2$"))
    assert page.locator("#step-2").count() == 1
    return trajectory, job, initially_done


def test_branch_edit_simulate_compare_tree_retrieval(page, live_server, login, project, worker):
    trajectory, job, _ = run_flow(page, live_server, login, project, world="Retrieval baseline")
    # the baseline is labelled as such
    page.goto(f"{live_server.url}/jobs/{job.pk}/")
    assert "non-neural baseline" in page.inner_text(".job-summary")
    # the tree fragment loads inside the trajectory page too and highlights the branch
    page.goto(f"{live_server.url}/trajectories/{trajectory.pk}/?branch={job.branches.first().pk}")
    page.wait_for_selector("#branch-tree .branch-tree-plot[data-ready='1']")
    assert tree_figure(page)["meta"]["current"] == job.branches.first().pk
    # Rename, star and delete from the full tree page; a hostile name stays text everywhere.
    first, second, third = job.branches.order_by("sample_index")
    page.goto(f"{live_server.url}/trajectories/{trajectory.pk}/tree/")
    row = page.locator(f"tr[data-branch-id='{first.pk}']")
    row.locator("input[name=name]").fill('<img src=x onerror="window.__xss=1">')
    row.locator("button", has_text="Rename").click()
    refused = page.wait_for_selector(".messages")
    assert "Branch not renamed" in refused.inner_text() and "plain text" in refused.inner_text()
    first.refresh_from_db()
    assert "<img" not in first.name
    # names from elsewhere (an imported file's branch names) may still hold markup: shown as text
    type(first).objects.filter(pk=first.pk).update(name='<img src=x onerror="window.__xss=1">')
    page.locator(f"tr[data-branch-id='{second.pk}'] button.star").click()
    page.wait_for_selector(f"tr[data-branch-id='{second.pk}'] button.star >> text=★")
    page.goto(f"{live_server.url}/trajectories/{trajectory.pk}/tree/?branch={first.pk}")
    page.wait_for_selector(".branch-tree-plot[data-ready='1']")
    box = node_position(page, first.pk)
    page.mouse.move(box["x"], box["y"])
    page.wait_for_selector(".hoverlayer .hovertext")
    hover = page.evaluate("document.querySelector('.hoverlayer').textContent")
    assert '<img src=x onerror="window.__xss=1">' in hover
    assert page.evaluate("window.__xss") is None
    page.mouse.click(box["x"], box["y"])
    page.wait_for_url(re.compile(rf"\?branch={first.pk}&step=2$"))
    page.goto(f"{live_server.url}/trajectories/{trajectory.pk}/compare/?b={first.pk}&b={second.pk}")
    assert '<img src=x onerror="window.__xss=1">' in page.inner_text(".compare-table thead")
    assert page.evaluate("window.__xss") is None
    page.goto(f"{live_server.url}/branches/{third.pk}/delete/")
    page.click("#confirm-delete")
    page.wait_for_url(re.compile(rf"/trajectories/{trajectory.pk}/\?branch={job.branch_id}$"))
    assert not Branch.objects.filter(pk=third.pk).exists()
    assert Branch.objects.get(pk=second.pk).starred


@pytest.mark.torch
def test_branch_edit_simulate_compare_tree_tiny_model(
    page,
    live_server,
    login,
    project,
    worker,
    tiny_model_path,  # noqa: F811
):
    _, job, initially_done = run_flow(
        page, live_server, login, project, world=tiny_endpoint(project, tiny_model_path)
    )
    # The model loads in the worker first: the page was live before the job finished.
    assert initially_done == "0"
    assert job.tokens_out > 0
    steps = [s for b in job.branches.all() for s in b.steps.all()]
    assert len(steps) == 3 and all(s.raw_output for s in steps)


@pytest.mark.torch
def test_sixteen_futures_on_tiny_model_all_in_tree(
    page,
    live_server,
    login,
    project,
    worker,
    tiny_model_path,  # noqa: F811
):
    trajectory, root = make_trajectory(project, key="browser-16")
    world = tiny_endpoint(project, tiny_model_path)
    login(page, "researcher")
    open_editor(page, live_server, trajectory, root, 1)
    job_id = submit_simulation(page, action="cat setup.py", n=16, world=world, max_tokens=8)
    assert watch_job_finish(page) == "Succeeded", SimulationJob.objects.get(pk=job_id).error
    assert page.locator(".job-branch[data-branch-status='succeeded']").count() == 16
    page.click("text=Branch tree")
    page.wait_for_selector(".branch-tree-plot[data-ready='1']")
    fig = tree_figure(page)
    assert fig["meta"]["branches"] == 17
    nodes = next(t for t in fig["data"] if t["name"] == "branches")
    assert sorted(nodes["x"]) == [0] + [1] * 16
    assert page.locator(".branch-table tbody tr").count() == 17
    # Plotly drew all 17 markers
    assert page.locator(".scatterlayer .trace path.point").count() >= 17


def test_branching_a_trajectory_imported_from_a_file(
    page, live_server, login, project, worker, shared_data
):
    """A trajectory from a file outside the repository (SWE-agent CTF run, imported by the
    importers' service) is branched, simulated with the baseline and compared."""
    from studio.services.imports import do_import_file

    path = shared_data / "terminal" / "swe-agent-ctf" / "crypto__BabyEncryption.traj"
    result = do_import_file(project=project, path=path)
    assert result.trajectories_created == 1
    trajectory = project.trajectories.get()
    root = trajectory.root_branch
    recorded = root.all_steps().get(index=1)
    login(page, "researcher")
    open_editor(page, live_server, trajectory, root, 1)
    assert page.input_value("textarea[name=action]") == recorded.action.rstrip()
    job_id = submit_simulation(page, action="ls -la /", n=2)
    assert watch_job_finish(page) == "Succeeded", SimulationJob.objects.get(pk=job_id).error
    kids = list(Branch.objects.filter(job_id=job_id))
    assert all(k.steps.get().observation for k in kids)
    page.click("#job-compare")
    assert page.locator("#compare-step-1").count() == 1
    assert page.locator("#compare-step-1 .compare-cell").count() == 3
