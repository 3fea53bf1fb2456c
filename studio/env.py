"""Read configuration from the environment, failing loudly on values we cannot use."""

from __future__ import annotations

import os
import re
import socket
import sys
from collections.abc import Iterator
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


def choose_broker(redis_url: str | None, data_dir: str) -> tuple[str, dict, str]:
    """Pick the Celery broker: REDIS_URL, else a local Redis, else kombu's filesystem transport.

    Returns (broker_url, transport_options, human description). STUDIO_BROKER=filesystem
    forces the embedded transport even when Redis is around (to try the no-Redis set-up).
    """
    forced = (os.environ.get("STUDIO_BROKER") or "auto").strip().lower()
    if forced not in {"auto", "filesystem"}:
        raise ConfigError(f"STUDIO_BROKER={forced!r} must be auto or filesystem")
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
    return _filesystem_broker(data_dir, "no Redis found")


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
    return "filesystem://", options, f"embedded filesystem transport in {folder} ({why})"
