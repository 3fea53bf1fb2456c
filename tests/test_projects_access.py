import pytest
from django.urls import reverse

from studio.env import ConfigError, parse_database_url
from studio.models import Branch, Membership, Role, Step, Trajectory


def test_login_required_everywhere(client, db):
    response = client.get(reverse("project_list"))
    assert response.status_code == 302
    assert reverse("login") in response["Location"]


def test_project_list_shows_only_own_projects(researcher_client, project):
    body = researcher_client.get(reverse("project_list")).content.decode()
    assert "Test project" in body
    assert "Other project" not in body


def test_members_page_of_foreign_project_is_404(outsider_client, project):
    response = outsider_client.get(reverse("project_members", args=[project.pk]))
    assert response.status_code == 404


def test_create_project_makes_creator_admin(client, project):
    # an admin of a project may create one (STUDIO_PROJECT_CREATORS: tests/test_project_creators.py)
    client.force_login(project.users["admin"])
    response = client.post(reverse("project_create"), {"name": "Fresh", "description": ""})
    assert response.status_code == 302
    m = Membership.objects.get(project__name="Fresh")
    assert m.user == project.users["admin"] and m.role == Role.ADMIN


def test_invalid_new_project_keeps_the_project_list_intact(client, project):
    """The list re-rendered beside the form's errors still says how many trajectories each
    project holds (it used to lose the counts)."""
    Trajectory.objects.create(project=project, domain="terminal", title="t", source_key="k")
    client.force_login(project.users["admin"])
    response = client.post(reverse("project_create"), {"name": "  ", "description": ""})
    assert response.status_code == 400
    body = response.content.decode()
    assert "A project needs a name" in body or "This field is required" in body
    assert "1 trajectory ·" in body


def test_only_admin_adds_members(client, project):
    client.force_login(project.users["researcher"])
    url = reverse("project_members", args=[project.pk])
    assert client.post(url, {"username": "outsider", "role": "annotator"}).status_code == 403
    client.force_login(project.users["admin"])
    response = client.post(url, {"username": "nobody-here", "role": "annotator"})
    assert response.status_code == 400
    assert "No user is called" in response.content.decode()
    assert client.post(url, {"username": "outsider", "role": "annotator"}).status_code == 302
    assert project.role_of(project.outsider) == Role.ANNOTATOR


def test_database_url_parsing_fails_loudly():
    assert parse_database_url("postgres://u:p@db:5433/studio")["PORT"] == "5433"
    assert parse_database_url("sqlite:///var/x.sqlite3")["NAME"] == "var/x.sqlite3"
    with pytest.raises(ConfigError, match="unsupported scheme"):
        parse_database_url("mysql://x/y")
    with pytest.raises(ConfigError, match="names no database"):
        parse_database_url("postgres://host/")


def _tree(project):
    traj = Trajectory.objects.create(
        project=project, domain="terminal", title="t", source_format="test", source_key="k"
    )
    root = Branch.objects.create(trajectory=traj, name="recorded")
    Step.objects.bulk_create(
        Step(branch=root, index=i, action=f"a{i}", observation=f"o{i}") for i in range(10)
    )
    child = Branch.objects.create(
        trajectory=traj, parent=root, fork_index=4, name="c", origin="simulated"
    )
    Step.objects.bulk_create(
        Step(branch=child, index=i, action=f"c{i}", observation=f"co{i}") for i in range(4, 7)
    )
    grandchild = Branch.objects.create(
        trajectory=traj, parent=child, fork_index=6, name="g", origin="edited"
    )
    Step.objects.bulk_create(
        Step(branch=grandchild, index=i, action=f"g{i}", observation="") for i in range(6, 9)
    )
    return root, child, grandchild


def test_branch_steps_inherit_parent_prefix(project):
    root, child, grandchild = _tree(project)
    assert [s.action for s in root.all_steps()] == [f"a{i}" for i in range(10)]
    assert [s.action for s in child.all_steps()] == ["a0", "a1", "a2", "a3", "c4", "c5", "c6"]
    assert [s.action for s in grandchild.all_steps()] == [
        "a0",
        "a1",
        "a2",
        "a3",
        "c4",
        "c5",
        "g6",
        "g7",
        "g8",
    ]


def test_branch_step_list_is_one_query_whatever_its_length(project, django_assert_num_queries):
    root, child, grandchild = _tree(project)
    grandchild = Branch.objects.get(pk=grandchild.pk)
    with django_assert_num_queries(1):
        steps = list(grandchild.all_steps())
    assert len(steps) == 9


def test_the_last_admin_cannot_be_demoted(client, project):
    client.force_login(project.users["admin"])
    url = reverse("project_members", args=[project.pk])
    response = client.post(url, {"username": "admin", "role": "researcher"})
    assert response.status_code == 400
    assert "only admin" in response.content.decode()
    assert project.role_of(project.users["admin"]) == Role.ADMIN
    # with a second admin the first may step down
    client.post(url, {"username": "researcher", "role": "admin"})
    assert client.post(url, {"username": "admin", "role": "annotator"}).status_code == 302
    assert project.role_of(project.users["admin"]) == Role.ANNOTATOR
