"""Celery tasks: thin wrappers taking ids; the work and all state live in services and rows.

acks_late + reject_on_worker_lost: a message is acknowledged only once its task returns, and a
worker killed mid-task puts it back on the queue; the claim in `job_runtime.claim` makes the
redelivery harmless (see the worker-loss policy there)."""

from __future__ import annotations

import logging

from celery import shared_task
from celery.signals import worker_ready
from django.conf import settings

log = logging.getLogger(__name__)

JOB_TASK_OPTIONS = {
    "acks_late": True,
    "reject_on_worker_lost": True,
    "soft_time_limit": settings.STUDIO_JOB_SOFT_LIMIT_S,
    "time_limit": settings.STUDIO_JOB_HARD_LIMIT_S,
    "ignore_result": True,
}


@shared_task(name="studio.run_simulation_job", **JOB_TASK_OPTIONS)
def run_simulation_job(job_id: int) -> None:
    from studio.services.simulation import run_simulation

    run_simulation(job_id)


@shared_task(name="studio.run_import_job", **JOB_TASK_OPTIONS)
def run_import_job(job_id: int) -> None:
    from studio.services.import_jobs import run_import

    run_import(job_id)


@shared_task(name="studio.reap_lost_jobs", ignore_result=True)
def reap_lost_jobs() -> int:
    from studio.services.job_runtime import reap_stale_jobs

    return reap_stale_jobs()


@worker_ready.connect
def reap_jobs_of_lost_workers(sender=None, **_kwargs) -> None:
    """Safety net without a periodic task: a starting worker fails jobs whose worker died.
    A worker restarted at once after a crash sees the dead job's heartbeat still fresh, so it
    also asks for one more sweep once that heartbeat must have gone stale."""
    from django.db import connection

    from studio.celery import queue_name
    from studio.services.job_runtime import reap_stale_jobs, stale_after_s

    try:
        reap_stale_jobs()
        reap_lost_jobs.apply_async(countdown=stale_after_s() + 1, queue=queue_name("default"))
    except Exception:  # never keep a worker from starting
        log.exception("could not check for jobs of lost workers")
    finally:
        connection.close()  # do not hand an open connection to forked pool processes
