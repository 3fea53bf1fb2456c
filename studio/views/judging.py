"""The LLM judge on simulated steps: a form for a judge job on a branch, a fork's futures or
a queue (researchers and admins), the project's judge jobs, a job's live page (htmx polls it
and stops when it ends) with its judgements and how the judge agrees with people, and the
fidelity panel of a trajectory and its branches."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.template.loader import render_to_string
from django.urls import path
from django.views.decorators.http import require_http_methods, require_POST
from django_htmx.http import HttpResponseStopPolling

from inference.judge import DIMENSIONS
from studio.access import get_branch_for_user, get_project_for_user
from studio.forms.judging import JudgeForm
from studio.forms.refusals import show_refusal
from studio.http import HtmxHttpRequest
from studio.models import Branch, JudgeJob, Membership, StepJudgement
from studio.presenters import fidelity as panel
from studio.presenters.model_colours import colour_map
from studio.services import judging as service
from studio.services.blinding import Blindness, blindness_for
from studio.services.job_limits import TooManyJobs
from studio.services.model_identity import (
    ModelIdentity,
    identities_of_jobs,
    identity_of_job,
    identity_of_step,
    job_of_step,
    models_of_episode_branches,
)
from studio.tasks import enqueue_judging


def _get_judge_job_for_user(
    request: HtmxHttpRequest, pk: int, *, edit: bool = False
) -> tuple[JudgeJob, Membership]:
    job = get_object_or_404(JudgeJob.objects.select_related("project"), pk=pk)
    _, membership = get_project_for_user(request, job.project_id, edit=edit)
    return job, membership


def _with_world_models(jobs: list[JudgeJob]) -> list[JudgeJob]:
    """Each judge job's `world_model`: the model whose futures it judges, where one model
    made them all (a fork: its job's; a branch: the job that made it, or for an episode's
    branch of no job the served model its steps name), else None (a queue or an arena mixes
    models, as may an episode's branch: `mixed_models`; its page names each step's model)."""
    branch_jobs = dict(
        Branch.objects.filter(pk__in={j.branch_id for j in jobs if j.branch_id}).values_list(
            "pk", "job_id"
        )
    )
    identities = identities_of_jobs(branch_jobs.values())
    # a branch of no job may be an episode's, its steps written by a served model (no job)
    served = models_of_episode_branches(
        j.branch_id for j in jobs if j.branch_id and not branch_jobs.get(j.branch_id)
    )
    for job in jobs:
        job.mixed_models = False  # type: ignore[attr-defined]
        if job.fork is not None:
            job.world_model = identity_of_job(job.fork)  # type: ignore[attr-defined]
        elif job.branch_id is not None:
            sim = branch_jobs.get(job.branch_id)
            job.world_model = identities.get(sim) if sim else None  # type: ignore[attr-defined]
            models = served.get(job.branch_id, [])
            if not sim and len(models) == 1:
                job.world_model = models[0]  # type: ignore[attr-defined]
            job.mixed_models = not sim and len(models) > 1  # type: ignore[attr-defined]
        else:
            job.world_model = None  # type: ignore[attr-defined]
    return jobs


def judge_list(request: HtmxHttpRequest, project_id: int) -> HttpResponse:
    project, membership = get_project_for_user(request, project_id)
    return render(
        request,
        "judging/list.html",
        {
            "project": project,
            "membership": membership,
            "jobs": _with_world_models(
                list(JudgeJob.objects.filter(project=project).select_related("fork")[:200])
            ),
        },
    )


@require_http_methods(["GET", "POST"])
def judge_new(request: HtmxHttpRequest, project_id: int) -> HttpResponse:
    project, membership = get_project_for_user(request, project_id, edit=True)
    initial = {k: request.GET.get(k, "") for k in ("target", "branch", "fork", "queue", "campaign")}
    form = JudgeForm(request.POST or None, project=project, initial=initial)
    preview = JudgeForm(initial, project=project)
    preview.full_clean()  # the judge is not chosen yet: only the target is read
    description = (
        service.describe(initial["target"], **preview.resolved) if preview.resolved else ""
    )
    status = 400 if form.is_bound else 200
    if request.method == "POST" and form.is_valid():
        try:
            job = service.start_judging(project, request.user, form.data_object())
        except TooManyJobs as exc:
            status = show_refusal(form, exc)
        except ValueError as exc:
            form.add_error(None, str(exc))
        else:
            enqueue_judging(job)
            return redirect("judge_job", job_id=job.pk)
    return render(
        request,
        "judging/new.html",
        {"project": project, "membership": membership, "form": form, "description": description},
        status=status,
    )


def _job_context(job: JudgeJob, membership: Membership, blindness: Blindness) -> dict:
    """The job's judgements, less those of steps hidden from the member (blind review), and
    what was left out, in words."""
    rows = StepJudgement.objects.filter(job=job)
    hidden_note = ""
    if blindness:
        hidden_note = blindness.note(
            rows.filter(step_id__in=blindness.step_ids).values_list("step_id", flat=True)
        )
    judgements = list(
        blindness.exclude(rows)
        .select_related("step__branch")
        .only(
            "ok",
            "scores",
            "total_score",
            "error",
            "step_id",
            "step__index",
            "step__branch_id",
            "step__branch__name",
            "step__branch__job_id",
            "step__meta",
            "step__observation_source",
        )  # fmt: skip
        .order_by("step__branch_id", "step__index")[:500]
    )
    # The world model that wrote each judged step, beside the judge that scored it.
    branch_jobs = {j.step.branch_id: j.step.branch.job_id for j in judgements}
    identities = identities_of_jobs(job_of_step(j.step, branch_jobs) for j in judgements)
    world_models: dict[str, ModelIdentity] = {}
    for j in judgements:
        # its job's model, else (a served episode step, no job) the one its meta records
        j.world_model = identity_of_step(j.step, branch_jobs, identities)  # type: ignore[attr-defined]
        if j.world_model is not None:  # type: ignore[attr-defined]
            world_models.setdefault(j.world_model.model_key, j.world_model)  # type: ignore[attr-defined]
    colours = colour_map(world_models.values())
    return {
        "project": job.project,
        "membership": membership,
        "job": job,
        "done": job.is_finished,
        "judgements": judgements,
        "world_models": list(world_models.values()),
        "model_colours": colours,
        "hidden_note": hidden_note,
        "dimensions": DIMENSIONS,
        "can_edit": membership.can_edit,
    }


def judge_job(request: HtmxHttpRequest, job_id: int) -> HttpResponse:
    job, membership = _get_judge_job_for_user(request, job_id)
    blindness = blindness_for(membership)
    context = _job_context(job, membership, blindness)
    if request.htmx:
        html = render_to_string("judging/job.html#progress", context, request=request)
        return HttpResponseStopPolling(html) if context["done"] else HttpResponse(html)
    if job.is_finished:
        ids = StepJudgement.objects.filter(job=job, ok=True).values_list("step_id", flat=True)
        context["versus"] = service.judge_vs_human(ids, job, blindness)
        context["versus_note"] = blindness.note(context["versus"].hidden)
    return render(request, "judging/job.html", context)


@require_POST
def judge_cancel(request: HtmxHttpRequest, job_id: int) -> HttpResponse:
    job, _ = _get_judge_job_for_user(request, job_id, edit=True)
    if job.is_finished:
        messages.error(request, f"Judge job {job.pk} has already ended ({job.status}).")
    else:
        service.cancel_judging(job)
        messages.success(request, "Stopping: the steps already judged are kept.")
    return redirect("judge_job", job_id=job.pk)


@require_POST
def judge_resume(request: HtmxHttpRequest, job_id: int) -> HttpResponse:
    job, _ = _get_judge_job_for_user(request, job_id, edit=True)
    try:
        resumed = service.resume_judging(job)
    except TooManyJobs as exc:
        messages.error(request, f"Judge job {job.pk} was not resumed: {exc.message}.")
        return redirect("judge_job", job_id=job.pk)
    if resumed:
        job.refresh_from_db()
        enqueue_judging(job)
        messages.success(request, "Resumed: the steps not judged yet are judged; the others kept.")
    else:
        messages.error(request, f"Judge job {job.pk} is {job.status}: only a stopped job resumes.")
    return redirect("judge_job", job_id=job.pk)


def branch_fidelity(request: HtmxHttpRequest, branch_id: int) -> HttpResponse:
    """The fidelity panel: the branch's judge scores per step and dimension, and the total
    per step of every judged branch of its trajectory."""
    branch, membership = get_branch_for_user(request, branch_id)
    blindness = blindness_for(membership)
    trajectory = branch.trajectory
    found = service.fidelity(branch, blindness)
    # the judged branches (every one, judged or not, would be a query each for nothing)
    judged = (
        StepJudgement.objects.filter(step__branch__trajectory=trajectory, ok=True)
        .values_list("step__branch_id", flat=True)
        .distinct()
    )
    shown = list(trajectory.branches.filter(pk__in=judged).order_by("pk"))
    per_branch = [(b, service.fidelity(b, blindness)) for b in shown]
    # the model of each branch's future: lines and rows of two models are told apart
    identities = identities_of_jobs([b.job_id for b in shown])
    for b in shown:
        b.identity = identities.get(b.job_id) if b.job_id else None  # type: ignore[attr-defined]
    colours = colour_map(b.identity for b in shown)  # type: ignore[attr-defined]
    # the judged steps of every branch shown that the member may not see yet
    hidden = {pk for _, f in per_branch for pk in f.hidden} | set(found.hidden)
    return render(
        request,
        "judging/fidelity.html",
        {
            "project": trajectory.project,
            "membership": membership,
            "trajectory": trajectory,
            "branch": branch,
            "fidelity": found,
            "figure": panel.branch_figure(found),
            "trajectory_figure": panel.trajectory_figure(
                [(b.name, f) for b, f in per_branch],
                [b.identity for b, _ in per_branch],  # type: ignore[attr-defined]
            ),
            "model_colours": colours,
            "branch_identity": identities_of_jobs([branch.job_id]).get(branch.job_id or 0),
            "judged_branches": [(b, f) for b, f in per_branch if f.judged],
            "hidden_note": blindness.note(hidden),
            "branch_hidden_note": blindness.note(found.hidden),
            "dimensions": DIMENSIONS,
            "can_edit": membership.can_edit,
        },
    )


urlpatterns = [
    path("projects/<int:project_id>/judge/", judge_list, name="judge_list"),
    path("projects/<int:project_id>/judge/new/", judge_new, name="judge_new"),
    path("judge-jobs/<int:job_id>/", judge_job, name="judge_job"),
    path("judge-jobs/<int:job_id>/cancel/", judge_cancel, name="judge_cancel"),
    path("judge-jobs/<int:job_id>/resume/", judge_resume, name="judge_resume"),
    path("branches/<int:branch_id>/fidelity/", branch_fidelity, name="branch_fidelity"),
]
