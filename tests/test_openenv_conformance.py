"""A studio world against OpenEnv's own tools, under a real uvicorn server with a real
worker: `openenv validate --url` (its CLI), `GenericEnvClient` playing an episode, and
`MCPToolClient` over the WebSocket (reset, list_tools, call_tool, a refused call), with
what is recorded checked in the database."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from studio.models import SimulationJob, Step, Trajectory
from tests.support.episode_api import WEATHER, request, served_world

OPENENV = Path(sys.executable).with_name("openenv")


def _in_thread(coro):
    """An async client in a thread of its own (a browser test's loop may run in this one)."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result(timeout=120)


@pytest.mark.django_db(transaction=True)
def test_openenv_validate_passes_every_check_against_a_world(project):
    with served_world(project) as served:
        run = subprocess.run(
            [str(OPENENV), "validate", "--url", served["url"], "--json"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    report = json.loads(run.stdout)
    failed = {c["id"]: c for c in report["criteria"] if not c["passed"]}
    assert failed == {} and report["passed"] is True, failed
    assert run.returncode == 0, run.stderr
    assert report["mode"] == "simulation" and report["standard_profile"] == "openenv-http/1.x"
    assert not Trajectory.objects.exists()  # looking at a world starts no episode


@pytest.mark.django_db(transaction=True)
def test_metadata_schema_and_openapi_describe_the_world(project):
    from jsonschema import Draft202012Validator

    with served_world(project) as served:
        url = served["url"]
        _, meta, _ = request("GET", f"{url}/metadata")
        _, schemas, _ = request("GET", f"{url}/schema")
        _, api, _ = request("GET", f"{url}/openapi.json")
        bearer_base = f"{served['base']}/env/worlds/{served['world'].pk}"
        no_token = request("GET", f"{bearer_base}/schema")
        with_header = request("GET", f"{bearer_base}/openapi.json", token=served["token"])
    assert meta["name"] == "Weather desk" and meta["description"].startswith("A weather")
    assert meta["version"] == "1" and meta["domain"] == "mcp" and meta["tools"] == ["get_weather"]
    assert "get_weather" in meta["readme_content"]
    action = schemas["action"]
    Draft202012Validator.check_schema(action)
    valid = Draft202012Validator(action)
    for good in (
        {"action": "look"},
        {"name": "get_weather", "arguments": {"city": "Oslo"}},
        {"type": "call_tool", "tool_name": "get_weather", "arguments": {"city": "Oslo"}},
        {"type": "list_tools"},
    ):
        assert valid.is_valid(good), good
    for bad in (
        {"name": "get_weather", "arguments": {"town": "Oslo"}},  # the tool's schema
        {"type": "call_tool", "tool_name": "launch_rocket", "arguments": {}},
        {"action": 3},
    ):
        assert not valid.is_valid(bad), bad
    assert {"episode_id", "step_count"} <= set(schemas["state"]["properties"])
    world_base = f"/env/t/{served['token']}/worlds/{served['world'].pk}"
    assert api["servers"] == [{"url": world_base}] and api["info"]["version"] == "1.0.0"
    assert {"/reset", "/step", "/state", "/health", "/metadata", "/schema", "/mcp"} <= set(
        api["paths"]
    )
    assert no_token[0] == 401 and no_token[1]["code"] == "UNAUTHORIZED"
    assert with_header[0] == 200
    assert with_header[1]["servers"] == [{"url": f"/env/worlds/{served['world'].pk}"}]


@pytest.mark.django_db(transaction=True)
@pytest.mark.worker
def test_generic_env_client_plays_a_world(project, episode_worker):
    from openenv.core.generic_client import GenericEnvClient

    world = {**WEATHER, "tasks": [{"id": "oslo", "instruction": "The weather in Oslo?",
                                   "success_criteria": "It says 9 degrees."}]}  # fmt: skip
    with served_world(project, world) as served:
        _, meta, _ = request("GET", f"{served['url']}/metadata")
        with GenericEnvClient(base_url=served["url"]).sync() as env:
            first = env.reset(task_id="oslo", seed=7, max_steps=3)
            assert first.done is False and first.observation["text"] == "The desk is open."
            assert first.observation["task"] == "The weather in Oslo?"
            assert first.observation["metadata"]["seed"] == 7
            result = env.step({"name": "get_weather", "arguments": {"city": "Oslo"}})
            assert result.observation["text"] == '{"temp_c": 9}' and result.done is False
            assert result.observation["step"] == 1
            state = env.state()
            assert state["step_count"] == 1 and state["task_id"] == "oslo" and state["seed"] == 7
    assert meta["tasks"] == ["oslo"] and "The weather in Oslo?" in meta["readme_content"]
    trajectory = Trajectory.objects.get(pk=int(first.observation["episode_id"]))
    assert json.loads(trajectory.root_branch.steps.get().action)["arguments"] == {"city": "Oslo"}


@pytest.mark.django_db(transaction=True)
@pytest.mark.worker
def test_mcp_tool_client_lists_and_calls_tools_over_the_websocket(project, episode_worker):
    """openenv-core's MCPToolClient: reset (tools as objects), list_tools (nothing
    recorded), call_tool (one step, the world model's text returned), a call that breaks
    the tool's schema or names no tool (raises naming it, nothing recorded, no model)."""
    from openenv.core.mcp_client import MCPToolClient

    with served_world(project) as served:

        async def play():
            async with MCPToolClient(base_url=served["url"]) as env:
                reset = await env.reset(task="Check Oslo")
                tools = await env.list_tools(use_cache=False)
                listed_requests = len(served["srv"].requests)
                answer = await env.call_tool("get_weather", city="Oslo")
                errors = []
                for name, args in (("get_weather", {"town": "Oslo"}), ("launch", {})):
                    try:
                        await env.call_tool(name, **args)
                    except RuntimeError as exc:
                        errors.append(str(exc))
                state = await env.state()
                return reset, tools, listed_requests, answer, errors, state

        reset, tools, listed_requests, answer, errors, state = _in_thread(play())
        model_calls = len(served["srv"].requests)
    assert [t.name for t in reset.observation.tools] == ["get_weather"]
    assert [t.name for t in tools] == ["get_weather"]
    assert tools[0].input_schema["required"] == ["city"]
    assert listed_requests == 0  # list_tools asked no model
    assert answer == '{"temp_c": 9}'
    assert len(errors) == 2, errors
    assert "get_weather" in errors[0] and "city" in errors[0] and "invalid_args" in errors[0]
    assert "launch" in errors[1] and "tool_not_found" in errors[1]
    assert model_calls == 1 and state.step_count == 1
    (episode,) = Trajectory.objects.filter(source_format="episode")
    (step,) = Step.objects.filter(branch__trajectory=episode)  # one step: the valid call
    assert json.loads(step.action) == {"name": "get_weather", "arguments": {"city": "Oslo"}}
    assert SimulationJob.objects.filter(trajectory=episode).count() <= 1


@pytest.mark.django_db(transaction=True)
def test_list_tools_over_http_needs_no_episode_and_records_nothing(project):
    with served_world(project) as served:
        status, body, _ = request(
            "POST", f"{served['url']}/step", {"action": {"type": "list_tools"}}
        )
        assert len(served["srv"].requests) == 0
    assert status == 200 and body["observation"]["tools"][0]["name"] == "get_weather"
    assert (
        body["observation"]["tools"][0]["input_schema"]
        == WEATHER["tools"][0]["function"]["parameters"]
    )
    assert not Trajectory.objects.exists() and not SimulationJob.objects.exists()


@pytest.mark.django_db(transaction=True)
@pytest.mark.worker
def test_call_tool_over_http_is_one_step_and_a_bad_call_is_refused_unrecorded(
    project, episode_worker
):
    with served_world(project) as served:
        url = served["url"]
        _, reset, _ = request("POST", f"{url}/reset", {"task": "Check Oslo"})
        episode = reset["observation"]["episode_id"]

        def call(name, arguments):
            action = {"type": "call_tool", "tool_name": name, "arguments": arguments}
            return request("POST", f"{url}/step", {"episode_id": episode, "action": action})

        refused = call("get_weather", {"city": 7})
        unknown = call("launch_rocket", {})
        assert len(served["srv"].requests) == 0  # no model asked for a refused call
        status, good, _ = call("get_weather", {"city": "Oslo"})
    assert refused[0] == 200 and refused[1]["observation"]["error"]["error_type"] == "invalid_args"
    assert "'city'" in refused[1]["observation"]["error"]["message"]
    assert unknown[1]["observation"]["error"]["error_type"] == "tool_not_found"
    assert "launch_rocket" in unknown[1]["observation"]["error"]["message"]
    assert status == 200 and good["observation"]["tool_name"] == "get_weather"
    assert good["observation"]["result"]["data"] == '{"temp_c": 9}' == good["observation"]["text"]
    assert good["observation"]["error"] is None and good["done"] is False
    (step,) = Step.objects.filter(branch__trajectory_id=int(episode))
    assert json.loads(step.action) == {"name": "get_weather", "arguments": {"city": "Oslo"}}
