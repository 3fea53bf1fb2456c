"""How far a queue's annotators agree on its custom questions, over the items that at least
two of them completed: percent agreement over the pairs of annotators of each item for a
single or multiple choice (a multiple choice agrees when both picked the same options), and
Krippendorff's alpha (ordinal) for a rating scale. Free text is not compared."""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations
from typing import Any

from studio.models import AnnotationQueue
from studio.services.queues import question_answers


@dataclass
class QuestionAgreement:
    key: str
    label: str
    kind: str
    measure: str  # "alpha", "percent" or "" (free text)
    value: float | None  # alpha, or the share of agreeing pairs 0..1; None: see `note`
    pairs: int  # pairs of answers compared (choice) or items with two answers or more (scale)
    note: str = ""


def question_agreement(
    queue: AnnotationQueue, answers: dict[int, dict[int, dict[str, Any]]] | None = None
) -> list[QuestionAgreement]:
    """One row per question of the queue, in order. `answers`: `question_answers(queue)`, as
    the caller may have left out the items hidden from the reader."""
    import krippendorff
    import numpy as np

    found = question_answers(queue) if answers is None else answers
    rows = []
    for q in queue.questions or []:
        key, kind, label = q["key"], q["kind"], q.get("label") or q["key"]
        per_item = [
            [given[key] for _, given in sorted(item.items()) if key in given]
            for item in found.values()
        ]
        per_item = [values for values in per_item if len(values) >= 2]
        if kind == "text":
            rows.append(QuestionAgreement(key, label, kind, "", None, 0, "free text: not compared"))
            continue
        if kind in ("single", "multi"):
            agree = pairs = 0
            for values in per_item:
                for x, y in combinations(values, 2):
                    pairs += 1
                    agree += (sorted(x) == sorted(y)) if kind == "multi" else x == y
            rows.append(
                QuestionAgreement(
                    key,
                    label,
                    kind,
                    "percent",
                    round(agree / pairs, 3) if pairs else None,
                    pairs,
                    "" if pairs else "no item answered by two annotators yet",
                )
            )
            continue
        # scale: annotators x items, NaN where one did not answer
        users = sorted({u for item in found.values() for u, a in item.items() if key in a})
        items = [item for item in found.values() if sum(key in a for a in item.values()) >= 2]
        row = QuestionAgreement(key, label, kind, "alpha", None, len(items))
        if len(users) < 2 or not items:
            row.note = "no item answered by two annotators yet"
            rows.append(row)
            continue
        data = np.full((len(users), len(items)), np.nan)
        for col, item in enumerate(items):
            for user, given in item.items():
                if isinstance(given.get(key), int):
                    data[users.index(user), col] = given[key]
        if len(set(data[~np.isnan(data)].tolist())) < 2:
            row.note = "every answer is the same value: alpha is undefined"
        else:
            value = float(krippendorff.alpha(reliability_data=data, level_of_measurement="ordinal"))
            if np.isnan(value):
                row.note = "alpha is undefined for these answers"
            else:
                row.value = round(value, 3)
        rows.append(row)
    return rows
