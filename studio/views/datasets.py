"""Datasets: the project's datasets, a form for a new version (researchers and admins), a
dataset's versions with a sample of their items and the export of a version in each format (a
streamed download), and adding a hand-picked step to a dataset from its annotation page."""

from __future__ import annotations

from pathlib import Path

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import FileResponse, Http404, HttpResponse, StreamingHttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.template.loader import render_to_string
from django.urls import path, reverse
from django.views.decorators.http import require_http_methods, require_POST
from django_htmx.http import HttpResponseStopPolling

from studio.access import get_project_for_user, get_step_for_user, signed_in_user
from studio.exports.formats import FORMATS
from studio.forms.datasets import AddStepForm, DatasetForm, ExportForm, export_initial
from studio.http import HtmxHttpRequest, back_url, streaming_response, whole_number
from studio.models import (
    Dataset,
    DatasetItem,
    DatasetVersion,
    ExportJob,
    JobStatus,
    Membership,
)
from studio.services import datasets as service
from studio.services.blinding import blindness_for
from studio.services.job_limits import TooManyJobs
from studio.services.jobs import request_cancel
from studio.tasks import enqueue_export


def _get_dataset_for_user(
    request: HtmxHttpRequest, pk: int, *, edit: bool = False
) -> tuple[Dataset, Membership]:
    dataset = get_object_or_404(Dataset.objects.select_related("project"), pk=pk)
    _, membership = get_project_for_user(request, dataset.project_id, edit=edit)
    return dataset, membership


def dataset_list(request: HtmxHttpRequest, project_id: int) -> HttpResponse:
    project, membership = get_project_for_user(request, project_id)
    rows = [(d, d.latest) for d in Dataset.objects.filter(project=project)]
    return render(
        request,
        "datasets/list.html",
        {"project": project, "membership": membership, "rows": rows},
    )


@require_http_methods(["GET", "POST"])
def dataset_new(request: HtmxHttpRequest, project_id: int) -> HttpResponse:
    project, membership = get_project_for_user(request, project_id, edit=True)
    initial = {"queue": request.GET.get("queue") or None, "name": request.GET.get("name", "")}
    form = DatasetForm(request.POST or None, project=project, initial=initial)
    if request.method == "POST" and form.is_valid():
        try:
            version = service.create_version(project, request.user, form.data_object())
        except service.DatasetError as exc:
            form.add_error(None, str(exc))
        else:
            messages.success(
                request,
                f"{version.dataset.name} v{version.number}: {version.item_count} steps, "
                f"{version.corrected_count} with a corrected observation.",
            )
            return redirect("dataset_detail", dataset_id=version.dataset_id)
    names = list(Dataset.objects.filter(project=project).values_list("name", flat=True))
    return render(
        request,
        "datasets/new.html",
        {"project": project, "membership": membership, "form": form, "names": names},
        status=400 if form.is_bound else 200,
    )


def dataset_detail(request: HtmxHttpRequest, dataset_id: int) -> HttpResponse:
    dataset, membership = _get_dataset_for_user(request, dataset_id)
    versions = list(dataset.versions.order_by("-number"))
    chosen = versions[0] if versions else None
    wanted = whole_number(request.GET.get("version", ""))
    if wanted is not None:
        chosen = next((v for v in versions if v.number == wanted), chosen)
    # Blind review: the steps hidden from the member are left out of the list and of the
    # counts (a version made from a queue holds the steps people accepted, with their
    # corrections); the page says how many, and exporting waits until they are submitted.
    blindness = blindness_for(membership)
    hidden_ids: list[int] = []
    hidden_all: list[int] = []
    if blindness:
        hidden_rows = list(
            DatasetItem.objects.filter(
                version__dataset=dataset, step_id__in=blindness.step_ids
            ).values_list("version_id", "step_id", "corrected")
        )
        hidden_all = [step for _, step, _ in hidden_rows]
        for v in versions:  # the counts shown (never saved: GET does not write)
            mine = [(step, corrected) for vid, step, corrected in hidden_rows if vid == v.pk]
            v.item_count -= len(mine)
            v.corrected_count -= sum(1 for _, corrected in mine if corrected)
        hidden_ids = [step for vid, step, _ in hidden_rows if chosen and vid == chosen.pk]
    items = (
        list(
            blindness.exclude(chosen.items.all())
            .select_related("step__branch__trajectory", "correction_by")
            .order_by("position")[:50]
        )
        if chosen
        else []
    )
    return render(
        request,
        "datasets/detail.html",
        {
            "project": dataset.project,
            "membership": membership,
            "dataset": dataset,
            "versions": versions,
            "chosen": chosen,
            "items": items,
            "deleted": chosen.items.filter(step__isnull=True).count() if chosen else 0,
            "hidden_note": blindness.note(hidden_ids),
            "versions_hidden_note": blindness.note(hidden_all),
            "formats": FORMATS,
            "export_form": ExportForm(initial=export_initial(chosen)),
            "can_edit": membership.can_edit,
        },
    )


def _blind_refusal(membership: Membership, version: DatasetVersion) -> str:
    """Why the member may not export `version` yet ("" when they may): it holds steps hidden
    from them (blind review), whose rows carry people's corrections and reviews. Left out,
    the file would look complete and not be; so the export waits until they submit them."""
    blindness = blindness_for(membership)
    if not blindness:
        return ""
    note = blindness.note(
        version.items.filter(step_id__in=blindness.step_ids).values_list("step_id", flat=True)
    )
    if not note:
        return ""
    return (
        f"{note} {version.dataset.name} v{version.number} holds them, with people's corrections "
        "and reviews: you can export it once you have submitted them (a researcher can export "
        "it meanwhile)."
    )


def dataset_export(
    request: HtmxHttpRequest, version_id: int
) -> HttpResponse | StreamingHttpResponse:
    """A version as a download in the chosen format, streamed row by row."""
    version = get_object_or_404(DatasetVersion.objects.select_related("dataset"), pk=version_id)
    dataset, membership = _get_dataset_for_user(request, version.dataset_id)
    refusal = _blind_refusal(membership, version)
    if refusal:
        return HttpResponse(refusal, status=403, content_type="text/plain; charset=utf-8")
    form = ExportForm(request.GET)
    if not form.is_valid():
        return HttpResponse(
            "Choose an export format: " + ", ".join(FORMATS) + ".",
            status=400,
            content_type="text/plain; charset=utf-8",
        )
    if version.item_count == 0:
        return HttpResponse(
            f"{dataset.name} v{version.number} is empty: nothing to export.",
            status=400,
            content_type="text/plain; charset=utf-8",
        )
    counts = service.ExportCounts()
    name, chunks = service.version_chunks(
        version, form.cleaned_data["format"], form.export_options(), counts
    )
    content_type = "application/zip" if name.endswith(".zip") else "application/x-ndjson"
    response = streaming_response(request, chunks, content_type)
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    return response


@require_POST
def export_start(request: HtmxHttpRequest, version_id: int) -> HttpResponse:
    """Write the version to a file on a worker, with a progress bar (every member may)."""
    version = get_object_or_404(DatasetVersion.objects.select_related("dataset"), pk=version_id)
    dataset, membership = _get_dataset_for_user(request, version.dataset_id)
    form = ExportForm(request.POST)
    back = reverse("dataset_detail", args=[dataset.pk]) + f"?version={version.number}"
    refusal = _blind_refusal(membership, version)
    if refusal:
        messages.error(request, refusal)
        return redirect(back)
    if not form.is_valid():
        messages.error(request, "Choose an export format: " + ", ".join(FORMATS) + ".")
        return redirect(back)
    if version.item_count == 0:
        messages.error(request, f"{dataset.name} v{version.number} is empty: nothing to export.")
        return redirect(back)
    try:
        job = service.start_export(
            version, signed_in_user(request), form.cleaned_data["format"], form.export_options()
        )
    except TooManyJobs as exc:
        messages.error(request, f"The export was not started: {exc.message}.")
        return redirect(back)
    enqueue_export(job)
    return redirect("export_job", job_id=job.pk)


def _get_export_for_user(request: HtmxHttpRequest, pk: int) -> ExportJob:
    job = get_object_or_404(ExportJob.objects.select_related("version__dataset"), pk=pk)
    _get_dataset_for_user(request, job.version.dataset_id)
    return job


def export_job(request: HtmxHttpRequest, job_id: int) -> HttpResponse:
    """An export's live page; htmx polls its progress part and stops when it ends."""
    job = _get_export_for_user(request, job_id)
    dataset, membership = _get_dataset_for_user(request, job.version.dataset_id)
    # its counts (rows left out for a rejected context, ...) come from people's reviews
    refusal = _blind_refusal(membership, job.version)
    if refusal:
        return HttpResponse(refusal, status=403, content_type="text/plain; charset=utf-8")
    context = {
        "project": dataset.project,
        "membership": membership,
        "dataset": dataset,
        "job": job,
        "done": job.is_finished,
        "spec": FORMATS.get(job.format),
        "may_cancel": may_cancel_export(job, membership, request.user),
    }
    if request.htmx:
        html = render_to_string("datasets/export.html#progress", context, request=request)
        return HttpResponseStopPolling(html) if job.is_finished else HttpResponse(html)
    return render(request, "datasets/export.html", context)


def may_cancel_export(job: ExportJob, membership, user) -> bool:
    """An export is cancelled by the person who started it, or by an admin or researcher
    (an annotator may export, but never stop someone else's export)."""
    return membership.can_edit or (job.requester_id is not None and job.requester_id == user.pk)


@require_POST
def export_cancel(request: HtmxHttpRequest, job_id: int) -> HttpResponse:
    job = _get_export_for_user(request, job_id)
    _, membership = _get_dataset_for_user(request, job.version.dataset_id)
    if not may_cancel_export(job, membership, request.user):
        raise PermissionDenied(
            "Only the person who started this export, or an admin or researcher, may cancel it."
        )
    request_cancel(ExportJob, job.pk)
    return redirect("export_job", job_id=job.pk)


def export_download(request: HtmxHttpRequest, job_id: int) -> HttpResponse | FileResponse:
    job = _get_export_for_user(request, job_id)
    # whoever wrote the file, it holds the version's hidden steps as well
    _, membership = _get_dataset_for_user(request, job.version.dataset_id)
    refusal = _blind_refusal(membership, job.version)
    if refusal:
        return HttpResponse(refusal, status=403, content_type="text/plain; charset=utf-8")
    if job.status != JobStatus.SUCCEEDED or not job.stored_path:
        raise Http404("This export has no file (it has not finished, or it failed).")
    path = Path(job.stored_path)
    if not path.is_file():
        raise Http404("This export's file is gone from storage: export the version again.")
    content_type = "application/zip" if job.file_name.endswith(".zip") else "application/x-ndjson"
    return FileResponse(
        path.open("rb"), as_attachment=True, filename=job.file_name, content_type=content_type
    )


@require_POST
def step_add_to_dataset(request: HtmxHttpRequest, step_id: int) -> HttpResponse:
    """A hand-picked step goes into a dataset: a new version holding the latest one's steps
    and this one. A step whose final verdict somewhere is reject is added only once the
    warning saying where was confirmed (a second POST with `confirm`)."""
    step, membership = get_step_for_user(request, step_id, edit=True)
    form = AddStepForm(request.POST)
    back = back_url(request, reverse("step_annotate", args=[step.pk]))  # a page of this site
    if not form.is_valid():
        messages.error(request, "Name the dataset to add the step to.")
        return redirect(back)
    name = form.cleaned_data["name"].strip()
    data = service.SelectionData(
        name=name, steps=(step.pk,), confirm_rejected=form.cleaned_data["confirm"]
    )
    try:
        version = service.create_version(membership.project, request.user, data)
    except service.RejectedSteps as exc:
        # someone rejected it: say where, and add it only on a second, confirmed POST
        return render(
            request,
            "datasets/confirm_add.html",
            {
                "project": membership.project,
                "membership": membership,
                "step": step,
                "name": name,
                "reasons": exc.reasons,
                "back": back,
            },
        )
    except service.DatasetError as exc:
        messages.error(request, str(exc))
        return redirect(back)
    messages.success(
        request,
        f"Step {step.index} added: {version.dataset.name} v{version.number} holds "
        f"{version.item_count} step{'s' if version.item_count != 1 else ''}.",
    )
    return redirect(back)


urlpatterns = [
    path("projects/<int:project_id>/datasets/", dataset_list, name="dataset_list"),
    path("projects/<int:project_id>/datasets/new/", dataset_new, name="dataset_new"),
    path("datasets/<int:dataset_id>/", dataset_detail, name="dataset_detail"),
    path("dataset-versions/<int:version_id>/export/", dataset_export, name="dataset_export"),
    path("dataset-versions/<int:version_id>/exports/", export_start, name="export_start"),
    path("exports/<int:job_id>/", export_job, name="export_job"),
    path("exports/<int:job_id>/cancel/", export_cancel, name="export_cancel"),
    path("exports/<int:job_id>/download/", export_download, name="export_download"),
    path("steps/<int:step_id>/add-to-dataset/", step_add_to_dataset, name="step_add_to_dataset"),
]
