"""Uploads that are kept while their import may run again, and removed after; Retry and
Cancel of import jobs (real worker for Retry, the job body in a thread for a cancel caught
mid-write)."""

from __future__ import annotations

import os
import threading
import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse
from django.utils import timezone

from studio.jobs.file_retention import OWNER_FILE, sweep_files
from studio.jobs.runtime import WORKER_LOST_MESSAGE
from studio.models import ImportJob, JobStatus, Step, Trajectory
from studio.services.import_jobs import cancel_flag_path, do_start_import_job
from tests.support.imports import HX, native_file, upload
from tests.support.jobs import wait_job
from tests.support.worker import wait_for


def stored_job(project, user, *, status=JobStatus.QUEUED, stopped_days_ago=0.0, name="a.json"):
    """An import job with its file stored as an upload stores it, in a given state."""
    job = do_start_import_job(
        project=project, user=user, uploaded=SimpleUploadedFile(name, native_file())
    )
    fields: dict = {"status": status}
    if status in (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED):
        fields["finished_at"] = timezone.now() - timedelta(days=stopped_days_ago)
    if status == JobStatus.FAILED:
        fields["error"] = WORKER_LOST_MESSAGE.format(age=130)
    ImportJob.objects.filter(pk=job.pk).update(**fields)
    job.refresh_from_db()
    return job


def job_page(client, job) -> str:
    response = client.get(reverse("import_job", args=[job.pk]))
    assert response.status_code == 200
    return response.content.decode()


def age(path: Path, hours: float) -> None:
    old = time.time() - hours * 3600
    os.utime(path, (old, old))


@pytest.fixture
def data_dir(settings, tmp_path):
    """A data folder of this test alone: the sweep looks at every file in it."""
    settings.DATA_DIR = tmp_path
    settings.MEDIA_ROOT = tmp_path / "uploads"
    settings.FILE_UPLOAD_TEMP_DIR = str(tmp_path / "uploads" / "incoming")
    settings.STUDIO_UPLOAD_RETENTION_DAYS = 7
    return tmp_path


# ---- the retention sweep ------------------------------------------------------------------


@pytest.mark.django_db
def test_sweep_keeps_files_that_may_run_again_and_removes_the_rest(project, data_dir, client):
    user = project.users["researcher"]
    keep = {
        "queued": stored_job(project, user),
        "running": stored_job(project, user, status=JobStatus.RUNNING),
        "failed recently": stored_job(project, user, status=JobStatus.FAILED, stopped_days_ago=6),
        "cancelled recently": stored_job(
            project, user, status=JobStatus.CANCELLED, stopped_days_ago=1
        ),
    }
    remove = {
        "succeeded": stored_job(project, user, status=JobStatus.SUCCEEDED),
        "failed long ago": stored_job(project, user, status=JobStatus.FAILED, stopped_days_ago=8),
        "cancelled long ago": stored_job(
            project, user, status=JobStatus.CANCELLED, stopped_days_ago=7.1
        ),
    }
    counts = sweep_files()
    assert counts.uploads == 3
    assert counts.upload_bytes == 3 * len(native_file())
    for what, job in keep.items():
        job.refresh_from_db()
        assert Path(job.stored_path).is_file(), what
        assert job.upload_removed_at is None, what
    for what, job in remove.items():
        job.refresh_from_db()
        assert not Path(job.stored_path).exists(), what
        assert not Path(job.stored_path).parent.exists(), what  # its folder too
        assert job.upload_removed_at is not None, what
    assert sweep_files().uploads == 0  # nothing twice

    client.force_login(user)
    kept = job_page(client, keep["failed recently"])
    assert 'data-upload-kept="1"' in kept and "kept for Retry until" in kept
    assert 'id="import-retry"' in kept
    gone = job_page(client, remove["failed long ago"])
    assert 'data-upload-kept="0"' in gone
    assert "was removed on" in gone and "upload the file again" in gone
    assert 'id="import-retry"' not in gone
    done = job_page(client, remove["succeeded"])
    assert "removed after the import succeeded" in done


@pytest.mark.django_db
def test_a_shorter_window_removes_sooner(project, data_dir, settings):
    job = stored_job(
        project, project.users["researcher"], status=JobStatus.FAILED, stopped_days_ago=2
    )
    assert sweep_files().uploads == 0
    settings.STUDIO_UPLOAD_RETENTION_DAYS = 1
    assert sweep_files().uploads == 1
    assert not Path(job.stored_path).exists()


@pytest.mark.django_db
def test_sweep_removes_leftovers_only_once_old(project, data_dir):
    exports = data_dir / "exports"
    exports.mkdir()
    dead = exports / ".export-k1ll3d"
    dead.write_bytes(b"x" * 100)
    age(dead, 7)
    writing = exports / ".export-l1ve"  # an export writing now
    writing.write_bytes(b"y")
    finished = exports / "abc123-demo-v1-openai.jsonl"  # a finished export's file
    finished.write_bytes(b"{}\n")
    age(finished, 48)
    pulse = data_dir / "pulse"
    pulse.mkdir()
    stale = [pulse / "importjob-9.json.4242.1.tmp", pulse / "simulationjob-3.json"]
    for path in stale:
        path.write_text("{}")
        age(path, 5)
    fresh = pulse / "importjob-10.json"
    fresh.write_text("{}")

    # an upload whose job row went (its project was deleted) and one of another database
    gone_job = stored_job(project, project.users["researcher"], name="orphan.json")
    other_db = stored_job(project, project.users["researcher"], name="theirs.json")
    (Path(other_db.stored_path).parent / OWNER_FILE).write_text("postgresql:db:5432:theirs")
    ImportJob.objects.filter(pk__in=[gone_job.pk, other_db.pk]).delete()
    for job in (gone_job, other_db):
        age(Path(job.stored_path), 5)
        age(Path(job.stored_path).parent, 5)

    incoming = data_dir / "uploads" / "incoming"  # an upload in flight is written here
    incoming.mkdir(parents=True)
    killed_upload = incoming / "tmpk1ll3d.upload.jsonl"
    killed_upload.write_bytes(b"z" * 50)
    age(killed_upload, 5)
    uploading = incoming / "tmpl1ve.upload.jsonl"
    uploading.write_bytes(b"z")

    counts = sweep_files()
    assert not dead.exists() and writing.exists() and finished.exists()
    assert not any(p.exists() for p in stale) and fresh.exists()
    assert not killed_upload.exists() and uploading.exists()
    assert not Path(gone_job.stored_path).parent.exists()
    assert Path(other_db.stored_path).is_file()  # not this database's to judge
    assert counts.temp_files == 5 and counts.uploads == 0


@pytest.mark.django_db
def test_sweep_files_command_says_what_it_removed(project, data_dir, caplog):
    from io import StringIO

    from django.core.management import call_command

    stored_job(project, project.users["researcher"], status=JobStatus.SUCCEEDED)
    out = StringIO()
    with caplog.at_level("INFO", logger="studio.jobs.file_retention"):
        call_command("sweep_files", stdout=out)
    assert out.getvalue().startswith("removed 1 uploaded file(s)")
    # said once: not also as the workers' log line
    assert not [r for r in caplog.records if "file sweep" in r.getMessage()]
    stored_job(project, project.users["researcher"], status=JobStatus.SUCCEEDED)
    with caplog.at_level("INFO", logger="studio.jobs.file_retention"):
        assert sweep_files().uploads == 1  # a worker's sweep logs what it removed
    assert [r for r in caplog.records if "file sweep" in r.getMessage()]


# ---- Retry and Cancel --------------------------------------------------------------------


@pytest.mark.django_db
def test_retry_is_refused_once_the_file_was_removed(project, data_dir, client):
    job = stored_job(
        project, project.users["researcher"], status=JobStatus.FAILED, stopped_days_ago=9
    )
    sweep_files()
    client.force_login(project.users["researcher"])
    response = client.post(reverse("import_job_retry", args=[job.pk]), follow=True)
    html = response.content.decode()
    assert "Cannot retry: the uploaded file a.json was removed on" in html
    assert "STUDIO_UPLOAD_RETENTION_DAYS" in html
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED  # unchanged


@pytest.mark.django_db
def test_only_editors_see_and_use_retry_and_cancel(project, data_dir, client):
    failed = stored_job(project, project.users["researcher"], status=JobStatus.FAILED)
    queued = stored_job(project, project.users["researcher"])
    client.force_login(project.users["annotator"])
    assert 'id="import-retry"' not in job_page(client, failed)
    assert 'id="import-cancel"' not in job_page(client, queued)
    assert client.post(reverse("import_job_retry", args=[failed.pk])).status_code == 403
    assert client.post(reverse("import_job_cancel", args=[queued.pk])).status_code == 403
    client.force_login(project.outsider)
    assert client.post(reverse("import_job_cancel", args=[queued.pk])).status_code in (403, 404)
    queued.refresh_from_db()
    failed.refresh_from_db()
    assert (queued.status, failed.status) == (JobStatus.QUEUED, JobStatus.FAILED)
    client.force_login(project.users["researcher"])
    assert 'id="import-retry"' in job_page(client, failed)
    page = job_page(client, queued)
    assert 'id="import-cancel"' in page and 'id="import-retry"' not in page


@pytest.mark.django_db(transaction=True)
def test_cancel_a_queued_import_shows_cancelled(
    researcher_client, project, isolated_queues, data_dir
):
    upload(researcher_client, project, native_file())  # no worker consumes these queues
    job = ImportJob.objects.get()
    response = researcher_client.post(reverse("import_job_cancel", args=[job.pk]), follow=True)
    html = response.content.decode()
    job.refresh_from_db()
    assert job.status == JobStatus.CANCELLED and job.phase == "cancelled"
    assert "Cancelled before it started: nothing from orchard.json was imported." in html
    assert 'class="badge status-cancelled" id="import-status">Cancelled<' in html
    assert "Failed" not in html
    assert 'id="import-cancel"' not in html and 'id="import-retry"' in html  # file kept
    assert Path(job.stored_path).is_file()
    assert Trajectory.objects.count() == 0


@pytest.mark.django_db
def test_cancel_an_import_whose_worker_is_gone_settles_it_at_once(project, data_dir, client):
    job = stored_job(project, project.users["researcher"], status=JobStatus.RUNNING)
    long_ago = timezone.now() - timedelta(minutes=10)
    ImportJob.objects.filter(pk=job.pk).update(started_at=long_ago, heartbeat_at=long_ago)
    client.force_login(project.users["researcher"])
    html = client.post(reverse("import_job_cancel", args=[job.pk]), follow=True).content.decode()
    job.refresh_from_db()
    assert job.status == JobStatus.CANCELLED and job.phase == "cancelled"
    assert job.error.startswith("Cancelled. Its worker had stopped") and "futures" not in job.error
    assert job.error.endswith("nothing was imported.")
    assert "Cancelled while importing: nothing from a.json was imported." in html
    assert not cancel_flag_path(job.pk).exists()


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_retry_runs_a_lost_import_again_from_its_kept_file(
    researcher_client, project, default_worker
):
    job = stored_job(project, project.users["researcher"], status=JobStatus.FAILED)
    page = job_page(researcher_client, job)
    assert "use Retry" in page and 'id="import-retry"' in page  # the message tells the truth

    response = researcher_client.post(reverse("import_job_retry", args=[job.pk]))
    assert response.status_code == 302 and response["Location"] == f"/imports/{job.pk}/"
    job = wait_job(job)
    assert job.status == JobStatus.SUCCEEDED, job.error
    assert (job.trajectories_created, job.steps_created, job.attempts) == (2, 6, 1)
    assert Trajectory.objects.filter(project=project).count() == 2
    # the import succeeded: its file has done its work
    assert job.upload_removed_at is not None and not Path(job.stored_path).exists()
    html = researcher_client.get(reverse("import_job", args=[job.pk]), **HX).content.decode()
    assert "Imported <strong>2</strong> trajectories" in html
    assert "removed after the import succeeded" in html and 'id="import-retry"' not in html


@pytest.mark.django_db(transaction=True)
def test_cancel_while_writing_rolls_everything_back(
    project, isolated_queues, monkeypatch, client, data_dir
):
    """Held inside the import's write transaction with thousands of steps written: Cancel
    (from another request, as a person clicks it) stops it at its next batch, the job shows
    Cancelled and not a step is kept. Works on SQLite too, whose single writer the import
    holds: the cancel flag reaches the worker without a database write."""
    from studio.jobs.imports import run_import_job
    from studio.services import imports as importing

    reached, release = threading.Event(), threading.Event()
    real = importing.do_import_file

    def held(**kwargs):
        report = kwargs["progress"]

        def progress(fraction: float) -> None:
            report(fraction)
            if fraction >= 0.7 and not release.is_set():
                reached.set()
                release.wait(timeout=60)

        return real(**{**kwargs, "progress": progress})

    monkeypatch.setattr(importing, "do_import_file", held)
    researcher = project.users["researcher"]
    client.force_login(researcher)
    upload(client, project, native_file(n_trajectories=40, steps=300), name="big.json")
    job = ImportJob.objects.get()

    def body(target, *args) -> None:
        from django.db import connection

        try:
            target(*args)
        finally:
            connection.close()

    runner = threading.Thread(target=body, args=(run_import_job, job.pk))
    runner.start()
    answers: list = []
    try:
        assert reached.wait(timeout=60)
        clicker = threading.Thread(
            target=body,
            args=(
                lambda: answers.append(client.post(reverse("import_job_cancel", args=[job.pk]))),
            ),
        )
        clicker.start()
        wait_for(lambda: cancel_flag_path(job.pk).exists(), timeout=30, interval=0.02)
    finally:
        release.set()
        runner.join(timeout=120)
    clicker.join(timeout=60)
    assert answers and answers[0].status_code == 302
    job.refresh_from_db()
    assert job.status == JobStatus.CANCELLED and job.error == ""
    assert Step.objects.count() == 0 and Trajectory.objects.count() == 0
    assert not cancel_flag_path(job.pk).exists()
    html = job_page(client, job)
    assert "Cancelled while importing: nothing from big.json was imported." in html
    assert 'id="import-retry"' in html and Path(job.stored_path).is_file()

    # Retry clears the cancel: the same job imports in full
    client.post(reverse("import_job_retry", args=[job.pk]))
    job.refresh_from_db()
    assert job.status == JobStatus.QUEUED and not job.cancel_requested
    run_import_job(job.pk)
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED and job.steps_created == 12000


@pytest.mark.browser
@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_retry_and_cancel_from_the_browser(page, login, live_server, project, default_worker):
    from tests.support.browser import shot

    researcher = project.users["researcher"]
    lost = stored_job(project, researcher, status=JobStatus.FAILED, name="lost.json")
    waiting = stored_job(project, researcher, name="waiting.json")  # no message: stays queued
    login(page, "researcher")

    page.goto(f"{live_server.url}/imports/{waiting.pk}/")
    shot(page, "import-queued-cancel")
    page.click("#import-cancel")
    page.wait_for_selector(".import-cancelled")
    assert page.inner_text("#import-status") == "Cancelled"
    assert "nothing from waiting.json was imported" in page.inner_text(".import-cancelled")
    assert page.is_visible("#import-retry")  # its file is kept
    shot(page, "import-cancelled")

    page.goto(f"{live_server.url}/imports/{lost.pk}/")
    assert "use Retry" in page.inner_text(".import-error")
    assert "kept for Retry until" in page.inner_text(".upload-retention")
    shot(page, "import-lost-retry")
    page.click("#import-retry")
    result = page.wait_for_selector(".import-result", timeout=60_000)
    assert "Imported 2 trajectories with 6 steps" in " ".join(result.inner_text().split())
    assert "removed after the import succeeded" in page.inner_text(".upload-retention")
    assert not page.is_visible("#import-retry") and not page.is_visible("#import-cancel")
    shot(page, "import-retried")
    assert Trajectory.objects.filter(project=project).count() == 2
