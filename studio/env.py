"""Read configuration from the environment, failing loudly on values we cannot use."""

from __future__ import annotations

import os
import re
import socket
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from urllib.parse import parse_qs, unquote, urlparse


class ConfigError(RuntimeError):
    """A setting in the environment is missing or malformed."""


@contextmanager
def config_errors_exit(status: int = 1) -> Iterator[None]:
    """Around an entry point (manage.py, the ASGI/WSGI module, the Celery app): a ConfigError
    becomes one line on stderr naming the variable, then exit `status`. An operator who forgot
    a variable needs its name, not the 15 frames of Django's settings import above it."""
    try:
        yield
    except ConfigError as exc:
        print(f"configuration error: {exc}", file=sys.stderr, flush=True)
        raise SystemExit(status) from None


_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def env_str(name: str, default: str | None = None) -> str | None:
    value = os.environ.get(name)
    return default if value is None else value


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    lowered = raw.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ConfigError(
        f"{name}={raw!r} is not a boolean (use one of 1/0, true/false, yes/no, on/off)"
    )


def env_int(name: str, default: int, *, minimum: int | None = None) -> int:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not an integer") from None
    if minimum is not None and value < minimum:
        raise ConfigError(f"{name}={value} must be at least {minimum}")
    return value


def env_list(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None:
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def env_key_bindings(name: str) -> list[tuple[str, str]]:
    """`NAME=URL,NAME=URL`: environment variables holding API keys, each with the base URL
    (a prefix) it may be sent to. Malformed entries fail at start-up, naming the entry."""
    out: list[tuple[str, str]] = []
    for entry in env_list(name, []):
        var, sep, url = (part.strip() for part in entry.partition("="))
        if not sep or not _ENV_NAME.match(var):
            raise ConfigError(
                f"{name}: {entry!r} is not NAME=URL (NAME an environment variable name)"
            )
        if not url.startswith(("http://", "https://")) or not urlparse(url).netloc:
            raise ConfigError(f"{name}: {entry!r}: the URL must be http(s)://host[:port][/path]")
        out.append((var, url.rstrip("/")))
    return out


def parse_database_url(url: str) -> dict:
    """Turn `postgres://user:pass@host:port/name` or `sqlite:///path` into a DATABASES entry."""
    parsed = urlparse(url)
    scheme = parsed.scheme.lower()
    if scheme in {"sqlite", "sqlite3"}:
        # sqlite:///relative/path, sqlite:////absolute/path, sqlite://:memory:
        path = url.split("://", 1)[1]
        if path.startswith("/"):
            path = path[1:]
        if not path:
            raise ConfigError(f"DATABASE_URL={url!r} names no SQLite file")
        return {"ENGINE": "django.db.backends.sqlite3", "NAME": path}
    if scheme in {"postgres", "postgresql", "pgsql"}:
        name = unquote(parsed.path.lstrip("/"))
        if not name:
            raise ConfigError(f"DATABASE_URL={url!r} names no database (postgres://host/NAME)")
        options = {k: v[-1] for k, v in parse_qs(parsed.query).items()}
        return {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": name,
            "USER": unquote(parsed.username or ""),
            "PASSWORD": unquote(parsed.password or ""),
            "HOST": parsed.hostname or "",
            "PORT": str(parsed.port or ""),
            "OPTIONS": options,
            "CONN_MAX_AGE": 60,
        }
    raise ConfigError(
        f"DATABASE_URL={url!r} has an unsupported scheme {scheme!r} (use sqlite:/// or postgres://)"
    )


def redis_answers(host: str = "127.0.0.1", port: int = 6379, timeout: float = 0.3) -> bool:
    """True when something on host:port answers a Redis PING."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.settimeout(timeout)
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")
    except OSError:
        return False


BROKER_CHOICES = ("auto", "sqlite", "filesystem")


def choose_broker(
    redis_url: str | None, data_dir: str, forced: str | None = None
) -> tuple[str, dict, str]:
    """Pick the Celery broker: REDIS_URL, else a local Redis, else the embedded SQLite broker
    (`studio.jobs.sqlite_broker`, one file in the data dir).

    Returns (broker_url, transport_options, human description). `forced` (default: the
    environment's STUDIO_BROKER) picks an embedded broker even when Redis is around:
    `sqlite`, or `filesystem` (kombu's filesystem transport, kept for comparison: under load
    a worker can read a half-written message file and die, celery/kombu#1551).
    """
    if forced is None:
        forced = os.environ.get("STUDIO_BROKER") or "auto"
    forced = forced.strip().lower() or "auto"
    if forced not in BROKER_CHOICES:
        raise ConfigError(f"STUDIO_BROKER={forced!r} must be one of {', '.join(BROKER_CHOICES)}")
    if forced == "sqlite":
        return sqlite_broker(data_dir, "STUDIO_BROKER=sqlite")
    if forced == "filesystem":
        return _filesystem_broker(data_dir, "STUDIO_BROKER=filesystem")
    if redis_url:
        if not redis_url.startswith(("redis://", "rediss://", "unix://")):
            raise ConfigError(
                f"REDIS_URL={redis_url!r} must start with redis://, rediss:// or unix://"
            )
        return redis_url, {}, f"Redis at {redis_url} (REDIS_URL)"
    if redis_answers():
        return "redis://127.0.0.1:6379/0", {}, "local Redis at 127.0.0.1:6379 (answered a PING)"
    return sqlite_broker(data_dir, "no Redis found")


# The transport class behind a `sqlite://` broker URL (settings.CELERY_BROKER_TRANSPORT).
SQLITE_TRANSPORT = "studio.jobs.sqlite_broker:Transport"


def sqlite_broker(data_dir: str, why: str) -> tuple[str, dict, str]:
    path = os.path.join(os.path.abspath(data_dir), "broker.sqlite3")
    options = {
        # How often an idle worker looks for a message (kombu's default is 1 s).
        "polling_interval": 0.1,
        "busy_timeout_s": 30,
    }
    return f"sqlite:///{path}", options, f"embedded SQLite broker in {path} ({why})"


def _filesystem_broker(data_dir: str, why: str) -> tuple[str, dict, str]:
    folder = os.path.join(data_dir, "broker")
    for sub in ("in", "processed", "control"):
        os.makedirs(os.path.join(folder, sub), exist_ok=True)
    options = {
        "data_folder_in": os.path.join(folder, "in"),
        "data_folder_out": os.path.join(folder, "in"),
        "processed_folder": os.path.join(folder, "processed"),
        "store_processed": False,
        # How often a worker looks for new message files (kombu's default is 1 s).
        "polling_interval": 0.2,
        # Fanout/control exchange files; kombu's default is ./control in the working directory.
        "control_folder": os.path.join(folder, "control"),
    }
    # The host part means nothing to this transport, but kombu's virtual transports default
    # a missing one to localhost and log "No hostname was supplied" on every connection a
    # process makes (each `simulate` that sends a job): naming localhost says the same, quietly.
    return "filesystem://localhost/", options, f"embedded filesystem transport in {folder} ({why})"


# ---- what scripts/dev.sh chose, for a shell in another terminal ----------------------------

DEV_RUNTIME_FILE = "dev-runtime.json"
# Any of these in the environment: it says what to use, never the file.
DEV_RUNTIME_OVERRIDDEN_BY = ("DATABASE_URL", "REDIS_URL", "STUDIO_BROKER")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, someone else's
        return True
    except OSError:
        return False
    return True


def read_dev_runtime(
    data_dir: str,
    environ: Mapping[str, str] | None = None,
    settings_module: str | None = None,
) -> dict | None:
    """The database and broker that a running `scripts/dev.sh` chose for `data_dir`, recorded
    in `data_dir/dev-runtime.json`, so that `manage.py` or a worker in another terminal uses
    them (dev.sh may have been told STUDIO_BROKER=sqlite, or Redis may have come or gone
    since). None, and nothing is read from the file, when:
    - the environment names a database or broker itself (DATABASE_URL, REDIS_URL,
      STUDIO_BROKER: tests and CI always do), or the settings are not the studio's own
      (the test settings never follow a developer's server);
    - the file records another data dir (a copied var/), or a dev.sh that no longer runs
      (its file outlived it: killed with SIGKILL, the machine restarted)."""
    import json

    env: Mapping[str, str] = os.environ if environ is None else environ
    if any(env.get(name) for name in DEV_RUNTIME_OVERRIDDEN_BY):
        return None
    if settings_module is None:
        settings_module = env.get("DJANGO_SETTINGS_MODULE", "studio.settings")
    if settings_module != "studio.settings":
        return None
    path = os.path.join(data_dir, DEV_RUNTIME_FILE)
    try:
        with open(path, encoding="utf-8") as f:
            recorded = json.load(f)
    except (OSError, ValueError):
        return None
    if not isinstance(recorded, dict):
        return None
    same_dir = os.path.realpath(str(recorded.get("data_dir", ""))) == os.path.realpath(data_dir)
    pid = recorded.get("pid")
    if not same_dir or not isinstance(pid, int) or not _pid_alive(pid):
        return None
    if recorded.get("broker") not in BROKER_CHOICES[1:] + ("redis",):
        return None
    if recorded.get("broker") == "redis" and not str(recorded.get("redis_url", "")):
        return None
    return recorded


def write_dev_runtime(
    data_dir: str, *, pid: int, database_url: str, broker_url: str, description: str
) -> str:
    """Record what dev.sh (process `pid`) chose (see `read_dev_runtime`); returns the path.
    Written whole or not at all: a reader never sees half a file."""
    import json
    import time

    if broker_url.startswith(("redis://", "rediss://", "unix://")):
        broker, redis_url = "redis", broker_url
    elif broker_url.startswith("sqlite:"):
        broker, redis_url = "sqlite", ""
    else:
        broker, redis_url = "filesystem", ""
    record = {
        "data_dir": os.path.realpath(data_dir),
        "pid": pid,
        "database_url": database_url,
        "broker": broker,
        "redis_url": redis_url,
        "broker_description": description,
        "written_at": time.time(),
    }
    path = os.path.join(data_dir, DEV_RUNTIME_FILE)
    tmp = f"{path}.{os.getpid()}.tmp"
    # it may hold a database password: readable by its owner only
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(record, f, indent=2)
    os.replace(tmp, path)
    return path
