from __future__ import annotations

from django.contrib import messages
from django.db.models import Count
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.urls import path
from django.views.decorators.http import require_http_methods

from studio.access import (
    get_project_for_user,
    may_create_projects,
    project_creators,
    require_project_creator,
    signed_in_user,
)
from studio.forms.projects import MemberForm, ProjectForm
from studio.http import HtmxHttpRequest
from studio.models import Membership, Role
from studio.services.projects import do_create_project


def _memberships(user):
    return (
        Membership.objects.filter(user=user)
        .select_related("project")
        .annotate(n_trajectories=Count("project__trajectories"))
        .order_by("project__name")
    )


def _list_context(user, form: ProjectForm) -> dict:
    return {
        "memberships": _memberships(user),
        "form": form,
        # the New project form only for those who may (STUDIO_PROJECT_CREATORS)
        "may_create": may_create_projects(user),
        "creators": project_creators(),
    }


def project_list(request: HtmxHttpRequest) -> HttpResponse:
    return render(
        request, "projects/list.html", _list_context(signed_in_user(request), ProjectForm())
    )


@require_http_methods(["POST"])
def project_create(request: HtmxHttpRequest) -> HttpResponse:
    user = signed_in_user(request)
    require_project_creator(user)  # 403 naming STUDIO_PROJECT_CREATORS
    form = ProjectForm(request.POST)
    if not form.is_valid():
        # The same list as the page (with its trajectory counts) beside the form's errors.
        return render(request, "projects/list.html", _list_context(user, form), status=400)
    project = do_create_project(
        name=form.cleaned_data["name"],
        description=form.cleaned_data["description"],
        owner=user,
    )
    messages.success(request, f"Created project {project.name}.")
    return redirect("library", project_id=project.pk)


@require_http_methods(["GET", "POST"])
def project_members(request: HtmxHttpRequest, project_id: int) -> HttpResponse:
    project, membership = get_project_for_user(request, project_id)
    is_admin = membership.role == Role.ADMIN
    form = MemberForm(project=project)
    if request.method == "POST":
        if not is_admin:
            return HttpResponse("Only project admins can change members.", status=403)
        form = MemberForm(request.POST, project=project)
        if form.is_valid():
            form.save()
            messages.success(request, f"{form.cleaned_data['username']} is now a member.")
            return redirect("project_members", project_id=project.pk)
    return render(
        request,
        "projects/members.html",
        {
            "project": project,
            "membership": membership,
            "is_admin": is_admin,
            "members": project.memberships.select_related("user").order_by("user__username"),
            "form": form,
        },
        status=400 if form.errors else 200,
    )


urlpatterns = [
    path("", project_list, name="project_list"),
    path("projects/new/", project_create, name="project_create"),
    path("projects/<int:project_id>/members/", project_members, name="project_members"),
]
