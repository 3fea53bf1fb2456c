"""The episode API under bad input and odd conditions, over HTTP and the WebSocket, under a
real uvicorn server: text that cannot be stored (unpaired surrogates, NUL, invalid UTF-8)
is a clear 4xx or an error message and nothing is written; bodies and frames over the
limit are 413 / TOO_LARGE; a rate limit is 429 with Retry-After; /health answers for the
world and token asked about; the world in the URL must be the episode's; a WebSocket
survives a long step while its client pings; no token reaches a log line."""

from __future__ import annotations

import io
import json
import logging

import pytest

from inference.worlds import parse_world
from studio.models import Step, Trajectory
from studio.services.worlds import save_world
from studio.serving.episodes import WS_MAX_WAITING
from tests.support.episode_api import WEATHER, request, served_world

SURROGATE_STEP = b'{"episode_id": "%s", "action": {"action": "cat \\udcff"}}'


def _episodes() -> int:
    return Trajectory.objects.filter(source_format="episode").count()


def _reset(url: str) -> str:
    status, body, _ = request("POST", f"{url}/reset", {"task": "Check Oslo"})
    assert status == 200, body
    return body["observation"]["episode_id"]


@pytest.mark.django_db(transaction=True)
def test_unstorable_text_over_http_is_422_and_nothing_is_written(project):
    with served_world(project) as served:
        url = served["url"]
        episode = _reset(url)
        answers = {
            "surrogate": request("POST", f"{url}/step", SURROGATE_STEP % episode.encode()),
            "nul": request(
                "POST", f"{url}/step", {"episode_id": episode, "action": {"action": "a\x00b"}}
            ),
            "not utf-8": request("POST", f"{url}/step", b'{"action": "\xff\xfe"}'),
            "not json": request("POST", f"{url}/step", b'{"action": '),
            "task surrogate": request("POST", f"{url}/reset", b'{"task": "\\ud800 go"}'),
            "array": request("POST", f"{url}/reset", b"[1, 2]"),
        }
        model_calls = len(served["srv"].requests)
    for name, (status, body, _) in answers.items():
        assert status == 422, (name, status, body)
    assert answers["surrogate"][1]["code"] == "VALIDATION_ERROR"
    assert "unpaired surrogate" in answers["surrogate"][1]["detail"]
    assert "NUL" in answers["nul"][1]["detail"]
    assert answers["not utf-8"][1]["code"] == "INVALID_JSON"
    assert "not UTF-8" in answers["not utf-8"][1]["detail"]
    assert answers["not json"][1]["code"] == "INVALID_JSON"
    assert "the body at task" in answers["task surrogate"][1]["detail"]
    assert model_calls == 0 and _episodes() == 1 and not Step.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_unstorable_text_over_the_websocket_is_an_error_message_and_the_connection_stays(
    project,
):
    from websockets.exceptions import ConnectionClosed
    from websockets.sync.client import connect

    with served_world(project) as served, connect(served["ws"]) as ws:

        def ask(frame, **kw):
            ws.send(frame, **kw)
            return json.loads(ws.recv(timeout=30))

        assert ask(json.dumps({"type": "reset", "data": {"task": "t"}}))["type"] == "observation"
        surrogate = ask('{"type": "step", "data": {"action": "\\udcff"}}')
        nul = ask(json.dumps({"type": "step", "data": {"action": "a\x00"}}))
        binary = ask(b'{"type": "step", "data": {"action": "\xff"}}')  # a binary frame
        not_json = ask("{nope")
        unknown = ask(json.dumps({"type": "jump"}))
        reset_task = ask('{"type": "reset", "data": {"task": "\\udfff"}}')
        state = ask(json.dumps({"type": "state"}))  # still open, still the first episode
        # a text frame that is not UTF-8: RFC 6455 makes the server fail the connection
        # (1007), which uvicorn does before the app sees the frame: a close with its code
        ws.send(b'{"type": "state"}\xff', text=True)
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=10)
        model_calls = len(served["srv"].requests)
    assert surrogate["type"] == "error" and surrogate["data"]["code"] == "VALIDATION_ERROR"
    assert "unpaired surrogate" in surrogate["data"]["message"]
    assert nul["data"]["code"] == "VALIDATION_ERROR" and "NUL" in nul["data"]["message"]
    assert binary["data"]["code"] == "INVALID_JSON" and "UTF-8" in binary["data"]["message"]
    assert not_json["data"]["code"] == "INVALID_JSON"
    assert unknown["data"]["code"] == "UNKNOWN_TYPE"
    assert reset_task["data"]["code"] == "VALIDATION_ERROR"
    assert state["type"] == "state" and state["data"]["step_count"] == 0
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1007
    assert model_calls == 0 and _episodes() == 1 and not Step.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_bodies_and_frames_over_the_limit_are_refused_as_too_large(project, settings):
    from websockets.sync.client import connect

    settings.STUDIO_EPISODE_MAX_BODY_KB = 1
    big = {"task": "x" * 4000}
    with served_world(project) as served:
        url = served["url"]
        sized = request("POST", f"{url}/reset", big)
        # no Content-Length: counted as it arrives
        chunked = request("POST", f"{url}/reset", iter([json.dumps(big).encode()]))
        with connect(served["ws"]) as ws:
            ws.send(json.dumps({"type": "reset", "data": big}))
            frame = json.loads(ws.recv(timeout=30))
            ws.send(json.dumps({"type": "reset", "data": {"task": "small"}}))
            after = json.loads(ws.recv(timeout=30))
    for status, body, _ in (sized, chunked):
        assert status == 413 and body["code"] == "TOO_LARGE", body
        assert "STUDIO_EPISODE_MAX_BODY_KB" in body["detail"]
    assert frame["type"] == "error" and frame["data"]["code"] == "TOO_LARGE"
    assert after["type"] == "observation"  # the connection goes on
    assert _episodes() == 1


@pytest.mark.django_db(transaction=True)
def test_a_rate_limit_is_429_with_retry_after(project, settings):
    settings.STUDIO_EPISODE_RESETS_PER_MINUTE = 2
    with served_world(project) as served:
        answers = [request("POST", f"{served['url']}/reset", {}) for _ in range(3)]
    assert [a[0] for a in answers] == [200, 200, 429]
    status, body, headers = answers[2]
    assert body["code"] == "RATE_LIMITED" and "STUDIO_EPISODE_RESETS_PER_MINUTE" in body["detail"]
    assert 1 <= int(headers["Retry-After"]) <= 60
    assert _episodes() == 2


@pytest.mark.django_db(transaction=True)
def test_health_answers_for_the_world_and_token_asked_about(project):
    other = save_world(project.other, parse_world({**WEATHER, "name": "Elsewhere"})).world
    with served_world(project) as served:
        base, token, world = served["base"], served["token"], served["world"]
        ok = request("GET", f"{base}/env/t/{token}/worlds/{world.pk}/health")
        bearer = request("GET", f"{base}/env/worlds/{world.pk}/health", token=token)
        wrong = request("GET", f"{base}/env/t/awt_wrong/worlds/{world.pk}/health")
        no_header = request("GET", f"{base}/env/worlds/{world.pk}/health")
        missing = request("GET", f"{base}/env/t/{token}/worlds/999999/health")
        elsewhere = request("GET", f"{base}/env/t/{token}/worlds/{other.pk}/health")
        live = request("GET", f"{base}/env/health")
        unknown_route = request("GET", f"{base}/env/t/{token}/worlds/{world.pk}/nope")
        wrong_method = request("GET", f"{base}/env/t/{token}/worlds/{world.pk}/reset")
    assert ok[:2] == (200, {"status": "healthy"}) and bearer[0] == 200
    assert wrong[0] == 401 and wrong[1]["code"] == "UNAUTHORIZED" and no_header[0] == 401
    assert missing[0] == 404 and missing[1]["code"] == "NOT_FOUND"
    assert "world 999999" in missing[1]["detail"]
    assert elsewhere[0] == 404  # another project's world is no world of this token's
    assert live[:2] == (200, {"status": "healthy"})  # the liveness probe, no token
    assert unknown_route[0] == 404 and unknown_route[1]["code"] == "NOT_FOUND"
    assert wrong_method[0] == 405 and wrong_method[1]["code"] == "METHOD_NOT_ALLOWED"
    assert _episodes() == 0


@pytest.mark.django_db(transaction=True)
def test_the_world_in_the_url_must_be_the_episodes(project):
    second = save_world(project, parse_world({**WEATHER, "name": "Second desk"})).world
    with served_world(project) as served:
        url = served["url"]
        episode = _reset(url)
        other_url = url.rsplit("/", 1)[0] + f"/{second.pk}"
        step = request(
            "POST", f"{other_url}/step", {"episode_id": episode, "action": {"action": "look"}}
        )
        call = request("POST", f"{other_url}/step", {"episode_id": episode, "action": {
            "type": "call_tool", "tool_name": "get_weather", "arguments": {"city": "Oslo"}}})  # fmt: skip
        state = request("GET", f"{other_url}/state?episode_id={episode}")
        own_state = request("GET", f"{url}/state?episode_id={episode}")
        model_calls = len(served["srv"].requests)
    for status, body, _ in (step, call, state):
        assert status == 404 and body["code"] == "NOT_FOUND", body
    assert own_state[0] == 200 and own_state[1]["step_count"] == 0
    assert model_calls == 0 and not Step.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_a_websocket_survives_a_long_step_while_its_client_pings(project):
    """A 3 s step, the client pinging every 0.5 s and giving up after 1 s without a pong,
    and a message sent while the step runs: the server keeps reading (pongs flow), the
    message is answered after the step, in order."""
    from websockets.sync.client import connect

    with served_world(project, delay_s=3.0) as served:
        with connect(served["ws"], ping_interval=0.5, ping_timeout=1) as ws:
            ws.send(json.dumps({"type": "reset", "data": {"task": "slow"}}))
            assert json.loads(ws.recv(timeout=30))["type"] == "observation"
            ws.send(json.dumps({"type": "step", "data": {"action": "wait"}}))
            ws.send(json.dumps({"type": "state"}))  # while the step runs
            step = json.loads(ws.recv(timeout=30))
            state = json.loads(ws.recv(timeout=30))
            # more messages behind a running step than a connection queues: the surplus is
            # refused at once, the rest answered after the step, in order
            ws.send(json.dumps({"type": "step", "data": {"action": "wait again"}}))
            for _ in range(WS_MAX_WAITING + 3):
                ws.send(json.dumps({"type": "state"}))
            answers = [json.loads(ws.recv(timeout=30)) for _ in range(WS_MAX_WAITING + 4)]
            ws.send(json.dumps({"type": "close"}))
    assert step["type"] == "observation", step
    assert step["data"]["observation"]["text"] == '{"temp_c": 9}'
    assert state["type"] == "state" and state["data"]["step_count"] == 1
    kinds = [a["type"] for a in answers]
    assert kinds == ["error"] * 3 + ["observation"] + ["state"] * WS_MAX_WAITING, kinds
    assert answers[0]["data"]["code"] == "RATE_LIMITED"
    assert answers[-1]["data"]["step_count"] == 2
    assert Step.objects.count() == 2


@pytest.mark.django_db(transaction=True)
def test_no_token_in_the_servers_log_lines(project):
    from uvicorn.logging import AccessFormatter, DefaultFormatter
    from websockets.sync.client import connect

    captured = io.StringIO()
    handler = logging.StreamHandler(captured)
    loggers = {
        "uvicorn.access": AccessFormatter('%(client_addr)s - "%(request_line)s" %(status_code)s'),
        "uvicorn.error": DefaultFormatter("%(levelprefix)s %(message)s"),
    }
    with served_world(project) as served:
        token = served["token"]
        levels = {}
        for name in loggers:
            logger = logging.getLogger(name)
            levels[name] = logger.level
            logger.setLevel(logging.INFO)
        access = logging.StreamHandler(captured)
        access.setFormatter(loggers["uvicorn.access"])
        handler.setFormatter(loggers["uvicorn.error"])
        logging.getLogger("uvicorn.access").addHandler(access)
        logging.getLogger("uvicorn.error").addHandler(handler)
        try:
            request("GET", f"{served['url']}/health")
            request("GET", f"{served['url']}/metadata?x={token}")
            request("POST", f"{served['url']}/reset", b"{bad")
            with connect(served["ws"]) as ws:
                ws.send(json.dumps({"type": "state"}))
                ws.recv(timeout=30)
        finally:
            logging.getLogger("uvicorn.access").removeHandler(access)
            logging.getLogger("uvicorn.error").removeHandler(handler)
            for name, level in levels.items():
                logging.getLogger(name).setLevel(level)
    text = captured.getvalue()
    assert "/env/t/***/worlds/" in text and "/health" in text and "WebSocket" in text
    assert token not in text and token[4:] not in text


def test_the_redaction_filter_rewrites_message_arguments_and_tracebacks():
    from studio.serving.log_redaction import RedactTokens

    try:
        raise ValueError("bad token awt_secret123 at /mcp/t/awt_secret123/worlds/2/")
    except ValueError:
        import sys

        exc_info = sys.exc_info()
    record = logging.LogRecord(
        "uvicorn.access", logging.INFO, __file__, 1, '%s - "%s %s"',
        ("1.2.3.4", "GET", "/env/t/awt_secret123/worlds/2/ws?x=1"), exc_info,
    )  # fmt: skip
    assert RedactTokens().filter(record) is True
    line = logging.Formatter().format(record)
    assert "secret123" not in line
    assert "/env/t/***/worlds/2/ws?x=1" in line and "/mcp/t/***/worlds/2/" in line
