"""Base vs fine-tuned evaluations of a fine-tune: "Evaluate" (researchers and admins) makes
a base and a fine-tuned run per comparison and enqueues them; the section of the fine-tune
page (`templates/finetunes/_evaluate.html`) on a page of its own, which htmx polls while a
run of it is going."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.template.loader import render_to_string
from django.urls import path, reverse
from django.views.decorators.http import require_POST
from django_htmx.http import HttpResponseStopPolling

from studio.access import get_project_for_user
from studio.forms.finetune_evaluations import FineTuneEvaluationForm
from studio.forms.refusals import show_refusal
from studio.http import HtmxHttpRequest
from studio.models import FineTuneRun, Membership
from studio.services import finetune_evaluations as service
from studio.services.job_limits import TooManyJobs
from studio.tasks import enqueue_evaluation


def _get_finetune_for_user(
    request: HtmxHttpRequest, pk: int, *, edit: bool = False
) -> tuple[FineTuneRun, Membership]:
    run = get_object_or_404(
        FineTuneRun.objects.select_related("project", "base_endpoint", "endpoint"), pk=pk
    )
    _, membership = get_project_for_user(request, run.project_id, edit=edit)
    return run, membership


def finetune_page_url(run: FineTuneRun) -> str:
    return reverse("finetune_page", kwargs={"run_id": run.pk})


def _page(
    request: HtmxHttpRequest,
    run: FineTuneRun,
    membership: Membership,
    form: FineTuneEvaluationForm | None = None,
    status: int = 200,
) -> HttpResponse:
    context = {
        "project": run.project,
        "membership": membership,
        "finetune": run,
        "finetune_url": finetune_page_url(run),
        **service.evaluation_context(run, membership, form),
    }
    return render(request, "finetunes/evaluations.html", context, status=status)


def finetune_evaluations(request: HtmxHttpRequest, run_id: int) -> HttpResponse:
    """The evaluations of a fine-tune; htmx gets the section alone, and stops polling (286)
    once none of its runs is going."""
    run, membership = _get_finetune_for_user(request, run_id)
    if request.htmx:
        context = service.evaluation_context(run, membership)
        html = render_to_string("finetunes/_evaluate.html", context, request=request)
        running = context["ft_eval"]["running"]
        return HttpResponse(html) if running else HttpResponseStopPolling(html)
    return _page(request, run, membership)


@require_POST
def finetune_evaluate(request: HtmxHttpRequest, run_id: int) -> HttpResponse:
    run, membership = _get_finetune_for_user(request, run_id, edit=True)
    refused = service.refusal(run)
    if refused:
        messages.error(request, refused)
        return redirect(finetune_page_url(run))
    form = FineTuneEvaluationForm(request.POST, project=run.project, finetune=run)
    if not form.is_valid():
        return _page(request, run, membership, form, status=400)
    try:
        runs = service.start_finetune_evaluation(run, request.user, form.data_object())
    except service.EvaluationRefused as exc:
        form.add_error(None, exc.message)
        return _page(request, run, membership, form, status=400)
    except TooManyJobs as exc:
        status = show_refusal(form, exc)
        return _page(request, run, membership, form, status=status)
    for evaluation in runs:
        enqueue_evaluation(evaluation)
    pairs = len(runs) // 2
    messages.success(
        request,
        f"{len(runs)} evaluations queued: the base and the fine-tuned model on "
        f"{pairs} comparison{'s' if pairs != 1 else ''}, on the same samples.",
    )
    return redirect(finetune_page_url(run))


urlpatterns = [
    path("finetunes/<int:run_id>/evaluations/", finetune_evaluations, name="finetune_evaluations"),
    path("finetunes/<int:run_id>/evaluate/", finetune_evaluate, name="finetune_evaluate"),
]
