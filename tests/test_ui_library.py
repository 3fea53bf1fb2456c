"""The project library: text search, filters, sorting, pagination, htmx partial, delete."""

from __future__ import annotations

import re
from datetime import timedelta

from django.test import Client
from django.urls import NoReverseMatch, reverse
from django.utils import timezone

from studio.models import Branch, Step, Trajectory
from studio.views.library import PAGE_SIZE
from tests.support.ui import make_trajectory


def titles(response) -> list[str]:
    html = response.content.decode()
    return re.findall(r'<td class="t-title"><a href="/trajectories/\d+/">([^<]*)</a>', html)


def lib(client, project, **params):
    return client.get(reverse("library", args=[project.pk]), params)


def test_search_matches_title_task_actions_and_observations_once(researcher_client, project):
    make_trajectory(project, title="Flight booking", task_instruction="Book a seat")
    make_trajectory(
        project, title="Shell", steps=[("grep -r needle .", "no match"), ("ls", "needle.txt")]
    )
    make_trajectory(project, title="Weather", task_instruction="Find the NEEDLE forecast")
    make_trajectory(project, title="Other", steps=[("cat a", "haystack")])
    assert sorted(titles(lib(researcher_client, project, q="needle"))) == ["Shell", "Weather"]
    assert titles(lib(researcher_client, project, q="flight")) == ["Flight booking"]
    assert titles(lib(researcher_client, project, q="HAYSTACK")) == ["Other"]
    assert titles(lib(researcher_client, project, q="nothing-like-this")) == []
    assert (
        "No trajectory matches these filters."
        in lib(researcher_client, project, q="zzz").content.decode()
    )


def test_search_covers_branch_steps_too(researcher_client, project):
    traj = make_trajectory(project, title="Base", n_steps=2)
    root = traj.branches.get()
    child = Branch.objects.create(trajectory=traj, parent=root, fork_index=1, name="alt")
    Step.objects.create(
        branch=child, index=1, action="rm -rf /tmp/x", observation="simulated unicorn"
    )
    assert titles(lib(researcher_client, project, q="unicorn")) == ["Base"]


def test_filters_domain_source_tag(researcher_client, project):
    make_trajectory(project, title="A", domain="web", source_format="webvoyager", tags=["gold"])
    make_trajectory(project, title="B", domain="web", source_format="inspect")
    make_trajectory(
        project, title="C", domain="android", source_format="androidworld", tags=["gold"]
    )
    make_trajectory(project.other, title="Not mine", domain="web", source_format="webvoyager")
    assert sorted(titles(lib(researcher_client, project, domain="web"))) == ["A", "B"]
    assert titles(lib(researcher_client, project, source="inspect")) == ["B"]
    assert sorted(titles(lib(researcher_client, project, tag="gold"))) == ["A", "C"]
    assert titles(lib(researcher_client, project, domain="web", tag="gold")) == ["A"]
    page = lib(researcher_client, project).content.decode()
    # choices come from this project only
    assert '<option value="inspect">' in page and "Not mine" not in page


def test_invalid_filter_is_a_clear_400(researcher_client, project):
    make_trajectory(project, title="A")
    response = lib(researcher_client, project, sort="sideways", domain="moon")
    assert response.status_code == 400
    html = response.content.decode()
    assert "These filters are not valid" in html
    assert "Sort: Select a valid choice. sideways is not one of the available choices." in html
    assert "Domain: Select a valid choice." in html
    assert titles(response) == []


def test_sorting(researcher_client, project):
    now = timezone.now()
    for i, (title, steps) in enumerate([("banana", 5), ("Apple", 1), ("cherry", 9)]):
        t = make_trajectory(project, title=title, n_steps=steps)
        Trajectory.objects.filter(pk=t.pk).update(created_at=now - timedelta(days=10 - i))
    assert titles(lib(researcher_client, project)) == ["cherry", "Apple", "banana"]
    assert titles(lib(researcher_client, project, sort="oldest")) == ["banana", "Apple", "cherry"]
    assert titles(lib(researcher_client, project, sort="title")) == ["Apple", "banana", "cherry"]
    assert titles(lib(researcher_client, project, sort="steps")) == ["cherry", "banana", "Apple"]


def test_pagination_keeps_filters(researcher_client, project):
    for i in range(PAGE_SIZE + 5):
        make_trajectory(project, title=f"web {i:02d}", domain="web", n_steps=1)
    make_trajectory(project, title="terminal one", domain="terminal", n_steps=1)
    first = lib(researcher_client, project, domain="web", sort="title")
    assert len(titles(first)) == PAGE_SIZE
    assert f"1–{PAGE_SIZE} of {PAGE_SIZE + 5}" in first.content.decode()
    assert 'href="?domain=web&amp;sort=title&amp;page=2"' in first.content.decode()
    second = lib(researcher_client, project, domain="web", sort="title", page=2)
    assert titles(second) == [f"web {i:02d}" for i in range(PAGE_SIZE, PAGE_SIZE + 5)]
    # out of range pages show the last page rather than failing
    assert titles(lib(researcher_client, project, domain="web", sort="title", page=99)) == titles(
        second
    )


def test_htmx_request_gets_only_the_results_partial(researcher_client, project):
    make_trajectory(project, title="Partial please", domain="swe", tags=["t1"])
    response = researcher_client.get(
        reverse("library", args=[project.pk]), {"q": "partial"}, HTTP_HX_REQUEST="true"
    )
    html = response.content.decode()
    assert html.lstrip().startswith('<div id="results"')
    assert "<html" not in html and 'id="lib-filters"' not in html
    assert titles(response) == ["Partial please"]
    full = researcher_client.get(reverse("library", args=[project.pk])).content.decode()
    assert f'hx-get="/projects/{project.pk}/"' in full and 'hx-push-url="true"' in full
    assert 'hx-target="#results"' in full


def test_row_shows_domain_source_steps_tags(researcher_client, project):
    t = make_trajectory(
        project,
        title="Row",
        domain="android",
        source_format="androidworld",
        n_steps=7,
        tags=["alpha", "beta"],
    )
    html = lib(researcher_client, project).content.decode()
    row = html[html.index(f'id="traj-row-{t.pk}"') :]
    row = row[: row.index("</tr>")]
    assert '<span class="badge dom dom-android">Android</span>' in row
    assert "androidworld" in row and '<td class="num">7</td>' in row
    assert '<span class="chip">alpha</span><span class="chip">beta</span>' in row
    assert f'href="/trajectories/{t.pk}/"' in row


def test_import_button_only_for_editors(researcher_client, project):
    try:
        import_url = reverse("import_upload", args=[project.pk])
    except NoReverseMatch:
        import_url = None
    researcher_page = lib(researcher_client, project).content.decode()
    annotator_client = Client()
    annotator_client.force_login(project.users["annotator"])
    annotator_page = lib(annotator_client, project).content.decode()
    if import_url:
        assert f'href="{import_url}"' in researcher_page
        assert f'href="{import_url}"' not in annotator_page
    else:  # the imports area is not there: the page still renders, without the button
        assert "Import trajectories" not in researcher_page


def test_researcher_deletes_with_confirmation(researcher_client, project):
    traj = make_trajectory(project, title="Doomed", n_steps=3)
    keep = make_trajectory(project, title="Keep", n_steps=2)
    confirm = researcher_client.get(reverse("trajectory_delete", args=[traj.pk]))
    assert confirm.status_code == 200 and "Delete trajectory?" in confirm.content.decode()
    response = researcher_client.post(reverse("trajectory_delete", args=[traj.pk]))
    assert response.status_code == 302 and response["Location"] == reverse(
        "library", args=[project.pk]
    )
    assert not Trajectory.objects.filter(pk=traj.pk).exists()
    assert not Step.objects.filter(branch__trajectory_id=traj.pk).exists()
    assert Step.objects.filter(branch__trajectory=keep).count() == 2
    assert "Deleted trajectory" in researcher_client.get(response["Location"]).content.decode()


def test_htmx_delete_removes_the_row(researcher_client, project):
    traj = make_trajectory(project, title="Row to go")
    html = lib(researcher_client, project).content.decode()
    assert 'hx-confirm="Delete the trajectory “Row to go”' in html
    response = researcher_client.post(
        reverse("trajectory_delete", args=[traj.pk]), HTTP_HX_REQUEST="true"
    )
    assert response.status_code == 200 and response.content == b""
    assert not Trajectory.objects.filter(pk=traj.pk).exists()


def test_delete_is_post_only(researcher_client, project):
    traj = make_trajectory(project)
    assert researcher_client.put(reverse("trajectory_delete", args=[traj.pk])).status_code == 405
