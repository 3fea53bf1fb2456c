"""OpenHands event streams.

JSONL rows `{instance_id, instruction, metadata, history: [event], test_result, ...}`, or one
JSON list of events. An event is `{id, source, message, action?|observation?, args?,
content?, extras?, cause?}`; an observation answers the action whose id is its `cause`.

Steps are the agent's actions that act on the environment (not `message`, `finish`,
`system`, `recall` or state changes), in order, each with the observation caused by it.
A `run` action shows its shell command; other actions show `{"name", "arguments"}` JSON of
the action and its args. `args.thought` is the step's thinking.
"""

from __future__ import annotations

from studio.importers.base import (
    ParsedStep,
    ParsedTrajectory,
    Source,
    Where,
    as_text,
    get,
    optional_dict,
    shorten,
    tool_call_action,
)

NAME = "openhands"
DOMAIN = "swe"
NOT_STEPS = {"message", "finish", "system", "recall", "change_agent_state", "null", ""}
HIDDEN_ARGS = {"thought", "impl_source", "translated_ipython_code", "is_input", "security_risk"}


def _is_event(item) -> bool:
    return (
        isinstance(item, dict) and "source" in item and ("action" in item or "observation" in item)
    )


def sniff(kind: str, sample) -> bool:
    if isinstance(sample, list):
        return bool(sample) and _is_event(sample[0])
    if isinstance(sample, dict) and isinstance(sample.get("history"), list):
        history = sample["history"]
        return not history or _is_event(history[0])
    return False


def render_action(event: dict) -> str:
    args = optional_dict(event, "args")
    if event.get("action") == "run" and isinstance(args.get("command"), str):
        return args["command"]
    shown = {k: v for k, v in args.items() if k not in HIDDEN_ARGS}
    return tool_call_action(str(event.get("action")), shown)


def build(where: Where, events: list, row: dict, title: str) -> ParsedTrajectory:
    observations: dict[str, dict] = {}
    for i, event in enumerate(events):
        if not isinstance(event, dict):
            raise where.sub(f"[{i}]").error("an event must be a JSON object")
        if "action" not in event and "observation" not in event:
            raise where.sub(f"[{i}]").error(
                'is not an OpenHands event (it has neither "action" nor "observation")'
            )
        if "observation" in event and event.get("cause") is not None:
            observations.setdefault(str(event["cause"]), event)
    steps: list[ParsedStep] = []
    instruction = row.get("instruction")
    task = instruction if isinstance(instruction, str) else ""
    for i, event in enumerate(events):
        at = where.sub(f"[{i}]")
        action = event.get("action")
        if action is None:
            continue
        if not isinstance(action, str):
            raise at.fail("action", "must be a string")
        args = optional_dict(event, "args")
        if event.get("source") == "user" and action == "message" and not task:
            task = as_text(args.get("content") or event.get("message"))
        if event.get("source") != "agent" or action in NOT_STEPS:
            continue
        if "id" not in event:
            raise at.fail("id", "is missing (observations point at it with cause)")
        obs = observations.get(str(event["id"]))
        meta = {"action_type": action, "event_id": event["id"]}
        tcm = event.get("tool_call_metadata")
        if isinstance(tcm, dict):
            meta["tool_name"] = tcm.get("function_name", "")
            meta["call_id"] = tcm.get("tool_call_id", "")
        observation = ""
        if obs is not None:
            observation = as_text(obs.get("content")) or as_text(obs.get("message"))
            meta["observation_type"] = obs.get("observation")
            extras = optional_dict(obs, "extras")
            exit_code = optional_dict(extras, "metadata").get("exit_code")
            if exit_code is not None:
                meta["exit_code"] = exit_code
        steps.append(
            ParsedStep(
                action=render_action(event),
                observation=observation,
                thinking=as_text(args.get("thought")).strip(),
                meta=meta,
            )
        )
    metadata = {}
    if row.get("instance_id"):
        metadata["instance_id"] = row["instance_id"]
    run_meta = optional_dict(row, "metadata")
    llm = optional_dict(run_meta, "llm_config")
    if llm.get("model"):
        metadata["model"] = llm["model"]
    if run_meta.get("agent_class"):
        metadata["agent_class"] = run_meta["agent_class"]
    test_result = optional_dict(row, "test_result")
    if test_result.get("git_patch"):
        metadata["git_patch"] = test_result["git_patch"]
    if row.get("error"):
        metadata["error"] = as_text(row["error"])
    return ParsedTrajectory(
        title=title or str(row.get("instance_id") or "") or shorten(task, 100),
        task_instruction=task,
        steps=steps,
        metadata=metadata,
        where=Where(where.file, where.loc),  # the run, not its history list
    )


def parse(source: Source):
    if source.kind == "json" and isinstance(source.data, list):
        if not source.data:
            raise Where(source.name).error("is an empty list: no events to read")
        stem = source.name.rsplit("/", 1)[-1].rsplit(".", 1)[0]
        yield build(Where(source.name), source.data, {}, stem)
        return
    for where, row in source.records():
        if not isinstance(row, dict):
            raise where.error("expected a JSON object (one OpenHands run)")
        history = get(row, "history", list, where)
        yield build(where.sub(".history"), history, row, "")
