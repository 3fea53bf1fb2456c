"""Annotation queues: made from a filter by researchers and admins, worked item after item
with claims that keep two people off one slot (and expire), blind until one's own annotation
is in, with progress per annotator; nobody outside the project sees them."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from studio.models import QueueClaim, StepAnnotation
from studio.services import queues as service
from studio.services.queues import QueueData
from tests.support.branching import make_child
from tests.support.branching import make_trajectory as make_branching


@pytest.fixture
def futures(project):
    trajectory, root = make_branching(project)
    make_child(root, 2, ["simulated A", "simulated A+1"])
    make_child(root, 2, ["simulated B"], sample_index=1)
    return trajectory, root


@pytest.mark.django_db
def test_a_queue_from_a_filter_takes_the_matching_steps(project, futures):
    trajectory, root = futures
    simulated = service.create_queue(
        project, None, QueueData(name="futures", origin="simulated", annotators_per_item=2)
    )
    assert simulated.items.count() == 3  # the steps of the two futures only
    assert "simulated futures" in simulated.description
    recorded = service.create_queue(project, None, QueueData(name="rec", origin="recorded"))
    assert recorded.items.count() == root.steps.count()
    with pytest.raises(ValueError, match="no step of the project matches"):
        service.create_queue(project, None, QueueData(name="x", domain="android"))


@pytest.mark.django_db
def test_claims_keep_two_people_off_one_slot_and_expire(project, futures):
    queue = service.create_queue(project, None, QueueData(name="q", origin="simulated"))
    ann, res = project.users["annotator"], project.users["researcher"]
    first = service.claim_next(queue, ann)
    assert service.claim_next(queue, ann) == first  # still theirs until done
    other = service.claim_next(queue, res)
    assert other is not None and other != first  # one annotator per item: the next one
    service.complete(queue, first.step, ann)
    second = service.claim_next(queue, ann)
    assert second not in (None, first, other)  # every item is done or taken now
    assert service.claim_next(queue, project.users["admin"]) is None
    # a claim left to expire frees its slot for someone else
    QueueClaim.objects.filter(item=other, user=res).update(
        expires_at=timezone.now() - timedelta(minutes=1)
    )
    assert service.claim_next(queue, project.users["admin"]) == other
    progress = service.progress(queue)
    assert (progress.items, progress.slots, progress.done) == (3, 3, 1)
    assert progress.per_annotator[0]["user"] == "annotator"


@pytest.mark.django_db
def test_a_blind_queue_hides_the_others_until_one_submits(client, project, futures):
    queue = service.create_queue(
        project,
        None,
        QueueData(name="blind", origin="simulated", annotators_per_item=2, blind=True),
    )
    item = queue.items.first()
    client.force_login(project.users["researcher"])
    url = reverse("step_annotate", args=[item.step_id]) + f"?queue={queue.pk}"
    client.post(url, {"rating_format": "2", "comment": "too terse", "queue": queue.pk})
    client.force_login(project.users["annotator"])
    page = client.get(url).content.decode()
    assert 'id="blind-note"' in page and "too terse" not in page
    saved = client.post(url, {"rating_format": "4", "queue": queue.pk, "then": "next"})
    assert saved.status_code == 302 and f"queue={queue.pk}" in saved["Location"]
    page = client.get(url).content.decode()
    assert "too terse" in page and 'id="blind-note"' not in page  # after submitting
    assert StepAnnotation.objects.filter(step=item.step).count() == 2


@pytest.mark.django_db
def test_roles_and_projects(client, project, futures, make_user):
    url = reverse("queue_new", args=[project.pk])
    client.force_login(project.users["annotator"])
    assert client.get(url).status_code == 403
    client.force_login(project.users["researcher"])
    bad = client.post(url, {"name": "q", "annotators_per_item": 0, "claim_minutes": 30, "limit": 5})
    assert bad.status_code == 400 and "annotators_per_item" in bad.context["form"].errors
    made = client.post(
        url, {"name": "q", "annotators_per_item": 1, "claim_minutes": 30, "limit": 5,
              "origin": "simulated", "assignees": [project.users["annotator"].pk]},
    )  # fmt: skip
    queue = service.AnnotationQueue.objects.get()
    assert made["Location"] == reverse("queue_detail", args=[queue.pk])
    assert client.post(reverse("queue_next", args=[queue.pk])).status_code == 403  # not assigned
    client.force_login(project.users["annotator"])
    taken = client.post(reverse("queue_next", args=[queue.pk]))
    assert taken.status_code == 302 and "/annotate/?queue=" in taken["Location"]
    client.force_login(make_user("stranger"))
    for page in (
        reverse("queue_detail", args=[queue.pk]),
        reverse("queue_list", args=[project.pk]),
    ):
        assert client.get(page).status_code == 404
    assert client.post(reverse("queue_next", args=[queue.pk])).status_code == 404


@pytest.mark.django_db
def test_a_queue_from_a_compare_view_takes_the_compared_branches_steps(client, project):
    trajectory, root = make_branching(project)
    a = make_child(root, 2, ["A", "A2"])
    b = make_child(root, 2, ["B"], sample_index=1)
    client.force_login(project.users["researcher"])
    compare = client.get(
        reverse("branch_compare", args=[trajectory.pk]) + f"?b={a.pk}&b={b.pk}"
    ).content.decode()
    link = reverse("queue_new", args=[project.pk]) + f"?branches={a.pk},{b.pk}"
    assert link.replace("&", "&amp;") in compare or link in compare
    form = client.get(link).content.decode()
    assert f'value="{a.pk},{b.pk}"' in form
    client.post(
        reverse("queue_new", args=[project.pk]),
        {"name": "pair", "annotators_per_item": 1, "claim_minutes": 30, "limit": 50,
         "branches": f"{a.pk},{b.pk}"},
    )  # fmt: skip
    queue = service.AnnotationQueue.objects.get()
    assert sorted(queue.items.values_list("step__branch_id", flat=True)) == [a.pk, a.pk, b.pk]
    assert queue.description.startswith("the steps of 2 compared branches")
    refused = client.post(
        reverse("queue_new", args=[project.pk]),
        {"name": "x", "annotators_per_item": 1, "claim_minutes": 30, "limit": 5,
         "branches": f"{a.pk},abc"},
    )  # fmt: skip
    assert refused.status_code == 400
    assert refused.context["form"].errors["branches"] == ["'abc' is not a branch id"]


@pytest.mark.django_db
def test_slots_stay_true_when_claims_expire(project, futures):
    """An annotator whose claim ran out can still take the item if a slot is free; one who
    saves after others took every slot is kept out of the count (their work is kept)."""
    ann, res = project.users["annotator"], project.users["researcher"]
    pair = service.create_queue(
        project, None, QueueData(name="pair", origin="simulated", annotators_per_item=2, limit=1)
    )
    item = service.claim_next(pair, ann)
    QueueClaim.objects.filter(item=item, user=ann).update(
        expires_at=timezone.now() - timedelta(minutes=1)
    )
    assert service.claim_next(pair, res) == item
    assert service.complete(pair, item.step, res)
    assert service.claim_next(pair, ann) == item  # a slot is still free for them
    single = service.create_queue(
        project, None, QueueData(name="one", origin="simulated", annotators_per_item=1, limit=1)
    )
    item = service.claim_next(single, ann)
    QueueClaim.objects.filter(item=item, user=ann).update(
        expires_at=timezone.now() - timedelta(minutes=1)
    )
    assert service.claim_next(single, res) == item
    assert service.complete(single, item.step, res)
    assert not service.complete(single, item.step, ann)  # every slot went to others
    assert service.progress(single).done == 1


@pytest.mark.django_db
def test_a_blind_queue_hides_the_others_on_the_plain_page_too(client, project, futures):
    queue = service.create_queue(
        project,
        None,
        QueueData(name="blind", origin="simulated", annotators_per_item=2, blind=True),
    )
    step = queue.items.first().step
    StepAnnotation.objects.create(step=step, author=project.users["researcher"], comment="secret")
    client.force_login(project.users["annotator"])
    page = client.get(reverse("step_annotate", args=[step.pk])).content.decode()  # no ?queue
    assert "secret" not in page and 'id="blind-note"' in page
