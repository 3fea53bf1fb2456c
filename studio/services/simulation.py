"""Simulation jobs: validate and start them (web process), run them (Celery worker), cancel and
retry. Interface 3 of the team brief.

Modes:
- next:    one step per child: the given action at fork_index and its predicted observation.
- replay:  counterfactual replay: the child's step at fork_index gets the given action, every
           later recorded action of the source branch is kept and each later observation is
           re-simulated, feeding the predicted observations into the next prompts; the N
           children advance together, their N prompts batched in one request per step.
- rollout: after the first step an agent model (settings AGENT_MODEL_*) proposes each next
           action while the world model answers, for up to max_steps steps; a branch stops
           on the agent's final answer.
"""

from __future__ import annotations

import logging
import math
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from inference.agent import AgentDecision
from inference.types import GenerationRequest, SamplingParams, StreamEvent, Turn
from studio.celery import queue_name
from studio.models import Branch, BranchOrigin, JobStatus, Provenance, SimulationJob, Step
from studio.models.jobs import SimulationMode
from studio.models.trajectories import BranchStatus
from studio.services import world_model
from studio.services.job_runtime import JobMonitor, claim, finish

log = logging.getLogger(__name__)

BACKENDS = ("retrieval", "openai", "hf")
MODES = tuple(m.value for m in SimulationMode)
MAX_N = 64
MAX_ROLLOUT_STEPS = 50
# name: (type, low, high, low inclusive)
PARAM_RANGES: dict[str, tuple[type, float, float, bool]] = {
    "temperature": (float, 0.0, 2.0, True),
    "top_p": (float, 0.0, 1.0, False),
    "max_tokens": (int, 1, 32768, True),
    "seed": (int, 0, 2**31 - 1, True),
}
PROGRESS_TEXT_CHARS = 4000  # live text kept per branch (the tail)


# ---- validation ----------------------------------------------------------------------------


def check_n(n) -> int:
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_N:
        raise ValidationError({"n": f"n (number of futures) must be 1 to {MAX_N}, got {n!r}"})
    return n


def check_mode(mode: str) -> str:
    if mode not in MODES:
        raise ValidationError({"mode": f"mode must be one of {', '.join(MODES)}, got {mode!r}"})
    return mode


def check_fork_index(step_count: int, fork_index, action: str) -> int:
    """fork_index names the step whose observation is simulated: an existing step (0-based),
    or step_count to append a new step after the last one (then the action is required)."""
    if isinstance(fork_index, bool) or not isinstance(fork_index, int):
        raise ValidationError({"fork_index": f"fork_index must be an integer, got {fork_index!r}"})
    if not 0 <= fork_index <= step_count:
        raise ValidationError(
            {
                "fork_index": f"fork_index {fork_index} is outside the branch's steps "
                f"(0 to {step_count - 1}, or {step_count} to add a step)"
            }
        )
    if fork_index == step_count and not action.strip():
        raise ValidationError({"action": "an action is required to simulate a new step"})
    return fork_index


def check_backend(backend: str | None, model: str, base_url: str) -> tuple[str, str, str]:
    backend = backend or settings.WORLD_MODEL_BACKEND
    if backend not in BACKENDS:
        raise ValidationError(
            {"backend": f"unknown backend {backend!r}; use one of {', '.join(BACKENDS)}"}
        )
    model = model or world_model.default_model(backend)
    if backend == "openai":
        base_url = base_url or settings.WORLD_MODEL_BASE_URL
        if not base_url:
            raise ValidationError(
                {"base_url": "the openai backend needs a base URL (or set WORLD_MODEL_BASE_URL)"}
            )
        if not base_url.startswith(("http://", "https://")):
            raise ValidationError(
                {"base_url": f"base URL must start with http(s)://, got {base_url!r}"}
            )
    if backend in ("openai", "hf") and not model:
        raise ValidationError({"model": f"the {backend} backend needs a model name or path"})
    if backend != "openai":
        base_url = ""
    return backend, model, base_url


def check_params(params: dict | None) -> dict:
    cleaned: dict = {}
    for key, value in (params or {}).items():
        if key not in PARAM_RANGES:
            raise ValidationError(
                {"params": f"unknown sampling parameter {key!r}; use {', '.join(PARAM_RANGES)}"}
            )
        if value is None or value == "":
            continue
        kind, low, high, low_inclusive = PARAM_RANGES[key]
        try:
            number = kind(value)
            if kind is int and float(value) != number:
                raise ValueError
        except (TypeError, ValueError):
            raise ValidationError(
                {
                    "params": f"{key} must be {'an integer' if kind is int else 'a number'}, got {value!r}"
                }
            ) from None
        too_low = number < low if low_inclusive else number <= low
        if too_low or number > high or (kind is float and math.isnan(number)):
            bracket = "[" if low_inclusive else "("
            raise ValidationError(
                {"params": f"{key} must be in {bracket}{low}, {high}], got {value!r}"}
            )
        cleaned[key] = number
    return cleaned


def check_max_steps(mode: str, max_steps) -> int:
    if mode != SimulationMode.ROLLOUT:
        return 1
    if isinstance(max_steps, bool) or not isinstance(max_steps, int):
        raise ValidationError({"max_steps": f"max_steps must be an integer, got {max_steps!r}"})
    if not 1 <= max_steps <= MAX_ROLLOUT_STEPS:
        raise ValidationError(
            {"max_steps": f"max_steps must be 1 to {MAX_ROLLOUT_STEPS}, got {max_steps}"}
        )
    if max_steps > 1 and not settings.AGENT_MODEL_BASE_URL:
        raise ValidationError(
            {"mode": "agent rollout needs an agent model: set AGENT_MODEL_BASE_URL"}
        )
    return max_steps


def queue_for(backend: str) -> str:
    return queue_name("gpu") if backend == "hf" else queue_name("default")


# ---- web side: start, cancel, retry --------------------------------------------------------


def do_start_simulation(
    *,
    user,
    branch: Branch,
    fork_index: int,
    action: str,
    mode: str = "next",
    n: int = 1,
    params: dict | None = None,
    backend: str | None = None,
    model: str = "",
    base_url: str = "",
    max_steps: int = 1,
) -> SimulationJob:
    """Create the job and its N queued child branches; the worker is asked once the
    transaction commits."""
    mode = check_mode(mode)
    n = check_n(n)
    cleaned = check_params(params)
    backend, model, base_url = check_backend(backend, model, base_url)
    max_steps = check_max_steps(mode, max_steps)
    with transaction.atomic():
        steps = list(branch.all_steps())
        fork_index = check_fork_index(len(steps), fork_index, action or "")
        recorded = steps[fork_index] if fork_index < len(steps) else None
        if recorded is not None and not (action or "").strip():
            action = recorded.action
        if mode == SimulationMode.REPLAY and fork_index + 1 >= len(steps):
            mode = SimulationMode.NEXT  # nothing recorded after the fork: replay = next
        edited = recorded is None or action != recorded.action
        user_id = getattr(user, "pk", None)
        job = SimulationJob.objects.create(
            requester_id=user_id,
            trajectory_id=branch.trajectory_id,
            branch=branch,
            fork_index=fork_index,
            action=action,
            mode=mode,
            n=n,
            max_steps=max_steps,
            params=cleaned,
            backend=backend,
            model=model,
            base_url=base_url,
            queue=queue_for(backend),
        )
        for i in range(n):
            Branch.objects.create(
                trajectory_id=branch.trajectory_id,
                parent=branch,
                fork_index=fork_index,
                name=f"sim #{i + 1} · step {fork_index}",
                origin=BranchOrigin.EDITED if edited else BranchOrigin.SIMULATED,
                status=BranchStatus.QUEUED,
                job=job,
                sample_index=i,
                progress={"phase": "queued", "tokens_out": 0, "tokens_per_s": 0, "text": ""},
                created_by_id=user_id,
            )
        transaction.on_commit(lambda: enqueue_simulation(job.pk, job.queue))
    return job


def enqueue_simulation(job_id: int, queue: str) -> None:
    from studio.tasks import run_simulation_job

    run_simulation_job.apply_async(args=[job_id], queue=queue)


def do_cancel_job(job: SimulationJob) -> SimulationJob:
    """A queued job is cancelled at once; a running one stops at its next token or step."""
    now = timezone.now()
    if SimulationJob.objects.filter(pk=job.pk, status=JobStatus.QUEUED).update(
        status=JobStatus.CANCELLED, cancel_requested=True, finished_at=now, phase="cancelled"
    ):
        Branch.objects.filter(job=job, status=BranchStatus.QUEUED).update(
            status=BranchStatus.CANCELLED, progress={"phase": "cancelled"}
        )
    else:
        SimulationJob.objects.filter(pk=job.pk, status=JobStatus.RUNNING).update(
            cancel_requested=True
        )
    job.refresh_from_db()
    return job


def do_retry_job(job: SimulationJob, user=None) -> SimulationJob:
    """The same request again as a new job with new branches; the old ones are kept."""
    if not job.is_finished:
        raise ValidationError(
            f"job {job.pk} is still {job.status}; cancel it or wait before retrying"
        )
    return do_start_simulation(
        user=user or job.requester,
        branch=job.branch,
        fork_index=job.fork_index,
        action=job.action,
        mode=job.mode,
        n=job.n,
        params=job.params,
        backend=job.backend,
        model=job.model,
        base_url=job.base_url,
        max_steps=job.max_steps,
    )


# ---- worker side ---------------------------------------------------------------------------


class Cancelled(Exception):
    pass


class JobTimeLimit(Exception):
    """The run stopped itself before Celery's soft time limit (streams end cleanly)."""


@dataclass
class Sample:
    """One child branch while the job runs."""

    branch: Branch
    history: list[Turn]
    agent_history: list[tuple[str, str]]
    alive: bool = True
    error: str = ""
    steps_done: int = 0
    decode_started: float | None = None


@dataclass
class Totals:
    prefill_s: float = 0.0
    decode_s: float = 0.0
    tokens_in: int = 0
    tokens_out: int = 0
    units_done: int = 0


def run_simulation(job_id: int) -> None:
    """The body of the Celery task: claim, run, and always leave the job in a final state."""
    job = claim(SimulationJob, job_id)
    if job is None:
        return
    queue_wait = (job.started_at - job.created_at).total_seconds()
    SimulationJob.objects.filter(pk=job.pk).update(queue_wait_s=queue_wait, phase="prefill")
    Branch.objects.filter(job=job, status=BranchStatus.QUEUED).update(
        status=BranchStatus.RUNNING,
        progress={"phase": "prefill", "tokens_out": 0, "tokens_per_s": 0, "text": ""},
    )
    run = SimulationRun(job)
    outcome, error = "succeeded", ""
    with JobMonitor(SimulationJob, job.pk) as monitor:
        run.monitor = monitor
        try:
            run.prepare()
            run.execute()
        except Cancelled:
            outcome = "cancelled"
        except Exception as exc:  # noqa: BLE001 - every failure must land on the row
            outcome, error = "failed", readable_error(exc, job)
            if outcome == "failed":
                log.exception("simulation job %s failed", job.pk)
    run.finalize(outcome, error)


def readable_error(exc: BaseException, job: SimulationJob) -> str:
    from celery.exceptions import SoftTimeLimitExceeded

    if isinstance(exc, SoftTimeLimitExceeded | JobTimeLimit):
        return (
            f"Stopped: the job ran past the time limit of {settings.STUDIO_JOB_SOFT_LIMIT_S} s "
            "(STUDIO_JOB_HARD_LIMIT_S). Try fewer futures, fewer steps or fewer max_tokens."
        )
    from inference.agent import AgentError
    from inference.backends import BackendError

    if isinstance(exc, BackendError):
        return f"The {job.backend} backend failed: {exc}"
    if isinstance(exc, AgentError):
        return str(exc)
    if isinstance(exc, ValidationError):
        return "; ".join(exc.messages)
    return f"Simulation failed ({type(exc).__name__}): {exc}"


def storable(text: str) -> str:
    """Model text as the database can hold it: byte-level tokenizers can decode a NUL byte,
    which PostgreSQL rejects in text and JSON columns; show it as U+FFFD instead."""
    return text.replace("\x00", "\ufffd")


class SimulationRun:
    def __init__(self, job: SimulationJob):
        self.job = job
        self.monitor: JobMonitor
        self.totals = Totals()
        self.samples: list[Sample] = []
        self.total_units = 1
        # Stop a little before Celery's soft limit: a stop asked through the stream callback
        # ends every branch cleanly, where the soft-limit signal lands in one thread only.
        self.deadline = time.monotonic() + max(1.0, settings.STUDIO_JOB_SOFT_LIMIT_S - 2)
        self.agent_thoughts: dict[int, AgentDecision] = {}  # sample -> this step's decision

    def prepare(self) -> None:
        """Read what the run needs (inside the failure handling: a deleted branch fails it)."""
        job = self.job
        self.trajectory = job.trajectory
        self.source_steps = list(job.branch.all_steps())
        params = job.params or {}
        self.sampling = SamplingParams(
            temperature=float(params.get("temperature", 0.7)),
            top_p=float(params.get("top_p", 0.95)),
            max_tokens=int(params.get("max_tokens", 1024)),
            seed=params.get("seed"),
        )
        base = world_model.history_turns(self.source_steps, job.fork_index)
        agent_base = [(s.action, s.observation) for s in self.source_steps[: job.fork_index]]
        self.samples = [
            Sample(branch=b, history=list(base), agent_history=list(agent_base))
            for b in job.branches.order_by("sample_index")
        ]
        self.total_units = len(self.samples) * self.planned_steps()

    def planned_steps(self) -> int:
        if self.job.mode == SimulationMode.REPLAY:
            return max(1, len(self.source_steps) - self.job.fork_index)
        if self.job.mode == SimulationMode.ROLLOUT:
            return self.job.max_steps
        return 1

    def recorded(self, index: int) -> Step | None:
        return self.source_steps[index] if index < len(self.source_steps) else None

    # -- the loop
    def execute(self) -> None:
        self.backend = world_model.make_job_backend(self.job)
        job = self.job
        recorded = self.recorded(job.fork_index)
        edited = recorded is None or job.action != recorded.action
        first_provenance = Provenance.EDITED if edited else Provenance.SIMULATED
        self.simulate_step(
            job.fork_index,
            {id(s): job.action for s in self.samples},
            first_provenance,
        )
        if job.mode == SimulationMode.REPLAY:
            for index in range(job.fork_index + 1, len(self.source_steps)):
                self.check_cancel()
                if not self.alive():
                    break
                recorded = self.source_steps[index]
                self.simulate_step(
                    index, {id(s): recorded.action for s in self.alive()}, Provenance.SIMULATED
                )
        elif job.mode == SimulationMode.ROLLOUT:
            self.rollout()

    def rollout(self) -> None:
        from inference.agent import AgentModel, build_agent_messages

        agent = AgentModel(
            base_url=settings.AGENT_MODEL_BASE_URL,
            model=settings.AGENT_MODEL_NAME,
            api_key=settings.AGENT_MODEL_API_KEY,
        )
        job = self.job
        for k in range(1, job.max_steps):
            self.check_cancel()
            alive = self.alive()
            if not alive:
                break
            index = job.fork_index + k
            self.monitor.set_job(phase="agent")
            for s in alive:
                self.monitor.set_branch(s.branch.pk, progress=self.progress_of(s, "agent", "", 0))

            def propose(sample: Sample):
                messages = build_agent_messages(
                    self.trajectory.domain,
                    self.trajectory.task_instruction,
                    sample.agent_history,
                    self.trajectory.tools or None,
                )
                return agent.propose(
                    messages,
                    temperature=self.sampling.temperature,
                    max_tokens=self.sampling.max_tokens,
                )

            with ThreadPoolExecutor(max_workers=min(8, len(alive))) as pool:
                decisions = list(pool.map(propose, alive))
            actions = {}
            for sample, decision in zip(alive, decisions, strict=True):
                if decision.final:
                    Step.objects.create(
                        branch=sample.branch,
                        index=index,
                        action=decision.action,
                        thinking=decision.thought,
                        provenance=Provenance.AGENT,
                        meta={"final_answer": True, "agent_raw": decision.raw},
                    )
                    self.complete(sample)
                else:
                    actions[id(sample)] = decision.action
                    self.agent_thoughts[id(sample)] = decision
            if actions:
                self.simulate_step(index, actions, Provenance.AGENT, recorded_context=False)

    def alive(self) -> list[Sample]:
        return [s for s in self.samples if s.alive]

    def past_deadline(self) -> bool:
        return time.monotonic() > self.deadline

    def should_stop(self) -> bool:
        """Asked of every stream event: a cancel request, or the job's time is up."""
        return self.monitor.cancel_requested or self.past_deadline()

    def check_cancel(self) -> None:
        if self.monitor.cancel_requested:
            raise Cancelled
        if self.past_deadline():
            raise JobTimeLimit

    def progress_of(self, sample: Sample, phase: str, text: str, tokens_out: int) -> dict:
        tps = 0.0
        if sample.decode_started is not None and tokens_out:
            elapsed = time.monotonic() - sample.decode_started
            tps = round(tokens_out / elapsed, 1) if elapsed > 0 else 0.0
        return {
            "phase": phase,
            "tokens_out": tokens_out,
            "tokens_per_s": tps,
            "text": storable(text[-PROGRESS_TEXT_CHARS:]),
            "step": sample.steps_done,
        }

    def simulate_step(
        self, index: int, actions: dict[int, str], provenance: str, *, recorded_context: bool = True
    ) -> None:
        """One world-model turn for every sample in `actions`, batched in one request.
        `recorded_context`: the recorded step at `index` (its state, its verbatim turn prompt)
        still describes this turn; not so once an agent has taken the branch elsewhere."""
        from inference.parsing import parse_prediction

        samples = [s for s in self.samples if s.alive and id(s) in actions]
        context = self.recorded(index) if recorded_context else None
        currents = [world_model.current_turn(context, actions[id(s)]) for s in samples]
        prompts = [
            world_model.build_messages_for(self.trajectory, s.history, cur)
            for s, cur in zip(samples, currents, strict=True)
        ]
        params = SamplingParams(**{**vars(self.sampling), "n": 1})
        if len(prompts) > 1 and all(p == prompts[0] for p in prompts):
            params.n = len(prompts)  # one prompt, N samples: the backend shares the prefix
            request = GenerationRequest(messages=prompts[0], params=params)
        else:
            request = GenerationRequest(branches=prompts, params=params)
        for s in samples:
            s.decode_started = None
            self.monitor.set_branch(s.branch.pk, progress=self.progress_of(s, "prefill", "", 0))
        self.monitor.set_job(phase="prefill")

        def on_event(event: StreamEvent) -> bool:
            if 0 <= event.sample < len(samples):
                sample = samples[event.sample]
                if event.phase == "decoding" and sample.decode_started is None:
                    sample.decode_started = time.monotonic()
                self.monitor.set_branch(
                    sample.branch.pk,
                    progress=self.progress_of(sample, event.phase, event.text, event.tokens_out),
                )
                if event.phase == "decoding":
                    self.monitor.set_job(phase="decoding")
            return self.should_stop()

        started = time.monotonic()
        completions = self.backend.generate(request, on_event)
        wall = time.monotonic() - started
        if len(completions) != len(samples):
            raise RuntimeError(
                f"the backend returned {len(completions)} completions for {len(samples)} prompts"
            )
        self.check_cancel()
        self.monitor.set_job(phase="saving")
        self.totals.prefill_s += max((c.prefill_s for c in completions), default=0.0)
        decode = max((c.decode_s for c in completions), default=0.0)
        self.totals.decode_s += decode if decode > 0 else wall
        for sample, current, completion in zip(samples, currents, completions, strict=True):
            completion.text = storable(completion.text)
            self.totals.tokens_in += completion.tokens_in
            self.totals.tokens_out += completion.tokens_out
            if completion.finish_reason == "cancelled":
                self.check_cancel()
                raise Cancelled
            if completion.finish_reason == "error":
                self.fail_sample(sample, completion.error or "the backend returned an error")
                continue
            parsed = parse_prediction(completion.text)
            agent = self.agent_thoughts.pop(id(sample), None)
            meta = {"backend": self.job.backend, "model": self.job.model, "job": self.job.pk}
            if not self.backend_is_neural():
                meta["baseline"] = "retrieval (non-neural)"
            if completion.finish_reason == "length":
                meta["truncated"] = True
            if agent is not None:
                meta["agent_thinking"] = agent.thought
                meta["agent_raw"] = agent.raw
            Step.objects.create(
                branch=sample.branch,
                index=index,
                action=current.action,
                observation=parsed.observation,
                state=current.state,
                thinking=parsed.thinking,
                raw_output=completion.text,
                raw_prompt=current.raw_prompt,
                provenance=provenance,
                parse_status=str(parsed.status),
                meta=meta,
                timings={
                    "duration_s": round(wall, 4),
                    "prefill_s": round(completion.prefill_s, 4),
                    "decode_s": round(completion.decode_s, 4),
                    "tokens_in": completion.tokens_in,
                    "tokens_out": completion.tokens_out,
                },
            )
            sample.history.append(
                Turn(
                    action=current.action,
                    observation=parsed.observation,
                    state=current.state,
                    raw_prompt=current.raw_prompt,
                )
            )
            sample.agent_history.append((current.action, parsed.observation))
            sample.steps_done += 1
            self.totals.units_done += 1
            self.monitor.set_branch(
                sample.branch.pk,
                progress=self.progress_of(
                    sample, "step done", completion.text, completion.tokens_out
                ),
            )
            if (
                self.job.mode == SimulationMode.NEXT
                or (self.job.mode == SimulationMode.REPLAY and index + 1 >= len(self.source_steps))
                or (
                    self.job.mode == SimulationMode.ROLLOUT
                    and index + 1 >= self.job.fork_index + self.job.max_steps
                )
            ):
                self.complete(sample)
        self.monitor.set_job(**self.job_counters())

    def backend_is_neural(self) -> bool:
        return bool(getattr(getattr(self, "backend", None), "is_neural", True))

    def job_counters(self) -> dict:
        t = self.totals
        return {
            "progress": min(1.0, t.units_done / max(1, self.total_units)),
            "prefill_s": round(t.prefill_s, 4),
            "decode_s": round(t.decode_s, 4),
            "tokens_in": t.tokens_in,
            "tokens_out": t.tokens_out,
            # A rate only means something for a model that decodes: the retrieval baseline
            # "decodes" in microseconds and would show absurd figures.
            "tokens_per_s": round(t.tokens_out / t.decode_s, 2)
            if t.decode_s > 0 and self.backend_is_neural()
            else None,
        }

    def complete(self, sample: Sample) -> None:
        sample.alive = False
        # a rollout that stops early on a final answer counts its unused steps as done
        self.totals.units_done += max(0, self.planned_steps() - sample.steps_done)
        Branch.objects.filter(pk=sample.branch.pk).update(
            status=BranchStatus.SUCCEEDED,
            progress={**self.progress_of(sample, "done", "", 0), "steps": sample.steps_done},
        )

    def fail_sample(self, sample: Sample, message: str) -> None:
        sample.alive = False
        sample.error = message
        Branch.objects.filter(pk=sample.branch.pk).update(
            status=BranchStatus.FAILED, error=message, progress={"phase": "failed"}
        )

    def finalize(self, outcome: str, error: str) -> None:
        """Write the final state once the monitor thread has stopped."""
        job = self.job
        counters = self.job_counters()
        open_branches = Branch.objects.filter(
            job=job, status__in=[BranchStatus.QUEUED, BranchStatus.RUNNING]
        )
        if outcome == "cancelled":
            open_branches.update(status=BranchStatus.CANCELLED, progress={"phase": "cancelled"})
            finish(SimulationJob, job.pk, JobStatus.CANCELLED, phase="cancelled", **counters)
            return
        if outcome == "failed":
            open_branches.update(
                status=BranchStatus.FAILED, error=error, progress={"phase": "failed"}
            )
            finish(SimulationJob, job.pk, JobStatus.FAILED, phase="failed", error=error, **counters)
            return
        failed = [s for s in self.samples if s.error]
        if failed and len(failed) == len(self.samples):
            message = f"All {len(failed)} samples failed: {failed[0].error}"
            finish(
                SimulationJob, job.pk, JobStatus.FAILED, phase="failed", error=message, **counters
            )
            return
        open_branches.update(status=BranchStatus.SUCCEEDED)
        note = (
            f"{len(failed)} of {len(self.samples)} samples failed: {failed[0].error}"
            if failed
            else ""
        )
        counters["progress"] = 1.0
        finish(SimulationJob, job.pk, JobStatus.SUCCEEDED, phase="done", error=note, **counters)
