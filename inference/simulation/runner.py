"""Run a `SimulationRequest` over a `Backend`, writing through a `SimulationSink`.

Modes:
- next:    each future gets one step: the request's action at the fork and its predicted
           observation.
- replay:  counterfactual replay: the fork step gets the request's action, every later
           recorded action is kept and its observation re-simulated, feeding each future's
           predictions into its next prompts; the futures advance together, their prompts
           batched in one backend call per step.
- rollout: after the first step an agent proposes each next action while the world model
           answers, for up to `max_steps` steps; a future stops at the agent's final answer.

The futures share one copy of the prompt history up to the fork (`prefix`); each keeps only
the turns it added since. Where every future has the same prompt, the backend gets that one
prompt with `n` = N (the in-process engine then computes the prefix once); otherwise one
prompt per future.

No Django and no database here: the studio gives a sink that stores rows, tests give a
`MemorySink` and fake backends."""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Protocol

from inference import perturbations as perturbing
from inference.agent import AgentDecision, AgentError, agent_turn_messages, build_agent_messages
from inference.backends.errors import BackendError
from inference.parsing import parse_prediction
from inference.prompts import current_message, history_messages, perturbation_note, turn_pair
from inference.simulation import limits
from inference.simulation.rates import MIN_TOTAL_WINDOW_S, decode_rate
from inference.simulation.request import InvalidRequest, SimulationRequest
from inference.simulation.sink import (
    AGENT,
    CANCELLED,
    EDITED,
    FAILED,
    NO_OBSERVATION,
    PERTURBED_OBSERVATION,
    REPLAYED,
    SIMULATED_OBSERVATION,
    SUCCEEDED,
    LiveProgress,
    RunOutcome,
    SimulatedStep,
    SimulationSink,
    Totals,
)
from inference.simulation.world import WorldContext, current_turn
from inference.types import (
    Backend,
    Completion,
    GenerationRequest,
    Message,
    SamplingParams,
    StreamEvent,
    Turn,
)

BASELINE_NOTE = "retrieval (non-neural)"


class Agent(Protocol):
    def propose(
        self, messages: list[dict], *, temperature: float, max_tokens: int
    ) -> AgentDecision: ...


class Cancelled(Exception):
    pass


class TimeLimitReached(Exception):
    pass


@dataclass
class _Future:
    sample: int
    suffix: list[Message] = field(default_factory=list)  # world-model turns since the fork
    agent_suffix: list[Message] = field(default_factory=list)  # the agent's view of them
    alive: bool = True
    error: str = ""
    steps_done: int = 0
    decode_started: float | None = None
    decision: AgentDecision | None = None  # the agent's decision behind this step's action


def run_simulation(
    request: SimulationRequest,
    world: WorldContext,
    backend: Backend,
    sink: SimulationSink,
    *,
    agent: Agent | None = None,
    time_limit_s: float | None = None,
    explain: Callable[[BaseException], str | None] | None = None,
    clock: Callable[[], float] = time.monotonic,
    stream: bool = True,
    fork_provenance: str | None = None,
) -> RunOutcome:
    """Run to the end and return the outcome; never raises for what goes wrong in the run
    (a backend error, an unreachable agent, the time limit): the outcome says it.
    `stream=False` asks the backend for whole answers (no live text; a stop asked meanwhile
    takes effect once the answer is in): cheaper where nobody watches tokens arrive.
    `fork_provenance`: who wrote the action at the fork when the caller knows better than
    "edited" (an outside agent playing an episode: AGENT)."""
    return SimulationRunner(
        request,
        world,
        backend,
        sink,
        agent=agent,
        time_limit_s=time_limit_s,
        explain=explain,
        clock=clock,
        stream=stream,
        fork_provenance=fork_provenance,
    ).run()


class SimulationRunner:
    def __init__(
        self,
        request: SimulationRequest,
        world: WorldContext,
        backend: Backend,
        sink: SimulationSink,
        *,
        agent: Agent | None = None,
        time_limit_s: float | None = None,
        explain: Callable[[BaseException], str | None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        stream: bool = True,
        fork_provenance: str | None = None,
    ):
        self.stream = stream
        self.fork_provenance = fork_provenance
        self.request = request
        self.world = world
        self.backend = backend
        self.sink = sink
        self.agent = agent
        self.time_limit_s = time_limit_s
        self.explain = explain
        self.clock = clock
        self.deadline = None if time_limit_s is None else clock() + time_limit_s
        self.futures = [_Future(i) for i in range(request.n)]
        self.totals = Totals()
        self.units_done = 0
        self.prefix: list[Message] = []
        self.agent_prefix: list[Message] = []
        self.history_len = 0
        self.is_neural = bool(getattr(backend, "is_neural", True))

    # -- the whole run ---------------------------------------------------------------------
    def run(self) -> RunOutcome:
        try:
            self._prepare()
            self._execute()
        except Cancelled:
            return self._end(CANCELLED, "")
        except TimeLimitReached as exc:
            return self._end(FAILED, self._readable(exc))
        except Exception as exc:  # noqa: BLE001 - every failure ends as a readable outcome
            return self._end(FAILED, self._readable(exc))
        failed = [f for f in self.futures if f.error]
        if failed and len(failed) == len(self.futures):
            return self._end(FAILED, f"All {len(failed)} futures failed: {failed[0].error}")
        note = ""
        if failed:
            note = f"{len(failed)} of {len(self.futures)} futures failed: {failed[0].error}"
        self.totals.progress = 1.0
        return self._end(SUCCEEDED, note)

    def _end(self, status: str, error: str) -> RunOutcome:
        """Settle every future still open with the run: succeeded, cancelled or failed."""
        for f in self.futures:
            if f.alive:
                f.alive = False
                self._safe_finish(f.sample, status, error if status == FAILED else "")
        return RunOutcome(status=status, error=error, totals=self.totals)

    def _safe_finish(self, sample: int, status: str, error: str) -> None:
        try:
            self.sink.sample_finished(sample, status, error)
        except Exception:  # noqa: BLE001 - the outcome still reaches the caller
            pass

    def _readable(self, exc: BaseException) -> str:
        if self.explain is not None:
            text = self.explain(exc)
            if text:
                return text
        if isinstance(exc, TimeLimitReached):
            return self._time_limit_message()
        if isinstance(exc, BackendError):
            return f"The {self.request.backend} backend failed: {exc}"
        if isinstance(exc, AgentError):
            return str(exc)
        if isinstance(exc, InvalidRequest):
            return exc.summary()
        return f"Simulation failed ({type(exc).__name__}): {exc}"

    def _time_limit_message(self) -> str:
        limit = f" of {self.time_limit_s:.0f} s" if self.time_limit_s is not None else ""
        return (
            f"Stopped: the job ran past its time limit{limit}. Try fewer futures, fewer steps "
            "or fewer max_tokens."
        )

    # -- set-up ------------------------------------------------------------------------------
    def planned_steps(self) -> int:
        mode = self.request.mode
        if mode == "replay":
            return max(1, len(self.world.recorded))
        if mode == "rollout":
            return self.request.max_steps
        return 1

    def _prepare(self) -> None:
        """Build the shared history once: the world model's prompt prefix and, for a
        rollout, the agent's. The history stream is read here and not kept."""
        world = self.world
        if self.request.mode == "rollout" and (
            self.request.max_steps > 1 or self.request.agent_first
        ):
            pairs: list[tuple[str, str]] = []

            def turns():
                for turn in world.history:
                    pairs.append((turn.action, turn.observation or ""))
                    yield turn

            self.prefix = history_messages(world.system_prompt, turns(), world.task_instruction)
            self.agent_prefix = build_agent_messages(
                world.domain, world.task_instruction, pairs, world.tools
            )
            pairs.clear()
        else:
            self.prefix = history_messages(
                world.system_prompt, world.history, world.task_instruction
            )
        self.history_len = sum(1 for m in self.prefix if m["role"] == "user")

    # -- the loop ----------------------------------------------------------------------------
    def _execute(self) -> None:
        request = self.request
        if request.agent_first:  # handed over: the agent proposes the fork's action too
            self._rollout(first_step=0)
            return
        first = self.fork_provenance or (EDITED if request.edited else REPLAYED)
        self._step(request.fork_index, {f.sample: request.action for f in self.futures}, first)
        if request.mode == "replay":
            for recorded in self.world.recorded:
                if recorded.index <= request.fork_index:
                    continue
                self._check_stop()
                if not self._alive():
                    break
                actions = {f.sample: recorded.action for f in self._alive()}
                self._step(recorded.index, actions, REPLAYED)
        elif request.mode == "rollout":
            self._rollout()

    def _rollout(self, first_step: int = 1) -> None:
        """The agent's steps, from the fork + `first_step` (0: the agent takes the fork's
        step too) to max_steps."""
        if (self.request.max_steps > 1 or first_step == 0) and self.agent is None:
            raise AgentError(
                "agent rollout needs an agent model to propose the actions; none is configured"
            )
        request = self.request
        for k in range(first_step, request.max_steps):
            self._check_stop()
            alive = self._alive()
            if not alive:
                break
            index = request.fork_index + k
            self.sink.phase("agent")
            for f in alive:
                self.sink.live(f.sample, self._live(f, "agent", "", 0))
            with ThreadPoolExecutor(max_workers=min(8, len(alive))) as pool:
                decisions = list(pool.map(self._propose, alive))
            actions: dict[int, str] = {}
            for f, decision in zip(alive, decisions, strict=True):
                if decision.final:
                    self.sink.step(
                        f.sample,
                        SimulatedStep(
                            index=index,
                            action=decision.action,
                            provenance=AGENT,
                            observation_source=NO_OBSERVATION,
                            thinking=decision.thought,
                            meta={"final_answer": True, "agent_raw": decision.raw},
                        ),
                    )
                    self._complete(f)
                else:
                    actions[f.sample] = decision.action
                    f.decision = decision
            if actions:
                self._step(index, actions, AGENT, recorded_context=False)

    def _propose(self, f: _Future) -> AgentDecision:
        assert self.agent is not None
        return self.agent.propose(
            self.agent_prefix + f.agent_suffix,
            temperature=self.request.sampling.temperature,
            max_tokens=self.request.sampling.max_tokens,
        )

    def _alive(self) -> list[_Future]:
        return [f for f in self.futures if f.alive]

    def _past_deadline(self) -> bool:
        return self.deadline is not None and self.clock() > self.deadline

    def _should_stop(self) -> bool:
        return self.sink.stop_requested() or self._past_deadline()

    def _check_stop(self) -> None:
        if self.sink.stop_requested():
            raise Cancelled
        if self._past_deadline():
            raise TimeLimitReached

    def _live(self, f: _Future, phase: str, text: str, tokens_out: int) -> LiveProgress:
        # None while too little has been decoded to measure (`rates`): the page says "…"
        tps: float | None = None
        if f.decode_started is not None and tokens_out:
            tps = decode_rate(tokens_out, self.clock() - f.decode_started)
        return LiveProgress(
            phase=phase,
            step=f.steps_done,
            tokens_out=tokens_out,
            tokens_per_s=tps if self.is_neural else 0.0,
            text=text[-limits.LIVE_TEXT_CHARS :],
        )

    def _turn_number(self, f: _Future) -> int:
        return self.history_len + len(f.suffix) // 2 + 1

    def _step(
        self,
        index: int,
        actions: dict[int, str],
        provenance: str,
        *,
        recorded_context: bool = True,
    ) -> None:
        """One world-model turn for every future in `actions`, in one backend call.
        `recorded_context`: the recorded step at `index` (its state, its verbatim turn
        prompt) still describes this turn; not so once an agent took the future elsewhere."""
        everyone = [f for f in self.futures if f.alive and f.sample in actions]
        context = self.world.recorded_at(index) if recorded_context else None
        task = self.world.task_instruction
        chosen = {f.sample: self._perturbation(f, index, actions[f.sample]) for f in everyone}
        # A perturbation that replaces the observation whatever it was needs no model call.
        answered: set[int] = set()
        for f in everyone:
            p = chosen[f.sample]
            if (
                p is not None
                and p.mode == perturbing.DETERMINISTIC
                and p.kind in perturbing.REPLACING
            ):
                current = current_turn(context, actions[f.sample])
                self._record(f, index, current, provenance, p, None, 0.0)
                answered.add(f.sample)
        futures = [f for f in everyone if f.sample not in answered]
        if not futures:
            self._report_totals()
            return
        currents = [current_turn(context, actions[f.sample]) for f in futures]
        tails = [
            [*f.suffix, self._asking(self._turn_number(f), cur, task, chosen[f.sample])]
            for f, cur in zip(futures, currents, strict=True)
        ]
        sampling = self.request.sampling
        params = SamplingParams(
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            max_tokens=sampling.max_tokens,
            seed=sampling.seed,
            n=1,
        )
        # which completion each future takes: its own, or, for a sweep's deterministic
        # entries at the fork, the one of its sample number within the entry, so every
        # column perturbs the same base observations
        k = self.request.samples_per_perturbation
        shared = (
            bool(self.request.sweep)
            and index == self.request.fork_index
            and all(t == tails[0] for t in tails)
        )
        if shared:
            params.n = k
            generation = GenerationRequest(messages=self.prefix + tails[0], params=params)
            takes = [f.sample % k for f in futures]
        elif all(t == tails[0] for t in tails):
            params.n = len(tails)  # one prompt, N samples: the backend shares the prefix
            generation = GenerationRequest(messages=self.prefix + tails[0], params=params)
            takes = list(range(len(futures)))
        else:
            generation = GenerationRequest(branches=[self.prefix + t for t in tails], params=params)
            takes = list(range(len(futures)))
        expected = params.n if shared else len(futures)
        del tails
        listeners: dict[int, list[_Future]] = {}
        for f, take in zip(futures, takes, strict=True):
            listeners.setdefault(take, []).append(f)
        for f in futures:
            f.decode_started = None
            self.sink.live(f.sample, self._live(f, "prefill", "", 0))
        self.sink.phase("prefill")

        decoding = False

        def on_event(event: StreamEvent) -> bool:
            nonlocal decoding
            for f in listeners.get(event.sample, ()):
                if event.phase == "decoding" and f.decode_started is None:
                    f.decode_started = self.clock()
                self.sink.live(f.sample, self._live(f, event.phase, event.text, event.tokens_out))
            if event.phase == "decoding" and not decoding:
                decoding = True
                self.sink.phase("decoding")
            return self._should_stop()

        started = self.clock()
        completions = self.backend.generate(generation, on_event if self.stream else None)
        wall = self.clock() - started
        del generation
        if len(completions) != expected:
            raise BackendError(
                f"the backend returned {len(completions)} completions for {expected} prompts"
            )
        self._check_stop()
        self.sink.phase("saving")
        self.totals.prefill_s += max((c.prefill_s for c in completions), default=0.0)
        decode = max((c.decode_s for c in completions), default=0.0)
        self.totals.decode_s += decode if decode > 0 else wall
        for completion in completions:
            self.totals.tokens_in += completion.tokens_in
            self.totals.tokens_out += completion.tokens_out
        for f, current, take in zip(futures, currents, takes, strict=True):
            completion = completions[take]
            if completion.finish_reason == "cancelled":
                self._check_stop()
                raise Cancelled
            if completion.finish_reason == "error":
                self._fail(f, completion.error or "the backend returned an error")
                continue
            self._record(f, index, current, provenance, chosen[f.sample], completion, wall)
        self._report_totals()

    def _perturbation(self, f: _Future, index: int, action: str) -> perturbing.Perturbation | None:
        return self.request.perturbation_for(f.sample, index, action)

    @staticmethod
    def _asking(
        number: int, current: Turn, task: str, p: perturbing.Perturbation | None
    ) -> Message:
        """The turn's prompt; a prompted perturbation adds its instruction for this turn
        only (the history the next turns see keeps the plain prompt)."""
        message = current_message(number, current, task)
        if p is not None and p.mode == perturbing.PROMPTED:
            message = {
                **message,
                "content": message["content"] + perturbation_note(perturbing.instruction(p)),
            }
        return message

    def _record(
        self,
        f: _Future,
        index: int,
        current: Turn,
        provenance: str,
        p: perturbing.Perturbation | None,
        completion: Completion | None,
        wall: float,
    ) -> None:
        """Store one finished step of `f` and extend its history with it. `completion` is
        None when a deterministic perturbation answered without the model."""
        meta: dict = {"backend": self.request.backend, "model": self.request.world_model.model}
        if completion is None:
            thinking, raw_output, status, observation = "", "", "", ""  # no model output
            meta = {"model_call": False}
            timings: dict = {}
        else:
            parsed = parse_prediction(completion.text)
            thinking, raw_output = parsed.thinking, completion.text
            status, observation = str(parsed.status), parsed.observation
            if not self.is_neural:
                meta["baseline"] = BASELINE_NOTE
            if completion.finish_reason == "length":
                meta["truncated"] = True
            timings = {
                "duration_s": round(wall, 4),
                "prefill_s": round(completion.prefill_s, 4),
                "decode_s": round(completion.decode_s, 4),
                "tokens_in": completion.tokens_in,
                "tokens_out": completion.tokens_out,
            }
        source = SIMULATED_OBSERVATION
        if p is not None:
            changed = True
            if p.mode == perturbing.DETERMINISTIC:
                perturbed = perturbing.transform(p, observation, self.world.domain)
                changed = perturbed != observation or completion is None
                if changed and completion is not None:
                    meta["unperturbed_observation"] = observation
                observation = perturbed
            meta["perturbation"] = {**p.as_dict(), "label": p.label, "changed": changed}
            if changed:
                source = PERTURBED_OBSERVATION
        if f.decision is not None:
            meta["agent_thinking"] = f.decision.thought
            meta["agent_raw"] = f.decision.raw
            f.decision = None
        self.sink.step(
            f.sample,
            SimulatedStep(
                index=index,
                action=current.action,
                provenance=provenance,
                observation=observation,
                observation_source=source,
                state=current.state,
                thinking=thinking,
                raw_output=raw_output,
                raw_prompt=current.raw_prompt,
                parse_status=status,
                meta=meta,
                timings=timings,
            ),
        )
        number = self._turn_number(f)
        done = Turn(
            action=current.action,
            observation=observation,
            state=current.state,
            raw_prompt=current.raw_prompt,
        )
        f.suffix.extend(turn_pair(number, done, self.world.task_instruction))
        if self.agent_prefix:
            f.agent_suffix.extend(agent_turn_messages(current.action, observation))
        f.steps_done += 1
        self.units_done += 1
        tokens = completion.tokens_out if completion is not None else 0
        self.sink.live(f.sample, self._live(f, "step done", raw_output, tokens))
        if self._last_step(index):
            self._complete(f)

    def _last_step(self, index: int) -> bool:
        request = self.request
        if request.mode == "replay":
            last = max((r.index for r in self.world.recorded), default=request.fork_index)
            return index >= last
        if request.mode == "rollout":
            return index + 1 >= request.fork_index + request.max_steps
        return True

    def _report_totals(self) -> None:
        t = self.totals
        t.progress = min(1.0, self.units_done / max(1, len(self.futures) * self.planned_steps()))
        # A rate means something only for a model that decodes (the retrieval baseline
        # "decodes" in microseconds), and only over a long enough window (`rates`).
        t.tokens_per_s = (
            decode_rate(t.tokens_out, t.decode_s, min_window_s=MIN_TOTAL_WINDOW_S)
            if self.is_neural
            else None
        )
        self.sink.totals(t)

    def _complete(self, f: _Future) -> None:
        f.alive = False
        # a rollout that stops early on a final answer counts its unused steps as done
        self.units_done += max(0, self.planned_steps() - f.steps_done)
        self.sink.sample_finished(f.sample, SUCCEEDED)

    def _fail(self, f: _Future, message: str) -> None:
        f.alive = False
        f.error = message
        # its remaining steps will never run: count them, so progress reaches 1 at the end
        self.units_done += max(0, self.planned_steps() - f.steps_done)
        self.sink.sample_finished(f.sample, FAILED, message)
