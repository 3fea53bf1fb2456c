"""Rows of training-data formats, one per `Example` (a step to train on).

- `agentworldbench`: benchmark rows as the AgentWorldBench files hold them, to evaluate on
  (or to hand back a corrected copy of an imported benchmark).
- `openai`, `sharegpt`, `llamafactory`, `ms-swift`: chat fine-tuning rows for those trainers;
  each either teaches the world model (`turns="wm"`: predict the observation of an action)
  or the agent (`turns="agent"`: choose the next action, tool calls in the trainer's shape).
- `wm-turns`, `agent-turns`: TRL conversational prompt-completion rows of the world-model or
  the agent turn, with a `meta` column naming where each row came from.

World-model prompts are built with `inference.prompts`, so they are byte-identical to what
the studio sends the model. Rows of one branch share their history messages and lists
(computed once per branch): treat rows as read-only."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from inference.prompts import format_observation, format_turn_prompt
from inference.types import Turn
from studio.exports.examples import Example, ExportTurn


@dataclass(frozen=True)
class FormatSpec:
    name: str
    label: str
    description: str
    extension: str
    has_turns_option: bool


@dataclass(frozen=True)
class ExportOptions:
    turns: str = "wm"  # "wm" (world-model turns) | "agent" (agent turns), chat formats only
    thinking: bool = False  # the world model's thinking before the observation (wm targets)
    llamafactory_style: str = "sharegpt"  # "sharegpt" | "alpaca"


class UnknownFormat(ValueError):
    pass


FORMATS: dict[str, FormatSpec] = {
    spec.name: spec
    for spec in (
        FormatSpec(
            "agentworldbench",
            "AgentWorldBench JSONL",
            "Benchmark rows (task, id, prompt, response, turn_idx, ...) as the AgentWorldBench "
            "files hold them, to evaluate world models on.",
            "jsonl",
            False,
        ),
        FormatSpec(
            "openai",
            "OpenAI chat fine-tuning JSONL",
            "Chat messages (with tool calls and tools for agent turns) in the shape OpenAI's "
            "fine-tuning API accepts.",
            "jsonl",
            True,
        ),
        FormatSpec(
            "sharegpt",
            "ShareGPT JSONL",
            "Conversations of human, gpt, function_call and observation turns with system and "
            "tools columns, the ShareGPT variant LLaMA-Factory reads.",
            "jsonl",
            True,
        ),
        FormatSpec(
            "llamafactory",
            "LLaMA-Factory dataset",
            "ShareGPT- or Alpaca-style rows plus the dataset_info.json entry that registers them "
            "with LLaMA-Factory.",
            "jsonl",
            True,
        ),
        FormatSpec(
            "ms-swift",
            "ms-swift messages JSONL",
            "Messages with tool_call and tool_response roles and a tools string: ms-swift's "
            "standard dataset format.",
            "jsonl",
            True,
        ),
        FormatSpec(
            "wm-turns",
            "World-model turns (TRL prompt-completion)",
            "Each step's world-model prompt and the observation to predict, as TRL "
            "conversational prompt-completion rows with provenance metadata.",
            "jsonl",
            False,
        ),
        FormatSpec(
            "agent-turns",
            "Agent turns (TRL prompt-completion)",
            "Each step's agent conversation so far and the action taken, as TRL "
            "conversational prompt-completion rows with provenance metadata.",
            "jsonl",
            False,
        ),
    )
}

TURNS = ("wm", "agent")
LLAMAFACTORY_STYLES = ("sharegpt", "alpaca")

# LLaMA-Factory's ShareGPT tags (its data/README): the roles our sharegpt rows use.
SHAREGPT_TAGS = {
    "role_tag": "from",
    "content_tag": "value",
    "user_tag": "human",
    "assistant_tag": "gpt",
    "observation_tag": "observation",
    "function_tag": "function_call",
    "system_tag": "system",
}

_ENVIRONMENTS = {
    "mcp": "a set of tool servers",
    "search": "a web search engine",
    "terminal": "a Linux terminal",
    "swe": "a software repository",
    "android": "an Android phone",
    "web": "a web browser",
    "os": "a desktop operating system",
}


def agent_system_prompt(domain: str) -> str:
    """The agent's system message in agent turns (tools travel in the format's own slot)."""
    where = _ENVIRONMENTS.get(domain, "a software environment")
    return (
        f"You are an agent working in {where}. Complete the task one step at a time: each "
        "reply is a single action, and the environment answers it with an observation."
    )


def row_for(fmt: str, example: Example, options: ExportOptions) -> dict[str, Any] | None:
    """The row of `example` in format `fmt`, or None when the example gives none there (a
    world-model turn of a final answer, an agent turn with no action, an imported benchmark
    turn the file had no row for)."""
    build = _BUILDERS.get(fmt)
    if build is None:
        raise UnknownFormat(f"unknown export format {fmt!r}; expected one of: {', '.join(FORMATS)}")
    return build(example, options)


def dataset_info_entry(name: str, options: ExportOptions, file_name: str) -> dict[str, Any]:
    """LLaMA-Factory's `dataset_info.json` entry `{name: {...}}` for rows written by
    `row_for("llamafactory", ..., options)` into `file_name`."""
    agent = _turns(options) == "agent"
    entry: dict[str, Any] = {"file_name": file_name}
    if _style(options) == "alpaca":
        entry["formatting"] = "alpaca"
        columns = {
            "prompt": "instruction",
            "query": "input",
            "response": "output",
            "system": "system",
            "history": "history",
        }
    else:
        entry["formatting"] = "sharegpt"
        columns = {"messages": "conversations", "system": "system"}
        entry["tags"] = dict(SHAREGPT_TAGS)
    if agent:
        columns["tools"] = "tools"
    entry["columns"] = columns
    return {name: entry}


# -- options ------------------------------------------------------------------------------------


def _turns(options: ExportOptions) -> str:
    if options.turns not in TURNS:
        raise ValueError(f"unknown turns option {options.turns!r}; expected one of: wm, agent")
    return options.turns


def _style(options: ExportOptions) -> str:
    if options.llamafactory_style not in LLAMAFACTORY_STYLES:
        raise ValueError(
            f"unknown LLaMA-Factory style {options.llamafactory_style!r}; "
            "expected one of: sharegpt, alpaca"
        )
    return options.llamafactory_style


# -- per-branch memo ----------------------------------------------------------------------------
# The examples of a branch share one `steps` list; what depends only on the steps (turn
# prompts, observations, history messages) is computed once for it and sliced per row. One
# branch is remembered per thread, keyed by the identity of its steps list.


class _Branch:
    __slots__ = ("steps", "size", "task", "memo")

    def __init__(self, steps: list[ExportTurn], task: str) -> None:
        self.steps = steps
        self.size = len(steps)
        self.task = task
        self.memo: dict[str, Any] = {}


_local = threading.local()


def _memo(example: Example) -> dict[str, Any]:
    branch: _Branch | None = getattr(_local, "branch", None)
    steps = example.steps
    if (
        branch is None
        or branch.steps is not steps
        or branch.size != len(steps)
        or branch.task != example.task_instruction
    ):
        branch = _Branch(steps, example.task_instruction)
        _local.branch = branch
    return branch.memo


def _base(example: Example) -> tuple[list[str], list[str]]:
    """Every step's turn prompt and its observation as the world model's history shows it
    (the AgentWorldBench `prompt` and `response` lists)."""
    memo = _memo(example)
    base = memo.get("base")
    if base is None:
        task = example.task_instruction
        prompts: list[str] = []
        responses: list[str] = []
        for number, step in enumerate(example.steps, 1):
            turn = Turn(
                action=step.action,
                observation=step.observation,
                state=step.state,
                raw_prompt=step.raw_prompt,
                raw_response=step.raw_response,
            )
            prompts.append(format_turn_prompt(number, turn, task))
            responses.append(format_observation(turn, number))
        base = memo["base"] = (prompts, responses)
    return base


def _memoized(example: Example, key: str, build: Callable[[], Any]) -> Any:
    memo = _memo(example)
    value = memo.get(key)
    if value is None:
        value = memo[key] = build()
    return value


# -- world-model turns --------------------------------------------------------------------------


def _wm_target(turn: ExportTurn, options: ExportOptions) -> str:
    answer = f"<predicted_observation>\n{turn.observation}\n</predicted_observation>"
    if options.thinking and turn.thinking_is_world_model:
        thinking = turn.thinking.strip()
        if thinking:
            return f"<think>\n{thinking}\n</think>\n\n{answer}"
    return answer


def _wm_chat_history(example: Example) -> list[dict[str, Any]]:
    def build() -> list[dict[str, Any]]:
        prompts, responses = _base(example)
        flat: list[dict[str, Any]] = []
        for prompt, response in zip(prompts, responses, strict=True):
            flat.append({"role": "user", "content": prompt})
            flat.append({"role": "assistant", "content": response})
        return flat

    return _memoized(example, "wm-chat", build)


def _wm_chat(example: Example, options: ExportOptions) -> list[dict[str, Any]] | None:
    """system?, user/assistant per earlier turn, the current user turn prompt, the target."""
    turn = example.turn
    if turn.final:
        return None
    position = example.position
    prompts, _ = _base(example)
    history = _wm_chat_history(example)
    messages: list[dict[str, Any]] = (
        [{"role": "system", "content": example.system_prompt}] if example.system_prompt else []
    )
    messages += history[: 2 * position]
    messages.append({"role": "user", "content": prompts[position]})
    messages.append({"role": "assistant", "content": _wm_target(turn, options)})
    return messages


def _wm_sharegpt(example: Example, options: ExportOptions) -> dict[str, Any] | None:
    turn = example.turn
    if turn.final:
        return None

    def build() -> list[dict[str, Any]]:
        prompts, responses = _base(example)
        flat: list[dict[str, Any]] = []
        for prompt, response in zip(prompts, responses, strict=True):
            flat.append({"from": "human", "value": prompt})
            flat.append({"from": "gpt", "value": response})
        return flat

    position = example.position
    prompts, _ = _base(example)
    conversations = _memoized(example, "wm-sharegpt", build)[: 2 * position]
    conversations.append({"from": "human", "value": prompts[position]})
    conversations.append({"from": "gpt", "value": _wm_target(turn, options)})
    return {"conversations": conversations, "system": example.system_prompt}


def _wm_alpaca(example: Example, options: ExportOptions) -> dict[str, Any] | None:
    turn = example.turn
    if turn.final:
        return None

    def build() -> list[list[str]]:
        prompts, responses = _base(example)
        return [[p, r] for p, r in zip(prompts, responses, strict=True)]

    position = example.position
    prompts, _ = _base(example)
    return {
        "instruction": prompts[position],
        "input": "",
        "output": _wm_target(turn, options),
        "system": example.system_prompt,
        "history": _memoized(example, "wm-alpaca", build)[:position],
    }


# -- agent turns --------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Call:
    name: str
    arguments: Any  # as the action holds them: usually an object, a string when not JSON
    id: str

    @property
    def arguments_json(self) -> str:
        if isinstance(self.arguments, str):
            return self.arguments
        return json.dumps(self.arguments, ensure_ascii=False)

    @property
    def text(self) -> str:
        """`{"name": ..., "arguments": ...}` as JSON text (function_call / tool_call content)."""
        return json.dumps({"name": self.name, "arguments": self.arguments}, ensure_ascii=False)


def _call_of(step: ExportTurn) -> _Call | None:
    """The tool call a step's action is (`{"name": ..., "arguments": ...}` JSON text, as the
    importers write tool calls), or None for an action that is plain text."""
    text = step.action.strip()
    if not text.startswith("{"):
        return None
    try:
        parsed = json.loads(text)
    except ValueError:
        return None
    if not isinstance(parsed, dict) or "arguments" not in parsed:
        return None
    name = step.tool_name or parsed.get("name")
    if not isinstance(name, str) or not name:
        return None
    return _Call(name, parsed["arguments"], step.call_id or f"call_{step.index}")


def _calls(example: Example) -> list[_Call | None]:
    return _memoized(example, "calls", lambda: [_call_of(step) for step in example.steps])


def _agent_user(example: Example) -> str:
    return example.task_instruction or example.title


def _function_schema(tool: Any) -> dict[str, Any] | None:
    """A tool definition as an OpenAI function schema {name, description?, parameters}:
    OpenAI `{"type": "function", "function": {...}}` entries are unwrapped, bare and MCP
    (`inputSchema`) definitions reshaped; what names no tool is left out."""
    if isinstance(tool, str):
        try:
            tool = json.loads(tool)
        except ValueError:
            return None
    if not isinstance(tool, dict):
        return None
    if tool.get("type") == "function" and isinstance(tool.get("function"), dict):
        return tool["function"]
    name = tool.get("name")
    if not isinstance(name, str) or not name:
        return None
    schema: dict[str, Any] = {"name": name}
    if isinstance(tool.get("description"), str):
        schema["description"] = tool["description"]
    parameters = tool.get("parameters") or tool.get("inputSchema") or tool.get("input_schema")
    schema["parameters"] = parameters or {"type": "object", "properties": {}}
    return schema


def _schemas(example: Example) -> list[dict[str, Any]]:
    """The example's tools as function schemas (memoized while the branch's tools list is
    the same object)."""
    tools = example.tools
    if not tools:
        return []
    memo = _memo(example)
    cached = memo.get("schemas")
    if cached is not None and cached[0] is tools:
        return cached[1]
    schemas = [s for s in (_function_schema(t) for t in tools) if s is not None]
    memo["schemas"] = (tools, schemas)
    return schemas


def _openai_tools(example: Example) -> list[dict[str, Any]]:
    return [{"type": "function", "function": s} for s in _schemas(example)]


def _no_action(example: Example) -> bool:
    return not example.turn.action.strip()


def _agent_openai_steps(example: Example) -> list[dict[str, Any]]:
    """Per step: the agent's message (text, or an assistant tool call), then the
    observation (a `tool` message answering the call, or a user message)."""

    def build() -> list[dict[str, Any]]:
        flat: list[dict[str, Any]] = []
        for step, call in zip(example.steps, _calls(example), strict=True):
            if call is None:
                flat.append({"role": "assistant", "content": step.action})
                flat.append({"role": "user", "content": step.observation})
                continue
            flat.append(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": call.id,
                            "type": "function",
                            "function": {"name": call.name, "arguments": call.arguments_json},
                        }
                    ],
                }
            )
            flat.append({"role": "tool", "tool_call_id": call.id, "content": step.observation})
        return flat

    return _memoized(example, "agent-openai", build)


def _agent_openai(example: Example) -> tuple[list[dict[str, Any]], list[dict[str, Any]]] | None:
    """(messages up to and including the target action, tools) of an agent turn."""
    if _no_action(example):
        return None
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": agent_system_prompt(example.domain)},
        {"role": "user", "content": _agent_user(example)},
    ]
    messages += _agent_openai_steps(example)[: 2 * example.position + 1]
    return messages, _openai_tools(example)


def _agent_text(example: Example) -> list[str]:
    """Each step's action as the conversation shows it (a tool call as its JSON text)."""

    def build() -> list[str]:
        return [
            step.action if call is None else call.text
            for step, call in zip(example.steps, _calls(example), strict=True)
        ]

    return _memoized(example, "agent-text", build)


# the four turns of an agent's text conversation: its message, what answers it, a tool call,
# the tool's result
SHAREGPT_AGENT_ROLES = ("gpt", "human", "function_call", "observation")
SWIFT_AGENT_ROLES = ("assistant", "user", "tool_call", "tool_response")


def _agent_flat(
    example: Example, key: str, fields: tuple[str, str], roles: tuple[str, str, str, str]
) -> list[dict[str, Any]]:
    """Per step: the agent's text (or its tool call as `{"name","arguments"}` JSON), then the
    observation, as `{fields[0]: role, fields[1]: text}` messages (once per branch)."""
    said, answer, call_role, result = roles
    role_key, text_key = fields

    def build() -> list[dict[str, Any]]:
        flat: list[dict[str, Any]] = []
        texts = _agent_text(example)
        for step, call, text in zip(example.steps, _calls(example), texts, strict=True):
            flat.append({role_key: said if call is None else call_role, text_key: text})
            flat.append({role_key: answer if call is None else result, text_key: step.observation})
        return flat

    return _memoized(example, key, build)


def _agent_sharegpt(example: Example) -> dict[str, Any] | None:
    if _no_action(example):
        return None

    conversations = [{"from": "human", "value": _agent_user(example)}]
    flat = _agent_flat(example, "agent-sharegpt", ("from", "value"), SHAREGPT_AGENT_ROLES)
    conversations += flat[: 2 * example.position + 1]
    schemas = _schemas(example)
    return {
        "conversations": conversations,
        "system": agent_system_prompt(example.domain),
        "tools": json.dumps(schemas, ensure_ascii=False) if schemas else "",
    }


def _agent_alpaca(example: Example) -> dict[str, Any] | None:
    if _no_action(example):
        return None
    texts = _agent_text(example)
    steps = example.steps
    position = example.position
    history: list[list[str]] = []
    if position:
        pairs = _memoized(
            example,
            "agent-alpaca",
            lambda: [[steps[i - 1].observation, texts[i]] for i in range(1, len(steps))],
        )
        history = [[_agent_user(example), texts[0]], *pairs[: position - 1]]
    schemas = _schemas(example)
    return {
        "instruction": steps[position - 1].observation if position else _agent_user(example),
        "input": "",
        "output": texts[position],
        "system": agent_system_prompt(example.domain),
        "history": history,
        "tools": json.dumps(schemas, ensure_ascii=False) if schemas else "",
    }


def _agent_swift(example: Example) -> dict[str, Any] | None:
    if _no_action(example):
        return None

    messages: list[dict[str, Any]] = [
        {"role": "system", "content": agent_system_prompt(example.domain)},
        {"role": "user", "content": _agent_user(example)},
    ]
    flat = _agent_flat(example, "agent-swift", ("role", "content"), SWIFT_AGENT_ROLES)
    messages += flat[: 2 * example.position + 1]
    row: dict[str, Any] = {"messages": messages}
    tools = _openai_tools(example)
    if tools:
        row["tools"] = json.dumps(tools, ensure_ascii=False)
    return row


# -- the formats --------------------------------------------------------------------------------


def _openai(example: Example, options: ExportOptions) -> dict[str, Any] | None:
    if _turns(options) == "wm":
        messages = _wm_chat(example, options)
        return None if messages is None else {"messages": messages}
    agent = _agent_openai(example)
    if agent is None:
        return None
    row: dict[str, Any] = {"messages": agent[0]}
    if agent[1]:
        row["tools"] = agent[1]
    return row


def _sharegpt(example: Example, options: ExportOptions) -> dict[str, Any] | None:
    if _turns(options) == "wm":
        return _wm_sharegpt(example, options)
    return _agent_sharegpt(example)


def _llamafactory(example: Example, options: ExportOptions) -> dict[str, Any] | None:
    wm = _turns(options) == "wm"
    if _style(options) == "sharegpt":
        return _wm_sharegpt(example, options) if wm else _agent_sharegpt(example)
    return _wm_alpaca(example, options) if wm else _agent_alpaca(example)


def _ms_swift(example: Example, options: ExportOptions) -> dict[str, Any] | None:
    if _turns(options) == "wm":
        messages = _wm_chat(example, options)
        return None if messages is None else {"messages": messages}
    return _agent_swift(example)


def _meta(example: Example) -> dict[str, Any]:
    return {
        "trajectory": example.trajectory_id,
        "branch": example.branch_id,
        "step": example.turn.index,
        "domain": example.domain,
        "corrected": example.turn.corrected,
    }


def _wm_turns(example: Example, options: ExportOptions) -> dict[str, Any] | None:
    messages = _wm_chat(example, options)
    if messages is None:
        return None
    return {"prompt": messages[:-1], "completion": messages[-1:], "meta": _meta(example)}


def _agent_turns(example: Example, options: ExportOptions) -> dict[str, Any] | None:
    agent = _agent_openai(example)
    if agent is None:
        return None
    messages, tools = agent
    row: dict[str, Any] = {"prompt": messages[:-1], "completion": messages[-1:]}
    if tools:
        row["tools"] = tools
    row["meta"] = _meta(example)
    return row


def _agentworldbench(example: Example, options: ExportOptions) -> dict[str, Any] | None:
    turn = example.turn
    if turn.final:
        return None
    awb = example.awb_row
    if awb is None and turn.meta.get("awb_source") is True:
        return None  # an imported benchmark turn the file had no row for
    prompts, responses = _base(example)
    position = example.position
    prompt, response = prompts, responses
    if awb is not None:
        task = awb.get("task", example.domain)
        row_id = awb.get("id", f"{example.trajectory_id}:{example.branch_id}")
        total = awb.get("total_turns", len(prompts))
        size = awb.get("row_turns")
        if isinstance(size, int) and position < size < len(prompts):
            prompt, response = prompts[:size], responses[:size]
    else:
        task = example.domain
        row_id = f"{example.trajectory_id}:{example.branch_id}"
        total = len(prompts)
    return {
        "task": task,
        "id": row_id,
        "prompt": prompt,
        "response": response,
        "current_prompt": prompts[position],
        "system_str": example.system_prompt,
        "turn_idx": position + 1,
        "total_turns": total,
    }


_BUILDERS: dict[str, Callable[[Example, ExportOptions], dict[str, Any] | None]] = {
    "agentworldbench": _agentworldbench,
    "openai": _openai,
    "sharegpt": _sharegpt,
    "llamafactory": _llamafactory,
    "ms-swift": _ms_swift,
    "wm-turns": _wm_turns,
    "agent-turns": _agent_turns,
}
assert set(_BUILDERS) == set(FORMATS)
