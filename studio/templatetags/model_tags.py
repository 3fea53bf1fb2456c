"""`{% load model_tags %}`: the badge that names the world model behind a future, the same
on every page (label in view, everything in its title, the model's colour as a swatch)."""

from __future__ import annotations

from django import template
from django.utils.html import format_html
from django.utils.safestring import SafeString

from studio.presenters.model_colours import RECORDED_COLOUR, colour_of
from studio.services.model_identity import ModelIdentity, identity_of_job

register = template.Library()


@register.simple_tag
def model_badge(
    identity: ModelIdentity | None, colours: dict[str, str] | None = None
) -> SafeString:
    """The model's badge; None (a recorded step or branch) says "recorded". The swatch
    shows the model's colour on a page that gives `colours` (its `colour_map`, which its
    tree or chart uses too); elsewhere a colour would mean nothing, so there is none."""
    if identity is not None and not colours:
        return format_html(
            '<span class="badge model-badge" title="{}" data-model="{}">{}</span>',
            identity.full,
            identity.token,
            identity.label,
        )
    if identity is None:
        return format_html(
            '<span class="badge model-badge model-recorded" title="{}">'
            '<span class="model-swatch" style="background:{}"></span>recorded</span>',
            "Recorded: no world model wrote this",
            RECORDED_COLOUR,
        )
    return format_html(
        '<span class="badge model-badge" title="{}" data-model="{}">'
        '<span class="model-swatch" style="background:{}"></span>{}</span>',
        identity.full,
        identity.token,
        colour_of(identity, colours or {}),
        identity.label,
    )


@register.filter
def identity(job) -> ModelIdentity | None:
    """`{% with ident=job|identity %}`: a `SimulationJob`'s model identity (no query)."""
    return identity_of_job(job) if job is not None else None
