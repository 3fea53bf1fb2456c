"""New dataset versions: one made from a queue adds the queue's accepted steps to the latest
version's (a step already there takes the queue's decision: replaced when accepted, dropped
when not) unless asked to replace them, and its source says which; hand-picking a step that
was rejected warns where, and adds it only once confirmed, saying so in the source."""

from __future__ import annotations

import pytest
from django.urls import reverse
from django.utils import timezone

from studio.models import Adjudication, Dataset, QueueClaim, StepAnnotation
from studio.services import queues
from studio.services.datasets import (
    RejectedSteps,
    SelectionData,
    create_version,
    rejections,
)
from tests.support.jobs import make_trajectory

STEPS = [(f"cmd {i}", f"out {i}") for i in range(5)]


@pytest.fixture
def steps_and_queue(project):
    """Five recorded steps s0..s4; a queue of s1..s3 where (both annotators) s1 is accepted,
    s2 rejected, s3 "needs fix" with a correction."""
    trajectory = make_trajectory(project, steps=STEPS, key="versions")
    steps = list(trajectory.root_branch.steps.order_by("index"))
    queue = queues.create_queue(
        project,
        None,
        queues.QueueData(name="review", origin="recorded", annotators_per_item=2),
    )
    queue.items.filter(step__in=[steps[0], steps[4]]).delete()
    people = [project.users["annotator"], project.users["researcher"]]
    for step, verdict, fix in [
        (steps[1], "accept", ""),
        (steps[2], "reject", ""),
        (steps[3], "needs_fix", "out 3, fixed"),
    ]:
        item = queue.items.get(step=step)
        for person in people:
            StepAnnotation.objects.create(
                step=step, author=person, queue=queue, verdict=verdict, corrected_observation=fix
            )
            QueueClaim.objects.create(
                item=item, user=person, expires_at=timezone.now(), done_at=timezone.now()
            )
    return steps, queue


def _steps(version) -> list[int]:
    return list(version.items.order_by("position").values_list("step_id", flat=True))


@pytest.mark.django_db
def test_a_queue_version_adds_to_the_latest_unless_asked_to_replace(project, steps_and_queue):
    steps, queue = steps_and_queue
    s0, s1, s2, s3, s4 = steps
    # v1: hand-picked s0, s2 (rejected in the queue since: confirmed) and s3 uncorrected
    first = create_version(
        project, None, SelectionData(name="d", steps=(s0.pk, s2.pk, s3.pk), confirm_rejected=True)
    )
    assert _steps(first) == [s0.pk, s2.pk, s3.pk]
    second = create_version(project, None, SelectionData(name="d", queue=queue))
    # s0 kept (the queue never saw it); s2 dropped (the queue rejected it); s3 replaced by
    # the queue's decision (its correction); s1 new
    assert _steps(second) == [s0.pk, s1.pk, s3.pk]
    assert second.items.get(step=s3).observation == "out 3, fixed"
    assert second.items.get(step=s3).correction_by_id is not None
    assert second.source == (
        "v1 + the accepted and fixed items of queue 'review' (1 new, 1 replaced by the "
        "queue's decision, 1 dropped as the queue did not accept it)"
    )
    third = create_version(project, None, SelectionData(name="d", queue=queue, replace=True))
    assert _steps(third) == [s1.pk, s3.pk]
    assert third.source == "the accepted and fixed items of queue 'review', replacing v2"
    # an undecided step (split, not adjudicated) is kept as the latest version had it
    StepAnnotation.objects.filter(queue=queue, step=s1, author=project.users["annotator"]).update(
        verdict="reject"
    )
    fourth = create_version(project, None, SelectionData(name="d", queue=queue, with_fixed=False))
    assert _steps(fourth) == [s1.pk]  # s1 kept from v3; s3 dropped: not accepted
    assert "0 new" in fourth.source and "1 dropped" in fourth.source
    assert first.items.count() == 3  # a version never changes


@pytest.mark.django_db
def test_the_form_replaces_when_ticked(client, project, steps_and_queue):
    steps, queue = steps_and_queue
    create_version(project, None, SelectionData(name="d", steps=(steps[0].pk,)))
    client.force_login(project.users["researcher"])
    url = reverse("dataset_new", args=[project.pk])
    html = client.get(url).content.decode()
    assert 'name="replace"' in html
    data = {"name": "d", "source": "queue", "queue": queue.pk, "with_fixed": "on", "limit": 10}
    assert client.post(url, data).status_code == 302
    assert client.post(url, {**data, "replace": "on"}).status_code == 302
    v2, v3 = Dataset.objects.get(name="d").versions.filter(number__in=[2, 3]).order_by("number")
    assert _steps(v2) == [steps[0].pk, steps[1].pk, steps[3].pk] and v2.source.startswith("v1 + ")
    assert _steps(v3) == [steps[1].pk, steps[3].pk] and v3.source.endswith("replacing v2")


@pytest.mark.django_db
def test_where_a_step_was_rejected(project, steps_and_queue, make_user):
    steps, queue = steps_and_queue
    assert rejections(steps[1].pk) == []
    assert rejections(steps[2].pk) == ["queue 'review': 2 of 2 annotators rejected it"]
    # an adjudicated accept overrides the annotators' rejects there ...
    Adjudication.objects.create(item=queue.items.get(step=steps[2]), verdict="accept")
    assert rejections(steps[2].pk) == []
    # ... an adjudicated reject is the queue's final word
    Adjudication.objects.create(item=queue.items.get(step=steps[1]), verdict="reject")
    assert rejections(steps[1].pk) == ["queue 'review': the adjudicator rejected it"]
    # an annotation outside queues that rejects it
    StepAnnotation.objects.create(step=steps[0], author=make_user("x"), verdict="reject")
    assert rejections(steps[0].pk) == ["1 annotation on the step's own page rejects it"]
    with pytest.raises(RejectedSteps) as raised:
        create_version(project, None, SelectionData(name="p", steps=(steps[0].pk,)))
    assert raised.value.reasons == ["1 annotation on the step's own page rejects it"]
    assert not Dataset.objects.filter(name="p").exists()


@pytest.mark.django_db
def test_hand_picking_a_rejected_step_warns_and_needs_a_confirmation(
    client, project, steps_and_queue
):
    steps, _ = steps_and_queue
    client.force_login(project.users["researcher"])
    url = reverse("step_add_to_dataset", args=[steps[2].pk])
    back = reverse("step_annotate", args=[steps[2].pk])
    page = client.post(url, {"name": "picked", "next": back})
    html = page.content.decode()
    assert page.status_code == 200 and 'id="rejected-warning"' in html
    assert "queue &#x27;review&#x27;: 2 of 2 annotators rejected it" in html
    assert 'name="confirm" value="1"' in html
    assert not Dataset.objects.filter(name="picked").exists()  # nothing until confirmed
    page = client.post(url, {"name": "picked", "confirm": "1", "next": back})
    assert page.status_code == 302 and page["Location"] == back
    version = Dataset.objects.get(name="picked").latest
    assert version.source == (
        "1 hand-picked step, added although rejected (queue 'review': 2 of 2 annotators "
        "rejected it)"
    )
    # a step nobody rejected goes straight in
    page = client.post(reverse("step_add_to_dataset", args=[steps[1].pk]), {"name": "picked"})
    assert page.status_code == 302
    assert Dataset.objects.get(name="picked").latest.number == 2


@pytest.mark.django_db
def test_an_item_reviewed_by_fewer_people_than_the_queue_asks_is_undecided(
    project, steps_and_queue
):
    """A queue of two annotators per item: one accept (the other skipped) decides nothing;
    the adjudicator's word does."""
    steps, queue = steps_and_queue
    s0, s1, s2, s3, s4 = steps
    item = queue.items.create(step=s4, position=9)
    StepAnnotation.objects.create(
        step=s4, author=project.users["annotator"], queue=queue, verdict="accept"
    )
    QueueClaim.objects.create(
        item=item,
        user=project.users["annotator"],
        expires_at=timezone.now(),
        done_at=timezone.now(),
    )
    QueueClaim.objects.create(
        item=item,
        user=project.users["researcher"],
        expires_at=timezone.now(),
        skipped_at=timezone.now(),
        skip_reason="not sure",
    )
    version = create_version(project, None, SelectionData(name="half", queue=queue))
    assert s4.pk not in _steps(version)
    Adjudication.objects.create(item=item, adjudicator=project.users["admin"], verdict="accept")
    version = create_version(project, None, SelectionData(name="half", queue=queue))
    assert s4.pk in _steps(version)
