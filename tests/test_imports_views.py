"""The import pages without a worker: form errors, permissions, polling a job's row. Nothing
here runs a job: a job created by a request stays queued (its message is sent only on a commit
these tests never make)."""

from __future__ import annotations

from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from studio.models import ImportJob, JobStatus, Trajectory
from tests.support.imports import HX, native_file, upload


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


def test_a_stale_running_import_is_reported_by_the_page_and_failed_by_the_sweeper(
    researcher_client, project, settings
):
    from datetime import timedelta

    from django.utils import timezone

    from studio.jobs.sweeper import reap_stale_jobs

    settings.STUDIO_JOB_STALE_S = 5
    job = ImportJob.objects.create(
        project=project, original_name="big.jsonl", stored_path="/x", status=JobStatus.RUNNING
    )
    old = timezone.now() - timedelta(seconds=60)
    ImportJob.objects.filter(pk=job.pk).update(heartbeat_at=old, started_at=old)
    url = reverse("import_job", kwargs={"job_id": job.pk})
    response = researcher_client.get(url, **HX)
    assert response.status_code == 200  # still polling: a GET never writes
    assert "No heartbeat from its worker for 60 s" in response.content.decode()
    assert ImportJob.objects.get(pk=job.pk).status == JobStatus.RUNNING
    assert reap_stale_jobs() == 1
    response = researcher_client.get(url, **HX)
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
    assert too_big.status_code == 413 and "the upload limit of 10" in too_big.content.decode()
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


def test_a_finished_import_counts_with_thousands_separators(researcher_client, project):
    job = ImportJob.objects.create(
        project=project,
        original_name="kiwi.json",
        stored_path="/nonexistent",
        status=JobStatus.SUCCEEDED,
        progress=1.0,
        trajectories_created=1,
        steps_created=1500,
    )
    page = researcher_client.get(reverse("import_job", kwargs={"job_id": job.pk})).content
    assert "with <strong>1,500</strong> steps" in page.decode()
    listed = researcher_client.get(reverse("import_upload", args=[project.pk])).content
    assert "1 trajectory, 1,500 steps" in listed.decode()
