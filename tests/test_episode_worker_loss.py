"""A lost worker, told to the waiting agent within seconds as a retryable EpisodeUnavailable
(HTTP 503 with Retry-After), from the workers' heartbeat rows (`studio.services.step_watch`):
a worker killed mid-step, a queue no worker consumes, a queued step whose worker died (sent
again), an agent that stopped waiting. No step is lost or written twice."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest
from django.utils import timezone

from inference.worlds import parse_world
from studio.models import JobStatus, SimulationJob, Step, Trajectory, WorkerHeartbeat
from studio.services import episodes, step_watch
from studio.services.endpoints import EndpointData, make_default, save_endpoint
from studio.services.tokens import create_token
from studio.services.worlds import save_world
from tests.support.fake_openai import fake_openai_server
from tests.support.worker import running_worker, wait_for

WORLD = {"name": "Shell", "domain": "terminal", "description": "A box.", "files": {"/a": "1"}}
GONE_S = 2  # a worker silent for 2 s is gone (it beats every 0.67 s)
WORKER_ENV = {"STUDIO_WORKER_GONE_S": str(GONE_S)}
ANSWER = "<predicted_observation>a</predicted_observation>"


def _episode(project, base_url: str):
    endpoint = save_endpoint(
        project,
        EndpointData(name="fake", role="world", kind="openai", base_url=base_url, model="m"),
    ).endpoint
    make_default(endpoint)
    world = save_world(project, parse_world(WORLD)).world
    token, _ = create_token(project, "agent")
    trajectory, _ = episodes.reset(token, world, task="look", seed=7, max_steps=5)
    return token, trajectory


def _send(token, trajectory, action: str = "ls") -> SimulationJob:
    from studio.tasks import enqueue_episode_step

    job = episodes.start_step(token, trajectory.pk, {"action": action})
    enqueue_episode_step(job)
    return job


def _wait_in_loop(job):
    """The web side's wait for `job`, on an event loop of its own (as uvicorn's), started now."""
    from studio.serving.steps import answer_of

    pool = ThreadPoolExecutor(1)
    future = pool.submit(asyncio.run, answer_of(job))
    pool.shutdown(wait=False)
    return future


@pytest.mark.django_db(transaction=True)
@pytest.mark.worker
@pytest.mark.usefixtures("isolated_queues")
def test_a_worker_killed_mid_step_is_a_503_in_seconds_and_the_retry_is_the_one_step(
    project, settings, tmp_path
):
    settings.STUDIO_WORKER_GONE_S = GONE_S
    hold = threading.Event()

    def answer(request, index):
        if index == 0:
            hold.wait(timeout=120)  # the first step is mid-answer when its worker dies
        return ANSWER

    with fake_openai_server(answer) as srv:
        token, trajectory = _episode(project, srv.base_url)
        first_log = tmp_path / "first-worker.log"  # its own: another's "ready." is not its
        with running_worker(
            ("episodes",), pool="threads", concurrency=2, extra_env=WORKER_ENV, log_path=first_log
        ) as proc:
            job = _send(token, trajectory)
            waiting = _wait_in_loop(job)
            wait_for(lambda: len(srv.requests) == 1, timeout=60)  # the model is answering
            assert SimulationJob.objects.get(pk=job.pk).status == JobStatus.RUNNING
            os.killpg(proc.pid, signal.SIGKILL)  # the worker and everything it runs, no cleanup
            proc.wait()
            killed_at = time.monotonic()
            with pytest.raises(episodes.EpisodeUnavailable) as lost:
                waiting.result(timeout=60)
        heard_after = time.monotonic() - killed_at
        assert heard_after < 4 * GONE_S + 3, heard_after  # seconds, not the sweeper's minutes
        assert lost.value.status == 503 and lost.value.retry_after
        assert "stopped" in str(lost.value) and "send it again" in str(lost.value)
        failed = SimulationJob.objects.get(pk=job.pk)
        assert failed.status == JobStatus.FAILED and failed.finished_at is not None
        assert not Step.objects.filter(branch__trajectory=trajectory).exists()
        # a new worker: the agent's retry is answered, at the same index
        log = tmp_path / "worker.log"
        with running_worker(
            ("episodes",), pool="threads", concurrency=2, extra_env=WORKER_ENV, log_path=log
        ):
            retry = _send(token, trajectory)
            assert retry.fork_index == 0
            result = _wait_in_loop(retry).result(timeout=60)
            assert result.observation["text"] == "a" and result.observation["step"] == 1
            # the dead worker's message, delivered again, finds its job failed: not run
            from studio.tasks import run_episode_step

            run_episode_step.apply_async(args=[job.pk], queue=job.queue, task_id=job.message_id)
            ignored = f"SimulationJob {job.pk} is failed; not running it again"
            wait_for(lambda: ignored in log.read_text(), timeout=60)
        hold.set()
    steps = list(Step.objects.filter(branch__trajectory=trajectory))
    assert [(s.index, s.action, s.observation) for s in steps] == [(0, "ls", "a")]
    assert Trajectory.objects.get(pk=trajectory.pk).step_count == 1
    assert SimulationJob.objects.get(pk=job.pk).status == JobStatus.FAILED
    assert len(srv.requests) == 2  # the killed step and its retry: nothing ran twice


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("isolated_queues")
def test_a_step_no_worker_consumes_is_a_503_naming_the_queue(project, settings):
    settings.STUDIO_WORKER_GONE_S = GONE_S
    token, trajectory = _episode(project, "http://127.0.0.1:9/v1")
    job = _send(token, trajectory)
    started = time.monotonic()
    with pytest.raises(episodes.EpisodeUnavailable) as refused:
        _wait_in_loop(job).result(timeout=60)
    assert time.monotonic() - started < 10
    assert f"No worker consumes queue {job.queue}" in str(refused.value)
    assert "celery -A studio worker" in str(refused.value)  # how to start one
    assert SimulationJob.objects.get(pk=job.pk).status == JobStatus.FAILED
    # the agent may send it again (nothing was recorded)
    assert episodes.start_step(token, trajectory.pk, {"action": "ls"}).fork_index == 0


def _heartbeat(name: str, queue: str, *, seen_s_ago: float, started_s_ago: float = 600):
    now = timezone.now()
    WorkerHeartbeat.objects.create(
        name=name,
        queues=[queue],
        pid=1,
        pool="threads",
        concurrency=4,
        started_at=now - timedelta(seconds=started_s_ago),
        seen_at=now - timedelta(seconds=seen_s_ago),
    )


@pytest.mark.django_db
def test_a_queued_step_whose_worker_died_since_it_was_sent_is_sent_again(
    project, settings, monkeypatch
):
    """Its message may sit in the dead worker's unacknowledged set for hours: a live worker
    gets it again, and the waiting agent its answer."""
    settings.STUDIO_WORKER_GONE_S = GONE_S
    monkeypatch.setattr(step_watch, "_cache", (0.0, []))
    sent: list[tuple[int, str]] = []

    def resend(pk, previous):
        sent.append((pk, previous))
        return True

    token, trajectory = _episode(project, "http://127.0.0.1:9/v1")
    job = episodes.start_step(token, trajectory.pk, {"action": "ls"})
    _heartbeat("alive@h", job.queue, seen_s_ago=0)
    assert (
        step_watch.watch(job.pk, resend=resend) is None and sent == []
    )  # waiting its turn: left alone
    SimulationJob.objects.filter(pk=job.pk).update(
        dispatched_at=timezone.now() - timedelta(seconds=30)
    )
    _heartbeat("dead@h", job.queue, seen_s_ago=10)  # alive after the message went, gone now
    monkeypatch.setattr(step_watch, "_cache", (0.0, []))
    assert step_watch.watch(job.pk, resend=resend) is None
    assert sent == [(job.pk, job.message_id)]


@pytest.mark.django_db
def test_a_running_step_of_a_live_worker_is_left_alone_and_an_abandoned_queued_one_cancelled(
    project, settings, monkeypatch
):
    settings.STUDIO_WORKER_GONE_S = GONE_S
    monkeypatch.setattr(step_watch, "_cache", (0.0, []))
    token, trajectory = _episode(project, "http://127.0.0.1:9/v1")
    job = episodes.start_step(token, trajectory.pk, {"action": "ls"})
    _heartbeat("alive@h", job.queue, seen_s_ago=0)
    old = timezone.now() - timedelta(seconds=60)
    SimulationJob.objects.filter(pk=job.pk).update(
        status=JobStatus.RUNNING, worker="alive@h", started_at=old, heartbeat_at=old
    )
    assert step_watch.watch(job.pk) is None  # its worker beats: it is only slow
    assert SimulationJob.objects.get(pk=job.pk).status == JobStatus.RUNNING
    assert not step_watch.abandon(job.pk)  # a worker has it: its answer will be recorded
    SimulationJob.objects.filter(pk=job.pk).update(status=JobStatus.QUEUED)
    assert step_watch.abandon(job.pk)
    cancelled = SimulationJob.objects.get(pk=job.pk)
    assert cancelled.status == JobStatus.CANCELLED and "stopped waiting" in cancelled.error
    with pytest.raises(episodes.EpisodeConflict, match="cancelled"):
        episodes.step_result(cancelled)


@pytest.mark.django_db
def test_the_sweeper_cancels_a_queued_step_no_agent_waits_for(project, settings, monkeypatch):
    """A waiting web process marks its queued step; one unmarked for STUDIO_JOB_STALE_S
    (its web process went with the agent's connection) is cancelled, never run later."""
    from studio.jobs.sweeper import cancel_unwaited_steps

    settings.STUDIO_JOB_STALE_S = 8  # marked every 2 s, unwaited after 8 s
    monkeypatch.setattr(step_watch, "_cache", (0.0, []))
    token, trajectory = _episode(project, "http://127.0.0.1:9/v1")
    job = episodes.start_step(token, trajectory.pk, {"action": "ls"})
    _heartbeat("alive@h", job.queue, seen_s_ago=0)
    SimulationJob.objects.filter(pk=job.pk).update(created_at=timezone.now() - timedelta(seconds=5))
    assert step_watch.watch(job.pk) is None  # the agent waits: its step is marked
    assert SimulationJob.objects.get(pk=job.pk).heartbeat_at is not None
    assert cancel_unwaited_steps() == 0
    old = timezone.now() - timedelta(seconds=9)
    SimulationJob.objects.filter(pk=job.pk).update(created_at=old, heartbeat_at=old)
    assert cancel_unwaited_steps() == 1
    gone = SimulationJob.objects.get(pk=job.pk)
    assert gone.status == JobStatus.CANCELLED and "stopped waiting" in gone.error
