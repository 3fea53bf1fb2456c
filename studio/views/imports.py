"""Upload a trajectory file in the browser and follow its import job."""

from __future__ import annotations

from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.template.loader import render_to_string
from django.urls import path, reverse
from django.views.decorators.http import require_http_methods
from django_htmx.http import HttpResponseStopPolling, push_url, trigger_client_event

from studio.access import get_project_for_user
from studio.forms.imports import ImportUploadForm
from studio.http import HtmxHttpRequest
from studio.models import ImportJob
from studio.services.import_jobs import do_start_import_job
from studio.services.jobs import shown_progress, silent_for_s
from studio.tasks import enqueue_import

# htmx event sent when an import starts or ends; the upload page's "Recent imports" listens.
IMPORTS_CHANGED = "importsChanged"


@require_http_methods(["GET", "POST"])
def import_upload(request: HtmxHttpRequest, project_id: int) -> HttpResponse:
    project, membership = get_project_for_user(request, project_id, edit=True)
    if request.method == "POST":
        form = ImportUploadForm(request.POST, request.FILES)
        if form.is_valid():
            job = do_start_import_job(
                project=project,
                user=request.user,
                uploaded=form.cleaned_data["file"],
                fmt=form.cleaned_data["format"],
                domain=form.cleaned_data["domain"],
            )
            enqueue_import(job)
            if request.htmx:
                response = render(
                    request, "imports/job.html#job-status", {"job": job, "project": project}
                )
                response = push_url(response, reverse("import_job", args=[job.pk]))
                return trigger_client_event(response, IMPORTS_CHANGED)
            return redirect("import_job", job_id=job.pk)
    else:
        form = ImportUploadForm()
    context = {
        "project": project,
        "membership": membership,
        "form": form,
        "recent_jobs": project.import_jobs.select_related("requester")[:10],
    }
    template = "imports/upload.html"
    if request.htmx:
        part = "recent-imports" if request.GET.get("part") == "recent" else "upload-form"
        template = f"imports/upload.html#{part}"
    return render(request, template, context, status=400 if form.errors else 200)


def import_job(request: HtmxHttpRequest, job_id: int) -> HttpResponse:
    job = get_object_or_404(ImportJob, pk=job_id)
    project, membership = get_project_for_user(request, job.project_id)
    # Shown, not saved: a request never writes a job's state (see studio.services.jobs).
    job.progress = shown_progress(job)
    context = {
        "job": job,
        "project": project,
        "membership": membership,
        "silent_for": silent_for_s(job),
    }
    if request.htmx:
        html = render_to_string("imports/job.html#job-status", context, request=request)
        if job.is_finished:
            # the upload page refreshes its list of recent imports
            return trigger_client_event(HttpResponseStopPolling(html), IMPORTS_CHANGED)
        return HttpResponse(html)
    return render(request, "imports/job.html", context)


urlpatterns = [
    path("projects/<int:project_id>/import/", import_upload, name="import_upload"),
    path("imports/<int:job_id>/", import_job, name="import_job"),
]
