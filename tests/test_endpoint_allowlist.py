"""Model endpoints reach only the hosts the operator allows (STUDIO_ENDPOINT_ALLOWED_HOSTS plus
the hosts of the environment's model URLs): a URL outside the list is refused when an
endpoint is saved, and before any connection when a process would send it a request (Test,
a job's world model, agent or judge, the web process's model client). Test says only whether
a model answered, never what else did.

A listening socket on a non-loopback address cannot be had here, so "outside the list" is a
real server on 127.0.0.1 with the allowlist set to other networks: the listening socket's
backlog shows whether anything connected."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from django.urls import reverse

from studio.env import ConfigError
from studio.models import JobStatus, ModelEndpoint
from studio.services import endpoint_hosts
from studio.services.endpoint_hosts import HostNotAllowed, check_url, parse_allowed_hosts
from studio.services.endpoints import (
    NOT_ANSWERED,
    EndpointData,
    EndpointError,
    api_key_of,
    key_for_job,
    save_endpoint,
    world_input,
)
from tests.support.aio import run_in_own_loop
from tests.support.fake_openai import fake_openai_server
from tests.support.ui import audit_markup

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[1]
SETTING = "STUDIO_ENDPOINT_ALLOWED_HOSTS"


@contextmanager
def silent_listener() -> Iterator[tuple[str, socket.socket]]:
    """A real TCP socket listening on 127.0.0.1 that never accepts: a client that connects
    completes its handshake into the backlog, where `connected` finds it afterwards."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/v1", sock
    finally:
        sock.close()


def connected(sock: socket.socket) -> bool:
    sock.setblocking(False)
    try:
        conn, _ = sock.accept()
    except BlockingIOError:
        return False
    conn.close()
    return True


def endpoint_at(project, url: str, **fields) -> ModelEndpoint:
    """A row as an older studio, an archive or a narrowed allowlist may leave it: written
    behind the form's back."""
    return ModelEndpoint.objects.create(
        project=project,
        name=fields.pop("name", "inside"),
        role=fields.pop("role", "world"),
        kind="openai",
        base_url=url,
        model="m",
        **fields,
    )


# ---- the matching, in-process -------------------------------------------------------------


def test_entries_are_normalised_and_bad_ones_fail_loudly():
    assert parse_allowed_hosts(SETTING, [" Models.Lab. ", "10.0.0.0/8", "[::1]", "*", "::1"]) == [
        "models.lab",
        "10.0.0.0/8",
        "::1",
        "*",
        "::1",
    ]
    for bad, why in (
        ("10.0.0.1/8", "is not an IP address or CIDR network"),  # host bits set
        ("300.1.2.3", "is not an IP address or CIDR network"),
        ("fe80::zz", "is not an IP address or CIDR network"),
        ("bad host", "is not a host name, an IP address, a CIDR network"),
        ("a..b", "is not a host name"),
        ("-x.lab", "is not a host name"),
    ):
        with pytest.raises(ConfigError, match=f"{SETTING}: '{bad}' {why}"):
            parse_allowed_hosts(SETTING, [bad])


def test_cidr_networks_and_addresses_match_what_they_hold(settings):
    settings.STUDIO_ENDPOINT_ALLOWED_HOSTS = parse_allowed_hosts(
        SETTING, ["10.0.0.0/8", "192.168.1.7", "fd00::/8"]
    )
    for url in (
        "http://10.1.2.3:8000/v1",
        "https://10.255.255.255/v1",
        "http://192.168.1.7/v1",
        "http://[fd12::1]:8000/v1",
        "http://[::ffff:10.0.0.9]/v1",  # an IPv4-mapped address is its IPv4 address
    ):
        assert check_url(url) is None, url
    for url in (
        "http://11.0.0.1/v1",
        "http://192.168.1.8/v1",
        "http://127.0.0.1:8000/v1",  # loopback is allowed only while listed
        "http://[::1]/v1",
        "http://[::ffff:127.0.0.1]/v1",
        "http://0.0.0.0:8000/v1",  # reaches this machine's own ports
    ):
        with pytest.raises(HostNotAllowed, match=SETTING):
            check_url(url)


def test_a_name_listed_matches_by_name_and_others_by_every_address(settings):
    asked: list[str] = []

    def resolve(addresses):
        def answer(host: str) -> list[str]:
            asked.append(host)
            return addresses

        return answer

    settings.STUDIO_ENDPOINT_ALLOWED_HOSTS = parse_allowed_hosts(SETTING, ["gpu.lab", "10.0.0.0/8"])
    # listed by name: allowed as it is, never resolved (the operator named that host)
    assert check_url("http://GPU.lab.:8000/v1", resolve=resolve(["192.0.2.1"])) is None
    assert asked == []
    # not listed: resolved, and every address must be in a network listed
    assert check_url("http://inside.lab/v1", resolve=resolve(["10.0.0.4"])) == ["10.0.0.4"]
    with pytest.raises(HostNotAllowed, match="'both.lab'"):
        check_url("http://both.lab/v1", resolve=resolve(["10.0.0.4", "192.0.2.1"]))
    with pytest.raises(HostNotAllowed, match="'gone.lab'"):
        check_url("http://gone.lab/v1", resolve=resolve([]))
    assert asked == ["inside.lab", "both.lab", "gone.lab"]
    # a real resolution: localhost resolves to loopback, which 10.0.0.0/8 does not hold
    with pytest.raises(HostNotAllowed):
        check_url("http://localhost:8000/v1")
    settings.STUDIO_ENDPOINT_ALLOWED_HOSTS = parse_allowed_hosts(SETTING, ["127.0.0.0/8", "::1"])
    assert set(check_url("http://localhost:8000/v1") or []) <= {"127.0.0.1", "::1"}
    # names only: a name not listed is refused without resolving it
    settings.STUDIO_ENDPOINT_ALLOWED_HOSTS = ["gpu.lab"]
    with pytest.raises(HostNotAllowed):
        check_url("http://inside.lab/v1", resolve=resolve(["10.0.0.4"]))
    assert asked == ["inside.lab", "both.lab", "gone.lab"]
    # "*": anything
    settings.STUDIO_ENDPOINT_ALLOWED_HOSTS = ["*"]
    assert check_url("http://anything.example/v1", resolve=resolve(["10.0.0.4"])) is None


def test_urls_clients_read_apart_are_refused():
    for url in (
        "http://127.0.0.1@evil.example/v1",
        "http://user:pw@127.0.0.1/v1",
        "http://evil.example\\@127.0.0.1/v1",
        "ftp://127.0.0.1/v1",
        "http:///v1",
        "http://127.0.0.1:port/v1",
    ):
        with pytest.raises(HostNotAllowed):
            check_url(url)


def test_the_environments_model_hosts_are_allowed(settings, monkeypatch):
    settings.STUDIO_ENDPOINT_ALLOWED_HOSTS = []  # empty: only the environment's hosts
    settings.WORLD_MODEL_BASE_URL = "http://models.lab:8000/v1"
    settings.AGENT_MODEL_BASE_URL = "http://10.0.0.6:8000/v1"
    settings.STUDIO_ENDPOINT_KEY_ENVS = [("LAB_KEY", "https://gateway.lab/v1")]
    monkeypatch.setenv("STUDIO_DEMO_MODELS_URL", "http://demo.lab:8100/v1")
    for url in (
        "http://models.lab:8000/v1",
        "http://models.lab:9999/other",  # a host is allowed, whatever the port or path
        "http://10.0.0.6:8000/v1",
        "https://gateway.lab/v1",
        "http://demo.lab:8100/v1",
    ):
        assert check_url(url) is None, url
    for url in ("http://127.0.0.1:8000/v1", "http://10.0.0.7/v1", "http://lab/v1"):
        with pytest.raises(HostNotAllowed):
            check_url(url)


def test_the_default_is_loopback():
    from django.conf import settings

    assert settings.STUDIO_ENDPOINT_ALLOWED_HOSTS == ["localhost", "127.0.0.0/8", "::1"]
    assert check_url("http://localhost:8000/v1") is None
    assert check_url("http://127.0.0.2:8000/v1") is None
    with pytest.raises(HostNotAllowed, match="allowed now: localhost, 127.0.0.0/8, ::1;"):
        check_url("http://10.0.0.5:8000/v1")


def test_a_bad_setting_stops_the_studio_naming_it(tmp_path):
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TMPDIR")}
    env.update(
        DEBUG="1",
        PYTHONPATH=str(ROOT),
        STUDIO_DATA_DIR=str(tmp_path),
        DATABASE_URL=f"sqlite:///{tmp_path / 'x.sqlite3'}",
        STUDIO_BROKER="filesystem",
        STUDIO_ENDPOINT_ALLOWED_HOSTS="127.0.0.0/8, not a host",
    )
    done = subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1
    assert done.stderr.strip() == (
        "configuration error: STUDIO_ENDPOINT_ALLOWED_HOSTS: 'not a host' is not a host name, "
        "an IP address, a CIDR network (e.g. 10.0.0.0/8) or * (any host)"
    )


# ---- on save ------------------------------------------------------------------------------


def add(client, project, **fields):
    data = {
        "name": "served",
        "role": "world",
        "kind": "openai",
        "base_url": "http://10.0.0.9:8000/v1",
        "model": "world-model",
        **fields,
    }
    return client.post(reverse("endpoint_create", args=[project.pk]), data)


def test_the_form_refuses_a_host_outside_the_list_naming_it_and_the_setting(client, project):
    client.force_login(project.users["admin"])
    r = add(client, project)
    html = r.content.decode()
    assert r.status_code == 400
    assert "The host &#x27;10.0.0.9&#x27; of http://10.0.0.9:8000/v1 is not one" in html
    assert "STUDIO_ENDPOINT_ALLOWED_HOSTS" in html
    r = add(client, project, base_url="http://user:secret@127.0.0.1:9/v1")
    assert r.status_code == 400 and "may not hold user:password@" in r.content.decode()
    assert not ModelEndpoint.objects.filter(name="served").exists()
    # editing an endpoint to such a host is refused the same way, and nothing changes
    assert add(client, project, base_url="http://127.0.0.1:9/v1").status_code == 302
    endpoint = ModelEndpoint.objects.get(name="served")
    edit = client.post(
        reverse("endpoint_edit", args=[endpoint.pk]),
        {"name": "served", "role": "world", "kind": "openai", "model": "m",
         "base_url": "http://169.254.169.254/latest"},
    )  # fmt: skip
    assert edit.status_code == 400 and "&#x27;169.254.169.254&#x27;" in edit.content.decode()
    endpoint.refresh_from_db()
    assert endpoint.base_url == "http://127.0.0.1:9/v1"


def test_the_service_refuses_it_for_every_other_caller(project):
    data = EndpointData(
        name="x", role="judge", kind="openai", base_url="http://10.0.0.9/v1", model="m"
    )
    with pytest.raises(EndpointError, match="STUDIO_ENDPOINT_ALLOWED_HOSTS"):
        save_endpoint(project, data)
    assert not project.endpoints.filter(name="x").exists()


def test_an_operator_widens_the_list(client, project, settings):
    settings.STUDIO_ENDPOINT_ALLOWED_HOSTS = parse_allowed_hosts(SETTING, ["10.0.0.0/8"])
    client.force_login(project.users["admin"])
    assert add(client, project).status_code == 302
    assert ModelEndpoint.objects.get(name="served").base_url == "http://10.0.0.9:8000/v1"


# ---- before any connection ----------------------------------------------------------------


def test_test_refuses_a_host_outside_the_list_without_connecting(client, project, settings):
    client.force_login(project.users["admin"])
    with silent_listener() as (url, sock):
        endpoint = endpoint_at(project, url)
        settings.STUDIO_ENDPOINT_ALLOWED_HOSTS = parse_allowed_hosts(SETTING, ["10.0.0.0/8"])
        r = client.post(
            reverse("endpoint_test", args=[endpoint.pk]), headers={"HX-Request": "true"}
        )
        html = r.content.decode()
        assert r.status_code == 200 and "not tested:" in html and SETTING in html
        endpoint.refresh_from_db()
        assert endpoint.test_ok is False and endpoint.test_latency_ms is None
        assert not connected(sock)


def test_jobs_and_the_web_client_refuse_it_without_connecting(project, settings):
    from studio.serving.model_http import Client, ModelHTTPError

    with silent_listener() as (url, sock):
        endpoint = endpoint_at(project, url, api_key_encrypted="")
        settings.STUDIO_ENDPOINT_ALLOWED_HOSTS = parse_allowed_hosts(SETTING, ["10.0.0.0/8"])
        # what every worker asks before it builds a model's client (world, agent, judge,
        # campaign agent, reward judge) and the web process before an episode's step
        with pytest.raises(EndpointError, match=SETTING):
            api_key_of(endpoint)
        with pytest.raises(EndpointError, match=SETTING):
            key_for_job(endpoint, url, env="WORLD_MODEL_API_KEY")
        with pytest.raises(EndpointError, match=SETTING):
            key_for_job(None, url, env="JUDGE_MODEL_API_KEY")  # a URL from the command line

        async def ask() -> None:
            client = Client()
            try:
                await client.request("GET", url + "/models", timeout=5)
            finally:
                await client.close()

        with pytest.raises(ModelHTTPError, match=SETTING):
            run_in_own_loop(ask())
        assert not connected(sock)


@pytest.mark.django_db(transaction=True)
def test_a_simulation_job_fails_naming_the_setting_without_connecting(project, settings):
    from studio.jobs.simulation import run_simulation_job
    from studio.services.simulation import build_request, start_simulation
    from tests.support.jobs import make_trajectory

    trajectory = make_trajectory(project)
    root = trajectory.root_branch
    with silent_listener() as (url, sock):
        world = endpoint_at(project, url)
        request = build_request(
            root, {"fork_index": 1, "action": "ls", "n": 1, **world_input(world)}
        )
        job = start_simulation(user=None, branch=root, request=request, world_endpoint=world)
        settings.STUDIO_ENDPOINT_ALLOWED_HOSTS = parse_allowed_hosts(SETTING, ["10.0.0.0/8"])
        run_simulation_job(job.pk)
        job.refresh_from_db()
        assert job.status == JobStatus.FAILED and SETTING in job.error
        assert not connected(sock)


def test_the_web_client_connects_to_the_addresses_it_checked(project, settings):
    """A name not listed is resolved once, checked, and those addresses are connected to."""
    from studio.serving.model_http import Client

    settings.STUDIO_ENDPOINT_ALLOWED_HOSTS = parse_allowed_hosts(SETTING, ["127.0.0.0/8"])
    with fake_openai_server(lambda b, i: "ready") as srv:
        port = srv.base_url.rsplit(":", 1)[1].split("/")[0]

        async def ask() -> int:
            client = Client()
            try:
                answer = await client.request(
                    "GET", f"http://localhost:{port}/v1/models", timeout=10
                )
            finally:
                await client.close()
            return answer.status

        assert run_in_own_loop(ask()) == 200 and srv.model_list_calls == 1


# ---- what Test says -----------------------------------------------------------------------


class _Answers(BaseHTTPRequestHandler):
    """Whatever a host that is no model might answer."""

    def do_POST(self):  # noqa: N802 - http.server's name
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        kind = self.server.kind  # type: ignore[attr-defined]
        if kind == "redirect":
            self.send_response(307)
            self.send_header("Location", self.server.location)  # type: ignore[attr-defined]
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        body = {
            "html": b"<html><body>Jenkins internal dashboard</body></html>",
            "json": b'{"status": "internal-service-ok", "version": "9.9"}',
        }[kind]
        self.send_response(200)
        self.send_header("Content-Type", "text/html" if kind == "html" else "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@contextmanager
def other_server(kind: str, location: str = "") -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Answers)
    server.kind = kind  # type: ignore[attr-defined]
    server.location = location  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_test_says_only_whether_a_model_answered(client, project):
    client.force_login(project.users["admin"])
    hx = {"HX-Request": "true"}

    def test(endpoint) -> str:
        r = client.post(reverse("endpoint_test", args=[endpoint.pk]), headers=hx)
        assert r.status_code == 200
        endpoint.refresh_from_db()
        return endpoint.test_detail

    with fake_openai_server(lambda b, i: "ready") as srv:
        endpoint = endpoint_at(project, srv.base_url)
        assert test(endpoint) == "answered as a model: m"
        assert endpoint.test_ok and endpoint.test_latency_ms > 0
    with fake_openai_server(lambda b, i: (503, "upstream db-7.internal:5432 is down")) as srv:
        ModelEndpoint.objects.filter(pk=endpoint.pk).update(base_url=srv.base_url)
        assert test(endpoint) == NOT_ANSWERED and endpoint.test_ok is False
    for kind in ("html", "json"):  # a 200 from a host that is no model
        with other_server(kind) as url:
            ModelEndpoint.objects.filter(pk=endpoint.pk).update(base_url=url)
            assert test(endpoint) == NOT_ANSWERED
    # a redirect is not followed (it would lead to a host nobody checked)
    with (
        fake_openai_server(lambda b, i: "ready") as model,
        other_server("redirect", model.base_url + "/chat/completions") as url,
    ):
        ModelEndpoint.objects.filter(pk=endpoint.pk).update(base_url=url)
        assert test(endpoint) == NOT_ANSWERED and model.requests == []
    # a port nothing listens on reads the same as any other failure
    with silent_listener() as (url, _):
        pass
    ModelEndpoint.objects.filter(pk=endpoint.pk).update(base_url=url)
    assert test(endpoint) == NOT_ANSWERED
    page = client.get(reverse("endpoint_list", args=[project.pk])).content.decode()
    # What the page says, its own base URL left out: the URL's random port (55033) or an id in a
    # link may hold "503" and say nothing about the server's answer.
    said = "".join(audit_markup(page).text).replace(url, "")
    assert url in page
    for leak in ("503", "db-7.internal", "Jenkins", "internal-service-ok", "Connection", "refused"):
        assert leak not in said, leak
    assert "did not answer as a model" in page


def test_the_allowlist_cache_follows_the_settings(settings):
    first = endpoint_hosts.allowlist()
    settings.STUDIO_ENDPOINT_ALLOWED_HOSTS = ["gpu.lab"]
    assert endpoint_hosts.allowlist().names == frozenset({"gpu.lab"}) != first.names
