"""Answers of episode steps, from the worker that ran one to the web process that waits for it.

With a Redis broker, the worker pushes the answer onto a list named after the job and the web
process blocks on it (`BLPOP`): the wait ends the moment the answer exists, and costs nothing
while it lasts (polling the job row instead, 32 waiting agents made thousands of queries a
second). The list outlives a late reader for `TTL_S`. The job row stays the truth: a wait that
hears nothing for `CHECK_S[0]` looks at the row (a job that the sweeper failed, or a worker of
an older release, says nothing here), then ever less often, up to every `CHECK_S[1]` (a world
model that thinks for seconds must not cost every waiting step a read a second). Without Redis
(kombu's filesystem transport) the row is all there is, polled with a backoff."""

from __future__ import annotations

import json
import logging
import threading
from typing import Any

from django.conf import settings

log = logging.getLogger(__name__)

TTL_S = 120  # an answer nobody read is dropped after this long
CHECK_S = (2.0, 10.0)  # a wait first looks at the job row after this long, then ever less often


def redis_url() -> str | None:
    url = settings.CELERY_BROKER_URL
    return url if url.startswith(("redis://", "rediss://", "unix://")) else None


def key(reply_to: str) -> str:
    """The list a step's answer goes to: named by a random id the web side chose for the
    step (`SimulationJob.params["reply_to"]`), never by the job's id, which a test database
    (or a restored one) may hand out again."""
    return f"{settings.STUDIO_QUEUE_PREFIX}studio:episode-step:{reply_to}"


_sync_client: Any = None
_sync_lock = threading.Lock()


def _client() -> Any:
    global _sync_client
    with _sync_lock:
        if _sync_client is None:
            import redis

            _sync_client = redis.Redis.from_url(str(redis_url()), socket_timeout=5)
        return _sync_client


def publish(reply_to: str, answer: dict[str, Any]) -> None:
    """Hand `answer` to whoever waits on `reply_to` (worker side). Never raises: the row
    already holds the outcome, and the wait reads it there when this message is lost."""
    if redis_url() is None or not reply_to:
        return
    try:
        pipe = _client().pipeline(transaction=False)
        name = key(reply_to)
        pipe.rpush(name, json.dumps(answer))
        pipe.expire(name, TTL_S)
        pipe.execute()
    except Exception:  # noqa: BLE001 - the waiter falls back to the job row
        log.warning("could not publish the answer for %s", reply_to, exc_info=True)


class AsyncReplies:
    """The web side: one Redis client per event loop (uvicorn runs one; tests run servers in
    threads, each with its own loop)."""

    def __init__(self) -> None:
        self._clients: dict[int, Any] = {}

    def _client(self) -> Any:
        import asyncio

        import redis.asyncio as aioredis

        loop_id = id(asyncio.get_running_loop())
        client = self._clients.get(loop_id)
        if client is None:
            # a wait holds a connection: past the pool's size, waits queue for one
            pool = aioredis.BlockingConnectionPool.from_url(
                str(redis_url()), max_connections=512, timeout=None
            )
            client = aioredis.Redis(connection_pool=pool)
            self._clients[loop_id] = client
        return client

    async def next(self, reply_to: str, timeout_s: float) -> dict[str, Any] | None:
        """The answer sent to `reply_to` if it comes within `timeout_s`, else None."""
        try:
            got = await self._client().blpop([key(reply_to)], timeout=timeout_s)
        except Exception:  # noqa: BLE001 - the caller reads the job row instead
            log.warning("could not wait on Redis for %s", reply_to, exc_info=True)
            import asyncio

            await asyncio.sleep(timeout_s)  # Redis is away: no faster than a wait would be
            return None
        if not got:
            return None
        return json.loads(got[1])


replies = AsyncReplies()
