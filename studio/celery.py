"""The Celery application. Queues: `default` (imports, retrieval/HTTP simulations), `gpu`
(in-process transformers model, one model per worker process, concurrency 1) and `episodes`
(steps of episodes played by outside agents: a threads pool waits on many model calls at
once; see `studio.jobs.episode_steps`).

Every worker sweeps for jobs of dead workers and lost messages on a timer of its own
(`JobSweeper`): no beat process is needed, and a job is failed even when nobody opens its
page. Every worker also writes its heartbeat row every few seconds (`WorkerHeartbeat`): pages
say at once when no worker consumes a queue, or when a job's worker went away.

This module imports the job modules, never the other way round: the sweeper is handed the
app (`studio.jobs.sweeper.sweep(app)`)."""

from __future__ import annotations

import logging
import os
import threading

from celery import Celery, bootsteps
from celery.signals import worker_init, worker_process_init, worker_shutdown

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "studio.settings")

app = Celery("studio")
app.config_from_object("django.conf:settings", namespace="CELERY")


@app.on_configure.connect
def _settings_or_one_line(**_kwargs) -> None:
    """Import the settings as Celery starts reading them (a worker does while parsing its
    command line), so that a missing or malformed variable prints one line naming it and
    exits with status 1, not a traceback through click. In the web process the settings
    are long loaded when a job is first sent: this does nothing there."""
    from django.conf import settings

    from studio.env import config_errors_exit

    with config_errors_exit():
        settings.INSTALLED_APPS  # noqa: B018 - the first read imports studio.settings


app.autodiscover_tasks(["studio"])


class JobSweeper(bootsteps.StartStopStep):
    """Runs `studio.jobs.sweeper.sweep` when the worker starts, then every
    STUDIO_JOB_STALE_S / 4 seconds, in a daemon thread of the worker's main process: it
    sweeps while a solo-pool worker (the GPU worker) runs a job, and its database and broker
    calls never hold up the consumer. It starts after the pool, so processes forked at start
    never see it; each sweep closes its database connection."""

    requires = {"celery.worker.components:Pool"}

    def __init__(self, worker, **kwargs):
        super().__init__(worker, **kwargs)
        self.stopping = threading.Event()
        self.thread: threading.Thread | None = None

    def start(self, worker):
        self.app = worker.app
        self.thread = threading.Thread(target=self.loop, name="job-sweeper", daemon=True)
        self.thread.start()

    def loop(self):
        from studio.jobs.runtime import sweep_interval_s
        from studio.jobs.sweeper import sweep

        sweep(self.app)
        while not self.stopping.wait(sweep_interval_s()):
            sweep(self.app)

    def stop(self, worker):
        self.stopping.set()


app.steps["worker"].add(JobSweeper)


class WorkerHeartbeat(bootsteps.StartStopStep):
    """Writes this worker's row (`studio.models.WorkerHeartbeat`: its name, the queues it
    consumes, pid, pool) when it starts and every STUDIO_WORKER_GONE_S / 3 seconds, from a
    daemon thread of the main process (as the sweeper: it beats while a solo pool runs a
    job), and marks it stopped once a clean shutdown has finished its jobs. Pages and
    `simulate --wait` read it (`studio.services.workers`): no worker on a queue, or a job's
    worker gone, shows within seconds."""

    requires = {"celery.worker.components:Pool"}

    def __init__(self, worker, **kwargs):
        super().__init__(worker, **kwargs)
        self.stopping = threading.Event()
        self.thread: threading.Thread | None = None

    def start(self, worker):
        from django.utils import timezone

        self.name = worker.hostname
        self.pid = os.getpid()
        self.started_at = timezone.now()
        self.worker = worker
        worker.studio_heartbeat = self  # for `_worker_stopped`
        self.thread = threading.Thread(target=self.loop, name="worker-heartbeat", daemon=True)
        self.thread.start()

    def facts(self) -> dict:
        worker = self.worker
        try:
            queues = list(worker.app.amqp.queues.consume_from or worker.app.amqp.queues)
        except AttributeError:
            queues = []
        pool = getattr(worker, "pool_cls", None)
        return {
            "queues": queues,
            "pid": self.pid,
            "pool": (getattr(pool, "__module__", "") or "").rsplit(".", 1)[-1],
            "concurrency": int(getattr(worker, "concurrency", 0) or 0),
            "started_at": self.started_at,
        }

    def beat(self) -> None:
        from django.db import connection

        from studio.services.workers import record_beat

        try:
            record_beat(self.name, **self.facts())
        except Exception:  # a database that is down: the next beat tries again
            logging.getLogger(__name__).warning("worker heartbeat failed", exc_info=True)
        finally:
            connection.close()  # never leave a connection to the pool processes forked later

    def loop(self):
        from studio.services.workers import beat_interval_s

        self.beat()
        while not self.stopping.wait(beat_interval_s()):
            self.beat()

    def stop(self, worker):
        """Nothing yet: a warm shutdown stops this step before the pool, which then finishes
        the jobs it runs; the worker beats on until `worker_shutdown` (below), or a job still
        finishing would look orphaned."""

    def finish(self) -> None:
        """The worker is done (its pool stopped): say so in its row."""
        from django.db import connection

        from studio.services.workers import record_stop

        if self.stopping.is_set():
            return
        self.stopping.set()
        if self.thread is not None:
            self.thread.join(timeout=5)
        try:
            record_stop(self.name, self.pid)
        except Exception:  # the row goes silent instead: gone within STUDIO_WORKER_GONE_S
            logging.getLogger(__name__).warning("could not record the worker's stop", exc_info=True)
        finally:
            connection.close()

    def terminate(self, worker):
        self.finish()  # a cold shutdown: the pool's jobs are killed with it


app.steps["worker"].add(WorkerHeartbeat)


@worker_shutdown.connect
def _worker_stopped(sender=None, **_kwargs) -> None:
    step = getattr(sender, "studio_heartbeat", None)
    if step is not None:
        step.finish()


@worker_init.connect
@worker_process_init.connect
def _warm_up(**_kwargs) -> None:
    """Import what a simulation job needs in each pool process as it starts (prefork), or
    in the worker itself (threads, solo), so the first job a process runs (an episode's step
    above all) does not pay for the imports (the `openai` client alone takes about a
    second). Torch is not imported: gpu workers load it with their model."""
    import importlib

    for module in (
        "openai",
        "inference.backends.openai_compat",
        "inference.simulation.runner",
        "inference.worlds",
        "studio.jobs.simulation",
        "studio.jobs.episode_steps",
        "studio.services.episodes",
    ):
        try:
            importlib.import_module(module)
        except ImportError:  # a module renamed or an extra not installed: only slower
            pass
    # The first tool schema checked in a process builds jsonschema's meta-schema validators
    # (about 60 ms): done here, not by the first steps of the first episodes, which would all
    # wait for it together.
    try:
        from inference.worlds import parse_world

        parse_world(
            {
                "name": "warm-up",
                "domain": "mcp",
                "tools": [{"type": "function", "function": {"name": "t", "parameters": {}}}],
            }
        )
    except Exception:  # noqa: BLE001 - a warm-up only: the first step pays instead
        pass
