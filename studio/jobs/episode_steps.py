"""A step of an episode in the worker: the world model's answer to an outside agent's action,
written as the next step of the episode's own branch and handed back to the web process that
waits for it (`studio.jobs.replies`).

The same runner and rules as every simulation (`inference.simulation.runner`, mode "next",
one future), on a lean path, because an agent waits on every step and many play at once
(`scripts/bench_episodes.py`): what never changes in an episode (its world's composed prompt,
its task, its branch) is read once per process; the shared monitor (`studio.jobs.inflight`)
beats for every step in flight instead of a thread and a database connection per step; the
answer is asked whole, not streamed; the job's outcome, the step and the episode's step count
are written in one transaction. The episodes queue's worker runs these on a threads pool,
many model calls at once.

A step of an in-process model (the gpu queue's worker, on a threads pool too) does not call
the engine itself: its prompt joins the process's collector (`inference.step_batcher`), which
answers the steps of many episodes that arrive together in ONE engine call, each row with
its step's own seed. The step's rewards are the world's rubric's (`studio.services.rewards`),
written on the step with it; at the episode's end, its end."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from inference.simulation.request import Defaults, ForkFacts, InvalidRequest, SimulationRequest
from inference.simulation.runner import run_simulation
from inference.simulation.sink import (
    AGENT,
    CANCELLED,
    FAILED,
    SUCCEEDED,
    LiveProgress,
    RunOutcome,
    SimulatedStep,
    Totals,
)
from inference.simulation.world import WorldContext
from inference.step_batcher import BatchedBackend, StepBatcher
from studio.jobs import replies
from studio.jobs.inflight import Flight, inflight
from studio.jobs.runtime import claim, clear_pulse, single_writer_db
from studio.jobs.world_model import (
    explain_error,
    history_stream,
    make_backend_for,
    step_row,
    storable,
)
from studio.models import Branch, JobStatus, Provenance, SimulationJob, Step, Trajectory
from studio.services.simulation import system_prompt_for

log = logging.getLogger(__name__)

TYPED = str(Provenance.TYPED)  # a playground step: the action a person typed (sink.TYPED)


@dataclass(frozen=True)
class Episode:
    """What a step needs of its episode that never changes while it is played: read once per
    process (steps of one episode come one after the other, many episodes at once)."""

    domain: str
    task_instruction: str
    system_prompt: str
    tools: list | None
    max_steps: int
    lineage: list  # the branch's lineage: which rows its steps are
    project_id: int = 0
    plan: Any = None  # how the world scores and ends it (`rewards.plan_of`); None: no rubric


_EPISODES: dict[tuple[int, int, int | None], Episode] = {}
_EPISODES_LOCK = threading.Lock()
_EPISODES_MAX = 4096


def episode_of(job: SimulationJob) -> Episode:
    key = (job.trajectory_id, job.branch_id, job.world_version_id)
    with _EPISODES_LOCK:
        found = _EPISODES.get(key)
    if found is not None:
        return found
    from studio.services.episodes import max_steps_of

    trajectory = job.trajectory
    if job.world_version_id:
        from inference.worlds import compose

        spec = job.world_version.spec()  # type: ignore[union-attr]
        system_prompt, tools = compose(spec).system_prompt, list(spec.tools) or None
        plan = plan_of(spec, (trajectory.metadata or {}).get("episode") or {})
    else:
        system_prompt, tools = system_prompt_for(trajectory), trajectory.tools or None
        plan = None
    branch = job.branch
    found = Episode(
        domain=trajectory.domain,
        task_instruction=trajectory.task_instruction or "",
        system_prompt=system_prompt,
        tools=tools,
        max_steps=max_steps_of(trajectory),
        lineage=list(branch.lineage or branch.compute_lineage()),
        project_id=trajectory.project_id,
        plan=plan,
    )
    with _EPISODES_LOCK:
        if len(_EPISODES) >= _EPISODES_MAX:
            _EPISODES.pop(next(iter(_EPISODES)))
        _EPISODES[key] = found
    return found


def rewards_module() -> Any:
    """`studio.services.rewards`, or None in a tree without it (its rubrics not built)."""
    try:
        from studio.services import rewards
    except ImportError:
        return None
    return rewards


def plan_of(spec: Any, episode: dict) -> Any:
    rewards = rewards_module()
    return None if rewards is None else rewards.plan_of(spec, episode)


# ---- one engine call for the steps of many episodes (the in-process model) ----------------

_BATCHER: StepBatcher | None = None
_BATCHER_LOCK = threading.Lock()


def batcher() -> StepBatcher:
    """This process's collector: the model lives once per process, so its batches do."""
    global _BATCHER
    with _BATCHER_LOCK:
        if _BATCHER is None:
            _BATCHER = StepBatcher(
                window_s=settings.STUDIO_GPU_BATCH_WINDOW_MS / 1000,
                max_rows=settings.STUDIO_GPU_BATCH_MAX_ROWS,
            )
        return _BATCHER


def batched(backend: Any) -> Any:
    """The in-process model's steps go through the collector; a served model's as they are."""
    if getattr(backend, "name", "") != "hf":
        return backend
    return BatchedBackend(backend, batcher())


def world_of(job: SimulationJob, episode: Episode) -> WorldContext:
    branch = Branch(pk=job.branch_id, lineage=episode.lineage)  # only to filter its steps
    return WorldContext(
        domain=episode.domain,
        task_instruction=episode.task_instruction,
        system_prompt=episode.system_prompt,
        history=history_stream(branch, job.fork_index),
        recorded=[],  # an episode's next step is its last: nothing recorded follows
        tools=episode.tools,
    )


def request_of(job: SimulationJob, episode: Episode) -> SimulationRequest:
    """The job's request as submitted: its backend, model and URL are on the row, so they
    fill every blank the project's defaults would have."""
    from studio.services.simulation import request_input_of

    facts = ForkFacts(step_count=job.fork_index, recorded_action=None, domain=episode.domain)
    defaults = Defaults(
        backend=job.backend, openai_model=job.model, hf_model=job.model, base_url=job.base_url
    )
    return SimulationRequest.build(request_input_of(job), fork=facts, defaults=defaults)


class EpisodeSink:
    """Writes the one step into the episode's branch, with its verdict (reward, rubric,
    whether it ends the episode)."""

    def __init__(self, job: SimulationJob, flight: Flight, episode: Episode | None = None):
        self.job = job
        self.flight = flight
        self.episode = episode
        self.step_row: Step | None = None
        self.verdict: Any = None  # rewards.StepVerdict of the step, when the world has a plan
        self.backend: Any = None  # the step's backend: which batch answered it
        world = (job.params or {}).get("world")
        self.world_meta = {"world": world} if world else {}
        seed = (job.params or {}).get("seed")
        if seed is not None:
            self.world_meta["seed"] = seed  # the step's own seed (`start_step`)

    def phase(self, phase: str) -> None:
        pass  # a step lasts one model call: its page shows it running, then done

    def live(self, sample: int, progress: LiveProgress) -> None:
        pass  # asked whole: there is no text to show before the answer

    def step(self, sample: int, step: SimulatedStep) -> None:
        # kept, and written with the job's outcome in one transaction (`settle`)
        meta = {"job": self.job.pk, **self.world_meta}
        batch = getattr(self.backend, "batch", None)
        if batch is not None:
            meta["batch"] = batch.as_dict()  # the engine call that answered it
        plan = self.episode.plan if self.episode is not None else None
        rewards = rewards_module() if plan is not None else None
        if rewards is not None:
            state = reported_state(step)
            self.verdict = rewards.verdict_of(plan, step.index, step.observation, state)
            meta.update(self.verdict.step_meta)
        self.step_row = step_row(self.job.branch_id, step, meta)

    def sample_finished(self, sample: int, status: str, error: str = "") -> None:
        pass  # no branch of its own: the job row says how it ended

    def totals(self, totals: Totals) -> None:
        pass  # the run's outcome carries them to the job row

    def stop_requested(self) -> bool:
        return self.flight.cancel_requested


FINAL = {SUCCEEDED: JobStatus.SUCCEEDED, FAILED: JobStatus.FAILED, CANCELLED: JobStatus.CANCELLED}


def run_episode_step(job_id: int, message_id: str = "") -> None:
    """The body of the Celery task: claim, answer, record, and always leave the job in a
    final state and tell the waiting agent."""
    task_started = time.monotonic()
    job = claim(
        SimulationJob,
        job_id,
        message_id,
        related=("world_endpoint",),
        branches=False,
        phase="answering",  # the whole answer is asked at once: no prefill/decode to show
    )
    if job is None:
        return
    outcome = RunOutcome(status=FAILED)
    sink: EpisodeSink | None = None
    episode: Episode | None = None
    with inflight.track(job.pk) as flight:
        try:
            world_label = (job.params or {}).get("world")
            if world_label and not job.world_version_id:
                raise InvalidRequest(
                    {
                        "world": [
                            f"version {world_label.get('version')} of world "
                            f"{world_label.get('name')!r} was deleted before the step ran"
                        ]
                    }
                )
            episode = episode_of(job)
            request = request_of(job, episode)
            sink = EpisodeSink(job, flight, episode)
            # a step is one model call: bounded, so a server that never answers fails the
            # step in minutes, not in an hour of retries
            backend = make_backend_for(
                job,
                request,
                timeout=settings.STUDIO_EPISODE_STEP_TIMEOUT_S,
                max_retries=1,  # connection errors, 429 and 5xx: a timeout is final
                timeout_setting="STUDIO_EPISODE_STEP_TIMEOUT_S",
            )
            sink.backend = backend = batched(backend)
            outcome = run_simulation(
                request,
                world_of(job, episode),
                backend,
                sink,
                time_limit_s=max(
                    1.0, settings.STUDIO_JOB_SOFT_LIMIT_S - 2 - (time.monotonic() - task_started)
                ),
                explain=explain_error,
                stream=False,
                # the action is the outside agent's, or typed by a person in the
                # playground: never an edit of a recorded one
                fork_provenance=TYPED if (job.params or {}).get("played") else AGENT,
            )
        except Exception as exc:  # noqa: BLE001 - reading the job failed: say so on the row
            log.exception("episode step %s failed before it ran", job.pk)
            message = explain_error(exc) or (
                exc.summary()
                if isinstance(exc, InvalidRequest)
                else f"Simulation failed ({type(exc).__name__}): {exc}"
            )
            outcome = RunOutcome(status=FAILED, error=message)
    step_row = sink.step_row if sink is not None else None
    if outcome.status == SUCCEEDED and step_row is None:
        outcome = RunOutcome(status=FAILED, error="the world model's answer was not recorded")
    status: str = FINAL[outcome.status]
    error = storable(outcome.error)
    try:
        kept = settle(job, outcome, status, error, step_row)
    except Exception as exc:  # noqa: BLE001 - the job must still end, and the agent hear it
        log.exception("episode step %s: its answer could not be recorded", job.pk)
        status, error = JobStatus.FAILED, f"the answer could not be recorded ({exc})"
        kept = settle(job, RunOutcome(status=FAILED, error=error), status, error, None)
    if kept is None:
        return  # ended elsewhere (swept as lost): the waiting agent reads that on the row
    status, error = kept
    verdict = sink.verdict if sink is not None else None
    if status == JobStatus.SUCCEEDED and verdict is not None and episode is not None:
        verdict = settle_rewards(job, episode, verdict, step_row)
    reply_to = str((job.params or {}).get("reply_to") or "")
    replies.publish(reply_to, answer(job, episode, status, error, step_row, verdict))


def reported_state(step: SimulatedStep) -> dict | None:
    """The state predicates the world model reported with its answer (a world with
    state_keys asks for them), None when it reported none."""
    state = step.meta.get("state")
    if isinstance(state, dict):
        return state
    if not step.raw_output:
        return None
    from inference.parsing import parse_prediction

    return parse_prediction(step.raw_output).state


def settle_rewards(job: SimulationJob, episode: Episode, verdict: Any, step: Step | None) -> Any:
    """After the step is written (so that no episode ends without its last step): an
    episode that ends is scored whole and its end written (`rewards.finish`: the episode
    rubric, a judge perhaps), and the step's meta gets the final reward; a rewarded step
    that does not end it adds to the episode's return. A failure here never takes back the
    recorded step."""
    rewards = rewards_module()
    if rewards is None:
        return verdict
    try:
        if verdict.done:
            final = rewards.finish(
                episode.project_id,
                job.trajectory_id,
                episode.plan,
                verdict,
                final_answer=None,
                last_action=job.action,
            )
            if step is not None and step.pk and final.step_meta != verdict.step_meta:
                Step.objects.filter(pk=step.pk).update(meta={**step.meta, **final.step_meta})
            return final
        if verdict.reward is not None:
            rewards.add_return(job.trajectory_id, verdict.reward)
    except Exception:  # noqa: BLE001 - the step stands; its episode's score is what failed
        log.exception("episode step %s: its episode's reward could not be written", job.pk)
    return verdict


def settle(
    job: SimulationJob, outcome: RunOutcome, status: str, error: str, step: Step | None
) -> tuple[str, str] | None:
    """The job's outcome, its step and the episode's step count, in one transaction; returns
    the final (status, error), or None when the job ended otherwise meanwhile (swept as lost,
    its row deleted): then no step is written. A step whose index another step of the
    episode took meanwhile is not written either: the job fails and says so."""
    counters: dict[str, Any] = outcome.totals.as_dict()
    succeeded = status == JobStatus.SUCCEEDED and step is not None
    if succeeded:
        counters["progress"] = 1.0
    phase = {"succeeded": "done", "cancelled": "cancelled"}.get(str(status), "failed")
    started = job.started_at or timezone.now()
    with transaction.atomic():
        ended = SimulationJob.objects.filter(pk=job.pk, status=JobStatus.RUNNING).update(
            status=status,
            phase=phase,
            error=error,
            live={},
            finished_at=timezone.now(),
            queue_wait_s=(started - job.created_at).total_seconds(),
            **counters,
        )
        if not ended:
            log.warning("episode step %s ended elsewhere meanwhile; its answer is dropped", job.pk)
            return None
        if succeeded:
            assert step is not None
            # the step goes where the episode (or the played branch) stands, or nowhere
            # (the row lock orders two answers of one episode; the first one wins the index)
            if _stands_at(job, step.index):
                step.save(force_insert=True)
                if not _played(job):
                    # every writer of an episode's steps notes its count, where the web
                    # processes' direct path reads it (studio.serving.episode_rows)
                    from studio.serving.episode_rows import note_written_sync

                    count = step.index + 1
                    transaction.on_commit(lambda: note_written_sync(job.trajectory_id, count))
            else:
                status = JobStatus.FAILED
                error = (
                    f"another step of this {'branch' if _played(job) else 'episode'} was "
                    f"answered at step {step.index} meanwhile: this answer is not kept; send "
                    "the action again"
                )
                SimulationJob.objects.filter(pk=job.pk).update(
                    status=status, phase="failed", error=error, progress=0.0
                )
    if single_writer_db():
        clear_pulse(SimulationJob, job.pk)
    return status, error


def _played(job: SimulationJob) -> bool:
    return bool((job.params or {}).get("played"))


def _stands_at(job: SimulationJob, index: int) -> bool:
    """Whether the job's branch ends just before `index`, taking that step (in the
    caller's transaction). An episode counts its steps on the trajectory (its one branch
    is the root); a played branch is a child, whose step count is its steps: the
    trajectory's count (the root's) is not its to change."""
    if not _played(job):
        return bool(
            Trajectory.objects.filter(pk=job.trajectory_id, step_count=index).update(
                step_count=index + 1
            )
        )
    # lock the branch row so two answers of one branch are ordered, then look at its end
    Branch.objects.select_for_update().filter(pk=job.branch_id).values_list("pk").first()
    return not Step.objects.filter(branch_id=job.branch_id, index__gte=index).exists()


def answer(
    job: SimulationJob,
    episode: Episode | None,
    status: str,
    error: str,
    step: Step | None,
    verdict: Any = None,
) -> dict[str, Any]:
    """What the waiting web process sends the agent (`studio.serving.episodes`)."""
    from studio.services.episodes import observation_of

    if status != JobStatus.SUCCEEDED or step is None or episode is None:
        return {"ok": False, "status": status, "error": error}
    result = observation_of(job.trajectory_id, episode.max_steps, step, job.backend, verdict)
    return {
        "ok": True,
        "observation": result.observation,
        "done": result.done,
        "reward": result.reward,
    }
