"""Rollout campaigns on the web: the project's campaigns (every member), the form that starts
one (researchers and admins), a campaign's page (its settings, progress, tokens and cost per
model, results by task and arm with figures; htmx polls its live part and stops when it
ends), and its actions (researchers and admins): Cancel, Resume, judge its simulated steps,
and make an annotation queue or a dataset of its episodes."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.db.models import Count, Q
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.template.loader import render_to_string
from django.urls import path
from django.views.decorators.http import require_http_methods, require_POST
from django_htmx.http import HttpResponseStopPolling

from inference.simulation.request import InvalidRequest
from studio.access import get_project_for_user, require_edit
from studio.forms.campaigns import CampaignDatasetForm, CampaignForm, CampaignQueueForm
from studio.forms.judging import JudgeForm
from studio.forms.refusals import show_refusal
from studio.http import HtmxHttpRequest
from studio.models import (
    Campaign,
    CampaignEpisode,
    EndpointRole,
    JudgeJob,
    JudgeTarget,
    Membership,
    ModelEndpoint,
    SlotStatus,
)
from studio.presenters import campaigns as present
from studio.services import campaigns as service
from studio.services import episode_selection
from studio.services import judging as judging_service
from studio.services.job_limits import TooManyJobs
from studio.tasks import enqueue_campaign, enqueue_judging

MAX_EPISODE_ROWS = 1000  # the episodes table; the figures count every episode
ANNOTATOR_REFUSAL = "Annotators can see campaigns and their results but not run them."
# which episodes a queue or dataset was made of, in its description
WHICH_WORDS = {
    "failed": "those not a success or failed with an error",
    "success": "the successful ones",
    "all": "all of them",
}


def _get_campaign_for_user(
    request: HtmxHttpRequest, pk: int, *, edit: bool = False
) -> tuple[Campaign, Membership]:
    campaign = get_object_or_404(Campaign.objects.select_related("project"), pk=pk)
    _, membership = get_project_for_user(request, campaign.project_id)
    if edit:
        require_edit(membership, ANNOTATOR_REFUSAL)
    return campaign, membership


def campaign_list(request: HtmxHttpRequest, project_id: int) -> HttpResponse:
    project, membership = get_project_for_user(request, project_id)
    slots = {
        key: Count("episodes", filter=Q(episodes__status=status))
        for key, status in (
            ("n_ended", SlotStatus.DONE),
            ("n_failed", SlotStatus.FAILED),
            ("n_cancelled", SlotStatus.CANCELLED),
        )
    }
    campaigns = list(Campaign.objects.filter(project=project).annotate(**slots)[:200])
    for c in campaigns:
        c.status_text = present.status_text(c)  # type: ignore[attr-defined]
        c.played = c.n_ended + c.n_failed + c.n_cancelled  # type: ignore[attr-defined]
    return render(
        request,
        "campaigns/list.html",
        {
            "project": project,
            "membership": membership,
            "campaigns": campaigns,
            "can_edit": membership.can_edit,
        },
    )


@require_http_methods(["GET", "POST"])
def campaign_new(request: HtmxHttpRequest, project_id: int) -> HttpResponse:
    project, membership = get_project_for_user(request, project_id)
    require_edit(membership, ANNOTATOR_REFUSAL)
    form = CampaignForm(
        request.POST if request.method == "POST" else None,
        request.FILES if request.method == "POST" else None,
        project=project,
    )
    if request.method == "GET":
        form.preselect_world(request.GET.get("world"))
    status = 200
    if request.method == "POST":
        status = 400
        if form.is_valid():
            try:
                campaign = service.create_campaign(project, request.user, form.data_object())
            except InvalidRequest as exc:  # past a limit of the installation (jobs at once)
                status = show_refusal(form, exc)
            except service.CampaignError as exc:
                form.add_error(_field_of(str(exc), form), _sentence(str(exc)))
            else:
                enqueue_campaign(campaign)
                messages.success(
                    request,
                    f"Started campaign {campaign.name!r}: "
                    f"{present.plural(campaign.episodes_total, 'episode')}.",
                )
                return redirect("campaign_page", campaign_id=campaign.pk)
    return render(
        request,
        "campaigns/new.html",
        {
            "project": project,
            "membership": membership,
            "form": form,
            "is_admin": membership.role == "admin",
        },
        status=status,
    )


# The field a service's message names first ("max steps: ...") on the form
FIELD_OF_PREFIX = {
    "name": "name",
    "world": "world",
    "agent model": "agent",
    "world model": "world_model",
    "episodes per task": "episodes_per_task",
    "max steps": "max_steps",
    "perturbations": "perturbations",
    "concurrency": "concurrency",
    "temperature": "temperature",
    "max tokens": "max_tokens",
    "seed": "seed",
}
TASK_FIELD_OF_SOURCE = {
    "world": "task_ids",
    "typed": "tasks_text",
    "file": "tasks_file",
    "trajectories": "trajectory_tag",
}


def _field_of(message: str, form: CampaignForm) -> str | None:
    """The form field a CampaignError is about, from the words it starts with (None: the
    form's own errors, at its top)."""
    head = message.split(":", 1)[0].strip().lower()
    if head in FIELD_OF_PREFIX:
        return FIELD_OF_PREFIX[head]
    if head.startswith("tasks") or head.startswith("trajectories"):
        return TASK_FIELD_OF_SOURCE.get(form.cleaned_data.get("source", ""), None)
    if " episodes, more than " in message:  # tasks x episodes x arms past the limit
        return "episodes_per_task"
    return None


def _sentence(message: str) -> str:
    message = message[:1].upper() + message[1:]
    return message if message.endswith(".") else message + "."


def _judges(campaign: Campaign):
    return ModelEndpoint.objects.filter(
        project_id=campaign.project_id, role=EndpointRole.JUDGE, kind="openai"
    ).order_by("-is_default", "name")


def _campaign_context(
    campaign: Campaign,
    membership: Membership,
    *,
    queue_form: CampaignQueueForm | None = None,
    dataset_form: CampaignDatasetForm | None = None,
) -> dict[str, Any]:
    results = service.results(campaign)
    slots = list(
        CampaignEpisode.objects.filter(campaign=campaign).order_by("task_index", "arm", "repeat")[
            :MAX_EPISODE_ROWS
        ]
    )
    judge_job = (
        JudgeJob.objects.filter(pk=campaign.judge_job_id).first() if campaign.judge_job_id else None
    )
    can_resume = service.resumable(campaign)
    view = present.campaign_view(campaign, results, can_resume=can_resume)
    return {
        "project": campaign.project,
        "membership": membership,
        "campaign": campaign,
        "done": campaign.is_finished,
        "can_edit": membership.can_edit,
        "status_text": present.status_text(campaign),
        "can_cancel": not campaign.is_finished,
        "can_resume": can_resume,
        "episodes": present.episode_rows(campaign, slots),
        "episodes_shown": len(slots),
        "judge_job": judge_job,
        "judges": list(_judges(campaign)),
        "queue_form": queue_form or CampaignQueueForm(campaign=campaign),
        "dataset_form": dataset_form or CampaignDatasetForm(campaign=campaign),
        **view,
    }


def campaign_page(request: HtmxHttpRequest, campaign_id: int) -> HttpResponse:
    campaign, membership = _get_campaign_for_user(request, campaign_id)
    context = _campaign_context(campaign, membership)
    if request.htmx:
        html = render_to_string("campaigns/campaign.html#live", context, request=request)
        # the campaign's error sits at the top of the page, outside the part polled
        html += render_to_string(
            "campaigns/campaign.html#top", {**context, "oob": True}, request=request
        )
        return HttpResponseStopPolling(html) if context["done"] else HttpResponse(html)
    return render(request, "campaigns/campaign.html", context)


@require_POST
def campaign_cancel(request: HtmxHttpRequest, campaign_id: int) -> HttpResponse:
    campaign, _ = _get_campaign_for_user(request, campaign_id, edit=True)
    if campaign.is_finished:
        messages.error(
            request, f"Campaign {campaign.pk} has already ended ({present.status_text(campaign)})."
        )
    else:
        service.cancel_campaign(campaign)
        messages.success(request, "Stopping the campaign: the episodes already played are kept.")
    return redirect("campaign_page", campaign_id=campaign.pk)


@require_POST
def campaign_resume(request: HtmxHttpRequest, campaign_id: int) -> HttpResponse:
    campaign, _ = _get_campaign_for_user(request, campaign_id, edit=True)
    try:
        resumed = service.resume_campaign(campaign)
    except InvalidRequest as exc:
        messages.error(request, f"Campaign {campaign.pk} was not resumed: {exc.summary()}.")
        return redirect("campaign_page", campaign_id=campaign.pk)
    if resumed:
        campaign.refresh_from_db()
        enqueue_campaign(campaign)
        messages.success(
            request, "Resumed: the episodes not played to the end are played; the others kept."
        )
    elif campaign.is_finished:
        messages.error(
            request, f"Campaign {campaign.pk} has nothing to resume: every episode of it ended."
        )
    else:
        messages.error(
            request,
            f"Campaign {campaign.pk} is {present.STATE_WORDS.get(campaign.status, campaign.status)}"
            ": a campaign resumes once it stopped.",
        )
    return redirect("campaign_page", campaign_id=campaign.pk)


@require_POST
def campaign_judge(request: HtmxHttpRequest, campaign_id: int) -> HttpResponse:
    """A judge job over the campaign's simulated steps, with the judge picked (the project's
    default judge when none is) and the judge form's defaults."""
    campaign, _ = _get_campaign_for_user(request, campaign_id, edit=True)
    project = campaign.project
    judge = request.POST.get("judge") or next((str(j.pk) for j in _judges(campaign)[:1]), "")
    form = JudgeForm(
        {
            "judge": judge,
            "target": JudgeTarget.CAMPAIGN,
            "campaign": campaign.pk,
            "temperature": request.POST.get("temperature") or 0.6,
            "max_tokens": request.POST.get("max_tokens") or 32768,
            "concurrency": request.POST.get("concurrency") or 8,
        },
        project=project,
    )
    if not form.is_valid():
        if not _judges(campaign).exists():
            messages.error(
                request,
                "This project has no judge model: an admin adds one on the Models page "
                "(role “Judge model”, an OpenAI-compatible server).",
            )
        else:
            problems = "; ".join(str(m) for errors in form.errors.values() for m in errors)
            messages.error(request, f"The judge job was not started: {problems}")
        return redirect("campaign_page", campaign_id=campaign.pk)
    try:
        job = judging_service.start_judging(project, request.user, form.data_object())
    except TooManyJobs as exc:
        messages.error(request, f"The judge job was not started: {exc.message}.")
        return redirect("campaign_page", campaign_id=campaign.pk)
    except ValueError as exc:
        messages.error(request, f"The judge job was not started: {exc}.")
        return redirect("campaign_page", campaign_id=campaign.pk)
    Campaign.objects.filter(pk=campaign.pk).update(judge_job=job)
    enqueue_judging(job)
    messages.success(request, f"Judging the campaign's simulated steps: judge job {job.pk}.")
    return redirect("judge_job", job_id=job.pk)


def _invalid_action(
    request: HtmxHttpRequest,
    campaign: Campaign,
    membership: Membership,
    **forms: Any,
) -> HttpResponse:
    """The campaign's page again with the action's form and its errors (status 400): each
    error next to its field and summed up above the form's button (static/js/campaigns.js
    scrolls it into view), and at the top of the page (the messages) too."""
    what = "queue" if "queue_form" in forms else "dataset version"
    for form in forms.values():
        problems = " ".join(str(m) for errors in form.errors.values() for m in errors)
        messages.error(request, f"The {what} was not made: {problems}")
    context = _campaign_context(campaign, membership, **forms)
    return render(request, "campaigns/campaign.html", context, status=400)


@require_POST
def campaign_queue(request: HtmxHttpRequest, campaign_id: int) -> HttpResponse:
    campaign, membership = _get_campaign_for_user(request, campaign_id, edit=True)
    form = CampaignQueueForm(request.POST, campaign=campaign)
    if form.is_valid():
        which = form.cleaned_data["which"]
        words = (
            f"those judged below {form.cleaned_data['below']:g}"
            if which == "low_judge"
            else WHICH_WORDS[which]
        )
        try:
            queue = episode_selection.queue_from_episodes(
                campaign.project,
                request.user,
                form.trajectory_ids,
                form.cleaned_data["name"],
                origin=f"of campaign {campaign.name!r}, {words}",
            )
        except episode_selection.SelectionError as exc:
            form.add_error(None, _sentence(str(exc)))
        else:
            messages.success(
                request,
                f"Made the queue {queue.name!r} of the steps of {len(form.trajectory_ids)} "
                f"episode{'s' if len(form.trajectory_ids) != 1 else ''}.",
            )
            return redirect("queue_detail", queue_id=queue.pk)
    return _invalid_action(request, campaign, membership, queue_form=form)


@require_POST
def campaign_dataset(request: HtmxHttpRequest, campaign_id: int) -> HttpResponse:
    campaign, membership = _get_campaign_for_user(request, campaign_id, edit=True)
    form = CampaignDatasetForm(request.POST, campaign=campaign)
    if form.is_valid():
        turns = form.cleaned_data["turns"]
        words = WHICH_WORDS[form.cleaned_data["which"]]
        try:
            version = episode_selection.dataset_from_episodes(
                campaign.project,
                request.user,
                form.trajectory_ids,
                form.cleaned_data["dataset_name"],
                turns=turns,
                origin=f"of campaign {campaign.name!r}, {words}",
            )
        except episode_selection.SelectionError as exc:
            form.add_error(None, _sentence(str(exc)))
        else:
            fmt = "agent-turns" if turns == "agent" else "wm-turns"
            messages.success(
                request,
                f"Made version {version.number} of the dataset {version.dataset.name!r} from "
                f"{len(form.trajectory_ids)} episode{'s' if len(form.trajectory_ids) != 1 else ''}"
                f": export it as {fmt} for "
                f"{'agent' if turns == 'agent' else 'world-model'} SFT.",
            )
            return redirect("dataset_detail", dataset_id=version.dataset_id)
    return _invalid_action(request, campaign, membership, dataset_form=form)


urlpatterns = [
    path("projects/<int:project_id>/campaigns/", campaign_list, name="campaign_list"),
    path("projects/<int:project_id>/campaigns/new/", campaign_new, name="campaign_new"),
    path("campaigns/<int:campaign_id>/", campaign_page, name="campaign_page"),
    path("campaigns/<int:campaign_id>/cancel/", campaign_cancel, name="campaign_cancel"),
    path("campaigns/<int:campaign_id>/resume/", campaign_resume, name="campaign_resume"),
    path("campaigns/<int:campaign_id>/judge/", campaign_judge, name="campaign_judge"),
    path("campaigns/<int:campaign_id>/queue/", campaign_queue, name="campaign_queue"),
    path("campaigns/<int:campaign_id>/dataset/", campaign_dataset, name="campaign_dataset"),
]
