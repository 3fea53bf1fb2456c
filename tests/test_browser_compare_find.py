"""The find bar of the compare view in headless Chromium: three 400-step branches compared
(folded runs, rows in windows), every hit gone through: one in a row of the first window,
one in each column of a folded run (opened at that step alone), one past the loaded windows
(its row brought in, the steps jumped over left as a gap that compares when asked), one past
a long cell's excerpt (the cell loaded whole first); each marked and in view, its branch
named."""

from __future__ import annotations

import pytest

from tests.support.branching import make_child, make_trajectory
from tests.support.browser import shot

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

N = 400
MARK = "Zebra-Mark"
TALL = "\n" + "\n".join(f"line {k} of a differing observation" for k in range(8))


def _observation(i: int, branch: str) -> str:
    if branch == "alpha" and i == 380:
        return "A 380 " + "filler text " * 600 + MARK  # past the cell's excerpt
    if i % 20 == 0:  # every 20th step differs in both futures
        return f"{branch} {i}" + (f" the {MARK}" if (branch, i) == ("alpha", 40) else "") + TALL
    if branch == "beta" and i == 350:
        return f"out 350 with the {MARK}"
    return f"out {i}" + (f" {MARK}" if i == 107 else "")


def _count_is(page, text: str) -> None:
    page.wait_for_function(
        "(t) => document.getElementById('find-count').textContent === t", arg=text
    )


def _in_view(page) -> bool:
    return page.evaluate(
        """() => {
          const r = document.querySelector('mark.find-hit.current').getBoundingClientRect();
          return r.top >= 0 && r.bottom <= window.innerHeight && r.width > 0;
        }"""
    )


def test_find_goes_through_every_hit_of_a_comparison(page, login, live_server, project):
    steps = [(f"cmd {i}", f"out {i}" + (f" {MARK}" if i in (2, 107) else "")) for i in range(N)]
    traj, root = make_trajectory(project, steps=steps, key="cmp-find")
    alpha = make_child(root, 5, [_observation(i, "alpha") for i in range(5, N)], name="alpha")
    beta = make_child(root, 5, [_observation(i, "beta") for i in range(5, N)], name="beta")
    login(page, "researcher")
    page.goto(
        f"{live_server.url}/trajectories/{traj.pk}/compare/?b={root.pk}&b={alpha.pk}&b={beta.pk}"
    )
    assert page.locator("#compare-run-101").count() == 1  # 101-119 folded
    assert page.locator("#compare-step-350, #compare-step-380").count() == 0  # not loaded
    page.keyboard.press("/")
    assert page.locator("#find-bar").is_visible()
    assert page.evaluate("document.activeElement.id") == "find-input"
    page.keyboard.type("zebra-mark")

    def cell(step: int, branch) -> str:
        return f'#compare-step-{step} td[data-branch-id="{branch.pk}"]'

    # 1: a row of the first window
    _count_is(page, "hit 1 of 6")
    mark = page.wait_for_selector(f"{cell(40, alpha)} .cell-observation mark.find-hit.current")
    assert mark.inner_text() == MARK
    note = page.inner_text("#find-note")
    assert note.startswith("In the observation of step 40 of branch alpha (column 2).")
    # step 2 is in the steps every branch shares, which the page does not show
    assert note.endswith("Also in 1 earlier step this page does not show (before step 5).")
    shot(page, "compare-find-first")
    # 2-4: a folded run of identical steps, opened at the hit's step alone, each column's
    page.keyboard.press("Enter")
    _count_is(page, "hit 2 of 6")
    page.wait_for_selector(f"{cell(107, root)} mark.find-hit.current")
    assert page.inner_text("#compare-run-101 strong") == "6 identical steps (101–106)"
    assert page.locator("#compare-run-108").count() == 1
    assert _in_view(page)
    for number, branch in ((3, alpha), (4, beta)):
        page.keyboard.press("F3")
        _count_is(page, f"hit {number} of 6")
        page.wait_for_selector(f"{cell(107, branch)} mark.find-hit.current")
        assert page.locator(f"{cell(107, branch)}.find-cell").count() == 1
        assert page.locator("mark.find-hit").count() == 1
    # 5: past the loaded windows: its row comes in, the steps jumped over are a gap
    page.keyboard.press("Enter")
    _count_is(page, "hit 5 of 6")
    page.wait_for_selector(f"{cell(350, beta)} mark.find-hit.current")
    assert _in_view(page)
    gap = page.locator("#compare-gap-201")
    assert gap.locator("strong").inner_text() == "Steps 201–349 are not compared yet"
    assert "of branch beta (column 3)" in page.inner_text("#find-note")
    shot(page, "compare-find-gap")
    # 6: past the excerpt of a long cell: the cell is loaded whole, then the match marked
    page.keyboard.press("Enter")
    _count_is(page, "hit 6 of 6")
    mark = page.wait_for_selector(f"{cell(380, alpha)} mark.find-hit.current")
    assert mark.inner_text() == MARK and _in_view(page)
    assert page.locator(f"{cell(380, alpha)} button.show-all").count() == 0
    shot(page, "compare-find-last")
    # past the last hit to the first, and back
    page.keyboard.press("F3")
    _count_is(page, "hit 1 of 6")
    page.wait_for_selector(f"{cell(40, alpha)} mark.find-hit.current")
    page.keyboard.press("Shift+F3")
    _count_is(page, "hit 6 of 6")
    page.wait_for_selector(f"{cell(380, alpha)} mark.find-hit.current")
    page.click("#find-prev")
    _count_is(page, "hit 5 of 6")
    page.wait_for_selector(f"{cell(350, beta)} mark.find-hit.current")
    # the gap compares its steps when asked: rows and folds as everywhere else
    gap.locator("button.gap-open").click()
    page.wait_for_selector("#compare-step-340")
    assert page.locator("#compare-gap-201").count() == 0
    assert page.inner_text("#compare-run-341 strong") == "9 identical steps (341–349)"
    assert page.locator("#compare-step-220").count() == 1
    page.keyboard.press("Escape")
    assert page.locator("#find-bar").is_hidden()
    assert page.locator("mark.find-hit, .find-cell").count() == 0
    page.keyboard.press("Control+f")
    assert page.locator("#find-bar").is_visible()
