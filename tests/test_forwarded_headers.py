"""Who the sign-in lock-out counts: the web server started as scripts/dev.sh starts it (its
uvicorn line, run as written, through scripts/web.sh as the Dockerfile runs it) believes
X-Forwarded-For only from the proxies in STUDIO_TRUSTED_PROXIES. By default nobody: forged
headers from a local client do not escape a lock-out. With a proxy trusted, the client's
address is the proxy's word, and only the proxy's; through deploy/nginx.conf (where nginx is
installed) a client's own header is replaced, not passed on."""

from __future__ import annotations

import http.client
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from axes.models import AccessAttempt

from tests.support.worker import ROOT, wait_for, worker_env

pytestmark = pytest.mark.django_db(transaction=True)

LIMIT = 5  # STUDIO_LOGIN_FAILURE_LIMIT's default: the fifth failure locks out
CLIENT = "127.0.0.3"  # another loopback address: a client that is not the trusted proxy


def _dev_sh_web_line() -> str:
    """The line of scripts/dev.sh that starts the web server, without its trailing `&`."""
    text = (ROOT / "scripts" / "dev.sh").read_text()
    lines = [line for line in text.splitlines() if "scripts/web.sh" in line and "#" not in line]
    assert len(lines) == 1, lines
    line = lines[0].strip()
    assert line.endswith("&")
    return line[:-1].strip()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


@contextmanager
def dev_web_server(log: Path, **env: str) -> Iterator[int]:
    """The web server on a free port, started by dev.sh's own line (HOST, PORT and PY as
    dev.sh sets them), on the test database; its port."""
    port = _free_port()
    server_env = worker_env({"HOST": "127.0.0.1", "PORT": str(port), "PY": sys.executable})
    for name in ("STUDIO_TRUSTED_PROXIES", "FORWARDED_ALLOW_IPS", "STUDIO_CLIENT_IP_HEADER"):
        server_env.pop(name, None)
    server_env.update(env)
    out = open(log, "ab")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        ["bash", "-c", _dev_sh_web_line()],
        cwd=ROOT,
        env=server_env,
        stdout=out,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        wait_for(lambda: proc.poll() is not None or _answers(port), timeout=60)
        assert proc.poll() is None, log.read_text()[-3000:]
        yield port
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
        out.close()


def sign_in(port: int, password: str, *, forwarded_for: str | None, source: str = "127.0.0.1"):
    """A wrong (or right) password for `researcher` in the login form, sent from `source`
    with the X-Forwarded-For given; the answer's status."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30, source_address=(source, 0))
    try:
        conn.request("GET", "/login/")
        page = conn.getresponse()
        body = page.read().decode()
        assert page.status == 200, body[:500]
        cookie = re.search(r"csrftoken=([^;]+)", page.headers.get("Set-Cookie", "")).group(1)
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', body).group(1)
        form = {"username": "researcher", "password": password, "csrfmiddlewaretoken": token}
        headers = {
            "Content-Type": "application/x-www-form-urlencoded",
            "Cookie": f"csrftoken={cookie}",
        }
        if forwarded_for is not None:
            headers["X-Forwarded-For"] = forwarded_for
        conn.request("POST", "/login/", urllib.parse.urlencode(form), headers)
        answer = conn.getresponse()
        answer.read()
        return answer.status
    finally:
        conn.close()


def counted_addresses() -> set[str]:
    return set(AccessAttempt.objects.values_list("ip_address", flat=True))


def test_dev_sh_and_the_image_start_the_web_server_one_way():
    assert _dev_sh_web_line().startswith('PY="$PY" scripts/web.sh ')
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert re.search(r'^CMD \["scripts/web.sh", ', dockerfile, re.M)
    assert "--proxy-headers" not in dockerfile and "uvicorn studio" not in dockerfile


def test_forged_forwarded_for_does_not_escape_the_lock_out(project, tmp_path):
    with dev_web_server(tmp_path / "web.log") as port:
        statuses = [
            sign_in(port, f"wrong-{i}", forwarded_for=f"203.0.113.{i + 1}") for i in range(LIMIT)
        ]
        assert statuses == [200] * (LIMIT - 1) + [429]
        # a new forged address is no new client: still locked out
        assert sign_in(port, "wrong-again", forwarded_for="198.51.100.77") == 429
        assert sign_in(port, "wrong-again", forwarded_for="198.51.100.78, 127.0.0.1") == 429
    assert counted_addresses() == {"127.0.0.1"}


def test_a_trusted_proxy_names_the_client_and_no_one_else_does(project, tmp_path):
    with dev_web_server(tmp_path / "web.log", STUDIO_TRUSTED_PROXIES="127.0.0.1") as port:
        # from the trusted proxy's address: the client it names
        assert sign_in(port, "wrong", forwarded_for="203.0.113.7") == 200
        # a chain: the last address the proxy did not add itself (uvicorn reads from the right)
        assert sign_in(port, "wrong", forwarded_for="198.51.100.1, 203.0.113.8") == 200
        assert counted_addresses() == {"203.0.113.7", "203.0.113.8"}
        # from any other address the header is ignored: the connection's address counts
        for i in range(LIMIT):
            sign_in(port, "wrong", forwarded_for=f"192.0.2.{i + 1}", source=CLIENT)
        assert sign_in(port, "wrong", forwarded_for="192.0.2.99", source=CLIENT) == 429
    assert counted_addresses() == {"203.0.113.7", "203.0.113.8", CLIENT}


@pytest.mark.skipif(shutil.which("nginx") is None, reason="nginx is not installed here")
def test_through_the_balancer_a_clients_own_header_is_replaced(project, tmp_path):
    with dev_web_server(tmp_path / "web.log", STUDIO_TRUSTED_PROXIES="127.0.0.1") as port:
        listen = _free_port()
        conf = re.sub(
            r"web-\d+:8000", f"127.0.0.1:{port}", (ROOT / "deploy/nginx.conf").read_text()
        )
        conf = conf.replace("listen 80;", f"listen 127.0.0.1:{listen};")
        conf = conf.replace("access_log /dev/stdout", f"access_log {tmp_path}/access.log")
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
            wait_for(lambda: nginx.poll() is not None or _answers(listen), timeout=30)
            assert nginx.poll() is None, (tmp_path / "error.log").read_text()
            statuses = [
                sign_in(listen, "wrong", forwarded_for=f"203.0.113.{i + 1}", source=CLIENT)
                for i in range(LIMIT)
            ]
            assert statuses == [200] * (LIMIT - 1) + [429]
            assert sign_in(listen, "wrong", forwarded_for="198.51.100.5", source=CLIENT) == 429
        finally:
            nginx.send_signal(signal.SIGQUIT)
            nginx.wait(timeout=30)
    assert counted_addresses() == {CLIENT}  # the balancer's word: the connection it took


@pytest.mark.parametrize(
    ("env", "line"),
    [
        (
            {"STUDIO_TRUSTED_PROXIES": "*"},
            "configuration error: STUDIO_TRUSTED_PROXIES holds '*', which is not an IP address "
            "or network (the proxies whose X-Forwarded-For is believed, e.g. 172.28.0.10 or "
            "10.0.0.0/24; '*' is refused: any client could then choose its own address)",
        ),
        (
            {"STUDIO_TRUSTED_PROXIES": "10.0.0.2,balancer"},
            "configuration error: STUDIO_TRUSTED_PROXIES holds 'balancer', which is not an IP "
            "address or network (the proxies whose X-Forwarded-For is believed, e.g. "
            "172.28.0.10 or 10.0.0.0/24; '*' is refused: any client could then choose its own "
            "address)",
        ),
        (
            {"FORWARDED_ALLOW_IPS": "10.0.0.2"},
            "configuration error: FORWARDED_ALLOW_IPS is not read (scripts/web.sh turns "
            "uvicorn's proxy headers off unless STUDIO_TRUSTED_PROXIES names the proxies): set "
            "STUDIO_TRUSTED_PROXIES instead",
        ),
    ],
    ids=["star", "host-name", "uvicorn-variable"],
)
def test_a_bad_trusted_proxies_value_is_one_line_naming_it(tmp_path, env, line):
    clean = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG")}
    clean.update(
        {
            "DEBUG": "1",
            "STUDIO_DATA_DIR": str(tmp_path),
            "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}",
            "STUDIO_BROKER": "filesystem",
            **env,
        }
    )
    done = subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=ROOT, env=clean, capture_output=True,
        text=True, timeout=120,
    )  # fmt: skip
    assert (done.returncode, done.stderr) == (1, line + "\n")
