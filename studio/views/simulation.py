"""Branch at a step (the editor), and the live page of the simulation job it starts."""

from __future__ import annotations

from django.contrib import messages
from django.db.models import Count, Q
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.template.loader import render_to_string
from django.urls import path
from django.views.decorators.http import require_http_methods, require_POST
from django_htmx.http import HttpResponseStopPolling

from inference.simulation.request import ForkFacts
from studio.access import get_branch_for_user, get_simulation_job_for_user
from studio.forms.branching import ACTION_SNIPPETS, SimulateForm, pretty_json_or_none
from studio.forms.refusals import show_refusal
from studio.http import HtmxHttpRequest, whole_number
from studio.models import EndpointRole, JobStatus, ModelEndpoint, SimulationJob, Step
from studio.models.trajectories import ParseStatus
from studio.services import jobs, simulation
from studio.services.endpoints import sampling_defaults
from studio.services.perturbations import job_perturbations
from studio.tasks import enqueue_simulation


@require_http_methods(["GET", "POST"])
def branch_fork(request: HtmxHttpRequest, branch_id: int, index: int) -> HttpResponse:
    """The editor: the action at step `index` of `branch`, and how to simulate from there.
    `index` may be one past the last step: the agent takes a new action there."""
    branch, membership = get_branch_for_user(request, branch_id, edit=True)
    trajectory = branch.trajectory
    steps = list(
        branch.all_steps()
        # Only the fork step and two before it: trajectories run to thousands of steps.
        .filter(index__gte=max(0, index - 2), index__lte=index)
        .only(
            "id",
            "index",
            "action",
            "observation",
            "branch_id",
            "provenance",
            "parse_status",
            "meta",
        )
    )
    step = next((s for s in steps if s.index == index), None)
    total = branch.all_steps().count()
    # index == total: a new step after the branch's last one ("continue"); beyond: nothing.
    if step is None and index != total:
        raise Http404(f"Branch {branch.name!r} has no step {index} (it has {total}).")
    initial_action = (pretty_json_or_none(step.action) or step.action) if step else ""
    # from the playground: the agent takes it from here, its first action included
    handover = request.GET.get("handover") == "1"
    if handover:
        initial_action = ""
    form = SimulateForm(
        request.POST if request.method == "POST" else None,
        fork_index=index,
        fork=ForkFacts(
            step_count=total,
            recorded_action=step.action if step else None,
            domain=trajectory.domain,
        ),
        project=trajectory.project,
        in_world=simulation.trajectory_world_label(trajectory) is not None,
        initial={
            "action": initial_action,
            # the playground's "hand over to the agent" opens the editor in rollout mode
            **({"mode": "rollout"} if request.GET.get("mode") == "rollout" else {}),
            **(_handover_initial(request, trajectory.project) if handover else {}),
        },
    )
    status = 200
    if request.method == "POST" and form.is_valid():
        sim = form.cleaned_data["request"]
        try:
            job = simulation.start_simulation(
                user=request.user,
                branch=branch,
                request=sim,
                world_endpoint=form.cleaned_data["world_endpoint"],
                agent_endpoint=form.cleaned_data.get("agent_endpoint"),
                world_version=form.world_version,
            )
        except simulation.InvalidRequest as exc:  # past a limit of the installation
            status = show_refusal(form, exc)
        else:
            enqueue_simulation(job)
            messages.success(
                request, f"Started {sim.n} simulation(s) from step {index} of {branch.name!r}."
            )
            return redirect("simulation_job", job_id=job.pk)
    context = {
        "trajectory": trajectory,
        "project": trajectory.project,
        "membership": membership,
        "branch": branch,
        "step": step,
        "index": index,
        "context_steps": [s for s in steps if s.index < index],
        "steps_after": form.steps_after,
        "form": form,
        "snippets": ACTION_SNIPPETS.get(trajectory.domain, []),
        "recorded_action": step.action if step else "",
        "is_new_step": step is None,
        "has_agents": form.has_agents,
        "is_admin": membership.role == "admin",
        "handover": handover,
    }
    template = "simulation/editor.html#editor" if request.htmx else "simulation/editor.html"
    if form.errors and status == 200:
        status = 400
    return render(request, template, context, status=status)


HANDOVER_STEPS = 5  # the rollout a hand-over proposes (the editor's max steps, changeable)


def _handover_initial(request: HtmxHttpRequest, project) -> dict:
    """The editor's initial values for a hand-over: a rollout of the agent model the
    playground named (`?agent=`) whose first action is the agent's (the action box left
    empty), with the world model played with (`?world=`, its sampling defaults too). Ids
    not of the project's endpoints are ignored."""
    initial: dict = {"mode": "rollout", "max_steps": HANDOVER_STEPS}
    endpoints = {
        e.pk: e
        for e in ModelEndpoint.objects.filter(
            project=project,
            pk__in=[
                n
                for n in (
                    whole_number(request.GET.get("agent", "")),
                    whole_number(request.GET.get("world", "")),
                )
                if n is not None
            ],
        )
    }
    for name, role, field in (
        ("agent", EndpointRole.AGENT, "agent_endpoint"),
        ("world", EndpointRole.WORLD, "world_endpoint"),
    ):
        raw = request.GET.get(name, "")
        number = whole_number(raw)
        endpoint = endpoints.get(number) if number is not None else None
        if endpoint is not None and endpoint.role == role:
            initial[field] = endpoint.pk
            if role == EndpointRole.WORLD:
                initial.update(sampling_defaults(endpoint))
    return initial


# Steps shown per branch on the job page (replay and rollout make many; the rest are one
# click away on the branch's own page). The page is polled every 500 ms: keep it bounded.
JOB_STEPS_SHOWN = 3


def _job_context(job: SimulationJob, membership) -> dict:
    branches = list(
        job.branches.order_by("sample_index", "pk").annotate(
            n_own=Count("steps"),
            n_malformed=Count(
                "steps",
                filter=Q(steps__parse_status__in=[ParseStatus.NO_TAG, ParseStatus.UNCLOSED]),
            ),
        )
    )
    own_steps: dict[int, list[Step]] = {b.pk: [] for b in branches}
    shown = Step.objects.filter(
        branch__in=[b.pk for b in branches], index__lt=job.fork_index + JOB_STEPS_SHOWN
    ).order_by("branch_id", "index")
    for s in shown:
        own_steps[s.branch_id].append(s)
    rows = []
    for b in branches:
        steps = own_steps.get(b.pk, [])
        malformed = [
            s for s in steps if s.parse_status in (ParseStatus.NO_TAG, ParseStatus.UNCLOSED)
        ]
        rows.append(
            {
                "branch": b,
                "steps": steps,
                "more_steps": b.n_own - len(steps),
                "next_index": b.fork_index + b.n_own,
                "malformed": malformed,
                "n_malformed": b.n_malformed,
                "more_malformed": b.n_malformed - len(malformed),
                "progress": (job.live or {}).get(str(b.sample_index), {}),
            }
        )
    # The job row was read before its branches, so whatever it says was true of all that
    # is shown (a finished job's steps are all written: the page may stop polling). One
    # case reads newer: branches claimed since (a worker starts them with their job, in
    # one transaction) under a row still queued. The job was running then: say so.
    if job.status == JobStatus.QUEUED and any(b.status != "queued" for b in branches):
        job.status = JobStatus.RUNNING
    done = job.is_finished
    counts: dict[str, int] = {}
    for b in branches:
        counts[b.status] = counts.get(b.status, 0) + 1
    return {
        "job": job,
        "trajectory": job.trajectory,
        "project": job.trajectory.project,
        "membership": membership,
        "rows": rows,
        "done": done,
        "counts": counts,
        "n_malformed": sum(r["n_malformed"] for r in rows),
        "can_edit": membership.can_edit,
        "perturbations": job_perturbations(job),
    }


def simulation_job(request: HtmxHttpRequest, job_id: int) -> HttpResponse:
    """The live page of one job: per branch status, phase, tokens, streamed text, result.
    htmx polls the `progress` partial every 500 ms; it answers 286 (stop polling) when done.
    Reading never writes: a job whose worker died is failed by the workers' sweeper, and
    until then the page says that its heartbeat stopped."""
    job, membership = get_simulation_job_for_user(request, job_id)
    context = _job_context(job, membership)
    context["silent_for"] = jobs.silent_for_s(job)
    if request.htmx:
        html = render_to_string("simulation/job.html#progress", context, request=request)
        if context["done"]:
            return HttpResponseStopPolling(html)
        return HttpResponse(html)
    return render(request, "simulation/job.html", context)


@require_POST
def simulation_job_cancel(request: HtmxHttpRequest, job_id: int) -> HttpResponse:
    job, _ = get_simulation_job_for_user(request, job_id, edit=True)
    if job.is_finished:
        messages.error(request, f"Job {job.pk} has already finished ({job.status}).")
    else:
        job = simulation.cancel_simulation(job)
        if job.is_finished:
            messages.success(request, f"Cancelled job {job.pk}; finished branches are kept.")
        else:
            messages.success(
                request,
                f"Asked job {job.pk} to stop at its next token; finished branches are kept.",
            )
    return redirect("simulation_job", job_id=job.pk)


@require_POST
def simulation_job_retry(request: HtmxHttpRequest, job_id: int) -> HttpResponse:
    job, _ = get_simulation_job_for_user(request, job_id, edit=True)
    if not job.is_finished:
        messages.error(request, f"Job {job.pk} is still {job.status}; cancel it before retrying.")
        return redirect("simulation_job", job_id=job.pk)
    try:
        new_job = simulation.retry_simulation(job, user=request.user)
    except simulation.InvalidRequest as exc:
        messages.error(request, f"Could not retry job {job.pk}: {exc.summary()}")
        return redirect("simulation_job", job_id=job.pk)
    enqueue_simulation(new_job)
    messages.success(
        request, f"Retrying job {job.pk} as job {new_job.pk}; the old branches are kept."
    )
    return redirect("simulation_job", job_id=new_job.pk)


urlpatterns = [
    path("branches/<int:branch_id>/steps/<int:index>/fork/", branch_fork, name="branch_fork"),
    path("jobs/<int:job_id>/", simulation_job, name="simulation_job"),
    path("jobs/<int:job_id>/cancel/", simulation_job_cancel, name="simulation_job_cancel"),
    path("jobs/<int:job_id>/retry/", simulation_job_retry, name="simulation_job_retry"),
]
