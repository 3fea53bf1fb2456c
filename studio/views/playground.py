"""The playground: the user plays the agent on a branch (or in a world), one action at a
time. Each action is a one-future simulation job forked at the playground's step, so every
step lands in the branch tree like any other; the page follows the new branch when the
observation is in. Undo plays from one step earlier (the next action forks a new branch
there; nothing is lost); "hand over" opens the editor in agent-rollout mode."""

from __future__ import annotations

from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.urls import path, reverse
from django.views.decorators.http import require_http_methods
from django_htmx.http import HttpResponseClientRedirect

from inference.simulation.request import ForkFacts
from studio.access import get_branch_for_user
from studio.forms.branching import ACTION_SNIPPETS
from studio.forms.playground import PlayForm
from studio.forms.refusals import show_refusal
from studio.http import HtmxHttpRequest
from studio.models import Branch, SimulationJob
from studio.services import simulation
from studio.tasks import enqueue_simulation

STEPS_SHOWN = 8


def _at(request: HtmxHttpRequest, total: int) -> int:
    raw = request.GET.get("at", "")
    if not raw:
        return total
    if not raw.isdigit() or int(raw) > total:
        raise Http404(f"at must be a step from 0 to {total}, got {raw!r}")
    return int(raw)


@require_http_methods(["GET", "POST"])
def playground(request: HtmxHttpRequest, branch_id: int) -> HttpResponse:
    branch, membership = get_branch_for_user(request, branch_id, edit=True)
    trajectory = branch.trajectory
    total = branch.all_steps().count()
    at = _at(request, total)
    at_step = branch.all_steps().filter(index=at).only("action").first()
    fork = ForkFacts(
        step_count=total,
        recorded_action=at_step.action if at_step else None,
        domain=trajectory.domain,
    )
    form = PlayForm(
        request.POST if request.method == "POST" else None,
        project=trajectory.project,
        fork=fork,
        at=at,
    )
    status = 200
    if request.method == "POST" and form.is_valid():
        try:
            started = simulation.start_simulation(
                user=request.user,
                branch=branch,
                request=form.cleaned_data["request"],
                world_endpoint=form.cleaned_data["world_endpoint"],
            )
        except simulation.InvalidRequest as exc:  # past a limit of the installation
            status = show_refusal(form, exc)
        else:
            enqueue_simulation(started)
            return redirect(reverse("playground", args=[branch.pk]) + f"?at={at}&job={started.pk}")
    job: SimulationJob | None = None
    child = None
    if request.GET.get("job", "").isdigit():
        job = SimulationJob.objects.filter(pk=int(request.GET["job"]), branch=branch).first()
        child = Branch.objects.filter(job=job).first() if job is not None else None
        if job is not None and job.status == "succeeded" and child is not None:
            return redirect("playground", branch_id=child.pk)  # the step is in: go on there
    steps = list(
        branch.all_steps()
        .filter(index__lt=at, index__gte=max(0, at - STEPS_SHOWN))
        .order_by("index")
    )
    world = (trajectory.metadata or {}).get("world")
    context = {
        "trajectory": trajectory,
        "project": trajectory.project,
        "membership": membership,
        "branch": branch,
        "form": form,
        "at": at,
        "total": total,
        "steps": steps,
        "earlier": max(0, at - STEPS_SHOWN),
        "job": job,
        "child": child,
        "world": world if isinstance(world, dict) else None,
        "snippets": ACTION_SNIPPETS.get(trajectory.domain, []),
        "replaces": total - at,
    }
    if form.errors and status == 200:
        status = 400
    return render(request, "playground/play.html", context, status=status)


def playground_job(request: HtmxHttpRequest, job_id: int) -> HttpResponse:
    """The playground's pending step while its job runs (polled); when the observation is
    in, the page moves to the new branch. Reading never writes."""
    from studio.access import get_simulation_job_for_user

    job, _ = get_simulation_job_for_user(request, job_id)
    child = Branch.objects.filter(job=job).first()
    if job.is_finished and child is not None and job.status == "succeeded":
        target = reverse("playground", args=[child.pk])
        if request.htmx:
            return HttpResponseClientRedirect(target)
        return redirect(target)
    return render(request, "playground/play.html#pending", {"job": job, "child": child})


urlpatterns = [
    path("branches/<int:branch_id>/play/", playground, name="playground"),
    path("jobs/<int:job_id>/play/", playground_job, name="playground_job"),
]
