"""Which job messages the broker still holds: lets the sweeper tell a job that waits in a
long queue from one whose message was lost (Redis restarted without persistence, a failed
send, a purged queue, a worker killed with the message in hand on the embedded broker).
Knows the transports the studio runs on (Redis, the embedded SQLite broker, kombu's
filesystem transport); for any other it cannot tell, and says so with None.

It is given the Celery app (the sweeper passes its worker's): this module never imports
`studio.celery`, which starts the sweeper (no import cycle)."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable
from typing import Any

log = logging.getLogger(__name__)


def _message_id(payload: Any) -> str | None:
    if isinstance(payload, bytes | str):
        try:
            payload = json.loads(payload)
        except ValueError:
            return None
    if not isinstance(payload, dict):
        return None
    headers = payload.get("headers") or {}
    properties = payload.get("properties") or {}
    found = headers.get("id") or properties.get("correlation_id")
    return str(found) if found else None


def message_ids_held(
    queues: Iterable[str], app: Any = None, *, waiting_only: bool = False
) -> set[str] | None:
    """Ids of the task messages waiting in `queues` or, on Redis, delivered and not yet
    acknowledged; None when the transport cannot be asked. `app`: the Celery app (default:
    the current one, the studio's wherever `studio` was imported). `waiting_only`: the
    waiting ones alone, on every transport (Redis keeps the unacknowledged messages of all
    queues together, a killed worker's among them until their visibility timeout: the
    search indexer, a message of no job, asks only what waits in its queue).

    On the embedded SQLite broker only waiting messages count: a delivered one is hidden
    until acknowledged, and the hidden rows of a killed worker look the same as those of a
    live one. A queued job whose message is hidden is about to run (a worker takes a message
    only when a process is free, or holds it until its countdown) or was taken by a killed
    worker: sent again after STUDIO_JOB_STALE_S, and a duplicate is harmless (the claim)."""
    if app is None:
        from celery import current_app

        app = current_app
    queues = list(queues)
    try:
        from studio.jobs.sqlite_broker import held_message_payloads

        with app.connection_for_read() as conn:
            channel = conn.default_channel
            transport = conn.transport_cls if isinstance(conn.transport_cls, str) else ""
            if hasattr(channel, "_q_for_pri") and hasattr(channel, "unacked_key"):
                return _redis_ids(channel, queues, waiting_only)
            payloads = held_message_payloads(channel, queues)
            if payloads is not None:
                return {mid for mid in map(_message_id, payloads) if mid}
            if hasattr(channel, "data_folder_in"):
                return _filesystem_ids(channel, queues)
            log.debug("cannot list messages of transport %s", transport or type(channel))
            return None
    except Exception:  # a broker that is down cannot say; the next sweep asks again
        log.warning("could not list the broker's messages", exc_info=True)
        return None


def _redis_ids(channel: Any, queues: list[str], waiting_only: bool = False) -> set[str]:
    client = channel.client
    found: set[str] = set()
    for queue in queues:
        keys = {channel._q_for_pri(queue, pri) for pri in channel.priority_steps}
        for key in keys:
            for item in client.lrange(key, 0, -1):
                mid = _message_id(item)
                if mid:
                    found.add(mid)
    if waiting_only:
        return found
    for raw in client.hvals(channel.unacked_key):
        try:
            message = json.loads(raw)[0]
        except (ValueError, IndexError, TypeError):
            continue
        mid = _message_id(message)
        if mid:
            found.add(mid)
    return found


def _filesystem_ids(channel: Any, queues: list[str]) -> set[str]:
    folder = channel.data_folder_in
    wanted = {f"{q}.msg" for q in queues}
    found: set[str] = set()
    for name in os.listdir(folder):
        if name.partition(".")[2] not in wanted:
            continue
        try:
            with open(os.path.join(folder, name), "rb") as f:
                mid = _message_id(f.read())
        except OSError:  # taken by a worker meanwhile
            continue
        if mid:
            found.add(mid)
    return found
