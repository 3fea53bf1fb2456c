"""Episodes: a world served to an agent outside the studio. `reset` starts a trajectory in the
world (recorded in the project as it happens); each `step` is a one-future job that a worker
runs with the project's default world model and writes into the episode's own branch; the
web side waits for its row. Plain synchronous functions: the ASGI app calls them in
threads."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from django.db import transaction

from inference.simulation.request import InvalidRequest
from studio.models import (
    ApiToken,
    Branch,
    EndpointRole,
    JobStatus,
    SimulationJob,
    Trajectory,
    World,
)
from studio.services.endpoints import default_endpoint, sampling_defaults, world_input
from studio.services.simulation import build_request, start_simulation
from studio.services.worlds import start_trajectory

DEFAULT_MAX_STEPS = 100
MAX_STEPS_LIMIT = 1000


class EpisodeError(ValueError):
    """What the agent did wrong, said to it (HTTP 400 / a WebSocket error)."""


@dataclass
class StepResult:
    observation: dict[str, Any]
    done: bool
    reward: float | None = None


def world_of(token: ApiToken, world_id: int) -> World | None:
    return World.objects.filter(project_id=token.project_id, pk=world_id).first()


def reset(
    token: ApiToken, world: World, *, task: str = "", max_steps: Any = None, client: str = ""
) -> tuple[Trajectory, StepResult]:
    version = world.latest
    if version is None:
        raise EpisodeError(f"world {world.name!r} has no version yet")
    limit = DEFAULT_MAX_STEPS if max_steps in (None, "") else max_steps
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_STEPS_LIMIT:
        raise EpisodeError(f"max_steps must be a whole number from 1 to {MAX_STEPS_LIMIT}")
    if not isinstance(task, str):
        raise EpisodeError("task must be text (the instruction the agent was given)")
    with transaction.atomic():  # never a half-made episode
        trajectory = start_trajectory(version, task or f"An episode in {world.name}")
        meta = dict(trajectory.metadata or {})
        meta["episode"] = {"token": token.name, "client": client, "max_steps": limit}
        Trajectory.objects.filter(pk=trajectory.pk).update(metadata=meta, source_format="episode")
    trajectory.metadata = meta
    trajectory.source_format = "episode"
    spec = version.spec()
    return trajectory, StepResult(
        observation={
            "episode_id": str(trajectory.pk),
            "text": spec.initial_state,
            "task": trajectory.task_instruction,
            "tools": spec.tool_names,
            "step": 0,
        },
        done=False,
    )


def episode_of(token: ApiToken, episode_id: Any) -> Trajectory:
    if episode_id in (None, ""):
        raise EpisodeError("episode_id is required: the one /reset returned")
    try:
        pk = int(episode_id)
    except (TypeError, ValueError):
        raise EpisodeError(f"episode_id {episode_id!r} is not an episode of this project") from None
    trajectory = Trajectory.objects.filter(
        pk=pk, project_id=token.project_id, source_format="episode"
    ).first()
    if trajectory is None:
        raise EpisodeError(f"episode_id {episode_id!r} is not an episode of this project")
    return trajectory


def action_text(action: Any) -> str:
    """The agent's action as the trajectory records it: `{"action": "ls -la"}` or
    `{"text": ...}` is that text; anything else (a tool call `{"name", "arguments"}`) is its
    JSON."""
    if isinstance(action, str):
        return action
    if not isinstance(action, dict) or not action:
        raise EpisodeError('action must be an object, e.g. {"action": "ls"} or a tool call')
    for key in ("action", "text", "command"):
        if isinstance(action.get(key), str) and len(action) == 1:
            return action[key]
    return json.dumps(action, ensure_ascii=False)


def start_step(trajectory: Trajectory, action: Any) -> SimulationJob:
    """Queue the world model's answer to `action` at the episode's next step."""
    text = action_text(action)
    branch = trajectory.root_branch
    # one step at a time: two agents' calls on one episode queue behind this lock
    Branch.objects.select_for_update().filter(pk=branch.pk).first()
    index = branch.all_steps().count()
    limit = (trajectory.metadata or {}).get("episode", {}).get("max_steps", DEFAULT_MAX_STEPS)
    if index >= limit:
        raise EpisodeError(f"the episode is done: it took its {limit} steps")
    pending = SimulationJob.objects.filter(branch=branch, appends=True).exclude(
        status__in=[JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED]
    )
    if pending.exists():
        raise EpisodeError("the previous step is still being answered: wait for it")
    endpoint = default_endpoint(trajectory.project, EndpointRole.WORLD)
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
    try:
        request = build_request(branch, data)
    except InvalidRequest as exc:
        raise EpisodeError(exc.summary()) from None
    try:
        return start_simulation(
            user=None, branch=branch, request=request, world_endpoint=endpoint, append=True
        )
    except InvalidRequest as exc:
        raise EpisodeError(exc.summary()) from None


def finished_job(job_id: int) -> SimulationJob | None:
    job = SimulationJob.objects.filter(pk=job_id).first()
    return job if job is not None and job.is_finished else None


def step_result(job: SimulationJob) -> StepResult:
    trajectory = job.trajectory
    if job.status != JobStatus.SUCCEEDED:
        raise EpisodeError(f"the world model did not answer: {job.error or job.status}")
    step = trajectory.root_branch.steps.filter(index=job.fork_index).first()
    if step is None:
        raise EpisodeError("the world model's answer was not recorded")
    limit = (trajectory.metadata or {}).get("episode", {}).get("max_steps", DEFAULT_MAX_STEPS)
    observation = {
        "episode_id": str(trajectory.pk),
        "text": step.observation,
        "step": step.index,
        "parse_status": step.parse_status,
    }
    perturbation = (step.meta or {}).get("perturbation")
    if isinstance(perturbation, dict):
        observation["perturbation"] = perturbation.get("label")
    if job.backend == "retrieval":
        # said to the agent too: the baseline reads no world, it returns a recorded answer
        observation["baseline"] = "retrieval (non-neural): a recorded observation, not the world's"
    return StepResult(observation=observation, done=step.index + 1 >= limit)


def state(trajectory: Trajectory) -> dict[str, Any]:
    meta = trajectory.metadata or {}
    return {
        "episode_id": str(trajectory.pk),
        "step_count": trajectory.root_branch.all_steps().count(),
        "world": meta.get("world"),
        "task": trajectory.task_instruction,
        "max_steps": meta.get("episode", {}).get("max_steps"),
    }


def wait(job_id: int, timeout_s: float) -> SimulationJob:
    """Block until the job ends (for callers outside an event loop: the command, tests)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        job = finished_job(job_id)
        if job is not None:
            return job
        time.sleep(0.01)
    raise EpisodeError(f"no answer within {timeout_s:.0f} s (is a worker running?)")
