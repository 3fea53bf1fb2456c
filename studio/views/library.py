from __future__ import annotations

from django.http import HttpResponse
from django.shortcuts import render
from django.urls import path

from studio.access import get_project_for_user
from studio.http import HtmxHttpRequest


def library(request: HtmxHttpRequest, project_id: int) -> HttpResponse:
    project, membership = get_project_for_user(request, project_id)
    trajectories = project.trajectories.order_by("-created_at")[:50]
    return render(
        request,
        "library/library.html",
        {"project": project, "membership": membership, "trajectories": trajectories},
    )


urlpatterns = [
    path("projects/<int:project_id>/", library, name="library"),
]
