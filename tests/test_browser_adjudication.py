"""The lead adjudicates in headless Chromium: the queue page's per-annotator quality panel
(loaded by htmx, its Plotly chart drawn), the most disputed item, picking one annotator's
correction, then a dataset from the queue that holds that correction and says whose it is."""

from __future__ import annotations

import os
from datetime import timedelta

import pytest
from django.utils import timezone

from studio.models import DatasetItem, Membership, QueueClaim, Role, StepAnnotation
from studio.services import queues
from tests.support.jobs import make_trajectory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
SHOTS = os.environ.get("STUDIO_SCREENSHOTS", "")  # a folder: save the pages' screenshots


def _shot(page, name: str) -> None:
    if SHOTS:
        page.screenshot(path=os.path.join(SHOTS, name), full_page=True)


def test_the_lead_picks_a_correction_and_the_dataset_holds_it(
    browser, live_server, login, project, make_user
):
    make_trajectory(
        project,
        steps=[("ls", "a.txt b.txt"), ("cat a.txt", "hello"), ("wc -l a.txt", "1 a.txt")],
        key="browser-adj",
    )
    second = make_user("second")
    Membership.objects.create(project=project, user=second, role=Role.ANNOTATOR)
    first = project.users["annotator"]
    queue = queues.create_queue(
        project, None,
        queues.QueueData(name="fixes", origin="recorded", annotators_per_item=2, limit=10),
    )  # fmt: skip
    queue.questions = [
        {"key": "sure", "label": "Sure?", "kind": "single", "options": ["yes", "no"]}
    ]
    queue.save(update_fields=["questions"])
    items = list(queue.items.select_related("step").order_by("position"))
    plan = [
        (items[0], first, "accept", "", 5, 3),
        (items[0], second, "needs_fix", "a.txt b.txt c.txt", 2, 7),
        (items[1], first, "accept", "", 4, 2),
        (items[1], second, "accept", "", 4, 5),
        (items[2], first, "reject", "", 1, 4),
        (items[2], second, "accept", "", 5, 6),
    ]
    now = timezone.now()
    for item, user, verdict, fix, rating, minutes in plan:
        StepAnnotation.objects.create(
            step=item.step, author=user, queue=queue, verdict=verdict,
            corrected_observation=fix, ratings={"format": rating, "realism": rating},
            answers={"sure": "no" if fix else "yes"},
        )  # fmt: skip
        claim = QueueClaim.objects.create(item=item, user=user, expires_at=now, done_at=now)
        QueueClaim.objects.filter(pk=claim.pk).update(claimed_at=now - timedelta(minutes=minutes))
    picked = StepAnnotation.objects.get(queue=queue, step=items[0].step, author=second)

    context = browser.new_context(viewport={"width": 1300, "height": 900})
    page = context.new_page()
    page.set_default_timeout(15000)
    login(page, "researcher")
    page.goto(f"{live_server.url}/queues/{queue.pk}/")
    page.wait_for_selector("#annotator-quality-figure[data-ready='1']")  # htmx, then Plotly
    rows = page.locator("#annotator-quality tbody tr")
    assert rows.count() == 2
    assert "annotator (annotator-1)" in rows.nth(0).inner_text()
    _shot(page, "queue-quality.png")

    page.click(f"#disputed a[href='/queue-items/{items[0].pk}/adjudicate/']")
    page.wait_for_selector("#adjudicate-form")
    assert page.locator(f"#correction-diff-{picked.pk} ins").count() >= 1
    assert page.input_value("#adjudicate-own") == "a.txt b.txt"
    _shot(page, "adjudicate.png")
    page.check("input[name=verdict][value=accept]")
    page.check(f"#pick-{picked.pk}")
    with page.expect_navigation():
        page.click("#adjudicate-save")
    assert "The correction that stands is second's" in page.inner_text("#decision-correction")
    _shot(page, "adjudicated.png")

    page.goto(f"{live_server.url}/projects/{project.pk}/datasets/new/?queue={queue.pk}")
    page.fill("#id_name", "fixed")
    with page.expect_navigation():
        page.click("#dataset-create")
    item = DatasetItem.objects.get(version__dataset__name="fixed", step=items[0].step)
    assert item.observation == "a.txt b.txt c.txt" and item.correction_by == second
    assert "by second" in page.inner_text("#dataset-items")
    _shot(page, "dataset.png")
    page.goto(f"{live_server.url}/projects/{project.pk}/datasets/new/?name=fixed")
    assert page.locator("input[name=replace]").count() == 1
    _shot(page, "dataset-new.png")

    # hand-picking the third step, which one annotator rejected, warns and asks again
    rejected = items[2].step
    page.goto(f"{live_server.url}/steps/{rejected.pk}/annotate/")
    page.fill("#dataset-name", "fixed")
    with page.expect_navigation():
        page.click("#add-to-dataset-button")
    assert "1 of 2 annotators rejected it" in page.inner_text("#rejected-reasons")
    _shot(page, "confirm-add.png")
    with page.expect_navigation():
        page.click("#confirm-add-button")
    assert "fixed v2 holds 3 steps" in page.inner_text("body")
    context.close()
