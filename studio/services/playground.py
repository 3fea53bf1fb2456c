"""The playground's steps: a person types the agent's action, the world model answers.

Played steps stay on one branch. The first action played from a branch that is not a played
one (or from an earlier step of one: "undo") forks a new branch whose origin is PLAYED; each
later action at that branch's end is appended to the branch itself (a one-future job with
`appends=True`, run like an episode's step, `studio.jobs.episode_steps`), instead of a chain
of one-step branches. The job's params["played"] marks it (the worker writes the action as
TYPED: a person's, not an edit of a recorded one) and keeps the choices the page remembers
for the next step (the world model, the action format)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Q

from inference.simulation.request import InvalidRequest, SimulationRequest
from studio.models import Branch, BranchOrigin, JobStatus, ModelEndpoint, SimulationJob
from studio.models.trajectories import BranchStatus
from studio.queues import queue_name
from studio.services import job_limits
from studio.services.simulation import (
    job_fields,
    short_action,
    start_simulation,
    trajectory_world_or_refuse,
)


@dataclass(frozen=True)
class Played:
    job: SimulationJob
    appended: bool  # into the played branch itself (else a new played branch was forked)


def appends_to(branch: Branch, at: int, total: int) -> bool:
    """Whether an action at step `at` goes onto `branch` itself: a played branch that is
    complete, played at its end. Anywhere else (a recorded branch, an earlier step of a
    played one) the action forks a new played branch, and what was there is kept."""
    return (
        branch.origin == BranchOrigin.PLAYED
        and branch.parent_id is not None
        and branch.status in (BranchStatus.SUCCEEDED, BranchStatus.READY)
        and at == total
    )


def play_step(
    *,
    user,
    branch: Branch,
    at: int,
    total: int,
    request: SimulationRequest,
    world_endpoint: ModelEndpoint | None,
    action_format: str = "auto",
) -> Played:
    """Make the job of one played step; the caller enqueues it
    (`studio.tasks.enqueue_simulation`). Raises InvalidRequest for what the installation or
    the trajectory's world refuses, and when the branch's previous step is still running."""
    played = {"action_format": action_format}
    if not appends_to(branch, at, total):
        with transaction.atomic():
            job = start_simulation(
                user=user,
                branch=branch,
                request=request,
                world_endpoint=world_endpoint,
                labels={"played": played},
                origin=BranchOrigin.PLAYED,
            )
            short = short_action(request.action)
            Branch.objects.filter(job=job).update(
                name=f"played @{at}" + (f" · {short}" if short else "")
            )
        return Played(job, appended=False)
    world_version = trajectory_world_or_refuse(branch.trajectory, request)
    job_limits.check_simulation(branch, request)  # history, as the operator allows
    fields = job_fields(
        request,
        requester_id=getattr(user, "pk", None),
        trajectory_id=branch.trajectory_id,
        branch_id=branch.pk,
        world_endpoint=world_endpoint,
        world_version=world_version,
        labels={"played": played},
        appends=True,
        queue=queue_name(request.queue_kind),
    )
    try:
        with transaction.atomic():  # a savepoint: the caller's transaction stays usable
            job = SimulationJob.objects.create(**fields)
    except IntegrityError:  # one open step per appending branch (`one_open_step_per_episode`)
        raise InvalidRequest(
            {"action": [f"step {at} of {branch.name!r} is still being answered: wait for it"]}
        ) from None
    return Played(job, appended=True)


def played_branch_of(job: SimulationJob) -> Branch | None:
    """The branch a played job's step is on: the branch itself when appended, else the
    branch it forked (None while neither exists)."""
    if job.appends:
        return job.branch
    return Branch.objects.filter(job=job).first()


def remembered(branch: Branch, user) -> dict[str, Any]:
    """The playground's choices of the last step played on this branch's lineage (else the
    user's last one in this trajectory): the form's initial values, so the world model a
    person picked stays picked from step to step. Read only: GET never writes."""
    ids = [segment[0] for segment in (branch.lineage or branch.compute_lineage())]
    played = SimulationJob.objects.filter(
        trajectory_id=branch.trajectory_id, params__played__isnull=False
    ).exclude(status=JobStatus.CANCELLED)
    job = (
        played.filter(Q(branch_id__in=ids, appends=True) | Q(branches__in=ids))
        .order_by("-created_at", "-pk")
        .first()
    )
    if job is None and getattr(user, "pk", None) is not None:
        job = played.filter(requester_id=user.pk).order_by("-created_at", "-pk").first()
    if job is None:
        return {}
    choice = (job.params or {}).get("played") or {}
    initial: dict[str, Any] = {}
    if job.world_endpoint_id is not None:
        initial["world_endpoint"] = job.world_endpoint_id
    if isinstance(choice, dict) and isinstance(choice.get("action_format"), str):
        initial["action_format"] = choice["action_format"]
    return initial
