"""Import a trajectory file into a project: detect, parse, then write in one transaction.

The parse phase reports progress 0..0.5, the write phase 0.5..1. Nothing of a file is
written unless all of it parses and writes. Each trajectory gets `source_key`, a sha256 of a
canonical form of its content, so importing the same file twice adds nothing.

Limits (studio.importers.limits, set in settings from the environment) are checked before
and while parsing; the JSON fields kept as they are (trajectory metadata and tools, step
meta and timings) are then checked against the depth and size limits, an error naming the
record and the field. A format forced by the caller that the file does not match fails
naming the format.

Text that no database can store is replaced before that key is made: NUL characters
(terminal output of binary files; PostgreSQL text and jsonb refuse them) become U+2400 "␀"
and lone halves of surrogate pairs (left by a JSON `\\ud800` escape; not UTF-8) U+FFFD.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import Field, Value
from django.db.models.functions import JSONArray

from studio.importers.base import (
    ImportFailure,
    LimitExceeded,
    ParsedStep,
    ParsedTrajectory,
    Where,
)
from studio.importers.limits import Limits, kept_field_problem
from studio.importers.registry import (
    detect,
    domain_from_path,
    get_importer,
    list_formats,
    load_source,
)
from studio.models import DOMAINS, Branch, BranchOrigin, Step, Tag, Trajectory

__all__ = [
    "ImportFailure",
    "ImportResult",
    "LimitExceeded",
    "do_import_file",
    "list_formats",
    "source_key",
]

STEP_BATCH = 1000
# Steps go in with COPY on PostgreSQL; the benchmark turns it off to compare with INSERTs.
USE_POSTGRES_COPY = True


UNSTORABLE = re.compile(r"[\x00\ud800-\udfff]")


@dataclass(frozen=True)
class ImportResult:
    trajectories_created: int
    steps_created: int
    trajectories_skipped: int
    detected_format: str


def source_key(parsed: ParsedTrajectory) -> str:
    """sha256 of the trajectory's content (not its domain or the file it came from). The
    recorded path only: explored alternatives (ToolBench) do not count, so a file imported
    before the importer kept them is still known when imported again."""
    canonical = {
        "title": parsed.title,
        "task_instruction": parsed.task_instruction,
        "system_prompt": parsed.system_prompt,
        "tools": parsed.tools,
        "metadata": parsed.metadata,
        "tags": sorted(parsed.tags),
        "steps": [_step_key(s) for s in parsed.steps],
    }
    text = json.dumps(canonical, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def _step_key(s: ParsedStep) -> list:
    return [s.action, s.observation, s.state, s.thinking, s.raw_prompt, s.meta]


def _storable(value):
    """`value` (text or JSON) with NUL characters and lone surrogates replaced."""
    if isinstance(value, str):
        if UNSTORABLE.search(value) is None:
            return value
        return UNSTORABLE.sub(lambda m: "\u2400" if m.group() == "\x00" else "\ufffd", value)
    if isinstance(value, list):
        return [_storable(v) for v in value]
    if isinstance(value, dict):
        return {_storable(k): _storable(v) for k, v in value.items()}
    return value


def _make_storable(item: ParsedTrajectory) -> None:
    objects: list[ParsedTrajectory | ParsedStep] = [
        item,
        *item.steps,
        *(s for b in item.branches for s in b.steps),
    ]
    for obj in objects:
        for f in dataclasses.fields(obj):
            if f.name not in ("steps", "branches"):
                setattr(obj, f.name, _storable(getattr(obj, f.name)))
    for b in item.branches:
        b.name = _storable(b.name)


def import_limits() -> Limits:
    """The importer's limits as the settings (the environment) give them."""
    return Limits(
        max_depth=settings.STUDIO_IMPORT_MAX_DEPTH,
        max_file_bytes=settings.STUDIO_IMPORT_MAX_FILE_BYTES,
        max_line_bytes=settings.STUDIO_IMPORT_MAX_LINE_BYTES,
        max_field_bytes=settings.STUDIO_IMPORT_MAX_FIELD_BYTES,
    )


def _check_kept_fields(item: ParsedTrajectory, name: str, limits: Limits) -> None:
    """The JSON fields stored as they are must be within the depth and size limits: a
    deeper one would overflow the stack of every walk after this (and of the database's
    JSON parser), a larger one makes every page that shows it slow."""
    where = item.where or Where(name)
    for field_name in ("metadata", "tools"):
        problem = kept_field_problem(getattr(item, field_name), limits)
        if problem:
            raise LimitExceeded(str(where.fail(field_name, problem)))
    runs = [("", 0, item.steps)]
    runs += [(f'branch "{b.name}", ', b.fork_index, b.steps) for b in item.branches]
    for label, start, steps in runs:
        for offset, step in enumerate(steps):
            for field_name in ("meta", "timings"):
                problem = kept_field_problem(getattr(step, field_name), limits)
                if problem:
                    raise LimitExceeded(
                        where.problem(
                            f'{label}step {start + offset + 1}: field "{field_name}" {problem}'
                        )
                    )


def _parse(importer, source, forced: bool) -> list[ParsedTrajectory]:
    """All trajectories of the file. A format the caller chose is named in its errors: what
    the message says is missing is missing for that format."""
    try:
        return list(importer.parse(source))
    except LimitExceeded:
        raise  # about the file's size or shape, whatever its format
    except ImportFailure as exc:
        if forced:
            raise ImportFailure(f"{exc} (read as {importer.NAME}, the format chosen)") from None
        raise
    except RecursionError:  # a recursive walk of an importer on data within the depth limit
        raise LimitExceeded(
            f"{source.name}: nested too deeply to import ({source.limits.depth_note()})"
        ) from None


def _scaled(progress: Callable[[float], None] | None, start: float, span: float):
    if progress is None:
        return None
    return lambda fraction: progress(start + span * fraction)


def do_import_file(
    *,
    project,
    path,
    fmt: str | None = None,
    domain: str | None = None,
    user=None,
    display_name: str | None = None,
    progress: Callable[[float], None] | None = None,
) -> ImportResult:
    path = Path(path)
    name = display_name or path.name
    if domain and domain not in DOMAINS:
        raise ImportFailure(f'unknown domain "{domain}" (known: {", ".join(DOMAINS)})')
    if not path.is_file():
        raise ImportFailure(f"{name}: no such file")
    importer = get_importer(fmt) if fmt else None
    limits = import_limits()
    try:
        source = load_source(path, name, _scaled(progress, 0.0, 0.5), limits)
        if importer is None:
            importer = detect(source)
        parsed = _parse(importer, source, forced=bool(fmt))
    except OSError as exc:  # unreadable (permissions, a folder, a disk error)
        raise ImportFailure(f"{name}: cannot be read ({exc.strerror or exc})") from None
    for item in parsed:
        _check_kept_fields(item, name, limits)
    if progress:
        progress(0.5)
    # forced domain > what the content says > the folder (generic formats only) > format default
    fallback = importer.DOMAIN
    if getattr(importer, "PATH_DECIDES_DOMAIN", False):
        fallback = domain_from_path(Path(display_name) if display_name else path) or fallback
    for item in parsed:
        _make_storable(item)
        if item.domain_problem and not domain:
            raise ImportFailure(item.domain_problem)
        item.domain = domain or item.domain or fallback
        _known_domain(item, name)
    try:
        created, steps, skipped = _write(
            project, parsed, importer.NAME, name, user, _scaled(progress, 0.5, 0.5)
        )
    except IntegrityError:
        # The same content was imported concurrently (unique source_key): once that commit
        # is visible, a second pass skips what it wrote.
        created, steps, skipped = _write(project, parsed, importer.NAME, name, user, None)
    if progress:
        progress(1.0)
    return ImportResult(created, steps, skipped, importer.NAME)


def _known_domain(item: ParsedTrajectory, name: str) -> str:
    """The trajectory's domain, once it is set and one the studio knows."""
    if item.domain is None or item.domain not in DOMAINS:
        raise ImportFailure(f'{name}: "{item.title}" has unknown domain "{item.domain}"')
    return item.domain


def _existing_keys(project, keys: list[str]) -> set[str]:
    found: set[str] = set()
    for start in range(0, len(keys), 5000):  # stay under SQLite's bound-parameter limit
        chunk = keys[start : start + 5000]
        found.update(
            Trajectory.objects.filter(project=project, source_key__in=chunk).values_list(
                "source_key", flat=True
            )
        )
    return found


@transaction.atomic
def _write(project, parsed: list[ParsedTrajectory], fmt: str, name: str, user, progress):
    keyed: dict[str, ParsedTrajectory] = {}
    for item in parsed:
        keyed.setdefault(source_key(item), item)
    existing = _existing_keys(project, list(keyed))
    new = [(key, item) for key, item in keyed.items() if key not in existing]
    skipped = len(parsed) - len(new)
    if not new:
        return 0, 0, skipped
    trajectories = Trajectory.objects.bulk_create(
        [
            Trajectory(
                project=project,
                domain=_known_domain(item, name),
                title=item.title[:500] or "(untitled)",
                task_instruction=item.task_instruction,
                system_prompt=item.system_prompt,
                tools=item.tools,
                source_format=fmt,
                source_file=name[:500],
                source_key=key,
                metadata=item.metadata,
                step_count=len(item.steps),
                created_by=user,
            )
            for key, item in new
        ]
    )
    branches = Branch.objects.bulk_create(
        [
            Branch(
                trajectory=t,
                parent=None,
                fork_index=0,
                name="recorded",
                origin=BranchOrigin.RECORDED,
                created_by=user,
            )
            for t in trajectories
        ]
    )
    # bulk_create skips Branch.save(), which fills the lineage of a root: [[own id, 0]].
    # One set-based UPDATE per chunk: bulk_update would send a CASE WHEN per branch.
    ids = [branch.pk for branch in branches]
    for start in range(0, len(ids), 5000):  # SQLite's bound-parameter limit
        Branch.objects.filter(pk__in=ids[start : start + 5000]).update(
            lineage=JSONArray(JSONArray("pk", Value(0)))
        )
    for branch in branches:
        branch.lineage = [[branch.pk, 0]]
    _write_tags(project, trajectories, [item for _key, item in new])
    owned = [(branch, 0, item.steps) for branch, (_key, item) in zip(branches, new, strict=True)]
    for trajectory, root, (_key, item) in zip(trajectories, branches, new, strict=True):
        owned += _write_alternatives(trajectory, root, item, user)
    total = sum(len(steps) for _b, _start, steps in owned)
    written = 0
    batch: list[Step] = []
    for branch, start, steps in owned:
        for offset, s in enumerate(steps):
            batch.append(
                Step(
                    branch=branch,
                    index=start + offset,
                    action=s.action,
                    observation=s.observation,
                    state=s.state,
                    thinking=s.thinking,
                    raw_prompt=s.raw_prompt,
                    meta=s.meta,
                    timings=s.timings,
                )
            )
            if len(batch) >= STEP_BATCH:
                written += _flush(batch, total, written, progress)
    written += _flush(batch, total, written, progress)
    return len(new), written, skipped


def _write_alternatives(trajectory: Trajectory, root: Branch, item: ParsedTrajectory, user):
    """The recorded alternatives as child branches (parents before children), each with the
    steps it owns: [(branch, first index, steps)]."""
    made = [root]
    owned = []
    for alt in item.branches:
        parent = made[alt.parent]
        branch = Branch.objects.create(
            trajectory=trajectory,
            parent=parent,
            fork_index=alt.fork_index,
            lineage=[*parent.lineage],
            name=alt.name[:200],
            origin=BranchOrigin.RECORDED,
            created_by=user,
        )
        branch.lineage = [*parent.lineage, [branch.pk, alt.fork_index]]
        Branch.objects.filter(pk=branch.pk).update(lineage=branch.lineage)
        made.append(branch)
        owned.append((branch, alt.fork_index, alt.steps))
    return owned


def _flush(batch: list[Step], total: int, written: int, progress) -> int:
    count = len(batch)
    if count:
        if USE_POSTGRES_COPY and connection.vendor == "postgresql":
            _copy_steps(batch)
        else:
            Step.objects.bulk_create(batch)
        batch.clear()
        if progress:
            progress((written + count) / max(total, 1))
    return count


def _column(field: Field) -> str:
    # Concrete fields always have a column; the stubs allow None for the others.
    if field.column is None:
        raise TypeError(f"Step.{field.name} has no database column")
    return field.column


def _copy_steps(batch: list[Step]) -> None:
    """PostgreSQL COPY: about ten times the rows per second of a multi-row INSERT for
    steps with kilobytes of text (see scripts/bench_import.py). Values go through the
    fields' own pre_save/get_db_prep_save, as bulk_create would."""
    fields = [f for f in Step._meta.concrete_fields if not f.primary_key]
    columns = ", ".join(connection.ops.quote_name(_column(f)) for f in fields)
    table = connection.ops.quote_name(Step._meta.db_table)
    with connection.cursor() as cursor:
        with cursor.cursor.copy(f"COPY {table} ({columns}) FROM STDIN") as copy:
            for step in batch:
                copy.write_row(
                    [f.get_db_prep_save(f.pre_save(step, True), connection) for f in fields]
                )


def _write_tags(project, trajectories: Iterable[Trajectory], items: list[ParsedTrajectory]):
    names = sorted({tag for item in items for tag in item.tags})
    if not names:
        return
    Tag.objects.bulk_create(
        [Tag(project=project, name=n[:100]) for n in names], ignore_conflicts=True
    )
    tags = {t.name: t for t in Tag.objects.filter(project=project, name__in=names)}
    through = Trajectory.tags.through
    through.objects.bulk_create(
        [
            through(trajectory_id=t.pk, tag_id=tags[n[:100]].pk)
            for t, item in zip(trajectories, items, strict=True)
            for n in dict.fromkeys(item.tags)
        ]
    )
