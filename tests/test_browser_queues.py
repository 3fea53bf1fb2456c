"""Two annotators work a blind queue in headless Chromium with the keyboard only: take the
next item, rate, accept, save and go on until the queue has nothing left for them; the other's
work shows only once one's own is in."""

from __future__ import annotations

import pytest

from studio.models import Membership, Role, StepAnnotation
from studio.services import queues as service
from studio.services.queues import QueueData
from tests.support.branching import make_child
from tests.support.branching import make_trajectory as make_branching

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def work_through(page, live_server, queue, keys: str) -> int:
    """From the queue's page: Start, then rate and accept each item and press n."""
    page.goto(f"{live_server.url}/queues/{queue.pk}/")
    page.click("#queue-start")
    done = 0
    while page.locator("#annotation-form").count():
        page.wait_for_selector("#annotation-form[data-keys='ready']")  # the keys listen
        for key in keys:
            page.keyboard.press(key)
        page.keyboard.press("a")
        with page.expect_navigation():
            page.keyboard.press("n")
        done += 1
    assert "Nothing left for you in this queue" in page.inner_text("body")
    return done


def test_two_annotators_work_a_blind_queue_with_the_keyboard(
    browser, live_server, login, project, make_user
):
    # two annotators: researchers and admins see everything (they are not kept blind)
    Membership.objects.create(project=project, user=make_user("annotator2"), role=Role.ANNOTATOR)
    _, root = make_branching(project)
    make_child(root, 2, ["simulated A", "simulated A+1"])
    queue = service.create_queue(
        project, None,
        QueueData(name="blind pair", origin="simulated", annotators_per_item=2, blind=True),
    )  # fmt: skip
    pages = []
    for name in ("annotator", "annotator2"):
        context = browser.new_context(viewport={"width": 1300, "height": 900})
        page = context.new_page()
        page.set_default_timeout(15000)
        login(page, name)
        pages.append(page)
    first, second = pages
    assert work_through(first, live_server, queue, "45454") == 2
    # the second annotator does not see the first one's work before submitting
    second.goto(f"{live_server.url}/queues/{queue.pk}/")
    second.click("#queue-start")
    second.wait_for_selector("#blind-note")
    assert second.locator(".other-annotation").count() == 0
    assert work_through(second, live_server, queue, "23232") == 2
    assert StepAnnotation.objects.filter(verdict="accept").count() == 4
    item = queue.items.first()
    first.goto(f"{live_server.url}/steps/{item.step_id}/annotate/?queue={queue.pk}")
    assert "annotator2" in first.inner_text(".other-annotation")  # both are in now
    first.goto(f"{live_server.url}/queues/{queue.pk}/")
    assert "4 of 4 annotations done" in first.inner_text("#queue-progress")
    for page in pages:
        page.context.close()
