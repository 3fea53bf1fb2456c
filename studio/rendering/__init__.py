"""Renderers for step content, shared by the trajectory page and the compare views.

`render_observation(domain, text, meta)` and `render_action(domain, text, meta)` return safe
HTML. The kind of content is detected from the text itself, the domain being a hint (a JSON
list of AndroidWorld elements renders as a screen whatever the domain; plain text is terminal
output in the terminal/swe/os domains and a snippet card in search). Every piece of user text
goes through `format_html`/`escape`; see `studio.rendering.safe.join`."""

from __future__ import annotations

import json
import re
from typing import Any

from django.utils.html import format_html
from django.utils.safestring import SafeString, mark_safe

from studio.rendering.ansi import ansi_to_html, has_ansi
from studio.rendering.bounded import is_cut, render_cut
from studio.rendering.diff import looks_like_diff, render_diff
from studio.rendering.html_view import looks_like_html, render_html
from studio.rendering.json_view import render_json_value, try_parse_json
from studio.rendering.safe import join
from studio.rendering.search import (
    find_results,
    parse_text_results,
    render_cards,
    render_snippet_card,
)
from studio.rendering.trees import (
    find_android_elements,
    looks_like_ax_tree,
    looks_like_web_elements,
    parse_android_compact,
    parse_android_text,
    render_android,
    render_ax_tree,
    render_web_elements,
)

__all__ = ["detect_kind", "render_action", "render_observation", "render_preview"]

TERMINAL_DOMAINS = ("terminal", "swe", "os")
# Actions read as shell commands; OS actions only when they are not GUI calls like click(x=1).
SHELL_ACTION_DOMAINS = ("terminal", "swe")
_FUNC_CALL_RE = re.compile(r"^\s*[A-Za-z_][\w.]*\(.*\)\s*$", re.S)
# Observations longer than this (characters or lines) are clamped with a "Show all" button.
FOLD_CHARS = 1500
FOLD_LINES = 24


def detect_kind(domain: str, text: str, meta: dict | None = None) -> tuple[str, Any]:
    """(kind, parsed) for an observation; kind is one of json, search, android, web_elements,
    ax_tree, html, diff, terminal, snippet, text."""
    meta = meta or {}
    forced = meta.get("render")
    ok, value = try_parse_json(text)
    if ok:
        if forced != "json":
            elements = find_android_elements(value)
            if elements:
                return "android", elements
            results = find_results(value)
            if results:
                return "search", results
        return "json", value
    if looks_like_html(text):
        return "html", None
    if looks_like_diff(text):
        return "diff", None
    android = parse_android_text(text) if "UIElement(" in text else None
    if android is None and (domain == "android" or "bounds=(" in text):
        android = parse_android_compact(text)
    if android:
        return "android", android
    if looks_like_web_elements(text):
        return "web_elements", None
    if looks_like_ax_tree(text):
        return "ax_tree", None
    results = parse_text_results(text) if domain == "search" or "http" in text else None
    if results:
        return "search", results
    if domain in TERMINAL_DOMAINS or has_ansi(text):
        return "terminal", None
    if domain == "search" and len(text) <= 4000 and text.count("\n\n") == 0:
        return "snippet", None
    return "text", None


def _fold(inner: SafeString, text: str, kind: str) -> SafeString:
    lines = text.count("\n") + 1
    if kind == "html" or (len(text) <= FOLD_CHARS and lines <= FOLD_LINES):
        return format_html('<div class="render render-{}">{}</div>', kind, inner)
    label = (
        f"Show all ({lines} lines, {_size(len(text))})"
        if lines > 3
        else f"Show all ({_size(len(text))})"
    )
    return format_html(
        '<div class="render render-{} fold" data-fold><div class="fold-body">{}</div>'
        '<button type="button" class="fold-toggle small" data-more="{}" '
        'data-less="Show less">{}</button></div>',
        kind,
        inner,
        label,
        label,
    )


def _size(n: int) -> str:
    return f"{n / 1024:.1f} KB" if n >= 1024 else f"{n} chars"


def render_observation(
    domain: str, text: str, meta: dict | None = None, *, full_url: str = ""
) -> SafeString:
    """`full_url`: the observation's Show all address, linked from a text longer than a
    page renders (`studio.rendering.bounded`: only its start is drawn, as plain text)."""
    text = text or ""
    if is_cut(text):
        return render_cut(text, full_url, "term" if domain in TERMINAL_DOMAINS else "obs-text")
    if not text.strip():
        return format_html('<div class="render render-empty muted">{}</div>', "(empty)")
    kind, parsed = detect_kind(domain, text, meta)
    if kind == "json":
        inner = render_json_value(parsed)
    elif kind == "search":
        inner = render_cards(parsed)
    elif kind == "android":
        inner = render_android(parsed, _android_preamble(text) if "UIElement(" in text else "")
    elif kind == "web_elements":
        inner = render_web_elements(text)
    elif kind == "ax_tree":
        inner = render_ax_tree(text)
    elif kind == "html":
        inner = render_html(text)
    elif kind == "diff":
        inner = render_diff(text)
    elif kind == "terminal":
        inner = format_html('<pre class="term">{}</pre>', ansi_to_html(text))
    elif kind == "snippet":
        inner = render_snippet_card(text)
    else:
        inner = format_html('<pre class="obs-text">{}</pre>', ansi_to_html(text))
    return _fold(inner, text, kind)


def _android_preamble(text: str) -> str:
    lines = text.splitlines()
    keep = [line for line in lines if "UIElement(" not in line]
    return "\n".join(keep)


PREVIEW_SHOWN = 3000


def render_preview(domain: str, head: str, total_chars: int, full_url: str) -> SafeString:
    """The start of an observation too large to render inline, with a button that loads the
    full rendering (used by the lazy step list; `head` is the first characters only)."""
    head = head[:PREVIEW_SHOWN]
    return format_html(
        '<div class="render render-preview fold" data-fold><div class="fold-body"><pre class="{}">{}</pre></div>'
        '<div class="preview-more"><span class="muted">Showing the first {} of {}.</span> '
        '<button type="button" class="small primary" hx-get="{}" hx-target="closest .obs-body" '
        'hx-swap="innerHTML">Load full observation</button></div></div>',
        "term" if domain in TERMINAL_DOMAINS else "obs-text",
        ansi_to_html(head),
        _size(len(head)),
        _size(total_chars),
        full_url,
    )


def render_action(
    domain: str,
    text: str,
    meta: dict | None = None,
    *,
    fences: bool = True,
    full_url: str = "",
) -> SafeString:
    """An agent action: a JSON tool call as `name(args)` with a foldable argument tree, a
    shell command as a prompt line, anything else as preformatted text. `fences`: unwrap an
    action written as one fenced block (off for the block's content: one level, one raw).
    An action longer than a page renders shows its start only (`studio.rendering.bounded`),
    linking to `full_url`."""
    text = text or ""
    meta = meta or {}
    if is_cut(text):
        return render_cut(text, full_url, "action action-text")
    if not text.strip():
        return format_html('<div class="action action-empty muted">{}</div>', "(no action)")
    fenced = _FENCED_RE.fullmatch(text.strip()) if fences else None
    if fenced:
        # A whole action in one fenced block (AgentWorldBench actions are written so): the
        # action is the block's content; the text as written is one click away.
        return format_html(
            '<div class="action action-fenced">{}<details class="raw-action"><summary>raw action</summary><pre>{}</pre></details></div>',
            _render_fenced(domain, fenced.group(1) or "", fenced.group(2), meta),
            text,
        )
    react = _REACT_RE.match(text)
    if react:
        # "Thought: ... / Action: ..." (ReAct, WebVoyager, AndroidWorld's "Reason:"): the
        # reasoning muted, the action itself rendered on its own.
        return format_html(
            '<div class="action action-react"><div class="react-thought"><span class="react-label">{}</span> {}</div>{}</div>',
            react.group(1).capitalize(),
            react.group(2).strip(),
            render_action(domain, react.group(3).strip(), meta, fences=fences),
        )
    ok, value = try_parse_json(text)
    if ok:
        call = _tool_call(value)
        if call is not None:
            return _render_call(*call)
        return format_html('<div class="action action-json">{}</div>', render_json_value(value))
    if domain in SHELL_ACTION_DOMAINS or (domain == "os" and not _FUNC_CALL_RE.match(text)):
        return format_html(
            '<pre class="action action-cmd term"><span class="prompt">$ </span>{}</pre>',
            ansi_to_html(text.rstrip("\n")),
        )
    if looks_like_diff(text):
        return format_html('<div class="action">{}</div>', render_diff(text))
    return format_html('<pre class="action action-text">{}</pre>', ansi_to_html(text))


_FENCED_RE = re.compile(r"```[ \t]*([\w+-]*)[ \t]*\n(.*?)\n?[ \t]*```", re.S)


def _keystrokes(value: Any) -> list[str] | None:
    """Terminal agents (Terminus) act with keystrokes: {"keystrokes": "ls\n", ...}, or
    {"commands": [{"keystrokes": ...}, ...]}; None when the value is something else."""
    if isinstance(value, dict) and isinstance(value.get("keystrokes"), str):
        return [value["keystrokes"]]
    items = value.get("commands") if isinstance(value, dict) else value
    if isinstance(items, list) and items and all(isinstance(c, dict) for c in items):
        keys = [c.get("keystrokes") for c in items]
        if all(isinstance(k, str) for k in keys):
            return [str(k) for k in keys]
    return None


def _render_fenced(domain: str, lang: str, inner: str, meta: dict) -> SafeString:
    ok, value = try_parse_json(inner)
    keys = _keystrokes(value) if ok else None
    if keys is not None:
        lines = [k[:-1] if k.endswith("\n") else k for k in keys]
        return join(
            format_html(
                '<pre class="action action-cmd term"><span class="prompt">$ </span>{}</pre>',
                ansi_to_html(line),
            )
            for line in lines
        )
    if lang.lower() in ("bash", "sh", "shell", "console", "zsh") and not ok:
        return format_html(
            '<pre class="action action-cmd term"><span class="prompt">$ </span>{}</pre>',
            ansi_to_html(inner.rstrip("\n")),
        )
    return render_action(domain, inner, meta, fences=False)


def _render_call(name: str, args: Any) -> SafeString:
    if isinstance(args, dict) and _is_flat(args):
        # Small flat arguments read best as one line: name(key="value", n=3).
        pairs = [
            format_html(
                '<span class="j-key">{}</span>=<span class="j-val">{}</span>',
                key,
                json.dumps(val, ensure_ascii=False),
            )
            for key, val in args.items()
        ]
        return format_html(
            '<div class="action action-call"><span class="tool-name">{}</span>'
            '<span class="j-punct">(</span>{}<span class="j-punct">)</span></div>',
            name,
            join(pairs, mark_safe(", ")),
        )
    return format_html(
        '<div class="action action-call"><span class="tool-name">{}</span>{}</div>',
        name,
        render_json_value(args)
        if args not in (None, {}, "")
        else format_html('<span class="j-punct">{}</span>', "()"),
    )


def _is_flat(args: dict) -> bool:
    if len(args) > 6:
        return False
    if not all(v is None or isinstance(v, str | int | float | bool) for v in args.values()):
        return False
    return sum(len(str(k)) + len(str(v)) for k, v in args.items()) <= 160 and not any(
        isinstance(v, str) and "\n" in v for v in args.values()
    )


_REACT_RE = re.compile(
    r"^\s*(thought|reason|reasoning)\s*:\s*(.*?)\n\s*action\s*:\s*(\S.*)$", re.I | re.S
)


def _tool_call(value: Any) -> tuple[str, Any] | None:
    """(name, arguments) when the JSON is a single tool/function call."""
    if not isinstance(value, dict):
        return None
    fn = value.get("function")
    if isinstance(fn, dict) and isinstance(fn.get("name"), str):
        value = fn
    if isinstance(value.get("action_type"), str):
        # AndroidWorld JSON actions: {"action_type": "click", "index": 3}
        rest = {k: v for k, v in value.items() if k != "action_type"}
        return value["action_type"], rest
    name = value.get("name") or value.get("tool") or value.get("tool_name")
    if isinstance(fn, str) and not name:
        name = fn
    if not isinstance(name, str) or not name:
        return None
    extra = set(value) - {
        "name",
        "tool",
        "tool_name",
        "function",
        "arguments",
        "args",
        "parameters",
        "input",
        "id",
        "type",
        "call_id",
    }
    if extra:
        return None
    args = next(
        (value[k] for k in ("arguments", "args", "parameters", "input") if k in value), None
    )
    if isinstance(args, str):
        ok, parsed = try_parse_json(args)
        if ok:
            args = parsed
    return name, args
