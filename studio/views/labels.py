"""A queue's labels for its owners (researchers and admins): the annotations themselves as a
download (JSONL, CSV, Parquet; annotators under pseudonyms), and the per-annotator quality
panel, an htmx fragment the queue page loads (items done, time per item, agreement with the
others and with the adjudications, as a Plotly chart and a table)."""

from __future__ import annotations

import io

from django.http import Http404, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.urls import path

from studio.access import get_project_for_user
from studio.http import HtmxHttpRequest
from studio.models import AnnotationQueue, Membership
from studio.presenters import annotator_quality as presenter
from studio.services import labels as service
from studio.services.agreement import annotator_quality


def _get_queue_for_owner(request: HtmxHttpRequest, pk: int) -> tuple[AnnotationQueue, Membership]:
    """The queue, for a researcher or admin of its project (an annotator gets 403: the labels
    and the quality panel show everyone's annotations, which a blind queue keeps from them)."""
    queue = get_object_or_404(AnnotationQueue.objects.select_related("project"), pk=pk)
    _, membership = get_project_for_user(request, queue.project_id, edit=True)
    return queue, membership


def queue_labels(request: HtmxHttpRequest, queue_id: int) -> HttpResponse:
    queue, _ = _get_queue_for_owner(request, queue_id)
    fmt = request.GET.get("format", "jsonl")
    if fmt not in service.FORMATS:
        raise Http404("unknown labels format")
    out = io.BytesIO()
    service.write_labels(queue, fmt, out)
    response = HttpResponse(out.getvalue(), content_type=service.FORMATS[fmt][0])
    response["Content-Disposition"] = f'attachment; filename="{service.file_name(queue, fmt)}"'
    return response


def queue_annotators(request: HtmxHttpRequest, queue_id: int) -> HttpResponse:
    queue, _ = _get_queue_for_owner(request, queue_id)
    rows = annotator_quality(queue)
    return render(
        request,
        "queues/_annotator_quality.html",
        {
            "queue": queue,
            "rows": presenter.table(rows),
            "figure": presenter.figure(rows) if rows else None,
            "formats": list(service.FORMATS),
        },
    )


urlpatterns = [
    path("queues/<int:queue_id>/labels/", queue_labels, name="queue_labels"),
    path("queues/<int:queue_id>/annotators/", queue_annotators, name="queue_annotators"),
]
