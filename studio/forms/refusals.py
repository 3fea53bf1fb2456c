"""A service's refusal, shown on the form that asked: a request valid in itself that the
installation's limits refuse when the job would be made (`studio.services.job_limits`)."""

from __future__ import annotations

from django import forms

from inference.simulation.request import InvalidRequest
from studio.services.job_limits import http_status


def show_refusal(form: forms.Form, exc: InvalidRequest) -> int:
    """Add `exc`'s messages to the fields they name (the form's others at its top); return
    the HTTP status of the page: 429 for a limit that passes with time, else 400."""
    for name, messages in exc.errors.items():
        field = name if name in form.fields else None
        for message in messages:
            form.add_error(field, message if message.endswith(".") else message + ".")
    return http_status(exc)
