"""Diff HTML from the plain (op, text) pieces of `studio.services.diffs`: removed text in
<del>, added text in <ins>, every piece of user text escaped."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from django.utils.html import escape, format_html
from django.utils.safestring import SafeString, mark_safe

# Terminal output shows in plain-text diffs and excerpts without its escape sequences: they
# are invisible where the terminal is rendered, and here they would show as a box and
# "[0;1;31m". The diff itself is of the raw text.
from studio.rendering.ansi import strip_ansi
from studio.rendering.bounded import field_chars


def breaks_before(previous: tuple[str, str] | None, op: str, text: str) -> bool:
    """Whether lines removed then lines added need a line break between them to show as
    lines: a removed text that spans lines and ends without one (the text's last line) would
    run on into the first added line ("…tree cleanOn branch dev"). Display only: the pieces
    stay the texts as they are."""
    if previous is None or previous[0] != "delete" or op != "insert":
        return False
    removed = previous[1]
    return not removed.endswith("\n") and ("\n" in removed or "\n" in text)


def diff_html(pieces: Iterable[tuple[str, str]] | None) -> SafeString:
    """The pieces as HTML: "equal" text escaped, "delete" in <del>, "insert" in <ins>; lines
    removed then added are shown as lines (`breaks_before`)."""
    out: list[str] = []
    previous: tuple[str, str] | None = None
    for op, raw in pieces or ():
        text = strip_ansi(raw)
        if breaks_before(previous, op, text):
            out.append("\n")
        previous = (op, text)
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
        # a page renders at most STUDIO_PAGE_FIELD_CHARS of a diff too (an excerpt past it)
        return format_html(
            '<pre class="diff">{}</pre>', pieces_excerpt_html(diff.pieces, field_chars())
        )
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
    return format_html('<pre class="diff">{}</pre>', pieces_excerpt_html(diff, field_chars()))


# ---- excerpts of long texts and diffs (compare cells) ----------------------------------------

# Unchanged text kept on each side of a change in an excerpt.
CONTEXT_CHARS = 160


def _elided(text: str) -> SafeString:
    return format_html('<span class="elided">{}</span>', text)


def _count(n: int, what: str) -> str:
    return f"{n:,} {what}{'' if n == 1 else 's'}"


def pieces_excerpt_html(pieces: Sequence[tuple[str, str]], budget: int) -> SafeString:
    """Diff pieces as HTML in about `budget` characters: whole when they fit; otherwise long
    unchanged runs keep CONTEXT_CHARS on each side of the changes around them, long removed
    or added texts are cut, and every cut says how much it left out."""
    pieces = [(op, strip_ansi(text)) for op, text in pieces]
    if sum(len(text) for _, text in pieces) <= budget:
        return diff_html(pieces)
    out: list[str] = []
    used = 0
    last = len(pieces) - 1
    for k, (op, text) in enumerate(pieces):
        if k and breaks_before(pieces[k - 1], op, text):
            out.append("\n")
        if used >= budget:
            left = sum(1 for o, _ in pieces[k:] if o != "equal")
            if left:
                out.append(_elided(f" … {_count(left, 'more change')} not shown"))
            break
        if op == "equal":
            keep_head = 0 if k == 0 else CONTEXT_CHARS
            keep_tail = 0 if k == last else CONTEXT_CHARS
            if len(text) > keep_head + keep_tail + 40:
                gap = len(text) - keep_head - keep_tail
                out.append(escape(text[:keep_head]))
                out.append(_elided(f" … {_count(gap, 'unchanged character')} … "))
                out.append(escape(text[len(text) - keep_tail :]))
                used += keep_head + keep_tail
            else:
                out.append(escape(text))
                used += len(text)
            continue
        room = max(budget - used, CONTEXT_CHARS)
        shown = text[:room]
        tag = "del" if op == "delete" else "ins"
        out.append(format_html("<{}>{}</{}>", tag, shown, tag))
        if len(text) > len(shown):
            word = "removed" if op == "delete" else "added"
            out.append(_elided(f" … {_count(len(text) - len(shown), 'more character')} {word}"))
        used += len(shown)
    # Every piece above is escaped (escape/format_html): joining them is safe.
    return mark_safe("".join(out))


def diff_excerpt_html(diff, budget: int, changes: int) -> SafeString:
    """A compare cell's diff in about `budget` characters (at most `changes` JSON changes);
    `any_diff_html` shows it whole."""
    from studio.services.diffs import MeaningDiff

    if diff is None:
        return mark_safe("")
    if isinstance(diff, MeaningDiff):
        if diff.kind == "json" or diff.same:
            return meaning_html(diff, changes)
        return format_html('<pre class="diff">{}</pre>', pieces_excerpt_html(diff.pieces, budget))
    return format_html('<pre class="diff">{}</pre>', pieces_excerpt_html(diff, budget))


def text_excerpt_html(text: str, budget: int | None) -> SafeString:
    """A text in a <pre>: whole, or its first `budget` characters and how many more there
    are (None: as much as a page renders of a field, STUDIO_PAGE_FIELD_CHARS)."""
    text = strip_ansi(text)
    if budget is None:
        budget = field_chars()
    if len(text) <= budget:
        return format_html("<pre>{}</pre>", text)
    return format_html(
        "<pre>{}{}</pre>",
        text[:budget],
        _elided(f" … {_count(len(text) - budget, 'more character')}"),
    )
