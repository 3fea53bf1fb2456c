"""When two actions or observations mean the same: one definition, used by the request (is
this action an edit of the recorded one?) and by the studio's diffs (is this future the same
as that one?), so a label and a diff can never disagree.

- Text: line endings as `\\n`, no whitespace at line ends, no blank lines at either end, no
  terminal colour codes (ANSI escape sequences: how a terminal paints the text, not what it
  says). Indentation and the spaces inside a line are kept: in code and terminal output they
  carry meaning.
- JSON (an object or an array): equal when the values are, whatever the formatting or key
  order; `true` is not `1`, and `1.0` is `1` (one JSON number)."""

from __future__ import annotations

import json
import re
from typing import Any

# A terminal's escape sequences, the one definition (the studio's ANSI renderer uses it too):
# CSI (ESC [ params final: colours, cursor moves; params and final are its groups), OSC
# (ESC ] ... BEL or ESC backslash: titles, links), two-byte escapes, and a lone ESC.
TERMINAL_ESCAPE = re.compile(
    r"\x1b\[([0-9;:?<=>]*)[ -/]*([@-~])"
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"
    r"|\x1b[@-Z\\-_]"
    r"|\x1b"
)


def normalise_text(text: str) -> str:
    if "\x1b" in text:
        text = TERMINAL_ESCAPE.sub("", text)
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    return "\n".join(line.rstrip() for line in lines).strip("\n")


def json_value(text: str) -> tuple[bool, Any]:
    """(True, value) when the text is a JSON object or array, else (False, None)."""
    stripped = text.strip()
    if not stripped or stripped[0] not in "{[":
        return False, None
    try:
        return True, json.loads(stripped)
    except (ValueError, RecursionError):
        return False, None


def _integral(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _integral(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_integral(v) for v in value]
    return value


def canonical_json(value: Any) -> str:
    """One text for each JSON value: keys sorted, no spaces, integral numbers without `.0`."""
    return json.dumps(_integral(value), sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def same_meaning(a: str, b: str) -> bool:
    a_json, a_value = json_value(a)
    b_json, b_value = json_value(b)
    if a_json and b_json:
        return canonical_json(a_value) == canonical_json(b_value)
    return normalise_text(a) == normalise_text(b)
