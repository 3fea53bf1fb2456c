"""API tokens of the episode API checked without a database trip on most requests: a token
this process found active is trusted for TTL_S; a revocation takes effect within it. (A
served step's write checks the token itself, so nothing is recorded for a revoked token even
within the TTL: `studio.serving.episode_rows`.)

Over plain HTTP every step authenticates its request; read from the database each time,
that was a thread hop and a query per step (`scripts/bench_episodes.py --transport http`).
Only the token's SHA-256 is kept as the key, as the database keeps it."""

from __future__ import annotations

import hashlib
import time
from typing import Any

from studio.services import tokens
from studio.serving import episode_rows as rows

TTL_S = 1.0
MAX_TOKENS = 10_000

_seen: dict[str, tuple[float, Any]] = {}  # sha256 of the token -> (when found active, row)


async def authenticate(text: str, *, touch: bool = True):
    """`tokens.authenticate(text, touch=touch)` for the event loop: the active token's row
    (its project selected), or None."""
    if not text or not text.startswith(tokens.PREFIX) or len(text) > 200:
        return None
    key = hashlib.sha256(text.encode()).hexdigest()
    now = time.monotonic()
    hit = _seen.get(key)
    if hit is not None and now - hit[0] < TTL_S:
        row = hit[1]
        if touch and tokens.touch_due(row.pk):
            await rows.in_db(_touch, row.pk)
        return row
    row = await rows.in_db(_authenticate, text, touch)
    if row is None:
        _seen.pop(key, None)
        return None
    if len(_seen) >= MAX_TOKENS:
        _seen.clear()
    _seen[key] = (now, row)
    return row


def forget() -> None:
    _seen.clear()


def _authenticate(text: str, touch: bool):
    return tokens.authenticate(text, touch=touch)


def _touch(token_id: int) -> None:
    from django.utils import timezone

    from studio.models import ApiToken

    ApiToken.objects.filter(pk=token_id, revoked_at__isnull=True).update(
        last_used_at=timezone.now()
    )
