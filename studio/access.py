"""Object lookups scoped to the requesting user's projects: anything outside them is a 404,
and write access (import, delete, branch, simulate) needs the admin or researcher role."""

from __future__ import annotations

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


def require_admin(membership: Membership) -> None:
    if membership.role != Role.ADMIN:
        raise PermissionDenied("Only project admins can change the project's model endpoints.")


def get_endpoint_for_user(
    request: HttpRequest, pk: int, *, edit: bool = False, admin: bool = False
) -> tuple[ModelEndpoint, Membership]:
    endpoint = get_object_or_404(ModelEndpoint.objects.select_related("project"), pk=pk)
    membership = membership_for(request, endpoint.project_id)
    if admin:
        require_admin(membership)
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
