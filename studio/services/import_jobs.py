"""Imports of uploaded files as background jobs: store the upload, create the ImportJob,
run the importer in a worker with live progress. The importer itself (interface 1,
`studio.services.imports.do_import_file`) is atomic: the whole file or nothing."""

from __future__ import annotations

import logging
import re
import uuid
from pathlib import Path

from django.conf import settings
from django.db import transaction

from studio.models import ImportJob, JobStatus
from studio.services.job_runtime import JobMonitor, claim, finish

log = logging.getLogger(__name__)

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def safe_filename(name: str) -> str:
    """Keep only the base name with safe characters (the extension helps format detection)."""
    base = Path(name.replace("\\", "/")).name
    cleaned = _UNSAFE.sub("_", base).strip("._") or "upload"
    return cleaned[-150:]


def store_upload(project_id: int, uploaded) -> Path:
    folder = Path(settings.MEDIA_ROOT) / "imports" / str(project_id) / uuid.uuid4().hex
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / safe_filename(uploaded.name)
    with open(path, "wb") as out:
        for chunk in uploaded.chunks():
            out.write(chunk)
    return path


def do_start_import_job(*, project, user, uploaded, fmt: str = "", domain: str = "") -> ImportJob:
    path = store_upload(project.pk, uploaded)
    with transaction.atomic():
        job = ImportJob.objects.create(
            project=project,
            requester=user if getattr(user, "pk", None) else None,
            original_name=Path(uploaded.name).name[:500],
            stored_path=str(path),
            size_bytes=uploaded.size or path.stat().st_size,
            format=fmt or "",
            domain=domain or "",
        )
        transaction.on_commit(lambda: enqueue_import(job.pk))
    return job


def enqueue_import(job_id: int) -> None:
    from studio.celery import queue_name
    from studio.tasks import run_import_job

    run_import_job.apply_async(args=[job_id], queue=queue_name("default"))


def run_import(job_id: int) -> None:
    job = claim(ImportJob, job_id)
    if job is None:
        return
    from studio.services.imports import do_import_file

    result, error = None, ""
    with JobMonitor(ImportJob, job.pk) as monitor:

        def progress(fraction: float) -> None:
            monitor.set_job(progress=max(0.0, min(0.99, float(fraction))))

        try:
            if not Path(job.stored_path).is_file():
                raise FileNotFoundError(
                    f"the uploaded file {job.original_name} is gone from storage"
                )
            result = do_import_file(
                project=job.project,
                path=job.stored_path,
                fmt=job.format or None,
                domain=job.domain or None,
                user=job.requester,
                display_name=job.original_name,
                progress=progress,
            )
        except Exception as exc:  # noqa: BLE001 - the row must say what went wrong
            error = readable_import_error(exc, job)
            if error.startswith("Import failed ("):
                log.exception("import job %s failed", job.pk)
    if result is None:
        finish(ImportJob, job.pk, JobStatus.FAILED, error=error)
        return
    finish(
        ImportJob,
        job.pk,
        JobStatus.SUCCEEDED,
        progress=1.0,
        detected_format=result.detected_format or "",
        trajectories_created=result.trajectories_created,
        steps_created=result.steps_created,
        trajectories_skipped=result.trajectories_skipped,
    )


def readable_import_error(exc: BaseException, job: ImportJob) -> str:
    from celery.exceptions import SoftTimeLimitExceeded

    from studio.importers import ImportError_

    if isinstance(exc, ImportError_):
        return f"{exc} (nothing from this file was imported)"
    if isinstance(exc, SoftTimeLimitExceeded):
        return (
            f"Stopped: importing {job.original_name} ran past the time limit of "
            f"{settings.STUDIO_JOB_SOFT_LIMIT_S} s; nothing from this file was imported."
        )
    if isinstance(exc, FileNotFoundError):
        return str(exc)
    return (
        f"Import failed ({type(exc).__name__}): {exc} - nothing from {job.original_name} "
        "was imported."
    )
