"""Comparable evaluations as a reader sees them, in headless Chromium: the leaderboard groups
runs by the sample set they scored, each set under a heading with its count, the published
figures apart with a note; a run's page names its sample set and links its samples.
Screenshots when STUDIO_SCREENSHOT_DIR is set."""

from __future__ import annotations

import pytest

from studio.models import EvaluationRun
from tests.support.browser import shot
from tests.test_evaluations import finished_run

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_the_leaderboard_and_a_run_page_show_their_sample_sets(page, live_server, login, project):
    set_a, set_b = "3f9a" * 16, "c01d" * 16
    finished_run(project, "seed 0, 3 per domain", set_a, {"terminal": [4, 5, 4], "web": [3, 3, 3]},
                 limit_per_domain=3, params={"sample_pool": {"terminal": 12, "web": 12}})  # fmt: skip
    finished_run(project, "same set, other model", set_a,
                 {"terminal": [2, 3, 2], "web": [2, 2, 3]}, limit_per_domain=3)  # fmt: skip
    other = finished_run(project, "seed 5", set_b, {"terminal": [5]}, sample_seed=5,
                         limit_per_domain=1, domains=["terminal"])  # fmt: skip
    login(page, "annotator")
    page.goto(f"{live_server.url}/projects/{project.pk}/leaderboard/")
    heads = page.locator("#leaderboard tr.set-head").all_inner_texts()
    assert len(heads) == 3 and heads[-1].startswith("Published figures")
    assert heads[0].startswith("Sample set c01dc01dc01d · 1 sample · a subset")
    assert "seed 5, at most 1 per domain, recorded trajectories, terminal" in heads[0]
    assert heads[1].startswith("Sample set 3f9a3f9a3f9a · 6 samples")
    first_set = page.locator(f"tbody[data-sample-set='{set_a}'] tr.measured")
    assert first_set.count() == 2 and "seed 0, 3 per domain" in first_set.first.inner_text()
    assert first_set.first.locator("td.sample-count").inner_text() == "6"
    note = page.inner_text("#published-note")
    assert "not ranked with them" in note and "6 samples (set 3f9a3f9a3f9a, a subset)" in note
    assert page.locator("tbody.published-set tr.published").count() == 14
    shot(page, "leaderboard-sample-sets")

    run = EvaluationRun.objects.get(name="seed 0, 3 per domain")
    page.goto(f"{live_server.url}/evaluations/{run.pk}/")
    card = page.locator("#run-sample-set")
    text = card.inner_text()
    assert "Seed\t0" in text or "Seed 0" in text.replace("\t", " ")
    assert page.inner_text("#sample-set-digest") == set_a[:12]
    assert page.inner_text("#sample-count") == "6"
    assert "terminal 12, web 12" in text
    shot(page, "run-sample-set")
    page.click("#sample-list-link")
    page.wait_for_selector("#evaluation-samples")
    assert page.locator("#evaluation-samples tbody tr").count() == 6
    assert other.pk
