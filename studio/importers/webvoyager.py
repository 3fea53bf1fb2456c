"""WebVoyager interaction messages.

A list of `{role, content}`; content is a string or a list of `{type: "text" | "image_url"}`
parts (images are dropped: the source stripped them). The first user message holds the task
(`Now given a task: … Observation: …`); each assistant message `Thought: …\\nAction: Click [n]`
is a step whose observation is the next user message (the page's element list
`[i]: <tag> "text";`, or the source's "omitted" note for early turns). The final `ANSWER`
step has no observation.
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

NAME = "webvoyager"
DOMAIN = "web"
THOUGHT_ACTION = re.compile(r"\A\s*(?:Thought:\s*(.*?))?\s*Action:\s*(.*)\Z", re.DOTALL)
OBSERVATION = re.compile(r"\A\s*Observation:\s*")
TASK = re.compile(r"\A\s*(?:Now given a task:\s*)?(.*?)\s*(?:Observation:.*)?\Z", re.DOTALL)


def sniff(kind: str, sample) -> bool:
    if not isinstance(sample, list) or not sample:
        return False
    if any(isinstance(m, dict) and m.get("tool_calls") for m in sample):
        return False
    for m in sample:
        if isinstance(m, dict) and m.get("role") == "assistant":
            return bool(THOUGHT_ACTION.match(content_text(m.get("content"))))
    return False


def build(where: Where, messages: list, title_hint: str) -> ParsedTrajectory:
    if not messages:
        raise where.error("holds no chat messages")
    steps: list[ParsedStep] = []
    system = task = ""
    waiting: ParsedStep | None = None
    for i, msg in enumerate(messages):
        at = where.sub(f"[{i}]")
        role = get(msg, "role", str, at)
        text = content_text(msg.get("content"))
        if role == "system":
            system = system or text
        elif role == "assistant":
            m = THOUGHT_ACTION.match(text)
            thought, action = (m.group(1) or "", m.group(2)) if m else ("", text)
            waiting = ParsedStep(action=action.strip(), observation="", thinking=thought.strip())
            steps.append(waiting)
        elif role == "user":
            if waiting is None and not task:
                m = TASK.match(text)
                task = m.group(1) if m else text
            elif waiting is not None:
                waiting.observation = OBSERVATION.sub("", text, count=1).strip()
                waiting = None
    metadata = {"agent_system_prompt": system} if system else {}
    return ParsedTrajectory(
        title=f"{title_hint}: {shorten(task, 90)}" if title_hint else shorten(task, 100),
        task_instruction=task,
        steps=steps,
        metadata=metadata,
        where=where,
    )


def parse(source: Source):
    if source.kind == "json":
        if not isinstance(source.data, list):
            raise Where(source.name).error("expected a list of chat messages")
        stem = source.name.rsplit("/", 1)[-1].split(".")[0]
        stem = stem.removesuffix("_interact_messages").rstrip("_").removeprefix("task")
        yield build(Where(source.name), source.data, stem)
        return
    for where, record in source.records():
        if not isinstance(record, list):
            raise where.error("expected a list of chat messages")
        yield build(where, record, "")
