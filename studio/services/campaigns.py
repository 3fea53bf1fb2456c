"""Rollout campaigns: making one (its tasks, arms, slots and token, in one transaction),
stopping and resuming it, and what its slots add up to (the campaign page's figures and the
command's summary). The playing is `studio.jobs.campaigns`; the words and keys are those of
`studio.models.campaigns`.

A campaign plays every task `episodes_per_task` times in every arm: arm 0 is "none" (no
perturbation), arm k>=1 the k-th perturbation chosen. A (task, repeat) has the same seed in
every arm (`slot_seed`), so the arms compare paired episodes."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import QuerySet

from inference import rubrics
from studio.models import (
    Campaign,
    CampaignEpisode,
    CampaignSource,
    EndpointRole,
    JobStatus,
    ModelEndpoint,
    Perturbation,
    SlotStatus,
    Trajectory,
    World,
)
from studio.queues import queue_name
from studio.services.episodes import MAX_STEPS_LIMIT

TASK_KEYS = ("id", "instruction", "expected", "success_criteria", "max_steps", "rubric")
SEED_LIMIT = 2**31
MAX_TASKS = 2000


class CampaignError(ValueError):
    """What is wrong with a campaign's input; the message names the field (or the line)."""


@dataclass(frozen=True)
class CampaignData:
    name: str
    world: World | None
    source: str  # a CampaignSource value
    tasks: tuple[dict, ...]
    agent: ModelEndpoint
    world_model: ModelEndpoint | None
    episodes_per_task: int
    max_steps: int
    perturbations: tuple[Perturbation, ...] = ()
    seed: int | None = None
    concurrency: int | None = None
    temperature: float = 0.7
    max_tokens: int = 1024


def slot_seed(campaign_seed: int, task_index: int, repeat: int) -> int:
    """The seed of every slot of (task_index, repeat), whatever its arm: sha256-derived from
    the campaign's seed, in 0..2**31-1, the same on every machine."""
    data = f"agentworld-campaign:{int(campaign_seed)}:{int(task_index)}:{int(repeat)}".encode()
    return int.from_bytes(hashlib.sha256(data).digest()[:8], "big") % SEED_LIMIT


def tag_name(campaign: Campaign | int) -> str:
    pk = campaign if isinstance(campaign, int) else campaign.pk
    return f"campaign:{pk}"


# ---- tasks ----------------------------------------------------------------------------------


def _task_dict(task: rubrics.Task) -> dict[str, Any]:
    out: dict[str, Any] = {"id": task.id, "instruction": task.instruction}
    if task.expected:
        out["expected"] = task.expected
    if task.success_criteria:
        out["success_criteria"] = task.success_criteria
    if task.max_steps is not None:
        out["max_steps"] = task.max_steps
    if task.rubric is not None:
        out["rubric"] = task.rubric.to_file()
    return out


def parse_tasks_jsonl(text: str, *, name: str = "tasks.jsonl") -> list[dict]:
    """Tasks from JSON Lines: one object a line {"id"?, "instruction" (required), "expected"?,
    "success_criteria"?, "max_steps"?, "rubric"?}; blank lines are skipped; an id left out is
    task-N (N: the task's number). CampaignError "tasks.jsonl line 3: ..." names the line
    and the field."""
    tasks: list[dict] = []
    seen: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        at = f"{name} line {number}"
        try:
            item = json.loads(line)
        except json.JSONDecodeError as exc:
            raise CampaignError(f"{at}: not valid JSON ({exc.msg} at column {exc.colno})") from None
        if not isinstance(item, dict):
            raise CampaignError(f"{at}: a task is a JSON object, got {type(item).__name__}")
        unknown = sorted(set(item) - set(TASK_KEYS))
        if unknown:
            raise CampaignError(
                f"{at}: unknown field {unknown[0]!r} (a task has {', '.join(TASK_KEYS)})"
            )
        instruction = item.get("instruction")
        if not isinstance(instruction, str) or not instruction.strip():
            raise CampaignError(f"{at}: field 'instruction' is required (text the agent is told)")
        for key in ("id", "expected", "success_criteria"):
            if key in item and item[key] is not None and not isinstance(item[key], str):
                raise CampaignError(f"{at}: field {key!r} must be text")
        max_steps = item.get("max_steps")
        if max_steps is not None and (
            isinstance(max_steps, bool)
            or not isinstance(max_steps, int)
            or not 1 <= max_steps <= MAX_STEPS_LIMIT
        ):
            raise CampaignError(
                f"{at}: field 'max_steps' must be a whole number from 1 to {MAX_STEPS_LIMIT}"
            )
        data = {k: v for k, v in item.items() if v is not None}
        data["id"] = (data.get("id") or "").strip() or f"task-{len(tasks) + 1}"
        if data["id"] in seen:
            raise CampaignError(
                f"{at}: field 'id': {data['id']!r} is the id of the task on line "
                f"{seen[data['id']]} too"
            )
        try:
            (task,) = rubrics.read_tasks([data], "task")
        except rubrics.RubricError as exc:
            message = str(exc).replace("task[0]", "").replace(f"({data['id']})", "").strip(" .")
            raise CampaignError(f"{at}: {message}") from None
        seen[task.id] = number
        tasks.append(_task_dict(task))
        if len(tasks) > MAX_TASKS:
            raise CampaignError(f"{name}: more than {MAX_TASKS} tasks")
    if not tasks:
        raise CampaignError(f"{name} holds no task (one JSON object a line)")
    return tasks


def world_tasks(world: World, ids: Sequence[str] | None = None) -> list[dict]:
    """The world's tasks (its latest version's), all or those of `ids` in that order."""
    version = world.latest
    if version is None:
        raise CampaignError(f"world {world.name!r} has no version yet")
    spec = version.spec()
    if ids is None:
        if not spec.tasks:
            raise CampaignError(
                f"world {world.name!r} has no tasks: type tasks or import a JSONL file"
            )
        return [_task_dict(t) for t in spec.tasks]
    out = []
    for task_id in ids:
        task = spec.task(str(task_id).strip())
        if task is None:
            listed = ", ".join(t.id for t in spec.tasks) or "none"
            raise CampaignError(
                f"world {world.name!r} has no task {task_id!r} (its tasks: {listed})"
            )
        out.append(_task_dict(task))
    if not out:
        raise CampaignError("choose at least one of the world's tasks")
    return out


def trajectory_tasks(project, trajectory_ids: Sequence[Any]) -> list[dict]:
    """Recorded trajectories' starting states as tasks: each episode starts from the
    trajectory's system prompt, tools and task (no world)."""
    ids: list[int] = []
    for raw in trajectory_ids:
        try:
            ids.append(int(raw))
        except (TypeError, ValueError):
            raise CampaignError(f"trajectories: {raw!r} is not a trajectory id") from None
    rows = {
        t.pk: t
        for t in Trajectory.objects.filter(project=project, pk__in=ids).only(
            "id", "task_instruction"
        )
    }
    missing = [i for i in ids if i not in rows]
    if missing:
        raise CampaignError(f"trajectories: no trajectory {missing[0]} in this project")
    if not ids:
        raise CampaignError("trajectories: choose at least one recorded trajectory")
    return [
        {
            "id": f"trajectory-{pk}",
            "instruction": rows[pk].task_instruction or f"(trajectory {pk} records no task)",
            "trajectory": pk,
        }
        for pk in dict.fromkeys(ids)
    ]


# ---- making one -----------------------------------------------------------------------------


def plural(n: int, word: str, many: str | None = None) -> str:
    """ "1 episode", "2 episodes"."""
    return f"{n} {word if n == 1 else (many or word + 's')}"


def world_model_candidates(project) -> tuple[ModelEndpoint | None, list[ModelEndpoint]]:
    """The world models a campaign's episodes can be answered by when none is chosen: the
    project's world models that read a world's prompt (all but the retrieval baseline, which
    answers with recorded observations), by name; and the project's default world model when it
    is one of them (else None: the default is the retrieval baseline, or there is none)."""
    found = list(
        ModelEndpoint.objects.filter(project=project, role=EndpointRole.WORLD)
        .exclude(kind="retrieval")
        .order_by("name", "pk")
    )
    default = next((e for e in found if e.is_default), None)
    return default, found


def choose_world_model(project) -> ModelEndpoint:
    """The world model of a campaign that names none: the project's default world model when
    it reads a world's prompt, else the only one that does. Never a silent pick among several:
    CampaignError names them."""
    default, found = world_model_candidates(project)
    if default is not None:
        return default
    if len(found) == 1:
        return found[0]
    if not found:
        raise CampaignError(
            "world model: the project has no world model that reads a world's prompt: "
            "an admin of the project adds one on the Models page"
        )
    names = ", ".join(e.name for e in found)
    raise CampaignError(
        f"world model: the project has {len(found)} world models that read a world's prompt "
        f"({names}) and none is the default: choose one"
    )


def _check_typed_tasks(tasks: Sequence[dict], world: World | None) -> None:
    """Typed or imported tasks against the world: their rubrics' state checks name its state
    keys, and a check that needs an expected answer has one."""
    if world is None or world.latest is None:
        return
    spec = world.latest.spec()
    keys = [k.name for k in spec.state_keys]
    for i, task in enumerate(tasks):
        at = f"tasks[{i}] ({task.get('id')})"
        try:
            parsed = rubrics.read_tasks([task], "task", state_keys=keys)
            if parsed[0].rubric is not None:
                rubrics.check_task_rubrics(parsed, spec.rubric, spec.termination)
        except rubrics.RubricError as exc:
            raise CampaignError(f"{at}: {exc}") from None


def create_campaign(project, user, data: CampaignData) -> Campaign:
    """The campaign row (snapshots of its models and world), its arms, all its episode slots
    with their seeds and its own API token, in one transaction. The caller enqueues it
    (`studio.tasks.enqueue_campaign`). CampaignError names what is wrong."""
    from studio.services import tokens

    name = (data.name or "").strip()
    if not name:
        raise CampaignError("name: a campaign needs a name")
    if len(name) > 200:
        raise CampaignError("name: at most 200 characters")
    if data.source not in CampaignSource.values:
        raise CampaignError(f"source must be one of {', '.join(CampaignSource.values)}")
    recorded = data.source == CampaignSource.TRAJECTORIES
    world = data.world
    version = None
    if not recorded:
        if world is None:
            raise CampaignError("world: choose the world the episodes play in")
        if world.project_id != project.pk:
            raise CampaignError("world: not a world of this project")
        version = world.latest
        if version is None:
            raise CampaignError(f"world: {world.name!r} has no version yet")
    agent = data.agent
    if agent is None or agent.project_id != project.pk or agent.role != EndpointRole.AGENT:
        raise CampaignError("agent model: choose an agent model of this project's Models page")
    if agent.kind != "openai" or not agent.base_url:
        raise CampaignError(
            f"agent model: {agent.name!r} is not an OpenAI-compatible server (kind openai, "
            "with a base URL)"
        )
    world_model = data.world_model
    if world_model is None:
        world_model = choose_world_model(project)
    if world_model.project_id != project.pk or world_model.role != EndpointRole.WORLD:
        raise CampaignError("world model: choose a world model of this project's Models page")
    if not recorded and world_model.kind == "retrieval":
        raise CampaignError(
            f"world model: {world_model.name!r} is the retrieval baseline, which reads no "
            "world's prompt: choose a world model"
        )
    tasks = [dict(t) for t in data.tasks]
    if not tasks:
        raise CampaignError("tasks: a campaign needs at least one task")
    if len(tasks) > MAX_TASKS:
        raise CampaignError(f"tasks: at most {MAX_TASKS}")
    ids = [str(t.get("id") or "") for t in tasks]
    if len(set(ids)) != len(ids):
        raise CampaignError("tasks: two tasks have the same id")
    if data.source in (CampaignSource.TYPED, CampaignSource.FILE):
        _check_typed_tasks(tasks, world)
    if recorded and any(not isinstance(t.get("trajectory"), int) for t in tasks):
        raise CampaignError("tasks: a recorded start names its trajectory")
    episodes = data.episodes_per_task
    if isinstance(episodes, bool) or not isinstance(episodes, int) or episodes < 1:
        raise CampaignError("episodes per task: a whole number of 1 or more")
    max_steps = data.max_steps
    if (
        isinstance(max_steps, bool)
        or not isinstance(max_steps, int)
        or not 1 <= max_steps <= MAX_STEPS_LIMIT
    ):
        raise CampaignError(f"max steps: a whole number from 1 to {MAX_STEPS_LIMIT}")
    perturbations = list(data.perturbations)
    for p in perturbations:
        if p.project_id != project.pk:
            raise CampaignError(f"perturbations: {p.name!r} is not in this project's library")
    if len({p.pk for p in perturbations}) != len(perturbations):
        raise CampaignError("perturbations: one is chosen twice")
    total = len(tasks) * episodes * (1 + len(perturbations))
    limit = settings.STUDIO_CAMPAIGN_MAX_EPISODES
    if total > limit:
        raise CampaignError(
            f"{plural(len(tasks), 'task')} x {plural(episodes, 'episode')} x "
            f"{plural(1 + len(perturbations), 'arm')} = {plural(total, 'episode')}, more than "
            f"{limit} (STUDIO_CAMPAIGN_MAX_EPISODES)"
        )
    concurrency = data.concurrency or settings.STUDIO_CAMPAIGN_CONCURRENCY
    most = settings.STUDIO_CAMPAIGN_MAX_CONCURRENCY
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or not 1 <= concurrency:
        raise CampaignError("concurrency: a whole number of 1 or more")
    if concurrency > most:
        raise CampaignError(
            f"concurrency: at most {most} episodes at once (STUDIO_CAMPAIGN_MAX_CONCURRENCY)"
        )
    try:
        seed = rubrics.check_seed(data.seed)
    except rubrics.RubricError as exc:
        raise CampaignError(str(exc)) from None
    if seed is None:
        seed = rubrics.draw_seed()
    if not 0.0 <= float(data.temperature) <= 2.0:
        raise CampaignError("temperature: from 0 to 2")
    if not 1 <= int(data.max_tokens) <= 1_000_000:
        raise CampaignError("max tokens: a whole number of 1 or more")
    from studio.services.perturbations import rule_input
    from studio.services.simulation import world_label

    arms = [{"name": p.name, "rules": [rule_input(p)]} for p in perturbations]
    with transaction.atomic():
        campaign = Campaign.objects.create(
            project=project,
            requester=user if getattr(user, "pk", None) else None,
            name=name,
            world=world,
            world_version=version,
            world_label=world_label(version) if version is not None else {},
            source=data.source,
            tasks=tasks,
            agent_endpoint=agent,
            agent_name=agent.name,
            agent_model=agent.model,
            agent_base_url=agent.base_url,
            world_endpoint=world_model,
            world_model_name=world_model.name,
            world_model=world_model.model,
            world_base_url=world_model.base_url,
            world_kind=world_model.kind,
            episodes_per_task=episodes,
            max_steps=max_steps,
            arms=arms,
            seed=seed,
            concurrency=concurrency,
            agent_params={
                "temperature": float(data.temperature),
                "max_tokens": int(data.max_tokens),
            },
            queue=queue_name("default"),
            episodes_total=total,
        )
        token, _secret = tokens.create_token(  # the secret is never shown: only the job uses it
            project,
            f"campaign {campaign.pk}: {name}"[:100],
            user if getattr(user, "pk", None) else None,
        )
        Campaign.objects.filter(pk=campaign.pk).update(token=token)
        campaign.token = token
        arm_names = ["none", *[p.name for p in perturbations]]
        CampaignEpisode.objects.bulk_create(
            [
                CampaignEpisode(
                    campaign=campaign,
                    task_index=t,
                    task_id=str(task.get("id") or "")[:100],
                    arm=arm,
                    arm_name=arm_names[arm][:100],
                    repeat=r,
                    seed=slot_seed(seed, t, r),
                )
                for t, task in enumerate(tasks)
                for arm in range(len(arm_names))
                for r in range(episodes)
            ]
        )
    return campaign


# ---- stopping and going on ------------------------------------------------------------------


def cancel_campaign(campaign: Campaign) -> None:
    """A queued campaign is cancelled at once; a running one is asked to stop: its worker
    ends the episodes in flight (cause "cancelled") and keeps the slots that ended."""
    from studio.services.jobs import request_cancel

    request_cancel(Campaign, campaign.pk)


def resumable(campaign: Campaign) -> bool:
    """Whether Resume has something to play: a campaign that stopped (failed or cancelled),
    or one that succeeded with episodes that failed with an error, and a slot not played to
    its end."""
    if campaign.status not in (JobStatus.FAILED, JobStatus.CANCELLED, JobStatus.SUCCEEDED):
        return False
    return campaign.episodes.exclude(status=SlotStatus.DONE).exists()


def resume_campaign(campaign: Campaign) -> bool:
    """A failed or cancelled campaign, or a succeeded one with failed episodes, back to queued
    (the caller enqueues it, in the same transaction): it plays the slots not done, each in a
    new episode (the earlier ones stay in the library). False when it had not stopped, or
    every slot is done."""
    from studio.services.jobs import reopen

    if not campaign.episodes.exclude(status=SlotStatus.DONE).exists():
        return False
    if reopen(Campaign, campaign.pk):
        return True
    # a campaign that succeeded with failed episodes: the same reopening, from SUCCEEDED
    return bool(
        Campaign.objects.filter(pk=campaign.pk, status=JobStatus.SUCCEEDED).update(
            status=JobStatus.QUEUED,
            error="",
            finished_at=None,
            cancel_requested=False,
            phase="queued",
            message_id="",
        )
    )


def campaign_trajectories(campaign: Campaign) -> QuerySet[Trajectory]:
    """Every episode the campaign made, played again ones included (by the campaign id its
    metadata names: a project archive rewrites that id, not the tag's name)."""
    return Trajectory.objects.filter(
        project_id=campaign.project_id, source_format="episode", metadata__campaign__id=campaign.pk
    )


def slot_trajectory_ids(campaign: Campaign, which: str) -> list[int]:
    """The slots' current episodes: "all", "success", "failed" (not a success, or the slot
    failed), "unscored" (ended with no score)."""
    slots = campaign.episodes.filter(trajectory__isnull=False)
    if which == "success":
        slots = slots.filter(status=SlotStatus.DONE, success=True)
    elif which == "failed":
        slots = slots.filter(status=SlotStatus.FAILED) | slots.filter(
            status=SlotStatus.DONE, success=False
        )
    elif which == "unscored":
        slots = slots.filter(status=SlotStatus.DONE, success__isnull=True)
    elif which != "all":
        raise CampaignError(f"which: one of all, success, failed, unscored (got {which!r})")
    return list(
        slots.order_by("task_index", "arm", "repeat").values_list("trajectory_id", flat=True)
    )


def cost_of(tokens_in: int, tokens_out: int, price_in, price_out) -> float | None:
    """USD for the tokens at prices per million tokens; None when a price is unknown."""
    if price_in is None or price_out is None:
        return None
    return (int(tokens_in) * float(price_in) + int(tokens_out) * float(price_out)) / 1_000_000


# ---- results --------------------------------------------------------------------------------


@dataclass
class CampaignResults:
    """overall / by_task / by_arm / by_task_arm rows: episodes, ended (played to an end, no
    error), failed (an error), cancelled (waiting for Resume), pending (not played yet),
    running, scored, unscored (ended with no score), successes, success_rate (of the scored),
    mean_reward, mean_steps; overall also has replaced (the campaign's episodes in the library
    that no slot holds now: cancelled or failed ones played again). causes: the episodes that
    were scored and not a success (their end cause) and the failed slots (cause "error"), per
    arm. errors: the failed slots' distinct errors with their counts, most first."""

    overall: dict[str, Any]
    by_task: list[dict[str, Any]] = field(default_factory=list)
    by_arm: list[dict[str, Any]] = field(default_factory=list)
    by_task_arm: list[dict[str, Any]] = field(default_factory=list)
    rewards: list[dict[str, Any]] = field(default_factory=list)
    causes: list[dict[str, Any]] = field(default_factory=list)
    models: list[dict[str, Any]] = field(default_factory=list)
    errors: list[dict[str, Any]] = field(default_factory=list)


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _figures(slots: list[CampaignEpisode]) -> dict[str, Any]:
    """One row of figures: how many slots are in each state, and what the ended ones scored.
    ended: played to an end without an error (DONE); failed: an error ended them; cancelled:
    waiting for Resume; pending: not played yet; running: being played."""
    by_status: dict[str, int] = {}
    for s in slots:
        by_status[s.status] = by_status.get(s.status, 0) + 1
    ended = [s for s in slots if s.status == SlotStatus.DONE]
    scored = [s for s in ended if s.success is not None]
    successes = sum(1 for s in scored if s.success)
    return {
        "episodes": len(slots),
        "ended": len(ended),
        "failed": by_status.get(SlotStatus.FAILED, 0),
        "cancelled": by_status.get(SlotStatus.CANCELLED, 0),
        "pending": by_status.get(SlotStatus.PENDING, 0),
        "running": by_status.get(SlotStatus.RUNNING, 0),
        "scored": len(scored),
        "unscored": len(ended) - len(scored),
        "successes": successes,
        "success_rate": successes / len(scored) if scored else None,
        "mean_reward": _mean([s.reward for s in ended if s.reward is not None]),
        "mean_steps": _mean([float(s.steps) for s in ended]),
    }


def _spec_of(campaign: Campaign) -> Any:
    version = campaign.world_version
    if campaign.source == CampaignSource.TRAJECTORIES or version is None:
        return None
    try:
        return version.spec()
    except ValueError:
        return None


def scored_by(campaign: Campaign, task: dict[str, Any], spec: Any = None) -> str:
    """What scores a task's episodes a success or not: "task" (its own rubric), "world" (the
    world's rubric), or "" (no episode check applies: its episodes are "not scored"). As
    `studio.services.rewards.plan_of` reads it: a check that needs an expected answer or
    success criteria applies only when the task has them."""
    spec = spec if spec is not None else _spec_of(campaign)
    if spec is None:
        return ""
    try:
        found = spec.task(str(task.get("id") or "")) if campaign.source == "world" else None
        if found is None:
            fields = {k: task[k] for k in TASK_KEYS if k in task}
            (found,) = rubrics.read_tasks([fields], "task")
    except (rubrics.RubricError, ValueError):
        return ""
    rubric = found.rubric if found.rubric is not None else spec.rubric
    kept = rubrics.applicable(
        rubric, expected=found.expected, success_criteria=found.success_criteria
    )
    if not kept.episode:
        return ""
    return "task" if found.rubric is not None else "world"


def results(campaign: Campaign) -> CampaignResults:
    """What the campaign's slots add up to: overall, per task, per arm, per task and arm;
    one row per ended slot; the causes of the episodes that were scored and no success, and of
    the failed ones; the failed ones' errors; tokens and cost per model."""
    slots = list(campaign.episodes.all())
    tasks = campaign.tasks or []
    arm_names = [
        "none",
        *[str(a.get("name") or f"arm {i + 1}") for i, a in enumerate(campaign.arms or [])],
    ]
    out = CampaignResults(overall=_figures(slots))
    spec = _spec_of(campaign)
    for t, task in enumerate(tasks):
        of_task = [s for s in slots if s.task_index == t]
        out.by_task.append(
            {
                "task_index": t,
                "task_id": str(task.get("id") or ""),
                "instruction": str(task.get("instruction") or ""),
                "scored_by": scored_by(campaign, task, spec),
                **_figures(of_task),
            }
        )
        for arm, arm_name in enumerate(arm_names):
            out.by_task_arm.append(
                {
                    "task_index": t,
                    "task_id": str(task.get("id") or ""),
                    "arm": arm,
                    "arm_name": arm_name,
                    **_figures([s for s in of_task if s.arm == arm]),
                }
            )
    for arm, arm_name in enumerate(arm_names):
        out.by_arm.append(
            {"arm": arm, "arm_name": arm_name, **_figures([s for s in slots if s.arm == arm])}
        )
    causes: dict[tuple[str, str], int] = {}
    errors: dict[str, int] = {}
    for s in slots:
        if s.status == SlotStatus.DONE:
            out.rewards.append(
                {
                    "slot": s.pk,
                    "trajectory": s.trajectory_id,
                    "task_id": s.task_id,
                    "arm_name": s.arm_name,
                    "reward": s.reward,
                    "steps": s.steps,
                    "success": s.success,
                    "end_cause": s.end_cause,
                }
            )
        # not a success: scored below 1, or an error; an unscored episode is neither
        if (s.status == SlotStatus.DONE and s.success is False) or s.status == SlotStatus.FAILED:
            cause = "error" if s.status == SlotStatus.FAILED else (s.end_cause or "unknown")
            causes[(cause, s.arm_name)] = causes.get((cause, s.arm_name), 0) + 1
        if s.status == SlotStatus.FAILED:
            message = s.error.strip() or "(no error text)"
            errors[message] = errors.get(message, 0) + 1
    out.causes = [
        {"cause": cause, "count": count, "arm_name": arm_name}
        for (cause, arm_name), count in sorted(causes.items(), key=lambda kv: (-kv[1], kv[0]))
    ]
    out.errors = [
        {"error": message, "count": count}
        for message, count in sorted(errors.items(), key=lambda kv: (-kv[1], kv[0]))
    ]
    current = {s.trajectory_id for s in slots if s.trajectory_id}
    out.overall["replaced"] = campaign_trajectories(campaign).exclude(pk__in=current).count()
    agent, world = campaign.agent_endpoint, campaign.world_endpoint
    out.models = [
        {
            "role": "agent",
            "name": campaign.agent_name,
            "model": campaign.agent_model,
            "tokens_in": campaign.agent_tokens_in,
            "tokens_out": campaign.agent_tokens_out,
            "cost": cost_of(
                campaign.agent_tokens_in,
                campaign.agent_tokens_out,
                getattr(agent, "price_in_per_mtok", None),
                getattr(agent, "price_out_per_mtok", None),
            ),
        },
        {
            "role": "world",
            "name": campaign.world_model_name,
            "model": campaign.world_model,
            "tokens_in": campaign.world_tokens_in,
            "tokens_out": campaign.world_tokens_out,
            "cost": cost_of(
                campaign.world_tokens_in,
                campaign.world_tokens_out,
                getattr(world, "price_in_per_mtok", None),
                getattr(world, "price_out_per_mtok", None),
            ),
        },
    ]
    return out


def is_running(campaign: Campaign) -> bool:
    return campaign.status in (JobStatus.QUEUED, JobStatus.RUNNING)
