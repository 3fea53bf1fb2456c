"""Production settings, each in a process of its own as an operator starts one: with DEBUG off
and the required variables `manage.py check --deploy` has nothing to say, HTTPS is enforced
(redirect, HSTS, secure cookies), each switch for the set-up in front of the studio changes
what it says it changes, and a missing or malformed variable is one line naming it with
exit status 1, from manage.py, the ASGI module uvicorn imports and the Celery worker."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# 50 characters of 5+ kinds, not django-insecure-: what check --deploy asks of a key
SECRET = "x8Kq2vN7pR4tW9yB3mF6hJ1cL5sD0gA-u_eZiOoXrTnVbQwYkP"
PRODUCTION = {"DEBUG": "0", "SECRET_KEY": SECRET, "ALLOWED_HOSTS": "studio.example.com"}
HSTS_YEAR = 365 * 24 * 3600

# Settings the switches decide, read by a fresh process (settings are read once, at import).
SHOW_SETTINGS = """
import json
import django
from django.conf import settings
django.setup()
print(json.dumps({name: getattr(settings, name, None) for name in (
    "DEBUG", "SECURE_SSL_REDIRECT", "SECURE_PROXY_SSL_HEADER", "SECURE_HSTS_SECONDS",
    "SECURE_HSTS_INCLUDE_SUBDOMAINS", "SECURE_HSTS_PRELOAD", "SESSION_COOKIE_SECURE",
    "CSRF_COOKIE_SECURE", "X_FRAME_OPTIONS", "SECURE_CONTENT_TYPE_NOSNIFF",
    "SECURE_REFERRER_POLICY", "SILENCED_SYSTEM_CHECKS")}))
"""

# Requests through the whole middleware stack, as a browser behind a TLS proxy sends them.
REQUESTS = """
import json
import django
django.setup()
from django.test import Client
c = Client(HTTP_HOST="studio.example.com")
plain = c.get("/login/")
proxied = c.get("/login/", HTTP_X_FORWARDED_PROTO="https")
health = c.get("/healthz")
print(json.dumps({
    "plain": [plain.status_code, plain.headers.get("Location", "")],
    "proxied": [proxied.status_code, proxied.headers.get("Strict-Transport-Security", ""),
                proxied.headers.get("Content-Security-Policy", ""),
                proxied.headers.get("X-Frame-Options", ""),
                bool(proxied.cookies["csrftoken"]["secure"])],
    "health": health.status_code,
}))
"""


def run(args: list[str], tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    """`args` in a fresh process with only the environment given (plus what any process
    needs): nothing of the developer's or the test run's configuration leaks in."""
    clean = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TMPDIR")}
    clean.update(
        {
            "DJANGO_SETTINGS_MODULE": "studio.settings",
            "STUDIO_DATA_DIR": str(tmp_path),
            "DATABASE_URL": f"sqlite:///{tmp_path / 'deploy.sqlite3'}",
            "STUDIO_BROKER": "filesystem",
            "PYTHONPATH": str(ROOT),
        }
    )
    clean.update(env)
    return subprocess.run(
        args, cwd=ROOT, env=clean, capture_output=True, text=True, timeout=120, check=False
    )


def manage(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    return run([sys.executable, "manage.py", *args], tmp_path, **env)


def settings_of(tmp_path: Path, **env: str) -> dict:
    done = run([sys.executable, "-c", SHOW_SETTINGS], tmp_path, **env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_check_deploy_has_nothing_to_say_with_production_settings(tmp_path):
    done = manage(tmp_path, "check", "--deploy", "--fail-level", "WARNING", **PRODUCTION)
    assert done.returncode == 0, done.stdout + done.stderr
    # preload is the one check silenced, on purpose (see studio/settings.py)
    assert done.stdout.strip() == "System check identified no issues (1 silenced)."
    assert "WARNINGS" not in done.stderr, done.stderr


@pytest.fixture(scope="module")
def production(tmp_path_factory) -> dict:
    """The settings of the production environment with no switch set."""
    return settings_of(tmp_path_factory.mktemp("production"), **PRODUCTION)


def test_production_defaults_enforce_https(production):
    assert production == {
        "DEBUG": False,
        "SECURE_SSL_REDIRECT": True,
        "SECURE_PROXY_SSL_HEADER": None,  # no proxy is trusted unless one is said to be there
        "SECURE_HSTS_SECONDS": HSTS_YEAR,
        "SECURE_HSTS_INCLUDE_SUBDOMAINS": True,
        "SECURE_HSTS_PRELOAD": False,
        "SESSION_COOKIE_SECURE": True,
        "CSRF_COOKIE_SECURE": True,
        "X_FRAME_OPTIONS": "DENY",
        "SECURE_CONTENT_TYPE_NOSNIFF": True,
        "SECURE_REFERRER_POLICY": "same-origin",
        "SILENCED_SYSTEM_CHECKS": ["security.W021"],
    }


@pytest.mark.parametrize(
    ("switch", "changed"),
    [
        ({"STUDIO_BEHIND_TLS_PROXY": "1"}, {"SECURE_PROXY_SSL_HEADER": ["HTTP_X_FORWARDED_PROTO", "https"]}),
        ({"STUDIO_SSL_REDIRECT": "0"}, {"SECURE_SSL_REDIRECT": False}),
        ({"STUDIO_HSTS_SECONDS": "3600"}, {"SECURE_HSTS_SECONDS": 3600}),
        ({"STUDIO_HSTS_SECONDS": "0"}, {"SECURE_HSTS_SECONDS": 0}),
        ({"STUDIO_HSTS_PRELOAD": "1"}, {"SECURE_HSTS_PRELOAD": True, "SILENCED_SYSTEM_CHECKS": []}),
        ({"SECURE_COOKIES": "0"}, {"SESSION_COOKIE_SECURE": False, "CSRF_COOKIE_SECURE": False}),
        # the local set-up (scripts/dev.sh, the tests): plain http://127.0.0.1 keeps working
        ({"DEBUG": "1"}, {"DEBUG": True, "SECURE_SSL_REDIRECT": False, "SECURE_HSTS_SECONDS": 0,
                          "SESSION_COOKIE_SECURE": False, "CSRF_COOKIE_SECURE": False}),
    ],
    ids=["behind-proxy", "no-redirect", "hsts-hour", "no-hsts", "preload", "plain-cookies", "debug"],
)  # fmt: skip
def test_each_switch_changes_its_setting_and_only_it(tmp_path, production, switch, changed):
    found = settings_of(tmp_path, **{**PRODUCTION, **switch})
    assert {k: v for k, v in found.items() if production[k] != v} == changed


def test_a_switch_turned_off_is_what_check_deploy_then_warns_about(tmp_path):
    done = manage(tmp_path, "check", "--deploy", **PRODUCTION, STUDIO_SSL_REDIRECT="0")
    assert done.returncode == 0
    assert "security.W008" in done.stderr
    assert "System check identified 1 issue (1 silenced)." in done.stderr


def test_behind_a_tls_proxy_plain_http_is_redirected_and_https_gets_every_header(tmp_path):
    done = run(
        [sys.executable, "-c", REQUESTS], tmp_path, **PRODUCTION, STUDIO_BEHIND_TLS_PROXY="1"
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["plain"] == [301, "https://studio.example.com/login/"]
    status, hsts, csp, frame_options, secure_cookie = found["proxied"]
    assert status == 200
    assert hsts == f"max-age={HSTS_YEAR}; includeSubDomains"
    assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp
    assert frame_options == "DENY" and secure_cookie
    assert found["health"] == 200  # load balancers probe over plain HTTP: not redirected


@pytest.mark.parametrize(
    ("env", "line"),
    [
        (
            {"DEBUG": "0", "ALLOWED_HOSTS": "studio.example.com"},
            "configuration error: SECRET_KEY must be set when DEBUG is off "
            "(export SECRET_KEY=... or DEBUG=1)",
        ),
        (
            {"DEBUG": "0", "SECRET_KEY": SECRET},
            "configuration error: ALLOWED_HOSTS must be set when DEBUG is off "
            "(comma-separated host names)",
        ),
        (
            {**PRODUCTION, "STUDIO_HSTS_SECONDS": "a year"},
            "configuration error: STUDIO_HSTS_SECONDS='a year' is not an integer",
        ),
        (
            {**PRODUCTION, "STUDIO_BEHIND_TLS_PROXY": "maybe"},
            "configuration error: STUDIO_BEHIND_TLS_PROXY='maybe' is not a boolean "
            "(use one of 1/0, true/false, yes/no, on/off)",
        ),
    ],
    ids=["no-secret-key", "no-allowed-hosts", "bad-hsts", "bad-proxy-switch"],
)
def test_manage_py_names_the_bad_variable_in_one_line(tmp_path, env, line):
    done = manage(tmp_path, "check", **env)
    assert (done.returncode, done.stdout, done.stderr) == (1, "", line + "\n")


@pytest.mark.parametrize(
    "args",
    [
        [sys.executable, "-c", "import studio.asgi"],  # what uvicorn studio.asgi:application does
        [sys.executable, "-c", "import studio.wsgi"],
        [sys.executable, "-m", "celery", "-A", "studio", "worker", "-l", "INFO"],
    ],
    ids=["asgi", "wsgi", "celery-worker"],
)
def test_servers_and_workers_name_the_missing_variable_in_one_line(tmp_path, args):
    done = run(args, tmp_path, DEBUG="0", ALLOWED_HOSTS="studio.example.com")
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stderr == (
        "configuration error: SECRET_KEY must be set when DEBUG is off "
        "(export SECRET_KEY=... or DEBUG=1)\n"
    )
