"""Annotation queues: the project's queues (researchers and admins make them from a filter),
a queue's page with its progress (per annotator for its owners), and taking the next item
(a POST: it claims a slot), which opens the step's annotation page in the queue. From an
item, its annotator skips it (it goes to someone else) or flags it for the lead; the lead
(the queue's maker, the project's researchers and admins) clears flags, releases or
reassigns claims, and edits the guidelines and questions."""

from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import path, reverse
from django.views.decorators.http import require_http_methods, require_POST

from studio.access import get_project_for_user, signed_in_user
from studio.forms.annotations import FlagForm, SkipForm
from studio.forms.queues import QueueForm, QueueSetupForm, ReassignForm, format_questions
from studio.http import HtmxHttpRequest
from studio.models import AnnotationQueue, Membership, QueueClaim, QueueItem
from studio.services import queues as service


def get_queue_for_user(request: HtmxHttpRequest, pk: int) -> tuple[AnnotationQueue, Membership]:
    queue = get_object_or_404(AnnotationQueue.objects.select_related("project"), pk=pk)
    _, membership = get_project_for_user(request, queue.project_id)
    return queue, membership


def is_lead(queue: AnnotationQueue, membership: Membership, user) -> bool:
    """Who leads a queue: its maker, and the project's researchers and admins."""
    return membership.can_edit or (
        queue.created_by_id is not None and queue.created_by_id == user.pk
    )


def item_url(queue: AnnotationQueue, step) -> str:
    return reverse("step_annotate", args=[step.pk]) + f"?queue={queue.pk}&branch={step.branch_id}"


def queue_list(request: HtmxHttpRequest, project_id: int) -> HttpResponse:
    project, membership = get_project_for_user(request, project_id)
    user = signed_in_user(request)
    rows = [
        {
            "queue": q,
            "progress": service.progress(q),
            "mine": service.may_work(q, user),
            # flagged items wait for the lead: the count shows to those who lead
            "flagged": QueueClaim.objects.filter(item__queue=q, flagged_at__isnull=False).count()
            if is_lead(q, membership, user)
            else 0,
        }
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
        except service.DuplicateQueueName as exc:  # made since the form checked
            form.add_error("name", str(exc)[0].upper() + str(exc)[1:] + ".")
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
            **_workflow(queue, membership, user),
        },
    )


def _workflow(queue: AnnotationQueue, membership: Membership, user) -> dict:
    """The queue page's guidelines and questions, and for its lead: the flags, the claims
    held now (to release or reassign) and the per-question agreement."""
    from studio.rendering.markdown import render_markdown
    from studio.services.question_agreement import question_agreement

    lead = is_lead(queue, membership, user)
    skips = service.my_skips(queue, user)
    claims = service.claims_for_lead(queue) if lead else {"holding": [], "flagged": []}
    members = ReassignForm(queue=queue).members() if lead else []
    return {
        "lead": lead,
        "guidelines_html": render_markdown(queue.guidelines),
        "questions": queue.questions or [],
        "my_skips": skips,
        # items they have neither done nor skipped (none: nothing left for them)
        "my_left": queue.items.count() - service.my_share(queue, user) - skips,
        "holding_claims": claims["holding"],
        "flagged_claims": claims["flagged"],
        "members": members,
        # like the dimensions' agreement: for owners, who see every item's answers
        "question_rows": question_agreement(queue)
        if membership.can_edit and queue.questions
        else [],
    }


def _judge_vs_human(queue: AnnotationQueue):
    """The judge against people over the queue's items (None: the judge scored none)."""
    from studio.models import StepJudgement
    from studio.services.judging import judge_vs_human

    steps = queue.items.values("step_id")
    if not StepJudgement.objects.filter(step_id__in=steps, ok=True).exists():
        return None
    return judge_vs_human(queue.items.values_list("step_id", flat=True), queue=queue)


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


def _queue_for_lead(request: HtmxHttpRequest, queue_id: int):
    queue, membership = get_queue_for_user(request, queue_id)
    if not is_lead(queue, membership, signed_in_user(request)):
        raise PermissionDenied("Only the queue's lead (its maker, researchers, admins) does this.")
    return queue, membership


def _claim_for_lead(request: HtmxHttpRequest, claim_id: int) -> QueueClaim:
    claim = get_object_or_404(
        QueueClaim.objects.select_related("item__queue__project", "user"), pk=claim_id
    )
    _queue_for_lead(request, claim.item.queue_id)
    return claim


def _item_for_worker(request: HtmxHttpRequest, item_id: int) -> tuple[QueueItem, object]:
    item = get_object_or_404(QueueItem.objects.select_related("queue__project", "step"), pk=item_id)
    get_queue_for_user(request, item.queue_id)
    user = signed_in_user(request)
    if not service.may_work(item.queue, user):
        raise PermissionDenied("This queue is assigned to other annotators.")
    return item, user


@require_http_methods(["GET", "POST"])
def queue_setup(request: HtmxHttpRequest, queue_id: int) -> HttpResponse:
    """The lead edits the queue's guidelines and questions (answers given to a question
    that is then removed stay stored, and are no longer shown)."""
    queue, membership = _queue_for_lead(request, queue_id)
    initial = {"guidelines": queue.guidelines, "questions": format_questions(queue.questions)}
    form = QueueSetupForm(request.POST or None, initial=initial)
    if request.method == "POST" and form.is_valid():
        service.update_setup(
            queue, form.cleaned_data["guidelines"].strip(), form.cleaned_data["questions"]
        )
        messages.success(request, "Saved the guidelines and questions.")
        return redirect("queue_detail", queue_id=queue.pk)
    return render(
        request,
        "queues/setup.html",
        {
            "project": queue.project,
            "membership": membership,
            "queue": queue,
            "form": form,
            "answered": queue.annotations.exclude(answers={}).count(),
        },
        status=400 if form.is_bound else 200,
    )


@require_POST
def item_skip(request: HtmxHttpRequest, item_id: int) -> HttpResponse:
    """The annotator gives the item back (it goes to someone else) and takes the next."""
    item, user = _item_for_worker(request, item_id)
    form = SkipForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Not skipped: the reason is too long.")
        return redirect(item_url(item.queue, item.step))
    try:
        service.skip(item, user, form.cleaned_data["reason"])
    except service.ClaimError as exc:
        messages.error(request, str(exc))
        return redirect(item_url(item.queue, item.step))
    following = service.claim_next(item.queue, user)
    if following is None:
        messages.success(request, "Skipped. Nothing left for you in this queue: thank you.")
        return redirect("queue_detail", queue_id=item.queue_id)
    messages.success(request, "Skipped: someone else will take it. The next item of the queue.")
    return redirect(item_url(item.queue, following.step))


@require_POST
def item_flag(request: HtmxHttpRequest, item_id: int) -> HttpResponse:
    """The annotator flags the item for the queue's lead, and stays on it."""
    item, user = _item_for_worker(request, item_id)
    form = FlagForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Not flagged: the note is too long.")
    else:
        service.flag(item, user, form.cleaned_data["note"])
        messages.success(request, "Flagged for the queue's lead.")
    return redirect(item_url(item.queue, item.step))


@require_POST
def claim_unflag(request: HtmxHttpRequest, claim_id: int) -> HttpResponse:
    claim = _claim_for_lead(request, claim_id)
    service.clear_flag(claim)
    messages.success(request, f"Cleared {claim.user.username}'s flag.")
    return redirect(reverse("queue_detail", args=[claim.item.queue_id]) + "#queue-flags")


@require_POST
def claim_release(request: HtmxHttpRequest, claim_id: int) -> HttpResponse:
    claim = _claim_for_lead(request, claim_id)
    try:
        service.release(claim)
    except service.ClaimError as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"Released {claim.user.username}'s claim: its slot is free.")
    return redirect(reverse("queue_detail", args=[claim.item.queue_id]) + "#queue-claims")


@require_POST
def claim_reassign(request: HtmxHttpRequest, claim_id: int) -> HttpResponse:
    claim = _claim_for_lead(request, claim_id)
    form = ReassignForm(request.POST, queue=claim.item.queue, exclude=claim.user_id)
    if not form.is_valid():
        messages.error(request, "Not reassigned: pick a member who works this queue.")
    else:
        to = form.cleaned_data["user"]
        try:
            service.reassign(claim, to)
        except service.ClaimError as exc:
            messages.error(request, f"Not reassigned: {exc}.")
        else:
            messages.success(request, f"Reassigned to {to.username}: they hold the slot now.")
    return redirect(reverse("queue_detail", args=[claim.item.queue_id]) + "#queue-claims")


urlpatterns = [
    path("projects/<int:project_id>/queues/", queue_list, name="queue_list"),
    path("projects/<int:project_id>/queues/new/", queue_new, name="queue_new"),
    path("queues/<int:queue_id>/", queue_detail, name="queue_detail"),
    path("queues/<int:queue_id>/next/", queue_next, name="queue_next"),
    path("queues/<int:queue_id>/setup/", queue_setup, name="queue_setup"),
    path("queue-items/<int:item_id>/skip/", item_skip, name="queue_item_skip"),
    path("queue-items/<int:item_id>/flag/", item_flag, name="queue_item_flag"),
    path("queue-claims/<int:claim_id>/unflag/", claim_unflag, name="queue_claim_unflag"),
    path("queue-claims/<int:claim_id>/release/", claim_release, name="queue_claim_release"),
    path("queue-claims/<int:claim_id>/reassign/", claim_reassign, name="queue_claim_reassign"),
]
