"""Per-project API tokens for agents outside the studio. A token is `awt_` and 32 random
bytes (URL-safe); the database keeps its SHA-256, so a leaked database leaks no token."""

from __future__ import annotations

import hashlib
import secrets
import threading
import time

from django.utils import timezone

from studio.models import ApiToken, Project

PREFIX = "awt_"
# A token's "last used" is written at most this often per process: an agent stepping many
# times a second would otherwise write the token's row on every step.
TOUCH_EVERY_S = 5.0
_touched: dict[int, float] = {}
_touched_lock = threading.Lock()


def touch_due(pk: int) -> bool:
    """Whether a use of token `pk` is to be written now (and, if so, counted as written)."""
    now = time.monotonic()
    with _touched_lock:
        if now - _touched.get(pk, -TOUCH_EVERY_S) < TOUCH_EVERY_S:
            return False
        if len(_touched) > 10000:
            _touched.clear()
        _touched[pk] = now
        return True


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def create_token(project: Project, name: str, user=None) -> tuple[ApiToken, str]:
    """The new token's row and its text (shown once: only its hash is kept)."""
    name = name.strip()
    if not name:
        raise ValueError("a token needs a name (what uses it)")
    token = PREFIX + secrets.token_urlsafe(32)
    row = ApiToken.objects.create(
        project=project, name=name[:100], prefix=token[:12], token_hash=_hash(token),
        created_by=user,
    )  # fmt: skip
    return row, token


def authenticate(token: str, *, touch: bool = True) -> ApiToken | None:
    """The active token `token` is, or None (unknown, malformed or revoked). `touch` records
    the use (not for reads: a GET never writes)."""
    if not token or not token.startswith(PREFIX) or len(token) > 200:
        return None
    row = (
        ApiToken.objects.select_related("project")
        .filter(token_hash=_hash(token), revoked_at__isnull=True)
        .first()
    )
    if row is not None and touch and touch_due(row.pk):
        ApiToken.objects.filter(pk=row.pk).update(last_used_at=timezone.now())
    return row


def record_use(row: ApiToken) -> None:
    """Write the token's "last used" if it is due (at most every TOUCH_EVERY_S)."""
    if touch_due(row.pk):
        ApiToken.objects.filter(pk=row.pk, revoked_at__isnull=True).update(
            last_used_at=timezone.now()
        )


def still_active(row: ApiToken, *, touch: bool = False) -> bool:
    """Whether the token is still active; `touch` records a use (a WebSocket message that
    acts: its connection was opened by a GET, which writes nothing)."""
    active = ApiToken.objects.filter(pk=row.pk, revoked_at__isnull=True)
    if touch and touch_due(row.pk):
        return bool(active.update(last_used_at=timezone.now()))
    return active.exists()


def revoke(row: ApiToken) -> None:
    ApiToken.objects.filter(pk=row.pk, revoked_at__isnull=True).update(revoked_at=timezone.now())
