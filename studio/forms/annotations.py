"""What an annotator sends beside their annotation from a queue's item page: a skip (with
an optional reason) and a flag for the queue's lead (with an optional note)."""

from __future__ import annotations

from django import forms

from studio.services.queues import MAX_REASON_CHARS


class SkipForm(forms.Form):
    reason = forms.CharField(required=False, max_length=MAX_REASON_CHARS)


class FlagForm(forms.Form):
    note = forms.CharField(required=False, max_length=MAX_REASON_CHARS)
