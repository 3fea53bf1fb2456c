"""An import job in the worker: claim the row, run the importer (interface 1,
`studio.services.imports.do_import_file`, all or nothing) with live progress, finish the row.
Cancel rolls the import back at its next progress report; after a successful import the
uploaded file is removed (a failed or cancelled one keeps it for Retry, see
`studio.jobs.file_retention`)."""

from __future__ import annotations

import logging
import time
from pathlib import Path

from django.conf import settings
from django.db import connection

from studio.jobs.file_retention import remove_upload
from studio.jobs.runtime import JobMonitor, claim, finish, uses_pulse, write_pulse
from studio.models import ImportJob, JobStatus

log = logging.getLogger(__name__)


class ImportCancelled(BaseException):
    """Raised from the progress report when the user cancelled. A BaseException, so that no
    importer's `except Exception` turns it into a failure; the import's transaction rolls
    back on it like on any exception."""


# The pulse is written when the shown percent changes (at most 100 times) or this long
# passed: it also tells the sweeper the worker is alive (studio.jobs.sweeper).
PULSE_INTERVAL_S = 1.0


def run_import_job(job_id: int, message_id: str = "") -> None:
    job = claim(ImportJob, job_id, message_id, phase="importing")
    if job is None:
        return
    from studio.services.import_jobs import cancel_flagged, clear_cancel_flag
    from studio.services.imports import do_import_file

    result, error, cancelled = None, "", False
    # On SQLite the import's transaction holds the only write lock from its first batch to
    # its commit (it writes as it reads), so the monitor's UPDATE waits all that time and
    # the pulse it writes first goes stale: the import writes the pulse itself.
    pulse = uses_pulse(ImportJob)
    pulsed = [-1, 0.0]  # the percent last written, and when
    with JobMonitor(ImportJob, job.pk) as monitor:

        def progress(fraction: float) -> None:
            # Stop while nothing is committed: parsing (nothing written yet) or inside the
            # write transaction. The last report (1.0) comes after the commit: too late.
            if (fraction < 1.0 or connection.in_atomic_block) and (
                monitor.cancel_requested or cancel_flagged(job.pk)
            ):
                raise ImportCancelled
            shown = max(0.0, min(0.99, float(fraction)))
            monitor.set_job(progress=shown)
            percent, now = int(shown * 100), time.monotonic()
            if pulse and (percent != pulsed[0] or now - pulsed[1] >= PULSE_INTERVAL_S):
                pulsed[:] = [percent, now]
                write_pulse(ImportJob, job.pk, {"progress": shown})

        try:
            progress(0.0)  # cancelled between its claim and now
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
        except ImportCancelled:
            cancelled = True
        except Exception as exc:  # noqa: BLE001 - the row must say what went wrong
            error = readable_import_error(exc, job)
            if error.startswith("Import failed ("):
                log.exception("import job %s failed", job.pk)
    clear_cancel_flag(job.pk)
    if cancelled:
        finish(ImportJob, job.pk, JobStatus.CANCELLED, phase="cancelled", progress=0.0)
        return
    if result is None:
        finish(ImportJob, job.pk, JobStatus.FAILED, error=error, phase="failed")
        return
    if finish(
        ImportJob,
        job.pk,
        JobStatus.SUCCEEDED,
        phase="done",
        progress=1.0,
        detected_format=result.detected_format or "",
        trajectories_created=result.trajectories_created,
        steps_created=result.steps_created,
        trajectories_skipped=result.trajectories_skipped,
    ):
        remove_upload(job.pk)  # its trajectories are in the project: the file has done its work


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
    if isinstance(exc, RecursionError):
        # The importer's depth limit keeps this from happening (it names the line); should a
        # walk still overflow, the user learns which file and which setting, not a type name.
        return (
            f"{job.original_name}: nested too deeply to import (limit STUDIO_IMPORT_MAX_DEPTH="
            f"{settings.STUDIO_IMPORT_MAX_DEPTH}); nothing from this file was imported."
        )
    return (
        f"Import failed ({type(exc).__name__}): {exc} - nothing from {job.original_name} "
        "was imported."
    )
