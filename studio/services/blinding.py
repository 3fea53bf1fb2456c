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

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from django.db.models import Exists, OuterRef, Q, QuerySet

from studio.models import Membership, Project, QueueClaim, QueueItem, Role


@dataclass(frozen=True)
class Blindness:
    """The steps of one project hidden from one member (empty: they see everything)."""

    step_ids: frozenset[int]
    # step -> the names of the blind queues that hide it, to say why a page leaves it out
    queues: Mapping[int, frozenset[str]] = field(default_factory=dict, compare=False)

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

    def hidden(self, step_ids: Iterable[int | None]) -> list[int]:
        """Those of `step_ids` that are hidden (each once, in the order given)."""
        seen: dict[int, None] = {}
        for pk in step_ids:
            if pk is not None and pk in self.step_ids:
                seen.setdefault(pk)
        return list(seen)

    def note(self, step_ids: Iterable[int | None] | None = None) -> str:
        """Why a page leaves out `step_ids` (the hidden ones among them; every hidden step
        when None), in words; "" when none of them is hidden."""
        hidden = sorted(self.step_ids) if step_ids is None else self.hidden(step_ids)
        if not hidden:
            return ""
        names = sorted({name for pk in hidden for name in self.queues.get(pk, ())})
        quoted = ", ".join(repr(n) for n in names[:-1]) + (" and " if len(names) > 1 else "")
        quoted += repr(names[-1]) if names else ""
        where = (
            f"the blind queue{'s' if len(names) > 1 else ''} {quoted}" if names else "a blind queue"
        )
        if len(hidden) == 1:
            return f"1 step of {where} is hidden from you until you submit your annotation of it."
        return (
            f"{len(hidden)} steps of {where} are hidden from you until you submit your "
            "annotations of them."
        )


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
    rows = hidden_items(membership.project_id, membership.user_id).values_list(
        "step_id", "queue__name"
    )
    queues: dict[int, set[str]] = {}
    for step_id, name in rows:
        queues.setdefault(step_id, set()).add(name)
    return Blindness(frozenset(queues), {pk: frozenset(names) for pk, names in queues.items()})
