"""Branching pages through the Django client: editor, job page, tree, compare, rename, star,
delete, and who may do what."""

import json
import re

import pytest
from django.urls import reverse

from studio.models import Branch, SimulationJob, Step
from tests.support.branching import MCP_STEPS, make_child, make_job, make_trajectory

EDITOR_POST = {
    "action": "ls -la",
    "action_format": "auto",
    "mode": "next",
    "max_steps": "",
    "n": "3",
    "temperature": "0.7",
    "top_p": "0.95",
    "max_tokens": "32",
    "seed": "1",
}


def editor_post(project, **changes) -> dict:
    """The editor's fields as the browser posts them, with the project's baseline model."""
    world = project.endpoints.get(kind="retrieval")
    return {**EDITOR_POST, "world_endpoint": str(world.pk), **changes}


@pytest.fixture
def traj(project):
    return make_trajectory(project)


def figure_of(html: str, traj_pk: int) -> dict:
    m = re.search(
        rf'<script id="branch-tree-figure-{traj_pk}" type="application/json">(.*?)</script>',
        html,
        re.S,
    )
    assert m, "figure json_script missing"
    return json.loads(m.group(1))


# ---- permissions ----------------------------------------------------------------------------


def test_annotator_views_but_cannot_branch_or_manage(annotator_client, traj):
    t, root = traj
    child = make_child(root, 2, ["x"])
    c = annotator_client
    assert c.get(reverse("branch_fork", args=[root.pk, 1])).status_code == 403
    assert (
        c.post(reverse("branch_fork", args=[root.pk, 1]), editor_post(t.project)).status_code == 403
    )
    assert c.post(reverse("branch_rename", args=[child.pk]), {"name": "z"}).status_code == 403
    assert c.post(reverse("branch_star", args=[child.pk])).status_code == 403
    assert c.get(reverse("branch_delete", args=[child.pk])).status_code == 403
    assert c.post(reverse("branch_delete", args=[child.pk])).status_code == 403
    job = make_job(root, 1, status="failed")
    assert c.post(reverse("simulation_job_retry", args=[job.pk])).status_code == 403
    assert c.post(reverse("simulation_job_cancel", args=[job.pk])).status_code == 403
    assert SimulationJob.objects.count() == 1 and Branch.objects.get(pk=child.pk).name == "sim@2"
    # Viewing works, without any of the buttons.
    tree = c.get(reverse("branch_tree", args=[t.pk])).content.decode()
    assert "Rename" not in tree and "Delete…" not in tree
    page = c.get(reverse("simulation_job", args=[job.pk])).content.decode()
    assert "job-retry" not in page
    traj_page = c.get(reverse("trajectory", args=[t.pk])).content.decode()
    assert "Branch here" not in traj_page
    assert (
        c.get(reverse("branch_compare", args=[t.pk]) + f"?b={root.pk}&b={child.pk}").status_code
        == 200
    )
    rows = reverse("branch_compare_rows", args=[t.pk]) + f"?b={root.pk}&b={child.pk}"
    assert c.get(rows + "&start=2").status_code == 200
    assert c.get(rows + f"&at=2&column={child.pk}").status_code == 200


def test_outsider_gets_404_everywhere(outsider_client, traj):
    t, root = traj
    job = make_job(root, 1)
    for url in (
        reverse("branch_fork", args=[root.pk, 1]),
        reverse("branch_tree", args=[t.pk]),
        reverse("branch_compare", args=[t.pk]) + f"?b={root.pk}",
        reverse("branch_compare_rows", args=[t.pk]) + f"?b={root.pk}&start=0",
        reverse("branch_compare_rows", args=[t.pk]) + f"?b={root.pk}&at=1&column={root.pk}",
        reverse("simulation_job", args=[job.pk]),
        reverse("branch_delete", args=[root.pk]),
    ):
        assert outsider_client.get(url).status_code == 404, url


def test_trajectory_page_offers_branch_here_on_every_step(researcher_client, traj):
    t, root = traj
    html = researcher_client.get(reverse("trajectory", args=[t.pk])).content.decode()
    for i in range(5):
        assert reverse("branch_fork", args=[root.pk, i]) in html


# ---- editor -----------------------------------------------------------------------------------


def test_editor_prefills_pretty_json_and_domain_snippets(researcher_client, project):
    t, root = make_trajectory(project, domain="mcp", steps=MCP_STEPS, key="mcp")
    html = researcher_client.get(reverse("branch_fork", args=[root.pk, 0])).content.decode()
    assert "{\n  &quot;name&quot;: &quot;get_weather&quot;," in html
    assert 'data-snippet="{\n  &quot;name&quot;: &quot;tool_name&quot;' in html
    assert reverse("branch_fork", args=[root.pk, 0]) in html
    # htmx asks for the panel only
    panel = researcher_client.get(
        reverse("branch_fork", args=[root.pk, 0]), headers={"HX-Request": "true"}
    ).content.decode()
    assert panel.lstrip().startswith("<section") and "<html" not in panel


def test_editor_errors_are_shown_and_nothing_is_created(researcher_client, traj):
    t, root = traj
    url = reverse("branch_fork", args=[root.pk, 1])
    bad = editor_post(t.project, n="65", action="", top_p="1.5")
    r = researcher_client.post(url, bad)
    assert r.status_code == 400
    html = r.content.decode()
    assert "n (the number of futures) must be 1 to 64, got 65." in html
    assert "the action is empty: write what the agent does at this step." in html
    assert "top_p must be in (0, 1], got 1.5." in html
    assert SimulationJob.objects.count() == 0 and Branch.objects.count() == 1


def test_editor_missing_step_is_404(researcher_client, traj):
    t, root = traj
    assert researcher_client.get(reverse("branch_fork", args=[root.pk, 9])).status_code == 404


def test_submit_creates_n_siblings_and_one_job(researcher_client, traj):
    t, root = traj
    r = researcher_client.post(
        reverse("branch_fork", args=[root.pk, 2]), editor_post(t.project, action="pytest -x")
    )
    job = SimulationJob.objects.get()
    assert r.status_code == 302 and r["Location"] == reverse("simulation_job", args=[job.pk])
    kids = list(Branch.objects.filter(parent=root).order_by("sample_index"))
    assert len(kids) == 3 and {k.fork_index for k in kids} == {2}
    assert all(k.origin == "edited" and k.status == "queued" and k.job_id == job.pk for k in kids)
    assert job.action == "pytest -x" and job.n == 3 and job.params["seed"] == 1


def test_resimulate_from_a_simulated_branch_keeps_it(researcher_client, traj):
    t, root = traj
    sim = make_child(root, 1, ["a", "b", "c"], name="first try")
    r = researcher_client.post(
        reverse("branch_fork", args=[sim.pk, 2]), editor_post(t.project, n="1")
    )
    assert r.status_code == 302
    new = Branch.objects.get(parent=sim)
    assert new.fork_index == 2
    assert Step.objects.filter(branch=sim).count() == 3  # the old branch is untouched
    # the new branch inherits steps 0 from recorded, 1 from `sim`
    assert [s.branch_id for s in new.all_steps()] == [root.pk, sim.pk]


# ---- job page ---------------------------------------------------------------------------------


def test_job_page_streams_progress_then_stops_polling(researcher_client, traj):
    t, root = traj
    job = make_job(root, 1, n=2, status="running")
    a = make_child(root, 1, [], job=job, status="running", sample_index=0, name="future A")
    b = make_child(root, 1, [], job=job, status="queued", sample_index=1, name="future B")
    # the worker's monitor keeps each future's live state on the job row, by sample index
    SimulationJob.objects.filter(pk=job.pk).update(
        live={
            "0": {
                "phase": "decoding",
                "tokens_out": 17,
                "tokens_per_s": 42.5,
                "text": "<think>hmm <b>x</b></think><predicted_observation>partial <i>",
            }
        }
    )
    url = reverse("simulation_job", args=[job.pk])
    page = researcher_client.get(url).content.decode()
    assert 'hx-trigger="every 500ms"' in page and "future A" in page
    r = researcher_client.get(url, headers={"HX-Request": "true"})
    assert r.status_code == 200
    frag = r.content.decode()
    assert "hmm &lt;b&gt;x&lt;/b&gt;</pre>" in frag and "<b>x</b>" not in frag
    assert 'stream-observation">partial &lt;i&gt;</pre>' in frag
    assert "decoding" in frag and "42.5 tok/s" in frag and ">17<" in frag
    assert "job-cancel" in frag
    # the worker finishes: one branch ok, one malformed, one failed
    Step.objects.create(
        branch=a,
        index=1,
        action="ls",
        observation="<img src=x onerror=alert(1)>",
        provenance="replayed",
        observation_source="simulated",
        parse_status="unclosed",
    )
    Branch.objects.filter(pk=a.pk).update(status="succeeded")
    Branch.objects.filter(pk=b.pk).update(status="failed", error="backend exploded: HTTP 500")
    SimulationJob.objects.filter(pk=job.pk).update(status="failed", error="1 of 2 failed")
    r = researcher_client.get(url, headers={"HX-Request": "true"})
    assert r.status_code == 286  # htmx stops polling, and still swaps the final state
    frag = r.content.decode()
    assert "backend exploded: HTTP 500" in frag
    assert "malformed" in frag and "Unclosed" in frag
    assert "<img src=x" not in frag
    assert "job-retry" in frag
    assert 'hx-trigger="every 500ms"' not in researcher_client.get(url).content.decode()


def test_cancel_and_retry(researcher_client, traj):
    t, root = traj
    r = researcher_client.post(reverse("branch_fork", args=[root.pk, 1]), editor_post(t.project))
    job = SimulationJob.objects.get()
    r = researcher_client.post(reverse("simulation_job_cancel", args=[job.pk]))
    assert r.status_code == 302
    job.refresh_from_db()
    assert job.status == "cancelled"
    assert set(job.branches.values_list("status", flat=True)) == {"cancelled"}
    r = researcher_client.post(reverse("simulation_job_retry", args=[job.pk]))
    new = SimulationJob.objects.exclude(pk=job.pk).get()
    assert r["Location"] == reverse("simulation_job", args=[new.pk])
    assert Branch.objects.filter(parent=root).count() == 6  # old branches kept
    # retrying a running job is refused with a message
    r = researcher_client.post(reverse("simulation_job_retry", args=[new.pk]), follow=True)
    assert "cancel it before retrying" in r.content.decode()


# ---- tree ---------------------------------------------------------------------------------------


def test_tree_fragment_has_a_node_per_branch_and_highlights_current(researcher_client, traj):
    t, root = traj
    a = make_child(root, 2, ["x", "y"], name="alpha")
    make_child(a, 3, ["z"], name="beta", origin="edited", status="failed")
    r = researcher_client.get(
        reverse("branch_tree", args=[t.pk]),
        headers={
            "HX-Request": "true",
            "HX-Current-URL": f"http://testserver/trajectories/{t.pk}/?branch={a.pk}",
        },
    )
    html = r.content.decode()
    assert "<html" not in html and "plotly-basic-3.7.0.min.js" in html
    fig = figure_of(html, t.pk)
    nodes = next(tr for tr in fig["data"] if tr["name"] == "branches")
    assert len(nodes["x"]) == 3 and nodes["x"] == [0, 2, 3] and nodes["y"] == [0, 1, 2]
    # a branch opens at its fork step
    assert nodes["customdata"][1] == f"/trajectories/{t.pk}/?branch={a.pk}&step=2"
    assert fig["meta"]["current"] == a.pk
    current = next(tr for tr in fig["data"] if tr["name"] == "current")
    assert current["x"] == [2] and current["y"] == [1]
    # the fill is the model of the future (none here: hand-made), the outline the status
    assert "#c92a2a" in nodes["marker"]["line"]["color"] and "diamond" in nodes["marker"]["symbol"]


def test_tree_fragment_of_a_lone_recorded_branch_explains_instead_of_plotting(
    researcher_client, traj
):
    t, _root = traj
    url = reverse("branch_tree", args=[t.pk])
    html = researcher_client.get(url, headers={"HX-Request": "true"}).content.decode()
    assert "Only the recorded branch so far" in html and "branch-tree-plot" not in html
    # the full tree page still draws the single node
    assert "branch-tree-plot" in researcher_client.get(url).content.decode()


def test_tree_page_labels_and_escapes(researcher_client, traj):
    t, root = traj
    make_child(root, 1, ["x"], name="<script>alert(1)</script>")
    html = researcher_client.get(reverse("branch_tree", args=[t.pk])).content.decode()
    assert "<script>alert(1)</script>" not in html
    fig = figure_of(html, t.pk)
    labels = next(tr for tr in fig["data"] if tr["name"] == "labels")["text"]
    assert labels[0].strip() == "recorded · 5 steps"
    assert labels[1].strip() == "&lt;script&gt;alert(1)&lt;/script&gt; · succeeded · 2 steps"
    hover = next(tr for tr in fig["data"] if tr["name"] == "branches")["hovertext"][1]
    assert "&lt;script&gt;" in hover


def test_tree_of_500_branches_groups_each_forks_futures_and_stays_legible(researcher_client, traj):
    t, root = traj
    job = make_job(root, 1, n=25)
    Branch.objects.bulk_create(
        Branch(
            trajectory=t,
            parent=root,
            fork_index=i % 4,
            name=f"job {job.pk} #{i // 4 + 1} @{i % 4} · ls",
            origin="simulated",
            status="failed" if i % 50 == 0 else "succeeded",
            job=job,
            sample_index=i // 4,
            lineage=[[root.pk, 0]],
        )
        for i in range(499)
    )
    url = reverse("branch_tree", args=[t.pk])
    html = researcher_client.get(url).content.decode()
    fig = figure_of(html, t.pk)
    assert fig["meta"] == {"branches": 500, "nodes": 5, "groups": 4, "current": None}
    labels = next(tr for tr in fig["data"] if tr["name"] == "labels")["text"]
    assert (
        labels[1].strip()
        == f"125 futures @0 (job {job.pk}) · retrieval baseline · 5 failed, 120 succeeded"
    )
    nodes = next(tr for tr in fig["data"] if tr["name"] == "branches")
    assert (
        nodes["customdata"][1] == reverse("branch_compare", args=[t.pk]) + f"?fork={root.pk}&at=0"
    )
    assert "500 branches" in html and html.count('class="branch-group"') == 4
    assert f"&amp;expand={root.pk}:0" in html  # "show each"
    # one group opened: its 125 futures are nodes again
    opened = figure_of(researcher_client.get(url + f"?expand={root.pk}:0").content.decode(), t.pk)
    assert (opened["meta"]["nodes"], opened["meta"]["groups"]) == (129, 3)
    # everything open: labels give way to hover text, rows stay apart
    every = figure_of(researcher_client.get(url + "?expand=all").content.decode(), t.pk)
    assert every["meta"]["nodes"] == 500
    assert not any(tr["name"] == "labels" for tr in every["data"])
    nodes = next(tr for tr in every["data"] if tr["name"] == "branches")
    assert len(set(nodes["y"])) == 500 and len(nodes["hovertext"]) == 500
    assert every["layout"]["height"] >= 500 * 14


# ---- compare -----------------------------------------------------------------------------------


def test_compare_diffs_against_recorded_then_first(researcher_client, traj):
    t, root = traj
    a = make_child(root, 2, ["3 passed", "On branch dev", "done", "extra <x>"], name="A")
    b = make_child(root, 2, ["1 failed", "On branch main\nnothing", "done", "other"], name="B")
    url = reverse("branch_compare", args=[t.pk]) + f"?b={a.pk}&b={b.pk}"
    r = researcher_client.get(url)
    assert r.status_code == 200
    html = r.content.decode()
    assert "Steps 0–1 are the same in all of them" in html
    assert 'id="compare-step-1"' not in html and 'id="compare-step-2"' in html
    # step 2: recorded is "3 passed in 0.12s"
    assert "3 passed<del> in 0.12s</del>" in html
    # nearly nothing in common: one replacement, not word confetti
    assert "<del>3 passed in 0.12s</del><ins>1 failed</ins>" in html
    # step 5 exists in no recorded step: B is diffed against A (the first column)
    row5 = html.split('id="compare-step-5"')[1]
    assert "vs A" in row5 and "<del>extra &lt;x&gt;</del><ins>other</ins>" in row5
    assert "<x>" not in html
    lines = researcher_client.get(url + "&diff=lines").content.decode()
    assert (
        "<del>On branch main\nnothing to commit, working tree clean</del>\n<ins>On branch dev</ins>"
        in lines
    )


def test_compare_of_a_fork_summarises_outcomes_with_at_most_six_columns(researcher_client, traj):
    t, root = traj
    observations = ["3 passed in 0.12s"] * 5 + ["3 passed in 0.12s  \r\n"] * 2  # same meaning
    observations += ["1 failed, 2 passed in 0.31s"] * 3 + ["FAILED test_x.py"]
    # one job's futures (one model: futures of different models are summarised apart)
    job = make_job(root, 2, n=13, status="failed")
    kids = [
        make_child(root, 2, [obs], name=f"k{i}", sample_index=i, job=job)
        for i, obs in enumerate(observations)
    ]
    broken = make_child(
        root, 2, ["no tags"], name="broken", sample_index=11, parse_status="no_tag", job=job
    )
    lost = make_child(root, 2, [], name="lost", sample_index=12, status="failed")
    # a future that failed before its first step: its action is its job's
    SimulationJob.objects.filter(pk=job.pk).update(action=root.all_steps().get(index=2).action)
    Branch.objects.filter(pk=lost.pk).update(job=job)
    make_child(root, 1, ["elsewhere"], name="other fork")
    tree = researcher_client.get(reverse("branch_tree", args=[t.pk])).content.decode()
    assert f"?fork={root.pk}&amp;at=2" in tree and "compare 13 futures @2" in tree
    assert "at=1" not in tree  # a single child is no group
    html = researcher_client.get(
        reverse("branch_compare", args=[t.pk]) + f"?fork={root.pk}&at=2"
    ).content.decode()
    summary = html.split('id="fork-summary"')[1].split("</section>")[0]
    assert "13 futures of <em>recorded</em> at step 2, given the recorded action" in summary
    assert 'id="fork-actions"' not in summary  # one action only
    assert "3 outcomes among the 11 futures with a well-formed observation" in summary
    assert "1 malformed" in summary and "1 failed" in summary
    rows = re.findall(
        r'<tr id="outcome-(\w+)".*?<td class="num">(\d+)</td>\s*<td class="num">([\d.]+%)</td>',
        summary,
        re.S,
    )
    assert rows == [("A", "7", "64%"), ("B", "3", "27%"), ("C", "1", "9%")]
    assert "same meaning as recorded" in summary  # A is the recorded observation
    figure = json.loads(
        re.search(r'id="outcome-figure" type="application/json">(.*?)</script>', html, re.S).group(
            1
        )
    )
    assert figure["data"][0]["x"] == ["A", "B", "C", "malformed", "failed"]
    assert figure["data"][0]["y"] == [7, 3, 1, 1, 1]
    table = html.split("compare-table")[1]
    columns = re.findall(r'<th data-branch-id="(\d+)"', table)
    # the recorded branch, one representative per outcome, then the malformed and failed
    assert [int(c) for c in columns] == [
        root.pk,
        kids[0].pk,
        kids[7].pk,
        kids[10].pk,
        broken.pk,
        lost.pk,
    ]
    assert len(columns) <= 6 and "other fork</a>" not in table
    # ticked columns replace the default ones
    picked = researcher_client.get(
        reverse("branch_compare", args=[t.pk])
        + f"?fork={root.pk}&at=2&b={kids[7].pk}&b={kids[9].pk}"
    ).content.decode()
    assert re.findall(r'<th data-branch-id="(\d+)"', picked.split("compare-table")[1]) == [
        str(kids[7].pk),
        str(kids[9].pk),
    ]
    html = researcher_client.get(
        reverse("branch_compare", args=[t.pk]) + f"?b={root.pk}&b={kids[0].pk}"
    ).content.decode()
    assert "<del>git status</del>" not in html  # actions equal: no action diff
    # the future's step 2 is the recorded one's text: folded, not a row
    assert "1 identical step (2)" in html and 'id="compare-step-2"' not in html
    assert 'id="compare-step-3"' in html and "no step 3" not in html


def test_futures_of_another_action_and_recorded_alternatives_are_summarised_apart(
    researcher_client, traj
):
    """Futures given different actions at one fork are different experiments: each action
    has its own outcomes. A recorded alternative (ToolBench) is no future at all."""
    t, root = traj
    recorded = [make_child(root, 2, ["3 passed"], name=f"r{i}", sample_index=i) for i in range(3)]
    edited = [
        make_child(root, 2, ["collected 0 items"], name=f"e{i}", action="pytest -k nothing")
        for i in range(2)
    ]
    make_child(root, 2, ["explored"], name="alternative", origin="recorded")
    tree = researcher_client.get(reverse("branch_tree", args=[t.pk])).content.decode()
    assert "compare 5 futures @2" in tree  # the alternative is not counted
    url = reverse("branch_compare", args=[t.pk]) + f"?fork={root.pk}&at=2"
    html = researcher_client.get(url).content.decode()
    summary = html.split('id="fork-summary"')[1].split("</section>")[0]
    assert "3 futures of <em>recorded</em> at step 2, given the recorded action" in summary
    assert "2 actions were tried at step 2" in summary and "alternative" not in summary
    link = re.search(r'class="fork-action-link" href="([^"]+)"', summary).group(1)
    html = researcher_client.get(link.replace("&amp;", "&")).content.decode()
    summary = html.split('id="fork-summary"')[1].split("</section>")[0]
    assert "2 futures of <em>recorded</em> at step 2, given the action" in summary
    assert "pytest -k nothing" in summary and "1 outcome among the 2 futures" in summary
    assert all(f"?branch={b.pk}&amp;" not in summary for b in recorded)
    assert f"?branch={edited[0].pk}&amp;" in summary
    # the action stays chosen when columns are picked (a hidden field of the form)
    assert 'name="action" value="' in summary
    r = researcher_client.get(url + "&action=0123456789")
    assert r.status_code == 400 and "were given this action" in r.content.decode()


def test_compare_selection_errors(researcher_client, traj, project):
    t, root = traj
    a = make_child(root, 2, ["x"])
    url = reverse("branch_compare", args=[t.pk])
    assert researcher_client.get(url).status_code == 200  # the picker alone
    job = make_job(root, 2, status="running")
    Branch.objects.filter(pk=a.pk).update(job=job)
    tree = researcher_client.get(reverse("branch_tree", args=[t.pk])).content.decode()
    assert reverse("simulation_job", args=[job.pk]) in tree  # the branch links to its job
    r = researcher_client.get(url + f"?b={a.pk}")
    assert r.status_code == 400 and "Pick 2 to 6 branches to compare (got 1)" in r.content.decode()
    others = [make_child(root, 1, ["y"], name=f"o{i}").pk for i in range(6)]
    r = researcher_client.get(url + "?" + "&".join(f"b={pk}" for pk in [a.pk, *others]))
    assert "(got 7)" in r.content.decode()
    t2, root2 = make_trajectory(project, key="k2")
    r = researcher_client.get(url + f"?b={a.pk}&b={root2.pk}")
    assert r.status_code == 400 and "Select a valid choice" in r.content.decode()
    r = researcher_client.get(url + f"?fork={a.pk}&at=4")
    assert "has no futures at step 4" in r.content.decode()
    make_child(root, 4, ["z"], name="late")
    r = researcher_client.get(url + f"?fork={root.pk}")
    assert "futures forked at several steps (1, 2, 4): say which with at=" in r.content.decode()


# ---- rename / star / delete ---------------------------------------------------------------------


def test_rename_and_star(researcher_client, traj):
    t, root = traj
    a = make_child(root, 2, ["x"])
    back = f"/trajectories/{t.pk}/?branch={a.pk}"
    r = researcher_client.post(
        reverse("branch_rename", args=[a.pk]), {"name": "  good idea ", "next": back}
    )
    assert r.status_code == 302 and r["Location"] == back
    a.refresh_from_db()
    assert a.name == "good idea"
    r = researcher_client.post(reverse("branch_rename", args=[a.pk]), {"name": "   "}, follow=True)
    assert "A branch needs a name" in r.content.decode()
    r = researcher_client.post(
        reverse("branch_rename", args=[a.pk]), {"name": "x", "next": "https://evil.example/"}
    )
    assert r["Location"] == f"/trajectories/{t.pk}/?branch={a.pk}"  # no open redirect
    researcher_client.post(reverse("branch_star", args=[a.pk]))
    a.refresh_from_db()
    assert a.starred
    researcher_client.post(reverse("branch_star", args=[a.pk]))
    a.refresh_from_db()
    assert not a.starred


def test_delete_branch_with_descendants_after_confirmation(researcher_client, traj):
    t, root = traj
    a = make_child(root, 2, ["x", "y"], name="A")
    b = make_child(a, 3, ["z"], name="B")
    c = make_child(b, 3, ["w"], name="C")
    keep = make_child(root, 1, ["k"], name="keep")
    url = reverse("branch_delete", args=[a.pk])
    html = researcher_client.get(url).content.decode()
    assert "3 branches" in html and "<strong>4</strong> own steps" in html
    assert Branch.objects.filter(pk=a.pk).exists()  # GET deletes nothing
    r = researcher_client.post(url, follow=True)
    assert "Deleted branch &#x27;A&#x27; and 2 descendant branch(es)." in r.content.decode()
    assert not Branch.objects.filter(pk__in=[a.pk, b.pk, c.pk]).exists()
    assert not Step.objects.filter(branch_id__in=[a.pk, b.pk, c.pk]).exists()
    assert Branch.objects.filter(pk__in=[root.pk, keep.pk]).count() == 2
    assert Step.objects.filter(branch=root).count() == 5


def test_recorded_branch_and_running_branches_are_not_deleted(researcher_client, traj):
    t, root = traj
    r = researcher_client.get(reverse("branch_delete", args=[root.pk]))
    assert r.status_code == 409 and "cannot be deleted" in r.content.decode()
    researcher_client.post(reverse("branch_delete", args=[root.pk]))
    assert Branch.objects.filter(pk=root.pk).exists()
    a = make_child(root, 2, ["x"])
    make_child(a, 3, [], status="running", name="busy")
    r = researcher_client.post(reverse("branch_delete", args=[a.pk]), follow=True)
    assert "still being simulated (busy)" in r.content.decode()
    assert Branch.objects.filter(pk=a.pk).exists()


def test_polling_never_writes_and_the_sweeper_fails_a_job_whose_worker_died(
    researcher_client, traj, settings
):
    from datetime import timedelta

    from django.utils import timezone

    from studio.jobs.sweeper import reap_stale_jobs

    t, root = traj
    settings.STUDIO_JOB_STALE_S = 30
    job = make_job(root, 1, n=1, status="running")
    make_child(root, 1, [], job=job, status="running")
    SimulationJob.objects.filter(pk=job.pk).update(
        heartbeat_at=timezone.now() - timedelta(minutes=5)
    )
    url = reverse("simulation_job", args=[job.pk])
    r = researcher_client.get(url, headers={"HX-Request": "true"})
    assert r.status_code == 200  # still polling: the page only reads the row
    assert "No heartbeat from its worker for 300 s" in r.content.decode()
    job.refresh_from_db()
    assert job.status == "running" and job.error == ""
    assert reap_stale_jobs() == 1  # what every worker's timer runs
    r = researcher_client.get(url, headers={"HX-Request": "true"})
    assert r.status_code == 286
    job.refresh_from_db()
    assert job.status == "failed" and "stopped without finishing" in job.error
    html = r.content.decode()
    assert "job-retry" in html and "No heartbeat" not in html


def test_job_page_shows_a_bounded_number_of_steps(
    researcher_client, traj, django_assert_max_num_queries
):
    t, root = traj
    job = make_job(root, 0, n=2, status="succeeded")
    for i in range(2):
        make_child(
            root,
            0,
            [f"o{k}" for k in range(5)],
            job=job,
            sample_index=i,
            name=f"r{i}",
            parse_status="no_tag",
        )
    with django_assert_max_num_queries(12):
        html = researcher_client.get(reverse("simulation_job", args=[job.pk])).content.decode()
    assert html.count('class="sim-step"') == 6  # 3 of 5 steps per branch
    assert "2 more steps on the branch page" in html
    assert (
        "malformed: step 0 No &lt;predicted_observation&gt; tag" in html and "2 later steps" in html
    )


def test_continue_a_branch_with_a_new_step(researcher_client, traj):
    t, root = traj
    sim = make_child(root, 3, ["a", "b"], name="sim")  # steps 0-4
    url = reverse("branch_fork", args=[sim.pk, 5])
    html = researcher_client.get(url).content.decode()
    assert "Continue <em>sim</em> with a new step 5" in html
    assert researcher_client.get(reverse("branch_fork", args=[sim.pk, 6])).status_code == 404
    r = researcher_client.post(url, editor_post(t.project, action="echo next", n="1"))
    assert r.status_code == 302
    new = Branch.objects.get(parent=sim)
    assert new.fork_index == 5 and new.origin == "edited"
    job = SimulationJob.objects.get()
    assert job.action == "echo next" and job.fork_index == 5
    tree = researcher_client.get(reverse("branch_tree", args=[t.pk])).content.decode()
    assert url in tree  # "Continue…" on the branch list


def _next_rows_url(html: str) -> str | None:
    m = re.search(r'<tr class="compare-more[^"]*" hx-get="([^"]+)" hx-trigger="revealed"', html)
    return m.group(1).replace("&amp;", "&") if m else None


def test_compare_shows_only_differing_steps_and_folds_identical_runs(researcher_client, project):
    steps = [(f"cmd {i}", f"out {i}") for i in range(130)]
    t, root = make_trajectory(project, steps=steps, key="runs")
    # copies of the recorded steps (rows of their own, same texts) except where they differ
    a = make_child(root, 5, [f"out {i}" if i not in (10, 60) else "A!" for i in range(5, 130)])
    b = make_child(root, 5, [f"out {i}" if i != 100 else "B!" for i in range(5, 130)])
    url = reverse("branch_compare", args=[t.pk]) + f"?b={a.pk}&b={b.pk}"
    html = researcher_client.get(url).content.decode()
    assert re.findall(r'id="compare-step-(\d+)"', html) == ["10", "60", "100"]
    runs = re.findall(r"<strong>(\d+ identical steps? \([\d–]+\))</strong>", html)
    assert runs == [
        "5 identical steps (5–9)",
        "49 identical steps (11–59)",
        "39 identical steps (61–99)",
        "29 identical steps (101–129)",
    ]
    assert "End of the comparison: step 129 is the last step" in html
    assert _next_rows_url(html) is None
    # a run opens window by window, each row showing the same text in both columns
    opened = re.search(r'hx-get="([^"]+start=11&amp;to=59)"', html).group(1).replace("&amp;", "&")
    part = researcher_client.get(opened).content.decode()
    assert "<html" not in part
    assert re.findall(r'id="compare-step-(\d+)"', part) == [str(i) for i in range(11, 21)]
    assert part.count("same meaning") == 2 * 10
    assert _next_rows_url(part).endswith("&start=21&to=59")
    last = researcher_client.get(_next_rows_url(part).replace("start=21", "start=51")).content
    assert re.findall(r'id="compare-step-(\d+)"', last.decode())[-1] == "59"
    assert _next_rows_url(last.decode()) is None and "End of the comparison" not in last.decode()


def test_compare_loads_long_differences_in_windows(researcher_client, project):
    steps = [(f"cmd {i}", f"out {i}") for i in range(130)]
    t, root = make_trajectory(project, steps=steps, key="long")
    a = make_child(root, 5, [f"alt {i}" for i in range(125)], name="A")
    b = make_child(root, 5, [f"other {i}" for i in range(125)], name="B")
    url = reverse("branch_compare", args=[t.pk]) + f"?b={a.pk}&b={b.pk}"
    html = researcher_client.get(url).content.decode()
    assert re.findall(r'id="compare-step-(\d+)"', html) == [str(i) for i in range(5, 15)]
    assert "Steps 0–4 are the same in all of them" in html
    seen = 10
    nxt = _next_rows_url(html)
    while nxt:
        part = researcher_client.get(nxt).content.decode()
        shown = [int(i) for i in re.findall(r'id="compare-step-(\d+)"', part)]
        assert shown == list(range(5 + seen, 5 + seen + len(shown))) and 0 < len(shown) <= 10
        seen += len(shown)
        nxt = _next_rows_url(part)
    assert seen == 125 and "End of the comparison: step 129" in part
    # a start inside the branches, and bad input, each named
    assert 'id="compare-step-120"' in researcher_client.get(url + "&start=120").content.decode()
    assert researcher_client.get(url + "&start=-1").status_code == 400
    rows = reverse("branch_compare_rows", args=[t.pk])
    stale = researcher_client.get(rows + f"?b={a.pk}&b=999999&start=5")
    assert stale.status_code == 400
    assert "b: Select a valid choice. 999999 is not one of the available choices." in (
        stale.content.decode()
    )
    backwards = researcher_client.get(rows + f"?b={a.pk}&start=9&to=5").content.decode()
    assert "The rows end before they start (9–5)." in backwards


def test_a_long_observation_shows_an_excerpt_and_loads_whole(researcher_client, project):
    big = "BEGIN\n" + "same line of log output\n" * 5000 + "THE END\n"
    t, root = make_trajectory(project, steps=[("ls", "x"), ("cat log", big)], key="big")
    a = make_child(root, 1, [big.replace("THE END", "THE <b>CHANGED</b> END")], name="A")
    b = make_child(root, 1, [big], name="B")
    url = reverse("branch_compare", args=[t.pk]) + f"?b={a.pk}&b={b.pk}"
    html = researcher_client.get(url).content.decode()
    row = html.split('id="compare-step-1"')[1]
    assert len(html) < len(big) / 2
    cells = row.split('<td class="compare-cell')[1:3]
    # A: the change, with the unchanged text around it cut and counted
    assert "<ins>&lt;b&gt;CHANGED&lt;/b&gt; </ins>" in cells[0]
    assert re.search(r"… [\d,]+ unchanged characters …", cells[0])
    # B: the same text as recorded, its first characters and how many more there are
    assert "same meaning" in cells[1] and re.search(r"… [\d,]+ more characters", cells[1])
    assert "THE END" not in cells[1]
    show = re.search(r'hx-get="([^"]+&amp;at=1&amp;column=' + str(b.pk) + ')"', cells[1])
    whole = researcher_client.get(show.group(1).replace("&amp;", "&")).content.decode()
    assert whole.startswith('<td class="compare-cell same"') or "compare-cell same" in whole
    assert "THE END" in whole and "more characters" not in whole and "Show all" not in whole
    step = Step.objects.get(branch=b, index=1)
    assert f'hx-get="{reverse("step_observation", args=[step.pk])}"' in cells[1]  # rendered: lazy


def test_compare_past_the_shorter_first_column_diffs_the_others_against_each_other(
    researcher_client, traj
):
    """Where neither the recorded branch nor the first column has a step, the next branch
    that has one is the reference: the others are diffed against it, not left undiffed."""
    t, root = traj  # recorded: steps 0-4
    short = make_child(root, 2, ["short"], name="S")  # steps 2 only
    a = make_child(root, 2, ["a2", "a3", "a4", "alpha six", "alpha seven"], name="A")
    b = make_child(root, 2, ["b2", "b3", "b4", "alpha 6", "beta seven"], name="B")
    url = reverse("branch_compare", args=[t.pk]) + f"?b={short.pk}&b={a.pk}&b={b.pk}"
    html = researcher_client.get(url).content.decode()
    row6 = html.split('id="compare-step-6"')[1]
    cells = row6.split('<td class="compare-cell')[1:4]
    assert "no step" not in cells[0] and "no-step" in cells[0]  # an empty cell, no filler
    assert "· reference" in cells[1]  # A is what B is compared with here
    assert "vs A" in cells[2] and "<del>alpha</del><ins>beta</ins> seven" in cells[2]


def test_tree_fragment_on_the_default_page_highlights_the_recorded_branch(researcher_client, traj):
    """The trajectory page without `?branch=` shows the recorded branch, so its tree fragment
    marks that branch as current (and the full-tree link keeps it)."""
    t, root = traj
    make_child(root, 2, ["x"], name="alpha")
    html = researcher_client.get(
        reverse("branch_tree", args=[t.pk]),
        headers={"HX-Request": "true", "HX-Current-URL": f"http://testserver/trajectories/{t.pk}/"},
    ).content.decode()
    fig = figure_of(html, t.pk)
    assert fig["meta"]["current"] == root.pk
    assert any(tr["name"] == "current" for tr in fig["data"])
    assert f'<tr class="current" data-branch-id="{root.pk}">' in html
    assert f"{reverse('branch_tree', args=[t.pk])}?branch={root.pk}" in html


def test_job_page_describes_replay_and_rollout_lengths(researcher_client, traj):
    """Replay re-simulates every later recorded step (its max_steps is a placeholder 1): the
    page must not say "up to 1 step" there; a rollout shows its step budget."""
    t, root = traj
    replay = make_job(root, 1, n=1, status="succeeded")
    SimulationJob.objects.filter(pk=replay.pk).update(mode="replay", max_steps=1)
    make_child(root, 1, ["a", "b", "c", "d"], job=replay, name="replayed")
    html = researcher_client.get(reverse("simulation_job", args=[replay.pk])).content.decode()
    assert "up to 1 step" not in html and "every later recorded step" in html
    rollout = make_job(root, 1, n=1, status="succeeded")
    SimulationJob.objects.filter(pk=rollout.pk).update(mode="rollout", max_steps=7)
    html = researcher_client.get(reverse("simulation_job", args=[rollout.pk])).content.decode()
    assert "up to 7 steps" in html


def test_job_of_one_future_compares_it_with_its_parent(researcher_client, traj):
    """N=1: "all futures at the fork" can be that single branch (a one-column compare); the
    link compares it with the branch it forked from instead."""
    t, root = traj
    job = make_job(root, 2, n=1, status="succeeded")
    child = make_child(root, 2, ["other"], job=job, name="only one")
    html = researcher_client.get(reverse("simulation_job", args=[job.pk])).content.decode()
    link = re.search(r'id="job-compare" href="([^"]+)"', html).group(1).replace("&amp;", "&")
    assert link == reverse("branch_compare", args=[t.pk]) + f"?b={root.pk}&b={child.pk}"
    compare = researcher_client.get(link)
    assert compare.status_code == 200
    assert compare.content.decode().count("<th data-branch-id=") == 2


def test_cancelling_a_job_whose_worker_died_ends_it_cancelled(researcher_client, traj, settings):
    from datetime import timedelta

    from django.utils import timezone

    from studio.jobs.sweeper import reap_stale_jobs

    t, root = traj
    settings.STUDIO_JOB_STALE_S = 30
    old = timezone.now() - timedelta(minutes=5)
    silent = make_job(root, 1, n=1, status="running")
    make_child(root, 1, [], job=silent, status="running", name="silent")
    SimulationJob.objects.filter(pk=silent.pk).update(heartbeat_at=old)
    r = researcher_client.post(reverse("simulation_job_cancel", args=[silent.pk]), follow=True)
    silent.refresh_from_db()
    assert silent.status == "cancelled" and silent.error.startswith("Cancelled. Its worker had")
    assert list(silent.branches.values_list("status", flat=True)) == ["cancelled"]
    assert "Cancelled" in r.content.decode()
    # a cancel asked while the worker was alive, then the worker died: the sweeper says
    # cancelled too, not failed
    alive = make_job(root, 2, n=1, status="running")
    make_child(root, 2, [], job=alive, status="running", name="alive", sample_index=0)
    SimulationJob.objects.filter(pk=alive.pk).update(heartbeat_at=timezone.now())
    researcher_client.post(reverse("simulation_job_cancel", args=[alive.pk]))
    alive.refresh_from_db()
    assert alive.status == "running" and alive.cancel_requested
    SimulationJob.objects.filter(pk=alive.pk).update(heartbeat_at=old)
    assert reap_stale_jobs() == 1
    alive.refresh_from_db()
    assert alive.status == "cancelled" and alive.phase == "cancelled"


def test_near_duplicate_search_is_bounded_and_says_when_it_stopped(
    researcher_client, traj, monkeypatch
):
    from studio.services import futures

    t, root = traj
    words = "one two three four five six seven eight nine ten eleven twelve".split()
    # the same words in other orders: every pair passes the cheap bounds, none is similar
    texts = [" ".join(words), " ".join(reversed(words)), " ".join(words[6:] + words[:6])]
    for i, text in enumerate(texts):
        make_child(root, 2, [text], name=f"p{i}", sample_index=i)
    summary = futures.summarise_fork(root, 2)
    assert len(summary.outcomes) == 3 and not summary.near_incomplete
    monkeypatch.setattr(futures, "NEAR_PAIR_BUDGET", 1)
    summary = futures.summarise_fork(root, 2)
    assert len(summary.outcomes) == 3 and summary.near_incomplete
    html = researcher_client.get(
        reverse("branch_compare", args=[t.pk]) + f"?fork={root.pk}&at=2"
    ).content.decode()
    assert "Near-duplicates were looked for in the first comparisons only" in html
