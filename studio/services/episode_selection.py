"""A chosen set of episodes (points selected on a world's chart, a campaign's failed or
successful episodes) made into an annotation queue of their steps or a dataset version of
their agent or world-model turns.

Only episode trajectories (source_format "episode") of the project are taken; any other id is
refused with an error naming it, so nothing is made of a partly wrong selection. An episode's
steps are those of its root branch (the episode as played; futures simulated from its steps
later are not the episode)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from django.db import transaction

from studio.models import (
    AnnotationQueue,
    Branch,
    DatasetVersion,
    ObservationSource,
    Project,
    Step,
    Trajectory,
)
from studio.services import datasets as datasets_service
from studio.services import queues as queues_service

EPISODE = "episode"  # Trajectory.source_format of an episode
MAX_EPISODES = 2000  # one selection (a campaign holds at most STUDIO_CAMPAIGN_MAX_EPISODES)
NAME_CHARS = 200  # AnnotationQueue.name, Dataset.name
TURNS = {"agent": "agent turns", "wm": "world-model turns"}
# the observations a world model wrote (a submit step's has none: no world-model turn)
_WORLD_MODEL_SOURCES = (ObservationSource.SIMULATED, ObservationSource.PERTURBED)


class SelectionError(ValueError):
    """A selection that cannot be made into a queue or a dataset (the message says why,
    naming the episode or the field)."""


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _whole_ids(ids: Iterable[Any]) -> list[int]:
    found: list[int] = []
    seen: set[int] = set()
    for raw in ids:
        value = raw.strip() if isinstance(raw, str) else raw
        if isinstance(value, bool):
            raise SelectionError(f"episode id {raw!r} is not a whole number")
        try:
            pk = int(value)
        except (TypeError, ValueError):
            raise SelectionError(f"episode id {raw!r} is not a whole number") from None
        if isinstance(value, float) and value != pk:
            raise SelectionError(f"episode id {raw!r} is not a whole number")
        if pk not in seen:
            seen.add(pk)
            found.append(pk)
    return found


def episode_ids_in(project: Project, ids: Iterable[Any]) -> list[int]:
    """The ids as whole numbers, in the order given (repeats dropped), when each is an
    episode trajectory of `project`; SelectionError naming the first that is not (another
    project's trajectory reads as not this project's, whatever it is)."""
    wanted = _whole_ids(ids)
    if not wanted:
        raise SelectionError("no episode selected")
    if len(wanted) > MAX_EPISODES:
        raise SelectionError(
            f"{len(wanted)} episodes selected: at most {MAX_EPISODES} make one queue or dataset"
        )
    rows = dict(
        Trajectory.objects.filter(project=project, pk__in=wanted).values_list("pk", "source_format")
    )
    for pk in wanted:
        if pk not in rows:
            raise SelectionError(f"trajectory {pk} is not one of this project's")
        if rows[pk] != EPISODE:
            raise SelectionError(f"trajectory {pk} is not an episode (it is {rows[pk]!r})")
    return wanted


def _root_branches(ids: Sequence[int]) -> list[int]:
    """The root branch of each episode, in the episodes' order."""
    roots = dict(
        Branch.objects.filter(trajectory_id__in=ids, parent__isnull=True).values_list(
            "trajectory_id", "pk"
        )
    )
    return [roots[pk] for pk in ids if pk in roots]


def _name(value: Any, what: str) -> str:
    name = value.strip() if isinstance(value, str) else ""
    if not name:
        raise SelectionError(f"give the {what} a name")
    if len(name) > NAME_CHARS:
        raise SelectionError(f"the {what}'s name is longer than {NAME_CHARS} characters")
    return name


def _from(origin: str) -> str:
    return f" {origin.strip()}" if origin and origin.strip() else ""


def queue_from_episodes(
    project: Project,
    user,
    trajectory_ids: Iterable[Any],
    name: str,
    *,
    blind: bool = False,
    origin: str = "",
) -> AnnotationQueue:
    """An annotation queue (one annotator per item) of the steps of those episodes, episode
    by episode (oldest first), each episode's steps in order (a submitted answer's step
    too: the reviewer sees the answer). `origin`: where the episodes were chosen, in words for the queue's description (e.g.
    "from a selection on the page of world 'Northwind'")."""
    name = _name(name, "queue")
    ids = episode_ids_in(project, trajectory_ids)
    branches = _root_branches(ids)
    data = queues_service.QueueData(
        name=name, blind=blind, branches=tuple(branches), limit=queues_service.MAX_ITEMS
    )
    count = queues_service.steps_for(project, data).count()
    if count == 0:
        raise SelectionError(
            f"the {_plural(len(ids), 'selected episode')} have no step yet: nothing to annotate"
        )
    if count > queues_service.MAX_ITEMS:
        raise SelectionError(
            f"the {_plural(len(ids), 'selected episode')} hold {count} steps: a queue holds at "
            f"most {queues_service.MAX_ITEMS}; select fewer episodes"
        )
    with transaction.atomic():
        try:
            queue = queues_service.create_queue(project, user, data)
        except ValueError as exc:
            raise SelectionError(str(exc)) from None
        description = (
            f"the steps of {_plural(len(ids), 'episode')}{_from(origin)} ({_plural(count, 'step')})"
        )
        AnnotationQueue.objects.filter(pk=queue.pk).update(description=description)
        queue.description = description
    return queue


def _turn_steps(ids: Sequence[int], turns: str) -> list[int]:
    """The steps of the episodes' root branches that hold a turn of that kind, episode by
    episode in the order given: agent turns are every step with an action, world-model
    turns those whose observation a world model wrote."""
    branches = _root_branches(ids)
    rows = Step.objects.filter(branch_id__in=branches)
    if turns == "wm":
        rows = rows.filter(observation_source__in=_WORLD_MODEL_SOURCES).exclude(observation="")
    else:
        rows = rows.exclude(action="")
    by_branch: dict[int, list[int]] = {}
    for pk, branch_id in rows.order_by("branch_id", "index").values_list("pk", "branch_id"):
        by_branch.setdefault(branch_id, []).append(pk)
    return [pk for branch in branches for pk in by_branch.get(branch, [])]


def dataset_from_episodes(
    project: Project,
    user,
    trajectory_ids: Iterable[Any],
    dataset_name: str,
    *,
    turns: str,
    origin: str = "",
    confirm_rejected: bool = False,
) -> DatasetVersion:
    """A new version of the dataset `dataset_name` (made when the project has none of that
    name) holding the latest version's steps and those episodes' steps of `turns`: "agent"
    (agent turns: every step with an action) or "wm" (world-model turns: every step whose
    observation a world model wrote). The version's source says which turns, of how many
    episodes, and `origin` (where they were chosen). A step someone rejected in review goes
    in only with `confirm_rejected` (else SelectionError saying where it was rejected)."""
    if turns not in TURNS:
        raise SelectionError(f"turns must be one of: {', '.join(TURNS)} (got {turns!r})")
    dataset_name = _name(dataset_name, "dataset")
    ids = episode_ids_in(project, trajectory_ids)
    steps = _turn_steps(ids, turns)
    if not steps:
        raise SelectionError(
            f"the {_plural(len(ids), 'selected episode')} have no {TURNS[turns][:-1]}"
        )
    data = datasets_service.SelectionData(
        name=dataset_name, steps=tuple(steps), confirm_rejected=confirm_rejected
    )
    with transaction.atomic():
        try:
            version = datasets_service.create_version(project, user, data)
        except datasets_service.RejectedSteps as exc:
            raise SelectionError(
                f"{_plural(len(exc.reasons), 'step')} of the selected episodes were rejected in "
                f"review ({'; '.join(exc.reasons)}): confirm to add them anyway"
            ) from None
        except datasets_service.DatasetError as exc:
            raise SelectionError(str(exc)) from None
        source = (
            f"{TURNS[turns]} of {_plural(len(ids), 'episode')}{_from(origin)}: {version.source}"
        )[:500]
        DatasetVersion.objects.filter(pk=version.pk).update(source=source)
        version.source = source
    return version
