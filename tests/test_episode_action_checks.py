"""What an agent's step is checked for before any model is asked, and what it is told when
the step's worker is lost:

- a plain tool call `{"name", "arguments"?}` over HTTP `POST /step` and a WebSocket `step`
  is checked against the episode's tools as openenv-core's `call_tool` is: an unknown tool
  or arguments that break the tool's schema are refused (422 VALIDATION_ERROR / a WebSocket
  error) naming the tool and the argument, with no model call and nothing recorded; a valid
  one is a step answered as before; free-form actions are never checked against the tools;
- a step whose worker the sweeper failed first ("worker lost", the job page's text) is told
  to the waiting agent as the waiting process tells it: the worker named, nothing recorded,
  send the step again (never the job page's "use Retry")."""

from __future__ import annotations

import asyncio
import json
import re
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest
from django.utils import timezone

from inference.worlds import parse_world
from studio.jobs.runtime import lost_after_s
from studio.models import JobStatus, SimulationJob, Step, WorkerHeartbeat
from studio.services import episode_inputs, episodes, step_watch
from studio.services.endpoints import EndpointData, make_default, save_endpoint
from studio.services.tokens import create_token
from studio.services.worlds import save_world
from studio.serving import openenv_actions
from tests.support.episode_api import request, served_world

CALENDAR = {
    "name": "Calendar",
    "domain": "mcp",
    "description": "A calendar of meetings.",
    "initial_state": "The calendar is open.",
    "tools": [
        {
            "type": "function",
            "function": {
                "name": "list_events",
                "description": "The events of a day",
                "parameters": {
                    "type": "object",
                    "properties": {"date": {"type": "string"}},
                    "required": ["date"],
                },
            },
        }
    ],
}
UNKNOWN = {"name": "nope", "arguments": {}}
BREAKS_SCHEMA = {"name": "list_events", "arguments": {"date": 5}}
NO_ARGUMENTS = {"name": "list_events"}  # `date` is required
VALID = {"name": "list_events", "arguments": {"date": "2026-12-03"}}


def _steps() -> list[Step]:
    return list(Step.objects.order_by("index"))


def test_every_shape_the_studio_reads_as_a_call_is_a_tool_call():
    kind = openenv_actions.kind_of
    assert kind(VALID) == kind(NO_ARGUMENTS) == kind(UNKNOWN) == openenv_actions.TOOL_CALL
    for call in (
        {"name": "x", "arguments": None},
        {"name": "x", "arguments": "{}"},  # OpenAI's own: arguments as JSON text
        {"name": "x", "arguments": {}, "id": "call_1"},
        {"type": "function", "function": {"name": "x", "arguments": "{}"}},
        {"tool_name": "x", "arguments": {}},
        '{"name": "x", "arguments": {}}',  # the call as text
    ):
        assert kind(call) == openenv_actions.TOOL_CALL, call
    for free_form in ({"action": "ls"}, {"text": "hello"}, {"name": 3, "arguments": {}}, "ls"):
        assert kind(free_form) == openenv_actions.STEP, free_form
    assert kind({"type": "call_tool", "tool_name": "x"}) == openenv_actions.CALL_TOOL
    # a call sent inside {"action": ...} is that call; a free-form action stays as it is
    assert openenv_actions.unwrapped({"action": UNKNOWN}) == UNKNOWN
    assert openenv_actions.unwrapped({"action": "ls"}) == {"action": "ls"}
    assert openenv_actions.plain_call_of({"name": "x", "arguments": '{"a": 1}'}) == ("x", {"a": 1})
    with pytest.raises(episodes.EpisodeInvalid, match="'x' are neither an object"):
        openenv_actions.plain_call_of({"name": "x", "arguments": "not json"})


def test_a_tools_validator_is_made_once_per_schema():
    tools = CALENDAR["tools"]
    episode_inputs.check_tool_call(tools, "list_events", {"date": "a"})  # made (or cached)
    before = episode_inputs._validator.cache_info()
    for day in ("b", "c"):
        episode_inputs.check_tool_call(tools, "list_events", {"date": day})
    after = episode_inputs._validator.cache_info()
    assert after.hits == before.hits + 2 and after.misses == before.misses
    with pytest.raises(episodes.EpisodeInvalid, match=r"'list_events'.*'date'"):
        episode_inputs.check_tool_call(tools, "list_events", {"date": 5})


@pytest.mark.django_db(transaction=True)
def test_a_plain_tool_call_over_http_is_checked_before_any_model_or_write(project):
    with served_world(project, CALENDAR) as served:
        url = served["url"]
        _, reset, _ = request("POST", f"{url}/reset", {"task": "Today's meetings"})
        episode = reset["observation"]["episode_id"]

        def step(action):
            return request("POST", f"{url}/step", {"episode_id": episode, "action": action})

        refused = {name: step(a) for name, a in (
            ("unknown", UNKNOWN), ("schema", BREAKS_SCHEMA), ("missing", NO_ARGUMENTS),
            ("text arguments", {"name": "nope", "arguments": "{}"}),
            ("with an id", {"name": "nope", "arguments": {}, "id": "call_1"}),
            ("openai entry", {"type": "function", "function": {"name": "nope", "arguments": "{}"}}),
            ("as text", '{"name": "nope", "arguments": {}}'),
            ("bad text arguments", {"name": "list_events", "arguments": "x"}),
            ("wrapped", {"action": UNKNOWN}),
        )}  # fmt: skip
        model_calls_refused = len(served["srv"].requests)
        steps_refused = len(_steps())
        valid = step(VALID)
        free_form = step({"action": "look at the calendar"})  # never checked against tools
        model_calls = len(served["srv"].requests)
    assert model_calls_refused == 0 and steps_refused == 0
    for name, (status, body, _) in refused.items():
        assert status == 422 and body["code"] == "VALIDATION_ERROR", (name, body)
    assert "'nope'" in refused["unknown"][1]["detail"]
    assert "list_events" in refused["unknown"][1]["detail"]  # the tools it may call
    assert "'list_events'" in refused["schema"][1]["detail"]
    assert "'date'" in refused["schema"][1]["detail"]
    assert "'date' is a required property" in refused["missing"][1]["detail"]
    status, body, _ = valid
    assert status == 200 and set(body) == {"observation", "reward", "done"}
    assert body["observation"]["text"] == '{"temp_c": 9}' and body["observation"]["step"] == 1
    assert "tool_name" not in body["observation"]  # the step's payload, as before
    assert free_form[0] == 200 and free_form[1]["observation"]["step"] == 2
    assert model_calls == 2
    assert [json.loads(s.action) for s in _steps()[:1]] == [VALID]
    assert [s.action for s in _steps()[1:]] == ["look at the calendar"]


@pytest.mark.django_db(transaction=True)
def test_a_plain_tool_call_over_the_websocket_is_checked_before_any_model_or_write(project):
    from websockets.sync.client import connect

    with served_world(project, CALENDAR) as served, connect(served["ws"]) as ws:

        def ask(kind, data):
            ws.send(json.dumps({"type": kind, "data": data}))
            return json.loads(ws.recv(timeout=30))

        assert ask("reset", {"task": "Today's meetings"})["type"] == "observation"
        unknown = ask("step", UNKNOWN)
        schema = ask("step", BREAKS_SCHEMA)
        model_calls_refused = len(served["srv"].requests)
        steps_refused = len(_steps())
        valid = ask("step", VALID)
        state = ask("state", {})
        model_calls = len(served["srv"].requests)
    assert model_calls_refused == 0 and steps_refused == 0
    assert unknown["type"] == "error" and unknown["data"]["code"] == "VALIDATION_ERROR"
    assert "'nope'" in unknown["data"]["message"]
    assert schema["type"] == "error" and schema["data"]["code"] == "VALIDATION_ERROR"
    assert "'list_events'" in schema["data"]["message"] and "'date'" in schema["data"]["message"]
    assert valid["type"] == "observation" and set(valid["data"]) == {
        "observation",
        "reward",
        "done",
    }
    assert valid["data"]["observation"]["step"] == 1
    assert state["data"]["step_count"] == 1 and model_calls == 1
    assert [json.loads(s.action) for s in _steps()] == [VALID]


# ---- a lost worker, whichever process noticed first ----------------------------------------

WORKER = "jobs@box-7"
SHELL = {"name": "Shell", "domain": "terminal", "description": "A box.", "files": {"/a": "1"}}


def _episode(project):
    endpoint = save_endpoint(
        project,
        EndpointData(
            name="fake", role="world", kind="openai", base_url="http://127.0.0.1:9/v1", model="m"
        ),
    ).endpoint
    make_default(endpoint)
    world = save_world(project, parse_world(SHELL)).world
    token, _ = create_token(project, "agent")
    trajectory, _ = episodes.reset(token, world, task="look", seed=7, max_steps=5)
    return token, trajectory


def _running(token, trajectory, *, silent_s: float) -> SimulationJob:
    """A step its worker took, whose heartbeat stopped `silent_s` ago (the worker killed)."""
    job = episodes.start_step(token, trajectory.pk, {"action": "ls"})
    beat = timezone.now() - timedelta(seconds=silent_s)
    SimulationJob.objects.filter(pk=job.pk).update(
        status=JobStatus.RUNNING, worker=WORKER, started_at=beat, heartbeat_at=beat
    )
    job.refresh_from_db()
    return job


def _waited(job) -> episodes.EpisodeError:
    """What the agent waiting on `job` is told (`serving.steps.answer_of`, its own loop)."""
    from studio.serving.steps import answer_of

    with ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(asyncio.run, answer_of(job))
        with pytest.raises(episodes.EpisodeError) as told:
            waiting.result(timeout=60)
    return told.value


def _ageless(message: str) -> str:
    return re.sub(r"\d+ s ago", "N s ago", message)


@pytest.mark.django_db(transaction=True)
def test_a_step_the_sweeper_failed_as_worker_lost_tells_the_agent_as_the_web_process_does(
    project, settings, monkeypatch
):
    from studio.jobs.sweeper import reap_stale_jobs

    settings.STUDIO_WORKER_GONE_S = 2
    monkeypatch.setattr(step_watch, "_cache", (0.0, []))
    token, trajectory = _episode(project)
    silent = lost_after_s() + 30
    # the sweeper first: it fails the job with the job page's text
    swept = _running(token, trajectory, silent_s=silent)
    assert reap_stale_jobs() == 1
    row = SimulationJob.objects.get(pk=swept.pk)
    assert row.status == JobStatus.FAILED and row.phase == "failed" and "use Retry" in row.error
    assert step_watch.is_worker_lost(row)
    told = _waited(swept)
    assert isinstance(told, episodes.EpisodeUnavailable) and told.retry_after
    message = str(told)
    assert f"The worker running this step ({WORKER}) was lost" in message
    assert "Nothing of the step was recorded: send it again." in message
    assert "Retry" not in message and "The job" not in message
    assert not Step.objects.filter(branch__trajectory=trajectory).exists()
    # the step read from its row later says the same
    with pytest.raises(episodes.EpisodeUnavailable) as again:
        episodes.step_result(row)
    assert str(again.value) == message
    # the waiting web process first (the worker's heartbeat row says it is gone)
    now = timezone.now()
    WorkerHeartbeat.objects.create(
        name=WORKER, queues=[swept.queue], pid=1, pool="threads", concurrency=4,
        started_at=now - timedelta(seconds=600), seen_at=now - timedelta(seconds=silent),
    )  # fmt: skip
    noticed = _running(token, trajectory, silent_s=silent)
    assert noticed.fork_index == 0  # nothing was recorded: the same step again
    told_by_web = _waited(noticed)
    assert isinstance(told_by_web, episodes.EpisodeUnavailable)
    assert SimulationJob.objects.get(pk=noticed.pk).status == JobStatus.FAILED
    assert _ageless(str(told_by_web)) == _ageless(message)


@pytest.mark.django_db
def test_a_worker_lost_step_with_no_worker_recorded_still_says_what_to_do(project):
    token, trajectory = _episode(project)
    job = _running(token, trajectory, silent_s=lost_after_s() + 30)
    SimulationJob.objects.filter(pk=job.pk).update(worker="")
    from studio.jobs.sweeper import reap_stale_jobs

    assert reap_stale_jobs() == 1
    with pytest.raises(episodes.EpisodeUnavailable) as told:
        episodes.step_result(SimulationJob.objects.get(pk=job.pk))
    assert str(told.value).startswith("The worker running this step was lost: ")
    assert "send it again" in str(told.value) and "()" not in str(told.value)
