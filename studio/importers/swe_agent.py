"""SWE-agent `.traj` files.

`{environment, trajectory: [{action, observation, response, thought, state,
execution_time?}], history: [{role, content, message_type?, action?, tool_calls?}], info}`.
Steps come from `trajectory`; a file with `history` only (function-calling runs) is read
from its assistant messages carrying an `action` and the tool/user message after each.
Actions stay shell commands (the agent's native action); `thought` goes to thinking and the
editor `state` (open file, working dir) to `Step.state`.

A JSON list (or JSONL) of such objects is several trajectories.

Domain: swe, or terminal when the run is a CTF challenge (the system prompt, the task or
the environment says "CTF").
"""

from __future__ import annotations

import json
import re

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
)

NAME = "swe-agent"
DOMAIN = "swe"
CTF = re.compile(r"\bCTF\b")


def sniff(kind: str, sample) -> bool:
    sample = sample[0] if isinstance(sample, list) and sample else sample  # a list of .traj
    if not isinstance(sample, dict):
        return False
    if isinstance(sample.get("trajectory"), list) and (
        "history" in sample or "info" in sample or "environment" in sample
    ):
        return True
    history = sample.get("history")
    return (
        isinstance(history, list)
        and "instance_id" not in sample
        and any(isinstance(m, dict) and "role" in m for m in history)
    )


def _state_text(state) -> str:
    if isinstance(state, str):
        return state.strip()
    return json.dumps(state, ensure_ascii=False) if state else ""


def steps_from_trajectory(where: Where, entries: list) -> list[ParsedStep]:
    steps = []
    for i, entry in enumerate(entries):
        at = where.sub(f"trajectory[{i}]")
        action = get(entry, "action", str, at)
        meta = {}
        if isinstance(entry.get("response"), str):
            meta["response"] = entry["response"]
        timings = {}
        if isinstance(entry.get("execution_time"), int | float):
            timings["duration_s"] = entry["execution_time"]
        steps.append(
            ParsedStep(
                action=action.rstrip("\n"),
                observation=as_text(entry.get("observation")),
                thinking=as_text(entry.get("thought")).strip(),
                state=_state_text(entry.get("state")),
                meta=meta,
                timings=timings,
            )
        )
    return steps


def steps_from_history(where: Where, history: list) -> list[ParsedStep]:
    steps: list[ParsedStep] = []
    waiting: ParsedStep | None = None
    for i, msg in enumerate(history):
        at = where.sub(f"history[{i}]")
        role = get(msg, "role", str, at)
        if role == "assistant" and isinstance(msg.get("action"), str):
            meta = {}
            calls = optional_list(msg, "tool_calls")
            if calls and isinstance(calls[0], dict):
                fn = optional_dict(calls[0], "function")
                meta = {"tool_name": fn.get("name", ""), "call_id": calls[0].get("id", "")}
            waiting = ParsedStep(
                action=msg["action"].rstrip("\n"),
                observation="",
                thinking=as_text(msg.get("thought") or msg.get("content")).strip(),
                meta=meta,
            )
            steps.append(waiting)
        elif role in ("tool", "user") and waiting is not None:
            waiting.observation = content_text(msg.get("content"))
            waiting = None
    return steps


ISSUE = re.compile(r"^ISSUE:[ \t]*\n", re.MULTILINE)
INSTRUCTIONS = re.compile(r"\n\s*INSTRUCTIONS:\s*\n")


def problem_statement(prompt: str) -> str:
    """The issue text of SWE-agent's instance prompt ("ISSUE:" up to "INSTRUCTIONS:"), with
    Windows line endings of pasted issues made plain; the whole prompt when it has none."""
    start = ISSUE.search(prompt)
    if start is None:
        return prompt
    end = INSTRUCTIONS.search(prompt, start.end())
    text = prompt[start.end() : end.start() if end else len(prompt)]
    return text.replace("\r\n", "\n").strip()


def build(source: Source, data: dict) -> ParsedTrajectory:
    where = Where(source.name)
    if not isinstance(data.get("trajectory"), list) and not isinstance(data.get("history"), list):
        raise where.error('has neither a "trajectory" nor a "history" list: no steps to read')
    history = get(data, "history", list, where, required=False) or []
    for i, msg in enumerate(history):
        if not isinstance(msg, dict):
            raise where.sub(f"history[{i}]").error("expected a JSON object (a message)")
    system = next(
        (content_text(m.get("content")) for m in history if m.get("role") == "system"), ""
    )
    # The first user message that is not a demonstration (`is_demo`: an example run shown
    # to the agent first) holds the real instance; its ISSUE section is the task.
    prompt = next(
        (
            content_text(m.get("content"))
            for m in history
            if m.get("role") == "user" and not m.get("is_demo")
        ),
        "",
    )
    task = problem_statement(prompt)
    if isinstance(data.get("trajectory"), list):
        steps = steps_from_trajectory(where, data["trajectory"])
    else:
        steps = steps_from_history(where, history)
    info = optional_dict(data, "info")
    metadata = {k: info[k] for k in ("exit_status", "submission", "model_stats") if info.get(k)}
    environment = as_text(data.get("environment"))
    if environment:
        metadata["environment"] = environment
    if system:
        metadata["agent_system_prompt"] = system
    if prompt and prompt != task:
        metadata["agent_task_prompt"] = prompt
    is_ctf = bool(CTF.search(system) or CTF.search(prompt[:2000]) or CTF.search(environment))
    stem = source.name.rsplit("/", 1)[-1].removesuffix(".traj")
    return ParsedTrajectory(
        title=stem or shorten(task, 100),
        task_instruction=task,
        steps=steps,
        metadata=metadata,
        domain="terminal" if is_ctf else "swe",
        where=where,
    )


def parse(source: Source):
    if source.kind == "json" and not isinstance(source.data, list):
        if not isinstance(source.data, dict):
            raise Where(source.name).error("expected one JSON object (a .traj file)")
        yield build(source, source.data)
        return
    for where, record in source.records():
        if not isinstance(record, dict):
            raise where.error("expected a JSON object (a .traj record)")
        yield build(Source(source.path, f"{source.name} {where.loc}", "json", record), record)
