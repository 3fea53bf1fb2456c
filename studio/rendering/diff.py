"""Unified diffs (SWE patches): added/removed lines, hunk and file headers highlighted."""

from __future__ import annotations

import re

from django.utils.html import format_html
from django.utils.safestring import SafeString

from studio.rendering.safe import join

_HUNK_RE = re.compile(r"^@@ -\d+(?:,\d+)? \+\d+(?:,\d+)? @@", re.M)


def looks_like_diff(text: str) -> bool:
    return bool(_HUNK_RE.search(text)) and (
        "\n+++ " in text or text.startswith("+++ ") or "\n--- " in text or "diff --git" in text
    )


def _line_class(line: str) -> str:
    if line.startswith(
        ("diff --git", "index ", "new file mode", "deleted file mode", "similarity", "rename ")
    ):
        return "d-meta"
    if line.startswith(("+++ ", "--- ")):
        return "d-file"
    if line.startswith("@@"):
        return "d-hunk"
    if line.startswith("+"):
        return "d-add"
    if line.startswith("-"):
        return "d-del"
    return "d-ctx"


def render_diff(text: str) -> SafeString:
    lines = []
    for line in text.replace("\r\n", "\n").split("\n"):
        lines.append(format_html('<span class="{}">{}</span>', _line_class(line), line or " "))
    return format_html('<pre class="diff-view">{}</pre>', join(lines))
