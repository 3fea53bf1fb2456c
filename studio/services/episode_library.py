"""Episodes in the library: filtering them by what their record says
(Trajectory.metadata["episode"]: world, client, token, status, reward), hiding and sweeping
the ones that never took a step, and ending one from the studio.

An episode's reward, for the filter, is its end's total when it ended with one, else its
running return (the sum of its step rewards so far)."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Exists, FloatField, OuterRef, Q, QuerySet, Value
from django.db.models.fields.json import KT
from django.db.models.functions import Cast, Coalesce, NullIf
from django.utils import timezone

from studio.models import JobStatus, McpSession, SimulationJob, Trajectory

EPISODE = "episode"  # Trajectory.source_format of an episode
CLIENTS = [
    ("http", "HTTP"),
    ("websocket", "WebSocket"),
    ("mcp", "MCP (SDK)"),
    ("openenv-mcp", "MCP (OpenEnv JSON-RPC)"),
]
STATES = [("running", "Running"), ("done", "Done"), ("cancelled", "Cancelled")]


class EndRefused(ValueError):
    """The trajectory is no episode, or its episode already ended (the message says)."""


def without_steps() -> Q:
    """Episodes that never took a step (a reset alone)."""
    return Q(source_format=EPISODE, step_count=0)


def filter_episodes(qs: QuerySet[Trajectory], data: dict[str, Any]) -> QuerySet[Trajectory]:
    """`qs` narrowed by the library's episode filters in `data` (cleaned form data): any of
    them keeps episodes only. The world filter keeps every trajectory of the world (a
    person's play included)."""
    if data.get("world"):
        qs = qs.filter(metadata__world__id=int(data["world"]))
    episode_only = False
    if data.get("client"):
        qs = qs.filter(metadata__episode__client=data["client"])
        episode_only = True
    if data.get("token"):
        qs = qs.filter(_of_token(data["token"]))
        episode_only = True
    state = data.get("state")
    if state:
        if state == "running":  # an episode recorded before statuses counts as running
            qs = qs.filter(
                Q(metadata__episode__status="running")
                | Q(metadata__episode__isnull=False, metadata__episode__status__isnull=True)
            )
        else:
            qs = qs.filter(metadata__episode__status=state)
        episode_only = True
    low, high = data.get("reward_min"), data.get("reward_max")
    if low is not None or high is not None:
        qs = qs.annotate(episode_reward=reward_expression())
        if low is not None:
            qs = qs.filter(episode_reward__gte=low)
        if high is not None:
            qs = qs.filter(episode_reward__lte=high)
        episode_only = True
    if episode_only:
        qs = qs.filter(source_format=EPISODE)
    return qs


def _of_token(value: Any) -> Q:
    """Episodes of one API token: by its id (recorded since issue 23) or, for an older
    record without one, by its name."""
    from studio.models import ApiToken

    token = ApiToken.objects.filter(pk=int(value)).only("pk", "name").first()
    by_id = Q(metadata__episode__token_id=int(value))
    if token is None:
        return by_id
    return by_id | Q(metadata__episode__token_id__isnull=True, metadata__episode__token=token.name)


def _number_at(path: str):
    # a JSON null reads as the text 'null' on SQLite (SQL NULL on PostgreSQL): NULL on both
    return Cast(NullIf(KT(path), Value("null")), FloatField())


def reward_expression():
    """The episode's reward: its end's total, else its running return (NULL: none)."""
    return Coalesce(
        _number_at("metadata__episode__end__total"), _number_at("metadata__episode__return")
    )


def end_episode(trajectory_id: int) -> dict[str, Any]:
    """End a running episode from the studio: status "cancelled", end cause "cancelled".
    A step in flight then is not written (the step's write checks the status), and a step
    queued for a worker is asked to cancel. Raises EndRefused for a trajectory that is no
    episode or an episode that already ended."""
    with transaction.atomic():
        trajectory = (
            Trajectory.objects.select_for_update()
            .only("id", "metadata", "step_count", "source_format")
            .get(pk=trajectory_id)
        )
        meta = dict(trajectory.metadata or {})
        episode = dict(meta.get("episode") or {})
        if trajectory.source_format != EPISODE or not episode:
            raise EndRefused("this trajectory is not an episode served to an agent")
        status = episode.get("status") or "running"
        if status != "running":
            raise EndRefused(f"this episode already ended ({status})")
        episode["status"] = "cancelled"
        episode["end"] = {
            "cause": "cancelled",
            "step": trajectory.step_count - 1 if trajectory.step_count else None,
            "reward": None,
            "total": episode.get("return"),
            "breakdown": {},
        }
        meta["episode"] = episode
        Trajectory.objects.filter(pk=trajectory_id).update(metadata=meta)
        SimulationJob.objects.filter(
            trajectory_id=trajectory_id,
            appends=True,
            status__in=[JobStatus.QUEUED, JobStatus.RUNNING],
        ).update(cancel_requested=True)

        def forget() -> None:
            # a process that noted the episode's step count would skip reading its status
            # and ask the model once before its write refused the step
            from studio.serving.episode_rows import forget_noted_sync

            forget_noted_sync(trajectory_id)

        transaction.on_commit(forget)
    return episode


def _open_steps():
    return SimulationJob.objects.filter(
        trajectory_id=OuterRef("pk"), status__in=[JobStatus.QUEUED, JobStatus.RUNNING]
    )


SWEEP_EVERY_S = 60.0
BATCH = 500
_last_sweep = [0.0]


def sweep_empty_episodes(now=None, *, force: bool = False) -> int:
    """Delete episodes that took no step for STUDIO_EMPTY_EPISODE_TTL_S since their reset
    (and MCP sessions idle for a day). At most once a minute unless `force`; a batch at a
    time. An episode with a step waiting for a worker is kept. Returns how many went."""
    from studio.services.mcp_sessions import sweep_idle_sessions

    clock = time.monotonic()
    if not force and clock - _last_sweep[0] < SWEEP_EVERY_S:
        return 0
    _last_sweep[0] = clock
    now = now or timezone.now()
    cutoff = now - timedelta(seconds=settings.STUDIO_EMPTY_EPISODE_TTL_S)
    ids = list(
        Trajectory.objects.filter(without_steps(), created_at__lt=cutoff)
        .exclude(Exists(_open_steps()))
        .values_list("pk", flat=True)[:BATCH]
    )
    deleted = 0
    if ids:
        with transaction.atomic():
            # a session keeps going: its next call starts a new episode
            McpSession.objects.filter(trajectory_id__in=ids).update(trajectory=None)
            _, per_model = Trajectory.objects.filter(pk__in=ids, step_count=0).delete()
        deleted = per_model.get(Trajectory._meta.label, 0)
    sweep_idle_sessions(now)
    return deleted
