"""The demo gallery's scenarios (`studio.demo_data.scenarios`) in a project: where each
stands (its trajectory, its latest run) and running one: the same action simulated plain and
perturbed, as two one-future jobs on the project's default world model."""

from __future__ import annotations

from dataclasses import dataclass
from uuid import uuid4

from django.db import transaction

from inference.simulation.request import InvalidRequest
from studio.demo_data.scenarios import Scenario
from studio.models import Branch, EndpointRole, Project, SimulationJob, Step, Trajectory
from studio.services.endpoints import default_endpoint, sampling_defaults, world_input
from studio.services.simulation import build_request, start_simulation

PLAIN, PERTURBED = "plain", "perturbed"


@dataclass
class Variant:
    name: str  # plain | perturbed
    job: SimulationJob | None = None
    branch: Branch | None = None
    step: Step | None = None
    sample: str = ""  # shown instead of a run: a prompted perturbation without a model


@dataclass
class ScenarioState:
    scenario: Scenario
    trajectory: Trajectory | None
    live: bool  # both variants can run on the project's default world model
    model_name: str
    plain: Variant
    perturbed: Variant

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


def _latest(project: Project, s: Scenario, variant: str, run: str | None = None) -> Variant:
    jobs = SimulationJob.objects.filter(
        trajectory__project=project, params__scenario__key=s.key, params__scenario__variant=variant
    )
    if run is not None:
        jobs = jobs.filter(params__scenario__run=run)
    job = jobs.order_by("-created_at", "-pk").first()
    if job is None:
        return Variant(variant)
    branch = job.branches.first()
    step = branch.steps.filter(index=job.fork_index).first() if branch is not None else None
    return Variant(variant, job, branch, step)


def scenario_state(project: Project, s: Scenario) -> ScenarioState:
    trajectory = Trajectory.objects.filter(
        project=project, domain=s.domain, title=s.trajectory_title
    ).first()
    endpoint, neural = _world_model(project)
    plain = _latest(project, s, PLAIN)
    run = ((plain.job.params or {}).get("scenario") or {}).get("run", "") if plain.job else None
    perturbed = _latest(project, s, PERTURBED, run) if plain.job else Variant(PERTURBED)
    if _needs_model(s) and not neural and perturbed.job is None:
        perturbed.sample = s.sample
    return ScenarioState(
        scenario=s,
        trajectory=trajectory,
        live=neural or not _needs_model(s),
        model_name=endpoint.name if endpoint is not None else "",
        plain=plain,
        perturbed=perturbed,
    )


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
        raise ScenarioError("this project has no world model: add one on the Models page")
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
