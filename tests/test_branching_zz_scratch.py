import pytest

from studio.models import Branch, SimulationJob
from tests.support.branching import MCP_STEPS, make_child, make_trajectory

pytestmark = [pytest.mark.django_db(transaction=True)]


def test_shots(page, live_server, login, project):
    t, root = make_trajectory(project, domain="mcp", steps=MCP_STEPS * 3, key="shot")
    kids = [
        make_child(
            root,
            2,
            [f'{{"temp_c": {10 + i}, "sky": "sun"}}', '{"time": "10:0%d"}' % i],
            name=f"sim #{i + 1} · step 2",
            sample_index=i,
            origin="edited",
            action='{"name": "get_weather", "arguments": {"city": "Paris"}}',
        )
        for i in range(3)
    ]
    make_child(kids[0], 3, ['{"time": "11:00"}'], name="deeper")
    login(page, "researcher")
    page.goto(f"{live_server.url}/trajectories/{t.pk}/?branch={kids[0].pk}")
    page.wait_for_selector("#branch-tree .branch-tree-plot[data-ready='1']")
    page.screenshot(path="/tmp/shot-traj.png", full_page=True)
    page.goto(f"{live_server.url}/branches/{root.pk}/steps/2/fork/")
    page.screenshot(path="/tmp/shot-editor.png", full_page=True)
    page.goto(f"{live_server.url}/trajectories/{t.pk}/tree/?branch={kids[1].pk}")
    page.wait_for_selector(".branch-tree-plot[data-ready='1']")
    page.screenshot(path="/tmp/shot-tree.png", full_page=True)
    page.goto(
        f"{live_server.url}/trajectories/{t.pk}/compare/?b={root.pk}&b={kids[0].pk}&b={kids[1].pk}"
    )
    page.screenshot(path="/tmp/shot-compare.png", full_page=True)
    Branch.objects.bulk_create(
        Branch(
            trajectory=t,
            parent=kids[i % 3],
            fork_index=3 + i % 3,
            name=f"b{i}",
            origin="simulated",
            lineage=[[root.pk, 0]],
        )
        for i in range(195)
    )
    page.goto(f"{live_server.url}/trajectories/{t.pk}/tree/")
    page.wait_for_selector(".branch-tree-plot[data-ready='1']")
    page.screenshot(path="/tmp/shot-tree200.png", full_page=False)


def test_shot_job(page, live_server, login, project):
    from tests.support.branching import make_job

    t, root = make_trajectory(project, key="shotjob")
    job = make_job(root, 1, n=3, status="running")
    SimulationJob.objects.filter(pk=job.pk).update(
        progress=0.33, phase="decoding", tokens_in=420, tokens_out=37
    )
    a = make_child(
        root,
        1,
        ["README.md  setup.py"],
        job=job,
        status="succeeded",
        name="sim #1 · step 1",
        parse_status="unclosed",
    )
    b = make_child(root, 1, [], job=job, status="running", sample_index=1, name="sim #2 · step 1")
    c = make_child(root, 1, [], job=job, status="failed", sample_index=2, name="sim #3 · step 1")
    Branch.objects.filter(pk=b.pk).update(
        progress={
            "phase": "decoding",
            "tokens_out": 23,
            "tokens_per_s": 31.2,
            "text": "<think>The user lists files</think>\n<predicted_observation>\nREADME",
        }
    )
    Branch.objects.filter(pk=c.pk).update(
        error="The openai backend failed: connection refused (http://127.0.0.1:9/v1)"
    )
    login(page, "researcher")
    page.goto(f"{live_server.url}/jobs/{job.pk}/")
    page.screenshot(path="/tmp/shot-job.png", full_page=True)
