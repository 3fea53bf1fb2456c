"""An evaluation as a new user makes one, in headless Chromium through a real worker and the
fake OpenAI-compatible server (world model and judge): the form from the project page, the
run's live page until it succeeds, the leaderboard with its chart, then a cell's samples and
one sample."""

from __future__ import annotations

import re

import pytest

from studio.models import EvaluationRun
from tests.support.fake_openai import fake_openai_server
from tests.support.jobs import TERMINAL_STEPS, make_trajectory
from tests.test_evaluations import SCORES, endpoints, judge_or_world

pytestmark = [pytest.mark.browser, pytest.mark.worker, pytest.mark.django_db(transaction=True)]


def test_an_evaluation_from_the_browser_ends_in_the_leaderboard_and_its_samples(
    page, live_server, login, project, default_worker
):
    make_trajectory(project)
    with fake_openai_server(judge_or_world(SCORES)) as srv:
        world, _ = endpoints(project, srv.base_url)
        login(page, "researcher")
        page.goto(f"{live_server.url}/projects/{project.pk}/")
        page.click("#evaluations-link")
        page.click("#evaluation-new")
        page.fill("input[name=name]", "first try")
        page.select_option("select[name=world]", str(world.pk))  # not the project's baseline
        page.fill("input[name=max_tokens]", "256")
        page.fill("input[name=judge_max_tokens]", "256")
        page.click("#evaluation-start")
        page.wait_for_url(re.compile(r"/evaluations/\d+/$"))
        page.wait_for_selector("[data-run-status='succeeded']", timeout=60_000)
        run = EvaluationRun.objects.get()
        n = len(TERMINAL_STEPS)
        assert f"{n} samples: {n} judged" in page.inner_text("#run-counts")
        overall = page.inner_text("#run-overall")
        assert overall == f"{run.results['overall']['total']:.2f}"
        page.click("text=Leaderboard")
    page.wait_for_selector("#leaderboard-figure[data-ready='1']")
    page.wait_for_selector("#dimension-figure[data-ready='1']")
    row = page.locator("#leaderboard tr.measured")
    assert "first try" in row.inner_text() and overall in row.inner_text()
    assert page.locator("#leaderboard tr.published").count() == 14
    row.locator("a", has_text=overall).last.click()  # the overall cell: every sample
    page.wait_for_url(re.compile(r"/evaluations/\d+/samples/"))
    assert page.locator("#evaluation-samples tbody tr").count() == n
    page.locator("#evaluation-samples a", has_text="step 0").click()
    page.wait_for_selector(".sample-view")
    assert "predicted output" in page.inner_text(".sample-prediction")
    assert TERMINAL_STEPS[0][1].splitlines()[0] in page.inner_text("#sample-truth")
