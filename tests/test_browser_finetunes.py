"""A fine-tune as a researcher starts one, in headless Chromium with the shared worker (its gpu
queue): from a dataset version's "Fine-tune" button (the version chosen on the form) to the
run's page, whose loss curve grows as the steps are logged, without a reload (htmx swaps its
live part), until the run is done and its model registered."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from studio.models import FineTuneRun, JobStatus
from tests.support.browser import shot
from tests.support.tiny_model import tiny_model_path  # noqa: F401
from tests.test_finetune_views import make_version

pytestmark = [
    pytest.mark.browser,
    pytest.mark.worker,
    pytest.mark.torch,
    pytest.mark.django_db(transaction=True),
]

STEPS = 4
# every point count the page's loss figure showed, as htmx swapped it in
WATCH_FIGURE = """() => {
  window.__seenPoints = [];
  window.__sameDocument = true;
  const note = () => {
    const fig = document.querySelector('#finetune-loss-figure');
    if (fig) window.__seenPoints.push(Number(fig.dataset.points));
  };
  note();
  new MutationObserver(note).observe(
    document.querySelector('#finetune-live'), {childList: true, subtree: true});
}"""


def test_a_fine_tune_from_the_dataset_page_draws_its_loss_live_until_done(
    page,
    login,
    live_server,
    default_worker,
    project,
    tiny_model_path,  # noqa: F811
):
    version, _ = make_version(project, trained=2, extra=2, name="Shop steps")
    login(page, "researcher")
    page.goto(f"{live_server.url}/datasets/{version.dataset_id}/")
    page.click("#dataset-finetune")
    page.wait_for_url(re.compile(r"/finetunes/new/\?version=\d+$"))
    expect(page.locator("select[name=dataset_version]")).to_have_value(str(version.pk))
    expect(page.locator("input[name=name]")).to_have_value("Shop steps v1 fine-tune")
    page.select_option("select[name=base]", "path")
    page.fill("input[name=base_path]", tiny_model_path)
    page.fill("input[name=learning_rate]", "0.01")
    page.fill("input[name=max_steps]", str(STEPS))
    page.fill("input[name=heldout]", "2")
    shot(page, "finetune-new")
    page.click("#finetune-start")
    page.wait_for_url(re.compile(r"/finetunes/\d+/$"))
    run = FineTuneRun.objects.get()
    assert run.base_model == tiny_model_path and len(run.heldout_trajectory_ids) == 2
    expect(page.locator("#finetune-dataset")).to_have_text("Shop steps v1")
    expect(page.locator("#finetune-train-count")).to_have_text("2")
    page.evaluate(WATCH_FIGURE)
    page.locator("#finetune-state[data-finetune-status=succeeded]").wait_for(timeout=180_000)
    expect(page.locator("#finetune-status")).to_have_text("Done")
    expect(page.locator("#finetune-step")).to_have_text(f"step {STEPS} of {STEPS}")
    page.locator("#finetune-loss-figure[data-ready='1']").wait_for()
    expect(page.locator("#finetune-loss-figure")).to_have_attribute("data-points", str(STEPS))
    assert page.locator("#finetune-loss-figure .scatterlayer .trace").count() >= 1
    seen = page.evaluate("window.__seenPoints")
    # the same document all along (no reload), its last curve swapped in by htmx (the steps
    # in between may all have come within one poll: the next test watches them one by one)
    assert page.evaluate("window.__sameDocument") is True
    assert seen and seen[-1] == STEPS, seen
    assert not page.locator("#finetune-cancel").count()
    expect(page.locator("#finetune-endpoint")).to_have_text(run.name)
    expect(page.locator("#finetune-download")).to_be_visible()
    expect(page.locator("#finetune-serve-vllm")).to_contain_text("--enable-lora --lora-modules")
    shot(page, "finetune-done")
    run.refresh_from_db()
    assert run.status == JobStatus.SUCCEEDED and run.final_loss is not None


def test_the_run_page_redraws_each_logged_step_until_done(page, login, live_server, project):
    """The page's live part follows the row as the job writes it (step, loss curve, status),
    whatever the training's speed: here the test writes the rows the job would, one step at a
    time, and waits for the page to show each before the next."""
    version, _ = make_version(project, trained=1, extra=1, name="Live steps")
    run = FineTuneRun.objects.create(
        project=project,
        name="live",
        dataset_version=version,
        dataset_name="Live steps",
        version_number=version.number,
        base_model="/models/base",
        status=JobStatus.RUNNING,
        phase="training",
        step=1,
        total_steps=3,
        loss_history=[[1, 2.0, 0.01]],
        first_loss=2.0,  # as the job writes it with the first logged loss
    )
    login(page, "researcher")
    page.goto(f"{live_server.url}/finetunes/{run.pk}/")
    page.locator("#finetune-loss-figure[data-points='1']").wait_for()
    expect(page.locator("#finetune-first-loss")).to_have_text("2.0000")  # from the first step
    expect(page.locator("#finetune-phase")).to_have_text("training")
    expect(page.locator("#evaluate-not-done")).to_be_visible()
    page.evaluate(WATCH_FIGURE)
    history = [[1, 2.0, 0.01]]
    for step, loss in ((2, 1.5), (3, 0.9)):
        history.append([step, loss, 0.01])
        done = step == 3
        FineTuneRun.objects.filter(pk=run.pk).update(
            step=step,
            progress=step / 3,
            loss_history=history,
            status=JobStatus.SUCCEEDED if done else JobStatus.RUNNING,
            phase="done" if done else "training",
            final_loss=loss if done else None,
            first_loss=2.0,
        )
        page.locator(f"#finetune-loss-figure[data-points='{step}']").wait_for()
        expect(page.locator("#finetune-step")).to_have_text(f"step {step} of 3")
    expect(page.locator("#finetune-status")).to_have_text("Done")
    expect(page.locator("#finetune-phase")).to_have_count(0)  # "Done", not "Done phase done"
    # the live part's last answer refreshes the evaluation section, which said it was running
    expect(page.locator("#evaluate-not-done")).to_have_count(0)
    expect(page.locator("#evaluate-refused")).to_contain_text("No base model is registered")
    assert page.evaluate("window.__sameDocument") is True
    assert sorted(set(page.evaluate("window.__seenPoints"))) == [1, 2, 3]
    expect(page.locator("#finetune-final-loss")).to_have_text(re.compile(r"0\.9"))
