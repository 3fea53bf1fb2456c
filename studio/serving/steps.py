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


async def run_step(token, episode_id, action, *, check_token: bool = False) -> episodes.StepResult:
    """Queue the step and wait for its answer. `check_token`: refuse a token revoked since
    the connection opened (episodes.TokenRevoked)."""

    def start() -> SimulationJob:
        from studio.tasks import enqueue_episode_step

        # committed: its message goes now
        job = episodes.start_step(token, episode_id, action, check_token=check_token)
        enqueue_episode_step(job)
        return job

    return await answer_of(await db(start)())


async def answer_of(job: SimulationJob) -> episodes.StepResult:
    """The worker's answer as soon as it is sent (Redis), else from the job row."""
    loop = asyncio.get_running_loop()
    # the worker gives up on the model after two tries of the step's timeout; the queue's
    # wait comes on top (the sweeper fails a step whose worker died)
    deadline = loop.time() + 2 * settings.STUDIO_EPISODE_STEP_TIMEOUT_S + 600
    pause = POLL_S[0]
    check = replies.CHECK_S[0]
    while True:
        if replies.redis_url() is not None:
            answer = await replies.replies.next(job.params["reply_to"], check)
            check = min(replies.CHECK_S[1], check * 2)
            if answer is not None:
                if not answer.get("ok"):
                    raise episodes.EpisodeError(
                        f"the world model did not answer: {answer.get('error') or answer.get('status')}"
                    )
                return episodes.StepResult(observation=answer["observation"], done=answer["done"])
        # no message (yet): the row says whether it ended without one (a worker lost)
        ended = await db(episodes.finished_job)(
            job.pk, unclaimed_after_s=settings.STUDIO_JOB_STALE_S
        )
        if ended is not None:
            return await db(episodes.step_result)(ended)
        if loop.time() > deadline:
            raise episodes.EpisodeError("no answer in time (is a worker running?)")
        if replies.redis_url() is None:
            await asyncio.sleep(pause)
            pause = min(POLL_S[1], pause * 1.5)
