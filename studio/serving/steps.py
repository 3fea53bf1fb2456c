"""An episode's step as the servers of `studio.serving` play it: queue the step, wait for the
worker's answer. Shared by the episode API (`studio.serving.episodes`) and the MCP server
(`studio.serving.mcp`), which the episode API mounts: in a module of its own, the two never
import each other both ways."""

from __future__ import annotations

import asyncio

from asgiref.sync import sync_to_async
from django.conf import settings

from studio.jobs import replies
from studio.models import SimulationJob
from studio.services import episodes

POLL_S = (0.005, 0.1)  # without Redis, a waiting step reads its job row this often (backoff)


def db(fn):
    """ORM work off the event loop, in the thread pool (many episodes wait at once)."""
    return sync_to_async(fn, thread_sensitive=False)


async def run_step(
    token, episode_id, action, *, world_id: int | None = None, check_token: bool = False
) -> episodes.StepResult:
    """The step of an episode, whatever the transport (HTTP, WebSocket, MCP): the action
    checked (storable text, its size, the token's rate), then answered by the episode's
    world model. A served one (OpenAI-compatible) answers in this process
    (`studio.serving.direct`: no job, no worker); an in-process model (GPU) runs in a worker,
    as a job. `world_id`: the world in the URL (an episode of another world is
    EpisodeNotFound). `check_token`: refuse a token revoked since the connection opened
    (episodes.TokenRevoked). Raises EpisodeError subclasses only."""
    from studio.services import episode_limits
    from studio.services.episode_inputs import clean_text
    from studio.serving import direct

    text = episodes.action_text(clean_text(action, "action"))
    episode_limits.check_action(text)
    pk = episodes._episode_pk(episode_id)
    served = await direct.served_of(token, pk, world_id)
    if isinstance(served, direct.Served):
        return await direct.take_step(token, served, action, text, check_token=check_token)

    def start() -> SimulationJob:
        from studio.tasks import enqueue_episode_step

        episode_limits.count(token.pk, "step")
        # committed: its message goes now
        job = episodes.start_step(token, episode_id, action, check_token=check_token)
        enqueue_episode_step(job)
        return job

    return await answer_of(await db(start)())


async def answer_of(job: SimulationJob) -> episodes.StepResult:
    """The worker's answer as soon as it is sent (Redis), else from the job row. While it
    waits it looks at the row every few seconds: a worker lost, or no worker for the step's
    queue, is a retryable EpisodeUnavailable within seconds (`services.step_watch`). An agent
    that stops waiting (its connection closed) cancels a step no worker has taken yet."""
    from studio.services import step_watch

    loop = asyncio.get_running_loop()
    # the worker gives up on the model after two tries of the step's timeout; the queue's
    # wait comes on top (the sweeper fails a step whose worker died)
    deadline = loop.time() + 2 * settings.STUDIO_EPISODE_STEP_TIMEOUT_S + 600
    pause = POLL_S[0]
    check = replies.CHECK_S[0]
    next_look = loop.time() + LOOK_S
    try:
        while True:
            if replies.redis_url() is not None:
                answer = await replies.replies.next(job.params["reply_to"], check)
                check = min(WATCH_S, check * 2)
                if answer is not None:
                    if not answer.get("ok"):
                        # the row says how it failed (retryable or not), as the agent is told
                        ended = await db(episodes.finished_job)(job.pk)
                        if ended is not None and ended.is_finished:
                            raise episodes.failure_error(ended)
                        raise episodes.EpisodeUnavailable(
                            "the world model did not answer: "
                            f"{answer.get('error') or answer.get('status')}"
                        )
                    return episodes.StepResult(
                        observation=answer["observation"],
                        done=answer["done"],
                        reward=answer.get("reward"),
                    )
            # no message (yet): the row says whether it ended without one (a worker lost)
            looks = loop.time() >= next_look  # polled often without Redis: workers once a second
            if looks:
                next_look = loop.time() + LOOK_S
            ended = await db(step_watch.watch)(
                job.pk,
                unclaimed_after_s=settings.STUDIO_JOB_STALE_S,
                look_at_workers=looks,
                resend=_resend,
            )
            if ended is not None:
                return await db(episodes.step_result)(ended)
            if loop.time() > deadline:
                raise episodes.EpisodeUnavailable("no answer in time (is a worker running?)")
            if replies.redis_url() is None:
                await asyncio.sleep(pause)
                pause = min(POLL_S[1], pause * 1.5)
    except asyncio.CancelledError:
        # the agent is gone: a step no worker took yet is never written for nobody
        loop.run_in_executor(None, _closing(step_watch.abandon), job.pk)
        raise


def _resend(job_id: int, previous: str) -> bool:
    """Send a queued step's message again (`step_watch`: a worker that may hold it died)."""
    from studio.tasks import redispatch

    return redispatch(SimulationJob, job_id, previous=previous)


WATCH_S = 2.0  # with Redis, the row is looked at this often (a slow model's many waiters)
LOOK_S = 1.0  # the workers' heartbeats, for a step that waits, at most this often


def _closing(fn):
    """`fn` for a thread of the default executor, which closes its database connection."""

    def run(*args):
        from django.db import connection

        try:
            return fn(*args)
        finally:
            connection.close()

    return run
