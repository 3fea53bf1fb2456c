"""OpenEnv's plain JSON-RPC endpoint, POST {base}/mcp, under a real uvicorn server: what
`openenv validate` checks (POST {} is a JSON-RPC error with HTTP 200), tools/list, tools/call
as one step of the session's episode, a bad call refused without a step, OpenEnv's session
methods, and openenv-core's MCPToolClient in production mode against it."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest

from inference.worlds import parse_world
from studio.models import McpSession, Step, Trajectory
from studio.services.tokens import create_token
from studio.services.worlds import save_world
from tests.support.asgi import asgi_server
from tests.support.fake_openai import fake_openai_server

WEATHER_WORLD = {
    "name": "Weather desk",
    "domain": "mcp",
    "description": "A weather service.",
    "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather",
               "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                              "required": ["city"]}}}],
}  # fmt: skip
ANSWER = "<predicted_observation>" + '{"temp_c": 9}' + "</predicted_observation>"


def _lower(headers) -> dict[str, str]:
    return {k.lower(): v for k, v in headers.items()}


def post(url: str, body: dict | bytes, token: str = "") -> tuple[int, dict, dict]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method="POST")
    request.add_header("Content-Type", "application/json")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, _lower(response.headers), json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, _lower(exc.headers), json.loads(exc.read())


def rpc(method: str, params: dict | None = None, request_id: int = 1) -> dict:
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params or {}}


@pytest.fixture
def served(project):
    from studio.services.endpoints import EndpointData, make_default, save_endpoint

    world = save_world(project, parse_world(WEATHER_WORLD)).world
    _, token = create_token(project, "trainer")
    with fake_openai_server(lambda request, index: ANSWER) as srv, asgi_server() as base:
        endpoint = save_endpoint(
            project,
            EndpointData(
                name="fake", role="world", kind="openai", base_url=srv.base_url, model="m"
            ),
        ).endpoint
        make_default(endpoint)
        yield f"{base}/env/t/{token}/worlds/{world.pk}", token, world, srv, base


def _episodes():
    return list(Trajectory.objects.filter(source_format="episode").order_by("pk"))


@pytest.mark.django_db(transaction=True)
def test_what_openenv_validate_checks_and_what_a_bad_body_gets(served):
    base, token, world, _, root = served
    # `openenv validate`: POST {} answers HTTP 200 with a JSON-RPC 2.0 payload
    status, _, body = post(f"{base}/mcp", {})
    assert status == 200 and body["jsonrpc"] == "2.0" and body["id"] is None
    assert body["error"]["code"] == -32600
    status, _, body = post(f"{base}/mcp", b"{not json")
    assert status == 200 and body["error"]["code"] == -32700
    assert "Parse error" in body["error"]["message"]
    status, _, body = post(f"{base}/mcp", b'{"jsonrpc": "2.0", "id": 3, "method": "x\xff"}')
    assert status == 200 and "not UTF-8 (invalid byte at offset" in body["error"]["message"]
    status, _, body = post(f"{base}/mcp", rpc("resources/list", request_id=4))
    assert status == 200 and body["id"] == 4 and body["error"]["code"] == -32601
    assert body["error"]["message"] == "Method not found: resources/list"
    # the Bearer form of the base, and a wrong token
    status, _, body = post(f"{root}/env/worlds/{world.pk}/mcp", rpc("tools/list"), token=token)
    assert status == 200 and body["result"]["tools"][0]["name"] == "get_weather"
    status, _, body = post(f"{root}/env/t/awt_wrong/worlds/{world.pk}/mcp", {})
    assert status == 401 and "valid API token" in body["error"]["message"]


@pytest.mark.django_db(transaction=True)
def test_tools_list_and_a_tools_call_is_one_step_of_the_sessions_episode(served):
    base, _, _, srv, _ = served
    status, _, listed = post(f"{base}/mcp", rpc("tools/list"))
    assert status == 200
    assert listed["result"]["tools"] == [
        {"name": "get_weather", "description": "Weather",
         "inputSchema": {"type": "object", "properties": {"city": {"type": "string"}},
                         "required": ["city"]}},
    ]  # fmt: skip
    _, _, created = post(f"{base}/mcp", rpc("openenv/session/create"))
    session = created["result"]["session_id"]
    assert McpSession.objects.get(session_id=session).trajectory_id is None
    answers = [
        post(f"{base}/mcp", rpc("tools/call", {"name": "get_weather", "arguments": {"city": c},
                                               "session_id": session}, request_id=i))
        for i, c in enumerate(["Oslo", "Bergen"], start=2)
    ]  # fmt: skip
    for status, _, body in answers:
        assert status == 200 and body["result"]["isError"] is False, body
        assert body["result"]["data"] == '{"temp_c": 9}'
        assert body["result"]["content"] == [{"type": "text", "text": '{"temp_c": 9}'}]
    first, second = (body["result"] for _, _, body in answers)
    assert first["_meta"]["agentworld/episode"] == second["_meta"]["agentworld/episode"]
    assert [first["observation"]["step"], second["observation"]["step"]] == [1, 2]
    (episode,) = _episodes()
    assert episode.metadata["episode"]["client"] == "openenv-mcp"
    steps = Step.objects.filter(branch__trajectory=episode).order_by("index")
    assert [json.loads(s.action) for s in steps] == [
        {"name": "get_weather", "arguments": {"city": "Oslo"}},
        {"name": "get_weather", "arguments": {"city": "Bergen"}},
    ]
    # without a session, a call is an episode of its own (its id comes back)
    _, _, alone = post(f"{base}/mcp", rpc("tools/call", {"name": "get_weather",
                                                         "arguments": {"city": "Bodø"}}))  # fmt: skip
    assert alone["result"]["_meta"]["agentworld/episode"] != first["_meta"]["agentworld/episode"]
    assert len(_episodes()) == 2 and len(srv.requests) == 3
    # closing the session leaves its episode in the library
    status, _, closed = post(f"{base}/mcp", rpc("openenv/session/close", {"session_id": session}))
    assert closed["result"] == {"session_id": session, "closed": True}
    assert not McpSession.objects.exists() and len(_episodes()) == 2
    _, _, again = post(f"{base}/mcp", rpc("openenv/session/close", {"session_id": session}))
    assert again["error"] == {"code": -32602, "message": f"Unknown session_id: {session}"}
    _, _, missing = post(f"{base}/mcp", rpc("openenv/session/close"))
    assert missing["error"]["message"] == "Invalid params - 'session_id' is required"
    _, _, gone = post(f"{base}/mcp", rpc("tools/list", {"session_id": session}))
    assert gone["error"]["message"] == f"Unknown session_id: {session}"


@pytest.mark.django_db(transaction=True)
def test_a_bad_tools_call_is_refused_without_a_step(served):
    base, _, _, srv, _ = served
    _, _, created = post(f"{base}/mcp", rpc("openenv/session/create"))
    session = created["result"]["session_id"]

    def call(name, arguments) -> dict:
        params = {"name": name, "arguments": arguments, "session_id": session}
        status, _, body = post(f"{base}/mcp", rpc("tools/call", params, request_id=5))
        assert status == 200 and body["id"] == 5
        return body["error"]

    unknown = call("get_forecast", {"city": "Oslo"})
    assert unknown["code"] == -32602 and unknown["data"] == {"code": "VALIDATION_ERROR"}
    assert unknown["message"] == "unknown tool 'get_forecast': this world's tools are get_weather"
    assert "'city' is a required property" in call("get_weather", {})["message"]
    assert "at 'city'" in call("get_weather", {"city": ["Oslo"]})["message"]
    nul = call("get_weather", {"city": "Os\x00lo"})
    assert (
        nul["message"]
        == "the arguments of tool 'get_weather' at city contains a NUL character (\\u0000)"
    )
    raw = (
        b'{"jsonrpc": "2.0", "id": 6, "method": "tools/call", "params": {"name": "get_weather", '
        b'"arguments": {"city": "\\udcff"}, "session_id": "' + session.encode() + b'"}}'
    )
    status, _, body = post(f"{base}/mcp", raw)
    assert status == 200 and body["error"]["message"] == (
        "the arguments of tool 'get_weather' at city contains an unpaired surrogate (\\udcff)"
    )
    _, _, nameless = post(f"{base}/mcp", rpc("tools/call", {"arguments": {}}))
    assert nameless["error"]["message"] == "Missing 'name' in params: the tool to call"
    assert _episodes() == [] and srv.requests == []  # no reset, no model, no step
    assert McpSession.objects.get().trajectory_id is None


@pytest.mark.django_db(transaction=True)
def test_limits_are_the_transports_with_retry_after(served, settings):
    base, _, _, srv, _ = served
    settings.STUDIO_EPISODE_RESETS_PER_MINUTE = 1
    settings.STUDIO_EPISODE_MAX_BODY_KB = 1
    call = rpc("tools/call", {"name": "get_weather", "arguments": {"city": "Oslo"}})
    assert post(f"{base}/mcp", call)[0] == 200
    status, headers, body = post(f"{base}/mcp", call)  # a second episode: a second reset
    assert status == 429 and int(headers["retry-after"]) >= 1
    assert "STUDIO_EPISODE_RESETS_PER_MINUTE" in body["error"]["message"]
    assert body["error"]["data"]["code"] == "RATE_LIMITED"
    big = rpc("tools/call", {"name": "get_weather", "arguments": {"city": "x" * 2000}})
    status, _, body = post(f"{base}/mcp", big)
    assert status == 413 and "STUDIO_EPISODE_MAX_BODY_KB" in body["error"]["message"]
    assert len(_episodes()) == 1 and len(srv.requests) == 1


@pytest.mark.django_db(transaction=True)
def test_openenv_cores_mcp_tool_client_in_production_mode(served):
    from openenv.core.mcp_client import MCPToolClient

    base, _, _, srv, _ = served

    async def play():
        client = MCPToolClient(base_url=base, mode="production")
        client.use_production_mode = True
        async with client:
            tools = await client.list_tools()
            first = await client.call_tool("get_weather", city="Oslo")
            second = await client.call_tool("get_weather", city="Bergen")
            with pytest.raises(RuntimeError) as refused:
                await client.call_tool("get_weather", town="Oslo")
            sessions = await asyncio.to_thread(McpSession.objects.count)
        return tools, first, second, str(refused.value), sessions

    with ThreadPoolExecutor(1) as pool:
        tools, first, second, refused, sessions = pool.submit(asyncio.run, play()).result(120)
    assert [(t.name, t.input_schema["required"]) for t in tools] == [("get_weather", ["city"])]
    assert first == second == '{"temp_c": 9}'
    assert "Tool 'get_weather' failed:" in refused and "'city' is a required property" in refused
    assert sessions == 1 and not McpSession.objects.exists()  # closed with the client
    (episode,) = _episodes()  # one session, one episode; list_tools is no step
    assert episode.step_count == 2 and len(srv.requests) == 2


@pytest.mark.django_db(transaction=True)
def test_the_call_that_starts_an_episode_may_name_its_seed_and_step_limit(served):
    base, _, _, _, _ = served
    meta = {"agentworld/seed": 7, "agentworld/max_steps": 1}
    params = {"name": "get_weather", "arguments": {"city": "Oslo"}, "_meta": meta}
    status, _, body = post(f"{base}/mcp", rpc("tools/call", params))
    assert status == 200, body
    result = body["result"]
    assert result["done"] is True and result["_meta"]["agentworld/done"] is True
    (episode,) = _episodes()
    assert episode.metadata["episode"]["seed"] == 7
    assert episode.metadata["episode"]["max_steps"] == 1
    again = {"name": "get_weather", "arguments": {"city": "Bergen"},
             "_meta": {"agentworld/episode": result["_meta"]["agentworld/episode"]}}  # fmt: skip
    _, _, refused = post(f"{base}/mcp", rpc("tools/call", again))
    assert refused["error"]["data"]["code"] == "CONFLICT" and "done" in refused["error"]["message"]


@pytest.mark.django_db(transaction=True)
def test_an_episode_goes_on_only_in_its_own_world(served, project):
    base, token, world, srv, root = served
    other = save_world(project, parse_world({**WEATHER_WORLD, "name": "Other desk"})).world
    params = {"name": "get_weather", "arguments": {"city": "Oslo"}}
    _, _, first = post(f"{base}/mcp", rpc("tools/call", params))
    episode = first["result"]["_meta"]["agentworld/episode"]
    elsewhere = f"{root}/env/t/{token}/worlds/{other.pk}/mcp"
    _, _, refused = post(
        elsewhere, rpc("tools/call", {**params, "_meta": {"agentworld/episode": episode}})
    )
    assert refused["error"]["data"]["code"] == "NOT_FOUND"
    assert f"is not an episode of world {other.pk}" in refused["error"]["message"]
    assert Trajectory.objects.get(pk=int(episode)).step_count == 1 and len(srv.requests) == 1
