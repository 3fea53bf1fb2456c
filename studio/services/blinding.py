"""Blind review on every page: which steps a member may not see judge scores or other
people's annotations of yet.

A step is hidden from a member while a blind queue of the project holds it, the member may
work that queue (they are assigned to it, or it is assigned to nobody), and they have not
submitted their annotation of it there. Researchers and admins see everything: they make
the queues and are not the people being kept blind. Hidden means: no judge score of the
step, no annotation of it by anyone else, and no aggregate (a mean, an agreement, a chart,
a count of verdicts) that a hidden step's scores went into. Every page, fragment, JSON
answer and export that shows judge scores or people's annotations asks this module first.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from django.db.models import Exists, OuterRef, Q, QuerySet

from studio.models import Membership, Project, QueueClaim, QueueItem, Role


@dataclass(frozen=True)
class Blindness:
    """The steps of one project hidden from one member (empty: they see everything)."""

    step_ids: frozenset[int]

    def __bool__(self) -> bool:
        return bool(self.step_ids)

    def hides(self, step_id: int | None) -> bool:
        return step_id is not None and step_id in self.step_ids

    def hides_any(self, step_ids: Iterable[int | None]) -> bool:
        return any(self.hides(pk) for pk in step_ids)

    def visible(self, step_ids: Iterable[int]) -> list[int]:
        return [pk for pk in step_ids if pk not in self.step_ids]

    def exclude(self, rows: QuerySet, field: str = "step_id") -> QuerySet:
        """`rows` less those whose `field` (a step id) is hidden."""
        if not self.step_ids:
            return rows
        return rows.exclude(**{f"{field}__in": self.step_ids})


SEES_ALL = Blindness(frozenset())


def sees_everything(membership: Membership | None) -> bool:
    return membership is not None and membership.role in (Role.ADMIN, Role.RESEARCHER)


def hidden_items(project: Project | int, user) -> QuerySet[QueueItem]:
    """Items of the project's blind queues that `user` may work and has not submitted."""
    project_id = project if isinstance(project, int) else project.pk
    submitted = QueueClaim.objects.filter(item=OuterRef("pk"), user=user, done_at__isnull=False)
    return (
        QueueItem.objects.filter(queue__project_id=project_id, queue__blind=True)
        .filter(Q(queue__assignees__isnull=True) | Q(queue__assignees=user))
        .exclude(Exists(submitted))
    )


def blindness_for(membership: Membership | None) -> Blindness:
    """What `membership`'s user may not see in its project (one query; none for owners)."""
    if membership is None or sees_everything(membership):
        return SEES_ALL
    ids = hidden_items(membership.project_id, membership.user_id).values_list(
        "step_id", flat=True
    )
    return Blindness(frozenset(ids))
