"""How far a queue's annotators agree: Krippendorff's alpha per dimension (ordinal ratings,
the `krippendorff` library), percent agreement on verdicts (over the pairs of annotators of
each item), the items of most disagreement, for an adjudicator, whose decision is final (with
the correction that stands, an annotator's picked or the adjudicator's own), and each
annotator's quality: items done, time per item, agreement with the others and with the
adjudicated verdicts.

Only the annotations made in the queue count (`StepAnnotation.queue`): each queue asks anew."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from itertools import combinations
from typing import Any

from django.db import IntegrityError, transaction

from inference.judge import DIMENSIONS
from studio.models import (
    Adjudication,
    AnnotationQueue,
    QueueClaim,
    QueueItem,
    StepAnnotation,
    Verdict,
)
from studio.services.queues import counted_annotations


@dataclass
class Agreement:
    alpha: dict[str, float | None]  # dimension -> alpha (None: undefined, see `notes`)
    notes: dict[str, str]  # dimension -> why it has no alpha
    verdict_agreement: float | None  # 0..1 over pairs; None: no item with two verdicts
    pairs: int
    annotated_items: int  # items with at least two annotations
    disputed: list[dict[str, Any]]  # most disagreement first


def _annotations(queue: AnnotationQueue) -> dict[int, list[StepAnnotation]]:
    """Each item's annotations that the queue counts (`counted_annotations`)."""
    by_item: dict[int, list[StepAnnotation]] = {}
    items = dict(queue.items.values_list("step_id", "pk"))
    for a in counted_annotations(queue).select_related("author"):
        if a.step_id in items:
            by_item.setdefault(items[a.step_id], []).append(a)
    return by_item


def agreement(queue: AnnotationQueue, *, top: int = 10) -> Agreement:
    import krippendorff
    import numpy as np

    by_item = _annotations(queue)
    annotators = sorted({a.author_id for notes in by_item.values() for a in notes})
    items = sorted(by_item)
    alpha: dict[str, float | None] = {}
    notes: dict[str, str] = {}
    for dim in DIMENSIONS:
        data = np.full((len(annotators), len(items)), np.nan)
        for col, item in enumerate(items):
            for a in by_item[item]:
                value = (a.ratings or {}).get(dim)
                if isinstance(value, int):
                    data[annotators.index(a.author_id), col] = value
        pairable = np.sum(~np.isnan(data), axis=0) >= 2  # items rated by two or more
        paired = data[:, pairable]
        values = set(paired[~np.isnan(paired)].tolist())
        alpha[dim] = None
        if len(annotators) < 2 or not pairable.any():
            notes[dim] = "no item rated by two annotators yet"
            continue
        if len(values) < 2:
            notes[dim] = "every paired rating is the same value: alpha is undefined"
            continue
        value = float(krippendorff.alpha(reliability_data=paired, level_of_measurement="ordinal"))
        if np.isnan(value):
            notes[dim] = "alpha is undefined for these ratings"
            continue
        alpha[dim] = round(value, 3)
    agree = pairs = 0
    disputed = []
    for item, marks in by_item.items():
        verdicts = [a.verdict for a in marks if a.verdict]
        for x, y in combinations(verdicts, 2):
            pairs += 1
            agree += x == y
        spread = 0.0
        for dim in DIMENSIONS:
            rated = [a.ratings[dim] for a in marks if isinstance((a.ratings or {}).get(dim), int)]
            if len(rated) >= 2:
                spread += max(rated) - min(rated)
        split = len(set(verdicts)) > 1
        if len(marks) >= 2 and (spread or split):
            labels = [Verdict(v).label for v in verdicts]
            disputed.append({"item": item, "spread": spread, "verdicts": labels, "split": split})
    decided = set(Adjudication.objects.filter(item__queue=queue).values_list("item_id", flat=True))
    positions = dict(queue.items.values_list("pk", "position"))

    # the undecided first, split verdicts before ratings apart, then in queue order
    def order(d: dict[str, Any]) -> tuple:
        return (d["item"] in decided, not d["split"], -float(d["spread"]), positions[d["item"]])

    disputed.sort(key=order)
    return Agreement(
        alpha=alpha,
        notes=notes,
        verdict_agreement=round(agree / pairs, 3) if pairs else None,
        pairs=pairs,
        annotated_items=sum(1 for marks in by_item.values() if len(marks) >= 2),
        disputed=disputed[:top],
    )


class AlreadyDecided(Exception):
    pass


class OwnItem(Exception):
    pass


def adjudicate(
    item: QueueItem,
    user,
    verdict: str,
    ratings: dict[str, int],
    note: str,
    *,
    corrected_observation: str = "",
    correction_by=None,
):
    """Record the final decision on `item`, with the correction that stands (blank: none) and
    whose it is (an annotator's, picked, or `user`'s own); a second decision is refused (the
    first stands), and so is one by an annotator of the item."""
    if QueueClaim.objects.filter(item=item, user=user, done_at__isnull=False).exists():
        raise OwnItem
    try:
        with transaction.atomic():
            # by id: a refused create leaves nothing cached on `item`
            return Adjudication.objects.create(
                item_id=item.pk,
                adjudicator=user,
                verdict=verdict,
                ratings=ratings,
                note=note,
                corrected_observation=corrected_observation,
                correction_by=correction_by if corrected_observation else None,
            )
    except IntegrityError:
        raise AlreadyDecided from None


def item_annotations(item: QueueItem) -> list[StepAnnotation]:
    """The annotations of `item` the queue counts: made in its queue by those who completed
    it, in the order they were made."""
    return list(
        counted_annotations(item.queue_id)
        .filter(step_id=item.step_id)
        .select_related("author")
        .order_by("created_at", "id")
    )


# ---- each annotator's quality -------------------------------------------------------------


def pseudonyms(queue: AnnotationQueue) -> dict[int, str]:
    """user id -> "annotator-N", numbered by each annotator's first annotation in the queue
    (stable: a later annotator never renumbers the earlier ones)."""
    firsts: dict[int, None] = {}
    rows = (
        StepAnnotation.objects.filter(queue=queue)
        .order_by("created_at", "id")
        .values_list("author_id", flat=True)
    )
    for author in rows:
        firsts.setdefault(author, None)
    return {author: f"annotator-{n}" for n, author in enumerate(firsts, start=1)}


@dataclass
class AnnotatorQuality:
    user_id: int
    username: str
    pseudonym: str
    done: int  # items completed
    median_seconds: float | None  # claim taken -> done, median over their completed items
    alpha: float | None  # ordinal, their ratings vs the others' median, pooled over dimensions
    alpha_units: int  # (item, dimension) ratings paired with the others'
    alpha_note: str  # why there is no alpha
    adjudicated: int  # adjudicated items they gave a verdict on
    agrees_with_adjudication: int  # of those, where their verdict is the adjudicated one

    @property
    def adjudication_share(self) -> float | None:
        return (
            round(self.agrees_with_adjudication / self.adjudicated, 3) if self.adjudicated else None
        )


def annotator_quality(queue: AnnotationQueue) -> list[AnnotatorQuality]:
    """Per annotator of the queue (in pseudonym order): items done, the median time per item,
    Krippendorff's alpha (ordinal) between their ratings and the median of the other
    annotators' ratings of the same item and dimension (every dimension pooled: each rated
    (item, dimension) both sides have is a unit), and the share of adjudicated items where
    their verdict is the adjudicator's."""
    import krippendorff
    import numpy as np
    from django.contrib.auth import get_user_model

    by_item = _annotations(queue)
    names = pseudonyms(queue)
    claims = QueueClaim.objects.filter(item__queue=queue, done_at__isnull=False).values_list(
        "user_id", "claimed_at", "done_at"
    )
    times: dict[int, list[float]] = {}
    for user_id, claimed, done_at in claims:
        if done_at is not None:  # filtered so above; the type does not know it
            times.setdefault(user_id, []).append(max((done_at - claimed).total_seconds(), 0.0))
    decided = dict(Adjudication.objects.filter(item__queue=queue).values_list("item_id", "verdict"))
    people = set(names) | set(times)
    usernames = dict(get_user_model().objects.filter(pk__in=people).values_list("pk", "username"))
    order = {pk: n for n, pk in enumerate(names)}
    out = []
    for user_id in sorted(people, key=lambda pk: (order.get(pk, len(order)), pk)):
        mine: list[float] = []
        theirs: list[float] = []
        adjudicated = agrees = 0
        for item, marks in by_item.items():
            own = next((a for a in marks if a.author_id == user_id), None)
            if own is None:
                continue
            others = [a for a in marks if a.author_id != user_id]
            for dim in DIMENSIONS:
                value = (own.ratings or {}).get(dim)
                rated = [
                    a.ratings[dim] for a in others if isinstance((a.ratings or {}).get(dim), int)
                ]
                if isinstance(value, int) and rated:
                    mine.append(float(value))
                    theirs.append(float(statistics.median(rated)))
            if item in decided and own.verdict:
                adjudicated += 1
                agrees += own.verdict == decided[item]
        alpha: float | None = None
        note = ""
        if not mine:
            note = "no item rated by them and another annotator"
        elif len(set(mine) | set(theirs)) < 2:
            note = "every paired rating is the same value: alpha is undefined"
        else:
            value = float(
                krippendorff.alpha(
                    reliability_data=np.array([mine, theirs]), level_of_measurement="ordinal"
                )
            )
            if np.isnan(value):
                note = "alpha is undefined for these ratings"
            else:
                alpha = round(value, 3)
        spent = times.get(user_id, [])
        out.append(
            AnnotatorQuality(
                user_id=user_id,
                username=usernames.get(user_id, "a deleted user"),
                pseudonym=names.get(user_id, "–"),
                done=len(spent),
                median_seconds=round(statistics.median(spent), 1) if spent else None,
                alpha=alpha,
                alpha_units=len(mine),
                alpha_note=note,
                adjudicated=adjudicated,
                agrees_with_adjudication=agrees,
            )
        )
    return out
