"""Files that rows point to by path: the archive carries them (a finished export's file, an
upload still kept for Retry), and the import writes each one where this installation keeps
such files and points the new row at it. A path whose file is not carried (gone from storage,
or `--without-files`) becomes empty: a path into the other installation's data folder means
nothing here, and this installation's file sweep must never act on it."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from django.conf import settings


def _upload_folder(project_id: int, name: str) -> Path:
    from studio.jobs.file_retention import mark_owner
    from studio.services.import_jobs import safe_filename

    folder = Path(settings.MEDIA_ROOT) / "imports" / str(project_id) / uuid.uuid4().hex
    folder.mkdir(parents=True, exist_ok=True)
    mark_owner(folder)
    return folder / safe_filename(name)


def _export_file(project_id: int, name: str) -> Path:
    from studio.jobs.exports import export_folder

    folder = export_folder()
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"{uuid.uuid4().hex[:12]}-{Path(name).name}"


# (model, attname) -> where a carried file goes: f(new project id, file name) -> path
FILE_FIELDS: dict[tuple[str, str], Callable[[int, str], Path]] = {
    ("studio.importjob", "stored_path"): _upload_folder,
    ("studio.exportjob", "stored_path"): _export_file,
}


def carried(label: str, attname: str, row: dict[str, Any]) -> Path | None:
    """The file a row's path names, if the archive should carry it."""
    value = row.get(attname)
    if not value:
        return None
    if label == "studio.importjob" and row.get("upload_removed_at") is not None:
        return None  # removed by the retention sweep: nothing to carry
    path = Path(value)
    return path if path.is_file() else None


def discard(path: Path) -> None:
    """Remove a file an import wrote before it failed, and the upload folder made for it."""
    from studio.jobs.file_retention import OWNER_FILE

    path.unlink(missing_ok=True)
    marker = path.parent / OWNER_FILE
    if marker.exists() and [p.name for p in path.parent.iterdir()] == [OWNER_FILE]:
        marker.unlink()
        path.parent.rmdir()
