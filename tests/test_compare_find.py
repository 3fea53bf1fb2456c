"""The find bar of the compare view on the server: every hit in every compared branch, in
the page's reading order and labelled with its column's branch, bounded, only what the page
shows, inside the user's projects, GET never writes; and the rows a jump to a hit brings in
place of a folded run, a loader or a gap."""

from __future__ import annotations

import re

from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from studio.models import Step, StepAnnotation
from studio.services.compare import (
    Budget,
    CompareGap,
    CompareRun,
    jump_window,
    scan_window,
    start_comparison,
)
from studio.services.step_find import HIT_LIMIT
from tests.support.branching import make_child, make_trajectory


def find(client, traj, q, branches, start=0):
    return client.get(
        reverse("branch_compare_find", args=[traj.pk]),
        {"q": q, "b": [b.pk for b in branches], "start": start},
    )


def _three(project):
    """root 0-9; alpha forked at 4 (its own step 4 action names the needle); gamma forked
    from alpha at 7, so it shows alpha's steps 4-6."""
    steps = [(f"cmd {i}", f"out {i}" + (" a needle" if i in (2, 5) else "")) for i in range(10)]
    t, root = make_trajectory(project, steps=steps, key="find3")
    alpha = make_child(
        root,
        4,
        [f"alpha {i}" + (" Needle and NEEDLE" if i == 5 else "") for i in range(4, 10)],
        name="alpha",
        action="needle-cmd",
    )
    gamma = make_child(
        alpha, 7, ["gamma 7", "gamma 8 needle <b>x</b>", "gamma 9"], name="gamma <i>"
    )
    return t, root, alpha, gamma


def test_hits_across_branches_in_reading_order_with_their_branch(researcher_client, project):
    t, root, alpha, gamma = _three(project)
    data = find(researcher_client, t, "NEEDLE", [root, alpha, gamma]).json()
    # the steps every branch shares (0-3) are not shown by the page: counted apart
    assert data["start"] == 4 and data["earlier"] == 1
    assert data["branches"] == [
        {"id": root.pk, "name": "recorded"},
        {"id": alpha.pk, "name": "alpha"},
        {"id": gamma.pk, "name": "gamma <i>"},
    ]
    got = [(h["step"], h["branch"], h["field"], h["occurrence"], h["offset"]) for h in data["hits"]]
    assert got == [
        (4, alpha.pk, "action", 0, 0),
        (4, gamma.pk, "action", 0, 0),  # gamma shows alpha's step 4: a hit in its column too
        (5, root.pk, "observation", 0, 8),
        (5, alpha.pk, "observation", 0, 8),
        (5, alpha.pk, "observation", 1, 19),
        (5, gamma.pk, "observation", 0, 8),
        (5, gamma.pk, "observation", 1, 19),
        (8, gamma.pk, "observation", 0, 8),
    ]
    assert data["capped"] is False and data["limit"] == HIT_LIMIT
    assert all(h["part"] == "shown" for h in data["hits"])
    step5 = Step.objects.get(branch=alpha, index=5)
    assert data["hits"][3]["full_url"] == reverse("step_text", args=[step5.pk, "observation"])
    # the column order is the page's; a later start leaves the steps before it out (counted)
    later = find(researcher_client, t, "needle", [gamma, root], start=6).json()
    assert [(h["step"], h["branch"]) for h in later["hits"]] == [(8, gamma.pk)]
    assert later["start"] == 6 and later["earlier"] == 3  # steps 2, 4 and 5
    assert find(researcher_client, t, "absent", [root, alpha]).json()["hits"] == []
    assert find(researcher_client, t, "  ", [root, alpha]).json()["hits"] == []


def test_only_what_the_compare_page_shows_is_searched(researcher_client, annotator_client, project):
    t, root, alpha, gamma = _three(project)
    # the compare cells show actions and observations: never thinking, annotations, scores
    Step.objects.filter(branch=alpha, index=6).update(thinking="hidden-thought")
    step = Step.objects.get(branch=alpha, index=6)
    StepAnnotation.objects.create(
        step=step,
        author=project.users["researcher"],
        verdict="needs_fix",
        comment="secret-remark",
        corrected_observation="secret-correction",
    )
    for client in (researcher_client, annotator_client):
        for word in ("hidden-thought", "secret"):
            assert find(client, t, word, [root, alpha]).json()["hits"] == []
    assert len(find(annotator_client, t, "alpha 6", [root, alpha]).json()["hits"]) == 1


def test_hits_are_bounded_and_say_so(researcher_client, project):
    steps = [("x " * 30, f"out {i}") for i in range(20)]
    t, root = make_trajectory(project, steps=steps, key="many")
    child = make_child(root, 0, [f"alt {i}" for i in range(20)])  # copies each action
    data = find(researcher_client, t, "x", [root, child]).json()
    assert len(data["hits"]) == HIT_LIMIT and data["capped"] is True
    # 60 hits a step (30 in each column): the last is step 16's column 2, its 10th match
    last = data["hits"][-1]
    assert (last["step"], last["branch"], last["occurrence"]) == (16, child.pk, 9)
    exact = find(researcher_client, t, "alt", [root, child]).json()
    assert len(exact["hits"]) == 20 and exact["capped"] is False
    # the next window starts after the last hit, inside step 16's second column
    assert (data["before"], data["total"], data["more"]) == (0, 1200, False)
    rest = client_window(researcher_client, t, "x", [root, child], step=16, nth=last["nth"] + 1)
    assert rest["before"] == HIT_LIMIT and len(rest["hits"]) == 200 and not rest["capped"]
    first = rest["hits"][0]
    assert (first["step"], first["branch"], first["occurrence"]) == (16, child.pk, 10)
    back = client_window(researcher_client, t, "x", [root, child], back=1)
    assert back["before"] == 200 and back["hits"][0] == data["hits"][200]


def test_compare_finds_text_as_its_cells_show_it(researcher_client, project):
    coloured = "\x1b[31mfailed\x1b[0m result"
    steps = [
        ("make", coloured),
        ("make test", "\x1b[32mok\x1b[0m"),
        ("make", coloured),
        ("ls", "x"),
    ]
    t, root = make_trajectory(project, steps=steps, key="ansi")
    child = make_child(root, 3, ["failed result again"])
    data = find(researcher_client, t, "failed result", [root, child], start=3).json()
    # steps 0 and 2 (before the page's start) are counted, not step 1 (coloured, without it)
    assert data["earlier"] == 2
    assert [(h["step"], h["branch"]) for h in data["hits"]] == [(3, child.pk)]


def client_window(client, traj, q, branches, **place):
    return client.get(
        reverse("branch_compare_find", args=[traj.pk]),
        {"q": q, "b": [b.pk for b in branches], "start": 0, **place},
    ).json()


def test_a_hit_past_what_a_page_renders_is_cut(researcher_client, project, settings):
    settings.STUDIO_PAGE_FIELD_CHARS = 1000
    t, root = make_trajectory(project, steps=[("ls", "x"), ("cat", "y")], key="cut")
    child = make_child(root, 1, ["early mark " + "z" * 2000 + " late mark"])
    hits = find(researcher_client, t, "mark", [root, child]).json()["hits"]
    assert [h["part"] for h in hits] == ["shown", "cut"]


def test_outside_the_project_is_404_and_get_never_writes(outsider_client, project):
    t, root, alpha, _ = _three(project)
    other, other_root = make_trajectory(project.other, key="other")
    other_child = make_child(other_root, 1, ["o"])
    assert find(outsider_client, t, "needle", [root, alpha]).status_code == 404
    assert find(outsider_client, other, "o", [other_root, other_child]).status_code == 200
    outsider_client.force_login(project.users["researcher"])
    # a branch of another trajectory is none of this one's
    assert find(outsider_client, t, "needle", [root, other_child]).status_code == 404
    assert find(outsider_client, t, "x" * 201, [root, alpha]).status_code == 404
    with CaptureQueriesContext(connection) as queries:
        assert find(outsider_client, t, "needle", [root, alpha]).status_code == 200
    writes = [
        q["sql"]
        for q in queries.captured_queries
        if q["sql"].lstrip().upper().startswith(("INSERT", "UPDATE", "DELETE"))
    ]
    assert writes == []


def test_the_compare_page_carries_the_find_bar(researcher_client, project):
    t, root, alpha, _ = _three(project)
    url = reverse("branch_compare", args=[t.pk]) + f"?b={root.pk}&b={alpha.pk}"
    html = researcher_client.get(url).content.decode()
    assert f'data-find-url="{reverse("branch_compare_find", args=[t.pk])}"' in html
    assert 'data-find-kind="compare"' in html and 'data-start="4"' in html
    assert 'id="find-bar"' in html and "js/find.js" in html


# ---- the rows a jump brings ------------------------------------------------------------------


def _long(project):
    t, root = make_trajectory(
        project, steps=[(f"cmd {i}", f"out {i}") for i in range(60)], key="long60"
    )
    a = make_child(root, 10, [f"out {i}" if i != 20 else "OUT 20" for i in range(10, 60)])
    b = make_child(root, 10, [f"out {i}" if i != 30 else "longer 30" for i in range(10, 60)])
    return t, a, b


def _layout(window) -> list:
    out: list = []
    for item in window.items:
        if isinstance(item, CompareRun):
            out.append((item.start, item.end))
        elif isinstance(item, CompareGap):
            out.append(("gap", item.start, item.end, item.open_run))
        else:
            out.append(item.index)
    return out


def test_a_jump_unfolds_one_step_of_a_run_or_leaves_a_gap(project):
    t, a, b = _long(project)
    cmp = start_comparison(t, [a, b], diff="meaning")
    assert _layout(scan_window(cmp, 10)) == [(10, 19), 20, (21, 29), 30, (31, 59)]
    # into a folded run (or the rest of an opened one): the step alone, the rest stay folded
    run = jump_window(cmp, 10, 15, run_end=19)
    assert _layout(run) == [(10, 14), 15, (16, 19)]
    assert run.next_start is None and run.stop == 19
    assert _layout(jump_window(cmp, 31, 59, run_end=59)) == [(31, 58), 59]
    # past a loader: the steps jumped over are a gap, the steps after compared from there
    far = jump_window(cmp, 10, 25)
    assert _layout(far) == [("gap", 10, 24, None), 25, (26, 29), 30, (31, 59)]
    assert far.next_start is None and far.until is None
    # a run that went on at the loader's step goes on into the gap, or ends at the jump
    assert _layout(jump_window(cmp, 12, 25, open_run=10))[0] == ("gap", 12, 24, 10)
    assert _layout(jump_window(cmp, 12, 12, open_run=10))[:2] == [(10, 11), 12]
    # inside a gap: the steps after the jump are compared up to its end only
    inside = jump_window(cmp, 10, 15, until=24)
    assert _layout(inside) == [("gap", 10, 14, None), 15, (16, 19), 20, (21, 24)]
    assert inside.until == 24 and inside.next_start is None
    # a gap compared as asked: what the budget leaves of it stays a gap (asked again)
    gap = scan_window(cmp, 10, until=29, budget=Budget(rows=1))
    assert _layout(gap) == [(10, 19), 20, ("gap", 21, 29, None)]
    assert _layout(scan_window(cmp, 21, until=29)) == [(21, 29)]


def test_the_rows_view_answers_a_jump(researcher_client, project):
    t, a, b = _long(project)
    rows = reverse("branch_compare_rows", args=[t.pk]) + f"?b={a.pk}&b={b.pk}"
    part = researcher_client.get(rows + "&start=10&to=19&jump=15").content.decode()
    assert re.findall(r'id="compare-(step|run|gap)-(\d+)"', part) == [
        ("run", "10"),
        ("step", "15"),
        ("run", "16"),
    ]
    assert "5 identical steps (10–14)" in part and "End of the comparison" not in part
    part = researcher_client.get(rows + "&start=10&jump=25").content.decode()
    assert re.findall(r'id="compare-(step|run|gap)-(\d+)"', part) == [
        ("gap", "10"),
        ("step", "25"),
        ("run", "26"),
        ("step", "30"),
        ("run", "31"),
    ]
    # the gap compares its steps when asked (a button: it sits above the hit, in view)
    assert "Steps 10–24 are not compared yet" in part
    ask = re.search(r'hx-get="([^"]+&amp;until=24)"', part).group(1).replace("&amp;", "&")
    assert 'hx-trigger="revealed"' not in part.split('id="compare-step-25"')[0]
    assert "End of the comparison: step 59" in part
    filled = researcher_client.get(ask).content.decode()
    assert re.findall(r'id="compare-(step|run|gap)-(\d+)"', filled) == [
        ("run", "10"),
        ("step", "20"),
        ("run", "21"),
    ]
    assert "End of the comparison" not in filled and 'hx-trigger="revealed"' not in filled
    for bad in ("&start=10&jump=5", "&start=10&to=19&jump=25", "&start=10&until=20&jump=25"):
        assert researcher_client.get(rows + bad).status_code == 400
    with CaptureQueriesContext(connection) as queries:
        assert researcher_client.get(rows + "&start=10&run=10&until=24&jump=15").status_code == 200
    assert not [
        q
        for q in queries.captured_queries
        if q["sql"].lstrip().upper().startswith(("INSERT", "UPDATE", "DELETE"))
    ]


def test_every_compare_window_is_a_slice_of_all_the_hits(project, monkeypatch):
    """Windows from every place, forward and back, of every size, with the count past them cut
    short or not, are slices of the list of all hits in the page's reading order (step, then
    column): the steps outside a window are only counted, a window back's steps read again."""
    from studio.services import step_find

    t, root, alpha, gamma = _three(project)
    comparison = start_comparison(t, [root, alpha, gamma], diff="meaning")

    def listed(found):
        return [(h.index, h.column, h.field, h.occurrence, h.nth) for h in found.hits]

    every = step_find.find_in_comparison(comparison, "needle", start=4, limit=1000)
    hits = listed(every)
    assert (every.before, every.total, every.more) == (0, len(hits), False)
    # alpha's action at its fork (4), gamma's column too; root's 5, alpha's 5 (twice) in
    # gamma's column too; gamma's own 8
    assert len(hits) == 8 and hits == sorted(hits, key=lambda h: (h[0], h[4]))
    places = [(h[0], h[4]) for h in hits]
    for count_limit in (10_000, 3):
        monkeypatch.setattr(step_find, "COUNT_LIMIT", count_limit)
        for limit in (1, 2, 5):
            for at in [None, *places, (10, 0)]:
                for back in (False, True):
                    if at is None and not back:
                        continue
                    found = step_find.find_in_comparison(
                        comparison, "needle", start=4, at=at, back=back, limit=limit
                    )
                    start = len(places) if at is None else sum(p < at for p in places)
                    first, last = (
                        (max(start - limit, 0), start)
                        if back
                        else (start, min(start + limit, len(places)))
                    )
                    after = len(places) - last
                    where = (count_limit, limit, at, back)
                    assert listed(found) == hits[first:last], where
                    assert found.before == first, where
                    assert (found.more, found.total) == (
                        after > count_limit,
                        last + min(after, count_limit),
                    ), where
