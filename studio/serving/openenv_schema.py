"""What a world says about itself at its base URL, as OpenEnv servers do (`openenv validate
--url <base>` reads these): `/openapi.json` (OpenAPI 3.1; its paths are relative to
`servers[0].url`, the world's base), `/metadata` (name, description, version, tasks) and
`/schema` (the JSON Schemas of the actions this world takes, and of the observation and
state it gives). Built from the world's latest version: plain functions of its spec."""

from __future__ import annotations

from typing import Any

from studio.serving.openenv_actions import tool_objects

# The OpenEnv HTTP API profile this server follows ("1.x": `openenv validate` reports
# openenv-http/1.x); a world's own version is `x-world-version` and /metadata's "version".
API_VERSION = "1.0.0"

_TEXT_KEYS = ("action", "text", "command")


def _tasks(spec: Any) -> list[Any]:
    return list(getattr(spec, "tasks", None) or ())


def _task_field(task: Any, key: str) -> Any:
    return task.get(key) if isinstance(task, dict) else getattr(task, key, None)


def action_schema(spec: Any, openai_tools: Any) -> dict[str, Any]:
    """Every action shape the world takes: free-form text, a call of one of its tools
    (`openai_tools`: the world's, with its submit tool) by name, and openenv-core's
    `call_tool` / `list_tools` (`studio.serving.openenv_actions`)."""
    tools = tool_objects(openai_tools)
    choices: list[dict[str, Any]] = [
        {
            "title": "TextAction",
            "description": "A free-form action (a command, a message): its text.",
            "type": "object",
            "properties": {key: {"type": "string"} for key in _TEXT_KEYS},
            "minProperties": 1,
            "maxProperties": 1,
            "additionalProperties": False,
        }
    ]
    for tool in tools:
        choices.append(
            {
                "title": f"ToolCall {tool['name']}",
                "description": tool["description"] or f"A call of tool {tool['name']}.",
                "type": "object",
                "properties": {"name": {"const": tool["name"]}, "arguments": tool["input_schema"]},
                "required": ["name"],
                "additionalProperties": False,
            }
        )
        choices.append(
            {
                "title": f"CallToolAction {tool['name']}",
                "description": "openenv-core's MCPToolClient call of the tool: one step.",
                "type": "object",
                "properties": {
                    "type": {"const": "call_tool"},
                    "tool_name": {"const": tool["name"]},
                    "arguments": tool["input_schema"],
                    "metadata": {"type": "object"},
                },
                "required": ["type", "tool_name"],
                "additionalProperties": False,
            }
        )
    choices.append(
        {
            "title": "ListToolsAction",
            "description": "The world's tools, answered without a step (nothing is recorded).",
            "type": "object",
            "properties": {"type": {"const": "list_tools"}, "metadata": {"type": "object"}},
            "required": ["type"],
            "additionalProperties": False,
        }
    )
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "Action",
        "description": f'An action in world {spec.name!r}: sent as POST /step\'s "action" '
        'or as a WebSocket step message\'s "data".',
        "oneOf": choices,
    }


_TOOL = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "description": {"type": "string"},
        "input_schema": {"type": "object"},
    },
    "required": ["name", "description", "input_schema"],
}


def observation_schema(spec: Any) -> dict[str, Any]:
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "Observation",
        "description": f'What world {spec.name!r} answers (the "observation" of a reset or '
        'step; its "reward" and "done" come beside it).',
        "type": "object",
        "properties": {
            "episode_id": {"type": "string"},
            "text": {"type": "string", "description": "The world model's observation."},
            "task": {"type": "string", "description": "The agent's instruction (reset)."},
            "task_id": {"type": "string"},
            "tools": {"type": "array", "items": _TOOL},
            "step": {"type": "integer", "minimum": 0, "description": "Steps taken so far."},
            "parse_status": {"type": "string"},
            "tool_name": {"type": "string", "description": "A call_tool's tool."},
            "result": {
                "description": "A call_tool's result: data is the world model's text.",
                "type": ["object", "null"],
                "properties": {"data": {"type": "string"}, "is_error": {"type": "boolean"}},
            },
            "error": {
                "description": "A call_tool refused before any step (nothing recorded).",
                "type": ["object", "null"],
                "properties": {
                    "error_type": {"enum": ["invalid_args", "tool_not_found"]},
                    "message": {"type": "string"},
                },
            },
            "metadata": {
                "type": "object",
                "description": "seed, task_id, max_steps (reset); the step's seed, rubric "
                "breakdown, reward parts, reported state and end cause (step).",
            },
        },
    }


def state_schema(spec: Any) -> dict[str, Any]:
    number = {"type": ["number", "null"]}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "State",
        "description": f"An episode of world {spec.name!r} (GET /state?episode_id=, or a "
        "WebSocket state message).",
        "type": "object",
        "properties": {
            "episode_id": {"type": "string"},
            "step_count": {"type": "integer", "minimum": 0, "description": "Steps taken."},
            "world": {"type": ["object", "null"]},
            "task": {"type": "string"},
            "task_id": {"type": ["string", "null"]},
            "seed": {"type": ["integer", "null"]},
            "max_steps": {"type": ["integer", "null"]},
            "status": {"enum": ["running", "done", "cancelled", None]},
            "done": {"type": ["boolean", "null"]},
            "end": {"type": ["object", "null"]},
            "return": number,
        },
        "required": ["episode_id", "step_count"],
    }


def schema(spec: Any, tools: Any) -> dict[str, Any]:
    """GET {base}/schema."""
    return {
        "action": action_schema(spec, tools),
        "observation": observation_schema(spec),
        "state": state_schema(spec),
    }


def metadata(world: Any, version_number: int, spec: Any, tools: Any) -> dict[str, Any]:
    """GET {base}/metadata: OpenEnv's EnvironmentMetadata, plus the world's domain, tools
    and tasks."""
    tasks = [
        {"id": _task_field(t, "id") or "", "instruction": _task_field(t, "instruction") or ""}
        for t in _tasks(spec)
    ]
    return {
        "name": spec.name or world.name,
        "description": spec.description or f"A {spec.domain} world of AgentWorld Studio.",
        "version": str(version_number),
        "domain": spec.domain,
        "author": None,
        "documentation_url": None,
        "tools": [t["function"]["name"] for t in tools],
        "tasks": [t["id"] for t in tasks],
        "readme_content": readme(spec, tools, tasks),
    }


def readme(spec: Any, tools: Any, tasks: list[dict[str, str]]) -> str:
    lines = [f"# {spec.name}", "", spec.description or f"A {spec.domain} world.", ""]
    lines += [
        "A simulated world: a language world model answers each action. Reset an episode "
        '(POST /reset {"task_id"?, "task"?, "seed"?, "max_steps"?}), then step it '
        '(POST /step {"episode_id", "action"}) or play it over the WebSocket /ws.',
        "",
    ]
    if tools:
        lines.append("## Tools")
        for t in tools:
            fn = t["function"]
            lines.append(f"- `{fn['name']}`: {fn.get('description') or 'no description'}")
        lines.append("")
    if tasks:
        lines.append("## Tasks")
        lines += [f"- `{t['id']}`: {t['instruction']}" for t in tasks]
        lines.append("")
    return "\n".join(lines)


def _op(summary: str, *, body: str | None = None, answer: str, query: bool = False) -> dict:
    op: dict[str, Any] = {
        "summary": summary,
        "responses": {
            "200": {"description": "OK", "content": _json_ref(answer)},
            "default": {"description": "An error", "content": _json_ref("Error")},
        },
    }
    if body is not None:
        op["requestBody"] = {"required": False, "content": _json_ref(body)}
    if query:
        op["parameters"] = [
            {"name": "episode_id", "in": "query", "required": True, "schema": {"type": "string"}}
        ]
    return op


def _json_ref(name: str) -> dict[str, Any]:
    return {"application/json": {"schema": {"$ref": f"#/components/schemas/{name}"}}}


def openapi(world: Any, version_number: int, spec: Any, tools: Any, base: str) -> dict[str, Any]:
    """GET {base}/openapi.json: the world's API, its paths relative to `base`."""
    schemas = schema(spec, tools)
    result = {
        "type": "object",
        "properties": {
            "observation": {"$ref": "#/components/schemas/Observation"},
            "reward": {"type": ["number", "null"]},
            "done": {"type": "boolean"},
        },
        "required": ["observation", "reward", "done"],
    }
    components = {
        "Action": schemas["action"],
        "Observation": schemas["observation"],
        "State": schemas["state"],
        "StepResult": result,
        "ResetRequest": {
            "type": "object",
            "properties": {
                "task_id": {"type": "string", "description": "One of /metadata's tasks."},
                "task": {"type": "string", "description": "A task typed for this episode."},
                "seed": {"type": "integer", "description": "Fixes the episode's sampling."},
                "max_steps": {"type": "integer", "minimum": 1},
            },
        },
        "StepRequest": {
            "type": "object",
            "properties": {
                "episode_id": {"type": "string"},
                "action": {"$ref": "#/components/schemas/Action"},
            },
            "required": ["episode_id", "action"],
        },
        "Health": {"type": "object", "properties": {"status": {"const": "healthy"}}},
        "Metadata": {"type": "object", "required": ["name", "description"]},
        "Schemas": {"type": "object", "required": ["action", "observation", "state"]},
        "JsonRpc": {"type": "object", "properties": {"jsonrpc": {"const": "2.0"}}},
        "Error": {
            "type": "object",
            "properties": {"detail": {"type": "string"}, "code": {"type": "string"}},
            "required": ["detail", "code"],
        },
    }
    for name in ("Action", "Observation", "State"):
        components[name] = {k: v for k, v in components[name].items() if k != "$schema"}
    return {
        "openapi": "3.1.0",
        "info": {
            "title": f"{spec.name or world.name} (AgentWorld Studio world)",
            "version": API_VERSION,
            "description": spec.description or "",
            "x-world-version": version_number,
        },
        "servers": [{"url": base}],
        "paths": {
            "/reset": {"post": _op("Start an episode", body="ResetRequest", answer="StepResult")},
            "/step": {"post": _op("Take a step", body="StepRequest", answer="StepResult")},
            "/state": {"get": _op("An episode's state", answer="State", query=True)},
            "/health": {"get": _op("This world, for this token", answer="Health")},
            "/metadata": {"get": _op("The world: name, description, tasks", answer="Metadata")},
            "/schema": {"get": _op("Action, observation and state schemas", answer="Schemas")},
            "/mcp": {"post": _op("MCP JSON-RPC (tools/list, tools/call)", answer="JsonRpc")},
        },
        "x-websocket": {
            "path": "/ws",
            "messages": ["reset", "step", "state", "close"],
            "answers": ["observation", "state", "error"],
        },
        "components": {"schemas": components},
    }
