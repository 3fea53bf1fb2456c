"""HTML observations: shown in an iframe with an empty `sandbox` (no scripts, no forms, no
same-origin, no popups) whose `srcdoc` is the escaped page, plus the escaped source."""

from __future__ import annotations

import re

from django.utils.html import format_html
from django.utils.safestring import SafeString

_HTML_RE = re.compile(
    r"^\s*(?:<!doctype\s+html|<html[\s>]|<head[\s>]|<body[\s>]|"
    r"<(?:div|section|main|article|table|form|ul|ol|p|span|h[1-6]|nav|header)[\s>])",
    re.I,
)
_CLOSING_RE = re.compile(r"</(?:html|body|div|p|span|table|ul|li|section|a|form|h[1-6])>", re.I)

# Put in front of the page inside the frame: nothing may be fetched from the network (no
# tracking pixels, no remote styles) even though scripts are already off.
_FRAME_CSP = (
    '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
    "style-src 'unsafe-inline'; img-src data:; font-src data:\">"
)


def looks_like_html(text: str) -> bool:
    return bool(_HTML_RE.match(text)) and bool(_CLOSING_RE.search(text))


def render_html(text: str) -> SafeString:
    return format_html(
        '<div class="html-obs">'
        '<iframe class="html-frame" sandbox="" referrerpolicy="no-referrer" loading="lazy" '
        'title="HTML observation (sandboxed, scripts disabled)" srcdoc="{}"></iframe>'
        '<details class="html-source"><summary>HTML source</summary><pre class="obs-text">{}</pre>'
        "</details></div>",
        _FRAME_CSP + text,
        text,
    )
