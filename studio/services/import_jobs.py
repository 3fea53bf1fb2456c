"""Imports of uploaded files as background jobs, web side: store the upload and create the
ImportJob. The caller enqueues it (`studio.tasks.enqueue_import`); the worker runs it
(`studio.jobs.imports`)."""

from __future__ import annotations

import re
import uuid
from pathlib import Path

from django.conf import settings

from studio.models import ImportJob

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
    return ImportJob.objects.create(
        project=project,
        requester=user if getattr(user, "pk", None) else None,
        original_name=Path(uploaded.name).name[:500],
        stored_path=str(path),
        size_bytes=uploaded.size or path.stat().st_size,
        format=fmt or "",
        domain=domain or "",
    )
