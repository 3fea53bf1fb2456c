"""JSON as a foldable tree: nested `<details>` per object/array, large ones folded, JSON
embedded in strings (tool results often carry `"response": "[{...}]"`) expanded in place."""

from __future__ import annotations

import json
from typing import Any

from django.utils.html import format_html
from django.utils.safestring import SafeString, mark_safe

from studio.rendering.safe import join

# Containers with more children than this start folded; deeper levels start folded too.
FOLD_ITEMS = 12
OPEN_DEPTH = 2
# Past this many rendered nodes the rest is shown as raw text (keeps huge payloads cheap).
NODE_BUDGET = 4000
MAX_EMBEDDED = 200_000
# Past this depth the rest of a value is shown as raw text: the tree is drawn recursively,
# and JSON nested hundreds deep (valid, and accepted by json.loads) would overflow the stack.
MAX_TREE_DEPTH = 48


def try_parse_json(text: str) -> tuple[bool, Any]:
    stripped = text.strip()
    if not stripped or stripped[0] not in "[{" or stripped[-1] not in "]}":
        return False, None
    try:
        return True, json.loads(stripped)
    except (ValueError, RecursionError):
        return False, None


class _Budget:
    def __init__(self, nodes: int) -> None:
        self.left = nodes


def _scalar(value: Any, budget: _Budget, depth: int) -> SafeString:
    if value is None:
        return mark_safe('<span class="j-null">null</span>')  # constant markup, no user text
    if isinstance(value, bool):
        return format_html('<span class="j-bool">{}</span>', "true" if value else "false")
    if isinstance(value, int | float):
        return format_html('<span class="j-num">{}</span>', json.dumps(value))
    text = str(value)
    if len(text) <= MAX_EMBEDDED:
        ok, inner = try_parse_json(text)
        if ok and isinstance(inner, dict | list):
            return format_html(
                '<span class="j-embedded" title="JSON inside a string">{}</span>',
                _node(inner, budget, depth),
            )
    if "\n" in text:
        return format_html('<pre class="j-str j-multiline">{}</pre>', text)
    return format_html('<span class="j-str">"{}"</span>', text)


def _raw(value: Any, *, indent: bool) -> str:
    try:
        return json.dumps(value, indent=2 if indent else None, ensure_ascii=False)
    except (RecursionError, ValueError):
        return "(nested too deep to show)"


def _node(value: Any, budget: _Budget, depth: int) -> SafeString:
    budget.left -= 1
    if not isinstance(value, dict | list):
        return _scalar(value, budget, depth)
    if budget.left <= 0 or depth >= MAX_TREE_DEPTH:
        # compact when deep: indentation would grow with the square of the depth
        return format_html('<pre class="j-raw">{}</pre>', _raw(value, indent=depth < 8))
    is_obj = isinstance(value, dict)
    opener, closer = ("{", "}") if is_obj else ("[", "]")
    if not value:
        return format_html('<span class="j-punct">{}{}</span>', opener, closer)
    items = value.items() if isinstance(value, dict) else enumerate(value)
    rows = []
    for key, child in items:
        if is_obj:
            label = format_html('<span class="j-key">"{}"</span>: ', key)
        else:
            label = format_html('<span class="j-idx">{}</span> ', key)
        rows.append(
            format_html('<div class="j-row">{}{}</div>', label, _node(child, budget, depth + 1))
        )
    count = len(value)
    noun = ("key" if count == 1 else "keys") if is_obj else ("item" if count == 1 else "items")
    summary = format_html(
        '<span class="j-punct">{}</span><span class="j-count">{} {}</span>'
        '<span class="j-punct j-shut">{}</span>',
        opener,
        count,
        noun,
        closer,
    )
    is_open = depth < OPEN_DEPTH and count <= FOLD_ITEMS
    return format_html(
        '<details class="j-node"{}><summary>{}</summary><div class="j-body">{}</div>'
        '<span class="j-punct">{}</span></details>',
        " open" if is_open else "",
        summary,
        join(rows),
        closer,
    )


def render_json_value(value: Any, *, open_depth: int | None = None) -> SafeString:
    budget = _Budget(NODE_BUDGET)
    start_depth = 0 if open_depth is None else OPEN_DEPTH - open_depth
    return format_html('<div class="json-tree">{}</div>', _node(value, budget, start_depth))
