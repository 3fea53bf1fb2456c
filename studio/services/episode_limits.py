"""Limits on what one agent may send the episode API, on every transport: sizes (a body, one
action, a task's text) and rates (resets and steps per token per minute). Each refusal names
its setting; a rate refusal says when to come back (`retry_after`, sent as Retry-After).

Rates are counted per token and calendar minute where every web process sees the same count:
in Redis when it is the broker (one INCR), else in the database (`TokenRateWindow`, one
upsert), so several web workers or machines share one limit."""

from __future__ import annotations

import threading
import time
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F

from studio.services.episodes import EpisodeBusy, EpisodeTooLarge

RATE_SETTINGS = {
    "reset": "STUDIO_EPISODE_RESETS_PER_MINUTE",
    "step": "STUDIO_EPISODE_STEPS_PER_MINUTE",
}


def _kb(setting: str) -> int:
    return int(getattr(settings, setting)) * 1024


def check_body(size: int) -> None:
    """A request body of `size` bytes (Content-Length, or counted as it arrived)."""
    limit = _kb("STUDIO_EPISODE_MAX_BODY_KB")
    if size > limit:
        # `size` is what was declared or what had arrived when it was refused, not always
        # the whole body's
        raise EpisodeTooLarge(
            f"the request body is over the limit of {limit:,} bytes "
            f"(STUDIO_EPISODE_MAX_BODY_KB): refused at {size:,} bytes"
        )


def check_action(text: str) -> None:
    """An action as the trajectory records it (its text, or a tool call's JSON)."""
    size = len(text.encode("utf-8", "surrogatepass"))
    limit = _kb("STUDIO_EPISODE_MAX_ACTION_KB")
    if size > limit:
        raise EpisodeTooLarge(
            f"the action is {size:,} bytes; the limit is {limit:,} (STUDIO_EPISODE_MAX_ACTION_KB): "
            "every later step sends it to the world model again"
        )


def check_task(text: str) -> None:
    size = len(text.encode("utf-8", "surrogatepass"))
    limit = _kb("STUDIO_EPISODE_MAX_TASK_KB")
    if size > limit:
        raise EpisodeTooLarge(
            f"the task is {size:,} bytes; the limit is {limit:,} (STUDIO_EPISODE_MAX_TASK_KB)"
        )


def count(token_id: int, kind: str, *, now: float | None = None) -> None:
    """Count one `kind` ("reset" or "step") for the token; EpisodeBusy once the minute's
    limit is passed, with the seconds left in the minute as `retry_after`."""
    setting = RATE_SETTINGS[kind]
    limit = int(getattr(settings, setting))
    now = time.time() if now is None else now
    minute = int(now // 60)
    used = _incr(token_id, kind, minute)
    if used > limit:
        retry = max(1.0, 60 - (now - minute * 60))
        raise EpisodeBusy(
            f"this token made {limit} {kind}s this minute, its limit ({setting}): try again "
            f"in {retry:.0f} s",
            retry_after=retry,
        )


def _incr(token_id: int, kind: str, minute: int) -> int:
    from studio.jobs.replies import redis_url

    if redis_url() is not None:
        try:
            return _incr_redis(token_id, kind, minute)
        except Exception:  # noqa: BLE001 - Redis down: the database still counts
            pass
    return _incr_db(token_id, kind, minute)


_client: Any = None
_client_lock = threading.Lock()


def _incr_redis(token_id: int, kind: str, minute: int) -> int:
    global _client
    from studio.jobs.replies import redis_url

    with _client_lock:
        if _client is None:
            import redis

            _client = redis.Redis.from_url(str(redis_url()), socket_timeout=2)
    key = f"{settings.STUDIO_QUEUE_PREFIX}studio:rate:{kind}:{token_id}:{minute}"
    pipe = _client.pipeline(transaction=False)
    pipe.incr(key)
    pipe.expire(key, 120)
    return int(pipe.execute()[0])


def _incr_db(token_id: int, kind: str, minute: int) -> int:
    from studio.models import TokenRateWindow

    rows = TokenRateWindow.objects.filter(token_id=token_id, kind=kind, minute=minute)
    if not rows.update(count=F("count") + 1):
        try:
            with transaction.atomic():
                TokenRateWindow.objects.create(token_id=token_id, kind=kind, minute=minute, count=1)
        except IntegrityError:  # another process made it first
            rows.update(count=F("count") + 1)
        # old windows go with the minute that made a new one (a few rows per token)
        TokenRateWindow.objects.filter(token_id=token_id, minute__lt=minute - 1).delete()
    return int(rows.values_list("count", flat=True).first() or 0)
