"""Browser upload form -> stored file -> ImportJob -> real worker -> importer."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from studio.models import ImportJob, JobStatus, Step, Trajectory
from tests.support.jobs import default_worker, wait_job  # noqa: F401

pytestmark = [pytest.mark.django_db(transaction=True)]

HX = {"HTTP_HX_REQUEST": "true"}


def native_file(n_trajectories: int = 2, steps: int = 3) -> bytes:
    data = {
        "format": "agentworld-studio/v1",
        "trajectories": [
            {
                "title": f"Orchard inventory {t}",
                "domain": "terminal",
                "task_instruction": "Count the pear crates in the depot.",
                "steps": [
                    {"action": f"wc -l crates-{t}-{i}.csv", "observation": f"{10 * i + t} crates"}
                    for i in range(steps)
                ],
            }
            for t in range(n_trajectories)
        ],
    }
    return json.dumps(data).encode()


def upload(client, project, content: bytes, name: str = "orchard.json", **extra):
    url = reverse("import_upload", kwargs={"project_id": project.pk})
    return client.post(url, {"file": SimpleUploadedFile(name, content), **extra}, **HX)


@pytest.mark.worker
def test_upload_imports_through_the_worker(researcher_client, project, default_worker):  # noqa: F811
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


@pytest.mark.worker
def test_malformed_file_fails_clearly_and_writes_nothing(
    researcher_client,
    project,
    default_worker,  # noqa: F811
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


def test_running_job_polls_and_escapes(researcher_client, project):
    job = ImportJob.objects.create(
        project=project,
        original_name="<img src=x onerror=alert(1)>.json",
        stored_path="/nonexistent",
        status=JobStatus.RUNNING,
        progress=0.42,
    )
    from django.utils import timezone

    ImportJob.objects.filter(pk=job.pk).update(heartbeat_at=timezone.now())
    response = researcher_client.get(reverse("import_job", kwargs={"job_id": job.pk}), **HX)
    assert response.status_code == 200
    html = response.content.decode()
    assert 'hx-trigger="every 500ms"' in html and "width: 42%" in html
    assert "<img src=x" not in html and "&lt;img src=x onerror=alert(1)&gt;" in html


def test_stale_running_job_is_failed_when_polled(researcher_client, project, settings):
    from datetime import timedelta

    from django.utils import timezone

    settings.STUDIO_JOB_STALE_S = 5
    job = ImportJob.objects.create(
        project=project, original_name="big.jsonl", stored_path="/x", status=JobStatus.RUNNING
    )
    old = timezone.now() - timedelta(seconds=60)
    ImportJob.objects.filter(pk=job.pk).update(heartbeat_at=old, started_at=old)
    response = researcher_client.get(reverse("import_job", kwargs={"job_id": job.pk}), **HX)
    assert response.status_code == 286
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED and "worker" in job.error
    assert "stopped without finishing" in response.content.decode()


def test_form_errors_and_permissions(client, researcher_client, project, settings):
    url = reverse("import_upload", kwargs={"project_id": project.pk})
    page = researcher_client.get(url)
    assert page.status_code == 200
    html = page.content.decode()
    assert 'hx-encoding="multipart/form-data"' in html and "js/imports.js" in html
    assert "agentworld-studio/v1" in html  # formats offered from list_formats()
    empty = upload(researcher_client, project, b"", name="empty.json")
    assert empty.status_code == 400 and "The submitted file is empty" in empty.content.decode()
    bad_format = upload(researcher_client, project, b"{}", format="no-such-format")
    assert bad_format.status_code == 400 and "Select a valid choice" in bad_format.content.decode()
    settings.STUDIO_MAX_UPLOAD_BYTES = 10
    too_big = upload(researcher_client, project, b"x" * 50, name="big.json")
    assert too_big.status_code == 400 and "the limit is" in too_big.content.decode()
    assert not ImportJob.objects.exists()

    client.force_login(project.users["annotator"])
    assert client.get(url).status_code == 403
    assert upload(client, project, native_file()).status_code == 403
    client.force_login(project.outsider)
    assert client.get(url).status_code == 404
    job = ImportJob.objects.create(project=project, original_name="a.json", stored_path="/x")
    assert client.get(reverse("import_job", kwargs={"job_id": job.pk})).status_code == 404
    assert not Trajectory.objects.exists()

    # without JavaScript the form posts normally and lands on the job page
    settings.STUDIO_MAX_UPLOAD_BYTES = 10**6
    client.force_login(project.users["admin"])
    plain = client.post(url, {"file": SimpleUploadedFile("plain.json", native_file())})
    new_job = ImportJob.objects.get(original_name="plain.json")
    assert plain.status_code == 302 and plain["Location"] == f"/imports/{new_job.pk}/"
    page = client.get(plain["Location"]).content.decode()
    assert 'hx-trigger="every 500ms"' in page and "Waiting for a worker" in page


@pytest.mark.worker
def test_import_progress_shows_while_the_atomic_import_runs(
    researcher_client,
    project,
    default_worker,  # noqa: F811
):
    """The importer writes in one transaction; progress comes from the monitor thread's own
    connection (and its pulse file, which SQLite's single writer cannot block), so the page
    sees it move before the commit."""
    upload(researcher_client, project, native_file(n_trajectories=40, steps=300), name="big.json")
    job = ImportJob.objects.get()
    seen = set()
    url = reverse("import_job", args=[job.pk])

    def finished():
        row = ImportJob.objects.get(pk=job.pk)
        if row.status == JobStatus.RUNNING:
            html = researcher_client.get(url, HTTP_HX_REQUEST="true").content.decode()
            shown = re.search(r"Importing… (\d+)%", html)
            if shown:
                seen.add(int(shown.group(1)))
        return row.is_finished

    from tests.support.worker import wait_for

    wait_for(finished, timeout=120, interval=0.05)
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED, job.error
    assert job.steps_created == 12000
    assert any(0 < p < 100 for p in seen), seen
