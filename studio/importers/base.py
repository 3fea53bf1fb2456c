"""What every importer produces and the helpers they share.

An importer turns one file into `ParsedTrajectory` objects (plain data, no Django); the
service in `studio.services.imports` writes them. Errors name the file, the line (JSONL) or
record / JSON path, and the field, e.g. `bad.jsonl line 3: field "prompt" must be a list of
strings`.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Literal, TypeVar, overload

from studio.importers.limits import Limits, line_and_column, size_text, too_deep_at

Progress = Callable[[float], None]
# The studio's domains (studio.models.Domain); kept here so importers stay free of Django.
DOMAINS = ("mcp", "search", "terminal", "swe", "android", "web", "os")


class ImportError_(Exception):  # noqa: N801 (the agreed name; avoids shadowing the builtin)
    """Base of every importer error; the message is meant for the user as is."""


class ImportFailure(ImportError_):
    """A file that cannot be imported: the message names file, line/record and field."""


class LimitExceeded(ImportFailure):
    """A file past one of the import limits (studio.importers.limits; the message names the
    limit and the environment variable that sets it), or a kept JSON field the database
    cannot store (NaN); whatever the format, so never blamed on a format chosen."""


@dataclass
class ParsedStep:
    action: str
    observation: str
    state: str = ""
    thinking: str = ""
    raw_prompt: str = ""
    meta: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, Any] = field(default_factory=dict)


@dataclass
class ParsedBranch:
    """A recorded alternative of the trajectory (a path a search agent explored and left):
    it forks from branch `parent` (0: the recorded branch, k: the k-th of these) at step
    `fork_index`, inheriting its steps before that, and owns `steps` from there on."""

    parent: int
    fork_index: int
    steps: list[ParsedStep]
    name: str


@dataclass
class ParsedTrajectory:
    title: str
    task_instruction: str = ""
    steps: list[ParsedStep] = field(default_factory=list)
    branches: list[ParsedBranch] = field(default_factory=list)  # recorded alternatives
    system_prompt: str = ""  # the world-model system prompt (AgentWorldBench, native)
    tools: list[Any] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)
    tags: list[str] = field(default_factory=list)
    domain: str | None = None  # None: the importer's default or the path decides
    # Where in the file it came from (line, record, JSON path), for errors found later.
    where: Where | None = None
    # Why the content's own domain is unusable (names file, line, field); an error unless
    # the user forces a domain.
    domain_problem: str = ""


class Where:
    """A position in the file for error messages: `loc` is the line or record ("line 3",
    "record 2"), `path` the JSON path inside it ("traj[5].tool_calls[0]")."""

    def __init__(self, file: str, loc: str = "", path: str = ""):
        self.file = file
        self.loc = loc
        self.path = path

    def sub(self, suffix: str) -> Where:
        path = f"{self.path}{suffix}" if self.path else suffix.lstrip(".")
        return Where(self.file, self.loc, path)

    def _prefix(self) -> str:
        text = self.file
        if self.loc:
            text += f" {self.loc}"
        if self.path:
            text += f" at {self.path}"
        return text

    def fail(self, field_name: str, problem: str) -> ImportFailure:
        return ImportFailure(f'{self._prefix()}: field "{field_name}" {problem}')

    def error(self, problem: str) -> ImportFailure:
        return ImportFailure(self.problem(problem))

    def problem(self, problem: str) -> str:
        """The message of an error here: `file line 3 at path: problem`."""
        return f"{self._prefix()}: {problem}"


_TYPE_NAMES = {str: "a string", list: "a list", dict: "an object", int: "an integer"}


_T = TypeVar("_T")


@overload
def get(
    obj: Any, key: str, kind: type[_T], where: Where, *, required: Literal[True] = True
) -> _T: ...
@overload
def get(obj: Any, key: str, kind: type[_T], where: Where, *, required: bool) -> _T | None: ...
@overload
def get(
    obj: Any, key: str, kind: tuple[type, ...], where: Where, *, required: bool = True
) -> Any: ...
def get(
    obj: Any, key: str, kind: type | tuple[type, ...], where: Where, *, required: bool = True
) -> Any:
    """obj[key] checked against `kind`; a missing optional key gives None.

    Typed by `kind`: `get(msg, "role", str, at)` is a `str`, with `required=False` a
    `str | None`."""
    if not isinstance(obj, dict):
        raise where.error("expected a JSON object")
    if key not in obj or obj[key] is None:
        if required:
            raise where.fail(key, "is missing")
        return None
    value = obj[key]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        names = " or ".join(_TYPE_NAMES.get(k, k.__name__) for k in kinds)
        raise where.fail(key, f"must be {names}")
    return value


def optional_dict(obj: dict[str, Any], key: str) -> dict[str, Any]:
    """obj[key] when it is a JSON object, else an empty one: for optional parts of a record
    whose absence (or another type) is not an error."""
    value = obj.get(key)
    return value if isinstance(value, dict) else {}


def optional_list(obj: dict[str, Any], key: str) -> list[Any]:
    """obj[key] when it is a JSON list, else an empty one (see `optional_dict`)."""
    value = obj.get(key)
    return value if isinstance(value, list) else []


def get_str_list(obj: dict, key: str, where: Where) -> list[str]:
    value = obj.get(key) if isinstance(obj, dict) else None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise where.fail(key, "must be a list of strings")
    return value


def tool_call_action(name: str, arguments: Any) -> str:
    """The shown action of a tool call: `{"name": ..., "arguments": {...}}` as JSON text.

    Arguments given as a JSON string are decoded so the action reads as one object; a string
    that is not JSON is kept as is."""
    if isinstance(arguments, str):
        try:
            decoded = strict_loads(arguments) if arguments.strip() else {}
        except (json.JSONDecodeError, NonFiniteNumber):
            # not JSON (NaN and Infinity are not JSON either): the text is the arguments
            pass
        else:
            arguments = decoded
    return json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)


def content_text(content: Any) -> str:
    """Text of a chat message content: a string, or a list of parts (text kept, images noted)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, dict):
                if part.get("type") in ("image_url", "image"):
                    parts.append("[image]")
                elif isinstance(part.get("text"), str):
                    parts.append(part["text"])
        return "\n".join(parts)
    return json.dumps(content, ensure_ascii=False)


def as_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


def shorten(text: str, limit: int = 120) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


class NonFiniteNumber(ValueError):
    """A JSON text holds NaN, Infinity or a number too large for a float (1e999): Python's
    `json` reads them, but they are not JSON, no database column stores them (PostgreSQL's
    jsonb refuses them) and every export would write invalid JSON. `keys` is the path to
    the first one (object keys and list indexes), `text` how the file wrote it."""

    def __init__(self, text: str, keys: list[str | int]):
        super().__init__(text)
        self.text = text
        self.keys = keys


class _NonFinite:
    """Stands in for a non-finite number while a text is parsed, so it can be found."""

    __slots__ = ("text",)

    def __init__(self, text: str):
        self.text = text


def strict_loads(text: str) -> Any:
    """`json.loads`, refusing NaN, Infinity, -Infinity and numbers that overflow a float
    (NonFiniteNumber names where the first one is)."""
    found: list[_NonFinite] = []

    def constant(word: str) -> _NonFinite:
        found.append(_NonFinite(word))
        return found[-1]

    def number(digits: str) -> float | _NonFinite:
        value = float(digits)
        return value if math.isfinite(value) else constant(digits)

    value = json.loads(text, parse_constant=constant, parse_float=number)
    if found:
        raise NonFiniteNumber(found[0].text, _path_to(value, found[0]))
    return value


def _path_to(value: Any, target: _NonFinite) -> list[str | int]:
    """The keys from `value` down to `target` (walked without recursion: the depth limit
    bounds the stack of `json.loads`, not of a walk after it)."""
    stack: list[tuple[Any, list[str | int]]] = [(value, [])]
    while stack:
        item, keys = stack.pop()
        if item is target:
            return keys
        if isinstance(item, dict):
            stack.extend((v, [*keys, k]) for k, v in reversed(item.items()))
        elif isinstance(item, list):
            stack.extend((v, [*keys, i]) for i, v in reversed(list(enumerate(item))))
    return []


def non_finite_failure(exc: NonFiniteNumber, where: Where, *, numbered: bool) -> ImportFailure:
    """`file line 3 at traj[0]: field "metadata" holds a number JSON cannot store (NaN or
    infinity): NaN at scores.f1`. The field is named as the importers name theirs: the key
    after the last list index on the way (a record of a list, a step), with the JSON path
    to it before and the rest of the way after; a document's top-level item is its record."""
    keys = list(exc.keys)
    loc = where.loc
    if numbered and keys and isinstance(keys[0], int):
        loc = f"record {keys.pop(0)}"
    split = max(
        (
            i + 1
            for i, k in enumerate(keys[:-1])
            if isinstance(k, int) and isinstance(keys[i + 1], str)
        ),
        default=0,
    )
    path = _keys_text(keys[:split])
    at = Where(
        where.file, loc, f"{where.path}.{path}" if where.path and path else where.path or path
    )
    problem = f"holds a number JSON cannot store (NaN or infinity): {exc.text}"
    field_name = keys[split] if split < len(keys) else None
    if isinstance(field_name, str):
        inside = _keys_text(keys[split + 1 :])
        return at.fail(field_name, problem + (f" at {inside}" if inside else ""))
    inside = _keys_text(keys[split:])
    return at.error(problem.replace("holds a", "a", 1) + (f" at {inside}" if inside else ""))


def _keys_text(keys: list[str | int]) -> str:
    text = ""
    for k in keys:
        text += f"[{k}]" if isinstance(k, int) else (f".{k}" if text else k)
    return text


def decode_json(raw: bytes, where: Where, limits: Limits, *, numbered: bool = False) -> Any:
    """One JSON text (a JSONL line or a whole document) decoded as `json.loads` would (UTF-8,
    or UTF-16/32 told by its first bytes), its nesting checked before it is parsed.

    `numbered`: the text has lines of its own (a whole document), so errors name the line
    inside it; a JSONL line's `where` already names its line."""

    def at(line: int) -> Where:
        return Where(where.file, f"line {line}") if numbered else where

    try:
        text = raw.decode(json.detect_encoding(raw), "surrogatepass")
    except UnicodeDecodeError as exc:
        raise at(raw.count(b"\n", 0, exc.start) + 1).error("is not UTF-8 text") from None
    deep = too_deep_at(text, limits.max_depth)
    if deep is not None:
        line, column = line_and_column(text, deep)
        raise LimitExceeded(
            at(line).problem(
                f"JSON nested deeper than {limits.max_depth} levels at column {column} "
                f"({limits.depth_note()})"
            )
        )
    try:
        return strict_loads(text)
    except NonFiniteNumber as exc:
        raise non_finite_failure(exc, where, numbered=numbered) from None
    except json.JSONDecodeError as exc:
        # A JSONL line's own column, even where the error is past its end (an open object)
        column = exc.colno if numbered else exc.pos + 1
        raise at(exc.lineno).error(f"invalid JSON ({exc.msg}, column {column})") from None
    except ValueError as exc:  # an integer of more digits than Python converts (4,300)
        raise where.error(f"invalid JSON (a number: {str(exc).split(':')[0]})") from None
    except RecursionError:  # only if the depth limit was set above what the stack holds
        raise LimitExceeded(
            where.problem(f"JSON nested too deeply to parse ({limits.depth_note()})")
        ) from None


def read_line(fh: IO[bytes], where: Where, limits: Limits) -> bytes:
    """The next line of `fh` (b"" at the end), refused once it passes the line limit: never
    more than the limit is read into memory."""
    raw = fh.readline(limits.max_line_bytes + 1)
    if len(raw) > limits.max_line_bytes and not raw.endswith(b"\n"):
        raise LimitExceeded(
            where.problem(f"longer than {size_text(limits.max_line_bytes)} ({limits.line_note()})")
        )
    return raw


@dataclass
class Source:
    """A file to import: its path, the name used in messages, and its decoded JSON.

    `data` is the whole document for JSON files; for JSONL files it is None and `lines()`
    streams (line number, record) pairs without holding the file in memory. `limits` bound
    what is read (studio.importers.limits)."""

    path: Path
    name: str
    kind: str  # "json" | "jsonl"
    data: Any = None
    progress: Progress | None = None
    limits: Limits = field(default_factory=Limits)

    def report(self, fraction: float) -> None:
        if self.progress is not None:
            self.progress(max(0.0, min(1.0, fraction)))

    def lines(self) -> Iterator[tuple[int, Any]]:
        for number, _offset, record in self.lines_at():
            yield number, record

    def lines_at(self) -> Iterator[tuple[int, int, Any]]:
        """(line number, byte offset, record) of every non-blank JSONL line, one at a time;
        `record_at` reads one of them again."""
        size = max(self.path.stat().st_size, 1)
        done = 0
        number = 0
        with self.path.open("rb") as fh:
            while True:
                number += 1
                where = Where(self.name, f"line {number}")
                offset = done
                raw = read_line(fh, where, self.limits)
                if not raw:
                    break
                done += len(raw)
                if raw.strip():
                    yield number, offset, decode_json(raw, where, self.limits)
                if number % 200 == 0:
                    self.report(done / size)
        self.report(1.0)

    def record_at(self, number: int, offset: int) -> Any:
        """The record of JSONL line `number`, which starts at byte `offset`."""
        where = Where(self.name, f"line {number}")
        with self.path.open("rb") as fh:
            fh.seek(offset)
            return decode_json(read_line(fh, where, self.limits), where, self.limits)

    def part(self, start: float, span: float) -> Source:
        """This source reporting its progress into [start, start + span] of the caller's."""
        outer = self.progress
        inner = None if outer is None else (lambda fraction: outer(start + span * fraction))
        return dataclasses.replace(self, progress=inner)

    def records(self) -> Iterator[tuple[Where, Any]]:
        """JSONL lines, or the items of a top-level JSON list, each with its position."""
        if self.kind == "jsonl":
            for number, record in self.lines():
                yield Where(self.name, f"line {number}"), record
            return
        items = self.data if isinstance(self.data, list) else [self.data]
        for i, item in enumerate(items):
            yield Where(self.name, f"record {i}"), item
            if i % 50 == 0:
                self.report(i / max(len(items), 1))
        self.report(1.0)
