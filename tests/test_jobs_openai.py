"""Simulation jobs with the OpenAI-compatible backend against a real HTTP fake server, through
a real worker: exact prompts for AgentWorldBench imports, odd outputs, rollout, cancellation."""

from __future__ import annotations

import pytest

from inference.prompts import reference_messages
from inference.simulation.rates import MIN_TOKENS, MIN_TOTAL_WINDOW_S
from studio.models import JobStatus, SimulationJob, Step, Trajectory
from studio.services.endpoints import EndpointData, agent_input, save_endpoint, world_input
from studio.services.imports import do_import_file
from studio.services.simulation import build_request, cancel_simulation, start_simulation
from studio.tasks import enqueue_simulation
from tests.support.fake_openai import fake_openai_server
from tests.support.jobs import AWB_DIR, make_trajectory, read_awb_rows, start_job, wait_job
from tests.support.worker import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]


class Script:
    """A responder whose behaviour each test sets."""

    def __init__(self):
        self.fn = lambda body, i: "<predicted_observation>ok</predicted_observation>"

    def __call__(self, body, index):
        return self.fn(body, index)


@pytest.fixture(scope="module")
def script():
    return Script()


@pytest.fixture(scope="module")
def server(script):
    with fake_openai_server(script) as srv:
        yield srv


@pytest.fixture
def openai_worker(default_worker):
    return default_worker


@pytest.fixture
def fresh(server):
    server.requests.clear()
    server.authorizations.clear()
    return server


def import_awb(project) -> Trajectory:
    do_import_file(project=project, path=AWB_DIR / "terminal_test.jsonl")
    return Trajectory.objects.get(project=project)


def test_awb_prompts_are_the_reference_and_odd_outputs_parse(project, script, fresh, openai_worker):
    trajectory = import_awb(project)
    rows = {r["turn_idx"]: r for r in read_awb_rows("terminal_test.jsonl")}
    outputs = {
        10: "<think>the log has 37 hits</think><predicted_observation>37</predicted_observation>",
        11: "<think>counting</think>\n<predicted_observation>\n41\n",  # unclosed
        12: "no tags at all: 12",
    }
    # the three futures go as one streamed request with n=3: choice k is seed + k's output
    script.fn = lambda body, i: [outputs[body["seed"] + k] for k in range(body.get("n", 1))]
    job = start_job(
        user=None,
        branch=trajectory.root_branch,
        fork_index=2,
        n=3,
        backend="openai",
        base_url=fresh.base_url,
        model="fake-world-model",
        params={"seed": 10, "temperature": 0.6, "max_tokens": 300},
    )
    job = wait_job(job)
    assert job.status == JobStatus.SUCCEEDED, job.error
    assert len(fresh.requests) == 1
    body = fresh.requests[0]
    assert body["messages"] == reference_messages(rows[3])  # byte-identical prompt
    assert body["stream"] is True and body["max_tokens"] == 300
    assert (body["n"], body["seed"]) == (3, 10)
    steps = {s.branch.sample_index: s for s in Step.objects.filter(branch__job=job)}
    assert (steps[0].observation, steps[0].parse_status, steps[0].thinking) == (
        "37",
        "well_formed",
        "the log has 37 hits",
    )
    assert (steps[1].observation, steps[1].parse_status) == ("41", "unclosed")
    assert (steps[2].observation, steps[2].parse_status) == ("no tags at all: 12", "no_tag")
    assert steps[1].raw_output == outputs[11]
    assert job.tokens_in > 0 and job.tokens_out > 0
    # a rate only over a window that means something (`inference.simulation.rates`)
    measurable = (job.decode_s or 0) >= MIN_TOTAL_WINDOW_S and job.tokens_out >= MIN_TOKENS
    assert (job.tokens_per_s is not None) == measurable
    assert job.prefill_s is not None and job.decode_s > 0 and job.queue_wait_s >= 0
    assert steps[0].timings["tokens_out"] > 0

    # an edited action keeps the verbatim turn prompt with only the action swapped
    fresh.requests.clear()
    fresh.authorizations.clear()
    script.fn = lambda body, i: "<predicted_observation>12</predicted_observation>"
    edited = "grep -c '/orchard/pears' /srv/logs/access.log"
    job = wait_job(
        start_job(
            user=None,
            branch=trajectory.root_branch,
            fork_index=1,
            action=edited,
            backend="openai",
            base_url=fresh.base_url,
            model="m",
            mode="replay",
        )
    )
    assert job.status == JobStatus.SUCCEEDED, job.error
    first, second = fresh.requests
    expected = reference_messages(rows[2])
    expected[-1] = {
        **expected[-1],
        "content": rows[2]["prompt"][1].replace("grep -c '/orchard' /srv/logs/access.log", edited),
    }
    assert first["messages"] == expected
    # replay: the next prompt carries the predicted observation, not the recorded one
    assert second["messages"][:4] == expected
    assert second["messages"][4]["role"] == "assistant"
    assert "12" in second["messages"][4]["content"]
    assert "37" not in second["messages"][4]["content"]
    assert second["messages"][5] == {"role": "user", "content": rows[3]["prompt"][2]}
    assert len(second["messages"]) == 6
    child = job.branches.get()
    assert [s.observation for s in child.all_steps()][1:] == ["12", "12"]


def test_rollout_with_world_and_agent_models_from_the_projects_endpoints(
    project, script, fresh, openai_worker
):
    trajectory = make_trajectory(project)

    def save(data):
        return save_endpoint(project, data).endpoint

    world = save(
        EndpointData(
            name="world",
            role="world",
            kind="openai",
            base_url=fresh.base_url,
            model="m",
            api_key="world-key",
        )
    )
    agent = save(
        EndpointData(
            name="agent",
            role="agent",
            kind="openai",
            base_url=fresh.base_url,
            model="agent-m",
            api_key="agent-key",
        )
    )

    def respond(body, index):
        if body["messages"][0]["content"].startswith("You are the agent"):
            agent_turns = sum(1 for m in body["messages"] if m["role"] == "assistant")
            if agent_turns < 3:
                return f"<think>look around</think><action>ls step{agent_turns}</action>"
            return "<final_answer>Flask 3.0.2</final_answer>"
        return "<predicted_observation>app.py</predicted_observation>"

    script.fn = respond
    request = build_request(
        trajectory.root_branch,
        {
            "fork_index": 1,
            "action": "ls /srv",
            "mode": "rollout",
            "max_steps": 5,
            "n": 2,
            **world_input(world),
            **agent_input(agent),
        },
    )
    job = start_simulation(
        user=None,
        branch=trajectory.root_branch,
        request=request,
        world_endpoint=world,
        agent_endpoint=agent,
    )
    enqueue_simulation(job)
    job = wait_job(job)
    assert job.status == JobStatus.SUCCEEDED, job.error
    for child in job.branches.all():
        steps = list(child.all_steps())
        # step 0 inherited, step 1 the given action, then agent actions until the answer
        assert [s.action for s in steps] == [
            "ls /srv/app",
            "ls /srv",
            "ls step2",
            "Flask 3.0.2",
        ]
        assert [s.provenance for s in steps[1:]] == ["edited", "agent", "agent"]
        assert [s.observation_source for s in steps[1:]] == ["simulated", "simulated", "none"]
        assert steps[2].observation == "app.py" and steps[2].meta["agent_thinking"] == "look around"
        assert steps[3].meta["final_answer"] is True and steps[3].observation == ""
    # each model got its own endpoint's key (decrypted in the worker), and its own name
    sent = list(zip(fresh.requests, fresh.authorizations, strict=True))
    assert {auth for body, auth in sent if body["model"] == "m"} == {"Bearer world-key"}
    assert {auth for body, auth in sent if body["model"] == "agent-m"} == {"Bearer agent-key"}
    assert (job.agent_model, job.agent_base_url) == ("agent-m", fresh.base_url)
    assert job.progress == 1.0


def test_cancel_stops_a_running_job(project, openai_worker):
    trajectory = make_trajectory(project)
    slow = "<predicted_observation>" + "tick " * 200 + "</predicted_observation>"
    with fake_openai_server(lambda b, i: slow, chunk_delay_s=0.05) as srv:
        job = start_job(
            user=None,
            branch=trajectory.root_branch,
            fork_index=2,
            action="python -V",
            n=2,
            backend="openai",
            base_url=srv.base_url,
            model="m",
        )

        # live progress of each future shows on the job row while they decode; its speed
        # once enough has been decoded to measure it (`inference.simulation.rates`)
        def streaming():
            live = SimulationJob.objects.get(pk=job.pk).live or {}
            return [
                p
                for p in live.values()
                if "tick" in p.get("text", "") and p.get("tokens_per_s") is not None
            ]

        progress = wait_for(streaming, timeout=60)[0]
        assert progress["phase"] == "decoding" and "tick" in progress["text"]
        assert progress["tokens_per_s"] > 0
        cancel_simulation(job)
        job = wait_job(job, timeout=30)
    assert job.status == JobStatus.CANCELLED
    assert set(job.branches.values_list("status", flat=True)) == {"cancelled"}
    assert not Step.objects.filter(branch__job=job).exists()


def test_backend_failure_is_readable(project, openai_worker):
    trajectory = make_trajectory(project)
    with fake_openai_server(lambda b, i: (400, "model 'nope' does not exist")) as srv:
        job = wait_job(
            start_job(
                user=None,
                branch=trajectory.root_branch,
                fork_index=0,
                action="ls",
                backend="openai",
                base_url=srv.base_url,
                model="nope",
            )
        )
    assert job.status == JobStatus.FAILED
    assert job.error.startswith("The openai backend failed:")
    assert "HTTP 400" in job.error and "model 'nope' does not exist" in job.error
    assert "Traceback" not in job.error
    branch = job.branches.get()
    assert branch.status == "failed" and "HTTP 400" in branch.error


def test_a_fork_in_a_world_sends_the_worlds_prompt_and_tools(project, openai_worker):
    from inference.worlds import parse_world
    from studio.services.worlds import save_world

    steps = [('{"name": "get_weather", "arguments": {"city": "Paris"}}', '{"temp_c": 18}')] * 2
    trajectory = make_trajectory(project, domain="mcp", steps=steps, system_prompt="REAL WORLD")
    world = {
        "name": "Moon base", "domain": "mcp", "description": "A weather station on the Moon.",
        "knowledge": ["There is no weather on the Moon."],
        "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {
            "type": "object", "properties": {"city": {"type": "string"}}}}}],
    }  # fmt: skip
    saved = save_world(project, parse_world(world))
    with fake_openai_server() as srv:
        request = build_request(
            trajectory.root_branch,
            {"fork_index": 1, "backend": "openai", "base_url": srv.base_url, "model": "m", "n": 2},
        )
        job = start_simulation(
            user=None, branch=trajectory.root_branch, request=request,
            world_version=saved.version,
        )  # fmt: skip
        enqueue_simulation(job)
        job = wait_job(job)
    assert job.status == JobStatus.SUCCEEDED, job.error
    system = srv.requests[0]["messages"][0]["content"]
    assert "REAL WORLD" not in system
    assert "There is no weather on the Moon." in system and '"get_weather"' in system
    for step in Step.objects.filter(branch__job=job):
        assert step.meta["world"] == {"id": saved.world.pk, "name": "Moon base", "version": 1}
