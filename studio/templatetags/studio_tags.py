"""Template helpers available in every template (settings.TEMPLATES builtins)."""

from __future__ import annotations

from django import template

from studio.models import Domain

register = template.Library()

_DOMAIN_LABELS = dict(Domain.choices)


@register.filter
def domain_label(value: str) -> str:
    return _DOMAIN_LABELS.get(value, value)
