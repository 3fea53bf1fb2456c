"""Annotation queues: the project's queues (researchers and admins make them from a filter),
a queue's page with its progress (per annotator for its owners), and taking the next item
(a POST: it claims a slot), which opens the step's annotation page in the queue."""

from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import path, reverse
from django.views.decorators.http import require_http_methods, require_POST

from studio.access import get_project_for_user, signed_in_user
from studio.forms.queues import QueueForm
from studio.http import HtmxHttpRequest
from studio.models import AnnotationQueue, Membership
from studio.services import queues as service


def get_queue_for_user(request: HtmxHttpRequest, pk: int) -> tuple[AnnotationQueue, Membership]:
    queue = get_object_or_404(AnnotationQueue.objects.select_related("project"), pk=pk)
    _, membership = get_project_for_user(request, queue.project_id)
    return queue, membership


def item_url(queue: AnnotationQueue, step) -> str:
    return reverse("step_annotate", args=[step.pk]) + f"?queue={queue.pk}&branch={step.branch_id}"


def queue_list(request: HtmxHttpRequest, project_id: int) -> HttpResponse:
    project, membership = get_project_for_user(request, project_id)
    user = signed_in_user(request)
    rows = [
        {"queue": q, "progress": service.progress(q), "mine": service.may_work(q, user)}
        for q in AnnotationQueue.objects.filter(project=project)
    ]
    return render(
        request,
        "queues/list.html",
        {
            "project": project,
            "membership": membership,
            "rows": rows,
            "can_edit": membership.can_edit,
        },
    )


@require_http_methods(["GET", "POST"])
def queue_new(request: HtmxHttpRequest, project_id: int) -> HttpResponse:
    project, membership = get_project_for_user(request, project_id, edit=True)
    form = QueueForm(
        request.POST or None, project=project, initial={"branches": request.GET.get("branches", "")}
    )
    if request.method == "POST" and form.is_valid():
        try:
            queue = service.create_queue(project, request.user, form.data_object())
        except ValueError as exc:
            form.add_error(None, str(exc))
        else:
            return redirect("queue_detail", queue_id=queue.pk)
    return render(
        request,
        "queues/new.html",
        {"project": project, "membership": membership, "form": form},
        status=400 if form.is_bound else 200,
    )


def queue_detail(request: HtmxHttpRequest, queue_id: int) -> HttpResponse:
    from studio.services.agreement import agreement

    queue, membership = get_queue_for_user(request, queue_id)
    user = signed_in_user(request)
    found = agreement(queue) if membership.can_edit else None
    items = {}
    if found:
        chosen = queue.items.filter(pk__in=[d["item"] for d in found.disputed])
        items = {i.pk: i for i in chosen.select_related("step")}
        if queue.blind and service.may_work(queue, user):
            # a blind queue's worker sees no one's verdicts on an item before their own
            found.disputed = [
                d
                for d in found.disputed
                if service.has_submitted(queue, items[d["item"]].step, user)
            ]
    return render(
        request,
        "queues/detail.html",
        {
            "project": queue.project,
            "membership": membership,
            "queue": queue,
            "progress": service.progress(queue),
            "mine": service.may_work(queue, user),
            "my_share": service.my_share(queue, user),
            "owner": membership.can_edit,
            "agreement": found,
            "alpha_rows": list(found.alpha.items()) if found else [],
            "disputed": [{**d, "item": items[d["item"]]} for d in found.disputed] if found else [],
            "versus": _judge_vs_human(queue) if membership.can_edit else None,
        },
    )


def _judge_vs_human(queue: AnnotationQueue):
    """The judge against people over the queue's items (None: the judge scored none)."""
    from studio.models import StepJudgement
    from studio.services.judging import judge_vs_human

    steps = queue.items.values("step_id")
    if not StepJudgement.objects.filter(step_id__in=steps, ok=True).exists():
        return None
    return judge_vs_human(queue.items.values_list("step_id", flat=True))


@require_http_methods(["GET", "POST"])
def queue_adjudicate(request: HtmxHttpRequest, item_id: int) -> HttpResponse:
    """Every annotation of a queue item side by side, and the adjudicator's final decision."""
    from inference.judge import DIMENSIONS
    from studio.models import Adjudication, QueueClaim, QueueItem, StepAnnotation, Verdict
    from studio.services.agreement import AlreadyDecided, OwnItem, adjudicate

    item = get_object_or_404(QueueItem.objects.select_related("queue__project", "step"), pk=item_id)
    _, membership = get_project_for_user(request, item.queue.project_id, edit=True)
    user = signed_in_user(request)
    if (
        item.queue.blind
        and service.may_work(item.queue, user)
        and not service.has_submitted(item.queue, item.step, user)
    ):
        raise PermissionDenied("Submit your own annotation of this item first: the queue is blind.")
    error = ""
    if request.method == "POST":
        verdict = request.POST.get("verdict", "")
        ratings = {}
        for dim in DIMENSIONS:
            raw = request.POST.get(f"rating_{dim}", "")
            if raw.isdigit() and 1 <= int(raw) <= 5:
                ratings[dim] = int(raw)
            elif raw:
                error = f"the {dim} rating must be 1-5"
        if verdict not in Verdict.values:
            error = error or "pick the final verdict"
        if not error:
            try:
                adjudicate(
                    item, request.user, verdict, ratings, request.POST.get("note", "").strip()
                )
            except AlreadyDecided:
                error = "this item was decided already: the first decision stands"
            except OwnItem:
                error = "you annotated this item: another adjudicator decides it"
            else:
                messages.success(request, "Decided: this is the item's final verdict.")
                return redirect("queue_adjudicate", item_id=item.pk)
    return render(
        request,
        "queues/adjudicate.html",
        {
            "project": item.queue.project,
            "membership": membership,
            "item": item,
            "queue": item.queue,
            "trajectory": item.step.branch.trajectory,
            # the annotations the queue counts: those of the annotators who completed the item
            "annotations": StepAnnotation.objects.filter(
                step=item.step,
                author__in=QueueClaim.objects.filter(item=item, done_at__isnull=False).values(
                    "user"
                ),
            ).select_related("author"),
            "decision": Adjudication.objects.filter(item=item)
            .select_related("adjudicator")
            .first(),
            "dimensions": DIMENSIONS,
            "verdicts": Verdict.choices,
            "error": error,
        },
        status=400 if error else 200,
    )


@require_POST
def queue_next(request: HtmxHttpRequest, queue_id: int) -> HttpResponse:
    queue, _ = get_queue_for_user(request, queue_id)
    user = signed_in_user(request)
    if not service.may_work(queue, user):
        raise PermissionDenied("This queue is assigned to other annotators.")
    item = service.claim_next(queue, user)
    if item is None:
        messages.success(request, "Nothing left for you in this queue: thank you.")
        return redirect("queue_detail", queue_id=queue.pk)
    return redirect(item_url(queue, item.step))


urlpatterns = [
    path("projects/<int:project_id>/queues/", queue_list, name="queue_list"),
    path("projects/<int:project_id>/queues/new/", queue_new, name="queue_new"),
    path("queues/<int:queue_id>/", queue_detail, name="queue_detail"),
    path("queues/<int:queue_id>/next/", queue_next, name="queue_next"),
    path("queue-items/<int:item_id>/adjudicate/", queue_adjudicate, name="queue_adjudicate"),
]
