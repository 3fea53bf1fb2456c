"""Limits on what an import may read, checked before and while parsing (no Django here:
the service passes the settings in).

Python's `json` module and every recursive walk after it (the service's clean-up, the
canonical key, Django's JSON fields) overflow the stack on JSON nested a few hundred to a
few thousand levels deep, and a single line of gigabytes would be read into memory whole. So
a file's size is checked before it is opened, each JSONL line's length while it is read, and
the nesting depth of every JSON text by a cheap scan before `json.loads` sees it; the JSON
fields the studio keeps as they are (trajectory metadata and tools, step meta and timings)
are bounded in depth and size once parsed. A value over a limit is an error naming the file,
the line or record, and the limit: nothing is truncated, so what is imported is what the
file says.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

MB = 1024 * 1024

# The environment variables (studio/settings.py) that set each limit, named in errors.
DEPTH_ENV = "STUDIO_IMPORT_MAX_DEPTH"
FILE_ENV = "STUDIO_IMPORT_MAX_FILE_MB"
LINE_ENV = "STUDIO_IMPORT_MAX_LINE_MB"
FIELD_ENV = "STUDIO_IMPORT_MAX_FIELD_MB"

# ToolBench search trees nest two levels per node (the node and its `children` list), so a
# real answer with a long search path reaches 60-80 levels (the deepest shared file: 32);
# 128 leaves room for those and stays far below Python's recursion limit (1000).
DEFAULT_MAX_DEPTH = 128
# The most a setting may allow: the service's clean-up walk takes two stack frames a level,
# and a worker's stack is already deep when it runs, so 256 is what the stack holds with
# room to spare (measured: that walk overflows near 490 levels from an empty stack).
MAX_DEPTH_CEILING = 256
# A JSON document is parsed whole, in memory (several times its size); JSONL streams.
DEFAULT_MAX_FILE_MB = 1024
DEFAULT_MAX_LINE_MB = 64
# One kept JSON field; AgentWorldBench keeps each turn's whole response in the step's meta.
DEFAULT_MAX_FIELD_MB = 16


@dataclass(frozen=True)
class Limits:
    max_depth: int = DEFAULT_MAX_DEPTH
    max_file_bytes: int = DEFAULT_MAX_FILE_MB * MB
    max_line_bytes: int = DEFAULT_MAX_LINE_MB * MB
    max_field_bytes: int = DEFAULT_MAX_FIELD_MB * MB

    def depth_note(self) -> str:
        return f"limit {DEPTH_ENV}={self.max_depth}"

    def file_note(self) -> str:
        return f"limit {FILE_ENV}={_mb(self.max_file_bytes)}"

    def line_note(self) -> str:
        return f"limit {LINE_ENV}={_mb(self.max_line_bytes)}"

    def field_note(self) -> str:
        return f"limit {FIELD_ENV}={_mb(self.max_field_bytes)}"


def _mb(size: int) -> str:
    return f"{size / MB:g}"


def over(size: int, limit: int) -> str:
    """`1.5 MB, more than 1.0 MB`; in bytes where the rounded sizes would read the same."""
    shown, most = size_text(size), size_text(limit)
    if shown == most:
        shown, most = f"{size:,} bytes", f"{limit:,} bytes"
    return f"{shown}, more than {most}"


def size_text(size: int) -> str:
    """A size for messages: bytes below a kilobyte, else KB or MB with one decimal."""
    if size < 1024:
        return f"{size} bytes"
    if size < MB:
        return f"{size / 1024:.1f} KB"
    return f"{size / MB:.1f} MB"


# The fast path: escaped backslashes and quotes dropped (str.replace, at memory speed), every
# remaining quote delimits a string of valid JSON, so strings go with a plain regex, then
# everything that is not a bracket.
_STRING = re.compile(r'"[^"]*+"')
_NOT_BRACKET = re.compile(r"[^\[\]{}]++")
_SQUARE = str.maketrans("{}", "[]")
# The exact scan: outside strings only these characters matter, and a string is skipped to
# its closing quote in one regex match, so the loop runs once per bracket or string.
_SIGNIFICANT = re.compile(r'["\[\]{}]')
_STRING_REST = re.compile(r'[^"\\]*+(?:\\.[^"\\]*+)*+"?', re.DOTALL)


def too_deep_at(text: str, limit: int) -> int | None:
    """Offset of the first bracket that opens level `limit + 1` of the JSON text, else None.

    Brackets inside strings do not count. The common case costs a few C-level passes (one to
    two times what `json.loads` takes): strings and other characters removed, then each pass
    deletes the innermost `[]` pairs, one level of nesting per pass, so valid JSON within the
    limit is empty after at most `limit` passes. Anything else (too deep, or malformed:
    an unterminated string, a stray closer) is scanned bracket by bracket, which finds the
    place, or none for malformed text that is not too deep (the parser reports it)."""
    unescaped = text.replace("\\\\", "").replace('\\"', "")
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", unescaped)).translate(_SQUARE)
    too_deep_run = "[" * (limit + 1)  # found at once in the usual attack: brackets in a row
    for level in range(limit):
        if not brackets:
            return None
        if level < 2 and too_deep_run in brackets:
            break
        inner_removed = brackets.replace("[]", "")
        if inner_removed == brackets:
            break  # unbalanced: find out below
        brackets = inner_removed
    if not brackets:
        return None
    return _first_too_deep(text, limit)


def _first_too_deep(text: str, limit: int) -> int | None:
    depth = 0
    pos = 0
    search = _SIGNIFICANT.search
    skip_string = _STRING_REST.match
    while True:
        found = search(text, pos)
        if found is None:
            return None
        char = found.group()
        pos = found.end()
        if char == '"':
            rest = skip_string(text, pos)
            pos = rest.end() if rest is not None else len(text)
        elif char in "[{":
            depth += 1
            if depth > limit:
                return found.start()
        else:
            depth -= 1


def line_and_column(text: str, offset: int) -> tuple[int, int]:
    """1-based line and column of `offset` in `text`."""
    line = text.count("\n", 0, offset) + 1
    column = offset - (text.rfind("\n", 0, offset) + 1) + 1
    return line, column


def kept_field_problem(value: Any, limits: Limits) -> str | None:
    """Why a JSON value cannot be kept as a field (too deep or too large), else None.

    Walked without recursion, so a value deeper than the stack allows is measured too."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth > limits.max_depth:
                return f"is nested deeper than {limits.max_depth} levels ({limits.depth_note()})"
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
        elif isinstance(item, float) and not math.isfinite(item):
            # `NaN`, `Infinity` or 1e999: Python reads them, PostgreSQL's jsonb refuses them
            return "holds a number JSON cannot store (NaN or infinity)"
    size = len(json.dumps(value, ensure_ascii=False).encode("utf-8", "surrogatepass"))
    if size > limits.max_field_bytes:
        return f"as JSON is {over(size, limits.max_field_bytes)} ({limits.field_note()})"
    return None
