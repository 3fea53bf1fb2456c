"""Adjudication picks a correction: the page shows every annotation the queue counts side by
side (ratings, verdict, custom answers, the correction's diff against the model's
observation), and the decision picks one annotator's correction, the adjudicator's own, or
none; the dataset made from the queue takes it and records whose it is. Only annotations made
in the queue count."""

from __future__ import annotations

import pytest
from django.urls import reverse
from django.utils import timezone

from studio.models import Adjudication, Membership, QueueClaim, Role, StepAnnotation
from studio.services import queues
from studio.services.datasets import SelectionData, accepted_items, create_version
from tests.support.jobs import make_trajectory


@pytest.fixture
def two_annotators(project, make_user):
    """A queue of 2 steps, 2 annotators per item: on the first, one accepts without a
    correction and the other says "needs fix" with a correction; on the second, both say
    "needs fix" and both correct it (the second annotator last)."""
    make_trajectory(project, steps=[("ls", "a.txt b.txt"), ("cat a.txt", "hello")], key="adj")
    second = make_user("second")
    Membership.objects.create(project=project, user=second, role=Role.ANNOTATOR)
    queue = queues.create_queue(
        project,
        None,
        queues.QueueData(name="fixes", origin="recorded", annotators_per_item=2, limit=10),
    )
    queue.questions = [
        {"key": "confident", "label": "How sure are you?", "kind": "single",
         "options": ["sure", "unsure"], "required": False},
    ]  # fmt: skip
    queue.save(update_fields=["questions"])
    first_user = project.users["annotator"]
    one, two = queue.items.select_related("step").order_by("position")
    plan = [
        (one, first_user, "accept", "", {"confident": "sure"}),
        (one, second, "needs_fix", "a.txt b.txt c.txt", {"confident": "unsure"}),
        (two, first_user, "needs_fix", "hello!", {}),
        (two, second, "needs_fix", "hello world", {}),
    ]
    for item, user, verdict, fix, answers in plan:
        StepAnnotation.objects.create(
            step=item.step,
            author=user,
            queue=queue,
            verdict=verdict,
            corrected_observation=fix,
            answers=answers,
            ratings={"format": 4},
        )
        QueueClaim.objects.create(
            item=item, user=user, expires_at=timezone.now(), done_at=timezone.now()
        )
    return queue, one, two, first_user, second


@pytest.mark.django_db
def test_the_page_shows_each_correction_with_its_diff_and_the_answers(
    client, project, two_annotators
):
    queue, one, _, first_user, second = two_annotators
    # an annotation of the step outside the queue is not the queue's: it is not shown
    StepAnnotation.objects.create(
        step=one.step, author=project.users["admin"], corrected_observation="outside"
    )
    client.force_login(project.users["researcher"])
    html = client.get(reverse("queue_adjudicate", args=[one.pk])).content.decode()
    assert "outside" not in html
    assert "How sure are you?" in html and "unsure" in html
    picks = StepAnnotation.objects.get(step=one.step, author=second, queue=queue)
    assert f'id="correction-diff-{picks.pk}"' in html
    assert "c.txt</ins>" in html  # the diff against the model's observation
    assert f'value="a{picks.pk}"' in html  # the only correction to pick
    mine = StepAnnotation.objects.get(step=one.step, author=first_user, queue=queue)
    assert f'value="a{mine.pk}"' not in html  # no correction: nothing to pick
    # the own correction starts from the model's observation
    assert (
        '<textarea name="own_correction" id="adjudicate-own" rows="6">a.txt b.txt</textarea>'
        in html
    )


@pytest.mark.django_db
def test_picking_a_correction_makes_it_the_datasets_and_records_whose(
    client, project, two_annotators
):
    queue, one, two, first_user, second = two_annotators
    client.force_login(project.users["researcher"])
    picked = StepAnnotation.objects.get(step=one.step, author=second, queue=queue)
    url = reverse("queue_adjudicate", args=[one.pk])
    page = client.post(url, {"verdict": "accept", "correction": f"a{picked.pk}"})
    assert page.status_code == 302
    decision = Adjudication.objects.get(item=one)
    assert decision.corrected_observation == "a.txt b.txt c.txt"
    assert decision.correction_by == second
    html = client.get(url).content.decode()
    assert "The correction that stands is second's" in html
    # the second item is not adjudicated: both said needs fix; the newest correction of an
    # annotator who gave that verdict stands, and it is recorded as theirs
    found = accepted_items(queue)
    assert found[one.step_id].text == "a.txt b.txt c.txt" and found[one.step_id].by == second.pk
    assert found[two.step_id].by in (first_user.pk, second.pk)
    version = create_version(project, None, SelectionData(name="fixed", queue=queue))
    item = version.items.get(step=one.step)
    assert item.corrected and item.observation == "a.txt b.txt c.txt"
    assert item.correction_by == second
    other = version.items.get(step=two.step)
    author = StepAnnotation.objects.get(
        queue=queue, step=two.step, corrected_observation=other.observation
    ).author
    assert other.correction_by == author
    detail = client.get(reverse("dataset_detail", args=[version.dataset_id])).content.decode()
    assert "by second" in detail


@pytest.mark.django_db
def test_the_adjudicators_own_correction_or_none(client, project, two_annotators):
    queue, one, two, *_ = two_annotators
    admin, researcher = project.users["admin"], project.users["researcher"]
    client.force_login(admin)
    url = reverse("queue_adjudicate", args=[two.pk])
    # the observation unchanged is no correction; an empty one neither
    page = client.post(
        url, {"verdict": "needs_fix", "correction": "own", "own_correction": "hello"}
    )
    assert page.status_code == 400 and "accept the observation as it is" in page.content.decode()
    # "needs fix" with no correction would train nothing yet read as decided
    page = client.post(url, {"verdict": "needs_fix", "correction": "none"})
    assert page.status_code == 400 and "needs the correction that stands" in page.content.decode()
    assert not Adjudication.objects.filter(item=two).exists()
    page = client.post(url, {"verdict": "needs_fix", "correction": "own", "own_correction": " "})
    assert page.status_code == 400 and "write your correction" in page.content.decode()
    # a correction by someone who is not an annotator of the item cannot be picked
    outside = StepAnnotation.objects.create(
        step=two.step, author=researcher, corrected_observation="sneaked in"
    )
    page = client.post(url, {"verdict": "needs_fix", "correction": f"a{outside.pk}"})
    assert page.status_code == 400
    page = client.post(
        url, {"verdict": "needs_fix", "correction": "own", "own_correction": "hello, world"}
    )
    assert page.status_code == 302
    decision = Adjudication.objects.get(item=two)
    assert (decision.corrected_observation, decision.correction_by) == ("hello, world", admin)
    assert "the adjudicator's own" in client.get(url).content.decode()
    # none: an adjudicated accept without a correction trains on the observation itself,
    # even though an annotator had corrected it
    client.post(
        reverse("queue_adjudicate", args=[one.pk]), {"verdict": "accept", "correction": "none"}
    )
    version = create_version(project, None, SelectionData(name="own", queue=queue))
    first = version.items.get(step=one.step)
    assert not first.corrected and first.correction_by is None
    second = version.items.get(step=two.step)
    assert second.observation == "hello, world" and second.correction_by == admin


@pytest.mark.django_db
def test_only_the_queues_own_annotations_count(project, two_annotators):
    queue, one, _, first_user, second = two_annotators
    # the same people reject the step in another queue: this queue's verdicts stand
    other = queues.create_queue(
        project, None, queues.QueueData(name="again", origin="recorded", annotators_per_item=2)
    )
    item = other.items.get(step=one.step)
    for user in (first_user, second):
        StepAnnotation.objects.create(step=one.step, author=user, queue=other, verdict="reject")
        QueueClaim.objects.create(
            item=item, user=user, expires_at=timezone.now(), done_at=timezone.now()
        )
    from studio.services.agreement import agreement

    found = agreement(queue)
    assert found.pairs == 2  # one split pair on each item of this queue, none from `other`
    assert one.step_id not in accepted_items(queue)  # split here: undecided
    assert one.step_id not in accepted_items(other)  # rejected there
    Adjudication.objects.create(item=one, verdict="accept")
    assert accepted_items(queue)[one.step_id] is None  # accepted, no correction chosen
