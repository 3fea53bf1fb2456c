"""What a job says happened: cancelling, cancelled with what was kept, the time limit."""

from __future__ import annotations

from datetime import timedelta

from django.urls import reverse
from django.utils import timezone

from studio.jobs.runtime import claim
from studio.jobs.sweeper import reap_stale_jobs
from studio.models import Branch, SimulationJob
from tests.support.branching import make_child, make_job, make_trajectory


def test_a_job_killed_at_the_hard_time_limit_says_so(project, settings):
    settings.STUDIO_JOB_HARD_LIMIT_S = 600
    settings.STUDIO_JOB_STALE_S = 60
    _, root = make_trajectory(project)
    now = timezone.now()
    killed = make_job(root, 1, n=1, status="running")
    make_child(root, 1, [], job=killed, status="running")
    # it beat until the limit, then stopped
    SimulationJob.objects.filter(pk=killed.pk).update(
        started_at=now - timedelta(seconds=700), heartbeat_at=now - timedelta(seconds=101)
    )
    died = make_job(root, 2, n=1, status="running")
    SimulationJob.objects.filter(pk=died.pk).update(
        started_at=now - timedelta(seconds=300), heartbeat_at=now - timedelta(seconds=200)
    )
    assert reap_stale_jobs() == 2
    killed.refresh_from_db()
    died.refresh_from_db()
    assert killed.error.startswith("Stopped at the time limit") and "600 s" in killed.error
    assert "stopped without finishing" in died.error and "time limit" not in died.error


def test_the_claim_starts_the_branches_with_the_job(project):
    _, root = make_trajectory(project)
    job = make_job(root, 1, n=2, status="queued")
    for i in range(2):
        make_child(root, 1, [], job=job, status="queued", sample_index=i, name=f"f{i}")
    claimed = claim(SimulationJob, job.pk, "m-1")
    assert claimed is not None and claimed.status == "running"
    assert set(Branch.objects.filter(job=job).values_list("status", flat=True)) == {"running"}


def test_the_page_says_cancelling_then_cancelled_with_what_was_kept(researcher_client, project):
    _, root = make_trajectory(project)
    job = make_job(root, 1, n=3, status="running")
    for i, status in enumerate(("succeeded", "running", "running")):
        make_child(root, 1, ["x"], job=job, status=status, sample_index=i, name=f"f{i}")
    SimulationJob.objects.filter(pk=job.pk).update(
        cancel_requested=True, heartbeat_at=timezone.now()
    )
    url = reverse("simulation_job", args=[job.pk])
    html = researcher_client.get(url, headers={"HX-Request": "true"}).content.decode()
    assert 'id="job-status" title="Asked to stop' in html and "Cancelling…" in html
    SimulationJob.objects.filter(pk=job.pk).update(
        status="cancelled", finished_at=timezone.now(), started_at=timezone.now()
    )
    Branch.objects.filter(job=job, status="running").update(status="cancelled")
    r = researcher_client.get(url, headers={"HX-Request": "true"})
    html = r.content.decode()
    assert r.status_code == 286 and "Cancelling" not in html
    assert ">Cancelled</span>" in html
    assert "1 of 3 futures had finished and is kept; the others keep" in html


def test_a_job_read_queued_whose_branches_were_claimed_since_shows_running(
    researcher_client, project
):
    from studio.views.simulation import _job_context

    _, root = make_trajectory(project)
    job = make_job(root, 1, n=1, status="queued")
    make_child(root, 1, [], job=job, status="queued")
    read_before = SimulationJob.objects.get(pk=job.pk)  # the page reads the row first
    claim(SimulationJob, job.pk, "m")  # a worker claims it meanwhile
    membership = project.memberships.get(user=project.users["researcher"])
    context = _job_context(read_before, membership)
    assert context["job"].status == "running" and not context["done"]
