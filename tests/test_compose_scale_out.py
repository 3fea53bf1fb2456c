"""docker-compose.yml shows the studio scaled out: two web replicas, alike, reached only
through an nginx balancer whose upstream is exactly those replicas (deploy/nginx.conf), with
WebSockets passed through and no URL (where a token can be) in its access log; the gpu
worker batches the steps of many episodes. The files are checked as files (no image is
pulled here); `docker compose config` and `nginx -t` also check them where installed."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
COMPOSE = ROOT / "docker-compose.yml"
NGINX = ROOT / "deploy" / "nginx.conf"


def _services() -> dict:
    return yaml.safe_load(COMPOSE.read_text())["services"]


def _upstream_servers(conf: str) -> tuple[str, list[str]]:
    match = re.search(r"upstream\s+(\w+)\s*\{(.*?)\}", conf, re.S)
    assert match, "deploy/nginx.conf has no upstream block"
    servers = re.findall(r"^\s*server\s+([\w.-]+:\d+)", match.group(2), re.M)
    return match.group(1), servers


def _web_replicas(services: dict) -> dict:
    return {name: s for name, s in services.items() if re.fullmatch(r"web-\d+", name)}


def test_two_alike_web_replicas_serve_only_through_the_balancer():
    services = _services()
    replicas = _web_replicas(services)
    assert sorted(replicas) == ["web-1", "web-2"]
    first, second = replicas.values()
    assert first == second  # one definition: the same image, command and settings
    for replica in replicas.values():
        assert "ports" not in replica  # no way around the balancer
        assert replica["expose"] == ["8000"]
        env = replica["environment"]
        # the balancer's X-Forwarded-* are believed, and no one else's
        balancer_ip = services["balancer"]["networks"]["edge"]["ipv4_address"]
        assert env["STUDIO_TRUSTED_PROXIES"] == balancer_ip
        assert "FORWARDED_ALLOW_IPS" not in env
        # everything an episode is lives in the shared database and Redis
        assert env["DATABASE_URL"].startswith("postgres://") and "@postgres:" in env["DATABASE_URL"]
        assert env["REDIS_URL"] == "redis://redis:6379/0"
    assert "web" not in services  # no third, unbalanced web service


def test_the_balancer_upstream_is_exactly_the_web_replicas():
    services = _services()
    balancer = services["balancer"]
    assert balancer["image"].startswith("nginx:")
    assert balancer["ports"] == ["8000:80"]
    assert "./deploy/nginx.conf:/etc/nginx/conf.d/default.conf:ro" in balancer["volumes"]
    assert set(balancer["depends_on"]) == set(_web_replicas(services))
    conf = NGINX.read_text()
    name, servers = _upstream_servers(conf)
    assert sorted(servers) == [f"{replica}:8000" for replica in sorted(_web_replicas(services))]
    assert re.search(rf"proxy_pass\s+http://{name};", conf)
    # an agent's WebSocket goes through; a long step is never cut by the balancer
    assert re.search(r"proxy_set_header\s+Upgrade\s+\$http_upgrade;", conf)
    assert re.search(r"proxy_set_header\s+Connection\s+\$connection_upgrade;", conf)
    assert int(re.search(r"proxy_read_timeout\s+(\d+)s;", conf).group(1)) >= 600


def test_the_balancers_access_log_never_holds_a_url():
    conf = NGINX.read_text()
    formats = re.findall(r"log_format\s+(\w+)\s+((?:'[^']*'\s*)+);", conf)
    assert formats, "the access log needs a format of its own (the default logs the URL)"
    used = re.search(r"access_log\s+\S+\s+(\w+);", conf)
    assert used and used.group(1) in dict(formats)
    text = dict(formats)[used.group(1)]
    for variable in ("$request ", "$request_uri", "$uri", "$args", "$query_string", "$request'"):
        assert variable not in text + " ", variable


def test_the_gpu_worker_batches_the_steps_of_many_episodes():
    gpu = _services()["worker-gpu"]
    command = gpu["command"]
    assert (
        command[command.index("-P") + 1] == "threads" and int(command[command.index("-c") + 1]) > 1
    )
    env = gpu["environment"]
    assert {"STUDIO_GPU_BATCH_WINDOW_MS", "STUDIO_GPU_BATCH_MAX_ROWS"} <= set(env)
    # a lost worker is told within seconds: every service reads the same setting
    for name, service in _services().items():
        if name.startswith(("web-", "worker-")):
            assert "STUDIO_WORKER_GONE_S" in service["environment"], name


def _compose_cli() -> list[str] | None:
    docker = shutil.which("docker")
    if (
        docker
        and subprocess.run([docker, "compose", "version"], capture_output=True).returncode == 0
    ):
        return [docker, "compose"]
    legacy = shutil.which("docker-compose")
    return [legacy] if legacy else None


def test_docker_compose_validates_the_file():
    cli = _compose_cli()
    if cli is None:
        pytest.skip("neither `docker compose` nor docker-compose is installed here")
    env = {**os.environ, "SECRET_KEY": "only-to-validate"}
    done = subprocess.run(
        [*cli, "-f", str(COMPOSE), "config", "-q"], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr


def test_nginx_accepts_the_balancers_config(tmp_path):
    nginx = shutil.which("nginx")
    if nginx is None:
        pytest.skip("nginx is not installed here")
    # the replicas' names resolve only inside compose's network: local ports stand in
    conf = re.sub(
        r"web-(\d+):8000", lambda m: f"127.0.0.1:{8000 + int(m.group(1))}", NGINX.read_text()
    )
    (tmp_path / "default.conf").write_text(conf)
    (tmp_path / "nginx.conf").write_text(
        f"pid {tmp_path}/nginx.pid;\nerror_log stderr;\nevents {{}}\n"
        f"http {{ include {tmp_path}/default.conf; }}\n"
    )
    done = subprocess.run(
        [nginx, "-t", "-c", str(tmp_path / "nginx.conf")], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
