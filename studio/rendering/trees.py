"""Screens as readable trees and lists: AndroidWorld `ui_elements` (JSON or the
`UI element N: UIElement(...)` text form), WebVoyager `[i]: <tag> "text";` element lists, and
accessibility trees as printed by Inspect's web_browser tool (`[id] role "name" [attrs]`,
children indented)."""

from __future__ import annotations

import re
from typing import Any

from django.utils.html import format_html
from django.utils.safestring import SafeString

from studio.rendering.safe import EMPTY, join

# ---------------------------------------------------------------- Android


_ANDROID_FLAGS = (
    ("is_clickable", "clickable"),
    ("is_editable", "editable"),
    ("is_scrollable", "scrollable"),
    ("is_checked", "checked"),
    ("is_selected", "selected"),
    ("is_focused", "focused"),
    ("is_long_clickable", "long-click"),
)


def find_android_elements(value: Any) -> list[dict] | None:
    if isinstance(value, dict):
        for key in ("ui_elements", "element_list", "before_element_list", "elements"):
            if key in value:
                return find_android_elements(value[key])
        state = value.get("state")
        return find_android_elements(state) if isinstance(state, dict) else None
    if (
        isinstance(value, list)
        and value
        and all(isinstance(v, dict) for v in value)
        and sum(1 for v in value if "class_name" in v or "content_description" in v)
        >= max(1, len(value) // 2)
    ):
        return value
    return None


_UIELEMENT_RE = re.compile(r"^\s*UI element (\d+):\s*UIElement\((.*)\)\s*$")
_KV_RE = re.compile(r"(\w+)=('(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|\w+\([^)]*\)|[^,]*)")


def _py_value(raw: str) -> Any:
    raw = raw.strip()
    if raw in ("None", ""):
        return None
    if raw in ("True", "False"):
        return raw == "True"
    if len(raw) >= 2 and raw[0] == raw[-1] and raw[0] in "'\"":
        return raw[1:-1].replace("\\'", "'").replace('\\"', '"')
    box = re.match(r"BoundingBox\((.*)\)", raw)
    if box:
        return {k: int(v) for k, v in re.findall(r"(\w+)=(-?\d+)", box.group(1))}
    return raw


def parse_android_text(text: str) -> list[dict] | None:
    elements = []
    for line in text.splitlines():
        m = _UIELEMENT_RE.match(line)
        if m:
            fields = {k: _py_value(v) for k, v in _KV_RE.findall(m.group(2))}
            fields["_index"] = int(m.group(1))
            elements.append(fields)
    return elements or None


_COMPACT_RE = re.compile(
    r"^\s*\[(?P<index>\d+)\]\s+(?P<cls>[A-Za-z][\w.$]*)"
    r'(?:\s+"(?P<text>(?:[^"\\]|\\.)*)")?'
    r'(?:\s+desc="(?P<desc>(?:[^"\\]|\\.)*)")?'
    r'(?:\s+hint="(?P<hint>(?:[^"\\]|\\.)*)")?'
    r"(?:\s+\((?P<flags>[a-z_, ]*)\))?"
    r"(?:\s+bounds=\((?P<x1>-?\d+),(?P<y1>-?\d+)\)-\((?P<x2>-?\d+),(?P<y2>-?\d+)\))?"
    r"(?:\s+id=(?P<res>\S+))?\s*$"
)


def parse_android_compact(text: str) -> list[dict] | None:
    """One element a line, `[i] Class "text" desc="..." (clickable, editable)
    bounds=(x1,y1)-(x2,y2) id=res`: a compact form of AndroidWorld's element list."""
    lines = [line for line in text.splitlines() if line.strip()]
    elements = []
    for line in lines:
        m = _COMPACT_RE.match(line)
        if not m:
            continue
        el: dict[str, Any] = {
            "_index": int(m["index"]),
            "class_name": m["cls"],
            "text": m["text"],
            "content_description": m["desc"],
            "hint_text": m["hint"],
            "resource_name": m["res"],
        }
        for flag in (m["flags"] or "").split(","):
            if flag.strip():
                el[f"is_{flag.strip()}"] = True
        if m["x1"] is not None:
            el["bbox_pixels"] = {
                "x_min": int(m["x1"]),
                "y_min": int(m["y1"]),
                "x_max": int(m["x2"]),
                "y_max": int(m["y2"]),
            }
        elements.append(el)
    has_android_marks = any("bbox_pixels" in e or e["content_description"] for e in elements)
    if elements and has_android_marks and len(elements) >= 0.8 * len(lines):
        return elements
    return None


def render_android(elements: list[dict], preamble: str = "") -> SafeString:
    rows = []
    for i, el in enumerate(elements):
        index = el.get("_index", i)
        class_name = str(el.get("class_name") or "element").rsplit(".", 1)[-1]
        text = el.get("text")
        desc = el.get("content_description")
        hint = el.get("hint_text")
        flags = [label for key, label in _ANDROID_FLAGS if el.get(key) is True]
        if el.get("is_enabled") is False:
            flags.append("disabled")
        box = el.get("bbox_pixels") or {}
        bbox = ""
        if isinstance(box, dict) and {"x_min", "y_min", "x_max", "y_max"} <= box.keys():
            bbox = f"({box['x_min']},{box['y_min']})–({box['x_max']},{box['y_max']})"
        resource = el.get("resource_name") or el.get("resource_id") or ""
        rows.append(
            format_html(
                '<li class="ui-el"><span class="ui-idx">{}</span><span class="ui-class">{}</span>'
                "{}{}{}{}{}{}</li>",
                index,
                class_name,
                format_html(' <span class="ui-text">"{}"</span>', text) if text else EMPTY,
                format_html(' <span class="ui-desc">desc: {}</span>', desc)
                if desc and desc != text
                else EMPTY,
                format_html(' <span class="ui-desc">hint: {}</span>', hint) if hint else EMPTY,
                join(format_html(' <span class="chip">{}</span>', f) for f in flags),
                format_html(' <span class="ui-res">{}</span>', str(resource).rsplit("/", 1)[-1])
                if resource
                else EMPTY,
                format_html(' <span class="ui-bbox">{}</span>', bbox) if bbox else EMPTY,
            )
        )
    return format_html(
        '<div class="ui-screen">{}<div class="ui-caption">{} UI element{}</div>'
        '<ol class="ui-list">{}</ol></div>',
        format_html('<pre class="obs-text">{}</pre>', preamble.strip())
        if preamble.strip()
        else EMPTY,
        len(elements),
        "" if len(elements) == 1 else "s",
        join(rows),
    )


# ---------------------------------------------------------------- WebVoyager

_WEB_ITEM_RE = re.compile(
    r"\[(\d+)\]:\s*(?:<([\w-]+)>\s*)?(?:\"(.*?)\")?\s*;?(?=\s*\[\d+\]:|\s*$)", re.S
)
_WEB_START_RE = re.compile(r"\[\d+\]:\s*(?:<[\w-]+>|\")")


def looks_like_web_elements(text: str) -> bool:
    return len(_WEB_START_RE.findall(text[:20000])) >= 2


def render_web_elements(text: str) -> SafeString:
    first = _WEB_START_RE.search(text)
    start = first.start() if first else 0
    preamble, body = text[:start], text[start:]
    rows = []
    pos = 0
    for m in _WEB_ITEM_RE.finditer(body):
        if body[pos : m.start()].strip():
            rows.append(
                format_html('<li class="ui-el ui-other">{}</li>', body[pos : m.start()].strip())
            )
        pos = m.end()
        rows.append(
            format_html(
                '<li class="ui-el"><span class="ui-idx">{}</span>{}{}</li>',
                m.group(1),
                format_html('<span class="ui-class">&lt;{}&gt;</span>', m.group(2))
                if m.group(2)
                else EMPTY,
                format_html(' <span class="ui-text">"{}"</span>', m.group(3).strip())
                if m.group(3)
                else EMPTY,
            )
        )
    tail = body[pos:].strip()
    return format_html(
        '<div class="ui-screen">{}<ol class="ui-list">{}</ol>{}</div>',
        format_html('<pre class="obs-text">{}</pre>', preamble.strip())
        if preamble.strip()
        else EMPTY,
        join(rows),
        format_html('<pre class="obs-text">{}</pre>', tail) if tail else EMPTY,
    )


# ---------------------------------------------------------------- accessibility tree

_AX_LINE_RE = re.compile(r"^(\s*)\[(\d+)\]\s+([A-Za-z][\w-]*)\s*(.*)$")
_AX_REST_RE = re.compile(r'^(?:"(?P<name>.*?)")?\s*(?P<attrs>(?:\[[^\]]*\]\s*)*)$')


def looks_like_ax_tree(text: str) -> bool:
    lines = [line for line in text.splitlines()[:400] if line.strip()]
    if len(lines) < 3:
        return False
    hits = sum(1 for line in lines if _AX_LINE_RE.match(line))
    return hits >= 3 and hits >= 0.6 * len(lines)


def _ax_label(line: str) -> SafeString:
    m = _AX_LINE_RE.match(line)
    if not m:
        return format_html('<span class="ax-text">{}</span>', line.strip())
    _, node_id, role, rest = m.groups()
    parts = _AX_REST_RE.match(rest.strip())
    name, attrs = (parts.group("name"), parts.group("attrs").strip()) if parts else (None, rest)
    return format_html(
        '<span class="ui-idx">{}</span><span class="ax-role ax-{}">{}</span>{}{}',
        node_id,
        role.lower() if role.isalpha() else "other",
        role,
        format_html(' <span class="ui-text">"{}"</span>', name) if name else EMPTY,
        format_html(' <span class="ax-attrs">{}</span>', attrs) if attrs else EMPTY,
    )


def render_ax_tree(text: str) -> SafeString:
    lines = [line.expandtabs(4) for line in text.splitlines() if line.strip()]
    indents = [len(line) - len(line.lstrip(" ")) for line in lines]
    # A node's children are the following lines indented deeper than it.
    nodes: list[tuple[int, str]] = list(zip(indents, lines, strict=True))

    def build(start: int, end: int) -> SafeString:
        items = []
        i = start
        while i < end:
            indent, line = nodes[i]
            j = i + 1
            while j < end and nodes[j][0] > indent:
                j += 1
            label = _ax_label(line)
            if j > i + 1:
                items.append(
                    format_html(
                        "<li><details open><summary>{}</summary>{}</details></li>",
                        label,
                        build(i + 1, j),
                    )
                )
            else:
                items.append(format_html('<li class="leaf">{}</li>', label))
            i = j
        return format_html('<ul class="ax-tree">{}</ul>', join(items))

    return format_html('<div class="ax-root">{}</div>', build(0, len(nodes)))
