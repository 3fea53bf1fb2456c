"""What one project may ask of the workers, as the operator set it (settings, from the
environment; see README): futures per simulation, the history a simulation sends the model,
and how many jobs may wait or run at once. Each refusal names the limit and its setting.

- STUDIO_MAX_FUTURES: futures (N) of one simulation, a sweep's N x K included; at most the
  hard maximum of `inference.simulation.limits`, which the request itself checks.
- STUDIO_MAX_HISTORY_STEPS: turns of history in any request of a simulation (the steps
  before the fork; a replay or rollout adds a turn per step it goes on).
- STUDIO_MAX_HISTORY_MB: text of the recorded history before the fork (actions,
  observations, states and stored prompts), which the worker holds and sends whole.
- STUDIO_MAX_ACTIVE_JOBS: simulation, evaluation, judge and export jobs of a project queued
  or running at once (counted in the transaction that adds one, the project's row locked so
  two requests cannot both take the last place).
- STUDIO_MAX_ACTIVE_EPISODE_STEPS: steps of the project's episodes (served to outside agents)
  waiting for the world model at once; each episode has at most one.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db.models import Count, F, Func, IntegerField, OuterRef, Q, Subquery, Sum, Value
from django.db.models.functions import Coalesce
from django.template.defaultfilters import filesizeformat

from inference.simulation.request import InvalidRequest, SimulationRequest
from studio.models import (
    BehaviourSearch,
    Branch,
    EvaluationRun,
    ExportJob,
    JobStatus,
    JudgeJob,
    Project,
    SimulationJob,
)

ACTIVE = (JobStatus.QUEUED, JobStatus.RUNNING)


class TooManyJobs(InvalidRequest):
    """The project has as many jobs waiting or running as it may; HTTP 429 where asked over
    HTTP. An InvalidRequest, so every caller that shows a request's errors shows it."""

    status = 429

    def __init__(self, message: str):
        self.message = message
        super().__init__({"jobs": [message]})

    def summary(self) -> str:
        return self.message


def http_status(exc: InvalidRequest) -> int:
    """The status of a page that shows `exc`: 429 for a limit that passes, else 400."""
    return getattr(exc, "status", 400)


# ---- one simulation -------------------------------------------------------------------------


def history_turns(request: SimulationRequest, step_count: int) -> int:
    """The most turns of history any request of the simulation sends: the steps before the
    fork, and for a replay (to the branch's last recorded step) or a rollout (max_steps
    steps) those it adds on the way."""
    if request.mode == "replay":
        return max(request.fork_index, step_count - 1)
    if request.mode == "rollout":
        return request.fork_index + request.max_steps - 1
    return request.fork_index


class OctetLength(Func):
    """A text's size in bytes (UTF-8). PostgreSQL reads it from a stored value's header
    without decompressing the value; SQLite counts the bytes of the text as a blob."""

    function = "OCTET_LENGTH"
    output_field = IntegerField()

    def as_sqlite(self, compiler, connection, **extra_context):
        return self.as_sql(
            compiler,
            connection,
            template="LENGTH(CAST(%(expressions)s AS BLOB))",
            **extra_context,
        )


def history_bytes(branch: Branch, fork_index: int) -> int:
    """Bytes of text in the branch's steps before `fork_index` (one aggregate)."""
    text: Any = Value(0)
    for name in ("action", "observation", "state", "raw_prompt"):
        text = text + Coalesce(OctetLength(F(name)), Value(0))
    total = (
        branch.all_steps()
        .filter(index__lt=fork_index)
        .order_by()
        .aggregate(total=Sum(text))["total"]
    )
    return int(total or 0)


def check_simulation(branch: Branch, request: SimulationRequest) -> None:
    """Raise InvalidRequest (on `n`, `history`) where `request` asks more than this
    installation allows."""
    errors: dict[str, list[str]] = {}
    cap = settings.STUDIO_MAX_FUTURES
    if request.n > cap:
        asked = (
            f"a sweep of {len(request.sweep)} perturbations x {request.samples_per_perturbation} "
            f"futures is {request.n} futures"
            if request.sweep
            else f"{request.n} futures"
        )
        errors["n"] = [
            f"{asked}: this installation allows at most {cap} per simulation (STUDIO_MAX_FUTURES)"
        ]
    problems = []
    step_count = branch.all_steps().count() if request.mode == "replay" else 0
    turns, most = history_turns(request, step_count), settings.STUDIO_MAX_HISTORY_STEPS
    if turns > most:
        k = request.fork_index
        what, remedy = {
            "replay": (
                f"a replay from step {k} to the branch's last step sends up to",
                "simulate the next observation only, or branch from a shorter branch",
            ),
            "rollout": (
                f"a rollout of {request.max_steps} steps from step {k} sends up to",
                "take fewer steps or branch from an earlier step",
            ),
        }.get(request.mode, (f"step {k} sends", "branch from an earlier step"))
        problems.append(
            f"{what} {turns} steps of history to the world model: the limit is {most} "
            f"(STUDIO_MAX_HISTORY_STEPS); {remedy}"
        )
    text_cap = settings.STUDIO_MAX_HISTORY_BYTES
    if request.fork_index and not problems:  # the size is counted once the steps fit
        size = history_bytes(branch, request.fork_index)
        if size > text_cap:
            problems.append(
                f"the history before step {request.fork_index} holds {filesizeformat(size)} of "
                f"text (actions, observations, states and prompts): the limit is "
                f"{filesizeformat(text_cap)} (STUDIO_MAX_HISTORY_MB); branch from an earlier step"
            )
    if problems:
        errors["history"] = problems
    if errors:
        raise InvalidRequest(errors)


# ---- jobs at once ---------------------------------------------------------------------------


def active_jobs(project_id: int) -> int:
    """Simulation (not episode steps), evaluation, judge, behaviour search and export jobs
    queued or running."""
    active = Q(status__in=ACTIVE)
    return (
        SimulationJob.objects.filter(active, trajectory__project_id=project_id, appends=False)
        .order_by()
        .count()
        + EvaluationRun.objects.filter(active, project_id=project_id).order_by().count()
        + JudgeJob.objects.filter(active, project_id=project_id).order_by().count()
        + BehaviourSearch.objects.filter(active, project_id=project_id).order_by().count()
        + ExportJob.objects.filter(active, version__dataset__project_id=project_id)
        .order_by()
        .count()
    )


def check_room(project_id: int, adding: int = 1) -> None:
    """Raise TooManyJobs unless `adding` more jobs fit the project's limit. Call it in the
    transaction that creates them: the project's row stays locked until it commits, so
    concurrent requests count one after the other (SQLite serialises writers anyway)."""
    list(Project.objects.select_for_update().filter(pk=project_id).values_list("pk"))
    limit = settings.STUDIO_MAX_ACTIVE_JOBS
    count = active_jobs(project_id)
    if count + adding > limit:
        raise TooManyJobs(
            f"this project has {count} job{'s' if count != 1 else ''} queued or running "
            "(simulations, evaluations, judge jobs, behaviour searches and exports): the limit "
            f"is {limit} at once (STUDIO_MAX_ACTIVE_JOBS); wait for one to finish or cancel one"
        )


def open_episode_steps() -> Subquery:
    """An annotation for a trajectory query: how many steps the episodes of its project have
    waiting for the world model. Read in the query that reads the episode, because an agent
    waits on every step; a count without a lock: a few requests racing past the limit
    together is no harm."""
    count = (
        SimulationJob.objects.filter(
            trajectory__project_id=OuterRef("project_id"), appends=True, status__in=ACTIVE
        )
        .order_by()
        .values("trajectory__project_id")
        .annotate(n=Count("pk"))
        .values("n")
    )
    return Subquery(count, output_field=IntegerField())


def episode_steps_refusal(open_steps: int | None) -> str | None:
    """Why the project's episodes may not have one more step waiting for the world model,
    given how many they have (`open_episode_steps`), or None."""
    limit = settings.STUDIO_MAX_ACTIVE_EPISODE_STEPS
    count = open_steps or 0
    if count < limit:
        return None
    return (
        f"the project's episodes have {count} steps waiting for the world model: the limit is "
        f"{limit} at once (STUDIO_MAX_ACTIVE_EPISODE_STEPS); send the step again shortly"
    )
