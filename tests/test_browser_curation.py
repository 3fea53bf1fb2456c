"""The whole curation loop as a new user tries it, in headless Chromium with real workers:
a researcher makes a blind queue of simulated steps, two annotators work it with the keyboard
only, the agreement shows, the judge (the fake OpenAI-compatible server) scores the same steps
from the queue's page, the judge's agreement with people shows, and the accepted steps become
a dataset that downloads in every format and loads with `datasets`."""

from __future__ import annotations

import io
import json
import zipfile

import pytest

from studio.exports.formats import FORMATS
from studio.models import AnnotationQueue, JudgeJob
from studio.services.endpoints import EndpointData, save_endpoint
from tests.support.branching import make_child
from tests.support.branching import make_trajectory as make_branching
from tests.support.fake_openai import fake_openai_server
from tests.test_browser_queues import work_through

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def judge(body, index):
    user = body["messages"][1]["content"]
    dims = ("format", "factuality", "consistency", "realism", "quality")
    scores = dict.fromkeys(dims, 4) if "## Reference" in user else {"consistency": 3, "realism": 3}
    block = {"scores": scores, "strengths": ["plausible"], "weaknesses": []}
    return f"<final_evaluation>\n```json\n{json.dumps(block)}\n```\n</final_evaluation>"


def test_a_blind_queue_agreement_judge_and_dataset_in_the_browser(
    browser, live_server, login, project, tmp_path, default_worker
):
    import datasets

    _, root = make_branching(project)
    make_child(root, 2, ["3 passed in 0.2s", "nothing to commit"])
    pages = {}
    for name in ("researcher", "annotator", "admin"):
        context = browser.new_context(
            viewport={"width": 1300, "height": 900}, accept_downloads=True
        )
        pages[name] = context.new_page()
        pages[name].set_default_timeout(20000)
        login(pages[name], name)
    lead = pages["researcher"]
    lead.goto(f"{live_server.url}/projects/{project.pk}/queues/new/")
    lead.fill("#id_name", "sim check")
    lead.fill("#id_annotators_per_item", "2")
    lead.select_option("#id_origin", "simulated")
    lead.click("#queue-create")
    lead.wait_for_selector("#queue-progress")
    queue = AnnotationQueue.objects.get(name="sim check")
    assert queue.blind and queue.items.count() == 2

    assert work_through(pages["annotator"], live_server, queue, "45454") == 2
    assert work_through(pages["admin"], live_server, queue, "44444") == 2
    lead.goto(f"{live_server.url}/queues/{queue.pk}/")
    assert "100% of 2 pairs agree" in lead.inner_text("#verdict-agreement")
    assert lead.inner_text("#alpha-format") not in ("", "–")

    with fake_openai_server(judge) as srv:
        save_endpoint(
            project,
            EndpointData(
                name="judge", role="judge", kind="openai", base_url=srv.base_url, model="jm"
            ),
        )
        lead.click("#queue-judge")
        assert "queue 'sim check'" in lead.inner_text("#judge-target")
        lead.click("#judge-start")
        lead.wait_for_selector("#judge-status:has-text('Succeeded')", timeout=60000)
    job = JudgeJob.objects.get()
    assert "2 simulated steps to judge: 2 judged, 0 failed" in lead.inner_text("#judge-counts")
    assert job.steps_judged == 2
    lead.goto(f"{live_server.url}/queues/{queue.pk}/")
    assert lead.locator("#judge-vs-human").count() == 1
    assert "2" in lead.inner_text("#judge-vs-human tbody tr:first-child")

    lead.click("#queue-dataset")
    lead.fill("#id_name", "accepted sims")
    lead.click("#dataset-create")
    lead.wait_for_selector("#dataset-versions")
    assert "accepted sims v1: 2 steps" in lead.inner_text("body")
    for fmt in FORMATS:
        lead.select_option("#export-format", fmt)
        with lead.expect_download() as info:
            lead.click("#export-download")
        path = tmp_path / info.value.suggested_filename
        info.value.save_as(path)
        if fmt == "llamafactory":
            archive = zipfile.ZipFile(io.BytesIO(path.read_bytes()))
            entry = json.loads(archive.read("dataset_info.json"))["accepted-sims-v1"]
            path = tmp_path / entry["file_name"]
            path.write_bytes(archive.read(entry["file_name"]))
        assert datasets.load_dataset("json", data_files=str(path), split="train").num_rows == 2
    for page in pages.values():
        page.context.close()
