"""Steps of episodes whose world model is served (OpenAI-compatible), answered in the web
process itself (`studio.serving.direct`): under a real uvicorn, against the fake model server
(a real HTTP server), with no worker running and no job row made. The step's record and
labels, its seed, a model server that is down, two steps racing for one index, the submit
action, a rewarded task to its end, a revoked token, the project's limit of steps waiting."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest

from inference.prompts import build_messages
from inference.rubrics import step_seed
from inference.types import Turn
from inference.worlds import compose, parse_world
from studio.models import ApiToken, SimulationJob, Step, Trajectory
from studio.services.endpoints import EndpointData, make_default, save_endpoint
from studio.services.tokens import create_token, revoke
from studio.services.worlds import save_world
from tests.support.asgi import asgi_server
from tests.support.fake_openai import fake_openai_server
from tests.support.worker import wait_for

SHELL = {
    "name": "Tiny shell",
    "domain": "terminal",
    "description": "A container with one file.",
    "initial_state": "cwd=/srv",
    "files": {"/srv/notes.txt": "remember the milk"},
}

SHOP = {
    "name": "Shop desk",
    "domain": "terminal",
    "description": "A shop's order system.",
    "state_keys": [{"name": "refunded", "description": "true once order 1042 is refunded"}],
    "tasks": [{"id": "refund", "instruction": "Refund order 1042", "expected": "refunded",
               "success_criteria": "Order 1042 shows refunded."}],
    "rubric": {
        "step": [{"name": "mentions-order", "kind": "contains", "target": "observation",
                  "pattern": "1042"}],
        "episode": [{"name": "refunded", "kind": "state", "key": "refunded", "equals": True}],
    },
    "termination": {
        "terminal": [{"name": "done", "kind": "state", "key": "refunded", "equals": True}],
        "submit": {"prefix": "FINAL ANSWER:"},
    },
}  # fmt: skip


def http(method: str, url: str, body: dict | None = None) -> tuple[int, dict, dict]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read()), dict(response.headers)
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read()), dict(exc.headers)


def _model(project, base_url: str) -> None:
    endpoint = save_endpoint(
        project,
        EndpointData(name="served", role="world", kind="openai", base_url=base_url, model="m",
                     max_tokens=64),
    ).endpoint  # fmt: skip
    make_default(endpoint)


def _seeded(request: dict, index: int) -> str:
    """An answer that depends only on the request's seed and last message (as a model that
    is deterministic for a seed)."""
    last = request["messages"][-1]["content"].rsplit("\n", 1)[-1]
    return f"<think>t</think><predicted_observation>{last} -> {request.get('seed')}</predicted_observation>"


@pytest.fixture
def shell(project):
    world = save_world(project, parse_world(SHELL)).world
    _, token = create_token(project, "agent")
    return world, token


def _url(base: str, token: str, world) -> str:
    return f"{base}/env/t/{token}/worlds/{world.pk}"


def _step(url: str, episode, action) -> tuple[int, dict, dict]:
    return http("POST", f"{url}/step", {"episode_id": episode, "action": action})


@pytest.mark.django_db(transaction=True)
def test_a_served_step_is_answered_in_the_web_process_and_recorded(project, shell):
    world, token = shell
    with fake_openai_server(_seeded) as srv, asgi_server() as base:
        _model(project, srv.base_url)
        url = _url(base, token, world)
        status, reset, _ = http("POST", f"{url}/reset", {"task": "Read the notes.", "seed": 42,
                                                         "max_steps": 2})  # fmt: skip
        assert status == 200, reset
        episode = reset["observation"]["episode_id"]
        status, first, _ = _step(url, episode, {"action": "cat /srv/notes.txt"})
        assert status == 200, first
        status, second, _ = _step(url, episode, {"action": "ls\r\n"})
        assert status == 200, second
        status, after, _ = _step(url, episode, {"action": "pwd"})
    assert first["done"] is False and first["observation"]["step"] == 1
    assert first["observation"]["text"] == f"cat /srv/notes.txt -> {step_seed(42, 0)}"
    assert first["observation"]["parse_status"] == "well_formed"
    assert first["observation"]["metadata"]["seed"] == step_seed(42, 0)
    assert second["done"] is True and second["observation"]["step"] == 2  # max_steps
    assert second["observation"]["metadata"]["end_cause"] == "max_steps"
    assert status == 409 and after["code"] == "CONFLICT"
    # the runner's messages: the world's composed prompt, the history's turn pairs, the turn
    spec = world.latest.spec()
    system = compose(spec).system_prompt
    assert srv.requests[0]["messages"] == build_messages(
        system, [], Turn(action="cat /srv/notes.txt"), "Read the notes."
    )
    done = Turn(action="cat /srv/notes.txt", observation=first["observation"]["text"])
    assert srv.requests[1]["messages"] == build_messages(
        system, [done], Turn(action="ls"), "Read the notes."
    )
    assert [r["seed"] for r in srv.requests] == [step_seed(42, 0), step_seed(42, 1)]
    assert srv.requests[0]["model"] == "m" and srv.requests[0]["max_tokens"] == 64
    assert "stream" not in srv.requests[0]
    trajectory = Trajectory.objects.get(pk=int(episode))
    assert trajectory.step_count == 2
    assert trajectory.metadata["episode"]["status"] == "done"
    assert trajectory.metadata["episode"]["end"]["cause"] == "max_steps"
    steps = list(Step.objects.filter(branch__trajectory=trajectory).order_by("index"))
    assert [s.action for s in steps] == ["cat /srv/notes.txt", "ls"]
    step = steps[0]
    # the labels the job path writes: an outside agent's action, the model's observation
    assert (step.provenance, step.observation_source) == ("agent", "simulated")
    assert step.provenance_label == "agent-proposed action, simulated observation"
    assert step.thinking == "t" and step.raw_output.startswith("<think>t</think>")
    assert step.meta["seed"] == step_seed(42, 0) and step.meta["backend"] == "openai"
    assert step.meta["model"] == "m" and step.meta["endpoint"] == "served"
    assert step.meta["world"] == {"id": world.pk, "name": "Tiny shell", "version": 1}
    assert step.timings["tokens_in"] > 0 and step.timings["duration_s"] >= 0
    assert not SimulationJob.objects.exists()  # no job row, no worker


@pytest.mark.django_db(transaction=True)
def test_the_same_seed_and_actions_send_the_same_seeds_and_get_the_same_observations(
    project, shell
):
    world, token = shell
    with fake_openai_server(_seeded) as srv, asgi_server() as base:
        _model(project, srv.base_url)
        url = _url(base, token, world)
        played = []
        for seed in (7, 7, 8):
            _, reset, _ = http("POST", f"{url}/reset", {"task": "t", "seed": seed})
            episode = reset["observation"]["episode_id"]
            played.append([_step(url, episode, {"action": a})[1]["observation"]["text"]
                           for a in ("ls", "pwd")])  # fmt: skip
    seeds = [r["seed"] for r in srv.requests]
    assert seeds[:2] == seeds[2:4] == [step_seed(7, 0), step_seed(7, 1)]
    assert seeds[4:] == [step_seed(8, 0), step_seed(8, 1)] and seeds[4:] != seeds[:2]
    assert played[0] == played[1] != played[2]


@pytest.mark.django_db(transaction=True)
def test_a_model_server_that_is_down_is_a_retryable_503_and_nothing_is_written(project, shell):
    world, token = shell
    with fake_openai_server() as srv:
        gone = srv.base_url  # a port nothing listens on once the server stops
    with asgi_server() as base:
        _model(project, gone)
        url = _url(base, token, world)
        _, reset, _ = http("POST", f"{url}/reset", {"task": "t"})
        episode = reset["observation"]["episode_id"]
        status, body, headers = _step(url, episode, {"action": "ls"})
    assert status == 503 and body["code"] == "UNAVAILABLE", body
    assert gone in body["detail"] and "nothing of the step was recorded" in body["detail"]
    assert headers.get("retry-after") or headers.get("Retry-After")
    assert Trajectory.objects.get(pk=int(episode)).step_count == 0
    assert not Step.objects.exists() and not SimulationJob.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_two_steps_of_one_episode_at_once_one_wins_and_one_is_refused(project, shell):
    world, token = shell
    gate, arrived = threading.Event(), threading.Event()

    def held(request, index):
        arrived.set()
        gate.wait(30)
        return _seeded(request, index)

    with fake_openai_server(held) as srv, asgi_server() as base:
        _model(project, srv.base_url)
        url = _url(base, token, world)
        _, reset, _ = http("POST", f"{url}/reset", {"task": "t"})
        episode = reset["observation"]["episode_id"]
        with ThreadPoolExecutor(1) as pool:
            first = pool.submit(_step, url, episode, {"action": "ls"})
            assert arrived.wait(30)
            second = _step(url, episode, {"action": "pwd"})  # while the first one waits
            gate.set()
            first = first.result(timeout=60)
    assert first[0] == 200, first
    assert second[0] == 409 and "still being answered" in second[1]["detail"]
    assert len(srv.requests) == 1  # the refused one asked no model
    assert list(Step.objects.values_list("action", flat=True)) == ["ls"]


@pytest.mark.django_db(transaction=True)
def test_a_step_another_process_took_meanwhile_is_not_kept(project, shell):
    """Two web processes: the other one's step lands while this one's model answers; the
    write of this one finds the index taken (the step count moved) and keeps nothing."""
    world, token = shell

    def other_process_steps(request, index):
        from django.db import connection

        try:
            trajectory = Trajectory.objects.get(source_format="episode")
            Step.objects.create(branch=trajectory.root_branch, index=0, action="theirs",
                                observation="x", provenance="agent",
                                observation_source="simulated")  # fmt: skip
            Trajectory.objects.filter(pk=trajectory.pk).update(step_count=1)
        finally:
            connection.close()
        return _seeded(request, index)

    with fake_openai_server(other_process_steps) as srv, asgi_server() as base:
        _model(project, srv.base_url)
        url = _url(base, token, world)
        _, reset, _ = http("POST", f"{url}/reset", {"task": "t"})
        status, body, _ = _step(url, reset["observation"]["episode_id"], {"action": "mine"})
    assert status == 409 and body["code"] == "CONFLICT"
    assert "another step of this episode was taken" in body["detail"]
    assert list(Step.objects.values_list("action", flat=True)) == ["theirs"]  # no duplicate


@pytest.mark.django_db(transaction=True)
def test_steps_another_process_took_in_between_are_in_the_next_prompt(project, shell):
    """An agent whose steps go to several web processes: after another process wrote a step
    (and noted the episode's count, as every writer does), this one's next step reads where
    the episode stands and sends the whole history."""
    from studio.serving import episode_rows

    world, token = shell
    with fake_openai_server(_seeded) as srv, asgi_server() as base:
        _model(project, srv.base_url)
        url = _url(base, token, world)
        _, reset, _ = http("POST", f"{url}/reset", {"task": "t", "seed": 1})
        episode = reset["observation"]["episode_id"]
        assert _step(url, episode, {"action": "ls"})[0] == 200
        trajectory = Trajectory.objects.get(pk=int(episode))
        Step.objects.create(branch=trajectory.root_branch, index=1, action="elsewhere",
                            observation="seen there", provenance="agent",
                            observation_source="simulated")  # fmt: skip
        Trajectory.objects.filter(pk=trajectory.pk).update(step_count=2)
        episode_rows.note_written_sync(trajectory.pk, 2)
        status, third, _ = _step(url, episode, {"action": "pwd"})
    assert status == 200, third
    assert third["observation"]["step"] == 3
    assert "seen there" in srv.requests[-1]["messages"][-2]["content"]
    assert srv.requests[-1]["seed"] == step_seed(1, 2)
    assert list(Step.objects.order_by("index").values_list("action", flat=True)) == [
        "ls", "elsewhere", "pwd",
    ]  # fmt: skip


@pytest.mark.django_db(transaction=True)
def test_a_step_notes_the_episodes_count_before_its_answer_goes_out(project, shell):
    """The count is in Redis when the step returns, not on its way in the background: once the
    agent holds the answer, another process that took an earlier step of the episode must not
    take the next one from its own, older count (CI saw a 409 from that under load)."""
    import asyncio

    import redis

    from studio.serving import direct, episode_rows

    world, raw = shell
    token = ApiToken.objects.get(project=project)
    url_of_redis = episode_rows.redis_ready()
    if url_of_redis is None:
        pytest.skip("the episode counts live in Redis only when it is the broker")
    noted = redis.Redis.from_url(url_of_redis)
    with fake_openai_server(_seeded) as srv, asgi_server() as base:
        _model(project, srv.base_url)
        _, reset, _ = http("POST", f"{_url(base, raw, world)}/reset", {"task": "t"})
        pk = int(reset["observation"]["episode_id"])

        async def step_then_read() -> bytes | None:
            served = await direct.served_of(token, pk, world.pk)
            await direct.take_step(token, served, {"action": "ls"}, "ls", check_token=True)
            # read without yielding to the loop: a note left to a background task is not
            # there yet
            return noted.get(episode_rows._count_key(pk))

        # a loop of its own in a thread of its own (a browser test's Playwright may have left
        # one running in this thread)
        with ThreadPoolExecutor(1) as pool:
            assert pool.submit(asyncio.run, step_then_read()).result() == b"1"
    noted.close()
    assert Trajectory.objects.get(pk=pk).step_count == 1


@pytest.fixture
def shop(project):
    world = save_world(project, parse_world(SHOP)).world
    _, token = create_token(project, "agent")
    return world, token


@pytest.mark.django_db(transaction=True)
def test_the_submit_action_ends_the_episode_without_a_model_call(project, shop):
    world, token = shop
    with fake_openai_server() as srv, asgi_server() as base:
        _model(project, srv.base_url)
        url = _url(base, token, world)
        _, reset, _ = http("POST", f"{url}/reset", {"task_id": "refund", "seed": 3})
        episode = reset["observation"]["episode_id"]
        status, body, _ = _step(url, episode, {"action": "FINAL ANSWER: refunded"})
        status_after, after, _ = _step(url, episode, {"action": "ls"})
    assert status == 200, body
    assert body["done"] is True and body["observation"]["metadata"]["end_cause"] == "submit"
    assert srv.requests == []  # no model asked
    assert status_after == 409
    (step,) = Step.objects.all()
    assert step.observation_source == "none" and step.observation == ""
    assert step.meta["submit"] is True and step.meta["final_answer"] == "refunded"
    assert step.meta["model_call"] is False and step.meta["seed"] == step_seed(3, 0)
    end = Trajectory.objects.get(pk=int(episode)).metadata["episode"]["end"]
    assert end["cause"] == "submit" and end["step"] == 0
    # nothing reported the state "refunded": the episode rubric's one check scores 0
    assert end["breakdown"] == {"refunded": 0.0} and body["reward"] == 0.0


def _shop_model(request: dict, index: int) -> str:
    action = request["messages"][-1]["content"].rsplit("\n", 1)[-1]
    refunded = action.startswith("refund")
    return (
        f"<predicted_observation>order 1042: {'refunded' if refunded else 'paid'}"
        f"</predicted_observation><state>{json.dumps({'refunded': refunded})}</state>"
    )


@pytest.mark.django_db(transaction=True)
def test_a_rewarded_task_gets_its_rewards_and_its_end_is_recorded(project, shop):
    world, token = shop
    with fake_openai_server(_shop_model) as srv, asgi_server() as base:
        _model(project, srv.base_url)
        url = _url(base, token, world)
        _, reset, _ = http("POST", f"{url}/reset", {"task_id": "refund", "seed": 5})
        episode = reset["observation"]["episode_id"]
        _, look, _ = _step(url, episode, {"action": "show 1042"})
        trajectory = Trajectory.objects.get(pk=int(episode))
        assert trajectory.metadata["episode"]["return"] == 1.0  # kept current at every step
        _, refund, _ = _step(url, episode, {"action": "refund 1042"})
    assert look["reward"] == 1.0 and look["done"] is False
    assert look["observation"]["metadata"]["rubric"] == {"mentions-order": 1.0}
    assert "state" not in look["observation"]["metadata"]  # the grader's, never the agent's
    assert Step.objects.get(branch__trajectory_id=int(episode), index=0).meta["state"] == {
        "refunded": False
    }
    assert look["observation"]["text"] == "order 1042: paid"  # the state report is not shown
    # the terminal check ends it; the reward is the step's plus the episode rubric's
    assert refund["done"] is True and refund["reward"] == 2.0
    assert refund["observation"]["metadata"]["end_cause"] == "terminal"
    assert refund["observation"]["metadata"]["reward_parts"] == {"step": 1.0, "episode": 1.0}
    episode_meta = Trajectory.objects.get(pk=int(episode)).metadata["episode"]
    assert episode_meta["status"] == "done" and episode_meta["return"] == 3.0
    assert episode_meta["end"]["cause"] == "terminal" and episode_meta["end"]["reward"] == 2.0
    last = Step.objects.get(index=1)
    assert last.meta["reward"] == 2.0 and last.meta["end_cause"] == "terminal"
    assert last.meta["rubric"] == {"mentions-order": 1.0, "refunded": 1.0}
    assert last.meta["state"] == {"refunded": True}
    assert "<state>" in srv.requests[0]["messages"][0]["content"]  # the world asks for it


@pytest.mark.django_db(transaction=True)
def test_a_token_revoked_mid_connection_stops_the_next_step(project, shell):
    from websockets.exceptions import ConnectionClosed
    from websockets.sync.client import connect

    world, token = shell
    with fake_openai_server() as srv, asgi_server() as base:
        _model(project, srv.base_url)
        ws_url = base.replace("http://", "ws://") + f"/env/t/{token}/worlds/{world.pk}/ws"
        with connect(ws_url) as ws:
            ws.send(json.dumps({"type": "reset", "data": {"task": "t"}}))
            reset = json.loads(ws.recv())
            ws.send(json.dumps({"type": "step", "data": {"action": "ls"}}))
            assert json.loads(ws.recv())["type"] == "observation"
            revoke(ApiToken.objects.get())
            ws.send(json.dumps({"type": "step", "data": {"action": "pwd"}}))
            with pytest.raises(ConnectionClosed) as closed:
                ws.recv()
            assert closed.value.rcvd.code == 4401
    episode = int(reset["data"]["observation"]["episode_id"])
    assert list(
        Step.objects.filter(branch__trajectory_id=episode).values_list("action", flat=True)
    ) == ["ls"]
    # its write refused it: nothing recorded (within TOKEN_TTL_S of the last read that saw
    # the token, the model may have been asked; after it, not even that)
    assert len(srv.requests) <= 2


@pytest.mark.django_db(transaction=True)
def test_the_projects_steps_waiting_on_models_have_a_limit(project, shell, settings):
    """STUDIO_MAX_ACTIVE_EPISODE_STEPS: steps of the project's episodes waiting for the world
    model at once, in this web process; one more is a 429 with Retry-After."""
    settings.STUDIO_MAX_ACTIVE_EPISODE_STEPS = 1
    world, token = shell
    gate, arrived = threading.Event(), threading.Event()

    def held(request, index):
        arrived.set()
        gate.wait(30)
        return _seeded(request, index)

    with fake_openai_server(held) as srv, asgi_server() as base:
        _model(project, srv.base_url)
        url = _url(base, token, world)
        episodes_ = [http("POST", f"{url}/reset", {"task": "t"})[1]["observation"]["episode_id"]
                     for _ in range(2)]  # fmt: skip
        with ThreadPoolExecutor(1) as pool:
            first = pool.submit(_step, url, episodes_[0], {"action": "ls"})
            assert arrived.wait(30)
            status, body, headers = _step(url, episodes_[1], {"action": "ls"})
            gate.set()
            assert first.result(timeout=60)[0] == 200
        wait_for(lambda: Step.objects.count() == 1)
        status_later = _step(url, episodes_[1], {"action": "ls"})[0]  # its place is free again
    assert status == 429 and "STUDIO_MAX_ACTIVE_EPISODE_STEPS" in body["detail"]
    assert headers.get("retry-after") or headers.get("Retry-After")
    assert status_later == 200


@pytest.mark.django_db(transaction=True)
def test_a_token_is_trusted_for_a_second_and_its_revocation_then_takes_effect(project, monkeypatch):
    import asyncio
    from concurrent.futures import ThreadPoolExecutor

    from studio.serving import token_cache

    def run(coroutine):
        # a loop of its own, in a thread: a session's browser tests keep one running here
        with ThreadPoolExecutor(1) as pool:
            return pool.submit(asyncio.run, coroutine).result()

    token_cache.forget()
    row, text = create_token(project, "agent")

    async def check():
        return await token_cache.authenticate(text, touch=False)

    assert run(check()).pk == row.pk
    revoke(row)
    assert run(check()).pk == row.pk  # within TTL_S: this process still trusts it
    monkeypatch.setattr(token_cache, "TTL_S", 0.0)
    assert run(check()) is None  # past it: read again, and refused
    assert run(token_cache.authenticate("awt_not-a-token")) is None


@pytest.mark.django_db(transaction=True)
def test_a_model_that_refuses_is_a_502_and_an_episode_of_another_world_a_404(project, shell):
    world, token = shell
    other = save_world(project, parse_world({**SHELL, "name": "Other shell"})).world
    with fake_openai_server(lambda request, index: (400, "no such model: m")) as srv:
        with asgi_server() as base:
            _model(project, srv.base_url)
            _, reset, _ = http("POST", f"{_url(base, token, world)}/reset", {"task": "t"})
            episode = reset["observation"]["episode_id"]
            refused = _step(_url(base, token, world), episode, {"action": "ls"})
            elsewhere = _step(_url(base, token, other), episode, {"action": "ls"})
    assert refused[0] == 502 and refused[1]["code"] == "MODEL_ERROR"
    assert "HTTP 400" in refused[1]["detail"] and "no such model: m" in refused[1]["detail"]
    assert len(srv.requests) == 1  # a refusal is not asked again
    assert elsewhere[0] == 404 and f"not an episode of world {other.pk}" in elsewhere[1]["detail"]
    assert not Step.objects.exists()
    assert Trajectory.objects.get(pk=int(episode)).step_count == 0
