"""The trajectory page: header, branches, the lazily loaded step timeline, jump to step."""

from __future__ import annotations

import re

from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import NoReverseMatch, reverse

from studio.models import Step
from studio.views.trajectories import PREVIEW_CHARS, STEPS_PER_PAGE
from tests.support.ui import make_child_branch, make_trajectory


def step_ids(html: str) -> list[int]:
    return [int(i) for i in re.findall(r'<article class="step[^"]*" id="step-(\d+)"', html)]


def page(client, traj, **params):
    return client.get(reverse("trajectory", args=[traj.pk]), params)


def steps_partial(client, traj, **params):
    return client.get(reverse("trajectory_steps", args=[traj.pk]), params)


def test_header_shows_every_trajectory_field(researcher_client, project):
    traj = make_trajectory(
        project,
        title="Book a flight",
        domain="mcp",
        source_format="tau-bench",
        source_file="airline.json",
        task_instruction="Book NYC to SEA on May 20",
        system_prompt="You simulate an airline API.",
        tools=[
            {"type": "function", "function": {"name": "search_flights", "parameters": {}}},
            {"name": "book_reservation", "parameters": {}},
        ],
        metadata={"reward": 1.0, "trial": 3},
        tags=["airline", "gold"],
    )
    html = page(researcher_client, traj).content.decode()
    assert '<h1 class="traj-title">Book a flight</h1>' in html
    assert '<span class="badge dom dom-mcp">MCP tool calls</span>' in html
    assert "tau-bench" in html and "airline.json" in html
    assert "Book NYC to SEA on May 20" in html
    # folded blocks
    assert re.search(
        r'<details class="fold-block"><summary>System prompt.*?</summary>\s*<pre class="obs-text sys-prompt">You simulate an airline API.</pre>',
        html,
        re.S,
    )
    assert 'Tools <span class="muted">(2: search_flights, book_reservation)</span>' in html
    assert '<span class="j-key">"reward"</span>' in html
    assert '<span class="chip">airline</span>' in html and '<span class="chip">gold</span>' in html


def test_steps_have_stable_ids_action_containers_and_renderers(researcher_client, project):
    traj = make_trajectory(
        project, domain="terminal", steps=[("ls", "\x1b[34mdir\x1b[0m"), ("pwd", "/root")]
    )
    html = page(researcher_client, traj).content.decode()
    assert step_ids(html) == [0, 1]
    assert '<div class="step-actions" data-step-index="0">' in html
    assert '<div class="step-actions" data-step-index="1">' in html
    assert '<span class="ansi-fg-4">dir</span>' in html
    assert '<span class="prompt">$ </span>pwd' in html


def test_branch_tree_section(researcher_client, project):
    traj = make_trajectory(project)
    html = page(researcher_client, traj).content.decode()
    assert '<section id="branch-tree"' in html
    try:
        tree_url = reverse("branch_tree", args=[traj.pk])
    except NoReverseMatch:
        assert "hx-get" not in html[html.index('<section id="branch-tree"') :][:200]
    else:
        assert (
            f'<section id="branch-tree" class="card side-card" hx-get="{tree_url}" hx-trigger="load">'
            in html
        )


def test_first_response_holds_one_window_and_a_lazy_sentinel(researcher_client, project):
    traj = make_trajectory(project, n_steps=STEPS_PER_PAGE * 2 + 7)
    html = page(researcher_client, traj).content.decode()
    assert step_ids(html) == list(range(STEPS_PER_PAGE))
    assert f'id="step-{STEPS_PER_PAGE}"' not in html
    next_url = (
        reverse("trajectory_steps", args=[traj.pk])
        + f"?branch={traj.branches.get().pk}&amp;start={STEPS_PER_PAGE}&amp;dir=down"
    )
    assert f'hx-get="{next_url}" hx-trigger="revealed" hx-swap="outerHTML"' in html

    second = steps_partial(researcher_client, traj, start=STEPS_PER_PAGE).content.decode()
    assert "<html" not in second
    assert step_ids(second) == list(range(STEPS_PER_PAGE, 2 * STEPS_PER_PAGE))
    assert f"start={2 * STEPS_PER_PAGE}" in second and 'hx-trigger="revealed"' in second

    last = steps_partial(researcher_client, traj, start=2 * STEPS_PER_PAGE).content.decode()
    assert step_ids(last) == list(range(2 * STEPS_PER_PAGE, 2 * STEPS_PER_PAGE + 7))
    assert 'hx-trigger="revealed"' not in last
    assert "↑ Load steps" in last  # a way back up after a jump


def test_windows_loaded_above_or_below_bring_only_their_own_way_on(researcher_client, project):
    """The scroll sentinel's window (below) has no "load earlier" button, the button's window
    (above) no sentinel: either would load steps already on the page a second time."""
    traj = make_trajectory(project, n_steps=STEPS_PER_PAGE * 3)
    below = steps_partial(researcher_client, traj, start=STEPS_PER_PAGE, dir="down")
    html = below.content.decode()
    assert step_ids(html) == list(range(STEPS_PER_PAGE, 2 * STEPS_PER_PAGE))
    assert "steps-prev" not in html and "↑ Load steps" not in html
    assert f"start={2 * STEPS_PER_PAGE}&amp;dir=down" in html

    above = steps_partial(researcher_client, traj, start=STEPS_PER_PAGE, dir="up")
    html = above.content.decode()
    assert step_ids(html) == list(range(STEPS_PER_PAGE, 2 * STEPS_PER_PAGE))
    assert "steps-next" not in html and 'hx-trigger="revealed"' not in html
    assert "start=0&amp;dir=up" in html

    # an unaligned start is aligned to its window, so windows never overlap
    odd = steps_partial(researcher_client, traj, start=STEPS_PER_PAGE + 3, dir="up")
    assert step_ids(odd.content.decode()) == list(range(STEPS_PER_PAGE, 2 * STEPS_PER_PAGE))


def test_jump_to_step_serves_the_window_holding_it(researcher_client, project):
    traj = make_trajectory(project, n_steps=STEPS_PER_PAGE * 3)
    n = STEPS_PER_PAGE * 2 + 3
    html = page(researcher_client, traj, step=n).content.decode()
    assert step_ids(html) == list(range(2 * STEPS_PER_PAGE, 3 * STEPS_PER_PAGE))
    assert f'data-jump="{n}"' in html
    assert f"start={STEPS_PER_PAGE}" in html  # the "load previous" button
    # past the end: the last step
    html = page(researcher_client, traj, step=99999).content.decode()
    assert f'data-jump="{3 * STEPS_PER_PAGE - 1}"' in html
    assert page(researcher_client, traj, step="x").status_code == 404


def test_query_count_does_not_grow_with_steps(researcher_client, project):
    def long_step(i):
        return {"action": f"a{i}", "observation": f"o{i}", "thinking": "t", "meta": {"k": i}}

    small = make_trajectory(project, title="small", n_steps=10, step_factory=long_step)
    large = make_trajectory(project, title="large", n_steps=300, step_factory=long_step)
    make_child_branch(large, fork_index=150, n_own=3)
    counts = {}
    for name, traj in (("small", small), ("large", large)):
        page(researcher_client, traj)  # warm the session
        with CaptureQueriesContext(connection) as ctx:
            assert page(researcher_client, traj).status_code == 200
        counts[name] = len(ctx.captured_queries)
        with CaptureQueriesContext(connection) as ctx:
            steps_partial(researcher_client, traj, start=0)
        counts[name + "_steps"] = len(ctx.captured_queries)
    assert counts["small"] == counts["large"], counts
    assert counts["small_steps"] == counts["large_steps"], counts
    assert counts["small"] <= 12, counts


def test_long_observation_is_cut_by_the_database_and_loads_in_full(researcher_client, project):
    big = "BEGIN\n" + "y" * (PREVIEW_CHARS * 2) + "\nTHE END"
    traj = make_trajectory(project, steps=[("cat big", big), ("ls", "small")])
    html = page(researcher_client, traj).content.decode()
    assert "BEGIN" in html and "THE END" not in html
    assert len(html) < PREVIEW_CHARS
    step = Step.objects.get(branch__trajectory=traj, index=0)
    full_url = reverse("step_observation", args=[step.pk])
    assert f'hx-get="{full_url}"' in html and "Load full observation" in html
    full = researcher_client.get(full_url).content.decode()
    assert "THE END" in full and "data-fold" in full


def test_child_branch_shows_inherited_and_own_steps(researcher_client, project):
    traj = make_trajectory(project, n_steps=6)
    child = make_child_branch(traj, fork_index=3, name="what if", n_own=2)
    Step.objects.filter(branch=child, index=4).update(parse_status="unclosed", thinking="hmm <tag>")
    html = page(researcher_client, traj, branch=child.pk).content.decode()
    assert step_ids(html) == [0, 1, 2, 3, 4]
    assert html.count("inherited</span>") == 3
    assert "alt action 3" in html and "output 3" not in html
    title = "recorded action replayed, simulated observation"
    assert f'<span class="badge prov prov-replayed" title="{title}">replayed</span>' in html
    assert f'<span class="badge prov obs-simulated" title="{title}">simulated obs</span>' in html
    assert "Unclosed &lt;predicted_observation&gt; tag" in html
    assert re.search(
        r'<details class="thinking"><summary>Thinking.*?</summary><pre class="obs-text">hmm &lt;tag&gt;</pre></details>',
        html,
    )
    # branch selector lists both, current highlighted, with origin and fork point
    assert re.search(
        rf'<li class="current">\s*<a href="[^"]*\?branch={child.pk}">what if</a>', html
    )
    assert "@3" in html and "Simulated" in html
    partial = steps_partial(researcher_client, traj, branch=child.pk).content.decode()
    assert step_ids(partial) == [0, 1, 2, 3, 4]


def test_branch_of_another_trajectory_is_404(researcher_client, project):
    a = make_trajectory(project, title="a")
    b = make_trajectory(project, title="b")
    b_root = b.branches.get()
    assert page(researcher_client, a, branch=b_root.pk).status_code == 404
    assert steps_partial(researcher_client, a, branch=b_root.pk).status_code == 404
    assert page(researcher_client, a, branch=-1).status_code == 404


def test_empty_branch(researcher_client, project):
    traj = make_trajectory(project, n_steps=0)
    html = page(researcher_client, traj).content.decode()
    assert "This branch has no steps yet." in html and 'hx-trigger="revealed"' not in html


def test_raw_model_output_of_simulated_steps_loads_on_demand(researcher_client, project):
    traj = make_trajectory(project, n_steps=3)
    child = make_child_branch(traj, fork_index=1, n_own=1)
    step = child.steps.get()
    step.raw_output = "<think>hmm</think><predicted_observation>ok"
    step.parse_status = "unclosed"
    step.save()
    html = page(researcher_client, traj, branch=child.pk).content.decode()
    raw_url = reverse("step_raw_output", args=[step.pk])
    assert f'hx-get="{raw_url}" hx-trigger="click once"' in html
    assert "&lt;think&gt;hmm" not in html  # not sent with the page
    raw = researcher_client.get(raw_url).content.decode()
    assert (
        raw
        == '<pre class="obs-text raw-output">&lt;think&gt;hmm&lt;/think&gt;&lt;predicted_observation&gt;ok</pre>'
    )
    recorded = Step.objects.get(branch=traj.branches.get(parent__isnull=True), index=0)
    assert (
        "No raw output stored."
        in researcher_client.get(reverse("step_raw_output", args=[recorded.pk])).content.decode()
    )


def test_windows_are_wrapped_and_load_again_alone(researcher_client, project, settings):
    """Each window of steps is one `.step-window` (the page empties far ones and loads them
    again with `dir=none`: the window alone, no way on); the window size and how many the
    page keeps are settings."""
    settings.STUDIO_STEPS_PER_WINDOW = 10
    settings.STUDIO_STEP_WINDOWS_KEPT = 3
    settings.STUDIO_STEP_ELEMENTS_KEPT = 5000
    traj = make_trajectory(project, n_steps=35)
    html = page(researcher_client, traj).content.decode()
    assert step_ids(html) == list(range(10))
    assert 'data-page-size="10" data-windows-kept="3" data-elements-kept="5000"' in html
    assert '<div class="step-window" data-start="0" data-end="9">' in html
    again = steps_partial(researcher_client, traj, start=20, dir="none").content.decode()
    assert again.strip().startswith('<div class="step-window" data-start="20" data-end="29">')
    assert step_ids(again) == list(range(20, 30))
    assert "steps-next" not in again and "steps-prev" not in again
    last = steps_partial(researcher_client, traj, start=30, dir="none").content.decode()
    assert '<div class="step-window" data-start="30" data-end="34">' in last


def _step_head(html: str, index: int) -> str:
    found = re.search(rf'id="step-{index}".*?<header class="step-head">(.*?)</header>', html, re.S)
    assert found, html[:2000]
    return found.group(1)


def test_a_step_no_model_was_asked_for_names_no_model(researcher_client, project):
    from studio.models import ObservationSource, SimulationJob

    traj = make_trajectory(project, n_steps=3)
    child = make_child_branch(traj, fork_index=1, n_own=2)
    job = SimulationJob.objects.create(
        trajectory=traj,
        branch=traj.branches.get(parent__isnull=True),
        fork_index=1,
        action="df -h",
        n=1,
        status="succeeded",
        backend="openai",
        model="scripted-world",
        world_name="Scripted demo world",
        params={"temperature": 0.7, "top_p": 0.95, "max_tokens": 64, "seed": 3},
    )
    child.job = job
    child.save(update_fields=["job"])
    rule = {"name": "Disk full", "kind": "disk_full", "mode": "deterministic"}
    # step 1: the perturbation answered in the model's place; step 2: the model answered
    Step.objects.filter(branch=child, index=1).update(
        observation="No space left on device",
        observation_source=ObservationSource.PERTURBED,
        meta={"job": job.pk, "model_call": False, "perturbation": {**rule, "label": "Disk full"}},
    )
    Step.objects.filter(branch=child, index=2).update(
        observation_source=ObservationSource.SIMULATED, meta={"job": job.pk}
    )
    html = page(researcher_client, traj, branch=child.pk).content.decode()
    unasked = _step_head(html, 1)
    assert "perturbation Disk full: no model was asked" in unasked
    assert "Scripted demo world" not in unasked and "T 0.7" not in unasked
    asked = _step_head(html, 2)
    assert "Scripted demo world" in asked and "T 0.7" in asked
    # the live part of a running episode says the same (the same presenter)
    from studio.views.trajectories import no_model_asked

    step = Step.objects.get(branch=child, index=1)
    assert no_model_asked(step) == "perturbation Disk full: no model was asked"
    step.meta = {"job": job.pk, "model_call": False}
    assert no_model_asked(step) == "no model was asked"
    assert no_model_asked(Step.objects.get(branch=child, index=2)) == ""


def test_a_campaign_episode_links_its_campaign(researcher_client, project):
    from studio.models import Campaign

    campaign = Campaign.objects.create(project=project, name="<i>Five tasks</i>")
    theirs = Campaign.objects.create(project=project.other, name="not yours")
    played = make_trajectory(
        project, source_format="episode", metadata={"campaign": {"id": campaign.pk, "slot": 1}}
    )
    html = page(researcher_client, played).content.decode()
    url = reverse("campaign_page", args=[campaign.pk])
    assert (
        f'<a class="chip" id="episode-campaign" href="{url}"' in html
        and f"campaign {campaign.pk}: &lt;i&gt;Five tasks&lt;/i&gt;</a>" in html
    )
    # a campaign that is gone, or another project's: no link
    for gone in (theirs.pk, 999999):
        other = make_trajectory(
            project, source_format="episode", metadata={"campaign": {"id": gone}}
        )
        assert 'id="episode-campaign"' not in page(researcher_client, other).content.decode()
