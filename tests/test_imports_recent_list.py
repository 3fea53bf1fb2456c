"""The upload page's "Recent imports" list follows uploads without a reload."""

import json

from django.urls import reverse

from studio.models import ImportJob, JobStatus

HTMX = {"HTTP_HX_REQUEST": "true"}


def test_recent_imports_partial_lists_jobs(researcher_client, project):
    ImportJob.objects.create(
        project=project,
        requester=project.users["researcher"],
        original_name="runs<b>.jsonl",
        stored_path="/nowhere",
        status=JobStatus.SUCCEEDED,
        trajectories_created=2,
        steps_created=7,
    )
    url = reverse("import_upload", args=[project.pk]) + "?part=recent"
    body = researcher_client.get(url, **HTMX).content.decode()
    assert "Recent imports" in body and "runs&lt;b&gt;.jsonl" in body
    assert "2 trajectories, 7 steps" in body
    assert "<form" not in body  # only the list, not the upload form


def test_finished_job_fragment_tells_the_page_to_refresh_its_list(researcher_client, project):
    job = ImportJob.objects.create(
        project=project, original_name="a.json", stored_path="/nowhere", status=JobStatus.QUEUED
    )
    url = reverse("import_job", args=[job.pk])
    running = researcher_client.get(url, **HTMX)
    assert running.status_code == 200 and "HX-Trigger" not in running
    ImportJob.objects.filter(pk=job.pk).update(status=JobStatus.FAILED, error="bad line 3")
    done = researcher_client.get(url, **HTMX)
    assert done.status_code == 286  # stop polling
    assert json.loads(done["HX-Trigger"]) == {"importsChanged": {}}
