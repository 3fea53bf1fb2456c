"""The annotation workflow a lead expects, in-process: each queue asks anew (annotations are
the queue's own, earlier ones shown only in a non-blind queue and labelled), skip (the item
goes to someone else), flag for the lead, release and reassign, per-annotator progress, the
item's context, guidelines in safe Markdown and custom questions with their answers and
agreement; and the "simulated futures" filter that takes edited futures too."""

from __future__ import annotations

import pytest
from django.urls import reverse

from studio.forms.queues import parse_questions
from studio.models import Membership, QueueClaim, Role, StepAnnotation, StepJudgement
from studio.rendering.markdown import render_markdown
from studio.services import annotations as annotations_service
from studio.services import queues as service
from studio.services.question_agreement import question_agreement
from studio.services.questions import validate_answers, validate_questions
from studio.services.queues import QueueData
from tests.support.branching import make_child
from tests.support.branching import make_trajectory as make_branching

QUESTIONS = [
    {"key": "clarity", "label": "How clear is it?", "kind": "scale", "min": 1, "max": 5,
     "required": True},
    {"key": "safety", "label": "Is it safe?", "kind": "single", "options": ["safe", "unsafe"]},
    {"key": "issues", "label": "Which issues?", "kind": "multi",
     "options": ["typo", "wrong value", "missing field"]},
    {"key": "notes", "label": "Anything else?", "kind": "text"},
]  # fmt: skip


@pytest.fixture
def futures(project):
    trajectory, root = make_branching(project)
    make_child(root, 2, ["simulated A", "simulated A+1"])
    make_child(root, 2, ["simulated B"], sample_index=1)
    return trajectory, root


@pytest.fixture
def second_annotator(project, make_user):
    user = make_user("annotator2")
    Membership.objects.create(project=project, user=user, role=Role.ANNOTATOR)
    return user


def queue_of(project, **kw):
    data = {"name": "q", "origin": "simulated", **kw}
    return service.create_queue(project, project.users["researcher"], QueueData(**data))


def item_url(queue, item):
    return reverse("step_annotate", args=[item.step_id]) + f"?queue={queue.pk}"


@pytest.mark.django_db
def test_the_simulated_filter_takes_edited_futures_and_edited_takes_theirs(project):
    _, root = make_branching(project)
    replayed = make_child(root, 2, ["sim"])
    edited = make_child(root, 1, ["edited 1", "edited 2"], origin="edited", action="ls -la")
    onward = make_child(edited, 2, ["simulated on from the edit"], sample_index=1)
    simulated = service.steps_for(project, QueueData(name="s", origin="simulated"))
    assert set(simulated.values_list("branch_id", flat=True)) == {replayed.pk, edited.pk, onward.pk}
    assert simulated.count() == 4
    edits = service.steps_for(project, QueueData(name="e", origin="edited"))
    assert set(edits.values_list("branch_id", flat=True)) == {edited.pk, onward.pk}
    recorded = service.steps_for(project, QueueData(name="r", origin="recorded"))
    assert set(recorded.values_list("branch_id", flat=True)) == {root.pk}


@pytest.mark.django_db
def test_each_queue_asks_anew_and_shows_earlier_annotations_only_when_not_blind(
    client, project, futures
):
    ann, res = project.users["annotator"], project.users["researcher"]
    first = queue_of(project, name="first round", annotators_per_item=2)
    step = first.items.first().step
    client.force_login(res)
    client.post(item_url(first, first.items.first()),
                {"rating_format": "2", "comment": "first-round note", "queue": first.pk})  # fmt: skip
    client.post(reverse("step_annotate", args=[step.pk]), {"comment": "outside note"})
    assert StepAnnotation.objects.filter(step=step, author=res).count() == 2
    assert StepAnnotation.objects.get(step=step, author=res, queue=None).comment == "outside note"
    second = queue_of(project, name="second round", annotators_per_item=2)
    client.force_login(ann)
    page = client.get(item_url(second, second.items.get(step=step))).content.decode()
    assert 'id="earlier-annotations"' in page
    assert "earlier, in the queue first round" in page and "first-round note" in page
    assert "earlier, outside any queue" in page and "outside note" in page
    # the same step in this queue is a fresh annotation: none of the earlier ones is "mine"
    saved = client.post(item_url(second, second.items.get(step=step)),
                        {"rating_format": "5", "queue": second.pk})  # fmt: skip
    assert saved.status_code == 302
    mine = StepAnnotation.objects.get(step=step, author=ann, queue=second)
    assert mine.ratings == {"format": 5} and mine.versions.count() == 1
    assert not StepAnnotation.objects.filter(step=step, author=ann, queue=first).exists()
    # a blind queue asks anew: no earlier annotation shows, even after one's own is in
    blind = queue_of(project, name="blind round", annotators_per_item=2, blind=True)
    item = blind.items.get(step=step)
    client.post(item_url(blind, item), {"rating_format": "3", "queue": blind.pk})
    page = client.get(item_url(blind, item)).content.decode()
    assert 'id="earlier-annotations"' not in page and "first-round note" not in page
    assert 'id="earlier-hidden"' in page
    # the step's own page keeps its outside-queue annotations apart from the queues'
    page = client.get(reverse("step_annotate", args=[step.pk])).content.decode()
    assert "outside note" in page and "in the queue second round" in page
    assert service.complete(second, step, ann)


@pytest.mark.django_db
def test_annotations_made_before_queues_count_as_outside_any_queue(client, project, futures):
    """Rows from before per-queue annotations have queue NULL: the step's own page edits
    them; a queue asks anew."""
    ann = project.users["annotator"]
    queue = queue_of(project)
    step = queue.items.first().step
    old = StepAnnotation.objects.create(step=step, author=ann, ratings={"format": 1})
    client.force_login(ann)
    client.post(reverse("step_annotate", args=[step.pk]), {"rating_format": "2"})
    old.refresh_from_db()
    assert old.ratings == {"format": 2}
    client.post(item_url(queue, queue.items.first()), {"rating_format": "4", "queue": queue.pk})
    assert StepAnnotation.objects.filter(step=step, author=ann).count() == 2


@pytest.mark.django_db
def test_a_skipped_item_goes_to_someone_else(client, project, futures, second_annotator):
    ann = project.users["annotator"]
    queue = queue_of(project, annotators_per_item=1)
    first = service.claim_next(queue, ann)
    client.force_login(ann)
    page = client.get(item_url(queue, first)).content.decode()
    assert 'id="skip-form"' in page and 'id="flag-form"' in page
    skipped = client.post(
        reverse("queue_item_skip", args=[first.pk]), {"reason": "I do not know this shell"}
    )
    assert skipped.status_code == 302 and f"queue={queue.pk}" in skipped["Location"]
    claim = QueueClaim.objects.get(item=first, user=ann)
    assert claim.skipped_at is not None and claim.skip_reason == "I do not know this shell"
    # the skipper goes on to the next item and is never offered the skipped one again
    following = service.claim_next(queue, ann)
    assert following is not None and following != first
    assert f"/steps/{following.step_id}/" in skipped["Location"]
    service.complete(queue, following.step, ann)
    last = service.claim_next(queue, ann)
    assert last not in (None, first)
    service.complete(queue, last.step, ann)
    assert service.claim_next(queue, ann) is None
    # its slot is free: the other annotator gets it
    assert service.claim_next(queue, second_annotator) == first
    progress = {row["user"]: row for row in service.progress(queue).per_annotator}
    assert progress["annotator"]["skipped"] == 1 and progress["annotator"]["done"] == 2
    assert progress["annotator2"]["holding"] == 1
    client.force_login(ann)
    page = client.get(reverse("queue_detail", args=[queue.pk])).content.decode()
    assert "1 skipped by you" in page and 'id="queue-all-done"' in page
    assert "annotated or skipped every item" in page
    # a done item cannot be skipped
    refused = client.post(reverse("queue_item_skip", args=[following.pk]), {"reason": "x"})
    assert refused.status_code == 302
    assert QueueClaim.objects.get(item=following, user=ann).skipped_at is None


@pytest.mark.django_db
def test_a_flag_shows_to_the_lead_with_its_note_and_is_cleared(client, project, futures):
    ann = project.users["annotator"]
    queue = queue_of(project)
    item = service.claim_next(queue, ann)
    client.force_login(ann)
    flagged = client.post(
        reverse("queue_item_flag", args=[item.pk]), {"note": "the <b>output</b> is cut off"}
    )
    assert flagged.status_code == 302 and f"/steps/{item.step_id}/" in flagged["Location"]
    claim = QueueClaim.objects.get(item=item, user=ann)
    assert claim.flagged_at is not None and service.holding(claim)  # still theirs
    page = client.get(reverse("queue_detail", args=[queue.pk])).content.decode()
    assert 'id="queue-flags"' not in page  # the annotator is not the lead
    assert client.post(reverse("queue_claim_unflag", args=[claim.pk])).status_code == 403
    client.force_login(project.users["researcher"])
    page = client.get(reverse("queue_detail", args=[queue.pk])).content.decode()
    assert 'id="queue-flags"' in page
    assert "the &lt;b&gt;output&lt;/b&gt; is cut off" in page  # escaped
    listing = client.get(reverse("queue_list", args=[project.pk])).content.decode()
    assert "1 flagged" in listing
    client.post(reverse("queue_claim_unflag", args=[claim.pk]))
    claim.refresh_from_db()
    assert claim.flagged_at is None and claim.flag_note == ""
    page = client.get(reverse("queue_detail", args=[queue.pk])).content.decode()
    assert "No item is flagged." in page


@pytest.mark.django_db
def test_the_lead_releases_and_reassigns_claims(client, project, futures, second_annotator):
    ann = project.users["annotator"]
    queue = queue_of(project, annotators_per_item=1)
    item = service.claim_next(queue, ann)
    claim = QueueClaim.objects.get(item=item, user=ann)
    client.force_login(ann)
    assert client.post(reverse("queue_claim_release", args=[claim.pk])).status_code == 403
    client.force_login(project.users["researcher"])
    page = client.get(reverse("queue_detail", args=[queue.pk])).content.decode()
    assert 'id="queue-claims"' in page and "annotator2" in page
    client.post(reverse("queue_claim_release", args=[claim.pk]))
    claim.refresh_from_db()
    assert not service.holding(claim)
    assert service.claim_next(queue, second_annotator) == item  # the slot is free
    # reassign: the second annotator's slot to the first
    theirs = QueueClaim.objects.get(item=item, user=second_annotator)
    moved = client.post(reverse("queue_claim_reassign", args=[theirs.pk]), {"user": ann.pk})
    assert moved.status_code == 302
    theirs.refresh_from_db()
    claim.refresh_from_db()
    assert not service.holding(theirs) and service.holding(claim)
    assert service.claim_next(queue, ann) == item  # offered to them first
    assert service.claim_next(queue, second_annotator) != item
    # not to someone outside the project
    outsider_pick = client.post(
        reverse("queue_claim_reassign", args=[claim.pk]), {"user": project.outsider.pk}
    )
    assert outsider_pick.status_code == 302
    claim.refresh_from_db()
    assert service.holding(claim)
    client.force_login(project.outsider)
    assert client.post(reverse("queue_claim_release", args=[claim.pk])).status_code == 404


def test_questions_are_validated_naming_the_question():
    found = validate_questions(QUESTIONS)
    assert [q["kind"] for q in found] == ["scale", "single", "multi", "text"]
    assert found[0]["required"] and not found[1]["required"]
    for bad, words in [
        ([{"key": "x", "kind": "scale", "min": 3, "max": 2}], "question 'x': the scale"),
        ([{"key": "y", "kind": "single", "options": ["only"]}], "question 'y': a single choice"),
        ([{"key": "z", "kind": "poll"}], "question 'z': the kind must be"),
        ([{"key": "Bad Key", "kind": "text"}], "the key must be"),
        ([{"key": "a", "kind": "text"}, {"key": "a", "kind": "text"}], "two questions"),
        ([{"key": "verdict", "kind": "text"}], "annotation's own fields"),
    ]:
        with pytest.raises(ValueError, match=words):
            validate_questions(bad)
    assert validate_answers(found, {"clarity": "4", "issues": ["missing field", "typo"]}) == {
        "clarity": 4,
        "issues": ["typo", "missing field"],
    }
    with pytest.raises(ValueError, match="question 'How clear is it\\?' is required"):
        validate_answers(found, {"safety": "safe"})
    with pytest.raises(ValueError, match="must be 1-5, got 7"):
        validate_answers(found, {"clarity": "7"})
    with pytest.raises(ValueError, match="'maybe' is not one of its options"):
        validate_answers(found, {"clarity": 2, "safety": "maybe"})
    assert parse_questions("scale* clarity 1-5: How clear is it?\ntext notes: Anything else?")[
        0
    ] == {**found[0], "options": [], "min": 1, "max": 5}


def test_guidelines_markdown_runs_no_script_and_keeps_only_safe_links():
    html = str(
        render_markdown(
            "# Read me\n<script>alert(1)</script> <img src=x onerror=alert(2)>\n"
            "[bad](javascript:alert(3)) [worse](JAVASCRIPT:alert(4)) [data](data:text/html,x) "
            "[good](https://example.org/guide) [mail](mailto:lead@example.org) [here](/queues/1/)"
        )
    )
    assert "<h1>Read me</h1>" in html
    assert "<script" not in html and "&lt;script&gt;" in html
    assert "<img" not in html
    assert 'href="javascript' not in html.lower() and 'href="data:' not in html
    assert 'href="https://example.org/guide"' in html and 'href="mailto:lead@example.org"' in html
    assert 'href="/queues/1/"' in html and 'rel="noopener noreferrer nofollow"' in html


@pytest.mark.django_db
def test_custom_answers_are_stored_validated_shown_and_agreed_on(
    client, project, futures, second_annotator
):
    ann = project.users["annotator"]
    queue = queue_of(project, annotators_per_item=2, questions=tuple(validate_questions(QUESTIONS)))
    items = list(queue.items.all())
    client.force_login(ann)
    page = client.get(item_url(queue, items[0])).content.decode()
    assert 'data-name="q_clarity"' in page and "Which issues?" in page
    missing = client.post(item_url(queue, items[0]), {"rating_format": "4", "queue": queue.pk})
    assert missing.status_code == 400
    assert "question &#x27;How clear is it?&#x27; is required" in missing.content.decode()
    answers = [
        (ann, items[0], {"q_clarity": "4", "q_safety": "safe", "q_issues": ["typo"]}),
        (second_annotator, items[0], {"q_clarity": "4", "q_safety": "safe", "q_issues": ["typo"]}),
        (ann, items[1], {"q_clarity": "2", "q_safety": "unsafe", "q_notes": "odd <b>"}),
        (second_annotator, items[1], {"q_clarity": "1", "q_safety": "safe"}),
    ]
    for user, item, given in answers:
        client.force_login(user)
        saved = client.post(item_url(queue, item), {**given, "queue": queue.pk})
        assert saved.status_code == 302
    note = StepAnnotation.objects.get(step=items[1].step, author=ann, queue=queue)
    assert note.answers == {"clarity": 2, "safety": "unsafe", "notes": "odd <b>"}
    assert note.versions.get().state["answers"] == note.answers
    found = service.question_answers(queue)
    assert found[items[0].pk] == {
        ann.pk: {"clarity": 4, "safety": "safe", "issues": ["typo"]},
        second_annotator.pk: {"clarity": 4, "safety": "safe", "issues": ["typo"]},
    }
    rows = {r.key: r for r in question_agreement(queue)}
    assert (rows["safety"].value, rows["safety"].pairs) == (0.5, 2)
    assert (rows["issues"].value, rows["issues"].pairs) == (1.0, 1)
    assert rows["clarity"].measure == "alpha" and rows["clarity"].value is not None
    assert rows["notes"].value is None and "not compared" in rows["notes"].note
    # the queue is not blind: the other's answers show beside one's own, escaped
    page = client.get(item_url(queue, items[1])).content.decode()
    assert "Anything else?: <strong>odd &lt;b&gt;</strong>" in page
    client.force_login(project.users["researcher"])
    page = client.get(reverse("queue_detail", args=[queue.pk])).content.decode()
    assert 'id="question-agreement-safety">50% of 2 pairs agree' in page


@pytest.mark.django_db
def test_queue_made_and_edited_with_guidelines_and_questions(client, project, futures):
    client.force_login(project.users["researcher"])
    made = client.post(
        reverse("queue_new", args=[project.pk]),
        {"name": "guided", "annotators_per_item": 1, "claim_minutes": 30, "limit": 5,
         "origin": "simulated", "guidelines": "**Read** the task first.\n<script>x</script>",
         "questions": "single* safety [safe, unsafe]: Is it safe?"},
    )  # fmt: skip
    assert made.status_code == 302
    queue = service.AnnotationQueue.objects.get(name="guided")
    assert queue.questions[0]["options"] == ["safe", "unsafe"] and queue.questions[0]["required"]
    page = client.get(reverse("queue_detail", args=[queue.pk])).content.decode()
    assert "<strong>Read</strong> the task first." in page and "<script>x" not in page
    bad = client.post(reverse("queue_new", args=[project.pk]),
                      {"name": "b", "annotators_per_item": 1, "claim_minutes": 30, "limit": 5,
                       "questions": "scale clarity 3-1: backwards"})  # fmt: skip
    assert bad.status_code == 400 and "question &#x27;clarity&#x27;" in bad.content.decode()
    setup = reverse("queue_setup", args=[queue.pk])
    assert "single* safety [safe, unsafe]: Is it safe?" in client.get(setup).content.decode()
    client.post(setup, {"guidelines": "New rules", "questions": "text notes: Notes?"})
    queue.refresh_from_db()
    assert queue.guidelines == "New rules" and queue.questions[0]["kind"] == "text"
    client.force_login(project.users["annotator"])
    assert client.get(setup).status_code == 403


@pytest.mark.django_db
def test_the_item_page_gives_the_context_and_hides_the_judge_while_blind(client, project, futures):
    trajectory, root = futures
    queue = queue_of(project, annotators_per_item=2, blind=True, guidelines="Be *strict*.")
    item = queue.items.order_by("position").first()  # step 2 of the first future
    step = item.step
    step.meta = {"world": {"name": "Fictional shell", "version": 2}}
    step.save(update_fields=["meta"])
    StepJudgement.objects.create(
        step=step, judge_model="judge-x", scores={"realism": 2}, total_score=2.0
    )
    client.force_login(project.users["annotator"])
    page = client.get(item_url(queue, item)).content.decode()
    assert "Check the project." in page  # the task
    assert 'id="earlier-steps"' in page and "cat README.md" in page  # step 1, earlier
    assert "Fictional shell" in page  # the world that shaped it
    assert "<em>strict</em>" in page and 'id="guidelines" open' in page
    assert "judge-x" not in page and 'id="judge-total"' not in page  # blind
    # the recorded reference shows for a step simulated outside a world
    step.meta = {}
    step.save(update_fields=["meta"])
    page = client.get(item_url(queue, item)).content.decode()
    assert 'id="reference-observation"' in page
    assert root.steps.get(index=2).observation in page
    client.post(item_url(queue, item), {"rating_format": "3", "queue": queue.pk})
    page = client.get(item_url(queue, item)).content.decode()
    assert "judge-x" in page  # submitted: it shows now
    assert 'id="guidelines" open' not in page  # collapsed after the first item


@pytest.mark.django_db
def test_a_long_trajectory_loads_the_earlier_steps_when_opened(client, project):
    steps = [(f"echo {i}", f"out {i}") for i in range(45)]
    trajectory, root = make_branching(project, steps=steps)
    step = root.steps.get(index=40)
    client.force_login(project.users["annotator"])
    page = client.get(reverse("step_annotate", args=[step.pk])).content.decode()
    assert "The 40 earlier steps" in page and 'hx-trigger="toggle once from:#earlier-steps"' in page
    assert "echo 3<" not in page
    url = reverse("step_earlier", args=[step.pk]) + f"?branch={root.pk}"
    assert client.get(url).status_code == 404  # a fragment only
    fragment = client.get(url, headers={"HX-Request": "true"}).content.decode()
    assert "echo 0" in fragment and "echo 39" in fragment and "echo 40" not in fragment
    assert not StepAnnotation.objects.exists()  # the pages wrote nothing


def test_annotation_data_carries_answers():
    data = annotations_service.AnnotationData.build(
        {"q_clarity": "3"}, "", validate_questions(QUESTIONS)
    )
    assert data.answers == {"clarity": 3} and not data.empty
