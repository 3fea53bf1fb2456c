"""Adjudicating a queue item (researchers and admins): every annotation the queue counts side
by side, with each correction diffed against the model's observation, the custom answers, and
the decision, which picks one annotator's correction, writes the adjudicator's own, or none."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import path
from django.views.decorators.http import require_http_methods

from studio.access import get_project_for_user, signed_in_user
from studio.forms.adjudication import NONE, OWN, AdjudicationForm
from studio.http import HtmxHttpRequest
from studio.models import Adjudication, QueueItem, StepAnnotation
from studio.presenters.diff import meaning_html
from studio.services import queues as queue_service
from studio.services.agreement import AlreadyDecided, OwnItem, adjudicate, item_annotations
from studio.services.diffs import meaning_diff


def _answer_text(value: Any) -> str:
    if value is None or value == "" or value == []:
        return "–"
    if isinstance(value, list):
        return ", ".join(str(v) for v in value)
    return str(value)


def _annotation_rows(item: QueueItem, annotations: list[StepAnnotation]) -> list[dict[str, Any]]:
    """Each annotation as the page shows it: its answers in the queue's question order (by
    label), and its correction's diff against the model's observation."""
    questions = item.queue.questions or []
    rows = []
    for a in annotations:
        answers = a.answers or {}
        rows.append(
            {
                "annotation": a,
                "key": f"a{a.pk}",  # its value in the form's correction choice
                "answers": [
                    (q.get("label") or q.get("key"), _answer_text(answers.get(q.get("key"))))
                    for q in questions
                ],
                "diff": (
                    meaning_html(meaning_diff(item.step.observation, a.corrected_observation))
                    if a.corrected_observation
                    else None
                ),
            }
        )
    return rows


@require_http_methods(["GET", "POST"])
def queue_adjudicate(request: HtmxHttpRequest, item_id: int) -> HttpResponse:
    """Every annotation of a queue item side by side, and the adjudicator's final decision."""
    from inference.judge import DIMENSIONS
    from studio.models import Verdict

    item = get_object_or_404(
        QueueItem.objects.select_related("queue__project", "step__branch__trajectory"), pk=item_id
    )
    _, membership = get_project_for_user(request, item.queue.project_id, edit=True)
    user = signed_in_user(request)
    if (
        item.queue.blind
        and queue_service.may_work(item.queue, user)
        and not queue_service.has_submitted(item.queue, item.step, user)
    ):
        raise PermissionDenied("Submit your own annotation of this item first: the queue is blind.")
    annotations = item_annotations(item)
    form = AdjudicationForm(
        request.POST or None,
        annotations=annotations,
        observation=item.step.observation,
        initial={"correction": NONE, "own_correction": item.step.observation},
    )
    error = ""
    if request.method == "POST":
        if form.is_valid():
            try:
                adjudicate(item, request.user, **form.decision(request.user))
            except AlreadyDecided:
                error = "this item was decided already: the first decision stands"
            except OwnItem:
                error = "you annotated this item: another adjudicator decides it"
            else:
                messages.success(request, "Decided: this is the item's final verdict.")
                return redirect("queue_adjudicate", item_id=item.pk)
        else:
            error = form.first_error()
    decision = (
        Adjudication.objects.filter(item=item)
        .select_related("adjudicator", "correction_by")
        .first()
    )
    return render(
        request,
        "queues/adjudicate.html",
        {
            "project": item.queue.project,
            "membership": membership,
            "item": item,
            "queue": item.queue,
            "trajectory": item.step.branch.trajectory,
            "annotations": annotations,
            "rows": _annotation_rows(item, annotations),
            "questions": item.queue.questions or [],
            "form": form,
            "picked": form["correction"].value() or NONE,
            "own": OWN,
            "decision": decision,
            "decision_diff": (
                meaning_html(meaning_diff(item.step.observation, decision.corrected_observation))
                if decision and decision.corrected_observation
                else None
            ),
            "dimensions": DIMENSIONS,
            "verdicts": Verdict.choices,
            "error": error,
        },
        status=400 if error else 200,
    )


urlpatterns = [
    path("queue-items/<int:item_id>/adjudicate/", queue_adjudicate, name="queue_adjudicate"),
]
