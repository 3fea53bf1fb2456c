"""A project's API tokens: admins create (the token is shown once) and revoke them."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import path
from django.views.decorators.http import require_POST

from studio.access import get_project_for_user
from studio.http import HtmxHttpRequest
from studio.models import ApiToken, Role, World
from studio.services import tokens as service


def _require_admin(membership) -> None:
    from django.core.exceptions import PermissionDenied

    if membership.role != Role.ADMIN:
        raise PermissionDenied("Only project admins manage API tokens.")


def _page(request, project, membership, new_token=None, status=200) -> HttpResponse:
    return render(
        request,
        "tokens/list.html",
        {
            "project": project,
            "membership": membership,
            "tokens": ApiToken.objects.filter(project=project),
            "new_token": new_token,
            "worlds": World.objects.filter(project=project),
            "base": request.build_absolute_uri("/").rstrip("/"),
        },
        status=status,
    )


def token_list(request: HtmxHttpRequest, project_id: int) -> HttpResponse:
    project, membership = get_project_for_user(request, project_id)
    _require_admin(membership)
    return _page(request, project, membership)


@require_POST
def token_create(request: HtmxHttpRequest, project_id: int) -> HttpResponse:
    project, membership = get_project_for_user(request, project_id)
    _require_admin(membership)
    try:
        row, token = service.create_token(project, request.POST.get("name", ""), request.user)
    except ValueError as exc:
        messages.error(request, f"No token made: {exc}.")
        return redirect("token_list", project_id=project.pk)
    # The token is in this response only (no redirect, nothing kept to show it again).
    return _page(request, project, membership, {"name": row.name, "token": token}, status=201)


@require_POST
def token_revoke(request: HtmxHttpRequest, token_id: int) -> HttpResponse:
    row = get_object_or_404(ApiToken, pk=token_id)
    project, membership = get_project_for_user(request, row.project_id)
    _require_admin(membership)
    service.revoke(row)
    messages.success(request, f"Revoked {row.name!r}: it no longer opens anything.")
    return redirect("token_list", project_id=project.pk)


urlpatterns = [
    path("projects/<int:project_id>/tokens/", token_list, name="token_list"),
    path("projects/<int:project_id>/tokens/new/", token_create, name="token_create"),
    path("tokens/<int:token_id>/revoke/", token_revoke, name="token_revoke"),
]
