"""One monitor thread per worker process for the short jobs it runs many of at once (steps of
episodes, on a threads pool): it beats the heartbeat of every such job in flight and reads
their cancel requests, in one UPDATE and one SELECT per tick however many there are.

`studio.jobs.runtime.JobMonitor` gives each job a thread and a database connection of its own,
which is right for a long job that writes live progress; for a step of an episode that lasts a
model call, a thread and a new connection per step cost more than the rest of the studio's
work on it. A job shorter than one tick is never touched here: its claim wrote its first
heartbeat and its finish ends it."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from django.db import connection
from django.utils import timezone

from studio.jobs.runtime import (
    drop_failed_connection,
    heartbeat_interval_s,
    single_writer_db,
    write_pulse,
)
from studio.models import JobStatus, SimulationJob

log = logging.getLogger(__name__)

TICK_S = 0.5  # how soon a cancel request is seen (the job pages poll as often)


class Flight:
    """What the monitor tells one job: whether it was asked to stop."""

    def __init__(self) -> None:
        self.cancel_requested = False


class InFlight:
    def __init__(self) -> None:
        self._jobs: dict[int, Flight] = {}
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._thread: threading.Thread | None = None
        self._last_beat = 0.0

    @contextmanager
    def track(self, job_id: int) -> Iterator[Flight]:
        flight = Flight()
        with self._lock:
            self._jobs[job_id] = flight
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="inflight", daemon=True)
                self._thread.start()
            self._wake.notify()
        try:
            yield flight
        finally:
            with self._lock:
                self._jobs.pop(job_id, None)

    def _run(self) -> None:
        import time

        try:
            while True:
                with self._lock:
                    idle = not self._jobs
                if idle:
                    connection.close()  # nothing in flight: hold no connection meanwhile
                with self._lock:
                    while not self._jobs:  # idle: sleep until a job starts
                        self._wake.wait()
                # a job's first tick comes TICK_S after it started: most steps end before
                time.sleep(TICK_S)
                with self._lock:
                    jobs = dict(self._jobs)
                if jobs:
                    self._tick(jobs, time.monotonic())
        finally:
            connection.close()

    def _tick(self, jobs: dict[int, Flight], now: float) -> None:
        ids = list(jobs)
        if single_writer_db():
            # SQLite: an import's long write transaction can keep the heartbeat below from
            # being written; the sweeper takes a fresh pulse for one (studio.jobs.runtime)
            for pk in ids:
                write_pulse(SimulationJob, pk, {"phase": "answering"})
        try:
            drop_failed_connection()
            if now - self._last_beat >= heartbeat_interval_s():
                self._last_beat = now
                SimulationJob.objects.filter(pk__in=ids, status=JobStatus.RUNNING).update(
                    heartbeat_at=timezone.now()
                )
            rows = SimulationJob.objects.filter(pk__in=ids).values_list(
                "pk", "cancel_requested", "status"
            )
            seen, stopping = set(), []
            for pk, cancel, status in rows:
                seen.add(pk)
                if (cancel or status != JobStatus.RUNNING) and not jobs[pk].cancel_requested:
                    jobs[pk].cancel_requested = True
                    stopping.append(pk)
            for pk in set(ids) - seen:  # deleted meanwhile: nothing to write into
                jobs[pk].cancel_requested = True
            if stopping:  # the page can say the worker is stopping, not only that it was asked
                SimulationJob.objects.filter(pk__in=stopping, status=JobStatus.RUNNING).update(
                    phase="cancelling"
                )
        except Exception:  # a flaky database must not stop the monitor; the next tick retries
            log.exception("heartbeat of %s jobs in flight failed", len(jobs))


inflight = InFlight()
