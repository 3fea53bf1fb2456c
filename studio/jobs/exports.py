"""An export job in the worker: write a dataset version to a file with live progress (steps
read, rows written), then offer it; a cancelled or failed export leaves no file. What the
rows left out beyond the job's own counters (rows whose context held a rejected step, thinking
targets written with an empty think block) is kept in its `options["left_out"]`."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from django.conf import settings

from studio.exports.formats import ExportOptions
from studio.jobs.runtime import JobMonitor, claim, finish
from studio.models import ExportJob, JobStatus

log = logging.getLogger(__name__)


def export_folder() -> Path:
    return Path(settings.DATA_DIR) / "exports"


def run_export_job(job_id: int, message_id: str = "") -> None:
    from studio.services import datasets as service

    job = claim(ExportJob, job_id, message_id, phase="writing", related=("version__dataset",))
    if job is None:
        return
    status = JobStatus.SUCCEEDED
    fields: dict[str, Any] = {}
    total = max(1, job.version.item_count)
    counts = service.ExportCounts()
    with JobMonitor(ExportJob, job.pk) as monitor:

        def tick(c: service.ExportCounts) -> None:
            if c.items % 200 == 0:  # the monitor writes it with the next heartbeat
                monitor.set_job(
                    progress=min(0.99, c.items / total), items_done=c.items, rows=c.rows
                )

        options = ExportOptions.from_dict(job.options)
        try:
            made = service.export_file(
                job.version, job.format, options, export_folder(), counts,
                tick=tick, stop=lambda: monitor.cancel_requested,
            )  # fmt: skip
        except service.ExportStopped:
            status, fields = JobStatus.CANCELLED, {"phase": "cancelled"}
        except Exception as exc:  # noqa: BLE001 - the row says what went wrong
            log.exception("export %s failed", job.pk)
            status = JobStatus.FAILED
            fields = {"phase": "failed", "error": f"Export failed ({type(exc).__name__}): {exc}"}
        else:
            fields = {
                "phase": "done", "progress": 1.0, "stored_path": str(made.path),
                "file_name": made.name, "size_bytes": made.size,
            }  # fmt: skip
    fields.update(
        items_done=counts.items, rows=counts.rows, deleted=counts.deleted, no_row=counts.no_row,
        # the job has no columns for these: they are kept with its options, which the page reads
        options={**job.options, "left_out": counts.left_out()},
    )  # fmt: skip
    extra: dict[str, Any] = fields
    finish(ExportJob, job.pk, status, **extra)
