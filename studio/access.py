"""Object lookups scoped to the requesting user's projects: anything outside them is a 404,
and write access (import, delete, branch, simulate) needs the admin or researcher role.
Creating a project and changing a project's model endpoints are the operator's choice
(STUDIO_PROJECT_CREATORS, STUDIO_ENDPOINT_EDITORS; by default staff users and admins)."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest
from django.shortcuts import get_object_or_404

from studio.models import (
    Branch,
    Membership,
    ModelEndpoint,
    Perturbation,
    Project,
    Role,
    SimulationJob,
    Step,
    Trajectory,
    World,
)


def signed_in_user(request: HttpRequest) -> User:
    """The request's user as a `User`. LoginRequiredMiddleware sends anonymous visitors to
    the login page before any view runs, so an anonymous user here is a URL marked
    `login_not_required` by mistake: refuse it rather than query with no user."""
    user = request.user
    if not user.is_authenticated:
        raise PermissionDenied("Sign in first.")
    return user


def membership_for(request: HttpRequest, project_id: int) -> Membership:
    user = request.user
    if not user.is_authenticated:
        # No project is visible to an anonymous visitor (the login middleware normally
        # redirects them before any view runs).
        raise Http404("No such project")
    membership = (
        Membership.objects.select_related("project")
        .filter(project_id=project_id, user_id=user.pk)
        .first()
    )
    if membership is None:
        raise Http404("No such project")
    membership.user = user  # the same row: is_staff is read without another query
    return membership


def require_edit(membership: Membership, message: str | None = None) -> None:
    """403 for a member who may not edit (an annotator), with `message` when given."""
    if not membership.can_edit:
        raise PermissionDenied(message or "Annotators can view but not change trajectories.")


def get_project_for_user(
    request: HttpRequest, pk: int, *, edit: bool = False
) -> tuple[Project, Membership]:
    membership = membership_for(request, pk)
    if edit:
        require_edit(membership)
    return membership.project, membership


def get_trajectory_for_user(
    request: HttpRequest, pk: int, *, edit: bool = False
) -> tuple[Trajectory, Membership]:
    trajectory = get_object_or_404(Trajectory.objects.select_related("project"), pk=pk)
    membership = membership_for(request, trajectory.project_id)
    if edit:
        require_edit(membership)
    return trajectory, membership


def get_branch_for_user(
    request: HttpRequest, pk: int, *, edit: bool = False
) -> tuple[Branch, Membership]:
    branch = get_object_or_404(Branch.objects.select_related("trajectory__project"), pk=pk)
    membership = membership_for(request, branch.trajectory.project_id)
    if edit:
        require_edit(membership)
    return branch, membership


def get_step_for_user(
    request: HttpRequest, pk: int, *, edit: bool = False
) -> tuple[Step, Membership]:
    step = get_object_or_404(Step.objects.select_related("branch__trajectory"), pk=pk)
    membership = membership_for(request, step.branch.trajectory.project_id)
    if edit:
        require_edit(membership)
    return step, membership


def get_simulation_job_for_user(
    request: HttpRequest, pk: int, *, edit: bool = False
) -> tuple[SimulationJob, Membership]:
    job = get_object_or_404(SimulationJob.objects.select_related("trajectory"), pk=pk)
    membership = membership_for(request, job.trajectory.project_id)
    if edit:
        require_edit(membership)
    return job, membership


def is_staff(user) -> bool:
    return bool(user.is_authenticated and (user.is_staff or user.is_superuser))


# STUDIO_PROJECT_CREATORS: who may create a project (they become its admin).
PROJECT_CREATORS = {
    "staff": "staff users",
    "staff-and-admins": "staff users and admins of a project",
    "researchers": "staff users and admins or researchers of a project",
    "everyone": "every signed-in account",
}


def may_create_projects(user) -> bool:
    rule = settings.STUDIO_PROJECT_CREATORS
    if not user.is_authenticated:
        return False
    if rule == "everyone" or is_staff(user):
        return True
    roles = {"staff-and-admins": [Role.ADMIN], "researchers": [Role.ADMIN, Role.RESEARCHER]}
    return Membership.objects.filter(user_id=user.pk, role__in=roles.get(rule, [])).exists()


def project_creators() -> str:
    return PROJECT_CREATORS[settings.STUDIO_PROJECT_CREATORS]


def require_project_creator(user) -> None:
    if not may_create_projects(user):
        raise PermissionDenied(
            f"Only {project_creators()} may create projects here (the operator's setting "
            "STUDIO_PROJECT_CREATORS); ask one of them to create the project and add you."
        )


# STUDIO_ENDPOINT_EDITORS: who may add, edit, delete and test a project's model endpoints
# (an endpoint's URL is where the studio's processes send requests: see
# studio.services.endpoint_hosts), among the project's members.
ENDPOINT_EDITORS = {
    "staff": "staff users",
    "admins": "project admins and staff users",
    "researchers": "project admins, researchers and staff users",
}


def may_edit_endpoints(membership: Membership) -> bool:
    rule = settings.STUDIO_ENDPOINT_EDITORS
    if is_staff(membership.user):
        return True
    if rule == "admins":
        return membership.role == Role.ADMIN
    if rule == "researchers":
        return membership.role in (Role.ADMIN, Role.RESEARCHER)
    return False


def endpoint_editors() -> str:
    return ENDPOINT_EDITORS[settings.STUDIO_ENDPOINT_EDITORS]


def require_endpoint_editor(membership: Membership) -> None:
    """403 unless the member may change the project's model endpoints (STUDIO_ENDPOINT_EDITORS)."""
    if not may_edit_endpoints(membership):
        raise PermissionDenied(
            f"Only {endpoint_editors()} may add, change or test this project's model "
            "endpoints (the operator's setting STUDIO_ENDPOINT_EDITORS)."
        )


def get_endpoint_for_user(
    request: HttpRequest, pk: int, *, edit: bool = False, manage: bool = False
) -> tuple[ModelEndpoint, Membership]:
    """`manage`: the member must be an endpoint editor (STUDIO_ENDPOINT_EDITORS)."""
    endpoint = get_object_or_404(ModelEndpoint.objects.select_related("project"), pk=pk)
    membership = membership_for(request, endpoint.project_id)
    if manage:
        require_endpoint_editor(membership)
    elif edit:
        require_edit(membership)
    return endpoint, membership


def get_perturbation_for_user(
    request: HttpRequest, pk: int, *, edit: bool = False
) -> tuple[Perturbation, Membership]:
    entry = get_object_or_404(Perturbation.objects.select_related("project"), pk=pk)
    membership = membership_for(request, entry.project_id)
    if edit and not membership.can_edit:
        raise PermissionDenied("Annotators can read the perturbation library but not change it.")
    return entry, membership


def get_world_for_user(
    request: HttpRequest, pk: int, *, edit: bool = False
) -> tuple[World, Membership]:
    world = get_object_or_404(World.objects.select_related("project"), pk=pk)
    membership = membership_for(request, world.project_id)
    if edit and not membership.can_edit:
        raise PermissionDenied("Annotators can read worlds but not change them.")
    return world, membership
