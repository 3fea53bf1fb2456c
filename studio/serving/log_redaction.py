"""No API token in any log line. The episode API takes the token in the URL path
(`/env/t/<token>/...`, `/mcp/t/<token>/...`: OpenEnv's WebSocket client sends no headers),
and uvicorn's access log and its WebSocket lines print that path. `install()` puts a filter
on uvicorn's loggers that rewrites `/t/<token>/` to `/t/***/` (and any `awt_...` token text
to `awt_***`) in each record's message, arguments and traceback before it is formatted.

A filter on a logger outlives `logging.config.dictConfig` (uvicorn's, then Django's
LOGGING: they replace handlers, never a logger's filters), so installing it once per
process, when the app is imported, covers `uvicorn ...` from scripts/dev.sh, the
Dockerfile's `--workers N` (each worker imports the app) and the tests' server."""

from __future__ import annotations

import logging
import re
from typing import Any

LOGGERS = ("uvicorn.access", "uvicorn.error", "uvicorn")
_PATH_TOKEN = re.compile(r"(/t/)[^/\s\"'?#]+")
_BARE_TOKEN = re.compile(r"\bawt_[A-Za-z0-9_\-]+")


def redact(text: str) -> str:
    return _BARE_TOKEN.sub("awt_***", _PATH_TOKEN.sub(r"\1***", text))


def _clean(value: Any) -> Any:
    return redact(value) if isinstance(value, str) else value


class RedactTokens(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str):
            record.msg = redact(record.msg)
        if isinstance(record.args, tuple):
            record.args = tuple(_clean(a) for a in record.args)
        elif isinstance(record.args, dict):
            record.args = {k: _clean(v) for k, v in record.args.items()}
        if record.exc_info and not record.exc_text:
            # formatted now, redacted: a formatter uses exc_text when it is set
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        if record.stack_info:
            record.stack_info = redact(record.stack_info)
        return True


_FILTER = RedactTokens()


def install() -> None:
    """Once per process (idempotent)."""
    for name in LOGGERS:
        logger = logging.getLogger(name)
        if _FILTER not in logger.filters:
            logger.addFilter(_FILTER)
