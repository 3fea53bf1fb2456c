"""Joining already-escaped fragments. Renderers never call mark_safe on user text: they build
pieces with `format_html`/`escape` and join them here, which refuses anything not yet safe."""

from __future__ import annotations

from collections.abc import Iterable

from django.utils.safestring import SafeString, mark_safe


def join(parts: Iterable[SafeString | str], sep: SafeString | str = "") -> SafeString:
    pieces = list(parts)
    for piece in (*pieces, sep):
        if piece and not isinstance(piece, SafeString):
            raise TypeError(f"unescaped fragment reached the renderer output: {piece[:60]!r}")
    return mark_safe(sep.join(pieces))


# Constant separators (no user text).
NL = mark_safe("\n")
EMPTY = mark_safe("")
