"""The search page in headless Chromium, as a new user meets it: a phrase typed in the box,
the hits grouped by trajectory, a hit clicked, and the trajectory opened at that step of a
long trajectory (its window not in the page until then) with the match marked by the find
bar; a search saved and found again; the hits made into a queue."""

from __future__ import annotations

import pytest

from studio.models import AnnotationQueue
from tests.support.ui import make_trajectory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_a_phrase_leads_to_its_step_with_the_match_marked(page, login, live_server, project):
    make_trajectory(
        project,
        title="Long backup run",
        n_steps=600,
        step_factory=lambda i: {
            "action": f"restic backup part {i}",
            "observation": f"chunk {i} saved"
            + (" then Fatal: no space left on device" if i in (9, 480) else ""),
        },
    )
    make_trajectory(
        project,
        title="Shop",
        domain="web",
        steps=[("click #buy", "no space left in the basket"), ("submit", "ok")],
    )
    login(page, "researcher")
    page.goto(f"{live_server.url}/projects/{project.pk}/")
    page.click("#search-link")
    page.fill("#id_q", '"no space left" domain:terminal')
    page.keyboard.press("Enter")
    page.wait_for_selector("#search-count")
    assert page.inner_text("#search-count").startswith("Hits 1–2 of 2")
    groups = page.locator(".search-group-title").all_inner_texts()
    assert groups == ["Long backup run"]
    assert page.locator(".search-snippet mark").first.inner_text() == "no space left"
    # the oldest first: step 480 is the second hit; its window is far down the trajectory
    page.select_option("#id_sort", "oldest")
    page.wait_for_function(
        "() => document.querySelector('#search-count').textContent.includes('Oldest first')"
    )
    page.locator(".search-hit-link").nth(1).click()
    mark = page.wait_for_selector("#step-480 mark.find-hit.current")
    assert mark.inner_text() == "no space left"
    assert page.locator("#find-count").inner_text() == "hit 2 of 2"
    in_view = page.evaluate(
        """() => {
          const r = document.querySelector('mark.find-hit.current').getBoundingClientRect();
          return r.top >= 0 && r.bottom <= window.innerHeight && r.width > 0;
        }"""
    )
    assert in_view
    # back to the search: save it, shared; it is listed and opens the same hits
    page.go_back()
    page.wait_for_selector("#save-search")
    page.fill("#save-search input[name=name]", "Full disks")
    page.check("#save-search input[name=shared]")
    page.click("#save-search button[type=submit]")
    page.wait_for_selector("#saved-searches a:has-text('Full disks')")
    page.click("#saved-searches a:has-text('Full disks')")
    page.wait_for_selector("#search-count")
    assert page.input_value("#id_q") == '"no space left" domain:terminal'
    # every hit becomes a queue
    page.fill("#hits-queue input[name=name]", "Disk full steps")
    page.click("#hits-queue button[type=submit]")
    page.wait_for_selector("text=Made the queue “Disk full steps” of 2 steps.")
    queue = AnnotationQueue.objects.get(name="Disk full steps")
    assert sorted(queue.items.values_list("step__index", flat=True)) == [9, 480]
