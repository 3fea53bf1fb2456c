"""The Models page: the project's model endpoints (world, agent, judge, embeddings). Endpoint editors
(STUDIO_ENDPOINT_EDITORS, default: the project's admins and staff users) add, edit, delete,
test and choose the defaults; every member sees them."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.urls import path
from django.utils import timezone
from django.views.decorators.http import require_http_methods, require_POST
from django_htmx.http import HttpResponseStopPolling

from studio.access import (
    endpoint_editors,
    get_endpoint_for_user,
    get_project_for_user,
    may_edit_endpoints,
    require_endpoint_editor,
)
from studio.forms.endpoints import EndpointForm
from studio.http import HtmxHttpRequest
from studio.models import EndpointRole, ModelEndpoint
from studio.services import endpoints as service
from studio.services.finetunes import runs_by_endpoint
from studio.tasks import enqueue_endpoint_probe


def _groups(project) -> list[tuple[str, str, list[ModelEndpoint]]]:
    by_role: dict[str, list[ModelEndpoint]] = {r.value: [] for r in EndpointRole}
    trained = runs_by_endpoint(project)  # a fine-tuned model's lineage: the run that made it
    for endpoint in project.endpoints.order_by("-is_default", "name"):
        endpoint.finetune = trained.get(endpoint.pk)  # type: ignore[attr-defined]
        by_role[endpoint.role].append(endpoint)
    return [(role.value, role.label, by_role[role.value]) for role in EndpointRole]


def endpoint_list(request: HtmxHttpRequest, project_id: int) -> HttpResponse:
    project, membership = get_project_for_user(request, project_id)
    return render(
        request,
        "endpoints/list.html",
        {
            "project": project,
            "membership": membership,
            "groups": _groups(project),
            "can_manage": may_edit_endpoints(membership),
            "editors": endpoint_editors(),
        },
    )


@require_http_methods(["GET", "POST"])
def endpoint_create(request: HtmxHttpRequest, project_id: int) -> HttpResponse:
    project, membership = get_project_for_user(request, project_id)
    require_endpoint_editor(membership)
    initial = {"role": request.GET.get("role") or EndpointRole.WORLD, "kind": "openai"}
    form = EndpointForm(request.POST or None, project=project, initial=initial)
    if request.method == "POST" and form.is_valid():
        endpoint = service.save_endpoint(project, form.endpoint_data(), user=request.user).endpoint
        messages.success(request, f"Added {endpoint.get_role_display().lower()} {endpoint.name!r}.")
        return redirect("endpoint_list", project_id=project.pk)
    return render(
        request,
        "endpoints/form.html",
        {"project": project, "membership": membership, "form": form, "endpoint": None},
        status=400 if form.errors else 200,
    )


@require_http_methods(["GET", "POST"])
def endpoint_edit(request: HtmxHttpRequest, endpoint_id: int) -> HttpResponse:
    endpoint, membership = get_endpoint_for_user(request, endpoint_id, manage=True)
    project = endpoint.project
    form = EndpointForm(request.POST or None, project=project, endpoint=endpoint)
    if request.method == "POST" and form.is_valid():
        saved = service.save_endpoint(project, form.endpoint_data(), endpoint=endpoint)
        messages.success(request, f"Saved {endpoint.name!r}.")
        if saved.key_dropped:
            messages.warning(
                request,
                f"The API key stored for {endpoint.name!r} was removed: it was given for its "
                "old server, and a key is only sent where it was given. Type it again if the "
                "new server needs it.",
            )
        return redirect("endpoint_list", project_id=project.pk)
    return render(
        request,
        "endpoints/form.html",
        {"project": project, "membership": membership, "form": form, "endpoint": endpoint},
        status=400 if form.errors else 200,
    )


@require_POST
def endpoint_delete(request: HtmxHttpRequest, endpoint_id: int) -> HttpResponse:
    endpoint, _ = get_endpoint_for_user(request, endpoint_id, manage=True)
    project_id = endpoint.project_id
    try:
        service.delete_endpoint(endpoint)
    except service.EndpointError as exc:
        messages.error(request, f"{endpoint.name!r} was not deleted: {exc}.")
    else:
        messages.success(
            request, f"Deleted {endpoint.name!r}; jobs that used it keep its model and URL."
        )
    return redirect("endpoint_list", project_id=project_id)


@require_POST
def endpoint_make_default(request: HtmxHttpRequest, endpoint_id: int) -> HttpResponse:
    endpoint, _ = get_endpoint_for_user(request, endpoint_id, manage=True)
    service.make_default(endpoint)
    messages.success(
        request, f"{endpoint.name!r} is now the first {endpoint.get_role_display().lower()}."
    )
    return redirect("endpoint_list", project_id=endpoint.project_id)


def _row(request: HtmxHttpRequest, endpoint: ModelEndpoint, membership) -> HttpResponse:
    endpoint.finetune = runs_by_endpoint(endpoint.project).get(endpoint.pk)  # type: ignore[attr-defined]
    return render(
        request,
        "endpoints/list.html#endpoint-row",
        {
            "e": endpoint,
            "project": endpoint.project,
            "can_manage": may_edit_endpoints(membership),
        },
    )


@require_POST
def endpoint_test(request: HtmxHttpRequest, endpoint_id: int) -> HttpResponse:
    """One-token request to the model: whether it answered as a model, never what else
    answered (`service.probe_chat`). An in-process model is loaded by a gpu worker (the
    page polls the row until it answers)."""
    endpoint, membership = get_endpoint_for_user(request, endpoint_id, manage=True)
    if endpoint.kind == "hf":
        ModelEndpoint.objects.filter(pk=endpoint.pk).update(
            test_pending=True, tested_at=timezone.now()
        )
        enqueue_endpoint_probe(endpoint.pk)
    else:
        if endpoint.kind == "retrieval":
            probe = service.probe_retrieval
        elif endpoint.role == EndpointRole.EMBEDDING:
            probe = service.probe_embedding  # POST /v1/embeddings
        else:
            probe = service.probe_chat
        service.record_test(endpoint, *probe(endpoint))
    endpoint.refresh_from_db()
    if request.htmx:
        return _row(request, endpoint, membership)
    return redirect("endpoint_list", project_id=endpoint.project_id)


def endpoint_row(request: HtmxHttpRequest, endpoint_id: int) -> HttpResponse:
    """The row alone, polled while a test runs in a worker; reading never writes."""
    endpoint, membership = get_endpoint_for_user(request, endpoint_id)
    response = _row(request, endpoint, membership)
    if not endpoint.test_pending or endpoint.test_unanswered:
        return HttpResponseStopPolling(response.content)
    return response


urlpatterns = [
    path("projects/<int:project_id>/models/", endpoint_list, name="endpoint_list"),
    path("projects/<int:project_id>/models/new/", endpoint_create, name="endpoint_create"),
    path("models/<int:endpoint_id>/edit/", endpoint_edit, name="endpoint_edit"),
    path("models/<int:endpoint_id>/delete/", endpoint_delete, name="endpoint_delete"),
    path("models/<int:endpoint_id>/default/", endpoint_make_default, name="endpoint_make_default"),
    path("models/<int:endpoint_id>/test/", endpoint_test, name="endpoint_test"),
    path("models/<int:endpoint_id>/", endpoint_row, name="endpoint_row"),
]
