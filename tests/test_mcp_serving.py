"""A world as an MCP server, driven by the official MCP SDK client under real uvicorn servers:
tools listed, a valid call is one step answered by the world model, a bad call (unknown
tool, arguments that break the schema, a lone surrogate or NUL) is an `isError` result with
no model asked and nothing written, one episode per MCP session, and the sessions live in
the database: two web processes serve one session's requests in turn."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import pytest

from inference.worlds import parse_world
from studio.models import McpSession, Step, Trajectory
from studio.services.tokens import create_token
from studio.services.worlds import save_world
from tests.support.asgi import asgi_server
from tests.support.fake_openai import fake_openai_server
from tests.support.worker import ROOT, wait_for, worker_env

WEATHER_WORLD = {
    "name": "Weather desk",
    "domain": "mcp",
    "description": "A weather service.",
    "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather",
               "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                              "required": ["city"]}}}],
}  # fmt: skip
ANSWER = "<predicted_observation>" + '{"temp_c": 9}' + "</predicted_observation>"
HANDSHAKE = "2025-11-25"


def _world_model(project, base_url: str) -> None:
    from studio.services.endpoints import EndpointData, make_default, save_endpoint

    endpoint = save_endpoint(
        project,
        EndpointData(name="fake", role="world", kind="openai", base_url=base_url, model="m"),
    ).endpoint
    make_default(endpoint)


def _run(coro, timeout: float = 120):
    # in a thread of its own: a browser test's event loop may still run in this one
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result(timeout=timeout)


def rpc(url: str, message: dict | bytes, session: str = "", version: str = HANDSHAKE):
    """One raw MCP POST: (status, headers, JSON body or None)."""
    data = message if isinstance(message, bytes) else json.dumps(message).encode()
    request = urllib.request.Request(url, data=data, method="POST")
    request.add_header("Content-Type", "application/json")
    request.add_header("Accept", "application/json, text/event-stream")
    if version:
        request.add_header("MCP-Protocol-Version", version)
    if session:
        request.add_header("Mcp-Session-Id", session)
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            raw = response.read()
            return response.status, dict(response.headers), json.loads(raw) if raw else None
    except urllib.error.HTTPError as exc:
        raw = exc.read()
        return exc.code, dict(exc.headers), json.loads(raw) if raw else None


INITIALIZE = {
    "jsonrpc": "2.0", "id": 1, "method": "initialize",
    "params": {"protocolVersion": HANDSHAKE, "capabilities": {},
               "clientInfo": {"name": "test", "version": "1"}},
}  # fmt: skip


def open_session(url: str) -> str:
    status, headers, body = rpc(url, INITIALIZE)
    assert status == 200 and body["result"]["serverInfo"]["name"] == "agentworld-studio", body
    session = {k.lower(): v for k, v in headers.items()}["mcp-session-id"]
    status, _, _ = rpc(
        url, {"jsonrpc": "2.0", "method": "notifications/initialized"}, session=session
    )
    assert status == 202
    return session


def call(url: str, session: str, arguments, name: str = "get_weather", request_id: int = 2):
    message = {"jsonrpc": "2.0", "id": request_id, "method": "tools/call",
               "params": {"name": name, "arguments": arguments}}  # fmt: skip
    return rpc(url, message, session=session)


@pytest.fixture
def weather(project):
    world = save_world(project, parse_world(WEATHER_WORLD)).world
    _, token = create_token(project, "mcp-agent")
    with fake_openai_server(lambda request, index: ANSWER) as srv:
        _world_model(project, srv.base_url)
        yield world, token, srv


def _episodes():
    return list(Trajectory.objects.filter(source_format="episode").order_by("pk"))


def _cities(trajectory) -> list[str]:
    steps = Step.objects.filter(branch__trajectory=trajectory).order_by("index")
    return [json.loads(s.action)["arguments"]["city"] for s in steps]


@pytest.mark.django_db(transaction=True)
def test_the_sdk_client_plays_one_episode_per_session(weather):
    from mcp import Client

    world, token, srv = weather
    with asgi_server() as base:
        url = f"{base}/mcp/t/{token}/worlds/{world.pk}/"

        async def play():
            async with Client(url) as client:  # mode "auto": falls back to the handshake
                tools = await client.list_tools()
                first = await client.call_tool("get_weather", {"city": "Oslo"})
                second = await client.call_tool("get_weather", {"city": "Bergen"})  # no _meta
                open_sessions = await asyncio.to_thread(McpSession.objects.count)
            async with Client(url) as client:  # a new session: a new episode
                third = await client.call_tool("get_weather", {"city": "Tromsø"})
            return tools, first, second, third, open_sessions

        tools, first, second, third, open_sessions = _run(play())
    assert [t.name for t in tools.tools] == ["get_weather"]
    assert tools.tools[0].input_schema["required"] == ["city"]
    assert first.is_error is False and first.content[0].text == '{"temp_c": 9}'
    assert first.meta["agentworld/episode"] == second.meta["agentworld/episode"]
    assert first.meta["agentworld/task"] and "agentworld/task" not in second.meta
    assert [first.meta["agentworld/step"], second.meta["agentworld/step"]] == [1, 2]
    assert third.meta["agentworld/episode"] != first.meta["agentworld/episode"]
    played, again = _episodes()
    assert _cities(played) == ["Oslo", "Bergen"] and _cities(again) == ["Tromsø"]
    assert played.metadata["episode"]["client"] == "mcp"
    assert open_sessions == 1
    assert not McpSession.objects.exists()  # each client ended its session (DELETE)
    assert len(srv.requests) == 3


@pytest.mark.django_db(transaction=True)
def test_a_bad_call_is_refused_without_a_step_or_an_episode(weather):
    from mcp import Client

    world, token, srv = weather
    with asgi_server() as base:
        url = f"{base}/mcp/t/{token}/worlds/{world.pk}/"

        async def play():
            async with Client(url) as client:
                unknown = await client.call_tool("get_forecast", {"city": "Oslo"})
                missing = await client.call_tool("get_weather", {})
                typed = await client.call_tool("get_weather", {"city": 5})
                nul = await client.call_tool("get_weather", {"city": "Os\x00lo"})
                return unknown, missing, typed, nul

        unknown, missing, typed, nul = _run(play())
    assert unknown.is_error and unknown.content[0].text == (
        "unknown tool 'get_forecast': this world's tools are get_weather"
    )
    assert missing.is_error and "'city' is a required property" in missing.content[0].text
    assert typed.is_error and "at 'city'" in typed.content[0].text
    assert "5 is not of type 'string'" in typed.content[0].text
    assert nul.is_error and "get_weather" in nul.content[0].text
    assert "city contains a NUL character" in nul.content[0].text
    assert unknown.meta["agentworld/code"] == "VALIDATION_ERROR"
    assert _episodes() == [] and srv.requests == []  # no reset, no model, no step


@pytest.mark.django_db(transaction=True)
def test_a_lone_surrogate_is_an_is_error_naming_the_argument(weather):
    world, token, srv = weather
    with asgi_server() as base:
        url = f"{base}/mcp/t/{token}/worlds/{world.pk}/"
        session = open_session(url)
        raw = (
            b'{"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": '
            b'{"name": "get_weather", "arguments": {"city": "Oslo\\udcff"}}}'
        )
        status, _, body = rpc(url, raw, session=session)
        bad_name = rpc(
            url,
            b'{"jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": '
            b'{"name": "get_\\ud800", "arguments": {}}}',
            session=session,
        )
        listed = rpc(url, {"jsonrpc": "2.0", "id": 9, "method": "tools/list"}, session=session)
    assert status == 200 and body["id"] == 7, body
    result = body["result"]
    assert result["isError"] is True
    assert result["content"][0]["text"] == (
        "the arguments of tool 'get_weather' at city contains an unpaired surrogate (\\udcff)"
    )
    assert bad_name[0] == 200 and bad_name[2]["result"]["isError"] is True
    assert (
        "the tool's name contains an unpaired surrogate"
        in bad_name[2]["result"]["content"][0]["text"]
    )
    assert listed[0] == 200 and listed[2]["result"]["tools"][0]["name"] == "get_weather"
    assert _episodes() == [] and srv.requests == []
    session_row = McpSession.objects.get()
    assert session_row.trajectory_id is None  # the session has no episode until a valid call


@pytest.mark.django_db(transaction=True)
def test_the_vendor_meta_key_continues_an_episode_across_sessions(weather):
    from mcp import Client

    world, token, _ = weather
    with asgi_server() as base:
        url = f"{base}/mcp/t/{token}/worlds/{world.pk}/"

        async def play():
            async with Client(url) as client:
                first = await client.call_tool("get_weather", {"city": "Oslo"})
            async with Client(url) as client:
                meta = {"agentworld/episode": first.meta["agentworld/episode"]}
                await client.call_tool("get_weather", {"city": "Bergen"}, meta=meta)

        _run(play())
    (episode,) = _episodes()
    assert _cities(episode) == ["Oslo", "Bergen"]


@pytest.mark.django_db(transaction=True)
def test_a_session_needs_its_token_and_the_sessionless_revision_is_told_the_versions(
    weather, project
):
    world, token, _ = weather
    _, other = create_token(project, "someone-else")
    with asgi_server() as base:
        url = f"{base}/mcp/t/{token}/worlds/{world.pk}/"
        session = open_session(url)
        # a session stays with the token that opened it
        stolen = call(f"{base}/mcp/t/{other}/worlds/{world.pk}/", session, {"city": "Oslo"})
        unknown = call(url, "no-such-session", {"city": "Oslo"})
        modern = rpc(
            url, {"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {}},
            version="2026-07-28",
        )  # fmt: skip
        wrong = rpc(f"{base}/mcp/t/awt_wrong/worlds/{world.pk}/", INITIALIZE)
    assert stolen[0] == 404 and "Session not found" in stolen[2]["error"]["message"]
    assert unknown[0] == 404
    assert modern[0] == 400 and modern[2]["error"]["code"] == -32022
    assert modern[2]["error"]["data"]["supported"] == [
        "2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25",
    ]  # fmt: skip
    assert wrong[0] == 401 and "valid API token" in wrong[2]["detail"]
    assert _episodes() == []


@pytest.mark.django_db(transaction=True)
def test_a_sessions_new_episode_counts_as_a_reset(weather, settings):
    world, token, srv = weather
    settings.STUDIO_EPISODE_RESETS_PER_MINUTE = 1
    with asgi_server() as base:
        url = f"{base}/mcp/t/{token}/worlds/{world.pk}/"
        first = call(url, open_session(url), {"city": "Oslo"})
        refused = call(url, open_session(url), {"city": "Bergen"})
    assert first[2]["result"]["isError"] is False
    result = refused[2]["result"]
    assert result["isError"] is True
    assert "STUDIO_EPISODE_RESETS_PER_MINUTE" in result["content"][0]["text"]
    assert result["_meta"]["agentworld/code"] == "RATE_LIMITED"
    assert result["_meta"]["agentworld/retry_after"] >= 1
    assert len(_episodes()) == 1 and len(srv.requests) == 1


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def web_process():
    """The studio under its own uvicorn process (as `uvicorn --workers N` runs several),
    on the test database."""
    port = _free_port()
    log = open(os.path.join(os.environ.get("STUDIO_DATA_DIR", "/tmp"), f"web-{port}.log"), "wb")  # noqa: SIM115
    proc = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "studio.asgi:application",
         "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"],
        cwd=ROOT, env=worker_env(), stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip

    def up() -> bool:
        if proc.poll() is not None:
            raise RuntimeError(f"uvicorn exited: {open(log.name).read()[-3000:]}")
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", port)) == 0

    try:
        wait_for(up, timeout=60, interval=0.1)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        log.close()


@pytest.mark.django_db(transaction=True)
def test_two_web_processes_serve_one_session_in_turn(weather):
    world, token, srv = weather
    with web_process() as a, web_process() as b:
        path = f"/mcp/t/{token}/worlds/{world.pk}/"
        session = open_session(a + path)
        answers = [
            call(server + path, session, {"city": city}, request_id=i)
            for i, (server, city) in enumerate(
                [(b, "Oslo"), (a, "Bergen"), (b, "Tromsø"), (a, "Bodø")], start=2
            )
        ]
        listed = rpc(b + path, {"jsonrpc": "2.0", "id": 9, "method": "tools/list"}, session=session)
    for status, _, body in answers:
        assert status == 200 and body["result"]["isError"] is False, body
    episodes = {body["result"]["_meta"]["agentworld/episode"] for _, _, body in answers}
    assert len(episodes) == 1  # the same episode, whichever process answered
    (episode,) = _episodes()
    assert _cities(episode) == ["Oslo", "Bergen", "Tromsø", "Bodø"]
    assert McpSession.objects.get().trajectory_id == episode.pk
    assert listed[0] == 200 and listed[2]["result"]["tools"][0]["name"] == "get_weather"


@pytest.mark.django_db(transaction=True)
def test_an_episode_ended_in_the_studio_refuses_its_sessions_next_call(weather):
    from studio.services.episode_library import end_episode

    world, token, srv = weather
    with asgi_server() as base:
        url = f"{base}/mcp/t/{token}/worlds/{world.pk}/"
        session = open_session(url)
        first = call(url, session, {"city": "Oslo"})
        end_episode(int(first[2]["result"]["_meta"]["agentworld/episode"]))
        refused = call(url, session, {"city": "Bergen"})
    result = refused[2]["result"]
    assert result["isError"] is True, result
    assert "cancelled" in result["content"][0]["text"]
    assert "open a new session for a new episode" in result["content"][0]["text"]
    assert result["_meta"]["agentworld/code"] == "CONFLICT"
    (episode,) = _episodes()
    assert _cities(episode) == ["Oslo"] and len(srv.requests) == 1
