"""Start a real Celery worker process against the test database and the configured broker."""

from __future__ import annotations

import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from django.conf import settings
from django.db import connection

ROOT = Path(__file__).resolve().parents[2]
# The workers this test process runs now (the session's shared ones too), by pid: their names
_RUNNING: dict[int, str] = {}


def test_database_url() -> str:
    s = connection.settings_dict
    if s["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{s['NAME']}"
    auth = s["USER"] or ""
    if s["PASSWORD"]:
        auth += f":{s['PASSWORD']}"
    host = s["HOST"] or "127.0.0.1"
    port = f":{s['PORT']}" if s["PORT"] else ""
    return f"postgres://{auth}{'@' if auth else ''}{host}{port}/{s['NAME']}"


def worker_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "DATABASE_URL": test_database_url(),
            "STUDIO_QUEUE_PREFIX": settings.STUDIO_QUEUE_PREFIX,
            "STUDIO_DATA_DIR": str(settings.DATA_DIR),
            "DEBUG": "1",
            "PYTHONUNBUFFERED": "1",
        }
    )
    if settings.REDIS_URL:
        env["REDIS_URL"] = settings.REDIS_URL
    env.update(extra or {})
    return env


@contextmanager
def running_worker(
    queues: tuple[str, ...] = ("default", "gpu"),
    *,
    extra_env: dict[str, str] | None = None,
    log_path: Path | None = None,
    pool: str = "prefork",
    concurrency: int = 1,
) -> Iterator[subprocess.Popen]:
    """A `celery worker` subprocess consuming this test run's queues; stopped on exit."""
    prefix = settings.STUDIO_QUEUE_PREFIX
    names = ",".join(f"{prefix}{q}" for q in queues)
    log_path = log_path or Path(settings.DATA_DIR) / f"worker-{os.getpid()}.log"
    log = open(log_path, "ab")  # noqa: SIM115 - closed below
    # the log may be shared with an earlier worker of this test process: only what this one
    # writes says it is ready
    log_start = log.tell()
    name = f"test-{os.getpid()}-{time.monotonic_ns()}@{socket.gethostname()}"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "studio",
            "worker",
            "-Q",
            names,
            "-c",
            str(concurrency),
            "--pool",
            pool,
            "-l",
            "INFO",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
            "-n",
            name,
        ],
        cwd=ROOT,
        env=worker_env(extra_env),
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    _RUNNING[proc.pid] = name
    try:
        _wait_ready(proc, log_path, start=log_start)
        yield proc
    finally:
        del _RUNNING[proc.pid]
        # Killed outright: a test's jobs are drained before its worker goes (tests/conftest),
        # and a warm shutdown costs seconds a worker; nothing of this run's queues is kept.
        _kill_group(proc.pid)
        proc.wait()
        log.close()


@contextmanager
def other_workers_paused(*mine: subprocess.Popen) -> Iterator[None]:
    """Every worker this test process runs but `mine` (the session's shared worker, when an
    earlier test started it) stopped meanwhile, pool processes too (SIGSTOP): its sweeper
    would fail a job whose worker is gone, at a time of its own, in the middle of a test of
    what a page says meanwhile. They go on afterwards, each having beaten again (a page of the
    next test must not read them as gone)."""
    from studio.services.workers import heartbeats

    keep = {proc.pid for proc in mine}
    paused = {pid: name for pid, name in _RUNNING.items() if pid not in keep}

    def signal_all(sig: int) -> None:
        for pid in paused:
            os.killpg(pid, sig)

    def stopped_between_writes() -> bool:
        signal_all(signal.SIGSTOP)
        if _sqlite_writable():
            return True
        signal_all(signal.SIGCONT)  # stopped inside a write (a beat, a sweep): not there
        return False

    wait_for(stopped_between_writes, timeout=30, interval=0.05)
    try:
        yield
    finally:
        resumed = time.time()
        signal_all(signal.SIGCONT)

        def beaten() -> bool:
            seen = {w.name: w.seen_at.timestamp() for w in heartbeats()}
            return all(seen.get(name, 0) >= resumed for name in paused.values())

        wait_for(beaten, timeout=30)


def _sqlite_writable() -> bool:
    """Whether no process holds SQLite's write lock (a worker stopped inside a transaction
    would hold it, and every write of the test would wait on it); always on PostgreSQL,
    whose row locks a stopped worker's beat or sweep holds on rows no test writes."""
    if connection.vendor != "sqlite":
        return True
    probe = sqlite3.connect(connection.settings_dict["NAME"], timeout=0)
    try:
        probe.execute("BEGIN IMMEDIATE")
        probe.rollback()
        return True
    except sqlite3.OperationalError:
        return False
    finally:
        probe.close()


def _kill_group(pgid: int) -> None:
    """Whatever of the worker's process group outlived it (a pool process)."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _wait_ready(
    proc: subprocess.Popen, log_path: Path, timeout: float = 60, start: int = 0
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"worker exited early:\n{log_path.read_text()[-4000:]}")
        if b"ready." in log_path.read_bytes()[start:]:
            return
        time.sleep(0.2)
    raise RuntimeError(f"worker not ready after {timeout}s:\n{log_path.read_text()[-4000:]}")


def wait_for(predicate, timeout: float = 60.0, interval: float = 0.2):
    """Poll `predicate` until it returns something truthy; fail with its last value."""
    deadline = time.monotonic() + timeout
    value = None
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"condition not met within {timeout}s (last value: {value!r})")


def purge_test_queues() -> None:
    """Drop what this test run left in its broker queues."""
    from studio.celery import app

    prefix = settings.STUDIO_QUEUE_PREFIX
    try:
        with app.connection_for_write() as conn:
            channel = conn.default_channel
            for base in ("default", "gpu"):
                channel.queue_purge(f"{prefix}{base}")
    except Exception:  # noqa: BLE001 - a broker that is down has nothing to purge
        pass
