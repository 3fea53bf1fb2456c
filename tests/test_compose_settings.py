"""docker-compose.yml's web replica as it runs: the environment compose gives it (the
${VAR:-default} forms resolved, SECRET_KEY given as the file demands) on top of the image's
(the Dockerfile's ENV lines), the static files collected as the Dockerfile's RUN line collects
them, and the server started by the Dockerfile's CMD, with the image's and the volume's
folders mapped into a temporary dir. What differs from a container: 127.0.0.1 and a free port
for 0.0.0.0:8000, and the test database and Redis for compose's `postgres` and `redis`."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
COMPOSE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "Dockerfile"
# 50 characters of 5+ kinds, not django-insecure-: what check --deploy asks of a key
SECRET = "x8Kq2vN7pR4tW9yB3mF6hJ1cL5sD0gA-u_eZiOoXrTnVbQwYkP"
# what every process needs from the machine, nothing of the developer's configuration
MACHINE = ("PATH", "HOME", "LANG", "TMPDIR")

_VARIABLE = re.compile(r"\$\{(\w+)(?::([-?])([^}]*))?\}")


def resolve(value: str, given: dict[str, str]) -> str:
    """A compose value with its ${VAR}, ${VAR:-default} and ${VAR:?message} forms resolved
    from `given` (the operator's environment)."""

    def one(match: re.Match) -> str:
        name, kind, rest = match.groups()
        if given.get(name):
            return given[name]
        if kind == "?":
            raise AssertionError(f"compose demands {name}: {rest}")
        return rest if kind == "-" else ""

    return _VARIABLE.sub(one, value)


def compose_environment(service: str, given: dict[str, str]) -> dict[str, str]:
    env = yaml.safe_load(COMPOSE.read_text())["services"][service]["environment"]
    return {name: resolve(str(value), given) for name, value in env.items()}


def dockerfile_env() -> dict[str, str]:
    """The image's environment: every `ENV NAME=value ...` line of the Dockerfile."""
    env: dict[str, str] = {}
    for line in DOCKERFILE.read_text().splitlines():
        if line.startswith("ENV "):
            for word in shlex.split(line[4:]):
                name, _, value = word.partition("=")
                env[name] = value
    return env


def dockerfile_collectstatic() -> tuple[dict[str, str], list[str]]:
    """The RUN line that collects the static files: its variables, and manage.py's args."""
    (line,) = [ln for ln in DOCKERFILE.read_text().splitlines() if "collectstatic" in ln]
    words = shlex.split(line.removeprefix("RUN "))
    assignments = dict(w.split("=", 1) for w in words[: words.index("python")])
    return assignments, words[words.index("manage.py") + 1 :]


def dockerfile_cmd() -> list[str]:
    (line,) = [ln for ln in DOCKERFILE.read_text().splitlines() if ln.startswith("CMD ")]
    return json.loads(line[4:])


def in_image(env: dict[str, str], image: Path) -> dict[str, str]:
    """Paths of the container (/app, the image's folder; /data, the volume) mapped into
    `image`, a temporary dir standing in for the container's file system."""
    return {
        name: str(image / value.lstrip("/")) if value.startswith(("/app/", "/data")) else value
        for name, value in env.items()
    }


def collect_static_as_the_image_does(image: Path) -> dict[str, str]:
    """collectstatic with the image's environment at build time (the Dockerfile's ENV lines,
    the RUN line's variables; the checkout stands in for /app); the image's environment."""
    image_env = in_image(dockerfile_env(), image)
    assignments, args = dockerfile_collectstatic()
    env = {k: v for k, v in os.environ.items() if k in MACHINE}
    env.update(image_env)
    env.update(in_image({"STUDIO_DATA_DIR": "/app/var"}, image))  # settings' default, in /app
    env.update(assignments)
    env["STUDIO_BROKER"] = "filesystem"  # no broker at build time: none is looked for
    done = subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True,
        text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return image_env


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url: str, headers: dict[str, str] | None = None):
    """(status, headers, body) of a GET that follows no redirect."""

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):
            return None

    opener = urllib.request.build_opener(NoRedirect)
    try:
        with opener.open(urllib.request.Request(url, headers=headers or {}), timeout=30) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers, exc.read()


def _up(base: str) -> bool:
    try:
        return get(f"{base}/healthz")[0] > 0
    except OSError:
        return False


@contextmanager
def served(env: dict[str, str], log: Path) -> Iterator[str]:
    """The image's CMD (scripts/web.sh and its uvicorn arguments) with `env` only, on
    127.0.0.1 and a free port instead of 0.0.0.0:8000; the base URL."""
    from tests.support.worker import wait_for

    cmd = dockerfile_cmd()
    port = free_port()
    cmd[cmd.index("--host") + 1] = "127.0.0.1"
    cmd[cmd.index("--port") + 1] = str(port)
    full_env = {k: v for k, v in os.environ.items() if k in MACHINE}
    full_env.update(env)
    full_env["PY"] = sys.executable  # the image's `python`
    out = open(log, "ab")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        cmd, cwd=ROOT, env=full_env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: proc.poll() is not None or _up(base), timeout=90)
        assert proc.poll() is None, log.read_text()[-3000:]
        yield base
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
        out.close()


def linked_static(page: str) -> list[str]:
    """The stylesheets and scripts a page links from /static/."""
    return re.findall(r'(?:href|src)="(/static/[^"]+\.(?:css|js))"', page)


@pytest.mark.django_db(transaction=True)
def test_a_web_replica_serves_the_static_files_of_its_image(tmp_path):
    from django.conf import settings

    from tests.support.worker import test_database_url

    image = tmp_path / "container"
    image_env = collect_static_as_the_image_does(image)
    static_root = Path(image_env["STUDIO_STATIC_ROOT"])
    assert (static_root / "css" / "studio.css").is_file()

    env = {**image_env, **in_image(compose_environment("web-1", {"SECRET_KEY": SECRET}), image)}
    assert "DEBUG" not in env  # production: DEBUG off, WhiteNoise serves STATIC_ROOT only
    env["DATABASE_URL"] = test_database_url()  # for compose's postgres service
    env.pop("REDIS_URL")  # compose's redis service: the local one, if the tests have one
    if settings.REDIS_URL:
        env["REDIS_URL"] = settings.REDIS_URL
    with served(env, tmp_path / "web.log") as base:
        status, _, body = get(f"{base}/healthz")
        assert (status, json.loads(body)) == (200, {"ok": True})
        status, headers, _ = get(f"{base}/")
        assert (status, headers["Location"]) == (302, "/login/?next=/")
        status, _, page = get(f"{base}/login/")
        assert status == 200
        links = linked_static(page.decode())
        assert "/static/css/studio.css" in links, links
        for link in links:
            status, headers, body = get(base + link)
            assert status == 200, link
            assert body == (ROOT / "static" / link.removeprefix("/static/")).read_bytes(), link
    # nothing was collected into, or served from, the volume
    data_dir = Path(env["STUDIO_DATA_DIR"])
    assert data_dir == image / "data"
    assert not (data_dir / "staticfiles").exists() or not any((data_dir / "staticfiles").iterdir())


def test_the_replicas_trust_only_the_balancers_fixed_address():
    import ipaddress

    compose = yaml.safe_load(COMPOSE.read_text())
    services = compose["services"]
    (pool,) = compose["networks"]["edge"]["ipam"]["config"]
    balancer = services["balancer"]["networks"]
    assert list(balancer) == ["edge"]  # it reaches the replicas only
    address = ipaddress.ip_address(balancer["edge"]["ipv4_address"])
    # fixed, inside the network, outside the range other containers draw from
    assert address in ipaddress.ip_network(pool["subnet"])
    assert address not in ipaddress.ip_network(pool["ip_range"])
    for name in ("web-1", "web-2"):
        web = services[name]
        assert "edge" in web["networks"] and "default" in web["networks"]
        assert compose_environment(name, {"SECRET_KEY": SECRET})["STUDIO_TRUSTED_PROXIES"] == str(
            address
        )
    # the workers and the one-shot migrate serve no HTTP: they trust no one
    for name, service in services.items():
        if not name.startswith("web-"):
            assert "STUDIO_TRUSTED_PROXIES" not in (service.get("environment") or {}), name
    conf = (ROOT / "deploy" / "nginx.conf").read_text()
    assert re.findall(r"proxy_set_header\s+X-Forwarded-For\s+(\S+);", conf) == ["$remote_addr"]
