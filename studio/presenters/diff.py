"""Diff HTML from the plain (op, text) pieces of `studio.services.diffs`: removed text in
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


CHANGE_WORDS = {"added": "added", "removed": "removed", "changed": "changed"}


def meaning_html(diff, limit: int | None = None) -> SafeString:
    """A MeaningDiff as HTML: a list of JSON changes (path, what happened, the values), or a
    word diff of the normalised texts; "same" when only formatting differs. `limit`: show at
    most that many JSON changes, and say how many more there are."""
    if diff.same:
        if diff.formatting_only:
            return format_html(
                '<div class="diff-same">Same {}; only formatting differs.</div>',
                "value" if diff.kind == "json" else "text",
            )
        return mark_safe('<div class="diff-same">Identical.</div>')
    if diff.kind == "text":
        return format_html('<pre class="diff">{}</pre>', diff_html(diff.pieces))
    items = []
    shown = diff.changes if limit is None else diff.changes[:limit]
    for change in shown:
        if change.op == "added":
            values = format_html("<ins>{}</ins>", change.new)
        elif change.op == "removed":
            values = format_html("<del>{}</del>", change.old)
        else:
            values = format_html("<del>{}</del> → <ins>{}</ins>", change.old, change.new)
        items.append(
            format_html(
                '<li class="json-{}"><code>{}</code> {} {}</li>',
                change.op,
                change.path,
                CHANGE_WORDS[change.op],
                values,
            )
        )
    more = len(diff.changes) - len(shown)
    if more:
        items.append(
            format_html(
                '<li class="json-more muted">and {} more change{}</li>',
                more,
                "" if more == 1 else "s",
            )
        )
    # Each item is built with format_html (every value escaped): joining them is safe.
    return format_html('<ul class="json-diff">{}</ul>', mark_safe("".join(items)))


def any_diff_html(diff, limit: int | None = None) -> SafeString:
    """A compare cell's diff, whichever kind it is (meaning or raw pieces)."""
    from studio.services.diffs import MeaningDiff

    if diff is None:
        return mark_safe("")
    if isinstance(diff, MeaningDiff):
        return meaning_html(diff, limit)
    return format_html('<pre class="diff">{}</pre>', diff_html(diff))
