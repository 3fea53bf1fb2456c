"""The playground: the user plays the agent on a branch (or in a world), one action at a
time. Played steps stay on one branch (`studio.services.playground`): the first action
forks a new played branch, each later one is appended to it; the page follows that branch
when the observation is in, and remembers the world model picked for the next step. Undo
plays from one step earlier (the next action forks a new played branch there; nothing is
lost); "hand over" opens the editor in agent-rollout mode, the agent's first action
included, when the project has an agent model (else it says how to add one)."""

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
from studio.http import HtmxHttpRequest, whole_number
from studio.models import EndpointRole, SimulationJob
from studio.services import playground as playing
from studio.services import simulation
from studio.services.endpoints import endpoints_for
from studio.tasks import enqueue_simulation

STEPS_SHOWN = 8


def _at(request: HtmxHttpRequest, total: int) -> int:
    raw = request.GET.get("at", "")
    if not raw:
        return total
    at = whole_number(raw)
    if at is None or at > total:
        raise Http404(f"at must be a step from 0 to {total}, got {raw!r}")
    return at


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
    world = simulation.trajectory_world_label(trajectory)
    form = PlayForm(
        request.POST if request.method == "POST" else None,
        project=trajectory.project,
        fork=fork,
        at=at,
        in_world=world is not None,
        remembered=playing.remembered(branch, request.user),
    )
    status = 200
    if request.method == "POST" and form.is_valid():
        try:
            played = playing.play_step(
                user=request.user,
                branch=branch,
                at=at,
                total=total,
                request=form.cleaned_data["request"],
                world_endpoint=form.cleaned_data["world_endpoint"],
                action_format=form.cleaned_data["action_format"],
            )
        except simulation.InvalidRequest as exc:  # the world, or a limit of the installation
            status = show_refusal(form, exc)
        else:
            enqueue_simulation(played.job)
            # appended: the page stays on this branch; forked: here until the branch is in
            query = f"?job={played.job.pk}" if played.appended else f"?at={at}&job={played.job.pk}"
            return redirect(reverse("playground", args=[branch.pk]) + query)
    job: SimulationJob | None = None
    child = None
    job_id = whole_number(request.GET.get("job", ""))
    if job_id is not None:
        job = SimulationJob.objects.filter(pk=job_id, branch=branch).first()
        child = playing.played_branch_of(job) if job is not None else None
        if job is not None and job.status == "succeeded" and child is not None:
            return redirect("playground", branch_id=child.pk)  # the step is in: go on there
    steps = list(
        branch.all_steps()
        .filter(index__lt=at, index__gte=max(0, at - STEPS_SHOWN))
        .order_by("index")
    )
    agents = endpoints_for(trajectory.project, EndpointRole.AGENT)
    world_choice = form["world_endpoint"].value()
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
        "world": world,
        "world_missing": world is not None and simulation.world_of_trajectory(trajectory) is None,
        "snippets": ACTION_SNIPPETS.get(trajectory.domain, []),
        "replaces": total - at,
        "appends": playing.appends_to(branch, at, total),
        "agent": agents.first(),
        "world_choice": world_choice if whole_number(world_choice) is not None else "",
        "is_admin": membership.role == "admin",
    }
    if form.errors and status == 200:
        status = 400
    return render(request, "playground/play.html", context, status=status)


def playground_job(request: HtmxHttpRequest, job_id: int) -> HttpResponse:
    """The playground's pending step while its job runs (polled); when the observation is
    in, the page moves to the played branch. Reading never writes."""
    from studio.access import get_simulation_job_for_user

    job, _ = get_simulation_job_for_user(request, job_id)
    child = playing.played_branch_of(job)
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
