"""Fine-tunes on the web: the project's runs (every member), the form that starts one
(researchers and admins; a dataset version's "Fine-tune" button opens it with the version
chosen), a run's page (its settings and lineage, progress and a live loss curve: htmx polls
its live part and stops when it ends; its registered model and how to serve it; the
evaluations of base and fine-tuned model), its actions (researchers and admins): Cancel,
Resume, and the adapter as a zip download (every member)."""

from __future__ import annotations

import os
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from django.contrib import messages
from django.http import Http404, HttpResponse, StreamingHttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.template.loader import render_to_string
from django.urls import path
from django.views.decorators.http import require_http_methods, require_POST
from django_htmx.http import HttpResponseStopPolling, trigger_client_event

from inference.simulation.request import InvalidRequest
from studio.access import get_project_for_user, require_edit
from studio.forms.finetunes import FineTuneForm
from studio.forms.refusals import show_refusal
from studio.http import HtmxHttpRequest
from studio.models import FineTuneRun, Membership
from studio.presenters import finetune_charts as present
from studio.services import finetunes as service
from studio.services.datasets import file_stem
from studio.services.finetune_evaluations import evaluation_context
from studio.tasks import enqueue_finetune

ANNOTATOR_REFUSAL = "Annotators can see fine-tunes and their results but not run them."
# The client event of the live part's last answer (the run ended): the evaluation section
# (its own view, `finetune_evaluations`) refreshes once on it
FINETUNE_ENDED = "finetune-ended"
NOTHING_HELD_OUT = (
    "No recorded trajectory is left out of training, so the held-out comparison will have no "
    "samples."
)
# The field a service's message names first ("LoRA rank: ...") on the form
FIELD_OF_PREFIX = {
    "name": "name",
    "dataset version": "dataset_version",
    "base model": "base",
    "method": "method",
    "lora rank": "lora_rank",
    "lora alpha": "lora_alpha",
    "lora target modules": "lora_targets",
    "epochs": "epochs",
    "learning rate": "learning_rate",
    "max length": "max_length",
    "seed": "seed",
    "max steps": "max_steps",
    "held-out trajectories": "heldout",
}


def _get_finetune_for_user(
    request: HtmxHttpRequest, pk: int, *, edit: bool = False
) -> tuple[FineTuneRun, Membership]:
    run = get_object_or_404(
        FineTuneRun.objects.select_related(
            "project", "requester", "dataset_version__dataset", "base_endpoint", "endpoint"
        ),
        pk=pk,
    )
    _, membership = get_project_for_user(request, run.project_id)
    if edit:
        require_edit(membership, ANNOTATOR_REFUSAL)
    return run, membership


def finetune_list(request: HtmxHttpRequest, project_id: int) -> HttpResponse:
    project, membership = get_project_for_user(request, project_id)
    runs = list(
        FineTuneRun.objects.filter(project=project).select_related(
            "dataset_version", "endpoint", "base_endpoint"
        )[:200]
    )
    for run in runs:
        run.view = present.run_view(run)  # type: ignore[attr-defined]
    return render(
        request,
        "finetunes/list.html",
        {
            "project": project,
            "membership": membership,
            "runs": runs,
            "can_edit": membership.can_edit,
        },
    )


def _sentence(message: str) -> str:
    message = message[:1].upper() + message[1:]
    return message if message.endswith(".") else message + "."


@require_http_methods(["GET", "POST"])
def finetune_new(request: HtmxHttpRequest, project_id: int) -> HttpResponse:
    project, membership = get_project_for_user(request, project_id)
    require_edit(membership, ANNOTATOR_REFUSAL)
    form = FineTuneForm(request.POST if request.method == "POST" else None, project=project)
    if request.method == "GET":
        form.preselect_version(request.GET.get("version"))
    status = 200
    if request.method == "POST":
        status = 400
        if form.is_valid():
            try:
                run = service.start_finetune(project, request.user, form.data_object())
            except InvalidRequest as exc:  # past a limit of the installation (jobs at once)
                status = show_refusal(form, exc)
            except service.FineTuneError as exc:
                head = str(exc).split(":", 1)[0].strip().lower()
                form.add_error(FIELD_OF_PREFIX.get(head), _sentence(str(exc)))
            else:
                enqueue_finetune(run)
                messages.success(
                    request,
                    f"Started fine-tune {run.name!r} on {run.dataset_name} v{run.version_number}.",
                )
                if not run.heldout_trajectory_ids:
                    messages.warning(request, NOTHING_HELD_OUT)
                return redirect("finetune_page", run_id=run.pk)
    return render(
        request,
        "finetunes/new.html",
        {"project": project, "membership": membership, "form": form},
        status=status,
    )


def _context(run: FineTuneRun, membership: Membership) -> dict[str, Any]:
    return {
        "project": run.project,
        "membership": membership,
        "run": run,
        "done": run.is_finished,
        "can_edit": membership.can_edit,
        "can_cancel": not run.is_finished,
        "can_resume": service.resumable(run),
        "failed_on_settings": service.failed_on_its_settings(run),
        "nothing_held_out": NOTHING_HELD_OUT,
        "adapter_ready": bool(run.result_dir) and Path(run.result_dir).is_dir(),
        **present.run_view(run),
        **evaluation_context(run, membership),
    }


def finetune_page(request: HtmxHttpRequest, run_id: int) -> HttpResponse:
    run, membership = _get_finetune_for_user(request, run_id)
    context = _context(run, membership)
    if request.htmx:
        html = render_to_string("finetunes/run.html#live", context, request=request)
        if not context["done"]:
            return HttpResponse(html)
        # the last answer: the evaluation section, which said the run was going, refreshes
        return trigger_client_event(HttpResponseStopPolling(html), FINETUNE_ENDED)
    return render(request, "finetunes/run.html", context)


@require_POST
def finetune_cancel(request: HtmxHttpRequest, run_id: int) -> HttpResponse:
    run, _ = _get_finetune_for_user(request, run_id, edit=True)
    if run.is_finished:
        messages.error(
            request, f"Fine-tune {run.pk} has already ended ({present.status_text(run)})."
        )
    else:
        service.cancel_finetune(run)
        messages.success(
            request, "Stopping the fine-tune at its next step: its checkpoint is kept for Resume."
        )
    return redirect("finetune_page", run_id=run.pk)


@require_POST
def finetune_resume(request: HtmxHttpRequest, run_id: int) -> HttpResponse:
    run, _ = _get_finetune_for_user(request, run_id, edit=True)
    if service.resume_finetune(run):
        run.refresh_from_db()
        enqueue_finetune(run)
        messages.success(request, "Resumed: the training goes on from its last checkpoint.")
    elif service.failed_on_its_settings(run):
        messages.error(
            request,
            f"Fine-tune {run.pk} failed on its settings or data: Resume would fail the same way. "
            "Start a new fine-tune with the setting its message names changed.",
        )
    else:
        messages.error(
            request,
            f"Fine-tune {run.pk} is {present.status_text(run).lower()}: a fine-tune resumes once "
            "it stopped (failed or cancelled).",
        )
    return redirect("finetune_page", run_id=run.pk)


def _zip_folder(folder: Path, top: str) -> Iterator[bytes]:
    """The folder's files as a zip, made as it is read (entries' sizes follow their data)."""
    from studio.services.datasets import _Pipe

    buffer = _Pipe()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for root, dirs, files in os.walk(folder):
            dirs.sort()
            for name in sorted(files):
                file = Path(root) / name
                if file.is_symlink() or not file.is_file():
                    continue
                arcname = f"{top}/{file.relative_to(folder).as_posix()}"
                with open(file, "rb") as src, archive.open(arcname, "w", force_zip64=True) as dst:
                    while chunk := src.read(1 << 20):
                        dst.write(chunk)
                        if buffer.pending() >= 1 << 20:
                            yield buffer.take()
                yield buffer.take()
    yield buffer.take()


def finetune_adapter(request: HtmxHttpRequest, run_id: int) -> StreamingHttpResponse:
    """The trained adapter (or model) folder as a zip, streamed (every member)."""
    run, _ = _get_finetune_for_user(request, run_id)
    folder = Path(run.result_dir) if run.result_dir else None
    if folder is None or not folder.is_dir():
        raise Http404("This fine-tune has no trained model to download.")
    top = f"{file_stem(run.name)}-{folder.name}"
    response = StreamingHttpResponse(_zip_folder(folder, top), content_type="application/zip")
    response["Content-Disposition"] = f'attachment; filename="{top}.zip"'
    return response


urlpatterns = [
    path("projects/<int:project_id>/finetunes/", finetune_list, name="finetune_list"),
    path("projects/<int:project_id>/finetunes/new/", finetune_new, name="finetune_new"),
    path("finetunes/<int:run_id>/", finetune_page, name="finetune_page"),
    path("finetunes/<int:run_id>/cancel/", finetune_cancel, name="finetune_cancel"),
    path("finetunes/<int:run_id>/resume/", finetune_resume, name="finetune_resume"),
    path("finetunes/<int:run_id>/adapter.zip", finetune_adapter, name="finetune_adapter"),
]
