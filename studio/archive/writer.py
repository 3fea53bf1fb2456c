"""Write a project archive: every archived model's rows of one project, read in one snapshot of
the database (workers may go on writing meanwhile), streamed into a gzip file that appears
under its name only once complete."""

from __future__ import annotations

import gzip
import hashlib
import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from io import BufferedIOBase
from pathlib import Path
from typing import Any, Protocol

from django.contrib.auth import get_user_model
from django.db import connection, transaction
from django.db.migrations.recorder import MigrationRecorder
from django.utils import timezone

from studio.archive import codec
from studio.archive.files import carried
from studio.archive.schema import Plan, plans
from studio.exports.files import default_file_mode
from studio.models import Project

ROW_CHUNK = 2000  # rows fetched at a time
FILE_CHUNK = 1 << 20  # bytes of a carried file a line
ID_CHUNK = 5000  # ids a query (SQLite's bound-parameter limit)


class Bar(Protocol):
    def update(self, n: int = 1) -> Any: ...
    def close(self) -> Any: ...


Progress = Callable[[str, int], Bar]


class _NoBar:
    def update(self, n: int = 1) -> None:
        pass

    def close(self) -> None:
        pass


def no_progress(label: str, total: int) -> Bar:
    return _NoBar()


@dataclass
class ExportResult:
    path: Path
    size: int = 0
    rows: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    users: int = 0
    files: int = 0
    file_bytes: int = 0


def studio_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("agentworld-studio")
    except PackageNotFoundError:
        return "unknown"


def applied_migrations() -> list[str]:
    """The studio app's migrations applied to this database, by name."""
    applied = MigrationRecorder(connection).applied_migrations()
    return sorted(name for app, name in applied if app == "studio")


@contextmanager
def snapshot() -> Iterator[None]:
    """Every read inside sees the database as it was at the first: PostgreSQL's repeatable
    read; on SQLite a deferred read transaction (WAL: writers go on, unseen; the studio's
    own `atomic` would take the write lock and stop them). Inside a caller's transaction,
    that transaction's view."""
    if connection.in_atomic_block:
        yield
        return
    if connection.vendor == "postgresql":
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            yield
        return
    if connection.vendor == "sqlite":
        connection.ensure_connection()
        with connection.cursor() as cursor:
            cursor.execute("BEGIN DEFERRED")
        try:
            yield
        finally:
            with connection.cursor() as cursor:
                cursor.execute("COMMIT")
        return
    with transaction.atomic():
        yield


def _rows(plan: Plan, project_id: int):
    return plan.model._default_manager.filter(**plan.owner_filter(project_id))


def _user_ids(project_id: int) -> set[int]:
    ids: set[int] = set()
    for plan in plans():
        for link in plan.links:
            if link.target == "user":
                found = _rows(plan, project_id).values_list(link.attname, flat=True).distinct()
                ids.update(i for i in found if i is not None)
    return ids


def export_project(
    project: Project,
    out: Path,
    *,
    with_files: bool = True,
    progress: Progress = no_progress,
) -> ExportResult:
    """Write `project` to `out` (a gzip'd JSON-lines archive, see `studio.archive.codec`)."""
    out = Path(out)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".partial", dir=out.parent)
    result = ExportResult(path=out)
    try:
        with os.fdopen(fd, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as gz:
            os.fchmod(raw.fileno(), default_file_mode())  # mkstemp's 0600, as a new file's
            with snapshot():
                _write(project, gz, result, with_files, progress)
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    result.size = out.stat().st_size
    return result


def _write(project: Project, out: BufferedIOBase, result: ExportResult, with_files: bool, progress):
    project_id = project.pk
    counts = {plan.label: _rows(plan, project_id).count() for plan in plans()}
    user_ids = sorted(_user_ids(project_id))
    header = {
        "archive": codec.FORMAT,
        "format_version": codec.FORMAT_VERSION,
        "studio_version": studio_version(),
        "migrations": applied_migrations(),
        "database": connection.vendor,
        "exported_at": timezone.now().isoformat(),
        "project": {"id": project_id, "name": project.name},
        "users": len(user_ids),
        "models": [
            {
                "model": plan.label,
                "fields": [f.attname for f in plan.fields],
                "count": counts[plan.label],
            }
            for plan in plans()
        ],
    }
    codec.write_line(out, header)
    User = get_user_model()
    for start in range(0, len(user_ids), ID_CHUNK):
        chunk = user_ids[start : start + ID_CHUNK]
        users = User._default_manager.filter(pk__in=chunk).order_by("pk")
        codec.write_line(
            out,
            {
                "users": [
                    list(u)
                    for u in users.values_list(
                        "pk", User.USERNAME_FIELD, "email", "first_name", "last_name"
                    )
                ]
            },
        )
    result.users = len(user_ids)
    files: list[tuple[str, str, int, Path]] = []
    for plan in plans():
        attnames = [f.attname for f in plan.fields]
        codec.write_line(
            out, {"model": plan.label, "fields": attnames, "count": counts[plan.label]}
        )
        bar = progress(plan.label, counts[plan.label])
        rows = _rows(plan, project_id).order_by("pk").values_list(*attnames)
        written = 0
        for row in rows.iterator(chunk_size=ROW_CHUNK):
            out.write(codec.dumps([codec.encode(v) for v in row]))
            written += 1
            if plan.files and with_files:
                values = dict(zip(attnames, row, strict=True))
                for attname in plan.files:
                    path = carried(plan.label, attname, values)
                    if path is not None:
                        files.append((plan.label, attname, row[0], path))
            if written % 500 == 0:
                bar.update(500)
        bar.update(written % 500)
        bar.close()
        if written != counts[plan.label]:  # a snapshot cannot change under us
            raise codec.ArchiveError(
                f"{plan.label}: counted {counts[plan.label]} rows, read {written}"
            )
        result.counts[plan.label] = written
        result.rows += written
    for label, attname, pk, path in files:
        result.file_bytes += _write_file(out, label, attname, pk, path)
        result.files += 1
    codec.write_line(out, {"end": codec.FORMAT, "rows": result.rows, "files": result.files})


def _write_file(out: BufferedIOBase, label: str, attname: str, pk: int, path: Path) -> int:
    import base64

    digest = hashlib.sha256()
    size = 0
    try:
        source = path.open("rb")
    except OSError as exc:
        raise codec.ArchiveError(f"cannot read {path} ({label} {pk}): {exc}") from exc
    with source:
        codec.write_line(
            out,
            {
                "file": label,
                "field": attname,
                "id": pk,
                "name": path.name,
                "size": path.stat().st_size,
            },
        )
        while chunk := source.read(FILE_CHUNK):
            digest.update(chunk)
            size += len(chunk)
            codec.write_line(out, ["chunk", base64.b64encode(chunk).decode()])
    codec.write_line(out, {"end_file": digest.hexdigest(), "size": size})
    return size
