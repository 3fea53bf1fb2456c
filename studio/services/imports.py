"""Import a trajectory file into a project: detect, then parse and write in one transaction.

The import streams: the importer yields one trajectory at a time (a JSONL file is read line
by line; AgentWorldBench reads it twice, see its module) and trajectories are written in
batches of at most STEP_BATCH steps, TRAJECTORY_BATCH trajectories or BATCH_BYTES of text as
they come, so memory follows the largest trajectories (the one written and the next, read
before it), not the file. Progress is how much of the file was read (0..1), moved on through
each batch as its steps are written (`_Progress`), and 1.0 after the commit.
Nothing of a file is written unless all of it parses and writes: every batch goes in the one
transaction, and a bad record anywhere (the first one met fails the import, its message
naming file, line or record and field) rolls back what the batches before it wrote. Each
trajectory gets `source_key`, a sha256 of a canonical form of its content, so importing the
same file twice adds nothing.

The steps are written unindexed for search and indexed by a worker right after the commit
(`studio.search.indexer.deferred_indexing`): indexing them as they are written made an import
several times slower.

Text fields the model bounds (a trajectory's title, a recorded branch's name, a tag) are
refused when longer, never cut: the message names file, record, field and limit.

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
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, nullcontext
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
    shorten,
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
from studio.search.indexer import deferred_indexing

__all__ = [
    "ImportFailure",
    "ImportResult",
    "LimitExceeded",
    "do_import_file",
    "list_formats",
    "source_key",
]

STEP_BATCH = 1000
TRAJECTORY_BATCH = 500
# Text of the steps waiting to be written: with 100 KB observations 1,000 steps would hold
# a few hundred MB (the text, the SQL or COPY rows made of it, Django's query log).
BATCH_BYTES = 16 * 1024 * 1024
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
    # The bytes of json.dumps({"title": ..., "steps": [...], ...}, sort_keys=True,
    # ensure_ascii=False, separators=(",", ":")), hashed a part at a time so a trajectory of
    # many long steps is never one string (keys in sorted order; the same key as before).
    digest = hashlib.sha256()

    def put(text: str) -> None:
        digest.update(text.encode())

    put('{"metadata":' + _canonical(parsed.metadata) + ',"steps":[')
    for i, step in enumerate(parsed.steps):
        put(("," if i else "") + _canonical(_step_key(step)))
    put('],"system_prompt":' + _canonical(parsed.system_prompt))
    put(',"tags":' + _canonical(sorted(parsed.tags)))
    put(',"task_instruction":' + _canonical(parsed.task_instruction))
    put(',"title":' + _canonical(parsed.title))
    put(',"tools":' + _canonical(parsed.tools) + "}")
    return digest.hexdigest()


def _canonical(value) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


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


def _parsed(importer, source, forced: bool) -> Iterator[ParsedTrajectory]:
    """The file's trajectories, one at a time. A format the caller chose is named in its
    errors: what the message says is missing is missing for that format."""
    items = iter(importer.parse(source))
    while True:
        try:
            item = next(items)
        except StopIteration:
            return
        except LimitExceeded:
            raise  # about the file's size or shape, whatever its format
        except ImportFailure as exc:
            if forced:
                raise ImportFailure(f"{exc} (read as {importer.NAME}, the format chosen)") from None
            raise
        except RecursionError:  # a recursive walk of an importer on data within the limit
            raise LimitExceeded(
                f"{source.name}: nested too deeply to import ({source.limits.depth_note()})"
            ) from None
        except OSError as exc:  # unreadable while it streams (a disk error, removed)
            raise ImportFailure(f"{source.name}: cannot be read ({exc.strerror or exc})") from None
        yield item


class _Progress:
    """What the job shows: the share of the file read (AgentWorldBench: its first pass is
    0..0.5), and while a batch is written, a point moving from where it stood to where the
    reading has got to, by the batch's steps written. Without the second, a file of one long
    trajectory stood at 0% until all of it was written: it is read (and reported) only after
    it is handed over. Never goes back. Every batch written reports again: the job's report is
    where a cancel is noticed (studio.jobs.imports). 1.0 comes again after the commit."""

    def __init__(self, progress: Callable[[float], None] | None):
        self.progress = progress
        self.at = 0.0  # the share of the file read
        self.shown = 0.0
        self.held = False
        self.batch: tuple[float, float, int] | None = None  # (from, to, steps) while writing
        self.written = 0

    def read(self, fraction: float) -> None:
        self.at = fraction
        if not self.held:
            self.shown = max(self.shown, fraction)
        self.again()

    @contextmanager
    def hold(self) -> Iterator[None]:
        """Reading meanwhile moves nothing shown: it is the end of the batch about to be
        written, which the write then moves to step by step."""
        self.held = True
        try:
            yield
        finally:
            self.held = False

    @contextmanager
    def writing(self, steps: int) -> Iterator[None]:
        self.batch, self.written = (self.shown, max(self.shown, self.at), max(steps, 1)), 0
        try:
            yield
        finally:
            self.batch = None
            self.shown = max(self.shown, self.at)

    def wrote(self, steps: int) -> None:
        if self.batch is not None:
            start, end, total = self.batch
            self.written += steps
            self.shown = max(self.shown, start + (end - start) * min(self.written / total, 1.0))
        self.again()

    def again(self) -> None:
        if self.progress is not None:
            self.progress(self.shown)


def do_import_file(
    *,
    project,
    path,
    fmt: str | None = None,
    domain: str | None = None,
    user=None,
    display_name: str | None = None,
    progress: Callable[[float], None] | None = None,
    defer_search_index: bool = True,
) -> ImportResult:
    """Import the file at `path` into `project` (see the module). Its steps are indexed for
    search right after the commit, by a worker (`studio.search.indexer`): until then they
    are not found. `defer_search_index=False` indexes them as they are written (several
    times slower: for small files that must be found the moment this returns)."""
    path = Path(path)
    name = display_name or path.name
    if domain and domain not in DOMAINS:
        raise ImportFailure(f'unknown domain "{domain}" (known: {", ".join(DOMAINS)})')
    if not path.is_file():
        raise ImportFailure(f"{name}: no such file")
    importer = get_importer(fmt) if fmt else None
    limits = import_limits()
    report = _Progress(progress)
    try:
        source = load_source(path, name, report.read, limits)
        if importer is None:
            importer = detect(source)
    except OSError as exc:  # unreadable (permissions, a folder, a disk error)
        raise ImportFailure(f"{name}: cannot be read ({exc.strerror or exc})") from None
    # forced domain > what the content says > the folder (generic formats only) > format default
    fallback = importer.DOMAIN
    if getattr(importer, "PATH_DECIDES_DOMAIN", False):
        fallback = domain_from_path(Path(display_name) if display_name else path) or fallback

    def items() -> Iterator[ParsedTrajectory]:
        for item in _parsed(importer, source, forced=bool(fmt)):
            _check_kept_fields(item, name, limits)
            _make_storable(item)
            if item.domain_problem and not domain:
                raise ImportFailure(item.domain_problem)
            item.domain = domain or item.domain or fallback
            _known_domain(item, name)
            _check_lengths(item, name)
            yield item

    indexing = deferred_indexing if defer_search_index else nullcontext
    try:
        with indexing():
            created, steps, skipped = _write(project, items(), importer.NAME, name, user, report)
    except IntegrityError:
        # The same content was imported concurrently (unique source_key): once that commit
        # is visible, a second pass over the file skips what it wrote.
        with indexing():
            created, steps, skipped = _write(project, items(), importer.NAME, name, user, report)
    if progress:
        progress(1.0)
    return ImportResult(created, steps, skipped, importer.NAME)


def _known_domain(item: ParsedTrajectory, name: str) -> str:
    """The trajectory's domain, once it is set and one the studio knows."""
    if item.domain is None or item.domain not in DOMAINS:
        raise ImportFailure(f'{name}: "{item.title}" has unknown domain "{item.domain}"')
    return item.domain


def _max_length(model, field_name: str) -> int:
    length = model._meta.get_field(field_name).max_length
    if length is None:
        raise TypeError(f"{model.__name__}.{field_name} has no max_length")
    return length


def _check_lengths(item: ParsedTrajectory, name: str) -> None:
    """Text the database bounds is refused when longer, never cut: what is imported is what
    the file says, or nothing."""
    where = item.where or Where(name)

    def refuse(field_name: str, value: str, limit: int, label: str) -> None:
        raise where.fail(
            field_name,
            f"is {len(value):,} characters, more than the {limit:,} {label} may hold "
            f'("{shorten(value, 40)}"; refused, not cut)',
        )

    limit = _max_length(Trajectory, "title")
    if len(item.title) > limit:
        refuse("title", item.title, limit, "a trajectory's title")
    limit = _max_length(Tag, "name")
    for tag in item.tags:
        if len(tag) > limit:
            refuse("tags", tag, limit, "a tag")
    limit = _max_length(Branch, "name")
    for branch in item.branches:
        if len(branch.name) > limit:
            refuse("branches", branch.name, limit, "a branch's name")


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


def _step_bytes(step: ParsedStep) -> int:
    """About what a step weighs while it waits to be written (its text; its meta's strings,
    AgentWorldBench keeps the whole response there)."""
    size = len(step.action) + len(step.observation) + len(step.state) + len(step.thinking)
    size += len(step.raw_prompt)
    return size + sum(len(v) for v in step.meta.values() if isinstance(v, str))


@transaction.atomic
def _write(
    project, items: Iterable[ParsedTrajectory], fmt: str, name: str, user, report: _Progress
) -> tuple[int, int, int]:
    """Write the trajectories as they come, in bounded batches, in one transaction."""
    seen: set[bytes] = set()  # keys of this file so far: a repeated trajectory is skipped
    pending: list[tuple[str, ParsedTrajectory]] = []
    pending_steps = pending_bytes = 0
    created = written = skipped = 0
    upcoming = iter(items)
    item = next(upcoming, None)
    while item is not None:
        key = source_key(item)
        digest = bytes.fromhex(key)  # half the memory of the text, for files of many
        if digest in seen:
            skipped += 1
        else:
            seen.add(digest)
            pending.append((key, item))
            for steps in (item.steps, *(b.steps for b in item.branches)):
                pending_steps += len(steps)
                pending_bytes += sum(_step_bytes(s) for s in steps)
        # The next item is read before the batch waiting is written: the reading then stands
        # where the batch ends, the point its write moves the progress to.
        with report.hold() if pending else nullcontext():
            item = next(upcoming, None)
        if (
            pending_steps >= STEP_BATCH
            or pending_bytes >= BATCH_BYTES
            or len(pending) >= TRAJECTORY_BATCH
        ):
            with report.writing(pending_steps):
                made, steps_made, known = _write_batch(project, pending, fmt, name, user, report)
            created, written, skipped = created + made, written + steps_made, skipped + known
            pending, pending_steps, pending_bytes = [], 0, 0
    with report.writing(pending_steps):
        made, steps_made, known = _write_batch(project, pending, fmt, name, user, report)
    return created + made, written + steps_made, skipped + known


def _write_batch(project, batch: list[tuple[str, ParsedTrajectory]], fmt, name, user, report):
    """One batch of trajectories: those already in the project skipped, the others written
    with their branches, tags and steps (steps STEP_BATCH at a time)."""
    if not batch:
        return 0, 0, 0
    existing = _existing_keys(project, [key for key, _item in batch])
    new = [(key, item) for key, item in batch if key not in existing]
    skipped = len(batch) - len(new)
    if not new:
        return 0, 0, skipped
    trajectories = Trajectory.objects.bulk_create(
        [
            Trajectory(
                project=project,
                domain=_known_domain(item, name),
                title=item.title or "(untitled)",
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
    written = 0
    rows: list[Step] = []
    size = 0
    for branch, start, steps in owned:
        for offset, s in enumerate(steps):
            rows.append(
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
            size += _step_bytes(s)
            if len(rows) >= STEP_BATCH or size >= BATCH_BYTES:
                written += _flush(rows, report)
                size = 0
    written += _flush(rows, report)
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


def _flush(batch: list[Step], report: _Progress) -> int:
    count = len(batch)
    if count:
        if USE_POSTGRES_COPY and connection.vendor == "postgresql":
            _copy_steps(batch)
        else:
            Step.objects.bulk_create(batch)
        batch.clear()
        _forget_queries()
        report.wrote(count)
    return count


def _forget_queries() -> None:
    """With DEBUG on, Django keeps the SQL of the last 9,000 queries, parameters written in:
    a batch of steps is megabytes of it, so an import would keep its whole text. Not while
    queries are being captured (assertNumQueries, CaptureQueriesContext): those read it."""
    if settings.DEBUG and not connection.force_debug_cursor:
        connection.queries_log.clear()


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
