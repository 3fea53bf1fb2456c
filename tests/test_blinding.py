"""Blind review on every page: while an annotator holds or has not submitted an item of a
blind queue, no page, fragment or download shows them the judge's scores of its steps,
another annotator's annotation of them, or an aggregate of either; once they submit, and for
researchers, annotators of a non-blind queue and annotators the queue is not assigned to,
everything shows. The fixture's distinctive values (tests/support/blind_review.py) are what
must not leak."""

from __future__ import annotations

import pytest
from django.urls import reverse

from studio.models import Membership, Role
from studio.services import blinding
from studio.services.blinding import blindness_for
from studio.services.judging import fidelity, judge_vs_human
from tests.support.blind_review import (
    JUDGE_SECRET,
    OTHER_SECRET,
    SECRETS,
    BlindReview,
    build,
    hold,
    submit,
)

HTMX = {"HTTP_HX_REQUEST": "true"}

SCENARIOS = ("blind", "holding", "submitted", "researcher", "not_blind", "not_assigned")
BLIND = ("blind", "holding")  # not submitted: not taken yet, or held now


@pytest.fixture
def review(project, tmp_path) -> BlindReview:
    return build(project, tmp_path)


def _arrange(project, review: BlindReview, scenario: str):
    """The user whose pages are read, with the state the scenario names."""
    annotator = project.users["annotator"]
    if scenario == "submitted":
        submit(review, annotator)
    elif scenario == "holding":
        hold(review, annotator)
    elif scenario == "not_blind":
        review.queue.blind = False
        review.queue.save(update_fields=["blind"])
    elif scenario == "not_assigned":
        review.queue.assignees.set([review.other])
    return project.users["researcher"] if scenario == "researcher" else annotator


def pages(review: BlindReview) -> dict[str, tuple[str, dict]]:
    """Every page and fragment that could show the queue's steps' scores or annotations."""
    h0, h1 = review.hidden
    traj = review.branch.trajectory_id
    root = review.branch.parent_id
    project = review.queue.project_id
    compare = f"b={root}&b={review.branch.pk}&b={review.visible_branch.pk}"
    return {
        "item": (f"/steps/{h0.pk}/annotate/?queue={review.queue.pk}&branch={h0.branch_id}", {}),
        "step": (f"/steps/{h1.pk}/annotate/", {}),
        "earlier steps fragment": (
            reverse("step_earlier", args=[h1.pk]) + f"?branch={h1.branch_id}",
            HTMX,
        ),
        "trajectory": (reverse("trajectory", args=[traj]) + f"?branch={review.branch.pk}", {}),
        "steps fragment": (
            reverse("trajectory_steps", args=[traj]) + f"?branch={review.branch.pk}&start=0",
            HTMX,
        ),
        "tree": (reverse("branch_tree", args=[traj]), {}),
        "tree fragment": (reverse("branch_tree", args=[traj]), HTMX),
        "compare": (reverse("branch_compare", args=[traj]) + f"?{compare}", {}),
        "compare rows": (
            reverse("branch_compare_rows", args=[traj]) + f"?{compare}&diff=meaning&start=0",
            HTMX,
        ),
        "fidelity": (reverse("branch_fidelity", args=[review.branch.pk]), {}),
        "fidelity of the open branch": (
            reverse("branch_fidelity", args=[review.visible_branch.pk]),
            {},
        ),
        "judge list": (reverse("judge_list", args=[project]), {}),
        "judge job": (reverse("judge_job", args=[review.job.pk]), {}),
        "judge job fragment": (reverse("judge_job", args=[review.job.pk]), HTMX),
        "open judge job": (reverse("judge_job", args=[review.visible_job.pk]), {}),
        "queue list": (reverse("queue_list", args=[project]), {}),
        "queue": (reverse("queue_detail", args=[review.queue.pk]), {}),
        "dataset list": (reverse("dataset_list", args=[project]), {}),
        "dataset": (reverse("dataset_detail", args=[review.version.dataset_id]), {}),
    }


def _read(client, url: str, headers: dict) -> str:
    response = client.get(url, **headers)
    assert response.status_code in (200, 286), (url, response.status_code)  # 286: stop polling
    return response.content.decode()


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_every_page_hides_the_queue_steps_only_from_a_blind_annotator_before_submitting(
    client, project, review, scenario
):
    user = _arrange(project, review, scenario)
    client.force_login(user)
    blind = scenario in BLIND
    read = {name: _read(client, url, h) for name, (url, h) in pages(review).items()}
    if blind:
        for name, html in read.items():
            leaked = [s for s in SECRETS if s in html]
            assert not leaked, f"{name} shows {leaked}"
        for name in ("judge job", "judge job fragment"):
            for step in review.hidden:
                assert f'data-step="{step.pk}"' not in read[name]
            assert "2 steps of the blind queue &#x27;blind pair&#x27; are hidden" in read[name]
        assert 'id="fidelity-hidden"' in read["fidelity"]
        assert "No step of this branch that you may see is judged yet" in read["fidelity"]
        assert 'id="dataset-items-hidden"' in read["dataset"]
        assert 'id="dataset-export-blind"' in read["dataset"]
        # the dataset's counts leave the hidden steps out and say so
        assert ">1</td><td>0</td>" in read["dataset"]  # 1 step shown, 0 corrected
        assert 'id="dataset-versions-hidden"' in read["dataset"]
    else:
        for name in read:
            assert "blind-note" not in read[name] or name in ("item", "step"), name
        assert JUDGE_SECRET in read["item"]
        if scenario in ("submitted", "not_blind"):  # they work the queue: its annotations show
            assert OTHER_SECRET in read["item"]
        assert JUDGE_SECRET in read["step"]
        assert "1.37" in read["judge job"] and "1.13" in read["judge job fragment"]
        assert "1.37" in read["fidelity"]  # the figure's data
        assert "OTHER-CORRECTION" not in read["dataset"]  # the page lists, it does not show
        assert 'title="An annotator' in read["dataset"]  # the corrected item is listed
    # the queue's labels and per-annotator quality are its owners' alone
    for name in ("queue_labels", "queue_annotators"):
        answer = client.get(reverse(name, args=[review.queue.pk]), **HTMX)
        assert answer.status_code == (200 if scenario == "researcher" else 403), name
    # what nobody is kept from: the step outside the queue, its judge score and the branch
    assert "4.62" in read["open judge job"] and "4.62" in read["fidelity of the open branch"]
    assert "open-branch" in read["fidelity"]  # the trajectory's other judged branch


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_exports_of_a_version_holding_hidden_steps_wait_until_the_annotator_submits(
    client, project, review, scenario
):
    user = _arrange(project, review, scenario)
    client.force_login(user)
    download = reverse("dataset_export", args=[review.version.pk]) + "?format=openai"
    stored = reverse("export_download", args=[review.export.pk])
    start = reverse("export_start", args=[review.version.pk])
    page = reverse("export_job", args=[review.export.pk])
    responses = [
        client.get(download),
        client.get(stored),
        client.get(page),
        client.get(page, **HTMX),
    ]
    if scenario in BLIND:
        for response in responses:
            assert response.status_code == 403
            text = response.content.decode()
            assert "hidden from you until you submit" in text and "OTHER-CORRECTION" not in text
        started = client.post(start, {"format": "openai"}, follow=True)
        assert "you can export it once you have submitted them" in started.content.decode()
        assert not review.version.exports.exclude(pk=review.export.pk).exists()
    else:
        for response in responses[:2]:
            assert response.status_code == 200
            body = b"".join(response.streaming_content).decode()
            assert "OTHER-CORRECTION" in body
        for response in responses[2:]:
            assert response.status_code in (200, 286)  # 286: the fragment stops polling
            assert "curated-v1-openai.jsonl" in response.content.decode()


def test_one_blindness_lookup_per_request(client, project, review, monkeypatch):
    calls = []
    real = blinding.hidden_items

    def counted(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(blinding, "hidden_items", counted)
    client.force_login(project.users["annotator"])
    for name in ("fidelity", "judge job", "judge job fragment", "dataset"):
        url, headers = pages(review)[name]
        calls.clear()
        _read(client, url, headers)
        assert len(calls) == 1, name


def test_blindness_covers_held_and_unsubmitted_items_only(project, review):
    annotator = project.users["annotator"]
    membership = Membership.objects.get(project=project, user=annotator)
    found = blindness_for(membership)
    assert found.step_ids == {s.pk for s in review.hidden}
    assert not found.hides(review.visible.pk)
    assert found.note() == (
        "2 steps of the blind queue 'blind pair' are hidden from you until you submit your "
        "annotations of them."
    )
    assert found.note([review.hidden[0].pk, review.visible.pk]).startswith(
        "1 step of the blind queue 'blind pair' is hidden"
    )
    assert found.note([review.visible.pk]) == ""
    # the other annotator submitted both; researchers and admins are never kept blind
    other = Membership.objects.get(project=project, user=review.other)
    assert not blindness_for(other)
    for role in (Role.ADMIN, Role.RESEARCHER):
        assert not blindness_for(Membership.objects.get(project=project, user=project.users[role]))
    # an annotator who submitted one item still may not see the other
    submit_one = review.queue.items.order_by("position").first()
    from django.utils import timezone

    from studio.models import QueueClaim

    QueueClaim.objects.create(
        item=submit_one, user=annotator, expires_at=timezone.now(), done_at=timezone.now()
    )
    assert blindness_for(membership).step_ids == {review.hidden[1].pk}


def test_the_aggregates_leave_hidden_steps_out_and_count_them(project, review):
    membership = Membership.objects.get(project=project, user=project.users["annotator"])
    blindness = blindness_for(membership)
    found = fidelity(review.branch, blindness)
    assert found.judged == 0 and found.totals == [] and set(found.hidden) == set(blindness.step_ids)
    assert fidelity(review.branch).totals == [1.37, 1.13]
    ids = [s.pk for s in review.hidden] + [review.visible.pk]
    versus = judge_vs_human(ids, blindness=blindness)
    assert versus.steps == 1 and set(versus.hidden) == set(blindness.step_ids)
    # with the hidden steps in, the people's ratings (1) and the judge's differ more
    assert judge_vs_human(ids).steps == 3
    by_dim = {r["dimension"]: r for r in versus.rows}
    assert by_dim["realism"]["pairs"] == 1 and by_dim["realism"]["mean_abs_diff"] == 0.0
