"""Pages that stay small, in headless Chromium: the compare view shows only the steps where
the branches differ, folds identical runs (which open on demand) and loads its rows as it
scrolls; the trajectory page keeps a bounded number of step windows however far one scrolls,
and loads the emptied ones again when scrolled (or jumped) back to."""

from __future__ import annotations

import re

import pytest

from studio.models import Branch, Step
from tests.support.browser import shot, step_indices
from tests.support.ui import make_trajectory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _fork(traj, fork_index: int, name: str, observation_of) -> Branch:
    """A simulated branch from `fork_index` to the end whose steps copy the recorded ones
    (rows of their own, the same texts) except where `observation_of(i)` says otherwise."""
    root = traj.branches.get(parent__isnull=True)
    branch = Branch.objects.create(
        trajectory=traj, parent=root, fork_index=fork_index, name=name, origin="simulated"
    )
    recorded = {s.index: s for s in root.steps.all()}
    Step.objects.bulk_create(
        Step(
            branch=branch,
            index=i,
            action=recorded[i].action,
            observation=observation_of(i) or recorded[i].observation,
            provenance="replayed",
            observation_source="simulated",
            parse_status="well_formed",
        )
        for i in range(fork_index, len(recorded))
    )
    return branch


def _rows(page) -> list[int]:
    return page.eval_on_selector_all(
        "#compare-rows tr.compare-row", "els => els.map(e => parseInt(e.id.split('-').pop(), 10))"
    )


def test_compare_shows_only_differing_steps_and_opens_identical_runs(
    page, login, live_server, project
):
    big = "BEGIN of a long log\n" + "".join(f"line {k} of the log\n" for k in range(3000))
    traj = make_trajectory(
        project,
        title="Long run",
        steps=[(f"cat part-{i}.log", big if i == 40 else f"output of step {i}") for i in range(60)],
    )
    a = _fork(traj, 5, "A", lambda i: "A says otherwise" if i in (10, 40) else None)
    b = _fork(traj, 5, "B", lambda i: big.replace("line 2999", "LINE 2999") if i == 40 else None)
    c = _fork(traj, 20, "C", lambda i: f"C at {i}" if i >= 50 else None)
    login(page, "researcher")
    page.goto(f"{live_server.url}/trajectories/{traj.pk}/compare/?b={a.pk}&b={b.pk}&b={c.pk}")
    # the first window: ten rows where the branches differ, nothing of the runs between
    first = _rows(page)
    assert first[:10] == [10, 40, *range(50, 58)]
    runs = page.locator("#compare-rows tr.compare-run strong").all_inner_texts()
    assert runs == [
        "5 identical steps (5–9)",
        "29 identical steps (11–39)",
        "9 identical steps (41–49)",
    ]
    # step 50 on: C differs everywhere, so each step is a row, loaded window by window
    while page.locator("#compare-rows tr.compare-more").count():
        shown = len(_rows(page))
        page.locator("#compare-rows tr.compare-more").scroll_into_view_if_needed()
        page.wait_for_function(
            "n => document.querySelectorAll('#compare-rows tr.compare-row').length > n", arg=shown
        )
    assert _rows(page) == [10, 40, *range(50, 60)]
    assert "step 59 is the last step" in page.inner_text("#compare-rows tr.compare-end")

    # the long observation: an excerpt whose cuts say what they left out; Show all loads it
    cell = page.locator(f'#compare-step-40 td[data-branch-id="{b.pk}"]')
    assert re.search(r"[\d,]+ unchanged characters", cell.inner_text())
    assert "LINE 2999" in cell.inner_text() and "line 1500 of" not in cell.inner_text()
    cell.locator("button.show-all").click()
    page.wait_for_function(
        f"""() => {{
            const td = document.querySelector('#compare-step-40 td[data-branch-id="{b.pk}"]');
            return td && td.innerText.includes('line 1500 of the log');
        }}"""
    )
    # the rendered observation loads when its fold opens
    rendered = page.locator(f'#compare-step-10 td[data-branch-id="{a.pk}"] details.rendered')
    rendered.locator("summary").click()
    page.wait_for_function(
        f"""() => !document.querySelector(
            '#compare-step-10 td[data-branch-id="{a.pk}"] .rendered-body').innerText.includes('Loading')"""
    )
    assert "A says otherwise" in rendered.inner_text()

    # a run opens on demand, its rows loading as they scroll into view
    run = page.locator("#compare-rows tr.compare-run", has_text="29 identical steps (11–39)")
    run.locator("button.run-open").click()
    page.wait_for_selector("#compare-step-11")
    while page.locator("#compare-step-39").count() == 0:
        shown = len(_rows(page))
        page.locator("#compare-rows tr.compare-more").first.scroll_into_view_if_needed()
        page.wait_for_function(
            "n => document.querySelectorAll('#compare-rows tr.compare-row').length > n", arg=shown
        )
    assert _rows(page) == [10, *range(11, 40), 40, *range(50, 60)]
    assert page.locator("#compare-rows tr.compare-run").count() == 2
    cells = page.locator("#compare-step-25 td.compare-cell")
    assert cells.count() == 3 and all("same meaning" in t for t in cells.all_inner_texts())
    shot(page, "compare-runs")


def _scroll_to_the_end(page) -> None:
    """Scroll until the last window is in, waiting for each window to arrive."""
    while page.locator("#steps .steps-next").count():
        last = step_indices(page)[-1]
        page.locator("#steps .step").last.scroll_into_view_if_needed()
        page.mouse.wheel(0, 4000)
        page.wait_for_function(
            """n => { const s = document.querySelectorAll('#steps .step');
                      return s.length && +s[s.length - 1].dataset.index > n; }""",
            arg=last,
        )


def _windows(page) -> tuple[int, int]:
    """(loaded windows, emptied windows) in the timeline."""
    return page.evaluate(
        """() => [document.querySelectorAll('#steps .step-window:not(.placeholder)').length,
                  document.querySelectorAll('#steps .step-window.placeholder').length]"""
    )


def test_trajectory_page_keeps_a_bounded_number_of_windows(
    page, login, live_server, project, settings
):
    settings.STUDIO_STEPS_PER_WINDOW = 10
    settings.STUDIO_STEP_WINDOWS_KEPT = 3
    total = 300
    traj = make_trajectory(
        project,
        title="Three hundred steps",
        step_factory=lambda i: {
            "action": f"wc -l part-{i}.log",
            "observation": "\n".join(f"\x1b[32mline {k}\x1b[0m of part {i}" for k in range(8)),
        },
        n_steps=total,
    )
    login(page, "researcher")
    page.goto(f"{live_server.url}/trajectories/{traj.pk}/")
    first_elements = page.evaluate("() => document.getElementsByTagName('*').length")
    _scroll_to_the_end(page)
    page.wait_for_function(
        "() => document.querySelectorAll('#steps .step-window:not(.placeholder)').length <= 3"
    )
    loaded, emptied = _windows(page)
    assert loaded <= 3 and loaded + emptied == total // 10
    assert step_indices(page)[-1] == total - 1 and len(step_indices(page)) <= 30
    elements = page.evaluate("() => document.getElementsByTagName('*').length")
    assert elements < 4 * first_elements, (first_elements, elements)
    # an emptied window keeps its height: nothing on the page moved
    heights = page.eval_on_selector_all(
        "#steps .step-window.placeholder", "els => els.map(e => e.getBoundingClientRect().height)"
    )
    assert min(heights) > 100

    # back to the top: the first windows are loaded again, far ones emptied in turn
    page.evaluate("() => window.scrollTo(0, 0)")
    page.wait_for_selector("#step-0")
    page.wait_for_function(
        "() => document.querySelectorAll('#steps .step-window:not(.placeholder)').length <= 3"
    )
    assert step_indices(page)[0] == 0 and _windows(page)[0] <= 3
    assert page.locator("#step-3 .branch-here").count() == 1  # branching works on it
    page.keyboard.press("j")
    page.keyboard.press("j")
    assert page.locator("#steps .step.current").get_attribute("id") == "step-1"

    # a jump into an emptied window loads that window in place (the timeline is kept)
    target = 155
    page.keyboard.press("g")
    page.keyboard.type(str(target))
    page.keyboard.press("Enter")
    page.wait_for_selector(f"#step-{target}.current")
    assert page.locator(f"#step-{target}").is_visible()
    assert sum(_windows(page)) == total // 10
    page.keyboard.press("j")
    assert page.locator("#steps .step.current").get_attribute("id") == f"step-{target + 1}"
    # k across the start of the window goes on into the one above (loaded again if emptied)
    for _ in range(target + 1 - 150):
        page.keyboard.press("k")
    assert page.locator("#steps .step.current").get_attribute("id") == "step-150"
    page.keyboard.press("k")
    page.wait_for_selector("#step-149.current")
    page.keyboard.press("k")
    assert page.locator("#steps .step.current").get_attribute("id") == "step-148"
    shot(page, "trajectory-bounded")
