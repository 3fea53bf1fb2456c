"""Imports are indexed for search right after they commit; every other write as it is
written (migration 0026).

Keeping the search index current in the write path costs an import several times its time
(a step's tsvector and GIN entries on PostgreSQL, ~440 µs against the ~100 µs of writing it;
FTS5 on SQLite, ~100 µs): `scripts/bench_search.py`. So an import writes its steps unindexed
inside `deferred_indexing()`, and once it commits a worker indexes them
(`index_pending`, the task `studio.index_search`, sent on commit). Until then they are not
found, and the search pages say so (`unindexed_count`). A lost message leaves nothing
unsearchable for long: the workers' sweeper sends one when unindexed steps made no progress
between two sweeps and none waits in the queue (`sweep_unindexed`).

- PostgreSQL: `SET LOCAL studio.defer_search_index = 'on'` makes the trigger of
  `studio_step` leave `search_vector` NULL; a partial index finds those steps, and the
  indexer fills them in batches, `FOR UPDATE SKIP LOCKED` (two indexers share the work).
- SQLite: a row in `studio_search_deferral` (inserted and deleted in the import's
  transaction, so no other connection ever sees it) sends new steps' ids to
  `studio_step_unindexed` instead of FTS5; the indexer moves them into FTS5 in batches,
  each one write transaction (SQLite has one writer: two indexers take turns).
- Other databases have no index: nothing to do."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from django.db import connection, transaction

from studio.search.backends import FTS_TABLE, INDEXED_CHARS
from studio.search.text import SQLITE_FUNCTION

log = logging.getLogger(__name__)

DEFER_SETTING = "studio.defer_search_index"
UNINDEXED_TABLE = "studio_step_unindexed"
DEFERRAL_TABLE = "studio_search_deferral"

INDEX_TASK = "studio.index_search"  # registered by studio.tasks
# the indexer's messages carry ids with this prefix: the sweeper tells them in the queue
MESSAGE_PREFIX = "search-index-"
BATCH = 2000
# a message indexes for this long, then sends the next one (the rest of a big import)
BUDGET_S = 60.0
# how far the pages count the steps still waiting ("more than 10,000")
COUNT_LIMIT = 10_000

# The benchmark (scripts/bench_search.py) turns the message off and runs the indexer itself.
SEND_ON_COMMIT = True


def _vendor() -> str:
    return connection.vendor


# ---- writing unindexed ------------------------------------------------------------------


@contextmanager
def deferred_indexing() -> Iterator[None]:
    """A write transaction (opened here, or a savepoint of the caller's) whose new steps are
    not indexed as they are written; once it commits, a worker indexes them (the message is
    sent on commit). For imports: a step written by anything else is indexed at once, so
    that what a person just made is found."""
    vendor = _vendor()
    with transaction.atomic():
        undo = _defer(vendor)
        yield
        undo()
        if SEND_ON_COMMIT and vendor in ("postgresql", "sqlite"):
            transaction.on_commit(send_indexing, robust=True)


def _defer(vendor: str):
    """Start deferring in this transaction; returns what stops it (before the commit: the
    rest of a caller's transaction indexes as usual)."""
    with connection.cursor() as cursor:
        if vendor == "postgresql":
            cursor.execute("SELECT current_setting(%s, true)", [DEFER_SETTING])
            before = cursor.fetchone()[0] or "off"
            cursor.execute("SELECT set_config(%s, 'on', true)", [DEFER_SETTING])

            def undo() -> None:
                with connection.cursor() as c:
                    c.execute("SELECT set_config(%s, %s, true)", [DEFER_SETTING, before])

            return undo
        if vendor == "sqlite":
            cursor.execute(f"INSERT INTO {DEFERRAL_TABLE} DEFAULT VALUES")
            row_id = cursor.lastrowid

            def undo() -> None:
                with connection.cursor() as c:
                    c.execute(f"DELETE FROM {DEFERRAL_TABLE} WHERE id = %s", [row_id])

            return undo
    return lambda: None


# ---- indexing ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Indexed:
    steps: int  # steps indexed by this call
    seconds: float
    more: bool  # stopped by its time budget with steps left to index


def index_pending(batch: int = BATCH, budget_s: float | None = None) -> Indexed:
    """Index the steps written unindexed, oldest first, `batch` a transaction, until none is
    left or `budget_s` seconds have passed. Idempotent; safe with two at once (PostgreSQL:
    each takes rows the other has not locked; SQLite: their transactions take turns)."""
    vendor = _vendor()
    started = time.monotonic()
    done = 0
    if vendor not in ("postgresql", "sqlite"):
        return Indexed(0, 0.0, False)
    while True:
        with transaction.atomic():
            count = _index_batch(vendor, batch)
        done += count
        if count == 0:
            return Indexed(done, time.monotonic() - started, False)
        if budget_s is not None and time.monotonic() - started >= budget_s:
            return Indexed(done, time.monotonic() - started, has_unindexed())


PG_INDEX_BATCH = (
    "UPDATE studio_step SET search_vector = studio_step_search_vector(action, observation) "
    "WHERE id IN (SELECT id FROM studio_step WHERE search_vector IS NULL ORDER BY id LIMIT %s "
    "FOR UPDATE SKIP LOCKED)"
)
_SQLITE_FIRST = f"SELECT step_id FROM {UNINDEXED_TABLE} ORDER BY step_id LIMIT %s"
# in one write transaction, each with the batch size as its parameter (the write comes
# first: the transaction holds the write lock before it reads); the count is the second's
SQLITE_INDEX_BATCH = (
    f"INSERT INTO {FTS_TABLE}(rowid, action, observation) SELECT s.id, "
    f"{SQLITE_FUNCTION}(substr(s.action, 1, {INDEXED_CHARS})), "
    f"{SQLITE_FUNCTION}(substr(s.observation, 1, {INDEXED_CHARS})) "
    f"FROM ({_SQLITE_FIRST}) u JOIN studio_step s ON s.id = u.step_id",
    f"DELETE FROM {UNINDEXED_TABLE} WHERE step_id IN ({_SQLITE_FIRST})",
)


def _index_batch(vendor: str, batch: int) -> int:
    with connection.cursor() as cursor:
        if vendor == "postgresql":
            cursor.execute(PG_INDEX_BATCH, [batch])
            return cursor.rowcount
        for sql in SQLITE_INDEX_BATCH:
            cursor.execute(sql, [batch])
        return cursor.rowcount


def has_unindexed() -> bool:
    return oldest_unindexed() is not None


def oldest_unindexed() -> int | None:
    """The id of the oldest step waiting to be indexed (None: none waits)."""
    vendor = _vendor()
    if vendor == "postgresql":
        sql = "SELECT min(id) FROM studio_step WHERE search_vector IS NULL"
    elif vendor == "sqlite":
        sql = f"SELECT min(step_id) FROM {UNINDEXED_TABLE}"
    else:
        return None
    with connection.cursor() as cursor:
        cursor.execute(sql)
        row = cursor.fetchone()
    return row[0] if row else None


def unindexed_count(project_ids: list[int], limit: int = COUNT_LIMIT) -> int:
    """How many steps of `project_ids` wait to be indexed, counted up to `limit` + 1 (more
    than `limit`: there are more)."""
    ids = sorted({int(p) for p in project_ids})
    vendor = _vendor()
    if not ids or vendor not in ("postgresql", "sqlite"):
        return 0
    marks = ", ".join(["%s"] * len(ids))
    if vendor == "postgresql":
        source, waiting = "studio_step s", "s.search_vector IS NULL"
    else:
        source = f"{UNINDEXED_TABLE} u JOIN studio_step s ON s.id = u.step_id"
        waiting = "1=1"
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT COUNT(*) FROM (SELECT 1 FROM {source} "
            "JOIN studio_branch b ON b.id = s.branch_id "
            "JOIN studio_trajectory t ON t.id = b.trajectory_id "
            f"WHERE {waiting} AND t.project_id IN ({marks}) LIMIT %s) AS waiting",
            [*ids, limit + 1],
        )
        return int(cursor.fetchone()[0])


@dataclass(frozen=True)
class Waiting:
    """Steps of a project not searchable yet, for the search pages."""

    count: int  # up to COUNT_LIMIT + 1
    indexing: bool  # a worker consumes the queue that indexes them
    queue: str = ""
    start: str = ""  # the command that starts a worker for it, when none does

    @property
    def count_label(self) -> str:
        if self.count > COUNT_LIMIT:
            return f"More than {COUNT_LIMIT:,}"
        return f"{self.count:,}"


def waiting_for(project_ids: list[int]) -> Waiting | None:
    """The project's steps not searchable yet and whether a worker is there to index them;
    None when every step is indexed."""
    count = unindexed_count(project_ids)
    if not count:
        return None
    from studio.queues import queue_name
    from studio.services.workers import queue_consumers, start_command

    queue = queue_name("default")
    if queue_consumers(queue):
        return Waiting(count, True)
    return Waiting(count, False, queue, start_command(queue))


# ---- messages ---------------------------------------------------------------------------


def send_indexing(app: Any = None) -> bool:
    """Send the indexer's message (the default queue). False when the broker could not take
    it: the sweeper sends one later."""
    if app is None:
        from celery import current_app  # the studio's app, never imported from here

        app = current_app
    from studio.queues import queue_name

    try:
        app.send_task(
            INDEX_TASK, queue=queue_name("default"), task_id=f"{MESSAGE_PREFIX}{uuid.uuid4().hex}"
        )
    except Exception:  # the broker is down: the sweeper sends it once it is back
        log.exception("could not send the search indexer's message")
        return False
    return True


def run_indexing(budget_s: float = BUDGET_S, batch: int | None = None) -> Indexed:
    """The task's body: index for `budget_s`, then hand what is left to a new message."""
    done = index_pending(batch or BATCH, budget_s)
    if done.steps:
        log.info("indexed %d step(s) for search in %.1f s", done.steps, done.seconds)
    if done.more:
        send_indexing()
    return done


# the oldest unindexed step the last sweep of this process saw
_last_seen: dict[str, int | None] = {"oldest": None}


def sweep_unindexed(app: Any = None) -> bool:
    """The sweeper's part: send the indexer's message when steps wait, the oldest of them
    is the one the last sweep saw (no indexer made progress since) and no indexer message
    waits in the queue (its message was lost, the broker was down when the import
    committed, or the worker running it was killed). A message delivered and not yet
    running (a worker busy with a long job holds it) does not count: one more is then sent,
    and waits. A duplicate costs nothing: two indexers share the work."""
    oldest = oldest_unindexed()
    previous, _last_seen["oldest"] = _last_seen["oldest"], oldest
    if oldest is None or oldest != previous:
        return False
    from studio.jobs.broker import message_ids_held
    from studio.queues import queue_name

    held = message_ids_held([queue_name("default")], app, waiting_only=True)
    if held is not None and any(m.startswith(MESSAGE_PREFIX) for m in held):
        return False  # waiting its turn
    log.warning("steps wait to be indexed for search and no indexer runs: sending one")
    return send_indexing(app)
