"""Annotation queues: steps chosen by a filter, each to be annotated by N people. An annotator
takes the next item that still has a free slot (a claim, held for `claim_minutes`, so two
people do not take the same slot); saving their annotation of it marks the slot done. Blind
queues hide the others' annotations of an item until one's own is in. Owners see progress
per annotator."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Count, Exists, Max, Min, OuterRef, Q
from django.utils import timezone

from studio.models import (
    DOMAINS,
    AnnotationQueue,
    BranchOrigin,
    Project,
    QueueClaim,
    QueueItem,
    Step,
)

MAX_ITEMS = 5000
ORIGINS = {
    "": "any branch",
    "recorded": "recorded branches",
    "simulated": "simulated futures",
    "edited": "futures of an edited action",
}


@dataclass(frozen=True)
class QueueData:
    name: str
    annotators_per_item: int = 1
    blind: bool = False
    claim_minutes: int = 30
    assignees: tuple[Any, ...] = ()
    domain: str = ""
    origin: str = ""
    perturbed: bool = False
    malformed: bool = False
    tag: str = ""
    limit: int = 200
    branches: tuple[int, ...] = field(default_factory=tuple)  # a compare view's branches
    world: str = ""  # steps simulated in this world
    judge_below: float | None = None  # steps whose newest judge total is below this (1-5)

    def describe(self) -> str:
        parts = [f"steps of {ORIGINS.get(self.origin, self.origin)}"]
        if self.domain:
            parts.append(f"domain {self.domain}")
        if self.perturbed:
            parts.append("perturbed")
        if self.malformed:
            parts.append("malformed simulations")
        if self.tag:
            parts.append(f"tagged {self.tag}")
        if self.world:
            parts.append(f"in the world {self.world}")
        if self.judge_below is not None:
            parts.append(f"judge score below {self.judge_below:g}")
        if self.branches:
            parts = [f"the steps of {len(self.branches)} compared branches"]
        return ", ".join(parts) + f"; at most {self.limit}"


def steps_for(project: Project, data: QueueData):
    rows = Step.objects.filter(branch__trajectory__project=project)
    if data.branches:
        return rows.filter(branch_id__in=data.branches).order_by("branch_id", "index")
    if data.domain:
        rows = rows.filter(branch__trajectory__domain=data.domain)
    if data.origin == "recorded":
        rows = rows.filter(branch__parent__isnull=True, branch__origin=BranchOrigin.RECORDED)
    elif data.origin in (BranchOrigin.SIMULATED, BranchOrigin.EDITED):
        rows = rows.filter(branch__origin=data.origin, branch__parent__isnull=False)
    if data.perturbed:
        rows = rows.filter(observation_source="perturbed")
    if data.malformed:
        rows = rows.filter(parse_status__in=["unclosed", "no_tag"])
    if data.tag:
        rows = rows.filter(branch__trajectory__tags__name=data.tag)
    if data.world:
        rows = rows.filter(meta__world__name=data.world)
    if data.judge_below is not None:
        from studio.services.judging import steps_judged_below

        rows = rows.filter(pk__in=steps_judged_below(project, data.judge_below).values("pk"))
    return rows.exclude(observation="").order_by("branch__trajectory_id", "branch_id", "index")


def create_queue(project: Project, user, data: QueueData) -> AnnotationQueue:
    ids = list(steps_for(project, data).values_list("pk", flat=True).distinct()[: data.limit])
    if not ids:
        raise ValueError(f"no step of the project matches ({data.describe()})")
    with transaction.atomic():
        queue = AnnotationQueue.objects.create(
            project=project,
            name=data.name,
            created_by=user,
            annotators_per_item=data.annotators_per_item,
            blind=data.blind,
            claim_minutes=data.claim_minutes,
            description=data.describe(),
        )
        queue.assignees.set(data.assignees)
        QueueItem.objects.bulk_create(
            QueueItem(queue=queue, step_id=pk, position=i) for i, pk in enumerate(ids)
        )
    return queue


def may_work(queue: AnnotationQueue, user) -> bool:
    return not queue.assignees.exists() or queue.assignees.filter(pk=user.pk).exists()


def _taken(now) -> Q:
    """Claims that hold a slot: done, or not expired."""
    return Q(claims__done_at__isnull=False) | Q(claims__expires_at__gt=now)


def claim_next(queue: AnnotationQueue, user) -> QueueItem | None:
    """The user's item: one they claimed and have not finished (still theirs), else the first
    item with a free slot that they have not done, claimed for them. None: nothing left."""
    now = timezone.now()
    held = (
        QueueClaim.objects.filter(
            item__queue=queue, user=user, done_at__isnull=True, expires_at__gt=now
        )
        .select_related("item")
        .order_by("item__position")
        .first()
    )
    if held is not None:
        return held.item
    expires = now + timedelta(minutes=queue.claim_minutes)
    mine_done = QueueClaim.objects.filter(item=OuterRef("pk"), user=user, done_at__isnull=False)
    candidates = (
        queue.items.exclude(Exists(mine_done))
        .annotate(taken=Count("claims", filter=_taken(now)))
        .filter(taken__lt=queue.annotators_per_item)
        .order_by("position")
    )
    for item in candidates[:50]:
        with transaction.atomic():
            # one at a time per item: two people never take its last slot together
            QueueItem.objects.select_for_update().filter(pk=item.pk).first()
            taken = item.claims.filter(Q(done_at__isnull=False) | Q(expires_at__gt=now)).exclude(
                user=user
            )
            if taken.count() >= queue.annotators_per_item:
                continue
            try:
                claim, created = QueueClaim.objects.get_or_create(
                    item=item, user=user, defaults={"expires_at": expires}
                )
            except IntegrityError:
                continue
            if not created:
                if claim.done_at is not None:
                    continue
                claim.expires_at = expires  # an expired claim of theirs, taken up again
                claim.save(update_fields=["expires_at"])
            return item
    return None


def complete(queue: AnnotationQueue, step: Step, user) -> bool:
    """The user's annotation of `step` is in: their slot on its item is done, if they hold
    one (their claim, even expired, when nobody took the slot meanwhile) or one is free.
    False: every slot went to others; the annotation is kept, and not counted in the queue."""
    now = timezone.now()
    item = queue.items.filter(step=step).first()
    if item is None:
        return False
    with transaction.atomic():
        QueueItem.objects.select_for_update().filter(pk=item.pk).first()  # one at a time
        claim = QueueClaim.objects.filter(item=item, user=user).first()
        if claim is not None and claim.done_at is not None:
            return True
        others = (
            item.claims.exclude(user=user)
            .filter(Q(done_at__isnull=False) | Q(expires_at__gt=now))
            .count()
        )
        if others >= queue.annotators_per_item:
            return False
        if claim is None:
            QueueClaim.objects.create(item=item, user=user, expires_at=now, done_at=now)
        else:
            QueueClaim.objects.filter(pk=claim.pk).update(done_at=now)
    return True


def blind_for(step: Step, user) -> bool:
    """Whether the user may not see the others' annotations of `step` yet: a blind queue of
    its project that they work holds it, and they have not submitted their own there."""
    for queue in AnnotationQueue.objects.filter(blind=True, items__step=step).distinct():
        if may_work(queue, user) and not has_submitted(queue, step, user):
            return True
    return False


def has_submitted(queue: AnnotationQueue, step: Step, user) -> bool:
    return QueueClaim.objects.filter(
        item__queue=queue, item__step=step, user=user, done_at__isnull=False
    ).exists()


@dataclass
class Progress:
    items: int
    slots: int
    done: int
    per_annotator: list[dict[str, Any]]


def progress(queue: AnnotationQueue) -> Progress:
    items = queue.items.count()
    done = QueueClaim.objects.filter(item__queue=queue, done_at__isnull=False)
    rows = (
        done.values("user__username")
        .annotate(n=Count("pk"), first=Min("claimed_at"), last=Max("done_at"))
        .order_by("-n", "user__username")
    )
    per = []
    for row in rows:
        seconds = (row["last"] - row["first"]).total_seconds() if row["last"] else 0
        per.append(
            {
                "user": row["user__username"],
                "done": row["n"],
                # a rate over less than a few minutes of work says nothing
                "per_hour": round(row["n"] / (seconds / 3600), 1) if seconds >= 300 else None,
            }
        )
    return Progress(items, items * queue.annotators_per_item, done.count(), per)


def my_share(queue: AnnotationQueue, user) -> int:
    return QueueClaim.objects.filter(item__queue=queue, user=user, done_at__isnull=False).count()


DOMAIN_CHOICES = [("", "any domain"), *[(d, d) for d in DOMAINS]]
