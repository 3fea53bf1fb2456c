"""Who may stop an export: the person who started it, or an admin or researcher; another
annotator of the project may see it but not cancel it (a review found annotators could
cancel anyone's running export)."""

from __future__ import annotations

import pytest
from django.urls import reverse

from studio.models import Dataset, DatasetVersion, ExportJob, JobStatus, Membership, Role


@pytest.fixture
def running_export(project, make_user):
    """A running export started by the project's annotator, and a second annotator."""
    second = make_user("annotator2")
    Membership.objects.create(project=project, user=second, role=Role.ANNOTATOR)
    dataset = Dataset.objects.create(project=project, name="sft")
    version = DatasetVersion.objects.create(dataset=dataset, number=1, source="hand-picked")
    job = ExportJob.objects.create(
        version=version,
        requester=project.users["annotator"],
        format="openai",
        status=JobStatus.RUNNING,
        phase="writing",
    )
    return job, second


def _cancel(client, job):
    return client.post(reverse("export_cancel", kwargs={"job_id": job.pk}))


@pytest.mark.django_db
def test_another_annotator_may_see_an_export_but_not_cancel_it(client, project, running_export):
    job, second = running_export
    client.force_login(second)
    page = client.get(reverse("export_job", kwargs={"job_id": job.pk}))
    assert page.status_code == 200 and 'id="export-cancel"' not in page.content.decode()
    refused = _cancel(client, job)
    assert refused.status_code == 403
    assert "Only the person who started this export" in refused.content.decode()
    job.refresh_from_db()
    assert not job.cancel_requested and job.status == JobStatus.RUNNING


@pytest.mark.django_db
@pytest.mark.parametrize("who", ["annotator", "researcher", "admin"])
def test_its_owner_or_an_admin_or_researcher_cancels_it(client, project, running_export, who):
    job, _ = running_export
    client.force_login(project.users[who])
    page = client.get(reverse("export_job", kwargs={"job_id": job.pk}))
    assert 'id="export-cancel"' in page.content.decode()
    assert _cancel(client, job).status_code == 302
    job.refresh_from_db()
    assert job.cancel_requested
