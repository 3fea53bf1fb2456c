"""Which Celery workers are alive, from the heartbeat row each writes every few seconds (the
`WorkerHeartbeat` bootstep of `studio.celery`): a job page or `simulate --wait` says within
seconds that no worker consumes a job's queue, or that the worker running a job stopped
answering, instead of showing a job that waits or runs for ever.

A worker is alive while its row was written within STUDIO_WORKER_GONE_S (15 s; it writes
every third of that) and it did not shut down. On SQLite a long write transaction (an
import's) can keep every other writer out for longer than that, so there the worker also
keeps a pulse file in the data dir (as running jobs do, `studio.jobs.runtime`), and the
fresher of the two counts.

The worker that claimed a job (`JobBase.worker`, its Celery hostname) is gone when its row
is silent or stopped, or when a new process has started under its name since the claim
(scripts/dev.sh restarts a worker that died: the job died with the old process).

Reading never writes; only the worker's own bootstep calls `record_beat`/`record_stop`."""

from __future__ import annotations

import json
import logging
import os
import re
import shlex
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import connection
from django.utils import timezone

from studio.models import JobStatus, WorkerHeartbeat

log = logging.getLogger(__name__)

# Rows of workers not heard of for this long are deleted by the next worker to beat (a
# container's hostname changes with every start: its rows would pile up).
FORGET_AFTER = timedelta(days=7)


def gone_after_s() -> float:
    """STUDIO_WORKER_GONE_S: a worker silent this long is gone."""
    return float(getattr(settings, "STUDIO_WORKER_GONE_S", 15))


def beat_interval_s() -> float:
    return max(0.5, gone_after_s() / 3)


def orphan_after_s() -> float:
    """A running job whose worker is gone, and that has not beaten itself for this long, is
    orphaned (`studio.jobs.runtime.orphaned`). A worker counts as gone `gone_after_s()` after
    its last beat, so its jobs' own beats are at least this old by then."""
    return max(1.0, gone_after_s() - beat_interval_s())


# ---- the worker's side --------------------------------------------------------------------


def _uses_pulse() -> bool:
    return connection.vendor == "sqlite"


def _pulse_dir() -> Path:
    return Path(settings.DATA_DIR) / "pulse"


def _pulse_path(name: str) -> Path:
    return _pulse_dir() / f"worker-{re.sub(r'[^A-Za-z0-9_.@-]', '_', name)}.json"


def record_beat(
    name: str, *, queues: list[str], pid: int, pool: str, concurrency: int, started_at: datetime
) -> None:
    """One heartbeat of worker `name` (its pulse first on SQLite: a file never waits on the
    database's lock)."""
    now = timezone.now()
    fields = {
        "queues": sorted(queues),
        "pid": pid,
        "pool": pool,
        "concurrency": concurrency,
        "started_at": started_at,
        "seen_at": now,
        "stopped_at": None,
    }
    if _uses_pulse():
        _write_pulse(name, fields)
    WorkerHeartbeat.objects.update_or_create(name=name, defaults=fields)
    WorkerHeartbeat.objects.filter(seen_at__lt=now - FORGET_AFTER).delete()


def record_stop(name: str, pid: int) -> None:
    """A clean shutdown: the row says when (only if it is still this process's)."""
    now = timezone.now()
    if _uses_pulse():
        _pulse_path(name).unlink(missing_ok=True)
    WorkerHeartbeat.objects.filter(name=name, pid=pid).update(stopped_at=now, seen_at=now)


def _write_pulse(name: str, fields: dict[str, Any]) -> None:
    path = _pulse_path(name)
    record = {
        "name": name,
        **{k: v.timestamp() if isinstance(v, datetime) else v for k, v in fields.items()},
    }
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(record))
        os.replace(tmp, path)  # readers never see half a file
    except OSError:
        log.warning("could not write the pulse of worker %s", name, exc_info=True)


def _read_pulses() -> dict[str, WorkerHeartbeat]:
    """Workers as their pulse files say (unsaved rows), by name; only on SQLite."""
    if not _uses_pulse():
        return {}
    found: dict[str, WorkerHeartbeat] = {}
    try:
        paths = list(_pulse_dir().glob("worker-*.json"))
    except OSError:
        return {}
    for path in paths:
        try:
            data = json.loads(path.read_text())
            found[str(data["name"])] = WorkerHeartbeat(
                name=str(data["name"]),
                queues=list(data.get("queues") or []),
                pid=int(data.get("pid") or 0),
                pool=str(data.get("pool") or ""),
                concurrency=int(data.get("concurrency") or 0),
                started_at=_from_ts(data.get("started_at")),
                seen_at=_from_ts(data.get("seen_at")),
            )
        except (OSError, ValueError, KeyError, TypeError):
            continue  # being replaced, or not one of ours
    return found


def _from_ts(value: Any) -> datetime:
    return datetime.fromtimestamp(float(value or 0), tz=UTC)


# ---- what pages and commands read ---------------------------------------------------------


def heartbeats() -> list[WorkerHeartbeat]:
    """Every worker the studio has heard of, freshest data first (a pulse fresher than its
    row wins)."""
    rows = {row.name: row for row in WorkerHeartbeat.objects.all()}
    for name, pulse in _read_pulses().items():
        row = rows.get(name)
        if row is None or (row.stopped_at is None and pulse.seen_at > row.seen_at):
            rows[name] = pulse
    return sorted(rows.values(), key=lambda w: w.seen_at, reverse=True)


def is_alive(worker: WorkerHeartbeat, now: datetime | None = None) -> bool:
    now = now or timezone.now()
    return worker.stopped_at is None and (now - worker.seen_at).total_seconds() < gone_after_s()


def live_workers() -> list[WorkerHeartbeat]:
    now = timezone.now()
    return [w for w in heartbeats() if is_alive(w, now)]


def queue_consumers(queue: str) -> list[WorkerHeartbeat]:
    """The live workers that consume `queue` (its full name, with STUDIO_QUEUE_PREFIX)."""
    return [w for w in live_workers() if queue in (w.queues or [])]


def queue_of(job: Any) -> str:
    """The queue a job's message goes to (an import has no field: the default queue)."""
    from studio.queues import queue_name

    return getattr(job, "queue", "") or queue_name("default")


@dataclass(frozen=True)
class WorkerState:
    """What is known of the worker that claimed a running job."""

    name: str
    alive: bool
    # when it was last heard of, or (restarted) when the new process under its name started
    since: datetime
    silent_s: float  # seconds since `since`
    stopped: bool = False  # shut down (cleanly) since
    restarted: bool = False  # a new process under its name since the claim


def worker_state(job: Any) -> WorkerState | None:
    """Whether the worker that claimed a RUNNING job is alive or gone; None when that cannot
    be told (not running, no worker recorded, or a worker that writes no heartbeat row: the
    job's own heartbeat still tells, `studio.jobs.runtime`)."""
    if job.status != JobStatus.RUNNING or not getattr(job, "worker", ""):
        return None
    found = {w.name: w for w in heartbeats()}.get(job.worker)
    if found is None:
        return None
    now = timezone.now()
    if job.started_at is not None and found.started_at > job.started_at + timedelta(seconds=1):
        return WorkerState(
            name=found.name,
            alive=False,
            since=found.started_at,
            silent_s=max(0.0, (now - found.started_at).total_seconds()),
            restarted=True,
        )
    return WorkerState(
        name=found.name,
        alive=is_alive(found, now),
        since=found.seen_at,
        silent_s=max(0.0, (now - found.seen_at).total_seconds()),
        stopped=found.stopped_at is not None,
    )


def queue_status(job: Any) -> dict[str, Any] | None:
    """For a QUEUED job whose queue no live worker consumes: the queue and how to start a
    worker for it; None otherwise."""
    if job.status != JobStatus.QUEUED:
        return None
    queue = queue_of(job)
    if queue_consumers(queue):
        return None
    return {"queue": queue, "start": start_command(queue)}


def start_command(queue: str) -> str:
    """A command that starts a worker for `queue`, run from the checkout (the pool that
    scripts/dev.sh runs for that queue; its gpu worker has STUDIO_GPU_THREADS threads,
    docker-compose's 16, as here)."""
    prefix = settings.STUDIO_QUEUE_PREFIX
    base = queue[len(prefix) :] if prefix and queue.startswith(prefix) else queue
    env = []
    if os.environ.get("STUDIO_DATA_DIR"):
        env.append(f"STUDIO_DATA_DIR={shlex.quote(str(settings.DATA_DIR))}")
    if settings.DEBUG:
        env.append("DEBUG=1")
    options = {
        # one model per process (needs the gpu extra), shared by threads whose episode
        # steps go as one engine call (`inference.step_batcher`)
        "gpu": "-P threads -c 16",
        "episodes": "-P threads -c 32",  # each thread waits on a model server's answer
    }.get(base, "-c 2")
    # a name of its own: never the same as dev.sh's jobs@, gpu@ and episodes@ workers, whose
    # heartbeat rows it would overwrite
    name = f"{re.sub(r'[^A-Za-z0-9_-]', '-', base)}-worker@%h"
    return " ".join(
        [
            *env,
            ".venv/bin/python -m celery -A studio worker",
            f"-Q {shlex.quote(queue)} {options} -l INFO -n {shlex.quote(name)}",
        ]
    )


def describe_start(queue: str) -> str:
    """One line for a terminal: what to run so that `queue` has a worker."""
    return (
        f"no worker is consuming queue {queue}: start one (scripts/dev.sh starts them), "
        f"e.g. in another terminal: {start_command(queue)}"
    )
