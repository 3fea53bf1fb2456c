"""Find inside a trajectory on the server: ordered hits over every step of the shown branch,
bounded, only what the page shows, inside the user's projects, and GET never writes."""

from __future__ import annotations

from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from studio.models import Step, StepAnnotation
from studio.views.trajectories import PREVIEW_CHARS
from studio.views.trajectory_find import HIT_LIMIT
from tests.support.ui import make_child_branch, make_trajectory


def find(client, traj, q, **params):
    return client.get(reverse("trajectory_find", args=[traj.pk]), {"q": q, **params})


def test_hits_are_ordered_case_insensitive_with_field_and_offset(researcher_client, project):
    traj = make_trajectory(
        project,
        step_factory=lambda i: {
            "action": f"grep Needle file-{i}",
            "observation": "no match" if i == 1 else f"needle here; and a NEEDLE at {i}",
            "thinking": "look for the needle" if i == 2 else "",
        },
        n_steps=3,
    )
    make_trajectory(project, steps=[("needle elsewhere", "needle")])  # another trajectory
    data = find(researcher_client, traj, "neEdle").json()
    got = [(h["step"], h["field"], h["occurrence"], h["offset"]) for h in data["hits"]]
    assert got == [
        (0, "action", 0, 5),
        (0, "observation", 0, 0),
        (0, "observation", 1, 19),
        (1, "action", 0, 5),
        (2, "thinking", 0, 13),
        (2, "action", 0, 5),
        (2, "observation", 0, 0),
        (2, "observation", 1, 19),
    ]
    assert all(h["part"] == "shown" for h in data["hits"])
    assert data["capped"] is False
    assert find(researcher_client, traj, "absent-word").json()["hits"] == []
    assert find(researcher_client, traj, "   ").json()["hits"] == []


def test_a_branch_is_searched_with_its_inherited_steps_only(researcher_client, project):
    traj = make_trajectory(project, n_steps=6)  # "echo i" / "output i"
    child = make_child_branch(traj, fork_index=3, n_own=2)  # alt action 3, 4
    root_hits = find(researcher_client, traj, "output").json()["hits"]
    assert [h["step"] for h in root_hits] == [0, 1, 2, 3, 4, 5]
    child_data = find(researcher_client, traj, "o", branch=child.pk).json()
    assert child_data["branch"] == child.pk
    steps = {h["step"] for h in child_data["hits"]}
    assert steps == {0, 1, 2, 3, 4}
    obs = [h for h in child_data["hits"] if h["field"] == "observation" and h["step"] >= 3]
    assert all(h["offset"] >= 0 for h in obs)
    assert (
        find(researcher_client, traj, "simulated", branch=child.pk).json()["hits"][0]["step"] == 3
    )
    assert find(researcher_client, traj, "simulated").json()["hits"] == []


def test_hits_are_bounded_and_say_so(researcher_client, project):
    traj = make_trajectory(
        project,
        step_factory=lambda i: {"action": "x " * 30, "observation": "none"},
        n_steps=40,
    )
    data = find(researcher_client, traj, "x").json()
    assert len(data["hits"]) == HIT_LIMIT == data["limit"] and data["capped"] is True
    assert data["hits"][-1]["step"] == (HIT_LIMIT - 1) // 30
    exact = find(researcher_client, traj, "none").json()
    assert len(exact["hits"]) == 40 and exact["capped"] is False


def test_a_hit_past_the_shown_part_says_where_it_is(researcher_client, project, settings):
    settings.STUDIO_PAGE_FIELD_CHARS = PREVIEW_CHARS + 10_000
    long_obs = (
        "tail-word early. " + "a" * PREVIEW_CHARS + " tail-word " + "b" * 20_000 + " tail-word"
    )
    traj = make_trajectory(
        project,
        steps=[("cat big", long_obs), ("x" * 20_000 + " tail-word", "short tail-word")],
    )
    hits = find(researcher_client, traj, "TAIL-WORD").json()["hits"]
    # in the preview; behind Load full observation; past what a page renders at all
    assert [(h["step"], h["field"], h["part"]) for h in hits] == [
        (0, "observation", "shown"),
        (0, "observation", "load"),
        (0, "observation", "cut"),
        (1, "action", "cut"),
        (1, "observation", "shown"),
    ]
    first = Step.objects.get(branch__trajectory=traj, index=0)
    assert hits[2]["full_url"] == reverse("step_text", args=[first.pk, "observation"])


def test_only_what_the_page_shows_is_searched(researcher_client, annotator_client, project):
    traj = make_trajectory(project, steps=[("ls", "file.txt")])
    step = Step.objects.get(branch__trajectory=traj)
    StepAnnotation.objects.create(
        step=step,
        author=project.users["researcher"],
        verdict="needs_fix",
        comment="secret-remark",
        corrected_observation="secret-correction",
    )
    for client in (researcher_client, annotator_client):
        assert find(client, traj, "secret").json()["hits"] == []
    assert len(find(annotator_client, traj, "file").json()["hits"]) == 1


def test_outside_the_project_is_404_and_get_never_writes(outsider_client, project):
    traj = make_trajectory(project, steps=[("ls", "file.txt")])
    other = make_trajectory(project.other, steps=[("ls", "file.txt")])
    assert find(outsider_client, traj, "file").status_code == 404
    assert find(outsider_client, other, "file").status_code == 200
    # a branch of another trajectory is not this one's
    other_branch = other.branches.get()
    assert find(outsider_client, other, "file", branch=other_branch.pk).status_code == 200
    outsider_client.force_login(project.users["researcher"])
    assert find(outsider_client, traj, "file", branch=other_branch.pk).status_code == 404
    assert find(outsider_client, traj, "x" * 201).status_code == 404
    with CaptureQueriesContext(connection) as queries:
        assert find(outsider_client, traj, "file").status_code == 200
    writes = [
        q["sql"]
        for q in queries.captured_queries
        if q["sql"].lstrip().upper().startswith(("INSERT", "UPDATE", "DELETE"))
    ]
    assert writes == []


def test_the_page_carries_the_find_bar(researcher_client, project):
    traj = make_trajectory(project, n_steps=2)
    html = researcher_client.get(reverse("trajectory", args=[traj.pk])).content.decode()
    assert f'data-find-url="{reverse("trajectory_find", args=[traj.pk])}"' in html
    assert 'id="find-bar"' in html and "js/find.js" in html
