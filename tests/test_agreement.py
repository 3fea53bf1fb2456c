"""Agreement in a queue: Krippendorff's alpha (ordinal) against the published worked example,
percent agreement on verdicts, the items of most disagreement, and the adjudicator's final
decision."""

from __future__ import annotations

import math

import pytest
from django.urls import reverse
from django.utils import timezone

from studio.models import QueueClaim, Step, StepAnnotation
from studio.services import queues
from studio.services.agreement import AlreadyDecided, adjudicate, agreement
from tests.support.jobs import make_trajectory

NAN = math.nan
# Krippendorff's worked example (4 observers x 12 units, some missing): alpha is 0.743
# nominal, 0.815 ordinal, 0.849 interval (Krippendorff, "Computing Krippendorff's
# Alpha-Reliability", 2011).
EXAMPLE = [
    [1, 2, 3, 3, 2, 1, 4, 1, 2, NAN, NAN, NAN],
    [1, 2, 3, 3, 2, 2, 4, 1, 2, 5, NAN, 3],
    [NAN, 3, 3, 3, 2, 3, 4, 2, 2, 5, 1, NAN],
    [1, 2, 3, 3, 2, 4, 4, 1, 2, 5, 1, NAN],
]


def queue_of(project, n_steps: int, per_item: int):
    steps = [(f"cmd {i}", f"out {i}") for i in range(n_steps)]
    make_trajectory(project, steps=steps, key=f"agree-{n_steps}")
    return queues.create_queue(
        project, None,
        queues.QueueData(name="q", origin="recorded", annotators_per_item=per_item, limit=100),
    )  # fmt: skip


def annotate(queue, user, step: Step, **fields) -> None:
    StepAnnotation.objects.create(step=step, author=user, queue=queue, **fields)
    item = queue.items.get(step=step)
    QueueClaim.objects.create(
        item=item, user=user, expires_at=timezone.now(), done_at=timezone.now()
    )


@pytest.mark.django_db
def test_alpha_matches_the_published_worked_example(project, make_user):
    queue = queue_of(project, 12, per_item=4)
    users = [make_user(f"coder{i}") for i in range(4)]
    items = list(queue.items.select_related("step").order_by("position"))
    for row, user in zip(EXAMPLE, users, strict=True):
        for value, item in zip(row, items, strict=True):
            if not math.isnan(value):
                annotate(queue, user, item.step, ratings={"format": int(value)})
    found = agreement(queue)
    assert found.alpha["format"] == 0.815
    assert found.alpha["quality"] is None  # nobody rated it: undefined, not 0 or 1


@pytest.mark.django_db
def test_verdict_agreement_and_the_most_disputed_items_then_a_final_decision(project):
    queue = queue_of(project, 3, per_item=2)
    ann, res, admin = (project.users[r] for r in ("annotator", "researcher", "admin"))
    a, b, c = (i.step for i in queue.items.select_related("step").order_by("position"))
    annotate(queue, ann, a, verdict="accept", ratings={"format": 5})
    annotate(queue, res, a, verdict="accept", ratings={"format": 5})
    annotate(queue, ann, b, verdict="accept", ratings={"format": 1})
    annotate(queue, res, b, verdict="reject", ratings={"format": 5})
    annotate(queue, ann, c, verdict="accept", ratings={"format": 3})
    annotate(queue, res, c, verdict="accept", ratings={"format": 4})
    StepAnnotation.objects.create(step=c, author=admin, verdict="reject")  # outside the queue
    found = agreement(queue)
    assert (found.verdict_agreement, found.pairs, found.annotated_items) == (0.667, 3, 3)
    disputed = [queue.items.get(pk=d["item"]).step for d in found.disputed]
    assert disputed == [b, c]  # a split verdict first, then the ratings apart
    item = queue.items.get(step=b)
    decision = adjudicate(item, admin, "reject", {"format": 2}, "the count is wrong")
    with pytest.raises(AlreadyDecided):
        adjudicate(item, admin, "accept", {}, "")
    assert item.adjudication.pk == decision.pk and item.adjudication.verdict == "reject"


@pytest.mark.django_db
def test_the_adjudication_page_is_for_researchers_and_admins(client, project):
    queue = queue_of(project, 2, per_item=2)
    item = queue.items.first()
    url = reverse("queue_adjudicate", args=[item.pk])
    client.force_login(project.users["annotator"])
    assert client.get(url).status_code == 403
    client.force_login(project.users["researcher"])
    assert client.post(url, {"rating_format": "9"}).status_code == 400
    client.post(url, {"verdict": "accept", "rating_format": "4", "note": "fine"})
    page = client.get(url).content.decode()
    assert 'id="decision"' in page and "It is final." in page
    again = client.post(url, {"verdict": "reject"})
    assert again.status_code == 400 and "the first decision stands" in again.content.decode()
    detail = client.get(reverse("queue_detail", args=[queue.pk])).content.decode()
    assert 'id="queue-agreement"' in detail


@pytest.mark.django_db
def test_identical_paired_ratings_give_no_alpha_and_say_why(project):
    queue = queue_of(project, 3, per_item=2)
    ann, res = project.users["annotator"], project.users["researcher"]
    a, b, c = (i.step for i in queue.items.select_related("step").order_by("position"))
    for step in (a, b):
        annotate(queue, ann, step, ratings={"format": 5})
        annotate(queue, res, step, ratings={"format": 5})
    annotate(queue, ann, c, ratings={"format": 1})  # a lone rating: no pair, left out
    found = agreement(queue)
    assert found.alpha["format"] is None
    assert found.notes["format"] == "every paired rating is the same value: alpha is undefined"
    assert found.notes["realism"] == "no item rated by two annotators yet"
