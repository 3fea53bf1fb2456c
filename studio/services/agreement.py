"""How far a queue's annotators agree: Krippendorff's alpha per dimension (ordinal ratings,
the `krippendorff` library), percent agreement on verdicts (over the pairs of annotators of
each item), and the items of most disagreement, for an adjudicator, whose decision is final."""

from __future__ import annotations

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


@dataclass
class Agreement:
    alpha: dict[str, float | None]  # dimension -> alpha (None: undefined, see `notes`)
    notes: dict[str, str]  # dimension -> why it has no alpha
    verdict_agreement: float | None  # 0..1 over pairs; None: no item with two verdicts
    pairs: int
    annotated_items: int  # items with at least two annotations
    disputed: list[dict[str, Any]]  # most disagreement first


def _annotations(queue: AnnotationQueue) -> dict[int, list[StepAnnotation]]:
    """Each item's annotations by the annotators who completed it in the queue."""
    by_item: dict[int, list[StepAnnotation]] = {}
    items = {i.step_id: i.pk for i in queue.items.all()}
    done = set(
        QueueClaim.objects.filter(item__queue=queue, done_at__isnull=False).values_list(
            "item_id", "user_id"
        )
    )
    for a in StepAnnotation.objects.filter(step_id__in=items).select_related("author"):
        item = items[a.step_id]
        if (item, a.author_id) in done:
            by_item.setdefault(item, []).append(a)
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


def adjudicate(item: QueueItem, user, verdict: str, ratings: dict[str, int], note: str):
    """Record the final decision on `item`; a second one is refused (the first stands), and
    so is one by an annotator of the item."""
    if QueueClaim.objects.filter(item=item, user=user, done_at__isnull=False).exists():
        raise OwnItem
    try:
        with transaction.atomic():
            # by id: a refused create leaves nothing cached on `item`
            return Adjudication.objects.create(
                item_id=item.pk, adjudicator=user, verdict=verdict, ratings=ratings, note=note
            )
    except IntegrityError:
        raise AlreadyDecided from None
