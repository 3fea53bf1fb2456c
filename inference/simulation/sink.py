"""What the runner writes, and the small interface it writes through.

The studio's sink stores steps as rows and live progress on the job row; `MemorySink` keeps
everything in lists (tests, scripts). Futures are named by their sample index 0..n-1."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

# Where a simulated step's action came from (the studio's Provenance choices use the same
# values): the recorded action replayed, an action the user edited, one an agent proposed,
# one a person typed as the agent (the studio's playground).
REPLAYED = "replayed"
EDITED = "edited"
AGENT = "agent"
TYPED = "typed"
# Where its observation came from (the studio's ObservationSource): the world model, the
# world model under a perturbation (reserved for controllable simulation), or none at all
# (an agent's final answer gets no observation).
SIMULATED_OBSERVATION = "simulated"
PERTURBED_OBSERVATION = "perturbed"
NO_OBSERVATION = "none"


@dataclass
class SimulatedStep:
    index: int
    action: str
    provenance: str  # replayed | edited | agent | typed
    observation: str = ""
    observation_source: str = SIMULATED_OBSERVATION
    state: str = ""
    thinking: str = ""
    raw_output: str = ""
    raw_prompt: str = ""
    parse_status: str = ""
    meta: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, Any] = field(default_factory=dict)


@dataclass
class LiveProgress:
    """One future while it runs: what the page shows as it streams."""

    phase: str  # prefill | decoding | agent | step done
    step: int = 0  # steps this future has finished
    tokens_out: int = 0
    # None: decoding, too little yet to measure (`rates.decode_rate`); 0: no model decodes
    tokens_per_s: float | None = 0.0
    text: str = ""  # the tail of the text so far (limits.LIVE_TEXT_CHARS)

    def as_dict(self) -> dict[str, Any]:
        return {
            "phase": self.phase,
            "step": self.step,
            "tokens_out": self.tokens_out,
            "tokens_per_s": self.tokens_per_s,
            "text": self.text,
        }


@dataclass
class Totals:
    """Figures of the whole job, summed over futures and steps."""

    progress: float = 0.0  # 0..1 of the planned steps
    prefill_s: float = 0.0
    decode_s: float = 0.0
    tokens_in: int = 0
    tokens_out: int = 0
    tokens_per_s: float | None = None  # None for a non-neural backend

    def as_dict(self) -> dict[str, Any]:
        return {
            "progress": round(self.progress, 4),
            "prefill_s": round(self.prefill_s, 4),
            "decode_s": round(self.decode_s, 4),
            "tokens_in": self.tokens_in,
            "tokens_out": self.tokens_out,
            "tokens_per_s": self.tokens_per_s,
        }


# Final statuses of a run and of each future.
SUCCEEDED = "succeeded"
FAILED = "failed"
CANCELLED = "cancelled"


@dataclass
class RunOutcome:
    status: str  # succeeded | failed | cancelled
    error: str = ""  # why it failed, or a note ("2 of 8 futures failed: ...")
    totals: Totals = field(default_factory=Totals)


class SimulationSink(Protocol):
    def phase(self, phase: str) -> None:
        """The job's phase: prefill, decoding, agent, saving."""

    def live(self, sample: int, progress: LiveProgress) -> None:
        """Where one future stands (called often: keep only the latest)."""

    def step(self, sample: int, step: SimulatedStep) -> None:
        """A finished step of one future: store it before returning."""

    def sample_finished(self, sample: int, status: str, error: str = "") -> None:
        """A future is done (succeeded) or failed; it gets no more steps."""

    def totals(self, totals: Totals) -> None:
        """The job's figures after each step."""

    def stop_requested(self) -> bool:
        """True once the run should stop (the user cancelled): asked at every event."""
        ...


@dataclass
class MemorySink:
    """Keeps what the runner wrote; `cancel_after` events, then asks it to stop."""

    steps: dict[int, list[SimulatedStep]] = field(default_factory=dict)
    finished: dict[int, tuple[str, str]] = field(default_factory=dict)
    phases: list[str] = field(default_factory=list)
    latest: dict[int, LiveProgress] = field(default_factory=dict)
    figures: list[Totals] = field(default_factory=list)
    live_events: int = 0
    cancel_after: int | None = None

    def phase(self, phase: str) -> None:
        if not self.phases or self.phases[-1] != phase:
            self.phases.append(phase)

    def live(self, sample: int, progress: LiveProgress) -> None:
        self.live_events += 1
        self.latest[sample] = progress

    def step(self, sample: int, step: SimulatedStep) -> None:
        self.steps.setdefault(sample, []).append(step)

    def sample_finished(self, sample: int, status: str, error: str = "") -> None:
        self.finished[sample] = (status, error)

    def totals(self, totals: Totals) -> None:
        self.figures.append(totals)

    def stop_requested(self) -> bool:
        return self.cancel_after is not None and self.live_events >= self.cancel_after
