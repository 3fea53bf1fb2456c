"""Who may create projects (STUDIO_PROJECT_CREATORS) and who may add, edit and test a project's
model endpoints (STUDIO_ENDPOINT_EDITORS): by default staff users and admins of a project
create projects, and a project's admins (and staff members) manage its endpoints. A refusal
is a 403 naming the setting, and nothing is written."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.urls import reverse

from studio.models import Membership, ModelEndpoint, Project, Role

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[1]


def create(client, name="Fresh"):
    return client.post(reverse("project_create"), {"name": name, "description": ""})


def add_endpoint(client, project, name="served"):
    return client.post(
        reverse("endpoint_create", args=[project.pk]),
        {
            "name": name,
            "role": "world",
            "kind": "openai",
            "base_url": "http://127.0.0.1:9/v1",
            "model": "m",
        },
    )


def test_an_annotator_and_an_account_without_a_project_cannot_create_one(
    client, project, make_user
):
    nobody = make_user("nobody")  # an account in no project at all
    for user in (project.users["annotator"], project.users["researcher"], nobody):
        client.force_login(user)
        page = client.get(reverse("project_list")).content.decode()
        assert 'id="new-project"' not in page
        assert 'action="/projects/new/"' not in page
        assert "STUDIO_PROJECT_CREATORS" in page  # the page says why there is no form
        r = create(client)
        assert r.status_code == 403, user.username
        assert "STUDIO_PROJECT_CREATORS" in r.content.decode()
        assert "staff users and admins of a project" in r.content.decode()
    assert not Project.objects.filter(name="Fresh").exists()
    assert not Membership.objects.filter(project__name="Fresh").exists()


def test_an_admin_of_a_project_and_a_staff_user_can(client, project, make_user):
    client.force_login(project.users["admin"])
    assert 'id="new-project"' in client.get(reverse("project_list")).content.decode()
    assert create(client, "By an admin").status_code == 302
    made = Project.objects.get(name="By an admin")
    assert made.role_of(project.users["admin"]) == Role.ADMIN
    # a staff user in no project (what `createsuperuser` makes on a fresh install)
    staff = make_user("operator")
    staff.is_staff = True
    staff.save(update_fields=["is_staff"])
    client.force_login(staff)
    assert 'id="new-project"' in client.get(reverse("project_list")).content.decode()
    assert create(client, "By staff").status_code == 302
    by_staff = Project.objects.get(name="By staff")
    assert by_staff.role_of(staff) == Role.ADMIN
    # ... who, as its admin, adds its models
    assert add_endpoint(client, by_staff).status_code == 302


@pytest.mark.parametrize(
    ("rule", "may"),
    [
        ("staff", set()),
        ("staff-and-admins", {"admin"}),
        ("researchers", {"admin", "researcher"}),
        ("everyone", {"admin", "researcher", "annotator", "nobody"}),
    ],
)
def test_the_operator_chooses_who_may(client, project, make_user, settings, rule, may):
    settings.STUDIO_PROJECT_CREATORS = rule
    users = {**project.users, "nobody": make_user("nobody")}
    for name, user in users.items():
        client.force_login(user)
        r = create(client, f"by {name}")
        assert r.status_code == (302 if name in may else 403), (rule, name)
        assert Project.objects.filter(name=f"by {name}").exists() == (name in may)


def test_endpoints_are_added_by_admins_only_by_default(client, project):
    for role in ("annotator", "researcher"):
        client.force_login(project.users[role])
        page = client.get(reverse("endpoint_list", args=[project.pk])).content.decode()
        assert 'id="endpoint-add"' not in page and "endpoint-test-button" not in page
        assert "Only project admins and staff users add models here" in page
        r = add_endpoint(client, project)
        assert r.status_code == 403
        assert "STUDIO_ENDPOINT_EDITORS" in r.content.decode()
        assert client.get(reverse("endpoint_create", args=[project.pk])).status_code == 403
    assert not ModelEndpoint.objects.filter(name="served").exists()
    retrieval = project.endpoints.get(kind="retrieval")
    client.force_login(project.users["researcher"])
    for name in ("endpoint_edit", "endpoint_delete", "endpoint_test", "endpoint_make_default"):
        assert client.post(reverse(name, args=[retrieval.pk])).status_code == 403, name
    client.force_login(project.users["admin"])
    page = client.get(reverse("endpoint_list", args=[project.pk])).content.decode()
    assert 'id="endpoint-add"' in page and "endpoint-test-button" in page
    assert add_endpoint(client, project).status_code == 302


def test_a_staff_member_of_any_role_manages_endpoints(client, project):
    annotator = project.users["annotator"]
    annotator.is_staff = True
    annotator.save(update_fields=["is_staff"])
    client.force_login(annotator)
    assert add_endpoint(client, project).status_code == 302


def test_the_operator_lets_researchers_manage_endpoints_or_only_staff(client, project, settings):
    settings.STUDIO_ENDPOINT_EDITORS = "researchers"
    client.force_login(project.users["researcher"])
    assert add_endpoint(client, project, "by researcher").status_code == 302
    client.force_login(project.users["annotator"])
    assert add_endpoint(client, project, "by annotator").status_code == 403
    settings.STUDIO_ENDPOINT_EDITORS = "staff"
    client.force_login(project.users["admin"])  # no staff flag in the fixture
    r = add_endpoint(client, project, "by admin")
    assert r.status_code == 403 and "Only staff users may" in r.content.decode()
    assert set(project.endpoints.values_list("name", flat=True)) >= {"by researcher"}
    assert not project.endpoints.filter(name__in=["by annotator", "by admin"]).exists()


def test_the_demo_users_can_do_what_the_readme_says(client, monkeypatch):
    """`load_demo` (scripts/dev.sh): the demo admin is staff and the Demo project's admin, so
    it creates projects and manages models; the researcher and annotator do neither."""
    from django.core.management import call_command

    monkeypatch.setenv("STUDIO_DEMO_MODELS_URL", "http://127.0.0.1:8199/v1")
    call_command("load_demo", stdout=open(os.devnull, "w"))  # noqa: SIM115
    demo = Project.objects.get(name="Demo")
    scripted = demo.endpoints.get(name="Scripted demo world")
    users = {m.user.username: m.user for m in demo.memberships.select_related("user")}
    client.force_login(users["admin"])
    assert create(client, "Admin's").status_code == 302
    assert add_endpoint(client, demo).status_code == 302
    for name in ("researcher", "annotator"):
        client.force_login(users[name])
        assert create(client, f"{name}'s").status_code == 403
        assert add_endpoint(client, demo, f"{name}'s").status_code == 403
        assert client.post(reverse("endpoint_test", args=[scripted.pk])).status_code == 403


@pytest.mark.parametrize(
    ("name", "value", "line"),
    [
        (
            "STUDIO_PROJECT_CREATORS",
            "admins",
            "configuration error: STUDIO_PROJECT_CREATORS='admins' must be one of staff, "
            "staff-and-admins, researchers, everyone",
        ),
        (
            "STUDIO_ENDPOINT_EDITORS",
            "everyone",
            "configuration error: STUDIO_ENDPOINT_EDITORS='everyone' must be one of staff, "
            "admins, researchers",
        ),
    ],
)
def test_a_bad_value_stops_the_studio_naming_it(tmp_path, name, value, line):
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TMPDIR")}
    env.update(
        {
            "DEBUG": "1",
            "PYTHONPATH": str(ROOT),
            "STUDIO_DATA_DIR": str(tmp_path),
            "DATABASE_URL": f"sqlite:///{tmp_path / 'x.sqlite3'}",
            "STUDIO_BROKER": "filesystem",
            name: value,
        }
    )
    done = subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1 and done.stderr.strip() == line
