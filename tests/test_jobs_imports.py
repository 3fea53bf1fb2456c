"""Browser upload form -> stored file -> ImportJob -> real worker -> importer."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from django.urls import reverse

from studio.models import ImportJob, JobStatus, Step, Trajectory
from tests.support.imports import HX, native_file, upload
from tests.support.jobs import wait_job

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]


def test_upload_imports_through_the_worker(researcher_client, project, default_worker):
    response = upload(researcher_client, project, native_file(), format="agentworld-studio/v1")
    assert response.status_code == 200
    job = ImportJob.objects.get()
    assert response["HX-Push-Url"] == f"/imports/{job.pk}/"
    assert 'hx-trigger="every 500ms"' in response.content.decode()
    stored = Path(job.stored_path)
    assert stored.is_file() and stored.read_bytes() == native_file()
    assert job.original_name == "orchard.json" and job.format == "agentworld-studio/v1"

    job = wait_job(job)
    assert job.status == JobStatus.SUCCEEDED, job.error
    assert (job.trajectories_created, job.steps_created, job.progress) == (2, 6, 1.0)
    assert Trajectory.objects.filter(project=project).count() == 2

    url = reverse("import_job", kwargs={"job_id": job.pk})
    polled = researcher_client.get(url, **HX)
    assert polled.status_code == 286  # htmx stops polling
    html = polled.content.decode()
    assert "every 500ms" not in html
    assert "Imported <strong>2</strong> trajectories with <strong>6</strong> steps" in html
    assert reverse("library", kwargs={"project_id": project.pk}) in html
    page = researcher_client.get(url)
    assert page.status_code == 200 and "orchard.json" in page.content.decode()

    # the same file again: the importer skips what is already there
    upload(researcher_client, project, native_file(), name="again.json")
    again = wait_job(ImportJob.objects.get(original_name="again.json"))
    assert again.status == JobStatus.SUCCEEDED
    assert (again.trajectories_created, again.trajectories_skipped) == (0, 2)


def test_malformed_file_fails_clearly_and_writes_nothing(
    researcher_client,
    project,
    default_worker,
):
    data = json.loads(native_file())
    del data["trajectories"][1]["steps"][2]["observation"]
    upload(researcher_client, project, json.dumps(data).encode(), name="broken.json")
    job = wait_job(ImportJob.objects.get())
    assert job.status == JobStatus.FAILED
    assert "broken.json" in job.error and "observation" in job.error
    assert "nothing from this file was imported" in job.error
    assert Trajectory.objects.count() == 0 and Step.objects.count() == 0
    polled = researcher_client.get(reverse("import_job", kwargs={"job_id": job.pk}), **HX)
    assert polled.status_code == 286
    assert "observation" in polled.content.decode() and "import-error" in polled.content.decode()


def test_import_progress_shows_while_the_atomic_import_runs(
    researcher_client, project, isolated_queues, monkeypatch
):
    """The importer writes in one transaction; progress comes from the monitor thread's own
    connection (and its pulse file, which SQLite's single writer cannot block), so the page
    sees it move before the commit. The job body runs in a thread here, held at a third of
    the file until the page has shown it: a real worker imports this file in well under a
    second, faster than the monitor's tick, so waiting for it to be seen would be luck."""
    import threading

    from studio.jobs.imports import run_import_job
    from studio.services import imports as importing

    reached, release = threading.Event(), threading.Event()
    real = importing.do_import_file

    def held(**kwargs):
        report = kwargs["progress"]

        def progress(fraction: float) -> None:
            report(fraction)
            if fraction >= 0.3 and not release.is_set():
                reached.set()
                release.wait(timeout=60)

        return real(**{**kwargs, "progress": progress})

    monkeypatch.setattr(importing, "do_import_file", held)
    upload(researcher_client, project, native_file(n_trajectories=40, steps=300), name="big.json")
    job = ImportJob.objects.get()  # queued: no worker consumes this test's queues

    def body() -> None:
        from django.db import connection

        try:
            run_import_job(job.pk)
        finally:
            connection.close()  # an open one would keep the test database from being dropped

    runner = threading.Thread(target=body)
    runner.start()
    url = reverse("import_job", args=[job.pk])

    def shown() -> int | None:
        html = researcher_client.get(url, HTTP_HX_REQUEST="true").content.decode()
        found = re.search(r"Importing… (\d+)%", html)
        return int(found.group(1)) if found and 30 <= int(found.group(1)) < 100 else None

    from tests.support.worker import wait_for

    try:
        assert reached.wait(timeout=60)
        seen = wait_for(shown, timeout=30, interval=0.05)  # before the commit
    finally:
        release.set()
        runner.join(timeout=120)
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED, job.error
    assert job.steps_created == 12000
    assert 30 <= seen < 100
