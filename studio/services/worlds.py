"""Fictional worlds of a project: save (every change is a new version), import and export
world files, and start a trajectory in a world. What a world is and how it is checked is
`inference.worlds`; this module stores it."""

from __future__ import annotations

from dataclasses import dataclass
from uuid import uuid4

from django.db import transaction
from django.db.models import Max

from inference import worlds as worlding
from studio.models import (
    Branch,
    BranchOrigin,
    Project,
    SimulationJob,
    Trajectory,
    World,
    WorldVersion,
)


@dataclass
class Saved:
    world: World
    version: WorldVersion
    created: bool  # a new version was written (False: nothing had changed)


def save_world(
    project: Project, spec: worlding.WorldSpec, *, world: World | None = None, user=None
) -> Saved:
    """Write `spec` as the next version of `world` (a new world when None). Saving what the
    latest version already holds writes nothing. Raises `inference.worlds.WorldError` when
    the spec holds NaN or an infinity (a spec built in code, not parsed: a stored version is
    JSON, which has neither). Names are checked where a world comes in (`import_world`, the
    editor, the `worlds` command), not here: code and fixtures may name worlds freely."""
    data = worlding.world_to_file(spec)
    worlding.check_finite(data)
    with transaction.atomic():
        if world is None:
            world = World.objects.create(
                project=project, name=spec.name, domain=spec.domain, created_by=user
            )
        else:
            world = World.objects.select_for_update().get(pk=world.pk)
            latest = world.latest
            if latest is not None and latest.data == data:
                return Saved(world, latest, created=False)
            World.objects.filter(pk=world.pk).update(name=spec.name, domain=spec.domain)
            world.refresh_from_db()
        number = (world.versions.aggregate(n=Max("number"))["n"] or 0) + 1
        version = WorldVersion.objects.create(
            world=world, number=number, data=data, created_by=user
        )
    return Saved(world, version, created=True)


def import_world(project: Project, data, user=None) -> Saved:
    """A world file's JSON into the project: a new world, or the next version of the world
    of that name. Raises `inference.worlds.WorldError` naming the field."""
    spec = worlding.parse_world(data, incoming=True)
    existing = World.objects.filter(project=project, name=spec.name).first()
    return save_world(project, spec, world=existing, user=user)


def export_text(version: WorldVersion) -> str:
    return worlding.dumps(version.spec())


def start_trajectory(
    version: WorldVersion, task_instruction: str, user=None, origin: str = BranchOrigin.SIMULATED
) -> Trajectory:
    """A new, empty trajectory in the world: its system prompt and tools are the world's (at
    this version), its first step is the agent's to take."""
    spec = version.spec()
    composed = worlding.compose(spec)
    world = version.world
    task_instruction = task_instruction.strip() or f"An episode in {spec.name}"
    with transaction.atomic():
        trajectory = Trajectory.objects.create(
            project=world.project,
            domain=spec.domain,
            title=f"{spec.name}: {_first_line(task_instruction, 80)}",
            task_instruction=task_instruction,
            system_prompt=composed.system_prompt,
            tools=[t["function"] for t in spec.tools],
            metadata={"world": {"id": world.pk, "name": world.name, "version": version.number}},
            source_format="world",
            source_key=f"world-{world.pk}-v{version.number}-{uuid4().hex[:12]}",
            step_count=0,
        )
        # nothing in it is recorded: an episode's root holds the world model's observations
        # (simulated); a start a person plays from is PLAYED (its steps go on played
        # branches of their own)
        Branch.objects.create(
            trajectory=trajectory,
            name="start",  # the page says "in the world …" next to it: no echo
            origin=origin,
            created_by=user,
        )
    return trajectory


def deletion_summary(world: World) -> dict:
    """What deleting `world` removes (its versions) and what it keeps (trajectories started
    in it, with their steps; jobs that ran in it, which keep its name and version), counted
    for the confirmation page."""
    started = Trajectory.objects.filter(
        project_id=world.project_id,
        source_format__in=["world", "episode"],
        metadata__world__id=world.pk,
    )
    return {
        "versions": world.versions.count(),
        "latest": world.latest,
        "trajectories": started.count(),
        "trajectory_rows": list(started.order_by("-created_at").only("id", "title")[:20]),
        "jobs": SimulationJob.objects.filter(world_version__world=world).count(),
    }


def _first_line(text: str, limit: int) -> str:
    """The text's first line as a title: cut at a word with an ellipsis when it is longer
    (a title cut mid-word reads as a typo). Only for titles derived from other text (a task
    instruction, kept whole on the trajectory); a title a person types is refused over its
    limit by its form, never cut."""
    line = " ".join(text.splitlines()[0].split()) if text.strip() else ""
    if len(line) <= limit:
        return line
    cut = line[: limit - 1]
    if " " in cut[limit // 2 :]:
        cut = cut[: cut.rindex(" ")]
    return cut.rstrip(" ,.;:") + "…"
