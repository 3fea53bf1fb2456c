"""Simulation jobs, web side: build a `SimulationRequest` for a branch, create the job and its
N queued child branches, cancel, retry. The worker side (running a job) is
`studio.jobs.simulation`; enqueueing is `studio.tasks.enqueue_simulation`.

Every rule of what a simulation may ask for lives in `inference.simulation.request`; this
module only supplies what the studio knows: the configured defaults and the branch's steps."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from django.db import transaction
from django.utils import timezone

from inference.simulation.request import FIELDS as REQUEST_FIELDS
from inference.simulation.request import ForkFacts, InvalidRequest, SimulationRequest
from inference.types import Turn
from studio.jobs.runtime import fail_lost, is_silent
from studio.models import (
    Branch,
    BranchOrigin,
    JobStatus,
    ModelEndpoint,
    SimulationJob,
    Step,
    Trajectory,
    WorldVersion,
)
from studio.models.trajectories import BranchStatus
from studio.queues import queue_name
from studio.services import job_limits
from studio.services.endpoints import simulation_defaults

__all__ = [
    "InvalidRequest",
    "build_request",
    "cancel_simulation",
    "fork_facts",
    "request_input_of",
    "retry_simulation",
    "start_simulation",
]


def fork_facts(branch: Branch, fork_index: Any) -> ForkFacts:
    """What the request needs to know of `branch` at `fork_index` (two small queries)."""
    steps = branch.all_steps()
    recorded = None
    if isinstance(fork_index, int) and not isinstance(fork_index, bool) and fork_index >= 0:
        recorded = steps.filter(index=fork_index).values_list("action", flat=True).first()
    return ForkFacts(
        step_count=steps.count(),
        recorded_action=recorded,
        domain=branch.trajectory.domain,
    )


def build_request(branch: Branch, data: Mapping[str, Any]) -> SimulationRequest:
    """Validate `data` (see `inference.simulation.request`) against `branch`; raises
    InvalidRequest naming each bad field. Blanks take the project's default models."""
    return SimulationRequest.build(
        data,
        fork=fork_facts(branch, data.get("fork_index")),
        defaults=simulation_defaults(branch.trajectory.project),
    )


def turn_of(step: Step) -> Turn:
    """A stored step as the world model's turn (an imported AgentWorldBench turn keeps its
    verbatim response)."""
    return Turn(
        action=step.action,
        observation=step.observation,
        state=step.state,
        raw_prompt=step.raw_prompt,
        raw_response=(step.meta or {}).get("raw_response", "") or "",
    )


def system_prompt_for(trajectory: Trajectory) -> str:
    """The stored system prompt (AgentWorldBench's `system_str`, kept verbatim), else the
    template for the domain and the trajectory's tools."""
    if trajectory.system_prompt:
        return trajectory.system_prompt
    from inference.prompts import build_system_prompt

    return build_system_prompt(trajectory.domain, trajectory.tools or None)


def start_simulation(
    *,
    user,
    branch: Branch,
    request: SimulationRequest,
    world_endpoint: ModelEndpoint | None = None,
    agent_endpoint: ModelEndpoint | None = None,
    world_version: WorldVersion | None = None,
    labels: dict[str, Any] | None = None,
    origin: str | None = None,
) -> SimulationJob:
    """Create the job and its N queued child branches in one transaction. The caller
    enqueues it (`studio.tasks.enqueue_simulation`), which waits for the commit. The
    endpoints, when the request came from them, are where the worker finds the API keys.
    In a fictional world (`world_version`), the world's prompt and tools are used.
    Raises InvalidRequest past the installation's limits (`job_limits`: N, history, and
    TooManyJobs when the project has as many jobs at once as it may)."""
    user_id = getattr(user, "pk", None)
    reads_prompts = request.world_model.backend != "retrieval"
    if world_version is not None and not reads_prompts:
        raise InvalidRequest({"world": [BASELINE_IN_WORLD]})
    if world_version is None:
        # a trajectory started in a world (or an episode) runs in it, and says so; it never
        # runs without it (the baseline, which reads no prompt, would answer a flight search
        # with a recorded calendar), and a deleted version is said, not silently dropped
        world_version = trajectory_world_or_refuse(branch.trajectory, request)
    job_limits.check_simulation(branch, request)  # N and history, as the operator allows
    with transaction.atomic():
        job_limits.check_room(branch.trajectory.project_id)  # jobs at once (locks the project)
        job = SimulationJob.objects.create(
            **job_fields(
                request,
                requester_id=user_id,
                trajectory_id=branch.trajectory_id,
                branch_id=branch.pk,
                world_endpoint=world_endpoint,
                agent_endpoint=agent_endpoint,
                world_version=world_version,
                labels=labels,
                queue=queue_name(request.queue_kind),
            )
        )
        # `origin`: the caller knows better (the playground's branches are PLAYED)
        origin = origin or (BranchOrigin.EDITED if request.edited else BranchOrigin.SIMULATED)
        children = [
            Branch(
                trajectory_id=branch.trajectory_id,
                parent=branch,
                fork_index=request.fork_index,
                lineage=[*(branch.lineage or branch.compute_lineage())],
                name=future_name(
                    job.pk,
                    i,
                    request.fork_index,
                    request.action,
                    request.surely_perturbed_at_fork(i),
                ),
                origin=origin,
                status=BranchStatus.QUEUED,
                job=job,
                sample_index=i,
                created_by_id=user_id,
            )
            for i in range(request.n)
        ]
        Branch.objects.bulk_create(children)
        # Each child's lineage ends with itself: known only once the rows have ids.
        for child in children:
            child.lineage = [*child.lineage, [child.pk, request.fork_index]]
        Branch.objects.bulk_update(children, ["lineage"])
    return job


def job_fields(
    request: SimulationRequest,
    *,
    requester_id: int | None,
    trajectory_id: int,
    branch_id: int,
    world_endpoint: ModelEndpoint | None,
    agent_endpoint: ModelEndpoint | None = None,
    world_version: WorldVersion | None = None,
    labels: dict[str, Any] | None = None,
    appends: bool = False,
    queue: str,
) -> dict[str, Any]:
    """The row of a new job for `request`: what it asks, and the models as they are now."""
    agent = request.agent
    return {
        "requester_id": requester_id,
        "trajectory_id": trajectory_id,
        "branch_id": branch_id,
        "fork_index": request.fork_index,
        "action": request.action,
        "mode": request.mode,
        "n": request.n,
        "max_steps": request.max_steps,
        "params": {
            **request.sampling.as_dict(),
            **({"perturbation_seed": request.perturbation_seed} if request.perturbations else {}),
            **({"sweep": [p.as_dict() for p in request.sweep]} if request.sweep else {}),
            **({"world": world_label(world_version)} if world_version is not None else {}),
            **(labels or {}),
        },
        "world_version": world_version,
        "appends": appends,
        "perturbations": [rule.as_dict() for rule in request.perturbations],
        "world_endpoint": world_endpoint,
        "world_name": world_endpoint.name if world_endpoint is not None else "",
        "backend": request.world_model.backend,
        "model": request.world_model.model,
        "base_url": request.world_model.base_url,
        "agent_endpoint": agent_endpoint if agent is not None else None,
        "agent_name": agent_endpoint.name if agent is not None and agent_endpoint else "",
        "agent_model": agent.model if agent is not None else "",
        "agent_base_url": agent.base_url if agent is not None else "",
        "queue": queue,
    }


SHORT_ACTION_CHARS = 40


def short_action(action: str) -> str:
    """An action in a few words, for names and labels: a JSON tool call as its name (or the
    compact JSON), text as its first line, whitespace collapsed."""
    from studio.services.diffs import json_value

    is_json, value = json_value(action)
    if is_json and isinstance(value, dict):
        for key in ("name", "action_type", "tool", "action"):
            if isinstance(value.get(key), str):
                rest = {k: v for k, v in value.items() if k != key}
                text = value[key] + ("(…)" if rest else "")
                break
        else:
            text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    else:
        lines = [line for line in action.strip().splitlines() if line.strip()]
        text = " ".join(lines[0].split()) if lines else ""
    return text if len(text) <= SHORT_ACTION_CHARS else text[: SHORT_ACTION_CHARS - 1] + "…"


def future_name(job_id: int, sample: int, fork_index: int, action: str, perturbation=None) -> str:
    """A future's default name: its job, its number, the action at the fork and the
    perturbation it surely had there, so sibling branches read apart ("job 12 #3 @4 · ls -la
    · Disk full")."""
    short = short_action(action)
    name = f"job {job_id} #{sample + 1} @{fork_index}" + (f" · {short}" if short else "")
    return name + (f" · {perturbation.label}" if perturbation is not None else "")


def world_of_trajectory(trajectory) -> WorldVersion | None:
    """The world version a trajectory was started in (or an episode played in), if it is
    still there: its jobs run in it and their steps say so."""
    world = (trajectory.metadata or {}).get("world")
    if not isinstance(world, dict) or trajectory.source_format not in ("world", "episode"):
        return None
    world_id, number = world.get("id"), world.get("version")
    if not isinstance(world_id, int) or not isinstance(number, int):
        return None
    return (
        WorldVersion.objects.select_related("world")
        .filter(world_id=world_id, number=number)
        .first()
    )


BASELINE_IN_WORLD = (
    "the retrieval baseline answers with recorded observations and never reads a world's "
    "prompt: pick a world model to simulate in a world"
)


def trajectory_world_or_refuse(trajectory, request: SimulationRequest) -> WorldVersion | None:
    """The world version a trajectory started in, for a job on it; InvalidRequest when the
    job cannot honour it: the baseline picked (it reads no world), or the version deleted."""
    world = trajectory_world_label(trajectory)
    if world is None:
        return None
    named = f"world {world.get('name')!r} v{world.get('version')}"
    if request.world_model.backend == "retrieval":
        raise InvalidRequest(
            {"world": [f"This trajectory was started in {named}; {BASELINE_IN_WORLD}"]}
        )
    version = world_of_trajectory(trajectory)
    if version is None:
        raise InvalidRequest(
            {
                "world": [
                    f"This trajectory was started in {named}, and that version was deleted: "
                    "pick a world of the project in the branch editor's World field to go on "
                    "in one that exists"
                ]
            }
        )
    return version


def trajectory_world_label(trajectory) -> dict[str, Any] | None:
    """The world a trajectory says it was started in (or an episode played in), as its
    metadata names it, whether or not that version still exists."""
    world = (trajectory.metadata or {}).get("world")
    if not isinstance(world, dict) or trajectory.source_format not in ("world", "episode"):
        return None
    return world


def world_label(version: WorldVersion) -> dict[str, Any]:
    return {"id": version.world_id, "name": version.world.name, "version": version.number}


def request_input_of(job: SimulationJob) -> dict[str, Any]:
    """The request a job was made from, as input that builds it again."""
    # params also hold what is the job's, not the request's (its world, a gallery scenario)
    params = {k: v for k, v in (job.params or {}).items() if k in REQUEST_FIELDS}
    return {
        "fork_index": job.fork_index,
        "action": job.action,
        "action_format": "text",
        "mode": job.mode,
        # a sweep's n is per perturbation: the job holds n x K futures
        "n": job.n // max(1, len((job.params or {}).get("sweep") or ())),
        "max_steps": job.max_steps,
        **params,
        "backend": job.backend,
        "model": job.model,
        "base_url": job.base_url,
        "supports_n": job.world_endpoint.supports_n if job.world_endpoint else True,
        "agent_model": job.agent_model,
        "agent_base_url": job.agent_base_url,
        "perturbations": job.perturbations or None,
    }


def cancel_simulation(job: SimulationJob) -> SimulationJob:
    """A queued job is cancelled at once; a running one stops at its next token or step
    (the worker then marks it cancelled)."""
    now = timezone.now()
    with transaction.atomic():
        cancelled = SimulationJob.objects.filter(pk=job.pk, status=JobStatus.QUEUED).update(
            status=JobStatus.CANCELLED, cancel_requested=True, finished_at=now, phase="cancelled"
        )
        if cancelled:
            Branch.objects.filter(job=job, status=BranchStatus.QUEUED).update(
                status=BranchStatus.CANCELLED
            )
    if not cancelled:
        SimulationJob.objects.filter(pk=job.pk, status=JobStatus.RUNNING).update(
            cancel_requested=True
        )
        row = SimulationJob.objects.get(pk=job.pk)
        if is_silent(row, now):
            fail_lost(SimulationJob, row, now)  # no worker will stop it: settle it now
    job.refresh_from_db()
    return job


def retry_simulation(job: SimulationJob, user=None) -> SimulationJob:
    """The same request again as a new job with new branches; the old ones are kept."""
    if not job.is_finished:
        raise InvalidRequest(
            {"job": [f"job {job.pk} is still {job.status}; cancel it or wait before retrying"]}
        )
    if job.appends and (job.params or {}).get("played"):
        raise InvalidRequest(
            {"job": [f"job {job.pk} is a step played in the playground: play it again there"]}
        )
    if job.appends:
        raise InvalidRequest(
            {"job": [f"job {job.pk} is a step of an episode: the agent plays it again, not Retry"]}
        )
    world = (job.params or {}).get("world")
    if world and job.world_version is None:
        raise InvalidRequest(
            {
                "world": [
                    f"version {world.get('version')} of world {world.get('name')!r} was deleted; "
                    "branch again in one that exists"
                ]
            }
        )
    request = build_request(job.branch, request_input_of(job))
    # a played step tried again is still a person's (the playground's branch origin)
    played = (job.params or {}).get("played")
    return start_simulation(
        user=user or job.requester,
        branch=job.branch,
        request=request,
        world_endpoint=job.world_endpoint,
        agent_endpoint=job.agent_endpoint,
        world_version=job.world_version,
        labels={"played": played} if played else None,
        origin=BranchOrigin.PLAYED if played else None,
    )
