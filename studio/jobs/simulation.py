"""A simulation job in the worker: claim the row, read the branch into a `WorldContext`, build
the backend, run `inference.simulation.runner` through a sink that stores rows, and leave the
job in a final state whatever happens.

Memory stays flat: the history before the fork is streamed from the database once (into the
prompt prefix the futures share), recorded steps after the fork are read without their
observations, and the retrieval baseline reads at most RETRIEVAL_CORPUS_LIMIT actions (its
backend, the history and the step rows are `studio.jobs.world_model`, shared with episodes) and
fetches only the observations it answers with."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

from django.conf import settings

from inference.simulation.request import ForkFacts, InvalidRequest, SimulationRequest
from inference.simulation.runner import Agent, run_simulation
from inference.simulation.sink import (
    CANCELLED,
    FAILED,
    SUCCEEDED,
    LiveProgress,
    RunOutcome,
    SimulatedStep,
    Totals,
)
from inference.simulation.world import RecordedStep, WorldContext
from studio.jobs.runtime import JobMonitor, claim, finish
from studio.jobs.world_model import (
    explain_error,
    history_stream,
    make_backend_for,
    step_row,
    storable,
)
from studio.models import Branch, JobStatus, Provenance, SimulationJob
from studio.models.trajectories import BranchStatus
from studio.services.simulation import system_prompt_for

log = logging.getLogger(__name__)

# ---- from rows to the runner's inputs -----------------------------------------------------


def recorded_from(branch: Branch, fork_index: int) -> list[RecordedStep]:
    """The branch's steps from the fork on, without their observations."""
    rows = (
        branch.all_steps()
        .filter(index__gte=fork_index)
        .values_list("index", "action", "state", "raw_prompt")
    )
    return [RecordedStep(i, a, s, p) for i, a, s, p in rows]


def world_context(branch: Branch, fork_index: int, world=None) -> WorldContext:
    """What the runner needs of `branch` to simulate step `fork_index` and what follows.
    In a fictional world (`inference.worlds.WorldSpec`), the world's system prompt and tools
    replace the trajectory's ("what if this world were different")."""
    trajectory = branch.trajectory
    system_prompt, tools = system_prompt_for(trajectory), trajectory.tools or None
    if world is not None:
        from inference.worlds import compose

        system_prompt, tools = compose(world).system_prompt, list(world.tools) or None
    return WorldContext(
        domain=trajectory.domain,
        task_instruction=trajectory.task_instruction or "",
        system_prompt=system_prompt,
        history=history_stream(branch, fork_index),
        recorded=recorded_from(branch, fork_index),
        tools=tools,
    )


def request_of(job: SimulationJob, recorded: Sequence[RecordedStep]) -> SimulationRequest:
    """The job's request, checked as it was when submitted (its backend, model and URL are
    explicit on the row, so configuration changes since then do not matter)."""
    from studio.services.endpoints import simulation_defaults
    from studio.services.simulation import request_input_of

    at_fork = recorded[0] if recorded and recorded[0].index == job.fork_index else None
    facts = ForkFacts(
        step_count=job.fork_index + len(recorded),
        recorded_action=at_fork.action if at_fork else None,
        domain=job.trajectory.domain,
    )
    return SimulationRequest.build(
        request_input_of(job), fork=facts, defaults=simulation_defaults(job.trajectory.project)
    )


def make_agent(job: SimulationJob, request: SimulationRequest) -> Agent | None:
    if request.agent is None:
        return None
    from inference.agent import AgentModel
    from studio.services.endpoints import key_for_job

    return AgentModel(
        base_url=request.agent.base_url,
        model=request.agent.model,
        api_key=key_for_job(job.agent_endpoint, request.agent.base_url, env="AGENT_MODEL_API_KEY"),
    )


# ---- the sink that stores rows ----------------------------------------------------------


class OrmSink:
    """Steps become Step rows at once; live progress and figures go to the job row through
    the monitor thread (one write per tick); a finished future updates its branch."""

    def __init__(self, job: SimulationJob, monitor: JobMonitor, branch_ids: dict[int, int]):
        self.job = job
        self.monitor = monitor
        self.branch_ids = branch_ids  # sample -> branch id
        world = (job.params or {}).get("world")
        self.world_meta = {"world": world} if world else {}

    def phase(self, phase: str) -> None:
        self.monitor.set_job(phase=phase)

    def live(self, sample: int, progress: LiveProgress) -> None:
        state = progress.as_dict()
        state["text"] = storable(state["text"])
        self.monitor.set_live(sample, state)

    def step(self, sample: int, step: SimulatedStep) -> None:
        meta = {"job": self.job.pk, **self.world_meta}
        step_row(self.branch_ids[sample], step, meta).save(force_insert=True)

    def sample_finished(self, sample: int, status: str, error: str = "") -> None:
        self.monitor.drop_live(sample)
        Branch.objects.filter(
            pk=self.branch_ids[sample], status__in=[BranchStatus.QUEUED, BranchStatus.RUNNING]
        ).update(status=status, error=storable(error))

    def totals(self, totals: Totals) -> None:
        self.monitor.set_job(**totals.as_dict())

    def stop_requested(self) -> bool:
        return self.monitor.cancel_requested


# ---- the job ------------------------------------------------------------------------------


def run_simulation_job(job_id: int, message_id: str = "") -> None:
    """The body of the Celery task: claim, run, and always leave the job in a final state."""
    task_started = time.monotonic()
    # (a step that appends to its branch, sent as a simulation's message, takes the
    # episode's path: `studio.tasks.run_simulation_job` sends it there)
    job = claim(SimulationJob, job_id, message_id)
    if job is None:
        return
    queue_wait = (job.started_at - job.created_at).total_seconds()
    SimulationJob.objects.filter(pk=job.pk).update(queue_wait_s=queue_wait, phase="prefill")
    branch_ids = dict(job.branches.values_list("sample_index", "pk"))
    outcome = RunOutcome(status=FAILED)
    with JobMonitor(SimulationJob, job.pk) as monitor:
        try:
            world_label = (job.params or {}).get("world")
            if world_label and not job.world_version_id:
                raise InvalidRequest(
                    {
                        "world": [
                            f"version {world_label.get('version')} of world "
                            f"{world_label.get('name')!r} was deleted before the job ran"
                        ]
                    }
                )
            spec = job.world_version.spec() if job.world_version_id else None
            world = world_context(job.branch, job.fork_index, spec)
            request = request_of(job, world.recorded)
            if set(branch_ids) != set(range(request.n)):
                raise InvalidRequest(
                    {"n": [f"{len(branch_ids)} of the job's {request.n} branches are left"]}
                )
            outcome = run_simulation(
                request,
                world,
                make_backend_for(job, request),
                OrmSink(job, monitor, branch_ids),
                agent=make_agent(job, request),
                # Stop a little before Celery's soft limit (counted from the task's start):
                # a stop asked at a stream event ends every future cleanly, where the
                # signal lands in one thread only.
                time_limit_s=max(
                    1.0, settings.STUDIO_JOB_SOFT_LIMIT_S - 2 - (time.monotonic() - task_started)
                ),
                explain=explain_error,
                # the playground's first step: a person typed the action (not an edit)
                fork_provenance=Provenance.TYPED if (job.params or {}).get("played") else None,
            )
        except Exception as exc:  # noqa: BLE001 - reading the job failed: say so on the row
            log.exception("simulation job %s failed before it ran", job.pk)
            message = explain_error(exc) or (
                exc.summary()
                if isinstance(exc, InvalidRequest)
                else f"Simulation failed ({type(exc).__name__}): {exc}"
            )
            outcome = RunOutcome(status=FAILED, error=message)
    if outcome.status == FAILED and outcome.error.startswith("Simulation failed ("):
        log.error("simulation job %s: %s", job.pk, outcome.error)
    finalize(job, outcome)


FINAL = {SUCCEEDED: JobStatus.SUCCEEDED, FAILED: JobStatus.FAILED, CANCELLED: JobStatus.CANCELLED}


def finalize(job: SimulationJob, outcome: RunOutcome) -> None:
    """Write the final state once the monitor thread has stopped: the job and every branch
    of it still open change together (none is left queued or running)."""
    status = FINAL[outcome.status]
    counters = outcome.totals.as_dict()
    error = storable(outcome.error)
    branches: dict[str, str]
    if status == JobStatus.SUCCEEDED:
        counters["progress"] = 1.0
        phase, branches = "done", {"status": BranchStatus.SUCCEEDED}
    elif status == JobStatus.CANCELLED:
        phase, branches = "cancelled", {"status": BranchStatus.CANCELLED}
    else:
        phase, branches = "failed", {"status": BranchStatus.FAILED, "error": error}
    finish(SimulationJob, job.pk, status, branches=branches, phase=phase, error=error, **counters)
