"""The episodes played in a world, over time: what its page charts (reward per episode and
its moving average, success rate, steps per episode), grouped by the API token that played
them (the default: a training run is one token; a campaign is one token, client "campaign")
or by the client, over a window of the latest episodes, with the counts beside the charts.

What is read: every episode trajectory of the world's project whose metadata names the world
(`metadata["world"]["id"]`, as `studio.services.simulation.trajectory_world_label` reads it),
and from its `metadata["episode"]` the client, token, status, task, end and return.

- An episode's reward is its return (the end's total once ended, else the running return:
  the sum of its step rewards); None when no step was rewarded.
- Its success: the episode rubric's score, recomputed from the end's breakdown with the
  checks and weights of the episode rubric that applied (the task's rubric: the world
  version's task, or the task the episode recorded at reset, `task_spec`; else the world's)
  is 1 -> True, below 1 -> False; no episode score (an unrewarded task,
  a cancelled or still running episode, a world version that is gone) -> None: "not
  scored", never counted as a failure. A success rate is successes / scored episodes.
- The charts plot ended episodes (done or cancelled); a running one is counted, not plotted
  (its reward and steps are not final)."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db.models import Avg, Count, Q, QuerySet

from inference import rubrics
from inference.rubrics import Check
from studio.models import ApiToken, Campaign, Trajectory, World, WorldVersion
from studio.services import episode_library
from studio.services.rewards import plan_of

EPISODE = episode_library.EPISODE
GROUPS = {"client": "client", "token": "token"}
X_AXES = {"number": "episode number", "time": "start time"}
DEFAULT_WINDOW = 200
MAX_WINDOW = 2000
DEFAULT_AVERAGE = 10
MAX_AVERAGE = 200
ENDED = ("done", "cancelled")
CLIENT_WORDS = {**dict(episode_library.CLIENTS), "campaign": "campaign"}
SUCCESS_AT = 1.0 - 1e-9  # a weighted mean of 1s read back through JSON


@dataclass(frozen=True)
class Filters:
    """What the page shows: grouped by token (the default) or client, the latest `window`
    episodes, the moving average over `average` episodes, narrowed by client, token, task
    and state."""

    group: str = "token"
    window: int = DEFAULT_WINDOW
    average: int = DEFAULT_AVERAGE
    x: str = "number"
    client: str = ""
    token: int | None = None
    task_id: str = ""
    state: str = ""

    @property
    def narrowed(self) -> bool:
        """Whether a filter leaves some of the world's episodes out."""
        return bool(self.client or self.token is not None or self.task_id or self.state)

    def query(self) -> dict[str, str]:
        """The filters as query parameters (defaults left out), for links and polling."""
        values = {
            "group": self.group if self.group != "token" else "",
            "window": str(self.window) if self.window != DEFAULT_WINDOW else "",
            "average": str(self.average) if self.average != DEFAULT_AVERAGE else "",
            "x": self.x if self.x != "number" else "",
            "client": self.client,
            "token": "" if self.token is None else str(self.token),
            "task_id": self.task_id,
            "state": self.state,
        }
        return {k: v for k, v in values.items() if v}


@dataclass(frozen=True)
class EpisodeRow:
    pk: int
    number: int  # its place in the world's episodes that match the filters, oldest 1
    started: datetime
    status: str  # running | done | cancelled
    client: str
    token: str  # the token's name as the episode recorded it
    token_id: int | None
    group: str  # the key of its group
    group_label: str
    task_id: str
    steps: int
    reward: float | None
    success: bool | None
    cause: str | None
    campaign: dict[str, Any] | None = None

    @property
    def ended(self) -> bool:
        return self.status in ENDED


@dataclass
class Group:
    key: str
    label: str
    rows: list[EpisodeRow] = field(default_factory=list)


@dataclass
class WorldEpisodes:
    """The page's data: the window's episodes (oldest first) and their groups, the counts
    over every episode of the world that matches the filters, and the window's figures."""

    filters: Filters
    rows: list[EpisodeRow]
    groups: list[Group]
    counts: dict[str, Any]
    window: dict[str, Any]

    def signature(self) -> str:
        """Changes whenever anything the page shows of the episodes does."""
        parts = [
            self.counts,
            [(r.pk, r.status, r.steps, r.reward, r.success) for r in self.rows],
        ]
        return hashlib.sha256(json.dumps(parts, default=str).encode()).hexdigest()[:16]


class FilterError(ValueError):
    """A filter that cannot be read (the message names the field)."""


# ---- success ------------------------------------------------------------------------------


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def episode_score(episode: Mapping[str, Any], checks: Sequence[Check]) -> float | None:
    """The episode rubric's score of an ended episode: the weighted mean of `checks` (the
    episode rubric that applied) as the end's breakdown scored them; None when it has no
    end, was cancelled, or none of the checks was scored."""
    end = episode.get("end")
    if not isinstance(end, dict) or not checks or end.get("cause") == "cancelled":
        return None
    breakdown = end.get("breakdown")
    if not isinstance(breakdown, dict):
        return None
    scored = [(check, _number(breakdown.get(check.name))) for check in checks]
    score, _ = rubrics.weighted([(c, s) for c, s in scored if c.name in breakdown])
    return score


def is_success(score: float | None) -> bool | None:
    return None if score is None else score >= SUCCESS_AT


# (version id, saved at) -> its spec: a version never changes once saved (a page that polls
# reads the same few versions again and again).
_SPECS: dict[tuple[Any, Any], Any] = {}
_SPECS_KEPT = 256


class Outcomes:
    """Success of episodes, reading each world version's rubric once (versions never
    change, so one instance may serve many episodes; a version that is gone scores
    none)."""

    def __init__(self) -> None:
        self._specs: dict[tuple[int, int], Any] = {}
        self._checks: dict[tuple[int, int, str], tuple[Check, ...]] = {}

    def _spec(self, world_id: int, number: int):
        key = (world_id, number)
        if key in self._specs:
            return self._specs[key]
        spec = None
        found = (
            WorldVersion.objects.filter(world_id=world_id, number=number)
            .values_list("pk", "created_at")
            .first()
        )
        if found is not None:
            spec = _SPECS.get(found)
            if spec is None:
                version = WorldVersion.objects.get(pk=found[0])
                try:
                    spec = version.spec()
                except Exception:  # a version that no longer reads: no rubric to score with
                    spec = None
                if spec is not None:
                    if len(_SPECS) >= _SPECS_KEPT:
                        _SPECS.clear()
                    _SPECS[found] = spec
        self._specs[key] = spec
        return spec

    def checks(self, metadata: Mapping[str, Any]) -> tuple[Check, ...]:
        """The episode rubric's checks that applied to the episode of `metadata`."""
        world = metadata.get("world")
        episode = metadata.get("episode")
        if not isinstance(world, dict) or not isinstance(episode, dict):
            return ()
        world_id, number = world.get("id"), world.get("version")
        if not isinstance(world_id, int) or not isinstance(number, int):
            return ()
        task_id = str(episode.get("task_id") or "")
        # a task the reset brought along (a campaign's typed task, its own rubric)
        own = episode.get("task_spec")
        if isinstance(own, dict):
            task_id = "spec:" + json.dumps(own, sort_keys=True, default=str)
        key = (world_id, number, task_id)
        if key not in self._checks:
            spec = self._spec(world_id, number)
            try:
                checks = tuple(plan_of(spec, episode).rubric.episode) if spec else ()
            except (rubrics.RubricError, ValueError):  # a recorded task that no longer reads
                checks = ()
            self._checks[key] = checks
        return self._checks[key]

    def success(self, metadata: Mapping[str, Any]) -> bool | None:
        """True / False / None (not scored) for the episode whose trajectory metadata this
        is (see the module's doc)."""
        episode = metadata.get("episode")
        if not isinstance(episode, dict) or episode.get("status") != "done":
            return None
        return is_success(episode_score(episode, self.checks(metadata)))


def episode_success(trajectory: Trajectory) -> bool | None:
    """One trajectory's success (Outcomes().success of its metadata); None for no episode."""
    if trajectory.source_format != EPISODE:
        return None
    return Outcomes().success(trajectory.metadata or {})


def reward_of(episode: Mapping[str, Any]) -> float | None:
    """The episode's return: the end's total once ended, else the running return."""
    end = episode.get("end")
    if isinstance(end, dict) and "total" in end:
        return _number(end.get("total"))
    return _number(episode.get("return"))


# ---- series -------------------------------------------------------------------------------


def moving_average(values: Sequence[float | None], k: int) -> list[float | None]:
    """At each value, the mean of the last `k` values up to it (Nones skipped and left
    None: an unscored episode has no point)."""
    if k < 1:
        raise ValueError("a moving average needs a window of at least 1")
    out: list[float | None] = []
    seen: list[float] = []
    total = 0.0
    for value in values:
        if value is None:
            out.append(None)
            continue
        seen.append(value)
        total += value
        if len(seen) > k:
            total -= seen[-k - 1]
        out.append(total / min(len(seen), k))
    return out


def success_rate(successes: Sequence[bool | None], k: int) -> list[float | None]:
    """At each scored episode, the share of successes over the last `k` scored episodes up
    to it; None at an unscored one."""
    return moving_average([None if s is None else float(s) for s in successes], k)


# ---- reading the world's episodes ---------------------------------------------------------


def episodes_of(world: World) -> QuerySet[Trajectory]:
    """Every episode trajectory of the world's project that was played in this world."""
    return Trajectory.objects.filter(
        project_id=world.project_id, source_format=EPISODE, metadata__world__id=world.pk
    )


def _filtered(world: World, filters: Filters) -> QuerySet[Trajectory]:
    qs = episode_library.filter_episodes(
        episodes_of(world),
        {"client": filters.client, "token": filters.token, "state": filters.state},
    )
    if filters.task_id:
        qs = qs.filter(metadata__episode__task_id=filters.task_id)
    return qs


def _running() -> Q:
    # an episode recorded before statuses counts as running (as the library's filter)
    return Q(metadata__episode__status="running") | Q(metadata__episode__status__isnull=True)


def counts_of(qs: QuerySet[Trajectory]) -> dict[str, Any]:
    """Episodes, running, done, cancelled and the mean return of the ended ones that have
    one (with how many that is), over every episode of `qs`."""
    found = qs.aggregate(
        episodes=Count("pk"),
        running=Count("pk", filter=_running()),
        done=Count("pk", filter=Q(metadata__episode__status="done")),
        cancelled=Count("pk", filter=Q(metadata__episode__status="cancelled")),
    )
    ended = qs.filter(metadata__episode__status__in=ENDED).annotate(
        episode_reward=episode_library.reward_expression()
    )
    rewarded = ended.filter(episode_reward__isnull=False).aggregate(
        mean=Avg("episode_reward"), n=Count("pk")
    )
    found["mean_return"] = rewarded["mean"]
    found["rewarded"] = rewarded["n"]
    return found


def _label(kind: str, episode: Mapping[str, Any]) -> tuple[str, str]:
    if kind == "token":
        token_id = episode.get("token_id")
        name = str(episode.get("token") or "")
        if isinstance(token_id, int) and not isinstance(token_id, bool):
            return f"token:{token_id}", name or f"token {token_id}"
        return f"token-name:{name}", name or "no token"
    client = str(episode.get("client") or "")
    return f"client:{client}", CLIENT_WORDS.get(client, client or "unknown client")


def _row(trajectory, number: int, group: str, outcomes: Outcomes) -> EpisodeRow:
    meta = trajectory.metadata or {}
    found = meta.get("episode")
    episode: dict[str, Any] = found if isinstance(found, dict) else {}
    end = episode.get("end") if isinstance(episode.get("end"), dict) else None
    key, label = _label(group, episode)
    token_id = episode.get("token_id")
    campaign = meta.get("campaign")
    return EpisodeRow(
        pk=trajectory.pk,
        number=number,
        started=trajectory.created_at,
        status=str(episode.get("status") or "running"),
        client=str(episode.get("client") or ""),
        token=str(episode.get("token") or ""),
        token_id=token_id if isinstance(token_id, int) and not isinstance(token_id, bool) else None,
        group=key,
        group_label=label,
        task_id=str(episode.get("task_id") or ""),
        steps=trajectory.step_count,
        reward=reward_of(episode),
        success=outcomes.success(meta),
        cause=str(end.get("cause")) if end and end.get("cause") else None,
        campaign=campaign if isinstance(campaign, dict) else None,
    )


def world_episodes(world: World, filters: Filters | None = None) -> WorldEpisodes:
    """The world's page data for `filters` (see WorldEpisodes)."""
    filters = filters or Filters()
    qs = _filtered(world, filters)
    counts = counts_of(qs)
    latest = list(
        qs.order_by("-created_at", "-id").only("id", "created_at", "metadata", "step_count")[
            : filters.window
        ]
    )
    outcomes = Outcomes()
    total = counts["episodes"]
    rows = [
        _row(t, total - i, filters.group, outcomes) for i, t in enumerate(latest)
    ]  # newest first
    rows.reverse()
    groups: dict[str, Group] = {}
    for row in rows:
        groups.setdefault(row.group, Group(row.group, row.group_label)).rows.append(row)
    ended = [r for r in rows if r.ended]
    scored = [r for r in ended if r.success is not None]
    rewards = [r.reward for r in ended if r.reward is not None]
    successes = sum(1 for r in scored if r.success)
    window = {
        "shown": len(rows),
        "ended": len(ended),
        "scored": len(scored),
        "successes": successes,
        "success_rate": successes / len(scored) if scored else None,
        "rewarded": len(rewards),
        "mean_return": sum(rewards) / len(rewards) if rewards else None,
        "mean_steps": sum(r.steps for r in ended) / len(ended) if ended else None,
    }
    ordered = sorted(groups.values(), key=lambda g: (g.label.lower(), g.key))
    return WorldEpisodes(filters, rows, ordered, counts, window)


def token_choices(world: World) -> list[tuple[str, str]]:
    """What the Token filter offers, by name: every API token that played an episode in
    this world (a revoked token says so; one deleted since, by the name its episodes
    recorded) and every active token of the project, which may play here next (a
    campaign's own token only where its campaign plays this world). Three small queries,
    so a page that polls reads them again with its data."""
    played: dict[int, str] = {}
    rows = (
        episodes_of(world)
        .order_by()
        .values_list("metadata__episode__token_id", "metadata__episode__token")
        .distinct()
    )
    for token_id, name in rows:
        if isinstance(token_id, int) and not isinstance(token_id, bool):
            played.setdefault(token_id, str(name or f"token {token_id}"))
    elsewhere = set(
        Campaign.objects.filter(project_id=world.project_id, token__isnull=False)
        .exclude(world_id=world.pk)
        .values_list("token_id", flat=True)
    )
    tokens = (
        ApiToken.objects.filter(project_id=world.project_id)
        .filter(Q(pk__in=list(played)) | Q(revoked_at__isnull=True))
        .values_list("pk", "name", "revoked_at")
    )
    labels: dict[int, str] = {}
    for pk, name, revoked_at in tokens:
        if pk in elsewhere and pk not in played:
            continue  # another world's campaign: it never plays here
        labels[pk] = f"{name} (revoked)" if revoked_at is not None else name
    for pk, name in played.items():
        labels.setdefault(pk, f"{name} (deleted)")
    return sorted(((str(pk), label) for pk, label in labels.items()), key=lambda kv: kv[1].lower())


def live_signature(data: WorldEpisodes, table: Sequence[EpisodeRow], tokens: Sequence) -> str:
    """Changes whenever anything the page's live part shows does: the charts and counts
    (`WorldEpisodes.signature`), the latest-episodes table and the tokens to filter by."""
    parts = [
        data.signature(),
        [(r.pk, r.number, r.status, r.steps, r.reward, r.success, r.cause) for r in table],
        list(tokens),
    ]
    return hashlib.sha256(json.dumps(parts, default=str).encode()).hexdigest()[:16]


def choices_of(world: World) -> dict[str, list[tuple[str, str]]]:
    """What the filters offer: the clients the world's episodes name, the tokens of
    `token_choices` and the tasks of the world and of its episodes."""
    clients: dict[str, str] = {}
    tasks: set[str] = set()
    rows = (
        episodes_of(world)
        .order_by("-created_at", "-id")
        .values_list("metadata__episode__client", flat=True)[:MAX_WINDOW]
    )
    for client in rows:
        if client:
            clients[str(client)] = CLIENT_WORDS.get(str(client), str(client))
    spec_rows = world.versions.order_by("-number").first()
    if spec_rows is not None:
        try:
            tasks = {task.id for task in spec_rows.spec().tasks}
        except Exception:  # a version that no longer reads offers no task filter
            tasks = set()
    for (task_id,) in (
        episodes_of(world).order_by().values_list("metadata__episode__task_id").distinct()[:500]
    ):
        if task_id:
            tasks.add(str(task_id))
    return {
        "clients": sorted(clients.items(), key=lambda kv: kv[1].lower()),
        "tokens": token_choices(world),
        "tasks": [(t, t) for t in sorted(tasks)],
    }
