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
    branch's job (`branch_jobs`: branch id -> job id). None: recorded, hand-made, or written
    with no job (a served step: `identity_of_step_meta` names its model)."""
    if getattr(step, "observation_source", "") == "recorded":
        return None
    meta = getattr(step, "meta", None) or {}
    job_id = meta.get("job") if isinstance(meta, dict) else None
    if isinstance(job_id, int) and not isinstance(job_id, bool):
        return job_id
    if is_served_meta(meta):
        return None  # the web process wrote it: no job did, whatever its branch's
    return branch_jobs.get(step.branch_id)


# Step.meta["served"]: a step of an episode whose served world model the web process asked
# itself (`studio.serving.direct`): no job row, so the meta records the model
SERVED = "served"
SERVED_MODE = "next"  # what such a step is: the job path runs an episode's step as "next"


def is_served_meta(meta: Any) -> bool:
    """Whether a step's meta is a served step's (`SERVED`; rows written before the mark are
    told by the model fields the direct path wrote, with no job)."""
    if not isinstance(meta, dict) or "job" in meta:
        return False
    if meta.get(SERVED) is True:
        return True
    return isinstance(meta.get("backend"), str) and "endpoint" in meta and "model" in meta


def identity_of_step_meta(meta: Any) -> ModelIdentity | None:
    """The model of a served step (`is_served_meta`), as its meta records it: backend,
    endpoint, model, sampling, seed and world, read as `identity_of_job` reads a job's, so
    the two paths' steps of one model run the same way share a `key`. None for any other
    step (a job's: `job_of_step`)."""
    if not is_served_meta(meta):
        return None
    backend = str(meta.get("backend") or "")
    sampling = meta.get("sampling") if isinstance(meta.get("sampling"), dict) else {}
    world = meta.get("world")
    world_text = ""
    if isinstance(world, dict) and world.get("name"):
        world_text = f"{world['name']} v{world.get('version', '?')}"
    return ModelIdentity(
        backend=backend,
        name=str(meta.get("endpoint") or ""),
        model=str(meta.get("model") or "") if backend != "retrieval" else "",
        temperature=_float(sampling.get("temperature")),
        top_p=_float(sampling.get("top_p")),
        max_tokens=_int(sampling.get("max_tokens")),
        seed=_int(meta.get("seed")),
        world=world_text,
        mode=SERVED_MODE,
    )


def identity_of_step(
    step: Any, branch_jobs: Mapping[int, int | None], identities: Mapping[int, ModelIdentity]
) -> ModelIdentity | None:
    """The model that wrote a step's observation: its job's (`job_of_step`, looked up in
    `identities`: `identities_of_jobs`), else its meta's (a served step). None: recorded,
    or a job that is gone."""
    job_id = job_of_step(step, branch_jobs)
    if job_id is not None:
        return identities.get(job_id)
    if getattr(step, "observation_source", "") == "recorded":
        return None
    return identity_of_step_meta(getattr(step, "meta", None))


def models_of_trajectory(trajectory_id: int, *, episode: bool | None = None) -> list[ModelIdentity]:
    """The world models (settings apart: `model_key`) that ran futures of a trajectory, in
    the order they first ran (its jobs' models, then those of its served steps), in one or
    two small queries: what a page gives `colour_map` so that a model keeps its colour on
    the trajectory page, in every window of steps and on the tree. `episode`: whether it is
    an episode (`source_format == "episode"`), whose served steps have no job; False skips
    reading its steps, None reads them only where the trajectory is one."""
    from django.db.models import Min

    from studio.models import SimulationJob

    rows = (
        SimulationJob.objects.filter(trajectory_id=trajectory_id)
        .values("backend", "world_name", "model")
        .annotate(first=Min("id"))
        .order_by("first")
    )
    found = [
        ModelIdentity(
            backend=r["backend"],
            name=r["world_name"] or "",
            model=(r["model"] or "") if r["backend"] != "retrieval" else "",
        )
        for r in rows
    ]
    if episode is not False:
        keys = {m.model_key for m in found}
        for served in served_models_of_trajectory(trajectory_id, only_episode=episode is None):
            if served.model_key not in keys:
                keys.add(served.model_key)
                found.append(served)
    return found


def _served_steps_filter() -> Any:
    from django.db.models import Q

    return Q(**{f"meta__{SERVED}": True}) | (
        Q(meta__has_key="backend") & Q(meta__has_key="endpoint") & ~Q(meta__has_key="job")
    )


def served_models_of_trajectory(
    trajectory_id: int, *, only_episode: bool = True
) -> list[ModelIdentity]:
    """The models (settings apart) of a trajectory's served steps (`is_served_meta`), in the
    order they first wrote one: one query, grouped in the database. `only_episode`: read
    the steps only where the trajectory is an episode (only episodes have served steps; the
    join keeps a long imported trajectory's steps unread)."""
    from django.db.models import Min

    from studio.models import Step

    steps = Step.objects.filter(branch__trajectory_id=trajectory_id).exclude(
        observation_source="recorded"
    )
    if only_episode:
        steps = steps.filter(branch__trajectory__source_format="episode")
    rows = (
        steps.filter(_served_steps_filter())
        .values("meta__backend", "meta__endpoint", "meta__model")
        .annotate(first=Min("id"))
        .order_by("first")
    )
    found: dict[str, ModelIdentity] = {}
    for r in rows:
        identity = _served_model_of_row(r)
        found.setdefault(identity.model_key, identity)
    return list(found.values())


def _served_model_of_row(row: Mapping[str, Any]) -> ModelIdentity:
    backend = str(row["meta__backend"] or "")
    return ModelIdentity(
        backend=backend,
        name=str(row["meta__endpoint"] or ""),
        model=str(row["meta__model"] or "") if backend != "retrieval" else "",
    )


def models_of_episode_branches(
    branch_ids: Iterable[int],
) -> dict[int, list[ModelIdentity | None]]:
    """branch id -> the models (settings apart) that wrote the steps of an episode's branch
    of no job, where its steps are served ones (`is_served_meta`); a branch that also holds
    steps of jobs gets None among them (its steps name models of both paths: say "mixed",
    never one). Branches of other trajectories are left out unread. Two queries."""
    from django.db.models import Min

    from studio.models import Step

    ids = set(branch_ids)
    if not ids:
        return {}
    steps = Step.objects.filter(
        branch_id__in=ids, branch__trajectory__source_format="episode"
    ).exclude(observation_source="recorded")
    rows = (
        steps.filter(_served_steps_filter())
        .values("branch_id", "meta__backend", "meta__endpoint", "meta__model")
        .annotate(first=Min("id"))
        .order_by("first")
    )
    found: dict[int, dict[str, ModelIdentity]] = {}
    for r in rows:
        identity = _served_model_of_row(r)
        found.setdefault(r["branch_id"], {}).setdefault(identity.model_key, identity)
    with_jobs = set(
        steps.filter(branch_id__in=found, meta__has_key="job").values_list("branch_id", flat=True)
    )
    return {
        pk: [*models.values(), *([None] if pk in with_jobs else [])] for pk, models in found.items()
    }


def world_model_dict(identity: ModelIdentity | None, *, recorded: bool = True) -> dict[str, Any]:
    """The `world_model` of an export row or step: `as_dict()`, or for a step no model wrote
    the same keys with the label "recorded" ("not known": a simulated step whose job is gone),
    so the column has one shape in every row (Arrow-backed loaders need that)."""
    if identity is not None:
        return identity.as_dict()
    empty = ModelIdentity(backend="", name="", model="").as_dict()
    return {**empty, "label": "recorded" if recorded else "not known", "backend": None}
