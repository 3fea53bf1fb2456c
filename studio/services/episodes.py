"""Episodes: a world served to an agent outside the studio. `reset` starts a trajectory in the
world (recorded in the project as it happens); each `step` is a one-future job that a worker
runs with the project's default world model and writes into the episode's own branch
(`studio.jobs.episode_steps`); the web side waits for its answer (`studio.jobs.replies`).
Plain synchronous functions: the ASGI app calls them in threads."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from inference.simulation.request import InvalidRequest
from studio.models import (
    ApiToken,
    Branch,
    EndpointRole,
    JobStatus,
    ModelEndpoint,
    SimulationJob,
    Step,
    Trajectory,
    World,
    WorldVersion,
)
from studio.queues import queue_name
from studio.services import job_limits, tokens
from studio.services.endpoints import sampling_defaults, world_input
from studio.services.simulation import (
    job_fields,
    trajectory_world_label,
    world_label,
    world_of_trajectory,
)
from studio.services.worlds import start_trajectory

DEFAULT_MAX_STEPS = 100
MAX_STEPS_LIMIT = 1000


class EpisodeError(ValueError):
    """What the agent did wrong, said to it (HTTP `status` / a WebSocket error of `code`).
    Every transport maps these the same way (`studio.serving`): the HTTP status, the
    WebSocket error's `code`, and for MCP an `isError` result."""

    status = 400
    code = "EPISODE_ERROR"
    retry_after: float | None = None  # seconds, sent as Retry-After (429, 503)

    def __init__(self, message: str, *, retry_after: float | None = None):
        super().__init__(message)
        if retry_after is not None:
            self.retry_after = retry_after


class EpisodeInvalid(EpisodeError):
    """The request's content is malformed (bad JSON, unpaired surrogates, NUL, a value of
    the wrong type or range, arguments that break a tool's schema): HTTP 422."""

    status = 422
    code = "VALIDATION_ERROR"


class EpisodeNotFound(EpisodeError):
    """No such episode (or world, or task) for this token: HTTP 404."""

    status = 404
    code = "NOT_FOUND"


class EpisodeConflict(EpisodeError):
    """The episode is not in a state to take this (done, a step still running, another
    step taken meanwhile): HTTP 409."""

    status = 409
    code = "CONFLICT"


class EpisodeTooLarge(EpisodeError):
    """A body, action or task over its size limit (the message names the setting): 413."""

    status = 413
    code = "TOO_LARGE"


class EpisodeBusy(EpisodeError):
    """A limit that passes (steps waiting, resets or steps per minute): try again after
    `retry_after` seconds (HTTP 429 with Retry-After)."""

    status = 429
    code = "RATE_LIMITED"


class EpisodeUnavailable(EpisodeError):
    """The studio cannot answer now but the same request may succeed later (a worker lost,
    no worker for the queue, the model server down): HTTP 503 with Retry-After. Nothing
    of the step was recorded."""

    status = 503
    code = "UNAVAILABLE"
    retry_after = 5.0


class TokenRevoked(Exception):
    """The token was revoked since the connection opened."""


@dataclass
class StepResult:
    """What the agent gets: OpenEnv's {"observation", "reward", "done"}. `observation`
    carries "metadata" (the reward's breakdown per criterion, the end cause, the seed)."""

    observation: dict[str, Any]
    done: bool
    reward: float | None = None


def world_of(token: ApiToken, world_id: int) -> World | None:
    return World.objects.filter(project_id=token.project_id, pk=world_id).first()


def reset(
    token: ApiToken,
    world: World,
    *,
    task: Any = "",
    task_id: Any = "",
    seed: Any = None,
    max_steps: Any = None,
    client: str = "",
    task_spec: dict[str, Any] | None = None,
    rate_limited: bool = True,
    version: WorldVersion | None = None,
) -> tuple[Trajectory, StepResult]:
    """Start an episode in the world's latest version. The task: the world's task `task_id`
    (EpisodeNotFound when it has none of that id), else the `task` typed here, else one of
    the world's tasks drawn with the seed (the same seed, the same task), else a default.
    `seed` fixes the episode's sampling (drawn when not given; recorded either way);
    `max_steps`: this when given, else the task's own limit, else DEFAULT_MAX_STEPS. Types and
    sizes are checked (EpisodeInvalid 422, EpisodeTooLarge 413) before the reset is counted
    against the token's rate (EpisodeBusy 429) and anything is written.

    `task_spec`: a task of the caller's own, as a world's task is written ({"id",
    "instruction", "expected"?, "success_criteria"?, "max_steps"?, "rubric"?}; a campaign's
    typed or imported task): recorded on the episode, whose rewards then score it with its
    own expected answer and rubric (`rewards.plan_of`). `rate_limited=False`: the reset is
    not counted against the token's rate (a campaign's own token; outside agents always
    are). `version`: play in this version of the world (a campaign's, fixed when it was
    made), not its latest."""
    from inference import rubrics
    from studio.services import episode_limits
    from studio.services.episode_inputs import clean_text

    version = version if version is not None else world.latest
    if version is None:
        raise EpisodeNotFound(f"world {world.name!r} has no version yet")
    if max_steps in (None, ""):
        max_steps = None
    elif (
        isinstance(max_steps, bool)
        or not isinstance(max_steps, int)
        or not 1 <= max_steps <= MAX_STEPS_LIMIT
    ):
        raise EpisodeInvalid(f"max_steps must be a whole number from 1 to {MAX_STEPS_LIMIT}")
    if task is None:
        task = ""
    if not isinstance(task, str):
        raise EpisodeInvalid("task must be text (the instruction the agent is given)")
    if task_id is None:
        task_id = ""
    if not isinstance(task_id, str):
        raise EpisodeInvalid("task_id must be text (the id of one of the world's tasks)")
    try:
        seed = rubrics.check_seed(seed)
    except rubrics.RubricError as exc:
        raise EpisodeInvalid(str(exc)) from None
    clean_text(task, "task")
    clean_text(task_id, "task_id")
    episode_limits.check_task(task)
    task_id = task_id.strip()
    if len(task_id) > rubrics.MAX_NAME:
        raise EpisodeInvalid(f"task_id is longer than {rubrics.MAX_NAME} characters")
    recorded_task: dict[str, Any] | None = None
    if task_spec is not None:
        try:
            (parsed,) = rubrics.read_tasks([task_spec], "task_spec")
        except (rubrics.RubricError, ValueError) as exc:
            raise EpisodeInvalid(str(exc)) from None
        recorded_task = parsed.to_file()
        task, task_id = parsed.instruction, ""
        episode_limits.check_task(task)
    if task_id and task.strip():
        raise EpisodeInvalid(
            "give task (an instruction of your own) or task_id (one of the world's tasks), not both"
        )
    spec = version.spec()
    if seed is None:
        seed = rubrics.draw_seed()
    chosen = None
    if task_id:
        chosen = spec.task(task_id)
        if chosen is None:
            listed = ", ".join(t.id for t in spec.tasks[:20]) or "none"
            if len(spec.tasks) > 20:
                listed += f" and {len(spec.tasks) - 20} more"
            raise EpisodeNotFound(
                f"world {world.name!r} has no task {task_id!r} (its tasks: {listed})"
            )
    elif not task.strip() and spec.tasks:
        chosen = rubrics.choose_task(spec.tasks, seed)
    instruction = chosen.instruction if chosen is not None else task.strip()
    # the caller's limit first (a trainer that asks for 3 steps gets 3), else the task's own
    limit = max_steps or (chosen.max_steps if chosen is not None else None)
    if recorded_task is not None:
        limit = limit or recorded_task.get("max_steps")
    limit = limit or DEFAULT_MAX_STEPS
    if rate_limited:
        episode_limits.count(token.pk, "reset")
    with transaction.atomic():  # never a half-made episode
        trajectory = start_trajectory(version, instruction or f"An episode in {world.name}")
        meta = dict(trajectory.metadata or {})
        branch_id = Branch.objects.filter(trajectory=trajectory, parent__isnull=True).values_list(
            "pk", flat=True
        )[0]
        meta["episode"] = {
            "token": token.name,
            "token_id": token.pk,
            "client": client,
            "max_steps": limit,
            "branch": branch_id,
            "seed": seed,
            "task_id": chosen.id if chosen is not None else "",
            "status": "running",
            "return": None,
        }
        if recorded_task is not None:
            meta["episode"]["task_id"] = recorded_task["id"]
            meta["episode"]["task_spec"] = recorded_task
        Trajectory.objects.filter(pk=trajectory.pk).update(metadata=meta, source_format="episode")
    trajectory.metadata = meta
    trajectory.source_format = "episode"
    task_ref = chosen.id if chosen is not None else ""
    if recorded_task is not None:
        task_ref = recorded_task["id"]
    return trajectory, StepResult(
        observation={
            "episode_id": str(trajectory.pk),
            "text": spec.initial_state,
            "task": trajectory.task_instruction,
            "task_id": task_ref,
            "tools": tool_objects(spec),
            "step": 0,
            "metadata": {"seed": seed, "task_id": task_ref, "max_steps": limit},
        },
        done=False,
    )


def tool_objects(spec: Any) -> list[dict[str, Any]]:
    """The world's tools as MCP tool objects {"name", "description", "input_schema"} (what
    openenv-core's MCPToolClient reads from a reset)."""
    return [
        {
            "name": t["function"]["name"],
            "description": t["function"].get("description") or "",
            "input_schema": t["function"].get("parameters") or {"type": "object"},
        }
        for t in spec.tools
    ]


def episode_of(token: ApiToken, episode_id: Any) -> Trajectory:
    trajectory = Trajectory.objects.filter(
        pk=_episode_pk(episode_id), project_id=token.project_id, source_format="episode"
    ).first()
    if trajectory is None:
        raise EpisodeNotFound(f"episode_id {episode_id!r} is not an episode of this project")
    return trajectory


def action_text(action: Any) -> str:
    """The agent's action as the trajectory records it: `{"action": "ls -la"}` or
    `{"text": ...}` is that text; anything else (a tool call `{"name", "arguments"}`) is its
    JSON."""
    if isinstance(action, str):
        return action
    if not isinstance(action, dict) or not action:
        raise EpisodeInvalid('action must be an object, e.g. {"action": "ls"} or a tool call')
    for key in ("action", "text", "command"):
        if isinstance(action.get(key), str) and len(action) == 1:
            return action[key]
    return json.dumps(action, ensure_ascii=False)


class _Again(Exception):
    """What the step was made from changed under it: make it again from the rows."""


def start_step(
    token: ApiToken,
    episode_id: Any,
    action: Any,
    *,
    check_token: bool = False,
    world_endpoint: ModelEndpoint | None = None,
    perturbations: list[dict[str, Any]] | None = None,
) -> SimulationJob:
    """Queue the world model's answer to `action` at the episode's next step: the job row.
    An agent waits on every step, so this costs four reads and one insert, with no
    transaction: one step at a time is the database's rule (`one_open_step_per_episode`),
    and the world version an episode plays in never changes. The caller enqueues the job
    (`studio.tasks.enqueue_episode_step`). Raises EpisodeError for what the agent did wrong.
    `check_token`: refuse (TokenRevoked) a token revoked since it was read, in the same
    query that reads the episode. `world_endpoint`: this world model answers instead of the
    project's default (a campaign's own); `perturbations`: rules (as a simulation job's
    `perturbations`, `inference.perturbations.build_rule`) applied to this step, those whose
    steps do not include it left out."""
    for _ in range(3):
        try:
            return _start_step_once(
                token, episode_id, action, check_token, world_endpoint, perturbations
            )
        except _Again:
            continue
    raise EpisodeConflict("the episode changed while this step was sent: send it again")


def _start_step_once(
    token: ApiToken,
    episode_id: Any,
    action: Any,
    check_token: bool,
    world_endpoint: ModelEndpoint | None = None,
    perturbations: list[dict[str, Any]] | None = None,
):
    from inference.simulation.request import Defaults, ForkFacts, SimulationRequest

    text = action_text(action)
    pk = _episode_pk(episode_id)
    rows = Trajectory.objects.filter(pk=pk, project_id=token.project_id, source_format="episode")
    if check_token:
        tokens.record_use(token)  # its "last used", written now and then
        rows = rows.filter(
            project__api_tokens__pk=token.pk, project__api_tokens__revoked_at__isnull=True
        )
    trajectory = (
        rows.only("id", "project_id", "domain", "metadata", "step_count", "source_format")
        .annotate(open_steps=job_limits.open_episode_steps())
        .first()
    )
    if trajectory is None:
        if check_token and not tokens.still_active(token):
            raise TokenRevoked
        raise EpisodeNotFound(f"episode_id {episode_id!r} is not an episode of this project")
    episode = (trajectory.metadata or {}).get("episode", {})
    index = trajectory.step_count  # an episode's steps are all appended by its jobs
    limit = max_steps_of(trajectory)
    if index >= limit:
        raise EpisodeConflict(f"the episode is done: it took its {limit} steps")
    if index > settings.STUDIO_MAX_HISTORY_STEPS:  # the step sends `index` turns of history
        raise EpisodeError(
            f"step {index} would send {index} steps of history to the world model: the limit "
            f"is {settings.STUDIO_MAX_HISTORY_STEPS} (STUDIO_MAX_HISTORY_STEPS); reset to "
            "start a new episode"
        )
    busy = job_limits.episode_steps_refusal(trajectory.open_steps)  # type: ignore[attr-defined]
    if busy is not None:
        raise EpisodeBusy(busy)
    branch_id = episode.get("branch") or trajectory.root_branch.pk
    world = trajectory_world_label(trajectory)
    endpoints = ModelEndpoint.objects.filter(
        project_id=trajectory.project_id, role=EndpointRole.WORLD
    ).order_by("-is_default", "name")
    if world is not None:
        # an episode plays in its world: never answered by the baseline, which reads no
        # world's prompt (a flight search answered with a recorded calendar)
        endpoints = endpoints.exclude(kind="retrieval")
    endpoint = world_endpoint if world_endpoint is not None else endpoints.first()
    if endpoint is None and world is not None:
        raise EpisodeError(
            f"the episode plays in world {world.get('name')!r}, and the project has no world "
            "model that reads a world's prompt (the retrieval baseline answers with recorded "
            "observations): an admin of the project adds one on its Models page"
        )
    if endpoint is None:
        raise EpisodeError("the project has no world model to answer")
    data = {
        "fork_index": index,
        "action": text,
        "mode": "next",
        "n": 1,
        **sampling_defaults(endpoint),
        **world_input(endpoint),
    }
    seed = step_seed_of(episode, index)
    if seed is not None:
        data["seed"] = seed  # the model's sampling of this step, fixed by the episode's seed
    rules = [r for r in perturbations or () if _rule_reaches(r, index)]
    if rules:
        data["perturbations"] = rules
    try:
        request = SimulationRequest.build(
            data,
            fork=ForkFacts(step_count=index, recorded_action=None, domain=trajectory.domain),
            defaults=Defaults(),  # the endpoint fills every field the defaults would
        )
    except InvalidRequest as exc:
        raise EpisodeError(exc.summary()) from None
    # the gpu queue for a model in the worker's process; else the episodes queue, whose
    # worker (a threads pool) waits on many model servers' answers at once
    queue = "gpu" if request.queue_kind == "gpu" else "episodes"
    fields = job_fields(
        request,
        requester_id=None,
        trajectory_id=trajectory.pk,
        branch_id=branch_id,
        world_endpoint=endpoint,
        appends=True,
        queue=queue_name(queue),
    )
    fields.update(message_id=uuid.uuid4().hex, dispatched_at=timezone.now())
    fields["params"]["reply_to"] = uuid.uuid4().hex  # where its answer is sent (jobs.replies)
    version = world_version_of(trajectory) if world is not None else None
    if world is not None and version is None:
        raise EpisodeError(
            f"version {world.get('version')} of world {world.get('name')!r}, which this episode "
            "plays in, was deleted: reset to start an episode in a world that exists"
        )
    if version is not None:
        fields["world_version_id"], fields["params"]["world"] = version
    try:
        if not connection.in_atomic_block:
            return SimulationJob.objects.create(**fields)  # one statement, committed
        with transaction.atomic():  # a savepoint keeps the caller's transaction usable
            return SimulationJob.objects.create(**fields)
    except IntegrityError:
        if SimulationJob.objects.filter(
            branch_id=branch_id, appends=True, status__in=[JobStatus.QUEUED, JobStatus.RUNNING]
        ).exists():
            raise EpisodeConflict(
                "the previous step is still being answered: wait for it"
            ) from None
        if version is not None and not WorldVersion.objects.filter(pk=version[0]).exists():
            _VERSIONS.clear()  # its world was deleted: the next try reads so and says it
        # else the open step ended between the insert and the check, or the episode went
        raise _Again from None


def _rule_reaches(rule: dict[str, Any], index: int) -> bool:
    """Whether a perturbation rule's steps (first_step..last_step, blank: open) hold `index`."""
    first, last = rule.get("first_step"), rule.get("last_step")
    return (first is None or first <= index) and (last is None or index <= last)


def step_seed_of(episode: dict[str, Any], index: int) -> int | None:
    """The seed of the episode's step `index`, from the episode's seed (None: it has none,
    an episode of an older release)."""
    seed = episode.get("seed")
    if isinstance(seed, bool) or not isinstance(seed, int):
        return None
    try:
        from inference.rubrics import step_seed
    except ImportError:  # a tree without the rubrics module: the same derivation
        import hashlib

        digest = hashlib.sha256(f"{seed}:{index}".encode()).digest()
        return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF
    return step_seed(seed, index)


# (world id, version number) -> (version id, the label jobs carry): a version never changes
_VERSIONS: dict[tuple[int, int], tuple[int, dict[str, Any]]] = {}


def world_version_of(trajectory: Trajectory) -> tuple[int, dict[str, Any]] | None:
    world = (trajectory.metadata or {}).get("world")
    if not isinstance(world, dict):
        return None
    key = (world.get("id"), world.get("version"))
    found = _VERSIONS.get(key)  # type: ignore[arg-type]
    if found is None:
        version = world_of_trajectory(trajectory)
        if version is None:
            return None
        found = (version.pk, world_label(version))
        if len(_VERSIONS) > 4096:
            _VERSIONS.clear()
        _VERSIONS[key] = found  # type: ignore[index]
    return found[0], dict(found[1])


def _episode_pk(episode_id: Any) -> int:
    if episode_id in (None, ""):
        raise EpisodeInvalid("episode_id is required: the one /reset returned")
    try:
        return int(episode_id)
    except (TypeError, ValueError):
        raise EpisodeNotFound(
            f"episode_id {episode_id!r} is not an episode of this project"
        ) from None


UNCLAIMED = (
    "no worker took this step within {s} s: is a worker consuming the {queue} queue? (e.g. "
    "celery -A studio worker -Q {queue} -P threads, as scripts/dev.sh starts one)"
)


def finished_job(job_id: int, *, unclaimed_after_s: float | None = None) -> SimulationJob | None:
    """The job if it ended, else None. `unclaimed_after_s`: a step that no worker has taken
    for that long fails, saying which queue nobody consumes (an agent waits on it)."""
    job = SimulationJob.objects.filter(pk=job_id).first()
    if job is None or job.is_finished:
        return job
    waited = (timezone.now() - job.created_at).total_seconds()
    if job.status == JobStatus.QUEUED and unclaimed_after_s is not None:
        if waited > unclaimed_after_s:
            message = UNCLAIMED.format(s=round(unclaimed_after_s), queue=job.queue)
            SimulationJob.objects.filter(pk=job_id, status=JobStatus.QUEUED).update(
                status=JobStatus.FAILED, error=message, phase="failed", finished_at=timezone.now()
            )
            job.refresh_from_db()
            return job if job.is_finished else None
    return None


def max_steps_of(trajectory: Trajectory) -> int:
    return (trajectory.metadata or {}).get("episode", {}).get("max_steps", DEFAULT_MAX_STEPS)


def observation_of(
    episode_id: int, max_steps: int, step: Step, backend: str, verdict: Any = None
) -> StepResult:
    """What the agent gets back for `step` of its episode: "step" counts the steps taken so
    far. `verdict`: the step's `rewards.StepVerdict` (after `rewards.finish` when it ended
    the episode); without it, what the step's row recorded of it."""
    meta = step.meta or {}
    observation: dict[str, Any] = {
        "episode_id": str(episode_id),
        "text": step.observation,
        "step": step.index + 1,
        "parse_status": step.parse_status,
    }
    if verdict is not None:
        observation["metadata"] = dict(verdict.observation_metadata)
        reward, done = verdict.reward, bool(verdict.done) or step.index + 1 >= max_steps
    else:
        observation["metadata"] = {
            "seed": meta.get("seed"),
            "rubric": meta.get("rubric") or {},
            **({"state": meta["state"]} if isinstance(meta.get("state"), dict) else {}),
            "end_cause": meta.get("end_cause"),
        }
        reward = meta.get("reward")
        done = bool(meta.get("end_cause")) or step.index + 1 >= max_steps
    perturbation = (step.meta or {}).get("perturbation")
    if isinstance(perturbation, dict):
        observation["perturbation"] = perturbation.get("label")
    if backend == "retrieval":
        # said to the agent too: the baseline reads no world, it returns a recorded answer
        observation["baseline"] = "retrieval (non-neural): a recorded observation, not the world's"
    return StepResult(observation=observation, done=done, reward=reward)


def failure_of(job: SimulationJob) -> str:
    return f"the world model did not answer: {job.error or job.status}"


def failure_error(job: SimulationJob) -> EpisodeError:
    """What the agent is told of a step job that ended without a step. Nothing of it was
    recorded: the studio's failures (a worker lost, none for its queue, the model did not
    answer) are retryable (503); a step another answer took, or one cancelled in the
    studio, is a conflict (409)."""
    from studio.services.step_watch import (
        is_unavailable,
        is_worker_lost,
        lost_message,
        retry_after_s,
    )

    message = failure_of(job)
    if is_worker_lost(job):
        # the sweeper failed it first: told as the waiting process tells it (the job
        # page's text says "use Retry", a button the agent has not)
        lost = lost_message(job, job.finished_at or timezone.now())
        return EpisodeUnavailable(lost, retry_after=retry_after_s())
    if is_unavailable(job):
        return EpisodeUnavailable(job.error, retry_after=retry_after_s())
    if job.status == JobStatus.CANCELLED:
        return EpisodeConflict(f"the step was cancelled: {job.error or 'in the studio'}")
    if "answered at step" in (job.error or "") or "was deleted" in (job.error or ""):
        return EpisodeConflict(message)
    return EpisodeUnavailable(message)


def step_result(job: SimulationJob) -> StepResult:
    """The answer of a finished step job, read from the rows (when its worker's message
    did not come)."""
    if job.status != JobStatus.SUCCEEDED:
        raise failure_error(job)
    step = Step.objects.filter(branch_id=job.branch_id, index=job.fork_index).first()
    if step is None:
        raise EpisodeUnavailable("the world model's answer was not recorded")
    trajectory = job.trajectory
    result = observation_of(job.trajectory_id, max_steps_of(trajectory), step, job.backend)
    end = ((trajectory.metadata or {}).get("episode") or {}).get("end")
    if result.done and isinstance(end, dict) and end.get("step") == step.index:
        result.reward = end.get("reward")  # the episode's rubric included (`rewards.finish`)
    return result


def state(trajectory: Trajectory) -> dict[str, Any]:
    meta = trajectory.metadata or {}
    return {
        "episode_id": str(trajectory.pk),
        "step_count": trajectory.root_branch.all_steps().count(),
        "world": meta.get("world"),
        "task": trajectory.task_instruction,
        "max_steps": meta.get("episode", {}).get("max_steps"),
    }


# ---- ends that no world model answers (a campaign's agent plays through these) -------------


def plan_for(trajectory: Trajectory) -> Any:
    """The episode's `rewards.EpisodePlan` (None: it plays in no world, or its version is
    gone)."""
    from studio.services import rewards

    version = world_of_trajectory(trajectory)
    if version is None:
        return None
    episode = (trajectory.metadata or {}).get("episode") or {}
    return rewards.plan_of(version.spec(), episode, instruction=trajectory.task_instruction)


def submit_step(
    token: ApiToken, trajectory: Trajectory, action: Any, final_answer: str, plan: Any
) -> StepResult:
    """The world's submit action as the episode's next step (no model asked, no
    observation, as the episode API takes it): the step written, the episode ended with
    cause "submit" and scored. EpisodeConflict when the episode moved or ended meanwhile."""
    from inference.simulation.sink import NO_OBSERVATION
    from studio.services import rewards
    from studio.serving import episode_rows as rows

    text = action_text(action)
    trajectory.refresh_from_db(fields=["step_count", "metadata"])
    index = trajectory.step_count
    episode = (trajectory.metadata or {}).get("episode") or {}
    verdict = rewards.verdict_of(plan, index, "", None, final_answer=final_answer)
    row = rows.StepRow(
        token_id=token.pk,
        trajectory_id=trajectory.pk,
        branch_id=episode.get("branch") or trajectory.root_branch.pk,
        index=index,
        action=text,
        observation="",
        thinking="",
        raw_output="",
        observation_source=NO_OBSERVATION,
        parse_status="",
        meta={
            "model_call": False,
            "world": (trajectory.metadata or {}).get("world"),
            **verdict.step_meta,
        },
        timings={},
    )
    if not rows._write_orm(row, True, None):
        raise rows.why_not_written(trajectory.pk, index)
    final = rows.finish(trajectory.project_id, row, plan, verdict, final_answer, text)
    return StepResult(
        observation={
            "episode_id": str(trajectory.pk),
            "text": "",
            "step": index + 1,
            "parse_status": "",
            "metadata": dict(final.observation_metadata),
        },
        done=True,
        reward=final.reward,
    )


def end_with_answer(trajectory: Trajectory, final_answer: str, plan: Any) -> dict[str, Any]:
    """End the episode on the agent's final answer in a world that has no submit action
    (cause "final_answer"): no step is written (the world never saw it); the episode rubric
    scores the answer as it scores a submitted one. Returns the episode's end."""
    from studio.services import rewards

    trajectory.refresh_from_db(fields=["step_count", "metadata"])
    index = trajectory.step_count
    if plan is None:
        return end_with_cause(trajectory, "final_answer")
    verdict = rewards.verdict_of(plan, index, "", None, final_answer=final_answer)
    verdict = rewards._remade(verdict, cause="final_answer")
    final = rewards.finish(
        trajectory.project_id, trajectory.pk, plan, verdict, final_answer=final_answer
    )
    return final.end or {}


def end_with_cause(trajectory: Trajectory, cause: str, *, error: str = "") -> dict[str, Any]:
    """End a running episode with `cause` and no reward of its end ("error": the agent or
    the world model failed, `error` saying which and why, in end["errors"]; "max_steps" or
    "final_answer" of an episode with no rubric). An episode that ended keeps its end."""
    from studio.services import rewards

    trajectory.refresh_from_db(fields=["step_count"])
    end, _ = rewards._write_end(
        trajectory.pk,
        cause=cause,
        step=max(0, trajectory.step_count - 1),
        reward=None,
        breakdown={},
        errors={"error": error} if error else {},
    )
    return end


def reset_from_trajectory(
    token: ApiToken,
    source: Trajectory,
    *,
    seed: Any = None,
    max_steps: Any = None,
    client: str = "",
    rate_limited: bool = True,
) -> tuple[Trajectory, StepResult]:
    """Start an episode from a recorded trajectory's starting state: its domain, system
    prompt, tools and task, none of its steps, and no world (so no rubric: its reward is
    None). The world model answers it with the trajectory's own system prompt, as a
    simulation of that trajectory is answered."""
    from inference import rubrics
    from studio.services import episode_limits

    if source.project_id != token.project_id:
        raise EpisodeNotFound(f"trajectory {source.pk} is not in this project")
    if max_steps in (None, ""):
        max_steps = None
    elif (
        isinstance(max_steps, bool)
        or not isinstance(max_steps, int)
        or not 1 <= max_steps <= MAX_STEPS_LIMIT
    ):
        raise EpisodeInvalid(f"max_steps must be a whole number from 1 to {MAX_STEPS_LIMIT}")
    try:
        seed = rubrics.check_seed(seed)
    except rubrics.RubricError as exc:
        raise EpisodeInvalid(str(exc)) from None
    if seed is None:
        seed = rubrics.draw_seed()
    limit = max_steps or DEFAULT_MAX_STEPS
    if rate_limited:
        episode_limits.count(token.pk, "reset")
    instruction = source.task_instruction or f"From trajectory {source.pk}"
    with transaction.atomic():
        trajectory = Trajectory.objects.create(
            project_id=source.project_id,
            domain=source.domain,
            title=f"From {source.title}"[:500],
            task_instruction=instruction,
            system_prompt=source.system_prompt,
            tools=list(source.tools or []),
            metadata={"started_from": {"trajectory": source.pk, "title": source.title[:200]}},
            source_format="episode",
            source_key=f"start-{source.pk}-{uuid.uuid4().hex[:16]}",
            step_count=0,
        )
        branch = Branch.objects.create(trajectory=trajectory, name="start", origin="simulated")
        meta = dict(trajectory.metadata)
        meta["episode"] = {
            "token": token.name,
            "token_id": token.pk,
            "client": client,
            "max_steps": limit,
            "branch": branch.pk,
            "seed": seed,
            "task_id": "",
            "status": "running",
            "return": None,
        }
        Trajectory.objects.filter(pk=trajectory.pk).update(metadata=meta)
    trajectory.metadata = meta
    functions: list[dict[str, Any]] = []
    for tool in source.tools or []:
        if isinstance(tool, dict):
            function = tool.get("function")
            functions.append(function if isinstance(function, dict) else tool)
    return trajectory, StepResult(
        observation={
            "episode_id": str(trajectory.pk),
            "text": "",
            "task": instruction,
            "task_id": "",
            "tools": [
                {
                    "name": t.get("name", ""),
                    "description": t.get("description") or "",
                    "input_schema": t.get("parameters") or {"type": "object"},
                }
                for t in functions
            ],
            "step": 0,
            "metadata": {"seed": seed, "task_id": "", "max_steps": limit},
        },
        done=False,
    )
