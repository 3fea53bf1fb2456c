"""A researcher builds a dataset from a queue's accepted items in headless Chromium and
downloads it in every format; each file loads with `datasets` (LLaMA-Factory's as a zip with
its dataset_info.json). An export written by a real worker shows its progress bar and
downloads once complete."""

from __future__ import annotations

import io
import json
import zipfile

import pytest

from studio.exports.formats import FORMATS
from studio.models import QueueClaim, StepAnnotation
from studio.services import queues as service
from studio.services.queues import QueueData
from tests.support.branching import make_child
from tests.support.branching import make_trajectory as make_branching

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_a_dataset_from_a_queues_accepted_items_downloads_in_every_format(
    page, live_server, login, project, tmp_path, default_worker
):
    import datasets

    _, root = make_branching(project)
    make_child(root, 2, ["simulated A", "simulated A+1"])
    queue = service.create_queue(project, None, QueueData(name="to curate", origin="simulated"))
    for item in queue.items.select_related("step"):
        StepAnnotation.objects.create(
            step=item.step, author=project.users["annotator"], queue=queue, verdict="accept",
            corrected_observation="fixed A" if item.position == 0 else "",
        )  # fmt: skip
        QueueClaim.objects.create(
            item=item, user=project.users["annotator"], expires_at="2030-01-01T00:00Z",
            done_at="2026-01-01T00:00Z",
        )  # fmt: skip
    login(page, "researcher")
    page.goto(f"{live_server.url}/queues/{queue.pk}/")
    page.click("#queue-dataset")
    page.fill("#id_name", "curated")
    page.click("#dataset-create")
    page.wait_for_selector("#dataset-versions")
    body = page.inner_text("body")
    assert "curated v1: 2 steps, 1 with a corrected observation" in body
    assert page.locator("#dataset-items tbody tr").count() == 2

    for fmt in FORMATS:
        page.select_option("#export-format", fmt)
        with page.expect_download() as info:
            page.click("#export-download")
        download = info.value
        path = tmp_path / download.suggested_filename
        download.save_as(path)
        if fmt == "llamafactory":
            archive = zipfile.ZipFile(io.BytesIO(path.read_bytes()))
            entry = json.loads(archive.read("dataset_info.json"))["curated-v1"]
            path = tmp_path / entry["file_name"]
            path.write_bytes(archive.read(entry["file_name"]))
        loaded = datasets.load_dataset("json", data_files=str(path), split="train")
        assert loaded.num_rows == 2, fmt
    # the corrected observation is what the world model is trained on
    wm = [json.loads(x) for x in (tmp_path / "curated-v1-wm-turns.jsonl").read_text().splitlines()]
    assert "fixed A" in wm[0]["completion"][0]["content"]

    # a worker writes it with a progress bar, and the file downloads once complete
    page.goto(f"{live_server.url}/datasets/{queue.project.datasets.get().pk}/")
    page.select_option("#export-format", "agent-turns")
    page.click("#export-background")
    page.wait_for_selector("#export-file", timeout=60000)
    assert "2 of 2 steps read, 2 rows written" in page.inner_text("#export-counts")
    assert page.get_attribute("#export-bar", "value") == "1.0"
    with page.expect_download() as info:
        page.click("#export-file")
    path = tmp_path / "background.jsonl"
    info.value.save_as(path)
    assert datasets.load_dataset("json", data_files=str(path), split="train").num_rows == 2
