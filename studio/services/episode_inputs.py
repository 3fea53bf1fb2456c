"""What an outside agent sends, checked before anything is written or any model is asked: one
place for every transport (HTTP, WebSocket, MCP). Each refusal is an `EpisodeError` whose
message names what is wrong and where (`EpisodeInvalid`: HTTP 422, a WebSocket error, an MCP
`isError` result).

- Text must be storable everywhere: no unpaired surrogate (Python's JSON decoder accepts
  `"\\udcff"`, no database or encoder does), no NUL (PostgreSQL's text refuses it), and
  bytes must be UTF-8.
- A tool call must name one of the world's tools and its arguments must satisfy that tool's
  JSON Schema (checked with `jsonschema`), so a bad call costs no model and is no step."""

from __future__ import annotations

import functools
import json
from typing import Any

from studio.services.episodes import EpisodeInvalid


def _bad_text(value: str) -> str | None:
    """Why `value` cannot be stored, or None."""
    if "\x00" in value:
        return "contains a NUL character (\\u0000)"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"contains an unpaired surrogate (\\u{ord(value[exc.start]):04x})"
    return None


def clean_text(value: Any, where: str) -> Any:
    """`value` unchanged when every string in it (keys too) can be stored; else
    EpisodeInvalid naming `where` and the path inside it."""
    problem = _first_bad(value, where)
    if problem is not None:
        raise EpisodeInvalid(problem)
    return value


def _first_bad(value: Any, where: str) -> str | None:
    stack: list[tuple[Any, str]] = [(value, "")]
    while stack:
        item, path = stack.pop()
        if isinstance(item, str):
            why = _bad_text(item)
            if why is not None:
                return f"{where} at {path} {why}" if path else f"{where} {why}"
        elif isinstance(item, dict):
            for key, child in item.items():
                if isinstance(key, str):
                    why = _bad_text(key)
                    if why is not None:
                        return f"a key in {where}{f' at {path}' if path else ''} {why}"
                stack.append((child, f"{path}.{key}" if path else str(key)))
        elif isinstance(item, list):
            stack.extend((child, f"{path}[{i}]") for i, child in enumerate(item))
    return None


def check_tool_call(tools: Any, name: Any, arguments: Any) -> dict[str, Any]:
    """The call's arguments (a dict) when `name` is one of `tools` (OpenAI tools, as a
    world's spec holds them) and the arguments satisfy its JSON Schema; else EpisodeInvalid
    naming the tool and the failing argument."""
    from jsonschema.exceptions import SchemaError

    if not isinstance(name, str) or not name:
        raise EpisodeInvalid("a tool call needs the tool's name (text)")
    arguments = {} if arguments is None else arguments
    if not isinstance(arguments, dict):
        raise EpisodeInvalid(f"the arguments of tool {name!r} must be a JSON object")
    clean_text(arguments, f"the arguments of tool {name!r}")
    known = {t["function"]["name"]: t["function"] for t in tools or ()}
    if name not in known:
        listed = ", ".join(sorted(known)) or "none"
        raise EpisodeInvalid(f"unknown tool {name!r}: this world's tools are {listed}")
    schema = known[name].get("parameters") or {"type": "object"}
    try:
        errors = list(_validator(_schema_key(schema)).iter_errors(arguments))
    except SchemaError:  # a world's schemas are checked when saved; never the agent's fault
        return arguments
    if errors:
        # the same problem named first whatever order the schema's keys were stored in
        # (PostgreSQL's jsonb sorts them): the shallowest, a missing argument before others
        errors.sort(key=lambda e: (len(e.absolute_path), e.validator != "required", str(e.message)))
        error = errors[0]
        path = ".".join(str(p) for p in error.absolute_path)
        at = f" at {path!r}" if path else ""
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise EpisodeInvalid(
            f"the arguments of tool {name!r} break its schema{at}: {error.message}{more}"
        )
    return arguments


def _schema_key(schema: Any) -> str:
    # the validator of one schema, however its keys are ordered
    return json.dumps(schema, separators=(",", ":"), sort_keys=True)


@functools.lru_cache(maxsize=1024)
def _validator(schema_text: str) -> Any:
    """A tool's JSON Schema validator, made once per schema (every tool-call step checks
    one: building it costs more than the check)."""
    from jsonschema import Draft202012Validator

    return Draft202012Validator(json.loads(schema_text))
