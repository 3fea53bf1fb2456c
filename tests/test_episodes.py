"""Worlds served to outside agents: API tokens (UI and shell), the episode API over plain HTTP
and WebSocket under a real uvicorn server, steps run by a real worker and recorded live as
a trajectory, and a wrong token refused with nothing recorded."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from io import StringIO

import pytest
from django.core.management import call_command
from django.urls import reverse

from inference.worlds import parse_world
from studio.models import ApiToken, SimulationJob, Trajectory
from studio.services.tokens import authenticate, create_token
from studio.services.worlds import save_world
from tests.support.asgi import asgi_server
from tests.support.fake_openai import fake_openai_server
from tests.support.jobs import make_trajectory

WORLD = {
    "name": "Tiny shell",
    "domain": "terminal",
    "description": "A container with one file.",
    "initial_state": "cwd=/srv",
    "files": {"/srv/notes.txt": "remember the milk"},
}


def http(method: str, url: str, body: dict | None = None, token: str = "") -> tuple[int, dict]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("Content-Type", "application/json")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


# ---- tokens ---------------------------------------------------------------------------------


@pytest.mark.django_db
def test_tokens_are_shown_once_stored_hashed_and_revocable(client, project):
    tokens_url = reverse("token_list", args=[project.pk])
    client.force_login(project.users["researcher"])
    assert tokens_url not in client.get(reverse("library", args=[project.pk])).content.decode()
    client.force_login(project.users["admin"])
    assert tokens_url in client.get(reverse("library", args=[project.pk])).content.decode()
    page = client.post(reverse("token_create", args=[project.pk]), {"name": "trainer"})
    assert page.status_code == 201
    row = ApiToken.objects.get()
    text = page.content.decode()
    token = text.split('id="new-token-value">')[1].split("<")[0]
    assert token.startswith("awt_") and row.token_hash not in text and token not in row.token_hash
    listing = client.get(reverse("token_list", args=[project.pk])).content.decode()
    assert token not in listing and row.prefix in listing  # never shown again
    assert authenticate(token) == row
    client.post(reverse("token_revoke", args=[row.pk]))
    assert authenticate(token) is None
    client.force_login(project.users["researcher"])
    assert client.get(reverse("token_list", args=[project.pk])).status_code == 403


@pytest.mark.django_db
def test_api_token_command_creates_lists_and_revokes(project):
    out = StringIO()
    call_command("api_token", "create", "--project", project.name, "--name", "ci", stdout=out)
    token = out.getvalue().strip()
    assert authenticate(token).name == "ci"
    listing = StringIO()
    call_command("api_token", "list", "--project", project.name, stdout=listing)
    assert "\tci\t" in listing.getvalue() and "active" in listing.getvalue()
    call_command("api_token", "revoke", "--project", project.name, "--name", "ci", stdout=out)
    assert authenticate(token) is None


# ---- the episode API --------------------------------------------------------------------------


def _world_model(project, srv) -> None:
    """The project's default world model: an episode plays in its world, never on the
    retrieval baseline (which reads no world's prompt)."""
    from studio.services.endpoints import EndpointData, make_default, save_endpoint

    endpoint = save_endpoint(
        project,
        EndpointData(name="fake", role="world", kind="openai", base_url=srv.base_url, model="m"),
    ).endpoint
    make_default(endpoint)


@pytest.fixture
def served(project):
    make_trajectory(project)  # recorded terminal steps (which an episode never answers from)
    saved = save_world(project, parse_world(WORLD))
    _, token = create_token(project, "agent")
    with fake_openai_server() as srv, asgi_server() as base:
        _world_model(project, srv)
        yield base, token, saved.world


@pytest.mark.django_db(transaction=True)
@pytest.mark.worker
def test_plain_http_episode_is_recorded_live(served, episode_worker, client, project):
    base, token, world = served
    url = f"{base}/env/t/{token}/worlds/{world.pk}"
    assert http("GET", f"{url}/health") == (200, {"status": "healthy"})
    status, reset = http("POST", f"{url}/reset", {"task": "Read the notes.", "max_steps": 2})
    assert status == 200 and reset["done"] is False
    episode = reset["observation"]["episode_id"]
    assert reset["observation"]["text"] == "cwd=/srv"
    trajectory = Trajectory.objects.get(pk=int(episode))
    assert trajectory.source_format == "episode" and trajectory.step_count == 0
    assert trajectory.metadata["world"]["name"] == "Tiny shell"
    status, first = http("POST", f"{url}/step", {"episode_id": episode,
                                                 "action": {"action": "cat /srv/notes.txt"}})  # fmt: skip
    assert status == 200, first
    assert first["observation"]["step"] == 1 and first["done"] is False  # steps taken
    # the world model read the world (the baseline, which does not, never answers here)
    assert "baseline" not in first["observation"]
    assert first["observation"]["text"].startswith("ok ")
    trajectory.refresh_from_db()
    assert trajectory.step_count == 1  # recorded as it happened
    (step,) = trajectory.root_branch.steps.all()
    assert (step.action, step.observation) == ("cat /srv/notes.txt", first["observation"]["text"])
    # the outside agent's action, the world model's observation
    assert step.provenance == "agent" and step.observation_source == "simulated"
    client.force_login(project.users["annotator"])
    page = client.get(reverse("trajectory", args=[trajectory.pk])).content.decode()
    assert "started" in page and "imported" not in page  # played, not imported
    assert 'origin-simulated">Simulated' in page  # its observations were never recorded
    # a served world model answers in the web process: no job row (studio.serving.direct)
    assert not SimulationJob.objects.filter(trajectory=trajectory).exists()
    # the bearer header works as well as the token in the path
    status, second = http("POST", f"{base}/env/worlds/{world.pk}/step",
                          {"episode_id": episode, "action": {"action": "ls"}}, token=token)  # fmt: skip
    assert status == 200 and second["done"] is True  # max_steps reached
    status, after = http("POST", f"{url}/step", {"episode_id": episode, "action": {"action": "x"}})
    assert status == 409 and "the episode is done" in after["detail"]
    status, state = http("GET", f"{url}/state?episode_id={episode}")
    assert state["step_count"] == 2 and state["world"]["version"] == 1
    status, missing = http("POST", f"{url}/step", {"action": {"action": "ls"}})
    assert status == 422 and "episode_id is required" in missing["detail"]


@pytest.mark.django_db(transaction=True)
@pytest.mark.worker
def test_websocket_episode_in_openenvs_message_protocol(served, episode_worker):
    from websockets.sync.client import connect

    base, token, world = served
    ws_url = base.replace("http://", "ws://") + f"/env/t/{token}/worlds/{world.pk}/ws"
    with connect(ws_url) as ws:
        ws.send(json.dumps({"type": "step", "data": {"action": "ls"}}))
        early = json.loads(ws.recv())
        assert early["type"] == "error" and "reset first" in early["data"]["message"]
        ws.send(json.dumps({"type": "reset", "data": {"task": "Look around."}}))
        reset = json.loads(ws.recv())
        assert reset["type"] == "observation" and reset["data"]["done"] is False
        for command in ("pwd", "ls /srv"):
            ws.send(json.dumps({"type": "step", "data": {"action": command}}))
            answer = json.loads(ws.recv())
            assert answer["type"] == "observation", answer
        ws.send(json.dumps({"type": "state"}))
        state = json.loads(ws.recv())
        assert state["type"] == "state" and state["data"]["step_count"] == 2
        ws.send(json.dumps({"type": "close"}))
    trajectory = Trajectory.objects.get(pk=int(reset["data"]["observation"]["episode_id"]))
    assert [s.action for s in trajectory.root_branch.steps.order_by("index")] == ["pwd", "ls /srv"]
    assert ApiToken.objects.get().last_used_at is not None  # its use over the WebSocket shows
    assert trajectory.metadata["episode"]["client"] == "websocket"


@pytest.mark.django_db(transaction=True)
def test_a_wrong_token_is_refused_and_nothing_is_recorded(served, project):
    base, token, world = served
    from websockets.exceptions import InvalidStatus, WebSocketException
    from websockets.sync.client import connect

    for bad in ("awt_not-a-token", token[:-2] + "xx"):
        status, body = http("POST", f"{base}/env/t/{bad}/worlds/{world.pk}/reset", {})
        assert status == 401 and "valid API token" in body["detail"]
    assert http("POST", f"{base}/env/worlds/{world.pk}/reset", {})[0] == 401  # no header
    other = save_world(project.other, parse_world({**WORLD, "name": "Elsewhere"}))
    # a world of another project is not one this token can see: as if it did not exist
    assert http("POST", f"{base}/env/t/{token}/worlds/{other.world.pk}/reset", {})[0] == 404
    with pytest.raises((InvalidStatus, WebSocketException, ConnectionError)):
        with connect(base.replace("http://", "ws://") + f"/env/t/awt_x/worlds/{world.pk}/ws") as ws:
            ws.send(json.dumps({"type": "reset", "data": {}}))
            ws.recv()
    assert not Trajectory.objects.filter(source_format="episode").exists()
    assert not SimulationJob.objects.exists()


@pytest.mark.django_db(transaction=True)
@pytest.mark.worker
def test_openenvs_generic_client_drives_a_world_unchanged(served, episode_worker):
    """OpenEnv's own client (`openenv-core`, what RL trainers such as TRL use), pointed at a
    world's base URL, plays an episode; it is recorded in the project as it goes."""
    from openenv.core.generic_client import GenericEnvClient

    base, token, world = served
    with GenericEnvClient(base_url=f"{base}/env/t/{token}/worlds/{world.pk}").sync() as env:
        first = env.reset(task="Read the notes.")
        assert first.done is False and first.observation["text"] == "cwd=/srv"
        result = env.step({"action": "cat /srv/notes.txt"})
        assert result.done is False and result.observation["step"] == 1
        assert isinstance(result.observation["text"], str) and result.reward is None
        state = env.state()
        assert state["step_count"] == 1
    trajectory = Trajectory.objects.get(pk=int(first.observation["episode_id"]))
    assert trajectory.root_branch.steps.get().action == "cat /srv/notes.txt"


@pytest.mark.django_db(transaction=True)
@pytest.mark.worker
def test_a_token_revoked_mid_connection_stops_the_episode(served, episode_worker):
    from websockets.exceptions import ConnectionClosed
    from websockets.sync.client import connect

    from studio.services.tokens import revoke

    base, token, world = served
    with connect(base.replace("http://", "ws://") + f"/env/t/{token}/worlds/{world.pk}/ws") as ws:
        ws.send(json.dumps({"type": "reset", "data": {"task": "t"}}))
        reset = json.loads(ws.recv())
        revoke(ApiToken.objects.get())
        ws.send(json.dumps({"type": "step", "data": {"action": "ls"}}))
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv()
        assert closed.value.rcvd.code == 4401
    trajectory = Trajectory.objects.get(pk=int(reset["data"]["observation"]["episode_id"]))
    assert trajectory.root_branch.steps.count() == 0  # nothing after the revocation


WEATHER_WORLD = {
    "name": "Weather desk",
    "domain": "mcp",
    "description": "A weather service.",
    "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather",
               "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                              "required": ["city"]}}}],
}  # fmt: skip


@pytest.mark.django_db(transaction=True)
@pytest.mark.worker
def test_the_mcp_client_sdk_lists_and_calls_a_worlds_tools(project, episode_worker):
    """The official MCP client over streamable HTTP: the world's tools are listed, a call is
    answered by the world model in a worker, and the session is an episode recorded live."""
    import asyncio
    from concurrent.futures import ThreadPoolExecutor

    from mcp import Client

    from tests.support.branching import make_trajectory as make_mcp

    make_mcp(project, domain="mcp", steps=[('{"name": "get_weather"}', '{"temp_c": 9}')] * 2)
    world = save_world(project, parse_world(WEATHER_WORLD)).world
    _, token = create_token(project, "mcp-agent")
    answer = "<predicted_observation>" + '{"temp_c": 9}' + "</predicted_observation>"
    with fake_openai_server(lambda request, index: answer) as srv, asgi_server() as base:
        _world_model(project, srv)
        url = f"{base}/mcp/t/{token}/worlds/{world.pk}/"

        async def play():
            async with Client(url) as client:
                tools = await client.list_tools()
                result = await client.call_tool("get_weather", {"city": "Oslo"})
                episode = result.meta["agentworld/episode"]  # the next call goes on with it
                await client.call_tool("get_weather", {"city": "Bergen"},
                                       meta={"agentworld/episode": episode})  # fmt: skip
                return tools, result

        # in a thread of its own: a browser test's event loop may still run in this one
        with ThreadPoolExecutor(1) as pool:
            tools, result = pool.submit(asyncio.run, play()).result(timeout=120)
        status, body = http("POST", f"{base}/mcp/t/awt_wrong/worlds/{world.pk}/", {})
    assert [t.name for t in tools.tools] == ["get_weather"]
    assert tools.tools[0].input_schema["required"] == ["city"]
    assert result.is_error is False and result.content[0].text == '{"temp_c": 9}'
    episode = Trajectory.objects.get(source_format="episode")
    assert episode.metadata["episode"]["client"] == "mcp"
    steps = list(episode.root_branch.steps.order_by("index"))  # one episode per session
    assert [json.loads(s.action)["arguments"]["city"] for s in steps] == ["Oslo", "Bergen"]
    assert status == 401 and "valid API token" in body["detail"]
