"""The find bar on a 2,000-step trajectory in headless Chromium: hits counted on the server,
the next hit's window loaded though it was not in the page, the match highlighted in view."""

from __future__ import annotations

import pytest

from studio.views.trajectories import PREVIEW_CHARS
from tests.support.ui import make_trajectory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

HITS_AT = (7, 1500, 1990)


def test_find_goes_through_hits_across_windows(page, login, live_server, project):
    traj = make_trajectory(
        project,
        title="Two thousand steps",
        n_steps=2000,
        step_factory=lambda i: {
            "action": f"echo {i}",
            "observation": f"output {i}"
            + ("y" * PREVIEW_CHARS if i == HITS_AT[-1] else "")  # the last past its preview
            + (" then the Zebra-Mark appears" if i in HITS_AT else ""),
        },
    )
    login(page, "researcher")
    page.goto(f"{live_server.url}/trajectories/{traj.pk}/")
    assert page.locator("#step-1500").count() == 0  # not in the page yet
    page.keyboard.press("/")
    assert page.locator("#find-bar").is_visible()
    assert page.evaluate("document.activeElement.id") == "find-input"
    page.keyboard.type("zebra-mark")
    page.wait_for_function(
        "() => document.getElementById('find-count').textContent === 'hit 1 of 3'"
    )
    page.wait_for_selector("#step-7 mark.find-hit.current")
    page.keyboard.press("Enter")
    page.wait_for_function(
        "() => document.getElementById('find-count').textContent === 'hit 2 of 3'"
    )
    mark = page.wait_for_selector("#step-1500 .step-obs mark.find-hit.current")
    assert mark.inner_text() == "Zebra-Mark"
    in_view = page.evaluate(
        """() => {
          const r = document.querySelector('mark.find-hit.current').getBoundingClientRect();
          return r.top >= 0 && r.bottom <= window.innerHeight && r.width > 0;
        }"""
    )
    assert in_view
    assert page.locator("mark.find-hit").count() == 1
    # Shift+Enter goes back; F3 forward again, wrapping past the last hit to the first
    page.keyboard.press("Shift+Enter")
    page.wait_for_selector("#step-7 mark.find-hit.current")
    assert page.locator("#find-count").inner_text() == "hit 1 of 3"
    page.keyboard.press("F3")
    page.wait_for_selector("#step-1500 mark.find-hit.current")
    page.keyboard.press("F3")
    # past the observation's preview: the full observation is loaded, then the match marked
    page.wait_for_selector("#step-1990 mark.find-hit.current")
    assert page.locator("#step-1990 .preview-more").count() == 0
    page.keyboard.press("F3")
    page.wait_for_selector("#step-7 mark.find-hit.current")
    assert page.locator("#find-count").inner_text() == "hit 1 of 3"
    page.keyboard.press("Escape")
    assert page.locator("#find-bar").is_hidden()
    assert page.locator("mark.find-hit").count() == 0
    page.keyboard.press("Control+f")
    assert page.locator("#find-bar").is_visible()


def test_a_link_to_a_hit_by_anchor_lands_on_it(page, login, live_server, project):
    """`#step-N` and `find=` both load step N's window as the page loads: the second jump
    waits for the first (two requests of one source: htmx would never answer the second)."""
    traj = make_trajectory(
        project,
        title="Anchored",
        n_steps=600,
        step_factory=lambda i: {
            "action": f"echo {i}",
            "observation": f"output {i}" + (" the Quokka-Sign" if i in (3, 480) else ""),
        },
    )
    login(page, "researcher")
    for _ in range(3):  # each load races the two jumps anew
        page.goto(f"{live_server.url}/trajectories/{traj.pk}/?find=quokka-sign&at=400#step-480")
        mark = page.wait_for_selector("#step-480 mark.find-hit.current")
        assert mark.inner_text() == "Quokka-Sign"
        assert page.locator("#find-count").inner_text() == "hit 2 of 2"


def count_is(page, text: str) -> None:
    try:
        page.wait_for_function(
            "(text) => document.getElementById('find-count').textContent === text", arg=text
        )
    except Exception:
        shown = page.locator("#find-count").inner_text()
        raise AssertionError(f"the find bar says {shown!r}, not {text!r}") from None


def test_hits_past_a_window_are_reached_and_a_folded_one_unfolds(
    page, login, live_server, project, monkeypatch
):
    """Windows of three hits (HIT_LIMIT made small): a link lands on the hit at its step
    with the hits before it counted, Enter and Shift+Enter cross into the next and the
    previous window, going round reaches the last window; a hit in the folded part of a long
    observation unfolds it."""
    monkeypatch.setattr("studio.views.trajectory_find.HIT_LIMIT", 3)
    long_obs = (
        "\n".join(f"line {k} of the listing" for k in range(400)) + "\nthe Kiwi-Tag at the end"
    )
    traj = make_trajectory(
        project,
        title="Windows",
        n_steps=30,
        step_factory=lambda i: {
            "action": f"echo {i}",
            "observation": long_obs if i == 20 else f"output {i} with the Kiwi-Tag",
        },
    )
    login(page, "researcher")
    page.goto(f"{live_server.url}/trajectories/{traj.pk}/?find=kiwi-tag&at=20")
    count_is(page, "hit 21 of 30")
    mark = page.wait_for_selector("#step-20 mark.find-hit.current")
    assert page.locator("#step-20 [data-fold].open").count() == 1  # unfolded to show it
    toggle = page.locator("#step-20 [data-fold] .fold-toggle")
    assert toggle.inner_text() == "Show less"  # as the fold's own button would say
    assert page.evaluate(
        """() => {
          const r = document.querySelector('mark.find-hit.current').getBoundingClientRect();
          return r.top >= 0 && r.bottom <= window.innerHeight && r.width > 0;
        }"""
    )
    assert mark.inner_text() == "Kiwi-Tag"
    toggle.click()  # the button folds it again, and can unfold it
    assert page.locator("#step-20 [data-fold].open").count() == 0
    assert toggle.inner_text() != "Show less"
    toggle.click()
    assert page.locator("#step-20 [data-fold].open").count() == 1
    assert toggle.inner_text() == "Show less"
    for n in (22, 23, 24):  # the window of 20..22, then the next one
        page.keyboard.press("F3")
        count_is(page, f"hit {n} of 30")
        page.wait_for_selector(f"#step-{n - 1} mark.find-hit.current")
    for n in (23, 22, 21, 20):  # and back, across the window's start
        page.keyboard.press("Shift+F3")
        count_is(page, f"hit {n} of 30")
        page.wait_for_selector(f"#step-{n - 1} mark.find-hit.current")
    page.goto(f"{live_server.url}/trajectories/{traj.pk}/?find=kiwi-tag")
    count_is(page, "hit 1 of 30")
    page.locator("#find-input").focus()
    page.keyboard.press("Shift+Enter")  # round to the last hit, in the last window
    count_is(page, "hit 30 of 30")
    page.wait_for_selector("#step-29 mark.find-hit.current")
    page.keyboard.press("Enter")
    count_is(page, "hit 1 of 30")
    page.wait_for_selector("#step-0 mark.find-hit.current")
