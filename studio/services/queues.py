"""Annotation queues: steps chosen by a filter, each to be annotated by N people. An annotator
takes the next item that still has a free slot (a claim, held for `claim_minutes`, so two
people do not take the same slot); saving their annotation of it marks the slot done. Blind
queues hide the others' annotations of an item until one's own is in. Owners see progress
per annotator.

An annotator may skip an item (with a reason): their claim then holds no slot, and they are
never offered that item again, so it goes to someone else. They may flag it for the queue's
lead (with a note), skipping it or not; the lead clears the flag. The lead releases a claim
(its slot is free again) or reassigns it to another member (who then holds the slot)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Count, Exists, Max, Min, OuterRef, Q, QuerySet
from django.utils import timezone

from studio.models import (
    DOMAINS,
    AnnotationQueue,
    Branch,
    BranchOrigin,
    Project,
    QueueClaim,
    QueueItem,
    Step,
    StepAnnotation,
)

MAX_ITEMS = 5000
ORIGINS = {
    "": "any branch",
    "recorded": "recorded branches",
    # every future simulated from a step: of a replayed action, an edited one or actions a
    # person typed in the playground
    "simulated": "simulated futures",
    # the futures of an action a person wrote (edited in the editor, or typed in the
    # playground: a human action either way), and the futures simulated on from them
    "edited": "futures of an edited or typed action",
}
MAX_REASON_CHARS = 2_000


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
    # chosen steps (a search's hits, a behaviour search's matches): these and no filter;
    # `picked` says where they come from, in words, for the queue's description
    steps: tuple[int, ...] = field(default_factory=tuple)
    picked: str = ""
    world: str = ""  # steps simulated in this world
    judge_below: float | None = None  # steps whose newest judge total is below this (1-5)
    guidelines: str = ""  # Markdown
    questions: tuple[dict[str, Any], ...] = ()  # validated by studio.services.questions

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
        if self.steps:
            return self.picked or f"{len(self.steps)} chosen steps"
        return ", ".join(parts) + f"; at most {self.limit}"


def steps_for(project: Project, data: QueueData):
    rows = Step.objects.filter(branch__trajectory__project=project)
    if data.steps:
        # in reading order (trajectory by trajectory, each branch's steps in order); a step
        # with no observation has nothing to annotate, as below
        return (
            rows.filter(pk__in=data.steps)
            .exclude(observation="")
            .order_by("branch__trajectory_id", "branch_id", "index")
        )
    if data.branches:
        return rows.filter(branch_id__in=data.branches).order_by("branch_id", "index")
    if data.domain:
        rows = rows.filter(branch__trajectory__domain=data.domain)
    if data.origin == "recorded":
        rows = rows.filter(branch__parent__isnull=True, branch__origin=BranchOrigin.RECORDED)
    elif data.origin == BranchOrigin.SIMULATED:
        # a future's own steps, whether its first action was replayed or edited
        rows = rows.filter(
            branch__parent__isnull=False,
            branch__origin__in=[BranchOrigin.SIMULATED, BranchOrigin.EDITED, BranchOrigin.PLAYED],
        )
    elif data.origin == BranchOrigin.EDITED:
        rows = rows.filter(branch_id__in=_edited_futures(project))
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


def _edited_futures(project: Project) -> list[int]:
    """The project's branches that follow an edited action: edited futures and the futures
    simulated on from one (an edited branch on their lineage)."""
    futures = Branch.objects.filter(trajectory__project=project, parent__isnull=False)
    # a played branch's actions are typed by a person: human-written like an edit
    edited = set(
        futures.filter(origin__in=[BranchOrigin.EDITED, BranchOrigin.PLAYED]).values_list(
            "pk", flat=True
        )
    )
    if not edited:
        return []
    return [
        pk
        for pk, lineage in futures.values_list("pk", "lineage")
        if pk in edited or any(seg in edited for seg, _ in (lineage or []))
    ]


class DuplicateQueueName(ValueError):
    """The project already has a queue of that name (compared ignoring case)."""


def name_taken(project: Project, name: str, *, exclude: int | None = None) -> str | None:
    """The name of the project's queue that `name` clashes with (ignoring case), or None."""
    rows = AnnotationQueue.objects.filter(project=project, name__iexact=name.strip())
    if exclude is not None:
        rows = rows.exclude(pk=exclude)
    return rows.values_list("name", flat=True).first()


def create_queue(project: Project, user, data: QueueData) -> AnnotationQueue:
    """A queue of the steps `data` picks. Raises ValueError when none matches, and
    DuplicateQueueName (a ValueError) when the project has a queue of that name, ignoring
    case: checked here under a lock on the project row, not only by the form, so two
    requests at once or the shell cannot make two (no unique constraint in the schema)."""
    ids = list(steps_for(project, data).values_list("pk", flat=True).distinct()[: data.limit])
    if not ids:
        raise ValueError(f"no step of the project matches ({data.describe()})")
    with transaction.atomic():
        # queue creations of one project wait for each other here (PostgreSQL; SQLite
        # serialises writers anyway), so the check below sees every queue made before
        Project.objects.select_for_update().filter(pk=project.pk).first()
        clash = name_taken(project, data.name)
        if clash is not None:
            raise DuplicateQueueName(
                f"this project already has a queue named {clash!r} (queue names are unique "
                "per project, ignoring case)"
            )
        queue = AnnotationQueue.objects.create(
            project=project,
            name=data.name,
            created_by=user,
            annotators_per_item=data.annotators_per_item,
            blind=data.blind,
            claim_minutes=data.claim_minutes,
            description=data.describe(),
            guidelines=data.guidelines,
            questions=list(data.questions),
        )
        queue.assignees.set(data.assignees)
        QueueItem.objects.bulk_create(
            QueueItem(queue=queue, step_id=pk, position=i) for i, pk in enumerate(ids)
        )
    return queue


def may_work(queue: AnnotationQueue, user) -> bool:
    return not queue.assignees.exists() or queue.assignees.filter(pk=user.pk).exists()


def update_setup(queue: AnnotationQueue, guidelines: str, questions: list[dict[str, Any]]) -> None:
    """The queue's guidelines and questions, as its owners edit them (validated)."""
    queue.guidelines = guidelines
    queue.questions = questions
    queue.save(update_fields=["guidelines", "questions"])


def _holds(now, prefix: str = "") -> Q:
    """Claims that hold a slot: done, or taken, not expired and not skipped."""
    return Q(**{f"{prefix}done_at__isnull": False}) | Q(
        **{f"{prefix}expires_at__gt": now, f"{prefix}skipped_at__isnull": True}
    )


def _taken(now) -> Q:
    return _holds(now, "claims__")


def claim_next(queue: AnnotationQueue, user) -> QueueItem | None:
    """The user's item: one they claimed and have not finished (still theirs), else the first
    item with a free slot that they have not done, claimed for them. None: nothing left."""
    now = timezone.now()
    held = (
        QueueClaim.objects.filter(
            item__queue=queue,
            user=user,
            done_at__isnull=True,
            skipped_at__isnull=True,
            expires_at__gt=now,
        )
        .select_related("item")
        .order_by("item__position")
        .first()
    )
    if held is not None:
        return held.item
    expires = now + timedelta(minutes=queue.claim_minutes)
    # done or skipped by them: never offered to them again
    mine_over = QueueClaim.objects.filter(item=OuterRef("pk"), user=user).filter(
        Q(done_at__isnull=False) | Q(skipped_at__isnull=False)
    )
    candidates = (
        queue.items.exclude(Exists(mine_over))
        .annotate(taken=Count("claims", filter=_taken(now)))
        .filter(taken__lt=queue.annotators_per_item)
        .order_by("position")
    )
    for item in candidates[:50]:
        with transaction.atomic():
            # one at a time per item: two people never take its last slot together
            QueueItem.objects.select_for_update().filter(pk=item.pk).first()
            taken = item.claims.filter(_holds(now)).exclude(user=user)
            if taken.count() >= queue.annotators_per_item:
                continue
            try:
                claim, created = QueueClaim.objects.get_or_create(
                    item=item, user=user, defaults={"expires_at": expires}
                )
            except IntegrityError:
                continue
            if not created:
                if claim.done_at is not None or claim.skipped_at is not None:
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
        others = item.claims.exclude(user=user).filter(_holds(now)).count()
        if others >= queue.annotators_per_item:
            return False
        if claim is None:
            QueueClaim.objects.create(item=item, user=user, expires_at=now, done_at=now)
        else:
            # done after all (they came back to a skipped item): it is no longer skipped
            QueueClaim.objects.filter(pk=claim.pk).update(done_at=now, skipped_at=None)
    return True


class ClaimError(ValueError):
    """A skip, flag, release or reassignment that cannot be (said in words)."""


def _claim_of(item: QueueItem, user) -> QueueClaim:
    """The user's claim on the item; one holding no slot when they have none (a skip or a
    flag from an item they opened without taking it)."""
    claim, _ = QueueClaim.objects.get_or_create(
        item=item, user=user, defaults={"expires_at": timezone.now()}
    )
    return claim


def skip(item: QueueItem, user, reason: str = "") -> QueueClaim:
    """The user gives the item back: their slot is free and they are not offered it again."""
    with transaction.atomic():
        QueueItem.objects.select_for_update().filter(pk=item.pk).first()
        claim = _claim_of(item, user)
        if claim.done_at is not None:
            raise ClaimError("you have submitted this item: it cannot be skipped")
        now = timezone.now()
        claim.skipped_at, claim.skip_reason = now, reason.strip()[:MAX_REASON_CHARS]
        claim.expires_at = min(claim.expires_at, now)
        claim.save(update_fields=["skipped_at", "skip_reason", "expires_at"])
    return claim


def flag(item: QueueItem, user, note: str = "") -> QueueClaim:
    """The user flags the item for the queue's lead (their claim stays as it is)."""
    claim = _claim_of(item, user)
    claim.flagged_at, claim.flag_note = timezone.now(), note.strip()[:MAX_REASON_CHARS]
    claim.save(update_fields=["flagged_at", "flag_note"])
    return claim


def clear_flag(claim: QueueClaim) -> None:
    claim.flagged_at, claim.flag_note = None, ""
    claim.save(update_fields=["flagged_at", "flag_note"])


def holding(claim: QueueClaim, now=None) -> bool:
    now = now or timezone.now()
    return claim.done_at is None and claim.skipped_at is None and claim.expires_at > now


def release(claim: QueueClaim) -> None:
    """The lead frees the slot a claim holds (its annotator may take the item again)."""
    if claim.done_at is not None:
        raise ClaimError("this item is done by its annotator: there is nothing to release")
    QueueClaim.objects.filter(pk=claim.pk).update(expires_at=timezone.now())


def reassign(claim: QueueClaim, to_user) -> QueueClaim:
    """The lead gives the slot a claim holds to `to_user` (who holds it for the queue's
    claim time, and is offered the item first)."""
    item = claim.item
    queue = item.queue
    if claim.done_at is not None:
        raise ClaimError("this item is done by its annotator: its slot is theirs")
    if to_user.pk == claim.user_id:
        raise ClaimError("the claim is theirs already")
    if not queue.project.memberships.filter(user=to_user).exists() or not may_work(queue, to_user):
        raise ClaimError(f"{to_user.username} does not work this queue")
    now = timezone.now()
    with transaction.atomic():
        QueueItem.objects.select_for_update().filter(pk=item.pk).first()
        theirs = QueueClaim.objects.filter(item=item, user=to_user).first()
        if theirs is not None and theirs.done_at is not None:
            raise ClaimError(f"{to_user.username} has submitted this item already")
        QueueClaim.objects.filter(pk=claim.pk).update(expires_at=now)
        expires = now + timedelta(minutes=queue.claim_minutes)
        if theirs is None:
            return QueueClaim.objects.create(item=item, user=to_user, expires_at=expires)
        # the lead's word over their skip: the item is theirs to do
        theirs.expires_at, theirs.skipped_at = expires, None
        theirs.save(update_fields=["expires_at", "skipped_at"])
        return theirs


def claims_for_lead(queue: AnnotationQueue) -> dict[str, list[QueueClaim]]:
    """What the lead acts on: the claims holding a slot now, and the flagged ones."""
    now = timezone.now()
    rows = QueueClaim.objects.filter(item__queue=queue).select_related("user", "item__step")
    return {
        "holding": list(
            rows.filter(done_at__isnull=True, skipped_at__isnull=True, expires_at__gt=now).order_by(
                "item__position", "user__username"
            )
        ),
        "flagged": list(rows.filter(flagged_at__isnull=False).order_by("flagged_at")),
    }


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
    """The queue's items, slots and done slots, and per annotator: done, skipped, flagged,
    holding now and their rate."""
    now = timezone.now()
    items = queue.items.count()
    claims = QueueClaim.objects.filter(item__queue=queue)
    rows = (
        claims.values("user__username")
        .annotate(
            n=Count("pk", filter=Q(done_at__isnull=False)),
            skipped=Count("pk", filter=Q(skipped_at__isnull=False)),
            flagged=Count("pk", filter=Q(flagged_at__isnull=False)),
            holding=Count(
                "pk",
                filter=Q(done_at__isnull=True, skipped_at__isnull=True, expires_at__gt=now),
            ),
            first=Min("claimed_at", filter=Q(done_at__isnull=False)),
            last=Max("done_at"),
        )
        .order_by("-n", "user__username")
    )
    per = []
    for row in rows:
        seconds = (row["last"] - row["first"]).total_seconds() if row["last"] else 0
        per.append(
            {
                "user": row["user__username"],
                "done": row["n"],
                "skipped": row["skipped"],
                "flagged": row["flagged"],
                "holding": row["holding"],
                # a rate over less than a few minutes of work says nothing
                "per_hour": round(row["n"] / (seconds / 3600), 1) if seconds >= 300 else None,
            }
        )
    done = claims.filter(done_at__isnull=False).count()
    return Progress(items, items * queue.annotators_per_item, done, per)


def my_share(queue: AnnotationQueue, user) -> int:
    return QueueClaim.objects.filter(item__queue=queue, user=user, done_at__isnull=False).count()


def my_skips(queue: AnnotationQueue, user) -> int:
    return QueueClaim.objects.filter(
        item__queue=queue, user=user, done_at__isnull=True, skipped_at__isnull=False
    ).count()


def counted_annotations(queue: AnnotationQueue | int | None = None) -> QuerySet[StepAnnotation]:
    """The annotations a queue counts (agreement, adjudication, decisions, answers,
    rejections): made in the queue by annotators who completed their item there; those of
    every queue when `queue` is None. One definition for all of them."""
    completed = QueueClaim.objects.filter(
        item__queue_id=OuterRef("queue_id"),
        item__step_id=OuterRef("step_id"),
        user_id=OuterRef("author_id"),
        done_at__isnull=False,
    )
    rows = StepAnnotation.objects.filter(queue__isnull=False).filter(Exists(completed))
    if queue is None:
        return rows
    return rows.filter(queue_id=queue if isinstance(queue, int) else queue.pk)


def question_answers(queue: AnnotationQueue) -> dict[int, dict[int, dict[str, Any]]]:
    """{item id: {user id: answers}} over the annotations the queue counts."""
    item_of = dict(queue.items.values_list("step_id", "pk"))
    found: dict[int, dict[int, dict[str, Any]]] = {}
    rows = counted_annotations(queue).values_list("step_id", "author_id", "answers")
    for step_id, author_id, answers in rows:
        if answers and step_id in item_of:
            found.setdefault(item_of[step_id], {})[author_id] = dict(answers)
    return found


DOMAIN_CHOICES = [("", "any domain"), *[(d, d) for d in DOMAINS]]
