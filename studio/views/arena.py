"""The world-model arena: the form at a step of a branch (researchers and admins), an arena's
page (htmx polls its progress and stops when it ends), cancelling it, the project's arenas,
and the project's arena leaderboard (also loaded beside the AgentWorldBench one)."""

from __future__ import annotations

from django.contrib import messages
from django.http import Http404, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.template.loader import render_to_string
from django.urls import path
from django.views.decorators.http import require_http_methods, require_POST
from django_htmx.http import HttpResponseStopPolling

from inference.simulation.request import ForkFacts, InvalidRequest
from studio.access import get_branch_for_user, get_project_for_user
from studio.forms.arena import NO_JUDGE, ArenaForm
from studio.forms.refusals import show_refusal
from studio.http import HtmxHttpRequest
from studio.models import ArenaRun, JobStatus, Membership
from studio.presenters import arena as present
from studio.services import arena as service
from studio.tasks import enqueue_arena


def _get_arena_for_user(
    request: HtmxHttpRequest, pk: int, *, edit: bool = False
) -> tuple[ArenaRun, Membership]:
    arena = get_object_or_404(
        ArenaRun.objects.select_related("project", "trajectory", "branch"), pk=pk
    )
    _, membership = get_project_for_user(request, arena.project_id, edit=edit)
    return arena, membership


@require_http_methods(["GET", "POST"])
def arena_new(request: HtmxHttpRequest, branch_id: int, index: int) -> HttpResponse:
    branch, membership = get_branch_for_user(request, branch_id, edit=True)
    trajectory = branch.trajectory
    steps = branch.all_steps()
    step = steps.filter(index=index).only("pk", "index", "action", "observation").first()
    if step is None:
        raise Http404(f"Branch {branch.name!r} has no step {index} (it has {steps.count()}).")
    fork = ForkFacts(
        step_count=steps.count(), recorded_action=step.action, domain=trajectory.domain
    )
    form = ArenaForm(
        request.POST if request.method == "POST" else None,
        branch=branch,
        fork_index=index,
        fork=fork,
    )
    status = 200
    if request.method == "POST":
        status = 400
        if form.is_valid():
            try:
                arena = service.start_arena(request.user, form.data_object())
            except InvalidRequest as exc:  # past a limit of the installation
                status = show_refusal(form, exc)
            else:
                enqueue_arena(arena)
                messages.success(
                    request,
                    f"Started an arena of {len(form.requests)} world models at step {index}.",
                )
                return redirect("arena_page", arena_id=arena.pk)
    return render(
        request,
        "arena/new.html",
        {
            "project": trajectory.project,
            "membership": membership,
            "trajectory": trajectory,
            "branch": branch,
            "step": step,
            "index": index,
            "form": form,
            "no_judge": NO_JUDGE if not form.has_judge else "",
            "world_version": form.world_version,
            "is_admin": membership.role == "admin",
        },
        status=status,
    )


def _arena_context(arena: ArenaRun, membership: Membership) -> dict:
    results = service.arena_results(arena)
    return {
        "project": arena.project,
        "membership": membership,
        "arena": arena,
        "done": arena.is_finished,
        "can_edit": membership.can_edit,
        "judge_job": results.judge_job,
        **present.arena_view(results),
    }


def arena_page(request: HtmxHttpRequest, arena_id: int) -> HttpResponse:
    arena, membership = _get_arena_for_user(request, arena_id)
    context = _arena_context(arena, membership)
    if request.htmx:
        html = render_to_string("arena/arena.html#live", context, request=request)
        return HttpResponseStopPolling(html) if context["done"] else HttpResponse(html)
    return render(request, "arena/arena.html", context)


@require_POST
def arena_cancel(request: HtmxHttpRequest, arena_id: int) -> HttpResponse:
    arena, _ = _get_arena_for_user(request, arena_id, edit=True)
    if arena.is_finished:
        messages.error(request, f"Arena {arena.pk} has already ended ({arena.status}).")
    else:
        service.cancel_arena(arena)
        messages.success(
            request, "Stopping the arena and its jobs: futures, scores and pairs so far are kept."
        )
    return redirect("arena_page", arena_id=arena.pk)


def arena_list(request: HtmxHttpRequest, project_id: int) -> HttpResponse:
    project, membership = get_project_for_user(request, project_id)
    arenas = ArenaRun.objects.filter(project=project).select_related("trajectory", "branch")
    return render(
        request,
        "arena/list.html",
        {
            "project": project,
            "membership": membership,
            "arenas": arenas[:200],
            "finished": ArenaRun.objects.filter(
                project=project, status=JobStatus.SUCCEEDED
            ).count(),
            **present.leaderboard(service.rollup(project)),
        },
    )


def arena_leaderboard(request: HtmxHttpRequest, project_id: int) -> HttpResponse:
    """The arena leaderboard; as a fragment for htmx (the leaderboard page loads it)."""
    project, membership = get_project_for_user(request, project_id)
    context = {
        "project": project,
        "membership": membership,
        "finished": ArenaRun.objects.filter(project=project, status=JobStatus.SUCCEEDED).count(),
        **present.leaderboard(service.rollup(project)),
    }
    template = "arena/leaderboard.html#board" if request.htmx else "arena/leaderboard.html"
    return render(request, template, context)


urlpatterns = [
    path("branches/<int:branch_id>/steps/<int:index>/arena/", arena_new, name="arena_new"),
    path("arenas/<int:arena_id>/", arena_page, name="arena_page"),
    path("arenas/<int:arena_id>/cancel/", arena_cancel, name="arena_cancel"),
    path("projects/<int:project_id>/arenas/", arena_list, name="arena_list"),
    path(
        "projects/<int:project_id>/arenas/leaderboard/",
        arena_leaderboard,
        name="arena_leaderboard",
    ),
]
