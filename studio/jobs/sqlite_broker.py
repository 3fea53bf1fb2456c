"""The embedded broker of `scripts/dev.sh` when no Redis runs: kombu's SQLAlchemy transport
over one SQLite file in the data dir, made fit for a server and two workers sharing it for
hours.

Why not kombu's filesystem transport any more: a worker could read a message file while the
sender was still writing it (celery/kombu#1551) and die on the half-written JSON; under
dev.sh that happened after about fifteen simulations, and every later job waited for ever.
A row is committed whole or not at all, so a worker never sees half a message.

What this subclass changes in kombu's transport (`kombu.transport.sqlalchemy`):

- `polling_interval` and our own options are taken out of the transport options before the
  rest goes to `create_engine` (kombu passes them all on, and SQLAlchemy refuses unknown
  ones), so an idle worker looks for messages every `polling_interval` s, not every second;
- every connection is opened for one use and closed (NullPool) with WAL and a busy timeout:
  no SQLite handle is ever shared by two processes (prefork forks pool processes, which
  send messages too), and a reader never waits behind a writer;
- a message's row is deleted when it is acknowledged or rejected (kombu only hides it:
  the table would grow by a row a job, for ever), and a hidden row left by a worker that was
  killed (its messages were delivered, never acknowledged) is deleted once it is older than
  `orphaned_after_s`, the longest a job may run.

Delivery semantics (acks_late, reject_on_worker_lost): a delivered message is hidden, never
delivered again while its task runs, however long (there is no visibility timeout to
outlast); a worker that shuts down cleanly puts its unacknowledged messages back; one that is
killed loses them, and the sweeper sends the job again once the broker no longer holds its
message (`studio.jobs.broker.message_ids_held` lists the visible rows)."""

from __future__ import annotations

import datetime
import logging
import threading
from json import loads
from queue import Empty
from typing import Any

from kombu.transport import sqlalchemy as kombu_sqla
from kombu.utils.encoding import bytes_to_str
from sqlalchemy import create_engine, delete, event, text
from sqlalchemy.pool import NullPool

log = logging.getLogger(__name__)

# Options of ours (and kombu's virtual transport's) that must not reach create_engine.
OWN_OPTIONS = ("polling_interval", "orphaned_after_s", "busy_timeout_s")


def _tune_sqlite(dbapi_connection: Any, busy_timeout_s: float) -> None:
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute(f"PRAGMA busy_timeout={int(busy_timeout_s * 1000)}")
    finally:
        cursor.close()


class Channel(kombu_sqla.Channel):
    def __init__(self, connection: Any, **kwargs: Any) -> None:
        # delivery tag -> the row of a message delivered on this channel and not yet settled
        self._rows: dict[str, int] = {}
        self._rows_lock = threading.Lock()
        super().__init__(connection, **kwargs)

    def _engine_from_config(self) -> Any:
        options = dict(self.connection.client.transport_options)
        busy_timeout_s = float(options.get("busy_timeout_s") or 30)
        for name in (
            *OWN_OPTIONS,
            "queue_tablename",
            "message_tablename",
            "callback",
            "errback",
            "max_retries",
            "interval_start",
            "interval_step",
            "interval_max",
            "retry_errors",
        ):
            options.pop(name, None)
        options.setdefault("poolclass", NullPool)
        engine = create_engine(self.connection.client.hostname, **options)
        if engine.dialect.name == "sqlite":
            event.listen(
                engine, "connect", lambda conn, _record: _tune_sqlite(conn, busy_timeout_s)
            )
        return engine

    def _open(self) -> Any:
        created = self.connection.client.hostname not in self._engines
        try:
            opened = super()._open()
        except Exception as exc:  # noqa: BLE001 - only the one race below is retried
            # workers started together (dev.sh starts three) race to create the broker's
            # tables: the loser's CREATE fails with "already exists"; the tables are there
            if "already exists" not in str(exc):
                raise
            opened = super()._open()
        if created:
            self._delete_orphans(opened[0])
        return opened

    def _get(self, queue: Any, timeout: Any = None) -> Any:
        """kombu's `_get`, remembering the row of the message it hands out."""
        obj = self._get_or_create(queue)
        if self.session.bind.name == "sqlite":
            self.session.execute(text("BEGIN IMMEDIATE TRANSACTION"))
        try:
            msg = (
                self.session.query(self.message_cls)
                .with_for_update()
                .filter(self.message_cls.queue_id == obj.id)
                .filter(self.message_cls.visible != False)  # noqa: E712 - SQL, not Python
                .order_by(self.message_cls.sent_at)
                .order_by(self.message_cls.id)
                .limit(1)
                .first()
            )
            if msg is None:
                raise Empty()
            msg.visible = False
            payload = loads(bytes_to_str(msg.payload))
            tag = (payload.get("properties") or {}).get("delivery_tag")
            if tag:
                with self._rows_lock:
                    self._rows[str(tag)] = msg.id
            return payload
        finally:
            self.session.commit()

    def basic_ack(self, delivery_tag: Any, multiple: bool = False) -> None:
        super().basic_ack(delivery_tag, multiple)
        self._forget(delivery_tag)

    def basic_reject(self, delivery_tag: Any, requeue: bool = False) -> None:
        super().basic_reject(delivery_tag, requeue)  # requeue: `_restore` put a new row
        self._forget(delivery_tag)

    def _restore(self, message: Any) -> None:
        super()._restore(message)  # a new visible row with the same payload
        self._forget(message.delivery_tag)

    def _forget(self, delivery_tag: Any) -> None:
        """Delete the hidden row of a settled message. Through a connection of its own, not
        the channel's session: a threads pool acknowledges from its threads while the
        consumer's thread polls with the session."""
        with self._rows_lock:
            row = self._rows.pop(str(delivery_tag), None)
        if row is None:
            return
        engine, _ = self._open()
        table = self.message_cls.__table__
        try:
            with engine.begin() as conn:
                conn.execute(delete(table).where(table.c.id == row))
        except Exception:  # a left row is deleted as an orphan later; never fail an ack
            log.warning("could not delete the settled broker message %s", row, exc_info=True)

    def _delete_orphans(self, engine: Any) -> None:
        """Hidden rows older than the longest job: their worker was killed before it settled
        them, and nobody will (a live worker's job cannot have run that long)."""
        options = self.connection.client.transport_options
        age = float(options.get("orphaned_after_s") or 0)
        if age <= 0:
            return
        table = self.message_cls.__table__
        # kombu stamps a row with the local time (datetime.now) when it hides it
        cutoff = datetime.datetime.now() - datetime.timedelta(seconds=age)
        try:
            with engine.begin() as conn:
                gone = conn.execute(
                    delete(table).where(table.c.visible == False, table.c.timestamp < cutoff)  # noqa: E712
                ).rowcount
            if gone:
                log.warning("deleted %d broker message(s) of workers that were killed", gone)
        except Exception:  # the next worker start tries again
            log.warning("could not delete orphaned broker messages", exc_info=True)


class Transport(kombu_sqla.Transport):
    Channel = Channel


def held_message_payloads(channel: Any, queues: list[str]) -> list[Any] | None:
    """The payloads of the messages waiting (visible) in `queues`, for the sweeper; None when
    `channel` is not one of this transport's."""
    if not isinstance(channel, kombu_sqla.Channel):
        return None
    found: list[Any] = []
    session = channel.session
    try:
        for queue in queues:
            rows = (
                channel._query_all(queue)
                .filter(channel.message_cls.visible == True)  # noqa: E712
                .with_entities(channel.message_cls.payload)
            )
            found += [row[0] for row in rows]
    finally:
        session.commit()
    return found
