from __future__ import annotations

from django.db import transaction

from studio.models import Membership, Project, Role
from studio.services.endpoints import seed_endpoints


@transaction.atomic
def do_create_project(*, name: str, description: str = "", owner=None) -> Project:
    project = Project.objects.create(name=name, description=description)
    if owner is not None:
        Membership.objects.create(project=project, user=owner, role=Role.ADMIN)
    seed_endpoints(project)  # the environment's models are the project's first ones
    return project


def get_or_create_project(name: str, owner=None) -> tuple[Project, bool]:
    project = Project.objects.filter(name=name).first()
    if project is not None:
        return project, False
    return do_create_project(name=name, owner=owner), True
