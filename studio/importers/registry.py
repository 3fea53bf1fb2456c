"""The importer registry: formats by name, content-based detection and file loading."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

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
from studio.importers.base import ImportFailure, Progress, Source, Where

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


def load_source(path: Path, name: str, progress: Progress | None = None) -> Source:
    """Decide JSON or JSONL by content: a first line that is a whole JSON value followed by
    more lines is JSONL; anything else must be one JSON document."""
    with path.open("rb") as fh:
        first = b""
        for raw in fh:
            if raw.strip():
                first = raw
                break
        rest = any(raw.strip() for raw in fh)
    if not first:
        raise Where(name).error("the file is empty")
    try:
        head = json.loads(first)
    except (json.JSONDecodeError, UnicodeDecodeError):
        head = None
    if head is not None and isinstance(head, dict | list) and rest:
        return Source(path=path, name=name, kind="jsonl", data=None, progress=progress)
    if head is not None and not rest:
        return Source(path=path, name=name, kind="json", data=head, progress=progress)
    try:
        with path.open("rb") as fh:
            data = json.load(fh)
    except json.JSONDecodeError as exc:
        raise Where(name, f"line {exc.lineno}").error(f"invalid JSON ({exc.msg})") from None
    except UnicodeDecodeError:
        raise Where(name).error("is not UTF-8 text") from None
    return Source(path=path, name=name, kind="json", data=data, progress=progress)


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
