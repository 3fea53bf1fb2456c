"""Template helpers available in every template (settings.TEMPLATES builtins)."""

from __future__ import annotations

from django import template

from studio.models import Domain

register = template.Library()

_DOMAIN_LABELS = dict(Domain.choices)


@register.filter
def domain_label(value: str) -> str:
    return _DOMAIN_LABELS.get(value, value)


@register.simple_tag
def upload_limit_attrs() -> str:
    """The upload form's limit for studio.js, which refuses a file over it before a byte is
    sent: the server refuses such a body too, but a browser still sending it when the 413
    comes may show a reset connection instead of the answer."""
    from django.conf import settings
    from django.template.defaultfilters import filesizeformat
    from django.utils.html import format_html

    return format_html(
        'data-max-upload-bytes="{}" data-max-upload-label="{}"',
        settings.STUDIO_MAX_UPLOAD_BYTES,
        filesizeformat(settings.STUDIO_MAX_UPLOAD_BYTES),
    )
