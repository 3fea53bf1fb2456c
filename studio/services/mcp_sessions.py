"""MCP sessions and their episodes, in the database (`McpSession`), so every web worker and
machine behind a load balancer finds the same session: an MCP client plays one episode per
session, and the session's next request may reach any process.

A session is opened by the MCP `initialize` request (its id goes back in the
`Mcp-Session-Id` header) or by OpenEnv's `openenv/session/create`; it gets its episode at its
first valid `tools/call` (so a refused call never makes an empty episode). Plain synchronous
functions: the ASGI apps call them in threads."""

from __future__ import annotations

import secrets
from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from studio.models import ApiToken, McpSession, Trajectory

# how often a session's "last seen" is written (not on every request: a write per step)
TOUCH_EVERY_S = 60
# a session nobody used for this long is deleted by the sweeper (its episode stays)
IDLE_SESSION_S = 24 * 3600


def open_session(token: ApiToken) -> str:
    """A new session of `token`; its id (the client sends it back with every request)."""
    session_id = secrets.token_hex(24)
    McpSession.objects.create(session_id=session_id, token=token)
    return session_id


def find_session(token: ApiToken, session_id: str) -> McpSession | None:
    """The session `session_id` if `token` opened it (a session stays with its token)."""
    if not session_id or len(session_id) > 128:
        return None
    session = McpSession.objects.filter(session_id=session_id, token_id=token.pk).first()
    if session is not None:
        stale = timezone.now() - timedelta(seconds=TOUCH_EVERY_S)
        if session.last_seen_at < stale:
            McpSession.objects.filter(pk=session.pk).update(last_seen_at=timezone.now())
    return session


def close_session(token: ApiToken, session_id: str) -> bool:
    """End the session (its episode stays in the library as it is); False if unknown."""
    if not session_id:
        return False
    deleted, _ = McpSession.objects.filter(session_id=session_id, token_id=token.pk).delete()
    return bool(deleted)


def episode_of_session(session: McpSession) -> int | None:
    """The id of the session's episode, read afresh (another process may have bound one)."""
    return McpSession.objects.filter(pk=session.pk).values_list("trajectory_id", flat=True).first()


def bind_episode(session: McpSession, trajectory: Trajectory) -> int:
    """Make `trajectory` (just reset, no step yet) the session's episode, unless another
    request of the session bound one first: then that one is the session's, and the new
    one, which took no step, is deleted. Returns the session's episode id."""
    with transaction.atomic():
        bound = McpSession.objects.filter(pk=session.pk, trajectory__isnull=True).update(
            trajectory=trajectory
        )
        if bound:
            session.trajectory_id = trajectory.pk
            return trajectory.pk
        winner = episode_of_session(session)
        if winner is None:  # the session was closed meanwhile: the new episode plays alone
            return trajectory.pk
        Trajectory.objects.filter(pk=trajectory.pk, step_count=0).delete()
    session.trajectory_id = winner
    return winner


def sweep_idle_sessions(now=None) -> int:
    """Delete sessions nobody used for IDLE_SESSION_S; their episodes stay."""
    now = now or timezone.now()
    deleted, _ = McpSession.objects.filter(
        last_seen_at__lt=now - timedelta(seconds=IDLE_SESSION_S)
    ).delete()
    return deleted
