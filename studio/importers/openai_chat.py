"""OpenAI chat messages with `tool_calls` (tau-bench included).

Accepted shapes, JSON or JSONL: a list of messages (one trajectory); `{"messages": [...],
"tools"?: [...]}` records; tau-bench's `{task_id, reward, info, traj, trial}` records; a
JSONL file with one message per line (one trajectory).

One step = one assistant tool call + the tool message answering it (matched by
`tool_call_id`, in order, since some logs reuse ids). The action is
`{"name", "arguments"}` JSON; the assistant's text beside the call is the step's thinking.
Plain user/assistant chat between two calls is kept in the next step's `meta["dialogue"]`
(the user side of tau-bench is a simulated person, not the tool environment). The agent's
own system message goes to `metadata["agent_system_prompt"]`, not to the world-model
system prompt.
"""

from __future__ import annotations

import itertools

from studio.importers.base import (
    ParsedStep,
    ParsedTrajectory,
    Source,
    Where,
    content_text,
    get,
    optional_dict,
    optional_list,
    shorten,
    tool_call_action,
)

NAME = "openai-chat"
DOMAIN = "mcp"
# Generic format: a domain-named folder in the path (…/web/…) decides, else DOMAIN.
PATH_DECIDES_DOMAIN = True


def _messages_of(record):
    if isinstance(record, list):
        return record
    if isinstance(record, dict):
        return record.get("traj") or record.get("messages")
    return None


def _has_tool_calls(messages) -> bool:
    return isinstance(messages, list) and any(
        isinstance(m, dict) and (m.get("tool_calls") or m.get("role") == "tool") for m in messages
    )


def sniff(kind: str, sample) -> bool:
    if kind == "jsonl" and isinstance(sample, dict) and "role" in sample:
        return True  # one message per line: the whole file is one conversation
    if isinstance(sample, list) and sample and isinstance(sample[0], dict):
        if "role" in sample[0]:
            return _has_tool_calls(sample)
        return _has_tool_calls(_messages_of(sample[0]))
    return _has_tool_calls(_messages_of(sample))


def conversations(source: Source):
    """(where, record, messages, places) for every conversation in the file; `places` says
    where each message is when they are lines of a JSONL file, else it is empty."""
    data = source.data
    if source.kind == "json" and isinstance(data, list) and data and isinstance(data[0], dict):
        if "role" in data[0]:
            yield Where(source.name), {}, data, []
            return
    records = source.records()
    if source.kind == "jsonl":
        first = next(records, None)
        if first is None:
            return
        if isinstance(first[1], dict) and "role" in first[1]:
            places, messages = zip(first, *records, strict=True)
            yield Where(source.name), {}, list(messages), list(places)
            return
        records = itertools.chain([first], records)  # one pass over the file
    for where, record in records:
        if isinstance(record, list):
            yield where, {}, record, []
            continue
        if not isinstance(record, dict):
            raise where.error("expected a JSON object or a list of messages")
        key = "traj" if "traj" in record else "messages"
        yield where.sub(f".{key}"), record, get(record, key, list, where), []


def build(
    where: Where, record: dict, messages: list, places: list[Where] | None = None
) -> ParsedTrajectory:
    steps: list[ParsedStep] = []
    pending: list[ParsedStep] = []  # calls waiting for their tool message
    dialogue: list[dict] = []
    agent_system = ""
    first_user = ""
    final_text = ""
    for i, msg in enumerate(messages):
        at = places[i] if places else where.sub(f"[{i}]")
        if not isinstance(msg, dict):
            raise at.error("a message must be a JSON object")
        role = get(msg, "role", str, at)
        text = content_text(msg.get("content"))
        if role == "system":
            agent_system = agent_system or text
        elif role == "assistant" and msg.get("tool_calls"):
            calls = get(msg, "tool_calls", list, at)
            for j, call in enumerate(calls):
                cat = at.sub(f".tool_calls[{j}]")
                fn = get(call, "function", dict, cat)
                name = get(fn, "name", str, cat.sub(".function"))
                step = ParsedStep(
                    action=tool_call_action(name, fn.get("arguments", {})),
                    observation="",
                    thinking=text if j == 0 else "",
                    meta={"tool_name": name, "call_id": call.get("id", "")},
                )
                if dialogue:
                    step.meta["dialogue"], dialogue = dialogue, []
                steps.append(step)
                pending.append(step)
        elif role in ("tool", "function"):
            call_id = msg.get("tool_call_id")
            match = next((s for s in pending if s.meta["call_id"] == call_id), None)
            if match is None and pending:
                match = pending[0]
            if match is None:
                raise at.fail("tool_call_id", "answers no earlier tool call")
            pending.remove(match)
            match.observation = text
        else:
            if role == "user" and not first_user:
                first_user = text
            elif text:
                dialogue.append({"role": role, "content": text})
            if role == "assistant" and text:
                final_text = text
    info = optional_dict(record, "info")
    task = optional_dict(info, "task")
    instruction = task.get("instruction") or first_user
    metadata = {k: record[k] for k in ("task_id", "reward", "trial", "id", "model") if k in record}
    if task.get("user_id"):
        metadata["user_id"] = task["user_id"]
    if first_user and first_user != instruction:
        metadata["first_user_message"] = first_user
    if agent_system:
        metadata["agent_system_prompt"] = agent_system
    if final_text:
        metadata["final_response"] = final_text
    if dialogue:
        metadata["closing_dialogue"] = dialogue
    title = f"task {record['task_id']}: " if "task_id" in record else ""
    return ParsedTrajectory(
        title=title + shorten(instruction or "chat with tool calls", 100),
        task_instruction=instruction,
        tools=optional_list(record, "tools"),
        metadata=metadata,
        steps=steps,
        where=Where(where.file, where.loc),  # the record, not its message list
    )


def parse(source: Source):
    conversations_seen = with_calls = 0
    for where, record, messages, places in conversations(source):
        conversations_seen += 1
        with_calls += _has_tool_calls(messages)
        yield build(where, record, messages, places)
    if conversations_seen and not with_calls:
        # Chat without a single tool call has nothing openai-chat reads as a step: another
        # format's messages, or the wrong format chosen.
        raise Where(source.name).error(
            'has no assistant "tool_calls" and no "tool" messages: no steps to read'
        )
