"""Diff HTML from the plain (op, text) pieces of `studio.services.branches`: removed text in
<del>, added text in <ins>, every piece of user text escaped."""

from __future__ import annotations

from collections.abc import Iterable

from django.utils.html import escape, format_html
from django.utils.safestring import SafeString, mark_safe


def diff_html(pieces: Iterable[tuple[str, str]] | None) -> SafeString:
    """The pieces as HTML: "equal" text escaped, "delete" in <del>, "insert" in <ins>."""
    out: list[str] = []
    for op, text in pieces or ():
        if op == "equal":
            out.append(escape(text))
        elif op == "delete":
            out.append(format_html("<del>{}</del>", text))
        elif op == "insert":
            out.append(format_html("<ins>{}</ins>", text))
        else:
            raise ValueError(f"unknown diff op {op!r}")
    # Every piece above is escaped (escape/format_html): joining them is safe.
    return mark_safe("".join(out))
