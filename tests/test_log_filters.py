"""The console log: a refusal is one line, a server error keeps its traceback."""

from __future__ import annotations

import logging
import sys

from studio.log_filters import RefusalsWithoutTraceback


def _record(status: int) -> logging.LogRecord:
    try:
        raise PermissionError("no")
    except PermissionError:
        info = sys.exc_info()
    record = logging.LogRecord(
        "django.request", logging.WARNING, __file__, 1, "Forbidden: %s", ("/x/",), info
    )
    record.status_code = status
    return record


def test_a_refusal_loses_its_traceback_and_a_server_error_keeps_it():
    kept = RefusalsWithoutTraceback()
    refused, failed = _record(403), _record(500)
    assert kept.filter(refused) and kept.filter(failed)  # both are logged
    assert refused.exc_info is None and "Traceback" not in logging.Formatter().format(refused)
    assert failed.exc_info is not None and "Traceback" in logging.Formatter().format(failed)


def test_the_console_handler_uses_it():
    from django.conf import settings

    assert "refusals" in settings.LOGGING["handlers"]["console"]["filters"]
