"""What the studio keeps on disk, and for how long; the workers' sweep (`studio.jobs.sweeper`)
runs it every few minutes, `python manage.py sweep_files` on demand.

- An uploaded file is kept while its import may run again: queued, running, or failed or
  cancelled less than STUDIO_UPLOAD_RETENTION_DAYS ago (Retry runs it from the file). It is
  removed once the import succeeded (the job itself removes it then; the sweep catches a
  worker that died before) or once that window passed. The row records when
  (`ImportJob.upload_removed_at`), so the page can say so.
- Files nobody can use any more, once older than `temp_max_age_s()` (nothing alive leaves a
  file untouched that long): the `.export-*` temporary files of killed exports, leftovers in
  the pulse folder (`*.tmp` of a killed writer, pulses and cancel flags of jobs long ended),
  and upload folders with no job row (its project was deleted, or the web process died
  between storing the upload and making the job). Which rows exist depends on the database,
  and a data folder may be shared by several (the test suite's databases and a developer's
  own): each upload folder names the database it belongs to (`OWNER_FILE`), and only that
  database's sweep removes it. Folders from before that marker are left alone unless
  `sweep_files --include-unmarked` says the data folder is this database's alone.

Removing an upload is claimed on the row first, with the same conditions, so a Retry that
reopened the job meanwhile (it locks the row, `studio.services.import_jobs.retry_import`)
keeps its file."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from django.conf import settings
from django.db import connection
from django.db.models import Q
from django.utils import timezone

from studio.models import ImportJob, JobStatus

log = logging.getLogger(__name__)

# The sweep runs every STUDIO_JOB_STALE_S / 4 seconds; the files need looking at less often.
FILE_SWEEP_EVERY_S = 300.0
_last_sweep = 0.0


@dataclass
class FileSweep:
    """What one sweep removed."""

    uploads: int = 0
    upload_bytes: int = 0
    temp_files: int = 0
    temp_bytes: int = 0

    def __str__(self) -> str:
        return (
            f"removed {self.uploads} uploaded file(s) ({self.upload_bytes} bytes) and "
            f"{self.temp_files} leftover file(s) ({self.temp_bytes} bytes)"
        )


def retention() -> timedelta:
    return timedelta(days=settings.STUDIO_UPLOAD_RETENTION_DAYS)


def temp_max_age_s() -> float:
    """Age after which a leftover is surely dead: a few hours, and more than a job may run
    (an export writes its temporary file for at most STUDIO_JOB_HARD_LIMIT_S)."""
    return max(3 * 3600.0, settings.STUDIO_JOB_HARD_LIMIT_S + 600.0)


OWNER_FILE = ".database"


def uploads_root() -> Path:
    return Path(settings.MEDIA_ROOT) / "imports"


def database_identity() -> str:
    """The database this process uses, as the owner of the upload folders it makes (no
    password: the file is readable by whoever reads the uploads)."""
    s = connection.settings_dict
    name = str(s["NAME"])
    if connection.vendor == "sqlite":
        name = os.path.abspath(name)
    return f"{connection.vendor}:{s.get('HOST') or ''}:{s.get('PORT') or ''}:{name}"


def mark_owner(folder: Path) -> None:
    (folder / OWNER_FILE).write_text(database_identity())


def _owner(folder: Path) -> str | None:
    try:
        return (folder / OWNER_FILE).read_text()
    except OSError:
        return None


def _removable(now: datetime) -> Q:
    return Q(status=JobStatus.SUCCEEDED) | Q(
        status__in=[JobStatus.FAILED, JobStatus.CANCELLED], finished_at__lt=now - retention()
    )


def remove_upload(
    job_id: int, now: datetime | None = None, counts: FileSweep | None = None
) -> bool:
    """Remove a job's uploaded file if the policy says it has done its work; True if this call
    removed it (or found it already gone and recorded that)."""
    now = now or timezone.now()
    claimed = ImportJob.objects.filter(
        _removable(now), pk=job_id, upload_removed_at__isnull=True
    ).update(upload_removed_at=now)
    if not claimed:
        return False
    path = ImportJob.objects.values_list("stored_path", flat=True).get(pk=job_id)
    size = _delete_upload(Path(path)) if path else 0
    if counts is not None:
        counts.uploads += 1
        counts.upload_bytes += size
    return True


def _inside(path: Path, root: Path) -> bool:
    try:
        path.resolve().relative_to(root.resolve())
    except ValueError:
        return False
    return True


def _delete_upload(path: Path) -> int:
    """The file and its folder (each upload has a folder of its own); only inside the
    uploads folder, whatever the row says."""
    root = uploads_root()
    if not _inside(path, root):
        log.warning("not removing %s: it is outside %s", path, root)
        return 0
    size = _unlink(path)
    folder = path.parent
    if folder.resolve() != root.resolve() and path.name != OWNER_FILE:
        (folder / OWNER_FILE).unlink(missing_ok=True)
        try:
            folder.rmdir()  # only if empty
        except OSError:
            pass
    return size


def _unlink(path: Path) -> int:
    try:
        size = path.stat().st_size
        path.unlink()
    except FileNotFoundError:
        return 0
    except OSError:
        log.exception("could not remove %s", path)
        return 0
    return size


def _old(path: Path, cutoff: float) -> bool:
    try:
        return path.stat().st_mtime < cutoff
    except OSError:
        return False


def sweep_uploads(now: datetime, counts: FileSweep) -> None:
    rows = ImportJob.objects.filter(_removable(now), upload_removed_at__isnull=True)
    for pk in rows.values_list("pk", flat=True).iterator(chunk_size=500):
        remove_upload(pk, now, counts)


def _children(folder: Path) -> Iterator[Path]:
    try:
        yield from folder.iterdir()
    except OSError:  # missing, or not a folder
        return


def sweep_orphan_uploads(cutoff: float, counts: FileSweep, *, include_unmarked: bool) -> None:
    """This database's upload folders (imports/<project>/<hex>/) that no job row points into."""
    me = database_identity()
    for project_dir in _children(uploads_root()):
        for folder in _children(project_dir):
            if not folder.is_dir() or not _old(folder, cutoff):
                continue
            owner = _owner(folder)
            if owner != me and not (owner is None and include_unmarked):
                continue
            prefix = f"{folder}{os.sep}"
            if ImportJob.objects.filter(stored_path__startswith=prefix).exists():
                continue
            for path in _children(folder):
                if path.is_file():
                    size = _unlink(path)
                    if path.name != OWNER_FILE:
                        counts.temp_files += 1
                        counts.temp_bytes += size
            try:
                folder.rmdir()
            except OSError:
                pass
        try:
            project_dir.rmdir()  # only if empty
        except OSError:
            pass


def sweep_export_temp_files(cutoff: float, counts: FileSweep) -> None:
    """`.export-*`: an export writes under that name and renames the file once complete, so
    an old one is what a killed export left."""
    from studio.jobs.exports import export_folder

    for path in _children(export_folder()):
        if path.name.startswith(".export-") and path.is_file() and _old(path, cutoff):
            counts.temp_files += 1
            counts.temp_bytes += _unlink(path)


def sweep_pulse_folder(cutoff: float, counts: FileSweep) -> None:
    """A live job rewrites its pulse every tick; anything old there belongs to no live job."""
    for path in _children(Path(settings.DATA_DIR) / "pulse"):
        if path.is_file() and path.suffix in (".tmp", ".json", ".cancel") and _old(path, cutoff):
            counts.temp_files += 1
            counts.temp_bytes += _unlink(path)


def sweep_incoming(cutoff: float, counts: FileSweep) -> None:
    """FILE_UPLOAD_TEMP_DIR (uploads/incoming): an upload in flight is written there and
    renamed into place once whole (studio.services.import_jobs.store_upload), so an old file
    there is what a web process killed mid-upload left (its mtime moves while it is written)."""
    if not settings.FILE_UPLOAD_TEMP_DIR:
        return
    for path in _children(Path(settings.FILE_UPLOAD_TEMP_DIR)):
        if path.is_file() and _old(path, cutoff):
            counts.temp_files += 1
            counts.temp_bytes += _unlink(path)


def sweep_files(
    now: datetime | None = None, *, include_unmarked: bool = False, log_summary: bool = True
) -> FileSweep:
    """One sweep of everything above. `log_summary`: log what it removed (the workers'
    sweeps; `manage.py sweep_files` prints it once itself)."""
    now = now or timezone.now()
    cutoff = now.timestamp() - temp_max_age_s()
    counts = FileSweep()
    sweep_uploads(now, counts)
    sweep_orphan_uploads(cutoff, counts, include_unmarked=include_unmarked)
    sweep_export_temp_files(cutoff, counts)
    sweep_pulse_folder(cutoff, counts)
    sweep_incoming(cutoff, counts)
    if log_summary and (counts.uploads or counts.temp_files):
        log.info("file sweep: %s", counts)
    return counts


def sweep_files_if_due() -> FileSweep | None:
    """`sweep_files` at most every FILE_SWEEP_EVERY_S in this process (the job sweep runs
    far more often)."""
    global _last_sweep
    if time.monotonic() - _last_sweep < FILE_SWEEP_EVERY_S and _last_sweep:
        return None
    _last_sweep = time.monotonic()
    return sweep_files()
