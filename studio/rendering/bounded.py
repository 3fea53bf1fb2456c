"""Pages stay small whatever the data: a page renders at most `field_chars()` characters of
any one step field or trajectory text (the setting STUDIO_PAGE_FIELD_CHARS, default
FIELD_CHARS), says how much it shows, and links to the field's *Show all* endpoint
(`studio.views.step_text`), which streams the whole text as plain text.

A cut text is rendered as plain, escaped text: its start is not valid JSON or HTML any
more, so no structured view is drawn of it (and HTML is never drawn outside the sandboxed
iframe of `studio.rendering.html_view`)."""

from __future__ import annotations

from django.conf import settings
from django.utils.html import format_html
from django.utils.safestring import SafeString

from studio.rendering.ansi import ansi_to_html

FIELD_CHARS = 200_000


def field_chars() -> int:
    """The most characters of one field a page renders (STUDIO_PAGE_FIELD_CHARS)."""
    return max(1000, int(getattr(settings, "STUDIO_PAGE_FIELD_CHARS", FIELD_CHARS)))


def is_cut(text: str | None, limit: int | None = None) -> bool:
    """Whether a page shows only the start of `text` (`limit`: a page's own, smaller bound
    than the setting's, e.g. for a list of many steps)."""
    return len(text or "") > (limit or field_chars())


def head_of(text: str | None, limit: int | None = None) -> str:
    return (text or "")[: limit or field_chars()]


def shown_note(total: int, full_url: str = "", limit: int | None = None) -> SafeString:
    """ "Showing the first N of M characters" with the Show all link (when there is one)."""
    shown = min(total, limit or field_chars())
    if not full_url:
        return format_html(
            '<p class="bounded-note muted small-text">Showing the first {} of {} characters.</p>',
            f"{shown:,}",
            f"{total:,}",
        )
    return format_html(
        '<p class="bounded-note muted small-text">Showing the first {} of {} characters. '
        '<a class="show-all" href="{}" target="_blank" rel="noopener">Show all</a> '
        "(the whole text, as plain text, in a new tab)</p>",
        f"{shown:,}",
        f"{total:,}",
        full_url,
    )


def render_cut(
    text: str, full_url: str = "", css: str = "obs-text", limit: int | None = None
) -> SafeString:
    """The start of a text longer than a page holds, as escaped plain text in a clamp, with
    the note saying how much of it is shown."""
    return format_html(
        '<div class="render render-cut fold" data-fold><div class="fold-body">'
        '<pre class="{}">{}</pre></div>'
        '<button type="button" class="fold-toggle small" data-more="Show more of the start" '
        'data-less="Show less">Show more of the start</button></div>{}',
        css,
        ansi_to_html(head_of(text, limit)),
        shown_note(len(text), full_url, limit),
    )


def bounded_text(
    text: str | None, full_url: str = "", css: str = "obs-text", limit: int | None = None
) -> SafeString:
    """A plain text field (a task, a thinking, a raw output) in a <pre>: whole when it fits,
    else its start, the note and the link."""
    text = text or ""
    if not is_cut(text, limit):
        return format_html('<pre class="{}">{}</pre>', css, text)
    return format_html(
        '<pre class="{}">{}</pre>{}',
        css,
        head_of(text, limit),
        shown_note(len(text), full_url, limit),
    )
