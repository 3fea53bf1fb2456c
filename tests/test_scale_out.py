"""Several web processes serve the same episodes: two uvicorn processes of their own (no
state shared in memory), one episode whose requests alternate between them, each step
recorded once at its index; and, where nginx is installed, the same through the balancer
of docker-compose.yml (deploy/nginx.conf), which spreads the requests over both and logs no
token."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest

from inference.worlds import parse_world
from studio.models import Step, Trajectory
from studio.services.endpoints import EndpointData, make_default, save_endpoint
from studio.services.tokens import create_token
from studio.services.worlds import save_world
from tests.support.fake_openai import fake_openai_server
from tests.support.worker import ROOT, wait_for, worker_env

pytestmark = pytest.mark.django_db(transaction=True)

WORLD = {"name": "Shell", "domain": "terminal", "description": "A box.", "files": {"/a": "1"}}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2):
            return True
    except urllib.error.HTTPError:
        return True  # up: it answered something
    except OSError:
        return False


@contextmanager
def web_process(log: Path) -> Iterator[str]:
    """`uvicorn studio.asgi:application` in a process of its own, on the test database."""
    port = _free_port()
    out = open(log, "ab")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "studio.asgi:application", "--host", "127.0.0.1",
         "--port", str(port), "--log-level", "warning"],
        cwd=ROOT, env=worker_env(), stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: proc.poll() is not None or _answers(f"{base}/env/health"), timeout=60)
        assert proc.poll() is None, log.read_text()[-3000:]
        yield base
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
        out.close()


def http(method: str, url: str, body: dict | None = None) -> tuple[int, dict]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def _world(project, base_url: str):
    endpoint = save_endpoint(
        project,
        EndpointData(name="fake", role="world", kind="openai", base_url=base_url, model="m"),
    ).endpoint
    make_default(endpoint)
    world = save_world(project, parse_world(WORLD)).world
    _, token = create_token(project, "agent")
    return token, world


def _play(bases: list[str], token: str, world_id: int, steps: int) -> tuple[str, list[dict]]:
    """Reset on the first base, then each request on the next base in turn."""
    turn = iter(range(1000))

    def url(path: str) -> str:
        return f"{bases[next(turn) % len(bases)]}/env/t/{token}/worlds/{world_id}/{path}"

    status, reset = http("POST", url("reset"), {"task": "look", "seed": 5, "max_steps": 10})
    assert status == 200, reset
    episode = reset["observation"]["episode_id"]
    answers = []
    for i in range(steps):
        status, answer = http(
            "POST", url("step"), {"episode_id": episode, "action": {"action": f"echo {i}"}}
        )
        assert status == 200, answer
        answers.append(answer)
    return episode, answers


def _assert_recorded_once(episode: str, answers: list[dict]) -> None:
    assert [a["observation"]["step"] for a in answers] == list(range(1, len(answers) + 1))
    trajectory = Trajectory.objects.get(pk=int(episode))
    assert trajectory.step_count == len(answers)
    steps = list(Step.objects.filter(branch__trajectory=trajectory).order_by("index"))
    assert [(s.index, s.action) for s in steps] == [(i, f"echo {i}") for i in range(len(answers))]


def test_two_web_processes_serve_one_episode_in_turn(project, tmp_path):
    with fake_openai_server() as srv, ExitStack() as stack:
        token, world = _world(project, srv.base_url)
        bases = [stack.enter_context(web_process(tmp_path / f"web-{i}.log")) for i in (1, 2)]
        episode, answers = _play(bases, token, world.pk, steps=4)
        _assert_recorded_once(episode, answers)
        # every step's prompt held the whole history, whichever process asked: a process
        # that did not take the previous step read it from the database, not a stale copy
        for i, request in enumerate(srv.requests):
            prompt = json.dumps(request["messages"])
            assert all(f"echo {j}" in prompt for j in range(i + 1)), i
        status, state = http(
            "GET", f"{bases[0]}/env/t/{token}/worlds/{world.pk}/state?episode_id={episode}"
        )
        assert status == 200 and state["step_count"] == 4


@pytest.mark.skipif(shutil.which("nginx") is None, reason="nginx is not installed here")
def test_the_balancer_spreads_one_episode_over_both_replicas_and_logs_no_token(project, tmp_path):
    with fake_openai_server() as srv, ExitStack() as stack:
        token, world = _world(project, srv.base_url)
        bases = [stack.enter_context(web_process(tmp_path / f"web-{i}.log")) for i in (1, 2)]
        ports = {f"web-{i}": base.rsplit(":", 1)[1] for i, base in enumerate(bases, 1)}
        listen = _free_port()
        conf = (ROOT / "deploy" / "nginx.conf").read_text()
        conf = re.sub(r"(web-\d+):8000", lambda m: f"127.0.0.1:{ports[m.group(1)]}", conf)
        conf = conf.replace("listen 80;", f"listen 127.0.0.1:{listen};")
        access = tmp_path / "access.log"
        conf = conf.replace("access_log /dev/stdout", f"access_log {access}")
        (tmp_path / "default.conf").write_text(conf)
        (tmp_path / "nginx.conf").write_text(
            f"daemon off;\npid {tmp_path}/nginx.pid;\nerror_log {tmp_path}/error.log;\n"
            f"events {{}}\nhttp {{ include {tmp_path}/default.conf; }}\n"
        )
        nginx = subprocess.Popen(
            [shutil.which("nginx"), "-c", str(tmp_path / "nginx.conf"), "-p", str(tmp_path)],
            start_new_session=True,
        )
        try:
            balancer = f"http://127.0.0.1:{listen}"
            wait_for(lambda: _answers(f"{balancer}/env/health"), timeout=30)
            episode, answers = _play([balancer], token, world.pk, steps=4)
        finally:
            nginx.send_signal(signal.SIGQUIT)  # graceful: the access log is written whole
            nginx.wait(timeout=30)
        _assert_recorded_once(episode, answers)
        log = access.read_text()
        served_by = set(re.findall(r"127\.0\.0\.1:(\d+)\s*$", log, re.M))
        assert served_by == set(ports.values()), log  # both replicas took requests
        assert token not in log and "/env/" not in log  # no URL, so no token
