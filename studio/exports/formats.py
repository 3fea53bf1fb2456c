"""Rows of training-data formats, one per `Example` (a step to train on).

- `agentworldbench`: benchmark rows as the AgentWorldBench files hold them, to evaluate on
  (or to hand back a corrected copy of an imported benchmark).
- `openai`, `sharegpt`, `llamafactory`, `ms-swift`: chat fine-tuning rows for those trainers;
  each either teaches the world model (`turns="wm"`: predict the observation of an action)
  or the agent (`turns="agent"`: choose the next action, tool calls in the trainer's shape).
- `wm-turns`, `agent-turns`: TRL conversational prompt-completion rows of the world-model or
  the agent turn, with a `meta` column naming where each row came from.

What trains. A row holds one reviewed target (the dataset item's step) after its context
(the branch's earlier steps). Every format marks or places that context so that trainers
learn the target only, in the trainer's own convention:

- `openai`: per-message `weight` (OpenAI fine-tuning): 0 on every earlier assistant turn,
  1 on the target.
- `ms-swift`: per-message `loss` (ms-swift's custom-dataset field, above `--loss_scale`):
  false on every earlier assistant / tool_call turn, true on the target.
- `sharegpt`, `llamafactory` (both styles): LLaMA-Factory has no per-turn mark; it trains
  every assistant turn unless trained with `mask_history: true` (then only the last turn,
  the target). The dataset_info.json entry says so (`mask_history`), as does the export page.
- `wm-turns`, `agent-turns`: TRL prompt-completion rows: the context is the prompt, the
  target the completion, which is all TRL trains (`completion_only_loss`, its default for
  such rows). TRL's `assistant_only_loss` on messages rows would train every assistant turn.

Every world-model turn of a row, earlier ones and the target alike, is written in the shape
the model is trained to answer in (`<predicted_observation>...</predicted_observation>`).
The turn prompts are built with `inference.prompts`, so they are byte-identical to what the
studio sends the model; `agentworldbench` rows are the benchmark's own shape (earlier turns
as `**Environment Observation:**` messages), unchanged. Rows of one branch share their
history messages and lists (computed once per branch): treat rows as read-only."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from inference.prompts import STATE_HEADER, format_observation, format_turn_prompt
from inference.types import Turn
from studio.exports.examples import Example, ExportTurn
from studio.services.model_identity import world_model_dict


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
    # leave out rows whose context (earlier steps of the branch) holds a rejected step
    drop_rejected_context: bool = False

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ExportOptions:
        """The options stored as a dict (an export job's `options`), ignoring other keys."""
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})


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
            "fine-tuning API accepts; only the target has weight 1.",
            "jsonl",
            True,
        ),
        FormatSpec(
            "sharegpt",
            "ShareGPT JSONL",
            "Conversations of human, gpt, function_call and observation turns with system and "
            "tools columns, the ShareGPT variant LLaMA-Factory reads (train with mask_history: "
            "true).",
            "jsonl",
            True,
        ),
        FormatSpec(
            "llamafactory",
            "LLaMA-Factory dataset",
            "ShareGPT- or Alpaca-style rows plus the dataset_info.json entry that registers them "
            "with LLaMA-Factory; train with mask_history: true.",
            "jsonl",
            True,
        ),
        FormatSpec(
            "ms-swift",
            "ms-swift messages JSONL",
            "Messages with tool_call and tool_response roles and a tools string: ms-swift's "
            "standard dataset format; only the target has loss true.",
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


# The empty think block: what a `--thinking` target without world-model thinking is written
# with, so every target of such an export opens with a think block (Qwen3's chat template
# writes the same empty block for an answer given without thinking).
EMPTY_THINK = "<think>\n\n</think>\n\n"


def trains_world_model(fmt: str, options: ExportOptions) -> bool:
    """Whether the rows of `fmt` with `options` train world-model targets (not agent turns,
    not benchmark rows)."""
    if fmt == "wm-turns":
        return True
    spec = FORMATS.get(fmt)
    return bool(spec and spec.has_turns_option and options.turns == "wm")


def has_thinking(turn: ExportTurn) -> bool:
    """Whether a world-model target has thinking of its own to write (the world model's,
    not the agent's; a corrected observation keeps none)."""
    return turn.thinking_is_world_model and bool(turn.thinking.strip())


def context_rejected(example: Example) -> bool:
    """Whether an earlier step of the example's branch (its context) was rejected."""
    first = _memoized(
        example,
        "first-rejected",
        lambda: next((i for i, s in enumerate(example.steps) if s.rejected), len(example.steps)),
    )
    return first < example.position


def file_suffix(fmt: str, options: ExportOptions) -> str:
    """What an export file's name says after the format: the turns, LLaMA-Factory's style,
    thinking and a dropped rejected context (`openai-wm`, `llamafactory-agent-alpaca`)."""
    parts = [fmt]
    spec = FORMATS.get(fmt)
    if spec is not None and spec.has_turns_option:
        parts.append(_turns(options))
    if fmt == "llamafactory":
        parts.append(_style(options))
    if options.thinking and trains_world_model(fmt, options):
        parts.append("thinking")
    if options.drop_rejected_context:
        parts.append("reviewed-context")
    return "-".join(parts)


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
    # LLaMA-Factory trains every assistant turn of a row unless `mask_history` (a training
    # argument, which it does not read from here): the entry names it so the file says how
    # these rows train; set `mask_history: true` in the training config.
    entry["mask_history"] = True
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


def _wm_answer(turn: ExportTurn) -> str:
    """A world-model turn's answer in the shape the model is trained to answer in (its
    observation, corrected where it was): earlier turns and the target alike."""
    return f"<predicted_observation>\n{turn.observation}\n</predicted_observation>"


def _wm_target(turn: ExportTurn, options: ExportOptions) -> str:
    answer = _wm_answer(turn)
    if not options.thinking:
        return answer
    if has_thinking(turn):
        return f"<think>\n{turn.thinking.strip()}\n</think>\n\n{answer}"
    return EMPTY_THINK + answer


def _answers(example: Example) -> list[str]:
    return _memoized(example, "answers", lambda: [_wm_answer(s) for s in example.steps])


# the mark an earlier assistant turn carries / the target carries, per chat format
_NO_MARK: tuple[dict[str, Any], dict[str, Any]] = ({}, {})
_WEIGHT: tuple[dict[str, Any], dict[str, Any]] = ({"weight": 0}, {"weight": 1})  # OpenAI
_LOSS: tuple[dict[str, Any], dict[str, Any]] = ({"loss": False}, {"loss": True})  # ms-swift


def _wm_chat_history(example: Example, key: str, marks: tuple[dict, dict]) -> list[dict]:
    def build() -> list[dict[str, Any]]:
        prompts, _ = _base(example)
        flat: list[dict[str, Any]] = []
        for prompt, answer in zip(prompts, _answers(example), strict=True):
            flat.append({"role": "user", "content": prompt})
            flat.append({"role": "assistant", "content": answer, **marks[0]})
        return flat

    return _memoized(example, key, build)


def _wm_chat(
    example: Example,
    options: ExportOptions,
    key: str = "wm-chat",
    marks: tuple[dict[str, Any], dict[str, Any]] = _NO_MARK,
) -> list[dict[str, Any]] | None:
    """system?, user/assistant per earlier turn, the current user turn prompt, the target;
    earlier assistant turns carry `marks[0]`, the target `marks[1]`."""
    turn = example.turn
    if turn.final:
        return None
    position = example.position
    prompts, _ = _base(example)
    history = _wm_chat_history(example, key, marks)
    messages: list[dict[str, Any]] = (
        [{"role": "system", "content": example.system_prompt}] if example.system_prompt else []
    )
    messages += history[: 2 * position]
    messages.append({"role": "user", "content": prompts[position]})
    messages.append({"role": "assistant", "content": _wm_target(turn, options), **marks[1]})
    return messages


def _wm_sharegpt(example: Example, options: ExportOptions) -> dict[str, Any] | None:
    turn = example.turn
    if turn.final:
        return None

    def build() -> list[dict[str, Any]]:
        prompts, _ = _base(example)
        flat: list[dict[str, Any]] = []
        for prompt, answer in zip(prompts, _answers(example), strict=True):
            flat.append({"from": "human", "value": prompt})
            flat.append({"from": "gpt", "value": answer})
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
        prompts, _ = _base(example)
        return [[p, a] for p, a in zip(prompts, _answers(example), strict=True)]

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
    """The first user message of agent turns: the task, and the state the agent started in
    where the trajectory recorded one (step 0's current state)."""
    task = example.task_instruction or example.title
    state = example.steps[0].state.strip() if example.steps else ""
    return f"{task}\n\n{STATE_HEADER}\n{state}" if state else task


def _agent_system(example: Example) -> str:
    """The agent's own system prompt where the trajectory has one, else the generic one."""
    return example.agent_system_prompt or agent_system_prompt(example.domain)


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


def _agent_openai_steps(example: Example, key: str, mark: dict[str, Any]) -> list[dict[str, Any]]:
    """Per step: the agent's message (text, or an assistant tool call) carrying `mark`, then
    the observation (a `tool` message answering the call, or a user message)."""

    def build() -> list[dict[str, Any]]:
        flat: list[dict[str, Any]] = []
        for step, call in zip(example.steps, _calls(example), strict=True):
            if call is None:
                flat.append({"role": "assistant", "content": step.action, **mark})
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
                    **mark,
                }
            )
            flat.append({"role": "tool", "tool_call_id": call.id, "content": step.observation})
        return flat

    return _memoized(example, key, build)


def _agent_openai(
    example: Example, key: str = "agent-openai", marks: tuple[dict, dict] = _NO_MARK
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]] | None:
    """(messages up to and including the target action, tools) of an agent turn; the earlier
    actions carry `marks[0]`, the target `marks[1]`."""
    if _no_action(example):
        return None
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": _agent_system(example)},
        {"role": "user", "content": _agent_user(example)},
    ]
    flat = _agent_openai_steps(example, key, marks[0])
    at = 2 * example.position
    messages += flat[:at]
    messages.append({**flat[at], **marks[1]})  # a copy: the branch's lists are shared
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
    example: Example,
    key: str,
    fields: tuple[str, str],
    roles: tuple[str, str, str, str],
    mark: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """Per step: the agent's text (or its tool call as `{"name","arguments"}` JSON) carrying
    `mark`, then the observation, as `{fields[0]: role, fields[1]: text}` messages (once per
    branch)."""
    said, answer, call_role, result = roles
    role_key, text_key = fields
    mark = mark or {}

    def build() -> list[dict[str, Any]]:
        flat: list[dict[str, Any]] = []
        texts = _agent_text(example)
        for step, call, text in zip(example.steps, _calls(example), texts, strict=True):
            flat.append({role_key: said if call is None else call_role, text_key: text, **mark})
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
        "system": _agent_system(example),
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
        "system": _agent_system(example),
        "history": history,
        "tools": json.dumps(schemas, ensure_ascii=False) if schemas else "",
    }


def _agent_swift(example: Example) -> dict[str, Any] | None:
    if _no_action(example):
        return None

    messages: list[dict[str, Any]] = [
        {"role": "system", "content": _agent_system(example)},
        {"role": "user", "content": _agent_user(example)},
    ]
    flat = _agent_flat(example, "agent-swift", ("role", "content"), SWIFT_AGENT_ROLES, _LOSS[0])
    at = 2 * example.position
    messages += flat[:at]
    messages.append({**flat[at], **_LOSS[1]})  # a copy: the branch's lists are shared
    row: dict[str, Any] = {"messages": messages}
    tools = _openai_tools(example)
    if tools:
        row["tools"] = json.dumps(tools, ensure_ascii=False)
    return row


# -- the formats --------------------------------------------------------------------------------


def _openai(example: Example, options: ExportOptions) -> dict[str, Any] | None:
    if _turns(options) == "wm":
        messages = _wm_chat(example, options, "wm-openai", _WEIGHT)
        return None if messages is None else {"messages": messages}
    agent = _agent_openai(example, "agent-openai-weight", _WEIGHT)
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
        messages = _wm_chat(example, options, "wm-swift", _LOSS)
        return None if messages is None else {"messages": messages}
    return _agent_swift(example)


_RECORDED_MODEL = world_model_dict(None)


def _meta(example: Example) -> dict[str, Any]:
    return {
        "trajectory": example.trajectory_id,
        "branch": example.branch_id,
        "step": example.turn.index,
        "domain": example.domain,
        "corrected": example.turn.corrected,
        # the model that produced the target ("recorded": none did), its settings and world
        "world_model": example.turn.world_model or _RECORDED_MODEL,
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
