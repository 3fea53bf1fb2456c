"""Celery tasks and enqueueing. Tasks are thin: they take a job id and call the job's body in
`studio.jobs`; all state lives in the job rows.

acks_late + reject_on_worker_lost: a message is acknowledged only once its task returns, and
a worker killed mid-task puts it back on the queue. Each message carries an id recorded on
the job row (`message_id`, and `claimed_by` for the one that ran it). The claim runs a job
once: a message for a job that already runs is ignored, and the sweeper fails a job whose
heartbeat stopped. See `studio.jobs.runtime`.

Web code enqueues with `enqueue_simulation` / `enqueue_import`: the message goes out once the
transaction that created the job commits, never for a row that might roll back."""

from __future__ import annotations

import logging
import threading
import uuid
from typing import TYPE_CHECKING, Any

from celery import shared_task
from django.conf import settings
from django.db import transaction
from django.utils import timezone

# the names a job body sends its next message by (it never imports this module)
from studio.jobs.dispatch import (
    BEHAVIOUR_TASK,
    CAMPAIGN_TASK,
    EPISODE_STEP_TASK,
    EVALUATION_TASK,
    JUDGE_TASK,
)
from studio.models import (
    ArenaRun,
    BehaviourSearch,
    Campaign,
    EvaluationRun,
    ExportJob,
    FineTuneRun,
    ImportJob,
    JobStatus,
    JudgeJob,
    SimulationJob,
)
from studio.queues import queue_name

if TYPE_CHECKING:
    from studio.jobs.runtime import JobModel

log = logging.getLogger(__name__)

JOB_TASK_OPTIONS = {
    "bind": True,
    "acks_late": True,
    "reject_on_worker_lost": True,
    "soft_time_limit": settings.STUDIO_JOB_SOFT_LIMIT_S,
    "time_limit": settings.STUDIO_JOB_HARD_LIMIT_S,
    "ignore_result": True,
}

SIMULATION_TASK = "studio.run_simulation_job"
IMPORT_TASK = "studio.run_import_job"
EXPORT_TASK = "studio.run_export_job"
ARENA_TASK = "studio.advance_arena"
PROBE_TASK = "studio.probe_endpoint"
SEARCH_INDEX_TASK = "studio.index_search"  # = studio.search.indexer.INDEX_TASK


@shared_task(name=SIMULATION_TASK, **JOB_TASK_OPTIONS)
def run_simulation_job(self, job_id: int) -> None:
    from studio.jobs.runtime import drop_failed_connection
    from studio.jobs.simulation import run_simulation_job as body

    drop_failed_connection()
    if SimulationJob.objects.filter(pk=job_id, appends=True).exists():
        # a step that appends to its branch (an episode's, the playground's) sent as a
        # simulation's message (before the episodes queue existed): the episode's path
        from studio.jobs.episode_steps import run_episode_step as body  # type: ignore[assignment]
    try:
        body(job_id, self.request.id or "")
    finally:
        poke_arena_of(SimulationJob, job_id)
        release_memory()


# A step of an episode runs on the episodes queue's threads pool, which has no time limits
# (Celery enforces them only in prefork): the runner stops itself at the soft limit.
EPISODE_TASK_OPTIONS = {
    k: v for k, v in JOB_TASK_OPTIONS.items() if k not in ("soft_time_limit", "time_limit")
}


@shared_task(name=EPISODE_STEP_TASK, **EPISODE_TASK_OPTIONS)
def run_episode_step(self, job_id: int) -> None:
    from studio.jobs.episode_steps import run_episode_step as body
    from studio.jobs.runtime import drop_failed_connection

    drop_failed_connection()
    try:
        body(job_id, self.request.id or "")
    finally:
        if threading.current_thread() is threading.main_thread():
            release_memory()  # prefork or solo (the gpu worker); never per step on threads


@shared_task(name=IMPORT_TASK, **JOB_TASK_OPTIONS)
def run_import_job(self, job_id: int) -> None:
    from studio.jobs.imports import run_import_job as body
    from studio.jobs.runtime import drop_failed_connection

    drop_failed_connection()
    try:
        body(job_id, self.request.id or "")
    finally:
        release_memory()


@shared_task(name=EVALUATION_TASK, **JOB_TASK_OPTIONS)
def run_evaluation(self, run_id: int) -> None:
    from studio.jobs.evaluations import run_evaluation as body
    from studio.jobs.runtime import drop_failed_connection

    drop_failed_connection()
    try:
        body(run_id, self.request.id or "")
    finally:
        release_memory()


@shared_task(name=JUDGE_TASK, **JOB_TASK_OPTIONS)
def run_judge_job(self, job_id: int) -> None:
    from studio.jobs.judging import run_judge_job as body
    from studio.jobs.runtime import drop_failed_connection

    drop_failed_connection()
    try:
        body(job_id, self.request.id or "")
    finally:
        poke_arena_of(JudgeJob, job_id)
        release_memory()


@shared_task(name=BEHAVIOUR_TASK, **JOB_TASK_OPTIONS)
def run_behaviour_search(self, job_id: int) -> None:
    from studio.jobs.behaviour import run_behaviour_search as body
    from studio.jobs.runtime import drop_failed_connection

    drop_failed_connection()
    try:
        body(job_id, self.request.id or "")
    finally:
        release_memory()


@shared_task(name=ARENA_TASK, **JOB_TASK_OPTIONS)
def advance_arena(self, arena_id: int) -> None:
    """One look at an arena: start its next phase when the last one is over, or check again
    in a few seconds (a new message with a countdown, never a worker waiting)."""
    from studio.jobs.arena import advance_arena as body
    from studio.jobs.runtime import drop_failed_connection

    drop_failed_connection()
    try:
        body(arena_id, self.request.id or "")
    finally:
        release_memory()


@shared_task(name=CAMPAIGN_TASK, **JOB_TASK_OPTIONS)
def run_campaign(self, campaign_id: int) -> None:
    from studio.jobs.campaigns import run_campaign as body
    from studio.jobs.runtime import drop_failed_connection

    drop_failed_connection()
    try:
        body(campaign_id, self.request.id or "")
    finally:
        release_memory()


FINETUNE_TASK = "studio.run_finetune"  # = studio.jobs.finetunes.FINETUNE_TASK


@shared_task(name=FINETUNE_TASK, **JOB_TASK_OPTIONS)
def run_finetune(self, run_id: int) -> None:
    from studio.jobs.finetunes import run_finetune as body
    from studio.jobs.runtime import drop_failed_connection

    drop_failed_connection()
    try:
        body(run_id, self.request.id or "")
    finally:
        release_memory()


def poke_arena_of(model: type[SimulationJob] | type[JudgeJob], job_id: int) -> None:
    """A simulation or judge job of an arena ended (or gave up): the arena looks at once
    instead of at its next check. Never raises: the job's own end is what matters."""
    try:
        arena_id = model.objects.filter(pk=job_id).values_list("arena_id", flat=True).first()
        if arena_id is not None:
            _send(ArenaRun, arena_id, None)
    except Exception:  # the arena's timer looks anyway
        log.exception("could not tell arena of %s %s", model.__name__, job_id)


@shared_task(name=EXPORT_TASK, **JOB_TASK_OPTIONS)
def run_export_job(self, job_id: int) -> None:
    from studio.jobs.exports import run_export_job as body
    from studio.jobs.runtime import drop_failed_connection

    drop_failed_connection()
    try:
        body(job_id, self.request.id or "")
    finally:
        release_memory()


@shared_task(name=SEARCH_INDEX_TASK, **JOB_TASK_OPTIONS)
def index_search(self) -> None:
    """Index the steps imports wrote unindexed (`studio.search.indexer`): no job row, no id;
    idempotent, and two at once share the work. Sent on an import's commit, again by itself
    when its time is up with steps left, and by the sweeper when steps wait and none runs."""
    from studio.jobs.runtime import drop_failed_connection
    from studio.search.indexer import run_indexing

    drop_failed_connection()
    try:
        run_indexing()
    finally:
        release_memory()


@shared_task(name=PROBE_TASK, ignore_result=True, soft_time_limit=600, time_limit=660)
def probe_endpoint(endpoint_id: int) -> None:
    from studio.jobs.endpoint_probe import probe_in_process_endpoint

    try:
        probe_in_process_endpoint(endpoint_id)
    finally:
        release_memory()


def release_memory() -> None:
    """Give freed memory back to the system after a job (glibc keeps it in its heap), so an
    idle worker does not keep the peak of its largest job."""
    import ctypes
    import gc

    from django.db import reset_queries

    reset_queries()  # with DEBUG on, Django logs every query (with its parameters) until then
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: nothing to trim
        pass


# ---- enqueueing ---------------------------------------------------------------------------


def _send(model: JobModel, pk: int, previous: str | None, countdown: float | None = None) -> bool:
    """Record a new message id on the row, then send the message. `previous`: only if the
    row still names that message (another sweeper may have re-sent it meanwhile).
    `countdown`: the message runs that many seconds from now (an arena's next check)."""
    message_id = uuid.uuid4().hex
    rows = model.objects.filter(pk=pk, status=JobStatus.QUEUED)
    if previous is not None:
        rows = rows.filter(message_id=previous)
    if not rows.update(message_id=message_id, dispatched_at=timezone.now()):
        return False
    task: Any
    if model is SimulationJob:
        queue, appends = SimulationJob.objects.values_list("queue", "appends").get(pk=pk)
        task = run_episode_step if appends else run_simulation_job
    elif model is EvaluationRun:
        task, queue = (
            run_evaluation,
            EvaluationRun.objects.values_list("queue", flat=True).get(pk=pk),
        )
    elif model is JudgeJob:
        task, queue = run_judge_job, JudgeJob.objects.values_list("queue", flat=True).get(pk=pk)
    elif model is BehaviourSearch:
        task = run_behaviour_search
        queue = BehaviourSearch.objects.values_list("queue", flat=True).get(pk=pk)
    elif model is ExportJob:
        task, queue = run_export_job, ExportJob.objects.values_list("queue", flat=True).get(pk=pk)
    elif model is ArenaRun:
        task, queue = advance_arena, ArenaRun.objects.values_list("queue", flat=True).get(pk=pk)
    elif model is Campaign:
        task, queue = run_campaign, Campaign.objects.values_list("queue", flat=True).get(pk=pk)
    elif model is FineTuneRun:
        task = run_finetune
        queue = FineTuneRun.objects.values_list("queue", flat=True).get(pk=pk)
    else:
        task, queue = run_import_job, queue_name("default")
    try:
        task.apply_async(args=[pk], queue=queue, task_id=message_id, countdown=countdown)
    except Exception:  # the broker is down: the sweeper sends it again once it is back
        log.exception("could not send the message of %s %s", model.__name__, pk)
        return False
    return True


def enqueue_simulation(job: SimulationJob) -> None:
    transaction.on_commit(lambda: _send(SimulationJob, job.pk, None))


def enqueue_episode_step(job: SimulationJob) -> None:
    """A step of an episode: its row was made with its message id (`services.episodes`), so
    the message goes out on commit with no further write."""
    transaction.on_commit(
        lambda: _publish_episode_step(job.pk, job.queue, job.message_id), robust=True
    )


def _publish_episode_step(pk: int, queue: str, message_id: str) -> None:
    try:
        run_episode_step.apply_async(args=[pk], queue=queue, task_id=message_id)
    except Exception:  # the broker is down: the sweeper sends it again once it is back
        log.exception("could not send the message of episode step %s", pk)


def enqueue_evaluation(run: EvaluationRun) -> None:
    transaction.on_commit(lambda: _send(EvaluationRun, run.pk, None))


def enqueue_judging(job: JudgeJob) -> None:
    transaction.on_commit(lambda: _send(JudgeJob, job.pk, None))


def enqueue_behaviour_search(job: BehaviourSearch) -> None:
    """A new or resumed behaviour search: its message goes out once the transaction commits."""
    transaction.on_commit(lambda: _send(BehaviourSearch, job.pk, None))


def enqueue_arena(arena: ArenaRun) -> None:
    """A new arena: its simulations, and its first look (which finds them running and
    looks again later), once the transaction that made them commits."""
    for job in SimulationJob.objects.filter(arena=arena, status=JobStatus.QUEUED):
        enqueue_simulation(job)
    transaction.on_commit(lambda: _send(ArenaRun, arena.pk, None))


def recheck_arena(arena_id: int, previous: str, countdown: float) -> bool:
    """The arena's next look in `countdown` s, by the message that looked now (`previous`):
    only one chain of checks runs, the one the row names."""
    return _send(ArenaRun, arena_id, previous, countdown=countdown)


def enqueue_campaign(campaign: Campaign) -> None:
    """A new or resumed campaign: its message goes out once the transaction commits."""
    transaction.on_commit(lambda: _send(Campaign, campaign.pk, None))


def enqueue_finetune(run: FineTuneRun) -> None:
    """A new or resumed fine-tune: its message goes out once the transaction commits."""
    transaction.on_commit(lambda: _send(FineTuneRun, run.pk, None))


def enqueue_export(job: ExportJob) -> None:
    transaction.on_commit(lambda: _send(ExportJob, job.pk, None))


def enqueue_import(job: ImportJob) -> None:
    transaction.on_commit(lambda: _send(ImportJob, job.pk, None))


def enqueue_endpoint_probe(endpoint_id: int) -> None:
    """Ask a gpu worker to load an in-process model and answer one token."""
    transaction.on_commit(
        lambda: probe_endpoint.apply_async(args=[endpoint_id], queue=queue_name("gpu"))
    )


def redispatch(model: JobModel, pk: int, previous: str) -> bool:
    """Send a queued job's message again (the sweeper found the old one lost)."""
    return _send(model, pk, previous)
