"""The three continuation modes and live streaming in the browser, through a real worker and a
real OpenAI-compatible HTTP server on 127.0.0.1 (the fake plays both the world model and the
agent; a remote model API cannot run here)."""

from __future__ import annotations

import re
import threading

import pytest

from studio.models import Branch, JobStatus, ModelEndpoint, SimulationJob, Step
from tests.support.branching import make_trajectory
from tests.support.fake_openai import fake_openai_server

pytestmark = [
    pytest.mark.browser,
    pytest.mark.worker,
    pytest.mark.django_db(transaction=True),
]

AGENT_PREFIX = "You are the agent"


def responder(request: dict, index: int) -> str:
    messages = request["messages"]
    if messages[0]["content"].startswith(AGENT_PREFIX):
        acted = sum(1 for m in messages if m["role"] == "assistant")
        # the history holds the inherited steps plus the fork step; act twice, then finish
        if acted >= 5:
            return "<think>enough</think><final_answer>all checks pass</final_answer>"
        return f"<think>next idea</think><action>echo agent-step-{acted}</action>"
    action = messages[-1]["content"].rsplit("**Action:**", 1)[-1].strip()
    return (
        f"<think>{THINKING}</think>"
        f"<predicted_observation>world ran [{action[:40]}] ok\n{LISTING}</predicted_observation>"
    )


THINKING = (
    "The shell runs the command and prints its output, nothing else changes. "
    "Let me write what the terminal shows."
)
# A long observation, streamed in 4-character chunks.
LISTING = "\n".join(
    f"-rw-r--r-- 1 user user {100 + i:5d} Nov 30 12:00 file_{i:02d}.py" for i in range(12)
)


@pytest.fixture(scope="module")
def fake_model():
    with fake_openai_server(responder) as srv:
        yield srv


@pytest.fixture
def worker(default_worker):
    return default_worker


def fake_endpoints(project, fake_model) -> None:
    """The fake server registered as the project's world model and agent model."""
    for role, name in (("world", "fake world model"), ("agent", "fake agent")):
        ModelEndpoint.objects.get_or_create(
            project=project,
            name=name,
            defaults={"role": role, "kind": "openai", "base_url": str(fake_model), "model": name},
        )


def start(page, live_server, login, trajectory, root, index, **fields):
    login(page, "researcher")
    page.goto(f"{live_server.url}/trajectories/{trajectory.pk}/")
    page.click(f"#step-{index} .step-actions a.branch-here")
    page.wait_for_url(re.compile(rf"/branches/{root.pk}/steps/{index}/fork/$"))
    for name, value in fields.items():
        selector = f"[name={name}]"
        if name in ("world_endpoint", "agent_endpoint"):
            page.select_option(selector, label=value)
        elif name == "mode":
            page.select_option(selector, value)
        else:
            page.fill(selector, str(value))
    page.click("#simulate-submit")
    page.wait_for_url(re.compile(r"/jobs/\d+/$"))
    return SimulationJob.objects.get(pk=int(re.search(r"/jobs/(\d+)/$", page.url).group(1)))


def finished(page, job):
    page.wait_for_selector(".job-summary[data-done='1']", timeout=120_000)
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED, job.error
    return job


def test_live_streaming_of_the_world_model_text(
    page, live_server, login, project, worker, fake_model
):
    trajectory, root = make_trajectory(project, key="stream")
    fake_endpoints(project, fake_model)
    # The streams stop twice, in the thinking and in the observation, until the page has
    # shown each: the page sees the text arrive piece by piece, with no timing involved.
    in_thinking, in_observation = threading.Event(), threading.Event()
    fake_model.holds = {10: in_thinking, 60: in_observation}
    try:
        job = start(
            page,
            live_server,
            login,
            trajectory,
            root,
            1,
            action="cat setup.py",
            n=2,
            world_endpoint="fake world model",
            max_tokens=64,
        )
        # While decoding, the running branches show their text so far and the phase,
        # updated by polling (no reload).
        page.wait_for_selector(".job-branch .stream-thinking", timeout=60_000)
        thinking = page.inner_text(".job-branch .stream-thinking")
        assert thinking and THINKING.startswith(thinking) and thinking != THINKING  # so far
        assert "decoding" in page.inner_text(".job-branch")
        in_thinking.set()
        page.wait_for_selector(".job-branch .stream-observation", timeout=60_000)
        so_far = page.inner_text(".job-branch .stream-observation")
        full = f"world ran [cat setup.py] ok\n{LISTING}"
        assert so_far and full.startswith(so_far) and so_far != full
    finally:
        in_thinking.set()
        in_observation.set()
        fake_model.holds = {}
    finished(page, job)
    obs = page.inner_text(".job-branch .sim-observation")
    assert "world ran [cat setup.py] ok" in obs
    assert page.locator(".job-branch .stream-text").count() == 0


def test_counterfactual_replay_resimulates_later_steps(page, live_server, login, project, worker):
    trajectory, root = make_trajectory(project, key="replay")
    job = start(
        page,
        live_server,
        login,
        trajectory,
        root,
        2,
        action="python -m pytest -q --lf",
        n=2,
        mode="replay",
        world_endpoint="Retrieval baseline",
    )
    finished(page, job)
    for branch in Branch.objects.filter(job=job):
        steps = list(branch.all_steps())
        assert [s.index for s in steps] == [0, 1, 2, 3, 4]
        assert [s.action for s in steps[3:]] == ["git status", "echo done"]  # recorded actions kept
        assert all(s.branch_id == branch.pk and s.provenance == "replayed" for s in steps[3:])
    page.click("#job-compare")
    # step 4 is a row where a future differs from the recorded step; where every branch has
    # the same action and observation there, it is in a folded run, which opens on demand
    recorded = root.all_steps().get(index=4)
    same = all(
        (s.action, s.observation) == (recorded.action, recorded.observation)
        for s in Step.objects.filter(branch__job=job, index=4)
    )
    if same:
        run = page.locator("#compare-rows tr.compare-run").last  # 4 is the last step
        assert int(run.get_attribute("data-start")) <= 4 <= int(run.get_attribute("data-end"))
        run.locator("button.run-open").click()
        page.wait_for_selector("#compare-step-4")
    assert page.locator("#compare-step-4").count() == 1


def test_agent_rollout_until_final_answer(page, live_server, login, project, worker, fake_model):
    trajectory, root = make_trajectory(project, key="rollout")
    fake_endpoints(project, fake_model)
    job = start(
        page,
        live_server,
        login,
        trajectory,
        root,
        2,
        action="ls tests",
        n=2,
        mode="rollout",
        max_steps=5,
        world_endpoint="fake world model",
        agent_endpoint="fake agent",
    )
    finished(page, job)
    for branch in Branch.objects.filter(job=job):
        own = list(Step.objects.filter(branch=branch).order_by("index"))
        assert own[0].action == "ls tests"
        assert [s.action for s in own[1:3]] == ["echo agent-step-3", "echo agent-step-4"]
        assert own[-1].meta.get("final_answer") and own[-1].action == "all checks pass"
        assert all(s.provenance == "agent" for s in own[1:])
    text = page.inner_text(".job-branches")
    assert "echo agent-step-3" in text and "world ran [echo agent-step-3] ok" in text


def test_cancel_a_running_job_and_see_it_cancelled(
    page, live_server, login, project, worker, fake_model
):
    trajectory, root = make_trajectory(project, key="cancel")
    fake_endpoints(project, fake_model)
    # the streams stop in the thinking until released: the job is decoding when cancelled,
    # and it notices the cancel at its next chunk, after the page said "Cancelling…"
    hold = threading.Event()
    fake_model.holds = {10: hold}
    try:
        job = start(
            page,
            live_server,
            login,
            trajectory,
            root,
            1,
            action="cat setup.py",
            n=3,
            world_endpoint="fake world model",
        )
        page.wait_for_selector(".job-branch .stream-thinking", timeout=60_000)
        page.click("#job-cancel")
        page.wait_for_selector("#job-status >> text=Cancelling…")
        assert "Asked job" in page.inner_text(".messages")
        # the worker has seen the request (it says so on the row, the page shows it)
        page.wait_for_selector("[data-job-phase] >> text=cancelling", timeout=30_000)
        hold.set()
        page.wait_for_selector(".job-summary[data-done='1']", timeout=30_000)
    finally:
        hold.set()
        fake_model.holds = {}
    job.refresh_from_db()
    assert job.status == JobStatus.CANCELLED and job.error == ""
    assert page.inner_text("#job-status") == "Cancelled"
    assert "No future had finished; each keeps" in page.inner_text(".job-cancelled")
    assert set(Branch.objects.filter(job=job).values_list("status", flat=True)) == {"cancelled"}
    assert not Step.objects.filter(branch__job=job).exists()  # nothing half-written
