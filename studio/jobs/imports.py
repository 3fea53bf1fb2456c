"""An import job in the worker: claim the row, run the importer (interface 1,
`studio.services.imports.do_import_file`, all or nothing) with live progress, finish the row."""

from __future__ import annotations

import logging
from pathlib import Path

from django.conf import settings

from studio.jobs.runtime import JobMonitor, claim, finish
from studio.models import ImportJob, JobStatus

log = logging.getLogger(__name__)


def run_import_job(job_id: int, message_id: str = "") -> None:
    job = claim(ImportJob, job_id, message_id)
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
