"""The archive's lines and values. One JSON value a line, gzip'd:

    {"archive": FORMAT, "format_version": 1, ...header...}
    {"users": [[old id, username, email, first name, last name], ...]}   (in chunks)
    {"model": "studio.step", "fields": [...], "count": N}   then N lines: [value, ...]
    {"file": "studio.importjob", "field": "stored_path", "id": old id, "name": ..., "size": n}
        then ["chunk", base64] lines and {"end_file": sha256}
    {"end": FORMAT, "rows": total}   (the archive is complete)

Values are the database's as JSON: text, numbers and JSON fields as they are (floats
round-trip exactly), timestamps in ISO 8601 with their offset and microseconds, dates and
times in ISO 8601, decimals and UUIDs as text, bytes as {"$bytes": base64}; a float that JSON
cannot hold (NaN, infinities) as {"$float": "nan"}. Every other type is read back through
its field's `to_python`."""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
import math
import uuid
from io import BufferedIOBase
from typing import Any

import orjson
from django.db import models

FORMAT = "agentworld-studio/project-archive"
FORMAT_VERSION = 1


class ArchiveError(Exception):
    """The archive cannot be written or read back; the message names what and where."""


def encode(value: Any) -> Any:
    """A column's value as JSON (JSON fields' values pass through unchanged)."""
    if value is None or isinstance(value, str | bool | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else {"$float": repr(value)}
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    if isinstance(value, decimal.Decimal | uuid.UUID):
        return str(value)
    if isinstance(value, bytes | memoryview):
        return {"$bytes": base64.b64encode(bytes(value)).decode()}
    return value  # a JSON field's value (dict, list)


def decode(value: Any, field: models.Field) -> Any:
    """An archived value back as the field takes it."""
    if value is None:
        return None
    if isinstance(field, models.JSONField):
        return value
    if isinstance(value, dict):
        if "$bytes" in value:
            return base64.b64decode(value["$bytes"])
        if "$float" in value:
            return float(value["$float"])
    if isinstance(field, models.DurationField):
        return dt.timedelta(seconds=value)
    if isinstance(value, str) and not isinstance(field, models.CharField | models.TextField):
        return field.to_python(value)
    return value


def dumps(obj: Any) -> bytes:
    try:
        return orjson.dumps(obj) + b"\n"
    except (TypeError, orjson.JSONEncodeError):
        # what orjson refuses: whole numbers past 64 bits, lone surrogates in text
        return json.dumps(obj, ensure_ascii=True, separators=(",", ":")).encode() + b"\n"


def loads(line: bytes) -> Any:
    try:
        return orjson.loads(line)
    except orjson.JSONDecodeError:
        return json.loads(line)


def write_line(out: BufferedIOBase, obj: Any) -> int:
    data = dumps(obj)
    out.write(data)
    return len(data)
