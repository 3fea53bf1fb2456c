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
