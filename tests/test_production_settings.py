"""What the README's "Production: docker compose" and "HTTPS, security headers ..." sections
claim, checked against a web replica started as the image starts it (tests/
test_compose_settings.py: the compose environment, the image's static files, the CMD), with
the variables the sections document for a studio behind a TLS-terminating proxy: compose's
defaults are the plain-HTTP ones it states, `check --deploy` (run in the service the README
names) prints what the README prints, the health check answers over plain HTTP, the rest is
redirected to HTTPS, / sends to the sign-in, the security headers the README lists are on an
HTTPS response, and the static files resolve. A SQLite file stands in for PostgreSQL: nothing
here reads a table."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.test_compose_settings import (
    COMPOSE,
    MACHINE,
    SECRET,
    collect_static_as_the_image_does,
    compose_environment,
    get,
    in_image,
    linked_static,
    served,
)

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
HOST = "studio.example.com"


def section(title: str) -> str:
    start = README.index(f"\n## {title}")
    return README[start : README.index("\n## ", start + 1)]


PRODUCTION = section("Production: docker compose")
HTTPS = section("HTTPS, security headers and the Content-Security-Policy")


def documented_tls_proxy_variables() -> dict[str, str]:
    """The variables the production section says to set in front of a TLS proxy."""
    (span,) = [s for s in re.findall(r"`([^`]+)`", PRODUCTION) if "STUDIO_BEHIND_TLS_PROXY=1" in s]
    return dict(word.split("=", 1) for word in shlex.split(span))


def documented_check_deploy() -> tuple[str, list[str]]:
    """The service and command the production section runs `check --deploy` in."""
    match = re.search(r"`docker compose exec (\S+) (python manage\.py check --deploy)`", PRODUCTION)
    assert match, "the production section no longer says how to run check --deploy"
    return match.group(1), shlex.split(match.group(2))


def documented_headers() -> dict[str, str]:
    """`Header-Name: value` the HTTPS section says responses carry by default."""
    spans = re.findall(r"`([A-Z][A-Za-z-]+): ([^`]+)`", HTTPS)
    return {name: value for name, value in spans if name != "X-Forwarded-Proto"}


@pytest.fixture(scope="module")
def replica(tmp_path_factory) -> dict[str, str]:
    """The web replica's environment with the documented TLS-proxy variables."""
    image = tmp_path_factory.mktemp("container")
    env = {
        **collect_static_as_the_image_does(image),
        **in_image(compose_environment("web-1", {"SECRET_KEY": SECRET}), image),
        **documented_tls_proxy_variables(),
    }
    env["DATABASE_URL"] = f"sqlite:///{image / 'studio.sqlite3'}"  # for compose's postgres
    env.pop("REDIS_URL")
    env["STUDIO_BROKER"] = "filesystem"  # nothing is sent to a worker here
    return env


def test_compose_defaults_are_the_plain_http_ones_the_section_states():
    env = compose_environment("web-1", {"SECRET_KEY": SECRET})
    said = (
        "(the balancer ends no TLS), so its defaults are `STUDIO_SSL_REDIRECT=0` and "
        "`SECURE_COOKIES=0`"
    )
    assert said in " ".join(PRODUCTION.split())
    assert (env["STUDIO_SSL_REDIRECT"], env["SECURE_COOKIES"]) == ("0", "0")
    assert env["STUDIO_BEHIND_TLS_PROXY"] == "0" and "DEBUG" not in env
    assert documented_tls_proxy_variables() == {
        "STUDIO_BEHIND_TLS_PROXY": "1",
        "STUDIO_SSL_REDIRECT": "1",
        "SECURE_COOKIES": "1",
        "ALLOWED_HOSTS": HOST,
        "CSRF_TRUSTED_ORIGINS": f"https://{HOST}",
    }


def test_check_deploy_in_the_named_service_reports_what_the_readme_prints(replica):
    service, command = documented_check_deploy()
    assert service in yaml.safe_load(COMPOSE.read_text())["services"]
    assert command[0] == "python"
    clean = {k: v for k, v in os.environ.items() if k in MACHINE}
    done = subprocess.run(
        [sys.executable, *command[1:], "--fail-level", "WARNING"], cwd=ROOT,
        env={**clean, **replica}, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    printed = " ".join(re.search(r"it prints `([^`]+)`", HTTPS).group(1).split())
    assert done.stdout.strip() == printed == "System check identified no issues (1 silenced)."


def test_the_replica_behind_a_tls_proxy_answers_as_the_sections_say(replica, tmp_path):
    headers = documented_headers()
    assert set(headers) >= {
        "Strict-Transport-Security", "X-Frame-Options", "X-Content-Type-Options",
        "Referrer-Policy", "Cross-Origin-Opener-Policy",
    }  # fmt: skip
    host = {"Host": HOST}
    https = {**host, "X-Forwarded-Proto": "https"}  # what the proxy that ends TLS sends
    with served(replica, tmp_path / "web.log") as base:
        # load balancers probe over plain HTTP: not redirected
        assert get(f"{base}/healthz", host)[:1] == (200,)
        status, answer, _ = get(f"{base}/login/", host)
        assert (status, answer["Location"]) == (301, f"https://{HOST}/login/")
        status, answer, _ = get(f"{base}/", https)
        assert (status, answer["Location"]) == (302, "/login/?next=/")
        status, answer, page = get(f"{base}/login/", https)
        assert status == 200
        for name, value in headers.items():
            assert answer[name] == value, name
        csp = answer["Content-Security-Policy"]
        assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp
        cookie = answer["Set-Cookie"]
        assert cookie.startswith("csrftoken=") and "Secure" in cookie
        links = linked_static(page.decode())
        assert "/static/css/studio.css" in links
        for link in links:
            status, _, body = get(base + link, https)
            assert status == 200, link
            assert body == (ROOT / "static" / link.removeprefix("/static/")).read_bytes()
