"""FireAct ReAct trajectories (HotpotQA with a search tool).

`{"<idx>": {reward, em, f1, gt, pred, prompt, traj: [{role, content}]}}`: the first user
message is the question; each assistant message `Thought: …\\nAction: search[q]` (or
`finish[a]`) is a step whose observation is the next user message without its
`Observation:` prefix. The action keeps FireAct's own `tool[argument]` text; the tool name
and argument are also in `Step.meta`.
"""

from __future__ import annotations

import re

from studio.importers.base import (
    ParsedStep,
    ParsedTrajectory,
    Source,
    Where,
    content_text,
    get,
    shorten,
)

NAME = "fireact"
DOMAIN = "search"
THOUGHT_ACTION = re.compile(r"\A\s*(?:Thought[^:]*:\s*(.*?))?\s*Action[^:]*:\s*(.*)\Z", re.DOTALL)
# Some recorded actions run on or are cut off: the tool name is what precedes the bracket.
CALL = re.compile(r"\A(\w+)\[(.*?)\]?\s*\Z", re.DOTALL)
OBSERVATION = re.compile(r"\A\s*Observation[^:]*:\s?")


def sniff(kind: str, sample) -> bool:
    if not isinstance(sample, dict) or not sample:
        return False
    first = next(iter(sample.values()))
    return (
        isinstance(first, dict) and isinstance(first.get("traj"), list) and "task_id" not in first
    )


def build(where: Where, key: str, record: dict) -> ParsedTrajectory:
    traj = get(record, "traj", list, where)
    question = ""
    steps: list[ParsedStep] = []
    waiting: ParsedStep | None = None
    for i, msg in enumerate(traj):
        at = where.sub(f".traj[{i}]")
        role = get(msg, "role", str, at)
        text = content_text(msg.get("content"))
        if role == "assistant":
            m = THOUGHT_ACTION.match(text)
            thought, action = (m.group(1) or "", m.group(2)) if m else ("", text)
            action = action.strip()
            meta = {}
            call = CALL.match(action)
            if call:
                meta = {"tool_name": call.group(1), "argument": call.group(2)}
            waiting = ParsedStep(action=action, observation="", thinking=thought.strip(), meta=meta)
            steps.append(waiting)
        elif role == "user":
            if waiting is None and not question:
                question = text.strip()
            elif waiting is not None:
                waiting.observation = OBSERVATION.sub("", text, count=1)
                waiting = None
    metadata = {"id": key}
    metadata.update({k: record[k] for k in ("reward", "em", "f1", "gt", "pred") if k in record})
    return ParsedTrajectory(
        title=f"{key}: {shorten(question, 100)}",
        task_instruction=question,
        steps=steps,
        metadata=metadata,
        where=where,
    )


def parse(source: Source):
    records = []
    if source.kind == "json":
        if not isinstance(source.data, dict):
            raise Where(source.name).error("expected one JSON object of index -> trajectory")
        records = [(Where(source.name).sub(str(k)), k, v) for k, v in source.data.items()]
    else:
        for where, obj in source.records():
            if not isinstance(obj, dict):
                raise where.error("expected a JSON object of index -> trajectory")
            records += [(where.sub(str(k)), k, v) for k, v in obj.items()]
    for n, (where, key, record) in enumerate(records):
        if not isinstance(record, dict):
            raise where.error("expected a JSON object with a traj list")
        yield build(where, str(key), record)
        if n % 50 == 0:
            source.report(n / len(records))
