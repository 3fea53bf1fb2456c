"""A simulation job in the worker: claim the row, read the branch into a `WorldContext`, build
the backend, run `inference.simulation.runner` through a sink that stores rows, and leave the
job in a final state whatever happens.

Memory stays flat: the history before the fork is streamed from the database once (into the
prompt prefix the futures share), recorded steps after the fork are read without their
observations, and the retrieval baseline reads at most RETRIEVAL_CORPUS_LIMIT actions and
fetches only the observations it answers with."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from typing import Any

from django.conf import settings

from inference.simulation.request import ForkFacts, InvalidRequest, SimulationRequest
from inference.simulation.runner import Agent, TimeLimitReached, run_simulation
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
from inference.types import Backend, Turn
from studio.jobs.runtime import JobMonitor, claim, finish
from studio.models import Branch, JobStatus, Provenance, SimulationJob, Step, Trajectory
from studio.models.trajectories import BranchStatus
from studio.services.endpoints import EndpointError
from studio.services.simulation import system_prompt_for, turn_of

log = logging.getLogger(__name__)

# The retrieval baseline searches at most this many recorded steps of the domain.
RETRIEVAL_CORPUS_LIMIT = 20000
# Recorded actions longer than this are indexed by their first characters only.
RETRIEVAL_ACTION_CHARS = 2000
# Steps read per query while streaming the history.
HISTORY_CHUNK = 200


def storable(text: str) -> str:
    """Model text as the database can hold it: byte-level tokenizers can decode a NUL byte,
    which PostgreSQL rejects in text and JSON columns; show it as U+FFFD instead."""
    return text.replace("\x00", "\ufffd")


def _storable_json(value: Any) -> Any:
    if isinstance(value, str):
        return storable(value)
    if isinstance(value, dict):
        return {k: _storable_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_storable_json(v) for v in value]
    return value


# ---- from rows to the runner's inputs -----------------------------------------------------


def history_stream(branch: Branch, fork_index: int) -> Iterator[Turn]:
    """The branch's steps before `fork_index` as turns, read in chunks: no more than one
    chunk of rows is alive at a time."""
    steps = branch.all_steps().filter(index__lt=fork_index)
    fields = ("index", "action", "observation", "state", "raw_prompt", "meta")
    start = 0
    while True:
        chunk = list(steps.filter(index__gte=start).only(*fields)[:HISTORY_CHUNK])
        if not chunk:
            return
        for step in chunk:
            yield turn_of(step)
        if len(chunk) < HISTORY_CHUNK:
            return  # the last chunk: no query to find that nothing follows
        start = chunk[-1].index + 1
        del chunk


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


class LazyCorpus:
    """Recorded steps of the trajectory's domain for the retrieval baseline: actions in
    memory (bounded), observations fetched by id only for the answers."""

    def __init__(self, trajectory: Trajectory):
        rows = (
            Step.objects.filter(
                branch__trajectory__project_id=trajectory.project_id,
                branch__trajectory__domain=trajectory.domain,
                branch__parent__isnull=True,
                provenance=Provenance.RECORDED,
            )
            .exclude(observation="")
            .order_by("id")
            .values_list("id", "action")[:RETRIEVAL_CORPUS_LIMIT]
        )
        self.ids: list[int] = []
        self.actions: list[str] = []
        for pk, action in rows:
            self.ids.append(pk)
            self.actions.append(action[:RETRIEVAL_ACTION_CHARS])

    def observations(self, positions: Sequence[int]) -> list[str]:
        wanted = [self.ids[p] for p in positions]
        found = dict(Step.objects.filter(pk__in=wanted).values_list("id", "observation"))
        return [found.get(pk, "") for pk in wanted]


def make_backend_for(
    job: SimulationJob,
    request: SimulationRequest,
    *,
    timeout: float | None = None,
    max_retries: int | None = None,
    timeout_setting: str | None = None,
) -> Backend:
    """The job's world-model backend; `timeout` (seconds per request) and `max_retries`
    bound an OpenAI-compatible server's answer (default: the backend's own), and a request
    that times out names `timeout_setting` as what to raise."""
    from inference.backends import make_backend
    from studio.services.endpoints import key_for_job

    choice = request.world_model
    if choice.backend == "retrieval":
        from inference.backends.retrieval import RetrievalBackend

        corpus = LazyCorpus(job.trajectory)
        return RetrievalBackend.from_lookup(
            corpus.actions, corpus.observations, domain=job.trajectory.domain
        )
    return make_backend(
        choice.backend,
        model=choice.model,
        base_url=choice.base_url,
        api_key=(
            key_for_job(job.world_endpoint, choice.base_url, env="WORLD_MODEL_API_KEY")
            if choice.backend == "openai"
            else ""
        ),
        concurrency=settings.WORLD_MODEL_CONCURRENCY,
        use_n=choice.supports_n,
        timeout=timeout,
        max_retries=max_retries,
        timeout_setting=timeout_setting,
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


def step_row(branch_id: int, step: SimulatedStep, meta: dict[str, Any]) -> Step:
    """The (unsaved) row of a simulated step, its texts as the database can hold them;
    `meta` is added to the step's own."""
    return Step(
        branch_id=branch_id,
        index=step.index,
        action=storable(step.action),
        observation=storable(step.observation),
        state=step.state,
        thinking=storable(step.thinking),
        raw_output=storable(step.raw_output),
        raw_prompt=step.raw_prompt,
        provenance=step.provenance,
        observation_source=step.observation_source,
        parse_status=step.parse_status,
        meta=_storable_json({**step.meta, **meta}),
        timings=step.timings,
    )


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


def explain_error(exc: BaseException) -> str | None:
    """Messages that name the studio's settings (the runner knows none of them)."""
    from celery.exceptions import SoftTimeLimitExceeded

    if isinstance(exc, EndpointError):
        return str(exc)

    if isinstance(exc, SoftTimeLimitExceeded | TimeLimitReached):
        return (
            f"Stopped: the job ran past its time limit of {settings.STUDIO_JOB_SOFT_LIMIT_S} s "
            "(STUDIO_JOB_HARD_LIMIT_S). Try fewer futures, fewer steps or fewer max_tokens."
        )
    return None


def run_simulation_job(job_id: int, message_id: str = "") -> None:
    """The body of the Celery task: claim, run, and always leave the job in a final state."""
    task_started = time.monotonic()
    if SimulationJob.objects.filter(pk=job_id, appends=True).exists():
        # a step of an episode whose message was sent as a simulation's (before the episodes
        # queue existed): it takes the episode's path
        from studio.jobs.episode_steps import run_episode_step

        return run_episode_step(job_id, message_id)
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
