"""Which world model said this: the one definition of the model behind a simulated future,
as every view, chart, judge result and export row names it. A job keeps what ran (backend,
model id, base URL, the endpoint's name then, sampling, world version, perturbations), so the
identity holds after the endpoint is renamed or deleted.

`key` groups futures that came from the same model with the same settings: two futures of
different keys are never pooled into one share (`studio.services.futures`). Colours for keys
are presentation: `studio.presenters.model_colours`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from inference.simulation.limits import BACKENDS, MODES

BASELINE = "retrieval baseline"


@dataclass(frozen=True)
class ModelIdentity:
    backend: str  # retrieval | openai | hf
    name: str  # the endpoint's name when the job ran, or "" (none, or the baseline)
    model: str  # the served model name or path, "" for the baseline
    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    seed: int | None = None
    world: str = ""  # "Acme Air v3": the world version it ran in, or ""
    perturbations: tuple[str, ...] = ()  # labels of the rules it ran
    mode: str = ""  # next | replay | rollout
    agent: str = ""  # the agent model of a rollout ("name · model"), or ""

    @property
    def is_baseline(self) -> bool:
        return self.backend == "retrieval"

    @property
    def label(self) -> str:
        """The model in a few words: "qwen-local · Qwen/Qwen-AgentWorld-35B-A3B", "retrieval
        baseline", or the model id alone when no endpoint was named."""
        if self.is_baseline:
            return BASELINE
        parts = [p for p in (self.name, self.model) if p]
        if not parts:
            return BACKENDS.get(self.backend, self.backend)
        return " · ".join(dict.fromkeys(parts))

    @property
    def short(self) -> str:
        """The shortest name that tells models apart on a chart: the endpoint's name, else
        the model id, else the baseline."""
        if self.is_baseline:
            return BASELINE
        return self.name or self.model or BACKENDS.get(self.backend, self.backend)

    @property
    def sampling(self) -> str:
        """ "T 0.7 · top-p 0.95 · max 512 tokens · seed 7" (what was set)."""
        if self.is_baseline:
            return ""
        parts = []
        if self.temperature is not None:
            parts.append(f"T {self.temperature:g}")
        if self.top_p is not None:
            parts.append(f"top-p {self.top_p:g}")
        if self.max_tokens is not None:
            parts.append(f"max {self.max_tokens} tokens")
        if self.seed is not None:
            parts.append(f"seed {self.seed}")
        return " · ".join(parts)

    @property
    def setting(self) -> str:
        """What else the future was run under: its world and its perturbations."""
        parts = []
        if self.world:
            parts.append(f"world {self.world}")
        if self.perturbations:
            parts.append("perturbed: " + ", ".join(self.perturbations))
        return " · ".join(parts)

    @property
    def full(self) -> str:
        """Everything, one line: for a title attribute, an export row or a judge result."""
        parts = [self.label, self.sampling, self.setting]
        if self.mode:
            parts.append(MODES.get(self.mode, self.mode).lower())
        if self.agent:
            parts.append(f"agent {self.agent}")
        return " · ".join(p for p in parts if p)

    @property
    def key(self) -> str:
        """Futures of one key come from one model run the same way (seed apart: the seeds
        of one job's futures differ by design)."""
        return "\x1f".join(
            [
                self.backend,
                self.name,
                self.model,
                _num(self.temperature),
                _num(self.top_p),
                _num(self.max_tokens),
                self.world,
                ",".join(self.perturbations),
                self.mode,
                self.agent,
            ]
        )

    @property
    def model_key(self) -> str:
        """The model alone (settings apart): what a filter by model or a colour goes by."""
        return "\x1f".join([self.backend, self.name, self.model])

    def as_dict(self) -> dict[str, Any]:
        """For export rows and the JSON API."""
        return {
            "label": self.label,
            "backend": self.backend,
            "endpoint": self.name or None,
            "model": self.model or None,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "max_tokens": self.max_tokens,
            "seed": self.seed,
            "world": self.world or None,
            "perturbations": list(self.perturbations),
            "mode": self.mode or None,
            "agent": self.agent or None,
        }


def _num(value: float | int | None) -> str:
    return "" if value is None else f"{value:g}"


def _float(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _int(value: Any) -> int | None:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else None


def identity_of_job(job: Any) -> ModelIdentity:
    """The identity of a `SimulationJob` (any object with its fields). No query: the names
    are kept on the row."""
    params = job.params or {}
    world = params.get("world")
    world_text = ""
    if isinstance(world, dict) and world.get("name"):
        world_text = f"{world['name']} v{world.get('version', '?')}"
    labels = [_rule_label(rule) for rule in job.perturbations or () if isinstance(rule, dict)]
    sweep = params.get("sweep") or ()
    if sweep:
        labels.append(f"sweep of {len(sweep)}")
    agent = ""
    if job.mode == "rollout" and (job.agent_model or job.agent_name):
        agent = " · ".join(dict.fromkeys(p for p in (job.agent_name, job.agent_model) if p))
    return ModelIdentity(
        backend=job.backend,
        name=job.world_name or "",
        model=job.model or "" if job.backend != "retrieval" else "",
        temperature=_float(params.get("temperature")),
        top_p=_float(params.get("top_p")),
        max_tokens=_int(params.get("max_tokens")),
        seed=_int(params.get("seed")),
        world=world_text,
        perturbations=tuple(labels),
        mode=job.mode or "",
        agent=agent,
    )


def _rule_label(rule: dict[str, Any]) -> str:
    from inference import perturbations as perturbing

    try:
        return perturbing.from_dict(rule).label
    except (perturbing.PerturbationError, AttributeError, TypeError):
        return str(rule.get("name") or rule.get("kind") or "perturbation")


def identity_of_branch(branch: Any) -> ModelIdentity | None:
    """The model of a future (None: a recorded branch, or one with no job: hand-made). Give
    branches with `select_related("job")` to avoid a query each."""
    job = getattr(branch, "job", None)
    return identity_of_job(job) if job is not None else None
