"""World-model evaluations: the project's runs and a form for a new one (researchers and
admins), a run's live page (htmx polls it; it stops when the run ends) with Cancel and Resume,
the leaderboard (with the published figures, CSV and Markdown), and the drill-down from a
cell to its samples and from a sample to the same sample in another run."""

from __future__ import annotations

from django.contrib import messages
from django.http import Http404, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.template.loader import render_to_string
from django.urls import path, reverse
from django.views.decorators.http import require_http_methods, require_POST
from django_htmx.http import HttpResponseStopPolling

from studio.access import get_project_for_user
from studio.forms.evaluations import EvaluationForm
from studio.forms.refusals import show_refusal
from studio.http import HtmxHttpRequest, whole_number
from studio.models import EvaluationRun, EvaluationSample, Membership
from studio.presenters import leaderboard as board
from studio.services import evaluations as service
from studio.services.job_limits import TooManyJobs
from studio.tasks import enqueue_evaluation


def _get_run_for_user(
    request: HtmxHttpRequest, pk: int, *, edit: bool = False
) -> tuple[EvaluationRun, Membership]:
    run = get_object_or_404(
        EvaluationRun.objects.select_related("project", "world_endpoint"), pk=pk
    )
    _, membership = get_project_for_user(request, run.project_id, edit=edit)
    return run, membership


def _get_sample_for_user(request: HtmxHttpRequest, pk: int) -> tuple[EvaluationSample, Membership]:
    sample = get_object_or_404(
        EvaluationSample.objects.select_related("run__project", "trajectory"), pk=pk
    )
    _, membership = get_project_for_user(request, sample.run.project_id)
    return sample, membership


def evaluation_list(request: HtmxHttpRequest, project_id: int) -> HttpResponse:
    project, membership = get_project_for_user(request, project_id)
    return render(
        request,
        "evaluations/list.html",
        {
            "project": project,
            "membership": membership,
            "runs": EvaluationRun.objects.filter(project=project),
            "can_edit": membership.can_edit,
        },
    )


@require_http_methods(["GET", "POST"])
def evaluation_new(request: HtmxHttpRequest, project_id: int) -> HttpResponse:
    project, membership = get_project_for_user(request, project_id, edit=True)
    form = EvaluationForm(request.POST or None, project=project)
    status = 400 if form.is_bound else 200
    if request.method == "POST" and form.is_valid():
        try:
            run = service.start_evaluation(project, request.user, form.data_object())
        except TooManyJobs as exc:
            status = show_refusal(form, exc)
        else:
            enqueue_evaluation(run)
            return redirect("evaluation_run", run_id=run.pk)
    return render(
        request,
        "evaluations/new.html",
        {"project": project, "membership": membership, "form": form},
        status=status,
    )


def _run_context(run: EvaluationRun, membership: Membership) -> dict:
    result = run.results if run.is_finished and run.results else service.figures(run)
    return {
        "project": run.project,
        "membership": membership,
        "run": run,
        "done": run.is_finished,
        "counts": service.sample_counts(run),
        "result": result,
        "columns": [(c, board.LABELS[c]) for c in service.LEADER_COLUMNS if c != "overall"],
        "dimensions": service.DIMENSION_COLUMNS,
        "can_edit": membership.can_edit,
        "sample_set": board.sample_set_view(run),
        "scripted_note": board.run_scripted_note(run),
    }


def evaluation_run(request: HtmxHttpRequest, run_id: int) -> HttpResponse:
    """A run's live page; htmx polls the `progress` part every second and stops polling when
    the run ends (286)."""
    run, membership = _get_run_for_user(request, run_id)
    context = _run_context(run, membership)
    if request.htmx:
        html = render_to_string("evaluations/run.html#progress", context, request=request)
        return HttpResponseStopPolling(html) if context["done"] else HttpResponse(html)
    return render(request, "evaluations/run.html", context)


@require_POST
def evaluation_cancel(request: HtmxHttpRequest, run_id: int) -> HttpResponse:
    run, _ = _get_run_for_user(request, run_id, edit=True)
    if run.is_finished:
        messages.error(request, f"Evaluation {run.pk} has already ended ({run.status}).")
    else:
        service.cancel_evaluation(run)
        messages.success(request, "Stopping: the samples already answered are kept.")
    return redirect("evaluation_run", run_id=run.pk)


@require_POST
def evaluation_resume(request: HtmxHttpRequest, run_id: int) -> HttpResponse:
    run, _ = _get_run_for_user(request, run_id, edit=True)
    try:
        resumed = service.resume_evaluation(run)
    except TooManyJobs as exc:
        messages.error(request, f"Evaluation {run.pk} was not resumed: {exc.message}.")
        return redirect("evaluation_run", run_id=run.pk)
    if resumed:
        run.refresh_from_db()
        enqueue_evaluation(run)
        messages.success(request, "Resumed: the samples not done yet are run; the others kept.")
    else:
        messages.error(request, f"Evaluation {run.pk} is {run.status}: only a stopped run resumes.")
    return redirect("evaluation_run", run_id=run.pk)


def _finetune_entries(project) -> list[dict]:
    """The leaderboard's "Fine-tuned vs base" section: each fine-tune with its page."""
    from studio.services.finetune_evaluations import leaderboard_entries
    from studio.views.finetune_evaluations import finetune_page_url

    return [
        {"entry": entry, "url": finetune_page_url(entry.finetune)}
        for entry in leaderboard_entries(project)
    ]


def leaderboard(request: HtmxHttpRequest, project_id: int) -> HttpResponse:
    project, membership = get_project_for_user(request, project_id)
    groups = service.leaderboard(project)
    fmt = request.GET.get("format", "")
    if fmt == "csv":
        response = HttpResponse(board.as_csv(groups), content_type="text/csv; charset=utf-8")
        response["Content-Disposition"] = f'attachment; filename="leaderboard-{project.pk}.csv"'
        return response
    if fmt == "md":
        response = HttpResponse(
            board.as_markdown(groups), content_type="text/markdown; charset=utf-8"
        )
        response["Content-Disposition"] = f'attachment; filename="leaderboard-{project.pk}.md"'
        return response
    return render(
        request,
        "evaluations/leaderboard.html",
        {
            "project": project,
            "membership": membership,
            "table": board.table(groups),
            "columns": [board.LABELS[c] for c in service.LEADER_COLUMNS],
            "figure": board.figure(groups),
            "dimension_figure": board.dimension_figure(groups),
            "measured": bool(board.measured_rows(groups)),
            "finetune_entries": _finetune_entries(project),
        },
    )


def evaluation_samples(request: HtmxHttpRequest, run_id: int) -> HttpResponse:
    run, membership = _get_run_for_user(request, run_id)
    domain = request.GET.get("domain", "")
    order = request.GET.get("order", "score")
    if order not in ("score", "-score", "step"):
        order = "score"
    return render(
        request,
        "evaluations/samples.html",
        {
            "project": run.project,
            "membership": membership,
            "run": run,
            "domain": domain,
            "order": order,
            "samples": service.samples_for(run, domain, order)[:1000],
        },
    )


def evaluation_sample(request: HtmxHttpRequest, sample_id: int) -> HttpResponse:
    """One sample: history, action, ground truth, prediction, their diff, the judge's scores
    and notes; `?compare=<run id>` sets the same sample of another run beside it."""
    from studio.presenters.diff import any_diff_html
    from studio.services.diffs import meaning_diff

    sample, membership = _get_sample_for_user(request, sample_id)
    row = service.row_of(sample)
    others = service.runs_with_sample(sample)
    other = None
    compare = request.GET.get("compare", "")
    if compare:
        compare_id = whole_number(compare)
        if compare_id is None:
            raise Http404("No such run with this sample")
        other_run = others.filter(pk=compare_id).first()
        if other_run is None:
            raise Http404("No such run with this sample")
        other = service.same_sample_in(other_run, sample)
    truth = ""
    if sample.trajectory is not None:
        step = sample.trajectory.root_branch.all_steps().filter(index=sample.step_index).first()
        truth = step.observation if step is not None else ""

    def view_of(s: EvaluationSample | None) -> dict | None:
        if s is None:
            return None
        return {
            "sample": s,
            "diff": any_diff_html(meaning_diff(truth, s.predicted_observation), limit=50)
            if s.gen
            else "",
            "judgement": s.judgement or {},
        }

    history = []
    if row is not None:
        turn = row["turn_idx"]
        history = list(zip(row["prompt"][: turn - 1], row["response"][: turn - 1], strict=True))
    return render(
        request,
        "evaluations/sample.html",
        {
            "project": sample.run.project,
            "membership": membership,
            "run": sample.run,
            "row": row,
            "history": history,
            "current": row["prompt"][row["turn_idx"] - 1] if row else "",
            "truth": truth,
            "views": [v for v in (view_of(sample), view_of(other)) if v is not None],
            "others": others,
            "compare": compare,
            "dimensions": service.DIMENSION_COLUMNS,
            "back": reverse("evaluation_samples", args=[sample.run_id])
            + f"?domain={sample.domain}",
        },
    )


urlpatterns = [
    path("projects/<int:project_id>/evaluations/", evaluation_list, name="evaluation_list"),
    path("projects/<int:project_id>/evaluations/new/", evaluation_new, name="evaluation_new"),
    path("projects/<int:project_id>/leaderboard/", leaderboard, name="leaderboard"),
    path("evaluations/<int:run_id>/", evaluation_run, name="evaluation_run"),
    path("evaluations/<int:run_id>/cancel/", evaluation_cancel, name="evaluation_cancel"),
    path("evaluations/<int:run_id>/resume/", evaluation_resume, name="evaluation_resume"),
    path("evaluations/<int:run_id>/samples/", evaluation_samples, name="evaluation_samples"),
    path("evaluation-samples/<int:sample_id>/", evaluation_sample, name="evaluation_sample"),
]
