"""Inspect AI eval logs, version 2 (JSON).

`{version: 2, eval: {task, model, …}, samples: [{id, input, messages, events, scores,
attachments}]}`. One trajectory per sample: the user input is the task; each assistant tool
call (`{id, function, arguments}`) is a step answered by the `tool` message with the same
`tool_call_id` (its `content`, e.g. the browser's accessibility tree). Message text stored
as `attachment://<hash>` is resolved from the sample's `attachments`. Tool schemas come from
the first model event. Domain: web when the tools are the web browser, terminal for
bash/python-only tools, else mcp.
"""

from __future__ import annotations

from studio.importers.base import (
    ParsedStep,
    ParsedTrajectory,
    Source,
    Where,
    as_text,
    content_text,
    get,
    optional_dict,
    optional_list,
    shorten,
    tool_call_action,
)

NAME = "inspect"
DOMAIN = "web"


def sniff(kind: str, sample) -> bool:
    return (
        isinstance(sample, dict)
        and sample.get("version") == 2
        and isinstance(sample.get("eval"), dict)
        and "samples" in sample
    )


def _resolve(text: str, attachments: dict) -> str:
    if text.startswith("attachment://"):
        return as_text(attachments.get(text.removeprefix("attachment://"), text))
    return text


def _text(content, attachments: dict) -> str:
    if isinstance(content, list):
        content = [
            {**p, "text": _resolve(p["text"], attachments)}
            if isinstance(p, dict) and isinstance(p.get("text"), str)
            else p
            for p in content
        ]
    return _resolve(content_text(content), attachments)


def _domain(tool_names: list[str]) -> str:
    if any(n.startswith("web_") or "browser" in n for n in tool_names):
        return "web"
    if tool_names and all(n in ("bash", "python") for n in tool_names):
        return "terminal"
    return "mcp"


def build(where: Where, sample: dict, evalinfo: dict) -> ParsedTrajectory:
    attachments = optional_dict(sample, "attachments")
    messages = get(sample, "messages", list, where)
    steps: list[ParsedStep] = []
    by_call: dict[str, ParsedStep] = {}
    agent_system = ""
    for i, msg in enumerate(messages):
        at = where.sub(f".messages[{i}]")
        role = get(msg, "role", str, at)
        text = _text(msg.get("content"), attachments)
        if role == "system":
            agent_system = agent_system or text
        elif role == "assistant":
            for j, call in enumerate(msg.get("tool_calls") or []):
                cat = at.sub(f".tool_calls[{j}]")
                name = get(call, "function", str, cat)
                step = ParsedStep(
                    action=tool_call_action(name, call.get("arguments", {})),
                    observation="",
                    thinking=text.strip() if j == 0 else "",
                    meta={"tool_name": name, "call_id": call.get("id", "")},
                )
                steps.append(step)
                by_call[str(call.get("id", ""))] = step
        elif role == "tool":
            answered = by_call.get(str(msg.get("tool_call_id", "")))
            if answered is None:
                raise at.fail("tool_call_id", "answers no earlier tool call")
            answered.observation = text
            if msg.get("error"):
                answered.meta["error"] = msg["error"]
    tools = []
    for event in optional_list(sample, "events"):
        if isinstance(event, dict) and event.get("event") == "model" and event.get("tools"):
            tools = event["tools"]
            break
    task = _text(sample.get("input"), attachments)
    metadata = {"sample_id": sample.get("id"), "epoch": sample.get("epoch")}
    metadata.update(
        {k: evalinfo[k] for k in ("task", "model", "eval_id", "run_id") if k in evalinfo}
    )
    if sample.get("scores"):
        metadata["scores"] = sample["scores"]
    if agent_system:
        metadata["agent_system_prompt"] = agent_system
    names = [str(t.get("name", "")) for t in tools if isinstance(t, dict)]
    names = names or [s.meta["tool_name"] for s in steps]
    return ParsedTrajectory(
        title=f"{evalinfo.get('task', 'inspect')} #{sample.get('id')}: {shorten(task, 80)}",
        task_instruction=task,
        tools=tools if isinstance(tools, list) else [],
        steps=steps,
        metadata=metadata,
        domain=_domain(names),
        where=where,
    )


def parse(source: Source):
    where = Where(source.name)
    data = source.data
    if source.kind != "json" or not isinstance(data, dict):
        raise where.error("expected one JSON object (an Inspect eval log)")
    if data.get("version") != 2:
        raise where.fail("version", "must be 2 (Inspect eval log v2)")
    samples = get(data, "samples", list, where)
    evalinfo = optional_dict(data, "eval")
    for i, sample in enumerate(samples):
        at = where.sub(f"samples[{i}]")
        if not isinstance(sample, dict):
            raise at.error("expected a JSON object (one sample)")
        yield build(at, sample, evalinfo)
        source.report((i + 1) / max(len(samples), 1))
