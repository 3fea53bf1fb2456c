"""AndroidWorld episodes (android_world agent results).

`{task_name, goal, success, steps_taken, actions, step_timings?, step_records: [{step_num,
state: {ui_elements}, action: "Reason: …\\nAction: {json}", agent_data: {before_element_list,
after_element_list, summary, …}}], final_state?}`; a JSON list (or JSONL) of episodes too.

Choice made here: the observation of a step is the screen the action led to, written as the
UI element list after the action (`agent_data.after_element_list`, else the next step's
state, else `final_state`), since that is what a world model predicts for Android. The
screen the action was taken on is `Step.state`. Elements are one line each:
`[i] ClassName "text" desc="…" hint="…" (clickable, editable, …) bounds=(x0,y0)-(x1,y1)
id=resource_name`. The action is the JSON after `Action:`; the `Reason:` is the thinking.
Screenshots were stripped by the source and are not kept.
"""

from __future__ import annotations

import re

from studio.importers.base import (
    ParsedStep,
    ParsedTrajectory,
    Source,
    Where,
    as_text,
    get,
    optional_dict,
    optional_list,
)

NAME = "androidworld"
DOMAIN = "android"
REASON_ACTION = re.compile(r"\A\s*(?:Reason:\s*(.*?))?\s*Action:\s*(.*)\Z", re.DOTALL)
FLAGS = ("clickable", "editable", "checked", "selected", "focused", "scrollable", "long_clickable")


def sniff(kind: str, sample) -> bool:
    sample = sample[0] if isinstance(sample, list) and sample else sample  # a list of episodes
    return (
        isinstance(sample, dict)
        and isinstance(sample.get("step_records"), list)
        and "goal" in sample
    )


def render_element(i: int, el) -> str:
    if not isinstance(el, dict):
        return f"[{i}] {as_text(el)}"
    parts = [f"[{i}]", str(el.get("class_name") or "View").rsplit(".", 1)[-1]]
    if el.get("text"):
        parts.append(f'"{el["text"]}"')
    for key, label in (("content_description", "desc"), ("hint_text", "hint")):
        if el.get(key):
            parts.append(f'{label}="{el[key]}"')
    flags = [f for f in FLAGS if el.get(f"is_{f}")]
    if flags:
        parts.append(f"({', '.join(flags)})")
    box = el.get("bbox_pixels")
    if isinstance(box, dict) and {"x_min", "y_min", "x_max", "y_max"} <= box.keys():
        parts.append(f"bounds=({box['x_min']},{box['y_min']})-({box['x_max']},{box['y_max']})")
    if el.get("resource_name"):
        parts.append(f"id={el['resource_name']}")
    return " ".join(parts)


def render_screen(elements) -> str:
    if not isinstance(elements, list):
        return ""
    return "\n".join(render_element(i, el) for i, el in enumerate(elements))


def _elements(state) -> list | None:
    if isinstance(state, dict) and isinstance(state.get("ui_elements"), list):
        return state["ui_elements"]
    return None


def build(where: Where, data: dict, title_hint: str) -> ParsedTrajectory:
    records = get(data, "step_records", list, where)
    goal = get(data, "goal", str, where)
    timings = optional_list(data, "step_timings")
    steps = []
    for i, rec in enumerate(records):
        at = where.sub(f"step_records[{i}]")
        text = get(rec, "action", str, at)
        m = REASON_ACTION.match(text)
        reason, action = (m.group(1) or "", m.group(2)) if m else ("", text)
        agent = optional_dict(rec, "agent_data")
        before = _elements(rec.get("state"))
        if before is None and isinstance(agent.get("before_element_list"), list):
            before = agent["before_element_list"]
        after = agent.get("after_element_list")
        if not isinstance(after, list):
            nxt = records[i + 1] if i + 1 < len(records) else None
            after = _elements(nxt.get("state")) if isinstance(nxt, dict) else None
            if after is None:
                after = _elements(data.get("final_state"))
        meta = {"step_num": rec.get("step_num", i + 1)}
        if agent.get("summary"):
            meta["summary"] = as_text(agent["summary"])
        step_timings = {}
        if i < len(timings) and isinstance(timings[i], int | float):
            step_timings["duration_s"] = timings[i]
        steps.append(
            ParsedStep(
                action=action.strip(),
                observation=render_screen(after),
                state=render_screen(before),
                thinking=reason.strip(),
                meta=meta,
                timings=step_timings,
            )
        )
    metadata = {
        k: data[k]
        for k in ("task_name", "model_name", "prompt_variant", "success", "steps_taken")
        if k in data
    }
    title = " · ".join(str(data[k]) for k in ("task_name", "model_name") if data.get(k))
    return ParsedTrajectory(
        title=title or title_hint,
        task_instruction=goal,
        steps=steps,
        metadata=metadata,
        where=where,
    )


def parse(source: Source):
    stem = source.name.rsplit("/", 1)[-1].rsplit(".", 1)[0]
    for where, record in source.records():
        if not isinstance(record, dict):
            raise where.error("expected a JSON object (an AndroidWorld episode)")
        one = source.kind == "json" and not isinstance(source.data, list)
        yield build(Where(source.name) if one else where, record, stem)
