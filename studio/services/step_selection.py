"""Chosen steps (a search's hits, a behaviour search's matches) made into a tag of their
trajectories, an annotation queue of the steps or a new dataset version holding them.

Every id must be a step of the project: one that is not is refused with an error naming
it, so nothing is made of a partly wrong selection. `what` says where the steps were
chosen, in words (e.g. 'the 12 hits of the search "rm -rf"'); it becomes the queue's
description or the dataset version's source."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.db import transaction

from inference import worlds as worlding
from studio.models import AnnotationQueue, DatasetVersion, Project, Step, Tag, Trajectory
from studio.services import datasets as datasets_service
from studio.services import queues as queues_service

MAX_STEPS = queues_service.MAX_ITEMS  # one selection (a queue holds at most this many)
NAME_CHARS = 200  # AnnotationQueue.name, Dataset.name
TAG_CHARS = 100  # Tag.name


class SelectionError(ValueError):
    """Steps that cannot be made into a tag, queue or dataset (the message says why)."""


def plural(n: int, word: str, words: str | None = None) -> str:
    return f"{n:,} {word if n == 1 else (words or word + 's')}"


def step_ids_in(project: Project, ids: Iterable[Any]) -> list[int]:
    """The ids as whole numbers, in the order given (repeats dropped), when each is a step
    of `project`; SelectionError naming the first that is not."""
    wanted: list[int] = []
    seen: set[int] = set()
    for raw in ids:
        value = raw.strip() if isinstance(raw, str) else raw
        try:
            if isinstance(value, bool) or (isinstance(value, float) and value != int(value)):
                raise ValueError
            pk = int(value)
        except (TypeError, ValueError):
            raise SelectionError(f"step id {raw!r} is not a whole number") from None
        if pk not in seen:
            seen.add(pk)
            wanted.append(pk)
    if not wanted:
        raise SelectionError("no step chosen")
    if len(wanted) > MAX_STEPS:
        raise SelectionError(
            f"{plural(len(wanted), 'step')} chosen: at most {MAX_STEPS:,} make one tag, queue "
            "or dataset"
        )
    mine = set(
        Step.objects.filter(pk__in=wanted, branch__trajectory__project=project).values_list(
            "pk", flat=True
        )
    )
    for pk in wanted:
        if pk not in mine:
            raise SelectionError(f"step {pk} is not one of this project's")
    return wanted


def _name(value: Any, what: str, limit: int) -> str:
    name = value.strip() if isinstance(value, str) else ""
    if not name:
        raise SelectionError(f"give the {what} a name")
    if len(name) > limit:
        raise SelectionError(f"the {what}'s name is longer than {limit} characters")
    problem = worlding.name_problem(name, f"the {what}'s name")
    if problem is not None:
        raise SelectionError(problem)
    return name


@dataclass(frozen=True)
class Tagged:
    tag: str
    trajectories: int  # trajectories holding the steps
    newly_tagged: int  # of those, the ones that did not have the tag before
    created: bool  # the tag is new to the project


def tag_trajectories(project: Project, step_ids: Iterable[Any], tag_name: Any) -> Tagged:
    """The tag `tag_name` (made when the project has none of that name) on every trajectory
    holding one of the steps (tags belong to trajectories: the library and the queue and
    dataset filters select by them)."""
    name = _name(tag_name, "tag", TAG_CHARS)
    ids = step_ids_in(project, step_ids)
    trajectory_ids = sorted(
        set(Step.objects.filter(pk__in=ids).values_list("branch__trajectory_id", flat=True))
    )
    with transaction.atomic():
        tag, created = Tag.objects.get_or_create(project=project, name=name)
        through = Trajectory.tags.through
        had = set(
            through.objects.filter(tag=tag, trajectory_id__in=trajectory_ids).values_list(
                "trajectory_id", flat=True
            )
        )
        through.objects.bulk_create(
            [through(tag=tag, trajectory_id=pk) for pk in trajectory_ids if pk not in had],
            ignore_conflicts=True,
        )
    return Tagged(name, len(trajectory_ids), len(trajectory_ids) - len(had), created)


def queue_from_steps(
    project: Project, user, step_ids: Iterable[Any], name: Any, *, what: str, blind: bool = False
) -> AnnotationQueue:
    """An annotation queue (one annotator per item) of the steps, in reading order. A step
    with no observation has nothing to annotate and is left out; the description says how
    many were."""
    name = _name(name, "queue", NAME_CHARS)
    ids = step_ids_in(project, step_ids)
    data = queues_service.QueueData(
        name=name, blind=blind, steps=tuple(ids), limit=MAX_STEPS, picked=what
    )
    count = queues_service.steps_for(project, data).count()
    if count == 0:
        raise SelectionError(
            f"none of the {plural(len(ids), 'chosen step')} has an observation to annotate"
        )
    description = what
    if count < len(ids):
        left = len(ids) - count
        description += f" ({plural(left, 'step')} without an observation left out)"
    data = queues_service.QueueData(
        name=name, blind=blind, steps=tuple(ids), limit=MAX_STEPS, picked=description
    )
    with transaction.atomic():
        try:
            return queues_service.create_queue(project, user, data)
        except ValueError as exc:
            raise SelectionError(str(exc)) from None


def dataset_from_steps(
    project: Project,
    user,
    step_ids: Iterable[Any],
    dataset_name: Any,
    *,
    what: str,
    confirm_rejected: bool = False,
) -> DatasetVersion:
    """A new version of the dataset `dataset_name` (made when the project has none of that
    name): the latest version's steps and these. A step someone rejected in review goes in
    only with `confirm_rejected` (else SelectionError saying where it was rejected)."""
    dataset_name = _name(dataset_name, "dataset", NAME_CHARS)
    ids = step_ids_in(project, step_ids)
    data = datasets_service.SelectionData(
        name=dataset_name, steps=tuple(ids), confirm_rejected=confirm_rejected
    )
    with transaction.atomic():
        try:
            version = datasets_service.create_version(project, user, data)
        except datasets_service.RejectedSteps as exc:
            raise SelectionError(
                f"{plural(len(exc.reasons), 'step')} chosen were rejected in review "
                f"({'; '.join(exc.reasons)}): confirm to add them anyway"
            ) from None
        except datasets_service.DatasetError as exc:
            raise SelectionError(str(exc)) from None
        source = f"{what}: {version.source}"[:500]
        DatasetVersion.objects.filter(pk=version.pk).update(source=source)
        version.source = source
    return version
