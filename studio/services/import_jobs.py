"""Imports of uploaded files as background jobs, web side: store the upload and create the
ImportJob, cancel it, retry it, and say whether its upload is still kept. The caller enqueues
it (`studio.tasks.enqueue_import`); the worker runs it (`studio.jobs.imports`).

Retention: the uploaded file is kept while its job may run again (queued, running, failed or
cancelled less than STUDIO_UPLOAD_RETENTION_DAYS ago) and removed after a successful import
or once that window passed (`studio.jobs.file_retention`, run by the workers' sweep)."""

from __future__ import annotations

import os
import re
import uuid
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from django.conf import settings
from django.core.files.move import file_move_safe
from django.db import transaction
from django.utils import timezone

from studio.jobs.file_retention import mark_owner, retention
from studio.jobs.runtime import fail_lost, is_silent
from studio.models import ImportJob, JobStatus
from studio.services.jobs import reopen, request_cancel

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def safe_filename(name: str) -> str:
    """Keep only the base name with safe characters (the extension helps format detection)."""
    base = Path(name.replace("\\", "/")).name
    cleaned = _UNSAFE.sub("_", base).strip("._") or "upload"
    return cleaned[-150:]


def store_upload(project_id: int, uploaded) -> Path:
    folder = Path(settings.MEDIA_ROOT) / "imports" / str(project_id) / uuid.uuid4().hex
    folder.mkdir(parents=True, exist_ok=True)
    mark_owner(folder)  # whose sweep may remove it, should its job row go
    path = folder / safe_filename(uploaded.name)
    temporary = getattr(uploaded, "temporary_file_path", None)
    if temporary is not None:
        # written as it arrived into FILE_UPLOAD_TEMP_DIR, beside MEDIA_ROOT: moved, not copied
        # (a rename on one filesystem); Django's close of the upload then finds it gone
        uploaded.file.flush()
        file_move_safe(temporary(), str(path))
        if settings.FILE_UPLOAD_PERMISSIONS is not None:
            os.chmod(path, settings.FILE_UPLOAD_PERMISSIONS)  # not the temporary file's 0600
        return path
    with open(path, "wb") as out:  # small (kept in memory) or not from a request
        for chunk in uploaded.chunks():
            out.write(chunk)
    return path


def do_start_import_job(*, project, user, uploaded, fmt: str = "", domain: str = "") -> ImportJob:
    path = store_upload(project.pk, uploaded)
    return ImportJob.objects.create(
        project=project,
        requester=user if getattr(user, "pk", None) else None,
        original_name=Path(uploaded.name).name[:500],
        stored_path=str(path),
        size_bytes=uploaded.size or path.stat().st_size,
        format=fmt or "",
        domain=domain or "",
    )


# ---- retention ----------------------------------------------------------------------------


@dataclass(frozen=True)
class UploadState:
    """Whether a job's uploaded file is still stored, and until when it is kept."""

    kept: bool
    kept_until: datetime | None  # a stopped job's file: removed by the sweep after this
    removed_at: datetime | None  # when the sweep removed it


def upload_state(job: ImportJob) -> UploadState:
    """What the page says of the upload, read from the row and the storage itself (the
    file may be gone without the sweep, e.g. a volume that was wiped)."""
    kept = (
        job.upload_removed_at is None and bool(job.stored_path) and Path(job.stored_path).is_file()
    )
    until = None
    if job.status in (JobStatus.FAILED, JobStatus.CANCELLED) and job.finished_at is not None:
        until = job.finished_at + retention()
    return UploadState(kept=kept, kept_until=until, removed_at=job.upload_removed_at)


def may_retry(job: ImportJob) -> bool:
    return job.status in (JobStatus.FAILED, JobStatus.CANCELLED) and upload_state(job).kept


def may_cancel(job: ImportJob) -> bool:
    return not job.is_finished and not job.cancel_requested


# ---- cancel and retry ---------------------------------------------------------------------


def cancel_flag_path(job_id: int) -> Path:
    """A file that asks the worker to stop: on SQLite the worker holds the only write lock
    while it writes, so the row's cancel_requested could be written only after it is done.
    The worker looks for this file at every batch (`studio.jobs.imports`)."""
    return Path(settings.DATA_DIR) / "pulse" / f"importjob-{job_id}.cancel"


def cancel_flagged(job_id: int) -> bool:
    return cancel_flag_path(job_id).exists()


def clear_cancel_flag(job_id: int) -> None:
    cancel_flag_path(job_id).unlink(missing_ok=True)


def cancel_import(job: ImportJob) -> ImportJob:
    """A queued import is cancelled at once; a running one rolls back at its next batch of
    records or steps, and its worker marks it cancelled: nothing of the file is written
    either way (the import writes in one transaction)."""
    if job.status == JobStatus.RUNNING:
        flag = cancel_flag_path(job.pk)
        flag.parent.mkdir(parents=True, exist_ok=True)
        flag.touch()
    request_cancel(ImportJob, job.pk)  # settles it at once when its worker is gone
    row = ImportJob.objects.get(pk=job.pk)
    now = timezone.now()
    if row.status == JobStatus.RUNNING and is_silent(row, now):
        fail_lost(ImportJob, row, now)  # no worker will stop it: settle it now (cancelled)
        row.refresh_from_db()
    if row.is_finished:
        clear_cancel_flag(job.pk)  # no worker is left to read it
    job.refresh_from_db()
    return job


class RetryRefused(Exception):
    """Retry cannot run this import again; the message says why and what to do."""


def retry_import(job: ImportJob) -> ImportJob:
    """The same job again, from its kept upload (the caller enqueues it). The row is locked
    while it is reopened, so the retention sweep either removed the file before (refused
    here) or finds the job queued and keeps it."""
    with transaction.atomic():
        row = ImportJob.objects.select_for_update().get(pk=job.pk)
        if row.status not in (JobStatus.FAILED, JobStatus.CANCELLED):
            raise RetryRefused(
                f"Import {row.pk} is {row.get_status_display().lower()}: only a failed or "
                "cancelled import can be retried."
            )
        state = upload_state(row)
        if not state.kept:
            when = (
                f" on {timezone.localtime(state.removed_at):%Y-%m-%d %H:%M %Z}"
                if state.removed_at
                else ""
            )
            raise RetryRefused(
                f"Cannot retry: the uploaded file {row.original_name} was removed{when} "
                f"(files of stopped imports are kept {settings.STUDIO_UPLOAD_RETENTION_DAYS} "
                "days, STUDIO_UPLOAD_RETENTION_DAYS). Upload the file again to import it."
            )
        clear_cancel_flag(row.pk)
        reopen(ImportJob, row.pk)
        ImportJob.objects.filter(pk=row.pk).update(
            progress=0.0,
            detected_format="",
            trajectories_created=0,
            steps_created=0,
            trajectories_skipped=0,
            started_at=None,
            heartbeat_at=None,
        )
    job.refresh_from_db()
    return job
