"""The demo gallery's scenarios (`studio.demo_data.scenarios`) in a project: where each
stands (its trajectory, its latest run) and running one: the same action simulated plain and
perturbed, as two one-future jobs on the project's default world model."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from uuid import uuid4

from django.db import transaction
from django.db.models import Q

from inference.simulation.request import InvalidRequest
from studio.demo_data.scenarios import Scenario
from studio.models import (
    Branch,
    EndpointRole,
    ModelEndpoint,
    Project,
    SimulationJob,
    Step,
    Trajectory,
)
from studio.services.endpoints import default_endpoint, sampling_defaults, world_input
from studio.services.model_identity import IDENTITY_FIELDS, ModelIdentity, identity_of_job
from studio.services.simulation import build_request, start_simulation

PLAIN, PERTURBED = "plain", "perturbed"


@dataclass
class Variant:
    name: str  # plain | perturbed
    job: SimulationJob | None = None
    branch: Branch | None = None
    step: Step | None = None
    sample: str = ""  # shown instead of a run: a prompted perturbation without a model

    @property
    def identity(self) -> ModelIdentity | None:
        """The world model that ran it (kept on the job: true after the endpoint changes)."""
        return identity_of_job(self.job) if self.job is not None else None


@dataclass
class ScenarioState:
    scenario: Scenario
    trajectory: Trajectory | None
    live: bool  # both variants can run on the project's default world model
    model_name: str
    plain: Variant
    perturbed: Variant
    # The world model a run would use now: the project's default (None: none configured).
    model: ModelIdentity | None = None

    @property
    def running(self) -> bool:
        return any(
            v.job is not None and not v.job.is_finished for v in (self.plain, self.perturbed)
        )

    @property
    def variants(self) -> list[Variant]:
        return [self.plain, self.perturbed]

    @property
    def compare_ids(self) -> list[int]:
        return [v.branch.pk for v in (self.plain, self.perturbed) if v.branch is not None]


def _needs_model(s: Scenario) -> bool:
    return s.perturbation.get("mode") == "prompted"


def _world_model(project: Project):
    endpoint = default_endpoint(project, EndpointRole.WORLD)
    neural = endpoint is not None and endpoint.kind != "retrieval"
    return endpoint, neural


def has_neural_world_model(project: Project) -> bool:
    return _world_model(project)[1]


def endpoint_identity(endpoint: ModelEndpoint | None) -> ModelIdentity | None:
    """The model an endpoint would run, named as a job of it will be."""
    if endpoint is None:
        return None
    retrieval = endpoint.kind == "retrieval"
    return ModelIdentity(
        backend=endpoint.kind, name=endpoint.name, model="" if retrieval else endpoint.model
    )


# A gallery job's columns the page reads: its live text and prompt copy stay in the database.
_JOB_FIELDS = (*IDENTITY_FIELDS, "status", "error", "created_at", "fork_index", "trajectory_id")


def gallery_states(project: Project, scenarios: Sequence[Scenario]) -> list[ScenarioState]:
    """Where each scenario stands, in a handful of queries whatever the number of scenarios
    and of runs: the trajectories, the default endpoint, the gallery's jobs of those
    trajectories (found by their trajectory, an indexed column, before their labels), their
    branches and the step each shows."""
    titles = {(s.domain, s.trajectory_title) for s in scenarios}
    trajectories: dict[tuple[str, str], Trajectory] = {}
    newest_first = (
        Trajectory.objects.filter(project=project, title__in=[title for _, title in titles])
        .only("id", "project_id", "domain", "title", "created_at")
        .order_by("-created_at", "-id")
    )
    for t in newest_first:
        if (t.domain, t.title) in titles:
            trajectories.setdefault((t.domain, t.title), t)  # the newest of a title
    endpoint, neural = _world_model(project)
    keys = {s.key for s in scenarios}
    latest: dict[tuple[str, str, str | None], SimulationJob] = {}
    jobs = (
        SimulationJob.objects.filter(trajectory__in=list(trajectories.values()))
        .filter(params__has_key="scenario")
        .only(*_JOB_FIELDS)
        .order_by("-created_at", "-pk")
    )
    for job in jobs:
        label = (job.params or {}).get("scenario") or {}
        if not isinstance(label, dict) or label.get("key") not in keys:
            continue
        key, variant = str(label.get("key")), str(label.get("variant"))
        latest.setdefault((key, variant, None), job)  # the newest of each variant
        # the newest of each variant and run (the runs shown side by side are of one click)
        latest.setdefault((key, variant, str(label.get("run", ""))), job)
    variants: dict[int, Variant] = {}
    states = []
    for s in scenarios:
        plain = _variant(latest, s.key, PLAIN, None, variants)
        run = ((plain.job.params or {}).get("scenario") or {}).get("run", "") if plain.job else None
        perturbed = (
            _variant(latest, s.key, PERTURBED, run, variants) if plain.job else Variant(PERTURBED)
        )
        if _needs_model(s) and not neural and perturbed.job is None:
            perturbed.sample = s.sample
        states.append(
            ScenarioState(
                scenario=s,
                trajectory=trajectories.get((s.domain, s.trajectory_title)),
                live=neural or not _needs_model(s),
                model_name=endpoint.name if endpoint is not None else "",
                plain=plain,
                perturbed=perturbed,
                model=endpoint_identity(endpoint),
            )
        )
    _fill_branches_and_steps(variants)
    return states


def _variant(latest, key: str, variant: str, run: str | None, made: dict[int, Variant]) -> Variant:
    job = latest.get((key, variant, run))
    if job is None:
        return Variant(variant)
    made[job.pk] = made.get(job.pk) or Variant(variant, job)
    return made[job.pk]


def _fill_branches_and_steps(variants: dict[int, Variant]) -> None:
    """Each job's first branch and its step at the fork: two queries for all the cards."""
    if not variants:
        return
    for branch in Branch.objects.filter(job_id__in=list(variants)).order_by("id"):
        v = variants[branch.job_id]  # type: ignore[index]
        if v.branch is None:
            v.branch = branch
    wanted = {v.branch.pk: v for v in variants.values() if v.branch is not None}
    if not wanted:
        return
    q = Q()
    for v in wanted.values():
        assert v.job is not None and v.branch is not None
        q |= Q(branch_id=v.branch.pk, index=v.job.fork_index)
    for step in Step.objects.filter(q):
        wanted[step.branch_id].step = step


def scenario_state(project: Project, s: Scenario) -> ScenarioState:
    return gallery_states(project, [s])[0]


class ScenarioError(ValueError):
    pass


def run_scenario(project: Project, s: Scenario, user=None) -> list[SimulationJob]:
    """Start the scenario's runs; the perturbed one only where it can run live."""
    state = scenario_state(project, s)
    if state.trajectory is None:
        raise ScenarioError(
            f"this project has no trajectory {s.trajectory_title!r} (python manage.py "
            "load_demo adds the demo trajectories)"
        )
    endpoint, neural = _world_model(project)
    if endpoint is None:
        raise ScenarioError(
            "this project has no world model: an admin of the project adds one on the Models page"
        )
    root = state.trajectory.root_branch
    base = {"fork_index": s.step, "mode": "next", "n": 1, **sampling_defaults(endpoint)}
    base.update(world_input(endpoint))
    runs = [(PLAIN, base)]
    if neural or not _needs_model(s):
        rule = {**s.perturbation, "first_step": s.step, "last_step": s.step}
        runs.append((PERTURBED, {**base, "perturbations": [rule]}))
    try:  # both checked before any job is made
        requests = [(variant, build_request(root, data)) for variant, data in runs]
    except InvalidRequest as exc:
        raise ScenarioError(exc.summary()) from None
    run = uuid4().hex[:12]  # the runs shown side by side are of one click
    try:
        with transaction.atomic():  # both or neither
            return [
                start_simulation(
                    user=user,
                    branch=root,
                    request=request,
                    world_endpoint=endpoint,
                    labels={"scenario": {"key": s.key, "variant": variant, "run": run}},
                )
                for variant, request in requests
            ]
    except InvalidRequest as exc:  # past a limit of the installation (jobs at once)
        raise ScenarioError(exc.summary()) from None
