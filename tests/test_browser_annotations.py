"""Annotating with the keyboard only, in headless Chromium: rate the five dimensions, judge,
correct the observation, save and go on to the next step; the shortcuts list on `?`."""

from __future__ import annotations

import pytest

from studio.models import StepAnnotation
from tests.support.jobs import make_trajectory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_a_step_is_rated_judged_and_corrected_with_the_keyboard_only(
    page, live_server, login, project
):
    trajectory = make_trajectory(project)
    steps = list(trajectory.root_branch.steps.order_by("index"))
    login(page, "annotator")
    page.goto(f"{live_server.url}/trajectories/{trajectory.pk}/")
    page.locator(".annotate-step").nth(1).click()
    page.wait_for_selector("#annotation-form[data-keys='ready']")
    page.keyboard.press("?")
    assert page.is_visible("#shortcuts")
    page.keyboard.press("?")
    assert not page.is_visible("#shortcuts")
    for key in "54435":  # one per dimension, the focus moving on after each
        page.keyboard.press(key)
    page.keyboard.press("ArrowUp")  # back from the last dimension to realism
    page.keyboard.press("2")
    page.keyboard.press("f")  # needs fix
    page.keyboard.press("e")  # into the editor
    page.keyboard.press("End")
    page.keyboard.press("Control+End")
    page.keyboard.type("\n(and one more line)")
    page.keyboard.press("Escape")
    page.keyboard.press("n")  # save, then the next step
    page.wait_for_url(f"**/steps/{steps[2].pk}/annotate/?branch=*")
    page.wait_for_selector("#annotation-form[data-keys='ready']")
    note = StepAnnotation.objects.get(step=steps[1], author=project.users["annotator"])
    assert note.ratings == {
        "format": 5,
        "factuality": 4,
        "consistency": 4,
        "realism": 2,
        "quality": 5,
    }
    assert note.verdict == "needs_fix"
    assert note.corrected_observation == steps[1].observation + "\n(and one more line)"
    assert note.versions.count() == 1
    # back on the first one, its history and diff show
    page.goto(f"{live_server.url}/steps/{steps[1].pk}/annotate/")
    page.wait_for_selector("#annotation-form[data-keys='ready']")
    assert "version 1" in page.inner_text("#annotation-history")
    assert "(and one more line)" in page.inner_text("#correction-diff")
    page.keyboard.press("a")
    page.keyboard.press("s")
    page.wait_for_selector("text=Saved.")
    note.refresh_from_db()
    assert note.verdict == "accept" and note.versions.count() == 2
