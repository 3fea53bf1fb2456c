"""The action shapes an OpenEnv client sends a world, told apart before anything runs:

- a free-form action, `{"action": "ls"}` (or `{"text": ...}`, `{"command": ...}`): a step
  (`studio.serving.steps.run_step`);
- a tool call `{"name": tool, "arguments": {...}}` (exactly those keys, `arguments`
  optional): a step once it passes the tool's JSON Schema, as `call_tool`'s does; one that
  does not is refused (EpisodeInvalid, 422) before any model is asked or anything written;
- openenv-core's `MCPToolClient` actions: `{"type": "list_tools"}` answers the world's tools
  (no step, no model, nothing recorded) and `{"type": "call_tool", "tool_name", "arguments"}`
  is one step once its arguments pass the tool's JSON Schema; a call that does not is
  answered as `CallToolObservation` reports a framework error (`"error": {"error_type",
  "message"}`: the client raises it), with no step and no model call.

Plain functions over plain data: the transports (`studio.serving.episodes`) call them."""

from __future__ import annotations

import json
from typing import Any

from studio.services.episodes import EpisodeInvalid, StepResult

LIST_TOOLS = "list_tools"
CALL_TOOL = "call_tool"
TOOL_CALL = "tool_call"  # the plain form, {"name", "arguments"?}
STEP = "step"


def kind_of(action: Any) -> str:
    """Which of the four an action is (anything else is a step, checked by the step)."""
    if isinstance(action, dict):
        kind = action.get("type")
        if kind == LIST_TOOLS:
            return LIST_TOOLS
        if kind == CALL_TOOL and "tool_name" in action:
            return CALL_TOOL
    if is_tool_call(action):
        return TOOL_CALL
    return STEP


def is_tool_call(action: Any) -> bool:
    """Whether `action` calls a tool in any shape the studio reads as a call (the rubric's
    submit detection and the trajectory page read the same, `inference.rubrics.tool_call_of`):
    {"name", "arguments"} with arguments as an object or JSON text (OpenAI, MCP), extra keys
    such as an id, {"tool_name", ...}, an OpenAI {"type": "function", "function": {...}}
    entry, or any of these as JSON text. Such a call is checked against the world's tools
    before any model sees it; free-form actions ({"action": "ls"}) never are."""
    from inference.rubrics import tool_call_of

    return tool_call_of(action) is not None


def plain_call_of(action: Any) -> tuple[str, Any]:
    """(tool name, arguments as sent) of a tool call (`is_tool_call`): arguments given as
    JSON text are read, and text that is not JSON is refused naming the tool."""
    from inference.rubrics import _ARGUMENT_KEYS, tool_call_of

    parsed = tool_call_of(action)
    assert parsed is not None
    name = parsed[0]
    if isinstance(action, str):
        action = json.loads(action)
    if isinstance(action.get("function"), dict):
        action = action["function"]
    raw = next((action[k] for k in _ARGUMENT_KEYS if k in action), None)
    if isinstance(raw, str):
        try:
            raw = json.loads(raw) if raw.strip() else {}
        except (json.JSONDecodeError, RecursionError):
            raise EpisodeInvalid(
                f"the arguments of tool {name!r} are neither an object nor its JSON text"
            ) from None
    return name, raw


def unwrapped(action: Any) -> Any:
    """A tool call sent inside {"action": ...} (the HTTP body's key reused in a WebSocket
    message) is that call."""
    if isinstance(action, dict) and len(action) == 1 and "action" in action:
        inner = action["action"]
        if not isinstance(inner, str) and is_tool_call(inner):
            return inner
    return action


def tool_objects(tools: Any) -> list[dict[str, Any]]:
    """A world's OpenAI tools as MCP tool objects (what `MCPToolClient` parses)."""
    return [
        {
            "name": t["function"]["name"],
            "description": t["function"].get("description") or "",
            "input_schema": dict(t["function"].get("parameters") or {"type": "object"}),
        }
        for t in tools or ()
    ]


def list_tools_payload(tools: Any) -> dict[str, Any]:
    """The answer to `{"type": "list_tools"}` (OpenEnv's ListToolsObservation)."""
    return {
        "observation": {"tools": tool_objects(tools), "metadata": {}},
        "reward": None,
        "done": False,
    }


def call_of(action: Any) -> tuple[Any, Any]:
    """The tool's name and arguments of a `call_tool` action."""
    name = action.get("tool_name")
    arguments = action.get("arguments")
    return name, ({} if arguments is None else arguments)


def refused_call_payload(name: Any, tools: Any, exc: EpisodeInvalid) -> dict[str, Any]:
    """A call refused before any model saw it, as OpenEnv's CallToolObservation with its
    `error` (`MCPToolClient.call_tool` raises RuntimeError naming the tool and the cause)."""
    known = {t["function"]["name"] for t in tools or ()}
    error_type = "invalid_args" if isinstance(name, str) and name in known else "tool_not_found"
    return {
        "observation": {
            "tool_name": name if isinstance(name, str) else "",
            "result": None,
            "error": {"error_type": error_type, "message": str(exc)},
            "metadata": {"recorded": False},
        },
        "reward": None,
        "done": False,
    }


def call_payload(name: str, result: StepResult) -> dict[str, Any]:
    """A tool call's step as OpenEnv's CallToolObservation: `result.data` is the world
    model's text (what `MCPToolClient.call_tool` returns); the step's own observation keys
    (`text`, `step`, `metadata`, ...) stay for clients that read those."""
    text = result.observation.get("text", "")
    is_error = False
    structured = None
    if isinstance(text, str):
        try:
            structured = json.loads(text)
        except ValueError:
            structured = None
        is_error = isinstance(structured, dict) and bool(structured.get("isError"))
    observation = {
        **result.observation,
        "tool_name": name,
        "result": {
            "data": text,
            "content": [{"type": "text", "text": text}],
            "structured_content": structured if isinstance(structured, dict) else None,
            "is_error": is_error,
        },
        "error": None,
    }
    return {"observation": observation, "reward": result.reward, "done": result.done}
