"""An annotator works a blind queue with guidelines and a custom question by keyboard only,
in headless Chromium: rates, answers the question, tags, saves with Ctrl+Enter from the
tags field, skips an item with a reason, flags one for the lead; a second annotator then
gets the skipped item, and the lead sees the flag and the per-annotator progress. The item
page and the queue page are screenshots when STUDIO_SCREENSHOT_DIR is set."""

from __future__ import annotations

import pytest

from studio.models import Membership, QueueClaim, Role, StepAnnotation
from studio.services import queues as service
from studio.services.questions import validate_questions
from studio.services.queues import QueueData
from tests.support.branching import make_child
from tests.support.branching import make_trajectory as make_branching
from tests.support.browser import shot

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def ready(page):
    page.wait_for_selector("#annotation-form[data-keys='ready']")  # the keys listen


def test_an_annotator_works_a_guided_blind_queue_by_keyboard_and_skips_one(
    browser, live_server, login, project, make_user
):
    other = make_user("annotator2")
    Membership.objects.create(project=project, user=other, role=Role.ANNOTATOR)
    _, root = make_branching(project)
    make_child(root, 2, ["simulated A", "simulated A+1"])
    make_child(root, 2, ["simulated B"], sample_index=1)
    questions = validate_questions(
        [{"key": "clarity", "label": "How clear is the observation?", "kind": "scale",
          "min": 1, "max": 5, "required": True}]
    )  # fmt: skip
    queue = service.create_queue(
        project, project.users["researcher"],
        QueueData(name="guided blind", origin="simulated", annotators_per_item=1, blind=True,
                  guidelines="## How to rate\n\nCompare with the **recorded** step.\n\n"
                             "<script>document.title='pwned'</script>",
                  questions=tuple(questions)),
    )  # fmt: skip
    items = list(queue.items.order_by("position"))
    pages = {}
    for name in ("annotator", "annotator2", "researcher"):
        context = browser.new_context(viewport={"width": 1300, "height": 1000})
        page = context.new_page()
        page.set_default_timeout(15000)
        login(page, name)
        pages[name] = page
    page = pages["annotator"]
    page.goto(f"{live_server.url}/queues/{queue.pk}/")
    assert "Compare with the recorded step." in page.inner_text("#guidelines-text")
    page.click("#queue-start")  # the one click: taking the queue's first item
    ready(page)
    assert page.title() != "pwned" and page.is_visible("#guidelines-text")  # open at first
    assert "x skip" in page.inner_text("#shortcut-list")
    shot(page, "queue-item")
    # item 1: five ratings, the question (the next row after them), accept, tags, Ctrl+Enter
    for key in "45454":
        page.keyboard.press(key)
    page.keyboard.press("3")
    page.keyboard.press("a")
    page.keyboard.press("t")
    page.keyboard.type("terse, cut-off")
    with page.expect_navigation():
        page.keyboard.press("Control+Enter")
    ready(page)
    first = StepAnnotation.objects.get(step=items[0].step, queue=queue)
    assert first.ratings == {"format": 4, "factuality": 5, "consistency": 4, "realism": 5,
                             "quality": 4}  # fmt: skip
    assert first.answers == {"clarity": 3} and first.verdict == "accept"
    assert first.tags == ["terse", "cut-off"]
    assert f"/steps/{items[1].step_id}/" in page.url
    # item 2: skipped with a reason, by keys
    page.keyboard.press("x")
    page.wait_for_selector("#skip-reason:focus")
    page.keyboard.type("not my environment")
    with page.expect_navigation():
        page.keyboard.press("Enter")
    ready(page)
    assert f"/steps/{items[2].step_id}/" in page.url
    # item 3: flagged for the lead, then answered with the question first, cleared, redone
    page.keyboard.press("!")
    page.wait_for_selector("#flag-note:focus")
    page.keyboard.type("the observation stops mid-line")
    with page.expect_navigation():
        page.keyboard.press("Enter")
    ready(page)
    page.keyboard.press("q")
    page.keyboard.press("2")  # the question; focus moves back... to nothing after it
    page.keyboard.press("ArrowUp")
    page.keyboard.press("ArrowUp")  # back on the last dimension (quality)
    page.keyboard.press("5")
    page.keyboard.press("ArrowUp")
    page.keyboard.press("Backspace")  # clears quality again
    page.keyboard.press("r")
    with page.expect_navigation():
        page.keyboard.press("n")
    assert "Nothing left for you in this queue" in page.inner_text("body")
    third = StepAnnotation.objects.get(step=items[2].step, queue=queue)
    assert third.answers == {"clarity": 2} and third.ratings == {} and third.verdict == "reject"
    skip = QueueClaim.objects.get(item=items[1], user=project.users["annotator"])
    assert skip.skip_reason == "not my environment" and skip.done_at is None
    # the second annotator is offered the skipped item, blind
    second = pages["annotator2"]
    second.goto(f"{live_server.url}/queues/{queue.pk}/")
    second.click("#queue-start")
    ready(second)
    assert f"/steps/{items[1].step_id}/" in second.url
    assert second.locator("#blind-note").count() == 1
    assert second.locator(".other-annotation").count() == 0
    # the lead sees the flag with its note and the per-annotator progress
    lead = pages["researcher"]
    lead.goto(f"{live_server.url}/queues/{queue.pk}/")
    assert "the observation stops mid-line" in lead.inner_text("#queue-flags")
    progress = lead.inner_text("#queue-annotator-progress")
    assert "annotator2" in progress
    assert "annotator\t2\t1\t1\t0" in progress  # done, skipped, flagged, holding now
    assert "annotator2" in lead.inner_text("#queue-claims")  # they hold item 2 now
    shot(lead, "queue-page")
    for p in pages.values():
        p.context.close()
