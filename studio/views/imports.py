"""Upload a trajectory file in the browser and follow its import job."""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.template.loader import render_to_string
from django.urls import path, reverse
from django.views.decorators.csrf import csrf_exempt, csrf_protect
from django.views.decorators.http import require_http_methods, require_POST
from django_htmx.http import HttpResponseStopPolling, push_url, trigger_client_event

from studio.access import get_project_for_user
from studio.forms.imports import ImportUploadForm
from studio.http import HtmxHttpRequest
from studio.models import ImportJob
from studio.services import import_jobs
from studio.services.import_jobs import do_start_import_job
from studio.services.jobs import shown_progress, silent_for_s
from studio.services.upload_limits import rate_refusal
from studio.tasks import enqueue_import
from studio.upload_handlers import LimitedUploadHandler

# htmx event sent when an import starts or ends; the upload page's "Recent imports" listens.
IMPORTS_CHANGED = "importsChanged"


@csrf_exempt  # checked in _import_upload, once the upload handler is in place
@require_http_methods(["GET", "POST"])
def import_upload(request: HtmxHttpRequest, project_id: int) -> HttpResponse:
    project, membership = get_project_for_user(request, project_id, edit=True)
    if request.method == "POST":
        # the size and rate limits are checked as the body streams in, before the file is
        # stored anywhere (the body is read at the CSRF check: the handler must come first)
        handler = LimitedUploadHandler(request, refusal=rate_refusal(request.user))
        request.upload_handlers.insert(0, handler)
    return _import_upload(request, project, membership)


@csrf_protect
def _import_upload(request: HtmxHttpRequest, project, membership) -> HttpResponse:
    refusal = None
    if request.method == "POST":
        data, files = request.POST, request.FILES  # read: the handler has had its say
        refusal = getattr(request, "upload_refusal", None)
        form = ImportUploadForm(data, files, refusal=refusal)
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
    status = 200
    if form.errors:
        refusal = refusal or form.refusal
        status = refusal.status if refusal is not None else 400
    return render(request, template, context, status=status)


def import_job(request: HtmxHttpRequest, job_id: int) -> HttpResponse:
    job = get_object_or_404(ImportJob, pk=job_id)
    project, membership = get_project_for_user(request, job.project_id)
    # Shown, not saved: a request never writes a job's state (see studio.services.jobs).
    job.progress = shown_progress(job)
    can_edit = membership.can_edit
    context = {
        "job": job,
        "project": project,
        "membership": membership,
        "silent_for": silent_for_s(job),
        "upload": import_jobs.upload_state(job),
        "retention_days": settings.STUDIO_UPLOAD_RETENTION_DAYS,
        "can_cancel": can_edit and import_jobs.may_cancel(job),
        "can_retry": can_edit and import_jobs.may_retry(job),
    }
    if request.htmx:
        html = render_to_string("imports/job.html#job-status", context, request=request)
        if job.is_finished:
            # the upload page refreshes its list of recent imports
            return trigger_client_event(HttpResponseStopPolling(html), IMPORTS_CHANGED)
        return HttpResponse(html)
    return render(request, "imports/job.html", context)


@require_POST
def import_job_cancel(request: HtmxHttpRequest, job_id: int) -> HttpResponse:
    job = get_object_or_404(ImportJob, pk=job_id)
    get_project_for_user(request, job.project_id, edit=True)
    if job.is_finished:
        messages.error(request, f"Import {job.pk} has already ended ({job.get_status_display()}).")
    else:
        job = import_jobs.cancel_import(job)
        if job.is_finished:
            messages.success(request, f"Cancelled: nothing from {job.original_name} was imported.")
        else:
            messages.success(
                request,
                f"Stopping: the import of {job.original_name} is rolled back at its next batch; "
                "nothing from it is kept.",
            )
    return redirect("import_job", job_id=job.pk)


@require_POST
def import_job_retry(request: HtmxHttpRequest, job_id: int) -> HttpResponse:
    job = get_object_or_404(ImportJob, pk=job_id)
    get_project_for_user(request, job.project_id, edit=True)
    try:
        job = import_jobs.retry_import(job)
    except import_jobs.RetryRefused as exc:
        messages.error(request, str(exc))
        return redirect("import_job", job_id=job.pk)
    enqueue_import(job)
    messages.success(request, f"Retrying the import of {job.original_name} from its kept file.")
    return redirect("import_job", job_id=job.pk)


urlpatterns = [
    path("projects/<int:project_id>/import/", import_upload, name="import_upload"),
    path("imports/<int:job_id>/", import_job, name="import_job"),
    path("imports/<int:job_id>/cancel/", import_job_cancel, name="import_job_cancel"),
    path("imports/<int:job_id>/retry/", import_job_retry, name="import_job_retry"),
]
