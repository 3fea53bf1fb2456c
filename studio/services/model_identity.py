"""Which world model said this: the one definition of the model behind a simulated future,
as every view, chart, judge result and export row names it. A job keeps what ran (backend,
model id, base URL, the endpoint's name then, sampling, world version, perturbations), so the
identity holds after the endpoint is renamed or deleted.

`key` groups futures that came from the same model with the same settings: two futures of
different keys are never pooled into one share (`studio.services.futures`). Colours for keys
are presentation: `studio.presenters.model_colours`."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
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

    @property
    def token(self) -> str:
        """`model_key` as a short stable token for URLs (`?model=`): the same model gives
        the same token on every page and across requests."""
        return hashlib.sha1(self.model_key.encode()).hexdigest()[:12]

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


# The fields `identity_of_job` reads: load jobs with `.only(*IDENTITY_FIELDS)` when only their
# identity is wanted (a job row also carries its live progress and error text).
IDENTITY_FIELDS = (
    "id",
    "backend",
    "world_name",
    "model",
    "params",
    "perturbations",
    "mode",
    "agent_name",
    "agent_model",
)


def identities_of_jobs(job_ids: Iterable[int | None]) -> dict[int, ModelIdentity]:
    """job id -> identity for many jobs in one query (ids that are None are skipped)."""
    from studio.models import SimulationJob

    ids = {pk for pk in job_ids if pk is not None}
    if not ids:
        return {}
    jobs = SimulationJob.objects.filter(pk__in=ids).only(*IDENTITY_FIELDS)
    return {job.pk: identity_of_job(job) for job in jobs}


def job_of_step(step: Any, branch_jobs: Mapping[int, int | None]) -> int | None:
    """The job whose model wrote a step's observation: the step says so itself (meta["job"],
    set by the simulation sink: an appended branch holds steps of many jobs), else its
    branch's job (`branch_jobs`: branch id -> job id). None: recorded or hand-made."""
    if getattr(step, "observation_source", "") == "recorded":
        return None
    meta = getattr(step, "meta", None) or {}
    job_id = meta.get("job") if isinstance(meta, dict) else None
    if isinstance(job_id, int) and not isinstance(job_id, bool):
        return job_id
    return branch_jobs.get(step.branch_id)


def models_of_trajectory(trajectory_id: int) -> list[ModelIdentity]:
    """The world models (settings apart: `model_key`) that ran futures of a trajectory, in
    the order they first ran, in one small query: what a page gives `colour_map` so that a
    model keeps its colour on the trajectory page, in every window of steps and on the tree."""
    from django.db.models import Min

    from studio.models import SimulationJob

    rows = (
        SimulationJob.objects.filter(trajectory_id=trajectory_id)
        .values("backend", "world_name", "model")
        .annotate(first=Min("id"))
        .order_by("first")
    )
    return [
        ModelIdentity(
            backend=r["backend"],
            name=r["world_name"] or "",
            model=(r["model"] or "") if r["backend"] != "retrieval" else "",
        )
        for r in rows
    ]


def world_model_dict(identity: ModelIdentity | None, *, recorded: bool = True) -> dict[str, Any]:
    """The `world_model` of an export row or step: `as_dict()`, or for a step no model wrote
    the same keys with the label "recorded" ("not known": a simulated step whose job is gone),
    so the column has one shape in every row (Arrow-backed loaders need that)."""
    if identity is not None:
        return identity.as_dict()
    empty = ModelIdentity(backend="", name="", model="").as_dict()
    return {**empty, "label": "recorded" if recorded else "not known", "backend": None}
