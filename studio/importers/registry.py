"""The importer registry: formats by name, content-based detection and file loading."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import IO

from studio.importers import (
    agentworldbench,
    androidworld,
    fireact,
    inspect_eval,
    mini_swe_agent,
    native,
    openai_chat,
    openhands,
    swe_agent,
    toolbench,
    webvoyager,
)
from studio.importers.base import (
    ImportFailure,
    LimitExceeded,
    Progress,
    Source,
    Where,
    decode_json,
)
from studio.importers.limits import Limits, over, size_text

# Detection order: the most specific shapes first, plain chat messages last.
IMPORTERS: list[ModuleType] = [
    native,
    inspect_eval,
    toolbench,
    androidworld,
    fireact,
    swe_agent,
    openhands,
    agentworldbench,
    mini_swe_agent,
    webvoyager,
    openai_chat,
]
BY_NAME = {module.NAME: module for module in IMPORTERS}
# Files a directory walk picks up; detection still goes by content.
KNOWN_SUFFIXES = (".json", ".jsonl", ".traj")


def list_formats() -> list[str]:
    return [module.NAME for module in IMPORTERS]


def get_importer(name: str) -> ModuleType:
    try:
        return BY_NAME[name]
    except KeyError:
        raise ImportFailure(
            f'unknown format "{name}" (known: {", ".join(list_formats())})'
        ) from None


def load_source(
    path: Path, name: str, progress: Progress | None = None, limits: Limits | None = None
) -> Source:
    """Decide JSON or JSONL by content: a first line that is a whole JSON value followed by
    more lines is JSONL; anything else must be one JSON document.

    The limits are checked before anything is parsed: the file's size first, then the first
    line's length and nesting (a document nested too deeply is too deep in its first line
    already when that is where its brackets are), then the whole document's."""
    limits = limits or Limits()
    size = path.stat().st_size
    if size > limits.max_file_bytes:
        raise LimitExceeded(
            Where(name).problem(
                f"the file is {over(size, limits.max_file_bytes)} ({limits.file_note()})"
            )
        )
    with path.open("rb") as fh:
        first, number, too_long = _first_line(fh, limits)
        rest = _more_text(fh)
    if not first:
        raise Where(name).error("the file is empty")
    head = None
    if not too_long:
        try:
            head = decode_json(first, Where(name, f"line {number}"), limits)
        except LimitExceeded:
            raise  # too deep in its first line: the file is, whether JSONL or a document
        except ImportFailure:
            if not rest:
                raise
            head = None  # a part of a document whose later lines may make it whole
    if head is not None and isinstance(head, dict | list) and rest:
        return Source(path=path, name=name, kind="jsonl", progress=progress, limits=limits)
    if head is not None and not rest:
        return Source(
            path=path, name=name, kind="json", data=head, progress=progress, limits=limits
        )
    try:
        data = decode_json(path.read_bytes(), Where(name), limits, numbered=True)
    except ImportFailure:
        if too_long and rest:
            # One JSON value on the first line with more after it: JSONL whose line 1 is
            # too long, rather than a document.
            raise _line_too_long(name, number, limits) from None
        raise
    return Source(path=path, name=name, kind="json", data=data, progress=progress, limits=limits)


def _first_line(fh: IO[bytes], limits: Limits) -> tuple[bytes, int, bool]:
    """The first non-blank line (at most the line limit of it), its number, and whether it
    went on past the limit (then the rest of it is skipped)."""
    number = 0
    while True:
        number += 1
        raw = fh.readline(limits.max_line_bytes + 1)
        if not raw:
            return b"", number, False
        if len(raw) > limits.max_line_bytes and not raw.endswith(b"\n"):
            while (more := fh.readline(1024 * 1024)) and not more.endswith(b"\n"):
                pass
            return raw, number, True
        if raw.strip():
            return raw, number, False


def _more_text(fh: IO[bytes]) -> bool:
    """Whether anything but white space follows, read in chunks (never a whole line)."""
    while chunk := fh.read(1024 * 1024):
        if chunk.strip():
            return True
    return False


def _line_too_long(name: str, number: int, limits: Limits) -> LimitExceeded:
    return LimitExceeded(
        Where(name, f"line {number}").problem(
            f"longer than {size_text(limits.max_line_bytes)} ({limits.line_note()})"
        )
    )


def first_record(source: Source):
    if source.kind == "json":
        return source.data
    for _number, record in source.lines():
        return record
    return None


def detect(source: Source) -> ModuleType:
    sample = first_record(source)
    for module in IMPORTERS:
        try:
            if module.sniff(source.kind, sample):
                return module
        except (KeyError, TypeError, AttributeError, IndexError):
            continue
    raise Where(source.name).error(
        f"format not recognised (known formats: {', '.join(list_formats())}; "
        "force one with --format)"
    )


DOMAIN_WORDS = {
    "mcp": "mcp",
    "toolbench": "mcp",
    "tau-bench": "mcp",
    "search": "search",
    "terminal": "terminal",
    "ctf": "terminal",
    "swe": "swe",
    "android": "android",
    "web": "web",
    "os": "os",
}


def domain_from_path(path: Path) -> str | None:
    """A nearby folder named after a domain (…/terminal/…, …/android/…) decides it for
    generic formats whose content does not (openai-chat, native, AgentWorldBench w/o task)."""
    for part in reversed(path.parts[-4:-1]):
        word = part.lower()
        if word in DOMAIN_WORDS:
            return DOMAIN_WORDS[word]
    return None
