"""Read a project archive into this database as a new project, all or nothing.

- Every row gets a new id; foreign keys and embedded ids are rewritten through the map of old
  to new ids. A key whose target is read later (a cycle such as Branch.job <-> SimulationJob.
  branch, or a branch's parent) is first written with its old value, which the database
  accepts because Django's foreign-key constraints are checked at commit, then fixed up once
  every row is in.
- Users are matched by username; one this installation lacks is created inactive with no
  usable password (an admin activates it and sets a password), and the result lists them.
  Staff and superuser rights never come from an archive.
- API keys of endpoints are moved as they are stored: encrypted. They can be read here only
  with the same key (STUDIO_ENCRYPTION_KEYS, or the same SECRET_KEY when that is unset); the
  result lists the endpoints whose key cannot be read, and their pages say to enter it again.
- API tokens keep working (only their hashes are stored), unless this database already has
  the same token (the same archive imported twice): that token is left out, with a warning.
- The project's name must be free here (or give another); a second import of the same
  archive under another name is a second, independent copy.
- This database must be migrated (every migration this installation has, applied), and the
  archive's migrations must all be known here (an older studio cannot read a newer
  archive); a field this installation added since takes its default.
- What the archive uncompresses to is counted as it is read, against STUDIO_ARCHIVE_MAX_MB
  in all and STUDIO_ARCHIVE_MAX_LINE_MB a line (a row, a chunk of a carried file), and a
  carried file may not grow past the size its line declares: a gzip bomb (a small file that
  uncompresses to gigabytes, or to one endless line) is refused naming the line, the part of
  the archive and the limit, and is never read into memory or onto disk whole.

Anything else wrong (a truncated file, a row pointing at a row the archive lacks, a value
the database refuses) stops the import with a message naming the archive line, and nothing
is written: the rows go in one transaction, and carried files written meanwhile are
removed. The steps are indexed for search by a worker right after the commit
(`studio.search.indexer`)."""

from __future__ import annotations

import base64
import gzip
import hashlib
import itertools
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from io import BufferedIOBase
from pathlib import Path
from typing import IO, Any, cast

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import (
    DEFAULT_DB_ALIAS,
    DatabaseError,
    IntegrityError,
    connection,
    connections,
    models,
    reset_queries,
    transaction,
)

from studio.archive import codec
from studio.archive.codec import ArchiveError
from studio.archive.embedded import EMBEDDED
from studio.archive.files import FILE_FIELDS, discard
from studio.archive.pkmap import PkMap
from studio.archive.schema import PROJECT, Plan, plans
from studio.archive.writer import Progress, applied_migrations, no_progress
from studio.importers.limits import MB, size_text
from studio.models import ModelEndpoint, Project
from studio.search.indexer import deferred_indexing

BATCH_ROWS = 1000
FIX_UP_ROWS = 250  # bulk_update builds a CASE expression per row and field: kept small
BATCH_BYTES = 4 << 20  # a batch of big rows (long observations) is cut sooner
# The settings that bound what an archive may uncompress to (studio/settings.py), named in errors.
MAX_ENV = "STUDIO_ARCHIVE_MAX_MB"
MAX_LINE_ENV = "STUDIO_ARCHIVE_MAX_LINE_MB"
# Models whose rows are left out, with a warning, when a unique value is already taken here.
SKIP_ON_CLASH = {"studio.apitoken": "the same token already exists in this database"}


@dataclass
class ImportResult:
    project: Project
    rows: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    users_matched: list[str] = field(default_factory=list)
    users_created: list[str] = field(default_factory=list)
    unreadable_keys: list[str] = field(default_factory=list)  # endpoints
    skipped: dict[str, int] = field(default_factory=dict)
    files: int = 0
    warnings: list[str] = field(default_factory=list)


class _Lines:
    """The archive's lines, parsed, with their numbers and the part of the archive they are
    in (`where`) for messages. The uncompressed bytes are counted as they are read: no line
    is read past STUDIO_ARCHIVE_MAX_LINE_MB, nor the archive past STUDIO_ARCHIVE_MAX_MB, so a
    gzip bomb stops at the limit instead of filling memory."""

    def __init__(self, handle: BufferedIOBase, name: str):
        self.handle = handle
        self.name = name
        self.number = 0
        self.pending: Any = None
        self.where = "the header"
        self.read_bytes = 0
        self.max_bytes = int(settings.STUDIO_ARCHIVE_MAX_BYTES)
        self.max_line_bytes = int(settings.STUDIO_ARCHIVE_MAX_LINE_BYTES)

    def __iter__(self) -> Iterator[Any]:
        return self

    def __next__(self) -> Any:
        if self.pending is not None:
            line, self.pending = self.pending, None
            return line
        room = self.max_bytes - self.read_bytes
        most = min(self.max_line_bytes, room)
        try:
            raw = self.handle.readline(most + 1)  # one byte more: a line past the limit shows
        except (EOFError, OSError, zlib.error) as exc:
            raise ArchiveError(
                f"{self.name}: unreadable after line {self.number} ({exc}): the file is "
                "truncated or not a project archive"
            ) from None
        if not raw:
            raise StopIteration
        self.read_bytes += len(raw)
        self.number += 1
        if len(raw) > most:
            raise self._too_big(most == self.max_line_bytes)
        try:
            return codec.loads(raw)
        except ValueError:
            raise self.error("not JSON") from None

    def push_back(self, line: Any) -> None:
        self.pending = line

    def error(self, message: str) -> ArchiveError:
        return ArchiveError(f"{self.name}, line {self.number}: {message}")

    def _too_big(self, line_limit: bool) -> ArchiveError:
        if line_limit:
            what = (
                f"the line is longer than {size_text(self.max_line_bytes)} uncompressed "
                f"(limit {MAX_LINE_ENV}={_mb(self.max_line_bytes)})"
            )
        else:
            what = (
                f"the archive uncompresses to more than {size_text(self.max_bytes)} "
                f"(limit {MAX_ENV}={_mb(self.max_bytes)})"
            )
        return self.error(
            f"{what}, in {self.where}: not an archive a studio wrote (a compressed file that "
            "expands without end), or raise the limit"
        )


def _mb(size: int) -> str:
    return f"{size / MB:g}"


def read_header(path: Path) -> dict[str, Any]:
    with gzip.open(path, "rb") as handle:
        return _header(_Lines(handle, str(path)))


def _header(lines: _Lines) -> dict[str, Any]:
    try:
        header = next(lines)
    except StopIteration:
        raise ArchiveError(f"{lines.name} is empty") from None
    if not isinstance(header, dict) or header.get("archive") != codec.FORMAT:
        raise lines.error(f"not a project archive (its first line names no {codec.FORMAT!r})")
    version = header.get("format_version")
    if version != codec.FORMAT_VERSION:
        raise lines.error(
            f"archive format version {version!r}; this studio reads version {codec.FORMAT_VERSION}"
        )
    lines.where = "the lines after the header"
    return header


def _check_migrated(name: str) -> None:
    """This database holds every migration this installation has (an empty database, or
    one migrated by an older release of this studio, would otherwise read as an archive from
    a newer studio: its migrations are missing here)."""
    from django.db.migrations.executor import MigrationExecutor

    executor = MigrationExecutor(connection)
    todo = executor.migration_plan(executor.loader.graph.leaf_nodes())
    if todo:
        names = [f"{migration.app_label}.{migration.name}" for migration, _backwards in todo]
        shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
        raise ArchiveError(
            f"this database is not migrated: it lacks the migration(s) {shown} (run "
            f"`python manage.py migrate`, then import {name} again)"
        )


def _check_schema(header: dict[str, Any], name: str) -> dict[str, list[models.Field | None]]:
    """Each archived model's fields, in the archive's order, as this installation's fields;
    fails on anything this installation cannot hold. The database is migrated
    (`_check_migrated`), so a migration of the archive's it lacks is one this studio does
    not know."""
    missing = sorted(set(header.get("migrations") or []) - set(applied_migrations()))
    if missing:
        raise ArchiveError(
            f"{name} was written by a newer studio: this database lacks the migrations "
            f"{', '.join(missing)}, which this installation does not know (upgrade it, then "
            "run `python manage.py migrate`)"
        )
    ours = {plan.label: plan for plan in plans()}
    layout: dict[str, list[models.Field | None]] = {}
    for entry in header.get("models") or []:
        label = entry["model"]
        plan = ours.get(label)
        if plan is None:
            raise ArchiveError(f"{name} holds {label}, a model this installation does not have")
        by_attname = {f.attname: f for f in plan.fields}
        unknown = [a for a in entry["fields"] if a not in by_attname]
        if unknown:
            raise ArchiveError(
                f"{name}: {label} has fields this installation does not: {', '.join(unknown)}"
            )
        for f in plan.fields[1:]:
            if f.attname not in entry["fields"] and not (f.has_default() or f.null):
                raise ArchiveError(
                    f"{name}: {label}.{f.attname} is not in the archive and has no default"
                )
        layout[label] = [by_attname[a] for a in entry["fields"]]
    return layout


@contextmanager
def _stored_timestamps() -> Iterator[None]:
    """auto_now / auto_now_add would stamp every row with the time of the import; the rows
    keep the times they have in the archive."""
    changed: list[tuple[models.DateField, bool, bool]] = []
    for plan in plans():
        for f in plan.fields:
            if isinstance(f, models.DateField) and (f.auto_now or f.auto_now_add):
                changed.append((f, f.auto_now, f.auto_now_add))
                f.auto_now = f.auto_now_add = False
    try:
        yield
    finally:
        for f, now, add in changed:
            f.auto_now, f.auto_now_add = now, add


def import_archive(
    path: Path,
    *,
    name: str | None = None,
    id_map: IO[bytes] | None = None,
    progress: Progress = no_progress,
) -> ImportResult:
    """Import the archive at `path` as a new project (named `name`, or as in the archive).
    `id_map`: where to write each model's old and new ids (JSON lines)."""
    path = Path(path)
    written_files: list[Path] = []
    try:
        with gzip.open(path, "rb") as handle:
            lines = _Lines(handle, str(path))
            header = _header(lines)
            _check_migrated(str(path))
            layout = _check_schema(header, str(path))
            project_name = name or header["project"]["name"]
            if Project.objects.filter(name=project_name).exists():
                raise ArchiveError(
                    f"a project named {project_name!r} already exists here; import the archive "
                    "under another name with --name NEW_NAME"
                )
            # its steps are indexed for search by a worker once this commits
            with deferred_indexing(), _stored_timestamps():
                run = _Import(lines, header, layout, project_name, id_map, progress)
                run.written_files = written_files
                result = run.read()
    except BaseException:
        for made in written_files:
            discard(made)
        raise
    return result


class _Import:
    def __init__(self, lines: _Lines, header, layout, project_name: str, id_map, progress):
        self.lines = lines
        self.header = header
        self.layout = layout
        self.project_name = project_name
        self.id_map = id_map
        self.progress = progress
        self.maps: dict[str, PkMap] = {}
        self.users: dict[int, int] = {}  # old user id -> this database's
        self.done: set[str] = set()
        self.deferred: dict[str, set[str]] = {}  # model -> attnames to fix up after
        self.written_files: list[Path] = []
        self.result: ImportResult | None = None
        self.skipped: dict[str, int] = {}
        self.users_matched: list[str] = []
        self.users_created: list[str] = []

    # ---- the sections -------------------------------------------------------------------

    def read(self) -> ImportResult:
        ended = None
        for line in self.lines:
            if isinstance(line, dict) and "users" in line:
                self.lines.where = "the users"
                self._users(line["users"])
            elif isinstance(line, dict) and "model" in line:
                self._model(line)
            elif isinstance(line, dict) and "file" in line:
                self._file(line)
            elif isinstance(line, dict) and "end" in line:
                ended = line
                break
            else:
                raise self.lines.error("a line out of place (a row outside its model's section)")
        if ended is None:
            raise self.lines.error("the archive ends early: it is truncated (no end line)")
        if self.result is None:
            raise self.lines.error("the archive holds no project")
        self._fix_up()
        self._check_counts(ended)
        self._check_keys()
        return self.result

    def _users(self, rows: list[list[Any]]) -> None:
        User = get_user_model()
        wanted = {row[1]: row for row in rows}
        found = dict(
            User._default_manager.filter(
                **{f"{User.USERNAME_FIELD}__in": list(wanted)}
            ).values_list(User.USERNAME_FIELD, "pk")
        )
        for username, (old_id, _name, email, first, last) in wanted.items():
            if username in found:
                self.users[old_id] = found[username]
                self.users_matched.append(username)
                continue
            user = User(
                **{User.USERNAME_FIELD: username},
                email=email or "",
                first_name=first or "",
                last_name=last or "",
                is_active=False,
            )
            user.set_unusable_password()
            user.save()
            self.users[old_id] = user.pk
            self.users_created.append(username)

    def _model(self, section: dict[str, Any]) -> None:
        label = section["model"]
        self.lines.where = f"the {label} rows"
        if label not in self.layout:
            raise self.lines.error(f"{label}: a section the header does not list")
        plan = next(p for p in plans() if p.label == label)
        fields = self.layout[label]
        if [f.attname if f else None for f in fields] != section["fields"]:
            raise self.lines.error(f"{label}: its fields differ from the header's")
        bar = self.progress(label, int(section.get("count") or 0))
        pkmap = self.maps.setdefault(label, PkMap())
        # keys into models not read yet (this one included: a branch's parent): fixed up after
        late_links = {
            link.attname
            for link in plan.links
            if link.target != "user" and link.target not in self.done
        }
        late_embedded = {
            attname
            for attname in plan.embedded
            if any(t not in self.done for t in EMBEDDED[(label, attname)].targets)
        }
        self.deferred[label] = late_links | late_embedded
        batch: list[models.Model] = []
        olds: list[int] = []
        size = 0
        for line in self.lines:
            if not isinstance(line, list):
                self.lines.push_back(line)
                break
            if len(line) != len(fields):
                raise self.lines.error(
                    f"{label}: a row of {len(line)} values where the section has {len(fields)}"
                )
            obj, old = self._row(plan, fields, line, late_links, late_embedded)
            if obj is None:
                continue
            batch.append(obj)
            olds.append(old)
            size += sum(len(v) for v in line if isinstance(v, str))
            if len(batch) >= BATCH_ROWS or size >= BATCH_BYTES:
                self._insert(plan, batch, olds, pkmap, bar)
                batch, olds, size = [], [], 0
        self._insert(plan, batch, olds, pkmap, bar)
        bar.close()
        self.done.add(label)

    def _row(self, plan: Plan, fields, line, late_links: set[str], late_embedded: set[str]):
        label = plan.label
        values: dict[str, Any] = {}
        for f, raw in zip(fields, line, strict=True):
            assert f is not None
            try:
                values[f.attname] = codec.decode(raw, f)
            except Exception as exc:  # noqa: BLE001 - a field's own parse errors vary
                raise self.lines.error(
                    f"{label}.{f.attname}: {raw!r} is not valid ({exc})"
                ) from None
        old = values.pop(plan.fields[0].attname)
        if not isinstance(old, int):
            raise self.lines.error(f"{label}: the row's id {old!r} is not a whole number")
        for link in plan.links:
            value = values.get(link.attname)
            if value is None or link.attname in late_links:
                continue
            if link.target == "user":
                new = self.users.get(value)
                if new is None:
                    raise self.lines.error(
                        f"{label} {old}: user {value} is not among the archive's users"
                    )
            else:
                new = self.maps[link.target].get(value) if link.target in self.maps else None
                if new is None:
                    new = self._missing(label, old, link.attname, link.target, value, link.nullable)
            values[link.attname] = new
        for attname in plan.embedded:
            if attname not in late_embedded and attname in values:
                spec = EMBEDDED[(label, attname)]
                if spec.applies(values):
                    values[attname] = spec.remap(values[attname], self._lookup)
        for attname in plan.files:
            values[attname] = ""  # set when the file is read (`_file`), if carried
        if label == PROJECT:
            values["name"] = self.project_name
        if label in SKIP_ON_CLASH and self._clashes(plan, values):
            self.skipped[label] = self.skipped.get(label, 0) + 1
            return None, old
        for f in plan.fields[1:]:
            if f.attname not in values:
                values[f.attname] = f.get_default()
        return plan.model(**values), old

    def _missing(self, label, old, attname, target, value, nullable) -> int | None:
        if not nullable:
            raise self.lines.error(
                f"{label} {old}: {attname} {value} names a {target} row the archive does not hold"
            )
        assert self.result is not None
        self.result.warnings.append(
            f"{label} {old}: {attname} {value} names a {target} row the archive does not hold; "
            "it is left empty"
        )
        return None

    def _lookup(self, label: str, old: Any) -> int | None:
        pkmap = self.maps.get(label)
        return pkmap.get(old) if pkmap is not None and isinstance(old, int) else None

    def _clashes(self, plan: Plan, values: dict[str, Any]) -> bool:
        for f in plan.fields[1:]:
            if f.unique and values.get(f.attname) is not None:
                if plan.model._default_manager.filter(**{f.attname: values[f.attname]}).exists():
                    return True
        return False

    def _insert(self, plan: Plan, batch, olds: list[int], pkmap: PkMap, bar) -> None:
        if not batch:
            return
        try:
            with transaction.atomic():  # a savepoint: the error names the batch
                if connection.vendor == "postgresql":
                    made = _copy_rows(plan, batch)
                else:
                    made = plan.model._default_manager.bulk_create(batch)
        except (IntegrityError, DatabaseError) as exc:
            raise self.lines.error(
                f"{plan.label}: the database refused the rows with archive ids "
                f"{olds[0]}-{olds[-1]}: {exc}"
            ) from None
        for old, obj in zip(olds, made, strict=True):
            pkmap.add(old, obj.pk)
        if self.id_map is not None:
            self.id_map.write(
                codec.dumps({"model": plan.label, "old": olds, "new": [o.pk for o in made]})
            )
        if plan.label == PROJECT:
            self.result = ImportResult(
                project=cast(Project, made[0]),
                users_matched=sorted(self.users_matched),
                users_created=sorted(self.users_created),
            )
        assert self.result is not None
        self.result.counts[plan.label] = self.result.counts.get(plan.label, 0) + len(made)
        self.result.rows += len(made)
        bar.update(len(made))
        reset_queries()  # with DEBUG on, Django would keep every batch's SQL until the end

    # ---- after every row is in ------------------------------------------------------------

    def _fix_up(self) -> None:
        """Keys and embedded ids whose targets were written after their rows."""
        for plan in plans():
            attnames = sorted(self.deferred.get(plan.label) or ())
            pkmap = self.maps.get(plan.label)
            if not attnames or pkmap is None or not len(pkmap):
                continue
            links = {link.attname: link for link in plan.links}
            reads = sorted(
                {
                    r
                    for a in attnames
                    if (plan.label, a) in EMBEDDED
                    for r in EMBEDDED[(plan.label, a)].reads
                }
                - set(attnames)
            )
            bar = self.progress(f"{plan.label} (links)", len(pkmap))
            ids = pkmap.new_ids()
            while chunk := list(itertools.islice(ids, FIX_UP_ROWS)):
                rows = plan.model._default_manager.filter(pk__in=chunk).values_list(
                    "pk", *attnames, *reads
                )
                changed = []
                for pk, *values in rows:
                    row = dict(zip([*attnames, *reads], values, strict=True))
                    obj = plan.model(pk=pk)
                    before = [row[a] for a in attnames]
                    for attname in attnames:
                        value = row[attname]
                        if attname in links:
                            link = links[attname]
                            if value is not None:
                                new = self._lookup(link.target, value)
                                if new is None:
                                    new = self._missing(
                                        plan.label, pk, attname, link.target, value, link.nullable
                                    )
                                value = new
                        else:
                            spec = EMBEDDED[(plan.label, attname)]
                            if spec.applies(row):
                                value = spec.remap(value, self._lookup)
                        setattr(obj, attname, value)
                    if [getattr(obj, a) for a in attnames] != before:
                        changed.append(obj)
                if changed:
                    plan.model._default_manager.bulk_update(changed, attnames)
                bar.update(len(chunk))
                reset_queries()
            bar.close()

    def _file(self, line: dict[str, Any]) -> None:
        label, attname, old = line["file"], line["field"], line["id"]
        where = FILE_FIELDS.get((label, attname))
        new = self._lookup(label, old)
        if where is None or new is None:
            raise self.lines.error(f"a file for {label} {old}, which this archive has no row for")
        assert self.result is not None
        declared = line.get("size")
        if not isinstance(declared, int) or declared < 0:
            raise self.lines.error(f"the file of {label} {old} has no size")
        self.lines.where = f"the carried file {line.get('name')!r} of {label} {old}"
        path = where(self.result.project.pk, str(line.get("name") or "file"))
        self.written_files.append(path)
        digest = hashlib.sha256()
        size = 0
        with path.open("wb") as out:
            for chunk in self.lines:
                if isinstance(chunk, list) and chunk[:1] == ["chunk"]:
                    try:
                        data = base64.b64decode(chunk[1], validate=True)
                    except (IndexError, TypeError, ValueError):  # binascii.Error: a ValueError
                        raise self.lines.error(f"the file of {label} {old} is damaged") from None
                    size += len(data)
                    if size > declared:  # stopped here, not at the end of a longer file
                        raise self.lines.error(
                            f"the file of {label} {old} is longer than the {declared:,} bytes "
                            "its line declares: the archive is damaged"
                        )
                    digest.update(data)
                    out.write(data)
                    continue
                if isinstance(chunk, dict) and "end_file" in chunk:
                    if chunk["end_file"] != digest.hexdigest() or size != declared:
                        raise self.lines.error(f"the file of {label} {old} is damaged")
                    break
                raise self.lines.error(f"the file of {label} {old} ends early")
            else:
                raise self.lines.error(f"the file of {label} {old} ends early")
        model = next(p.model for p in plans() if p.label == label)
        model._default_manager.filter(pk=new).update(**{attname: str(path)})
        self.result.files += 1

    def _check_counts(self, ended: dict[str, Any]) -> None:
        assert self.result is not None
        for entry in self.header.get("models") or []:
            label, expected = entry["model"], int(entry.get("count") or 0)
            got = self.result.counts.get(label, 0) + self.skipped.get(label, 0)
            if got != expected:
                raise self.lines.error(f"{label}: the header says {expected} rows, found {got}")
        if ended.get("rows") != sum(self.result.counts.values()) + sum(self.skipped.values()):
            raise self.lines.error("the row total of the end line does not match the rows read")
        for label, n in self.skipped.items():
            self.result.skipped[label] = n
            self.result.warnings.append(f"{n} {label} row(s) left out: {SKIP_ON_CLASH[label]}")

    def _check_keys(self) -> None:
        """Endpoints whose stored API key this installation cannot decrypt."""
        from studio.secrets import SecretError, decrypt

        assert self.result is not None
        rows = ModelEndpoint.objects.filter(project=self.result.project).exclude(
            api_key_encrypted=""
        )
        for name, token in rows.values_list("name", "api_key_encrypted"):
            try:
                decrypt(token)
            except SecretError:
                self.result.unreadable_keys.append(name)
        from studio.services.endpoint_hosts import refusal

        # kept as they were (the archive is the project's record), but said now: each is
        # refused when it is first used, as any endpoint outside the allowlist is
        endpoints = ModelEndpoint.objects.filter(project=self.result.project)
        for name, base_url in endpoints.exclude(base_url="").values_list("name", "base_url"):
            why = refusal(base_url)  # (an in-process or retrieval model has no URL)
            if why is not None:
                self.result.warnings.append(
                    f"the model endpoint {name!r} will not be used until its URL is allowed: {why}"
                )


def _copy_rows(plan: Plan, batch: list[models.Model]) -> list[models.Model]:
    """PostgreSQL: the rows' ids taken from the table's sequence, then the rows sent with COPY,
    several times the rows per second of an INSERT. Values go through each field's
    get_db_prep_save, as bulk_create sends them."""
    model = plan.model
    table = model._meta.db_table
    quote = connection.ops.quote_name
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT nextval(pg_get_serial_sequence(%s, %s)) FROM generate_series(1, %s)",
            [quote(table), plan.fields[0].column, len(batch)],
        )
        for obj, (pk,) in zip(batch, cursor.fetchall(), strict=True):
            obj.pk = pk
        columns = ", ".join(quote(str(f.column)) for f in plan.fields)
        real = connections[DEFAULT_DB_ALIAS]  # not the proxy: a lookup per value adds up
        prepared = [(f.attname, f.get_db_prep_save) for f in plan.fields]
        with cursor.cursor.copy(f"COPY {quote(table)} ({columns}) FROM STDIN") as copy:
            for obj in batch:
                copy.write_row([prep(getattr(obj, a), real) for a, prep in prepared])
    return batch


__all__ = ["ArchiveError", "ImportResult", "import_archive", "read_header"]
