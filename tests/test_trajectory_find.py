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


def test_every_hit_is_reached_window_by_window_both_ways(researcher_client, project, monkeypatch):
    """Past a window's HIT_LIMIT hits the next window starts after its last hit (a step's
    hits may be split between two), and the one before ends before its first; `at` lands
    on a step with the hits before it counted."""
    monkeypatch.setattr("studio.views.trajectory_find.HIT_LIMIT", 7)
    traj = make_trajectory(
        project,
        step_factory=lambda i: {"action": "x " * (i % 4), "observation": f"x at {i}"},
        n_steps=12,
    )
    places = [
        (s, f, n)
        for s in range(12)
        for f, n in [("action", k) for k in range(s % 4)] + [("observation", 0)]
    ]
    assert len(places) == 30

    def got(data):
        return [(h["step"], h["field"], h["occurrence"]) for h in data["hits"]]

    data = find(researcher_client, traj, "x").json()
    seen = got(data)
    assert (data["before"], data["total"], data["more"], data["capped"]) == (0, 30, False, True)
    while data["capped"]:
        last = data["hits"][-1]
        data = find(researcher_client, traj, "x", step=last["step"], nth=last["nth"] + 1).json()
        assert data["before"] == len(seen) and data["total"] == 30
        seen += got(data)
    assert seen == places  # each once, in order
    data = find(researcher_client, traj, "x", back=1).json()  # the last ones
    back = got(data)
    assert data["before"] == 23 and back == places[23:]
    while data["before"]:
        first = data["hits"][0]
        data = find(
            researcher_client, traj, "x", step=first["step"], nth=first["nth"], back=1
        ).json()
        back = got(data) + back
    assert back == places
    # a search hit's link: the first hit at step 9 or after, the 21 before it counted
    landed = find(researcher_client, traj, "x", step=9).json()
    assert landed["before"] == places.index((9, "action", 0)) == 21
    assert got(landed)[0] == (9, "action", 0)
    assert find(researcher_client, traj, "x", step=50).json() | {"hits": None} == {
        "query": "x", "branch": traj.branches.get().pk, "hits": None, "before": 30,
        "total": 30, "more": False, "capped": False, "limit": 7,
    }  # fmt: skip
    monkeypatch.setattr("studio.services.step_find.COUNT_LIMIT", 5)
    counted = find(researcher_client, traj, "x").json()
    assert (counted["total"], counted["more"], counted["capped"]) == (12, True, True)
    for bad in ({"step": "-1"}, {"step": "x"}, {"nth": "1e9"}, {"step": "²"}):
        assert find(researcher_client, traj, "x", **bad).status_code == 400


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


def test_text_is_found_as_the_page_shows_it_without_terminal_escapes(researcher_client, project):
    coloured = "\x1b[34mdpkg\x1b[0m: \x1b[1;31mfailed\x1b[0m result"
    traj = make_trajectory(project, steps=[("apt-get install", coloured), ("ls", "failed result")])
    hits = find(researcher_client, traj, "FAILED RESULT").json()["hits"]
    # the first as the page shows it ("dpkg: failed result"), the escapes out of its offset
    assert [(h["step"], h["field"], h["offset"]) for h in hits] == [
        (0, "observation", 6),
        (1, "observation", 0),
    ]
    assert find(researcher_client, traj, "[34m").json()["hits"] == []  # never shown
    assert find(researcher_client, traj, "dpkg: failed").json()["total"] == 1


def test_every_window_agrees_with_the_hits_listed_one_by_one(project, monkeypatch):
    """Windows from every place, forward and back, of every size, with the count past them
    cut short or not, against the list of all hits written out by hand: steps outside a
    window are only counted, the steps of a window back are read again."""
    from studio.services import step_find

    def factory(i):
        hits = (0, 2, 1, 0, 3, 1)[i % 6]
        coloured = "\x1b[31mk\x1b[0miwi" if i % 4 == 1 else ""  # found as "kiwi" on the page
        return {
            "thinking": "kiwi" if i % 5 == 0 else "",
            "action": "echo kiwi" if i % 3 == 0 else "echo",
            "observation": " ".join(["KIWI"] * hits) + coloured,
        }

    traj = make_trajectory(project, step_factory=factory, n_steps=17)
    places = []
    for i in range(17):
        s = factory(i)
        shown = [s["thinking"], s["action"], s["observation"].replace("\x1b[31m", "")]
        count = sum(text.replace("\x1b[0m", "").lower().count("kiwi") for text in shown)
        places += [(i, nth) for nth in range(count)]
    assert len(places) == 34  # 20 in observations, 4 coloured, 4 thinking, 6 actions
    branch = traj.branches.get()
    for count_limit in (10_000, 5):
        monkeypatch.setattr(step_find, "COUNT_LIMIT", count_limit)
        for limit in (1, 2, 4, 50):
            for at in [None, *places, (17, 0), (3, 9)]:
                for back in (False, True):
                    if at is None and not back:
                        continue
                    found = step_find.find_in_branch(branch, "kiwi", at=at, back=back, limit=limit)
                    start = len(places) if at is None else sum(p < at for p in places)
                    if back:
                        first, last = max(start - limit, 0), start
                    else:
                        first, last = start, min(start + limit, len(places))
                    after = len(places) - last
                    where = (count_limit, limit, at, back)
                    assert [h.place for h in found.hits] == places[first:last], where
                    assert found.before == first, where
                    assert found.more == (after > count_limit), where
                    assert found.total == last + min(after, count_limit), where


def test_a_step_written_between_the_two_reads_of_a_window_back_is_left_out():
    """The last window is counted, then its steps are read again: a step a live episode
    writes in between is in neither, so the numbers still add up."""
    from studio.services.step_find import ShownStep, _pattern, window

    written = [ShownStep(i, [(i, 0, "observation", "kiwi kiwi")]) for i in range(4)]
    reads = []

    def steps(first, last):
        reads.append((first, last))
        if len(reads) == 2:  # a step written after the count
            written.append(ShownStep(4, [(4, 0, "observation", "kiwi")]))
        return [s for s in written if s.index >= first and (last is None or s.index <= last)]

    found = window(steps, _pattern("kiwi"), at=None, back=True, limit=3)
    assert reads == [(0, None), (2, 3)]
    assert [h.place for h in found.hits] == [(2, 1), (3, 0), (3, 1)]
    assert (found.before, found.total, found.more) == (5, 8, False)
