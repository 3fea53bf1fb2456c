"""Log filters of the studio's console handler (settings.LOGGING)."""

from __future__ import annotations

import logging


class RefusalsWithoutTraceback(logging.Filter):
    """A request refused on purpose (403 permission denied, 400 bad request, 404) is one line
    in the log: Django's `django.request` logger attaches the exception that raised it, whose
    traceback says nothing more and buries the real errors (5xx keep theirs)."""

    def filter(self, record: logging.LogRecord) -> bool:
        status = getattr(record, "status_code", None)
        if record.name == "django.request" and isinstance(status, int) and 400 <= status < 500:
            record.exc_info = None
            record.exc_text = None
        return True
