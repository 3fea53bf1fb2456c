"""mini-swe-agent chat messages.

A list of `{role, content}` (or `{"messages": [...], "trajectory_format": "mini-swe-agent…"}`).
Each assistant message is a step: its fenced `mswea_bash_command` block (or the last
```bash block) is the action, the text around it the thinking, and the next user message
(`<returncode>N</returncode><output>…</output>`) the observation.
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

NAME = "mini-swe-agent"
DOMAIN = "swe"
BLOCK = re.compile(r"```(mswea_bash_command|bash|sh)[ \t]*\n(.*?)```", re.DOTALL)


def _messages(sample):
    if isinstance(sample, dict) and str(sample.get("trajectory_format", "")).startswith(
        "mini-swe-agent"
    ):
        return sample.get("messages")
    return sample


def sniff(kind: str, sample) -> bool:
    messages = _messages(sample)
    if not isinstance(messages, list):
        return False
    for m in messages:
        if not isinstance(m, dict) or not isinstance(m.get("content"), str):
            continue
        if m.get("role") == "assistant" and "```mswea_bash_command" in m["content"]:
            return True
        if m.get("role") == "user" and m["content"].startswith("<returncode>"):
            return True
    return False


def split_action(text: str) -> tuple[str, str]:
    blocks = list(BLOCK.finditer(text))
    if not blocks:
        return text.strip(), ""
    chosen = next((b for b in blocks if b.group(1) == "mswea_bash_command"), blocks[-1])
    thinking = (text[: chosen.start()] + text[chosen.end() :]).strip()
    return chosen.group(2).strip("\n"), thinking


def build(where: Where, record, messages: list, title: str) -> ParsedTrajectory:
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
            action, thinking = split_action(text)
            waiting = ParsedStep(action=action, observation="", thinking=thinking)
            steps.append(waiting)
        elif role == "user":
            if waiting is None and not task:
                task = text
            elif waiting is not None:
                waiting.observation = text
                waiting = None
    metadata = {"agent_system_prompt": system} if system else {}
    if isinstance(record, dict) and isinstance(record.get("info"), dict):
        metadata["info"] = record["info"]
    return ParsedTrajectory(
        title=title or shorten(task, 100),
        task_instruction=task,
        steps=steps,
        metadata=metadata,
        where=where,
    )


def parse(source: Source):
    stem = source.name.rsplit("/", 1)[-1].split(".")[0]
    if source.kind == "json":
        messages = _messages(source.data)
        if not isinstance(messages, list):
            raise Where(source.name).error("expected a list of chat messages")
        yield build(Where(source.name), source.data, messages, stem)
        return
    for where, record in source.records():
        messages = _messages(record)
        if not isinstance(messages, list):
            raise where.error("expected a list of chat messages")
        yield build(where, record, messages, "")
