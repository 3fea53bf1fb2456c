"""Rewarded tasks in a world: what a task asks, how an episode is scored and when it ends, in
OpenEnv's rubric convention. Plain Python (no Django): `inference.worlds` reads these parts
of a world file, `studio.services.rewards` applies them to an episode's steps.

A world file may hold (all optional):

    "tasks": [{"id": "refund-order", "instruction": "Refund order 1042",
               "success_criteria": "...", "expected": "refunded", "max_steps": 20,
               "rubric": {...}}],                      # a task's rubric replaces the world's
    "rubric": {"step": [CHECK, ...], "episode": [CHECK, ...]},
    "termination": {"terminal": [CHECK, ...],
                    "submit": {"tool": "submit_answer", "argument": "answer"}
                              or {"prefix": "FINAL ANSWER:"}},
    "state_keys": [{"name": "order_refunded", "description": "..."}]

A CHECK is {"name", "kind", "weight"} and, by kind:

- "exact" / "contains" / "regex": "target" ("observation" or "final_answer") and "pattern"
  (exact and contains: blank means the task's "expected"; regex: required, Python syntax,
  searched anywhere in the text). Exact and contains compare text with surrounding
  whitespace stripped, case and all.
- "state": "key" (one of the world's state_keys) and "equals" (any JSON value, true when
  left out): the value the world model reports for that key must equal it; an unreported
  key (null) fails.
- "judge": "criteria" (blank: the task's success_criteria) and "endpoint" (the name of a
  judge model on the project's Models page; blank: the project's default judge). The judge
  reads the episode and scores it from 0 to 1. Only in "episode" rubrics.

A check scores 1.0 or 0.0 (a judge: its score in [0, 1]). A rubric's score is the weighted
mean sum(weight * score) / sum(weight) (OpenEnv's WeightedSum with the weights normalised),
and its breakdown is {check name: score}. A check that needs what the task does not have (an
exact or contains check without a pattern: the task's expected answer; a judge without
criteria: its success criteria; a task typed at reset has neither) is left out of the rubric
for that task, not scored 0 (`applicable`); a rubric with no check left has no score. A "step" rubric scores every step's observation;
an "episode" rubric scores the episode once, at its end: the last observation of the world
model, the last state it reported and the agent's final answer (when it submitted one).
"final_answer" checks belong in episode rubrics (a step has no final answer); terminal
checks read the observation or the state, and any one that passes ends the episode.

Seeds: an episode has one seed (given to reset, else drawn); the seed of step i is
`step_seed(seed, i)`, a sha256-derived number in 0..2**31-1 sent as the model request's
`seed`; a world's task is drawn from the seed by `choose_task`, so the same seed picks the
same task."""

from __future__ import annotations

import hashlib
import json
import math
import re
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

KINDS = ("exact", "contains", "regex", "state", "judge")
TEXT_KINDS = ("exact", "contains", "regex")
TARGETS = ("observation", "final_answer")
SEED_LIMIT = 2**31  # per-step seeds are below this (what every OpenAI-compatible server takes)
EPISODE_SEED_LIMIT = 2**63  # an episode's seed: any whole number 0 <= seed < 2**63
MAX_NAME = 100
MAX_TEXT = 200_000
MAX_CHECKS = 100
TASK_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")
END_CAUSES = ("terminal", "submit", "max_steps", "cancelled")


class RubricError(ValueError):
    """A task, rubric or termination part that cannot be used; the message names the field
    (`tasks[2].rubric.step[0].pattern ...`)."""


@dataclass(frozen=True)
class Check:
    name: str
    kind: str
    weight: float = 1.0
    target: str = "observation"  # text kinds
    pattern: str = ""  # text kinds (blank for exact/contains: the task's expected)
    key: str = ""  # state
    equals: Any = True  # state
    criteria: str = ""  # judge (blank: the task's success criteria)
    endpoint: str = ""  # judge (blank: the project's default judge)

    def to_file(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "kind": self.kind, "weight": self.weight}
        if self.kind in TEXT_KINDS:
            out.update(target=self.target, pattern=self.pattern)
        elif self.kind == "state":
            out.update(key=self.key, equals=self.equals)
        else:
            out.update(criteria=self.criteria, endpoint=self.endpoint)
        return out


@dataclass(frozen=True)
class Rubric:
    step: tuple[Check, ...] = ()
    episode: tuple[Check, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.step or self.episode)

    def to_file(self) -> dict[str, Any]:
        return {
            "step": [c.to_file() for c in self.step],
            "episode": [c.to_file() for c in self.episode],
        }


@dataclass(frozen=True)
class Submit:
    """The agent's submit action: a call of `tool` (its final answer is the `argument`
    argument, or the arguments' JSON when blank), or a text action starting with `prefix`
    (its final answer is the rest of the text)."""

    tool: str = ""
    argument: str = ""
    prefix: str = ""

    def __bool__(self) -> bool:
        return bool(self.tool or self.prefix)

    def to_file(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.tool:
            out.update(tool=self.tool, argument=self.argument)
        if self.prefix:
            out["prefix"] = self.prefix
        return out


@dataclass(frozen=True)
class Termination:
    terminal: tuple[Check, ...] = ()
    submit: Submit = Submit()

    def __bool__(self) -> bool:
        return bool(self.terminal or self.submit)

    def to_file(self) -> dict[str, Any]:
        out: dict[str, Any] = {"terminal": [c.to_file() for c in self.terminal]}
        if self.submit:
            out["submit"] = self.submit.to_file()
        return out


@dataclass(frozen=True)
class StateKey:
    name: str
    description: str = ""


@dataclass(frozen=True)
class Task:
    id: str
    instruction: str
    success_criteria: str = ""
    expected: str = ""
    max_steps: int | None = None
    rubric: Rubric | None = None  # None: the world's rubric

    def to_file(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id,
            "instruction": self.instruction,
            "success_criteria": self.success_criteria,
            "expected": self.expected,
        }
        if self.max_steps is not None:
            out["max_steps"] = self.max_steps
        if self.rubric is not None:
            out["rubric"] = self.rubric.to_file()
        return out


# ---- reading and checking -----------------------------------------------------------------


def _text(data: Mapping[str, Any], key: str, where: str, *, limit: int = MAX_TEXT) -> str:
    value = data.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise RubricError(f"{where}.{key} must be text, got {type(value).__name__}")
    if len(value) > limit:
        raise RubricError(f"{where}.{key} is longer than {limit:,} characters")
    return value.replace("\r\n", "\n")


def _only(data: Mapping[str, Any], known: set[str], where: str) -> None:
    unknown = sorted(set(data) - known, key=str)
    if unknown:
        raise RubricError(
            f"{where} has an unknown field {unknown[0]!r} (it may have: {', '.join(sorted(known))})"
        )


def _object(raw: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(raw, Mapping):
        raise RubricError(f"{where} must be an object, got {type(raw).__name__}")
    return raw


def _list(raw: Any, where: str, limit: int = MAX_CHECKS) -> list:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise RubricError(f"{where} must be a list, got {type(raw).__name__}")
    if len(raw) > limit:
        raise RubricError(f"{where} has more than {limit} entries")
    return raw


def _weight(raw: Any, where: str) -> float:
    if raw is None:
        return 1.0
    if isinstance(raw, bool) or not isinstance(raw, int | float):
        raise RubricError(f"{where}.weight must be a number, got {raw!r}")
    if not math.isfinite(raw) or raw <= 0:
        raise RubricError(f"{where}.weight must be a number above 0, got {raw!r}")
    return float(raw)


def read_check(raw: Any, where: str, *, state_keys: Sequence[str] | None = None) -> Check:
    """One check, its fields checked; `state_keys`: the world's, which a state check must
    name (None: not checked here)."""
    data = _object(raw, where)
    kind = data.get("kind")
    if kind not in KINDS:
        raise RubricError(f"{where}.kind must be one of {', '.join(KINDS)}, got {kind!r}")
    known = {"name", "kind", "weight"}
    known |= {
        "exact": {"target", "pattern"},
        "contains": {"target", "pattern"},
        "regex": {"target", "pattern"},
        "state": {"key", "equals"},
        "judge": {"criteria", "endpoint"},
    }[kind]
    _only(data, known, where)
    name = _text(data, "name", where, limit=MAX_NAME).strip()
    if not name:
        raise RubricError(f"{where}.name is required (the breakdown reports each check by name)")
    weight = _weight(data.get("weight"), where)
    if kind in TEXT_KINDS:
        target = data.get("target") or "observation"
        if target not in TARGETS:
            raise RubricError(f"{where}.target must be one of {', '.join(TARGETS)}, got {target!r}")
        pattern = _text(data, "pattern", where)
        if kind == "regex":
            if not pattern:
                raise RubricError(f"{where}.pattern is required for a regex check")
            try:
                re.compile(pattern)
            except re.error as exc:
                raise RubricError(
                    f"{where}.pattern is not a valid regular expression: {exc}"
                ) from None
        return Check(name, kind, weight, target=target, pattern=pattern)
    if kind == "state":
        key = _text(data, "key", where, limit=MAX_NAME).strip()
        if not key:
            raise RubricError(f"{where}.key is required (the state key the check reads)")
        if state_keys is not None and key not in state_keys:
            listed = ", ".join(state_keys) or "none"
            raise RubricError(
                f"{where}.key {key!r} is not one of the world's state_keys ({listed})"
            )
        equals = data.get("equals", True)
        if equals is None:
            raise RubricError(
                f"{where}.equals must not be null: a key the world model does not report is "
                "null, and a state check on null fails"
            )
        try:
            json.dumps(equals)
        except (TypeError, ValueError):
            raise RubricError(f"{where}.equals must be a JSON value") from None
        return Check(name, kind, weight, key=key, equals=equals)
    return Check(
        name,
        kind,
        weight,
        criteria=_text(data, "criteria", where),
        endpoint=_text(data, "endpoint", where, limit=MAX_NAME).strip(),
    )


def _checks(raw: Any, where: str, state_keys: Sequence[str] | None) -> tuple[Check, ...]:
    return tuple(
        read_check(item, f"{where}[{i}]", state_keys=state_keys)
        for i, item in enumerate(_list(raw, where))
    )


def read_rubric(raw: Any, where: str = "rubric", *, state_keys=None) -> Rubric:
    """{"step": [...], "episode": [...]}: judge checks only in "episode", final-answer checks
    only in "episode", and every check's name unique in the rubric (the breakdown is keyed
    by name)."""
    if raw is None:
        return Rubric()
    data = _object(raw, where)
    _only(data, {"step", "episode"}, where)
    step = _checks(data.get("step"), f"{where}.step", state_keys)
    episode = _checks(data.get("episode"), f"{where}.episode", state_keys)
    for i, check in enumerate(step):
        at = f"{where}.step[{i}]"
        if check.kind == "judge":
            raise RubricError(
                f"{at} ({check.name}): a judge check scores the whole episode; put it in "
                f"{where}.episode"
            )
        if check.target == "final_answer":
            raise RubricError(
                f"{at} ({check.name}): a step has no final answer; a check of the final answer "
                f"goes in {where}.episode"
            )
    seen: set[str] = set()
    for part, checks in (("step", step), ("episode", episode)):
        for i, check in enumerate(checks):
            if check.name in seen:
                raise RubricError(
                    f"{where}.{part}[{i}]: two checks are named {check.name!r} (the breakdown "
                    "names each check)"
                )
            seen.add(check.name)
    return Rubric(step, episode)


def read_termination(
    raw: Any, where: str = "termination", *, state_keys=None, tool_names=None
) -> Termination:
    if raw is None:
        return Termination()
    data = _object(raw, where)
    _only(data, {"terminal", "submit"}, where)
    terminal = _checks(data.get("terminal"), f"{where}.terminal", state_keys)
    for i, check in enumerate(terminal):
        if check.kind == "judge" or check.target == "final_answer":
            raise RubricError(
                f"{where}.terminal[{i}] ({check.name}): a terminal check reads the observation "
                "or the state (exact, contains, regex on the observation, or state)"
            )
    submit = Submit()
    if data.get("submit") is not None:
        at = f"{where}.submit"
        sub = _object(data["submit"], at)
        _only(sub, {"tool", "argument", "prefix"}, at)
        tool = _text(sub, "tool", at, limit=200).strip()
        argument = _text(sub, "argument", at, limit=200).strip()
        prefix = _text(sub, "prefix", at, limit=200)
        if not tool and not prefix.strip():
            raise RubricError(
                f'{at} needs a "tool" (a tool the agent calls to submit) or a "prefix" (text '
                "an answer starts with)"
            )
        if argument and not tool:
            raise RubricError(f"{at}.argument names an argument of a tool: give the tool too")
        if tool and tool_names is not None and tool not in tool_names:
            listed = ", ".join(tool_names) or "none"
            raise RubricError(f"{at}.tool {tool!r} is not one of the world's tools ({listed})")
        submit = Submit(tool=tool, argument=argument, prefix=prefix if prefix.strip() else "")
    return Termination(terminal, submit)


def read_state_keys(raw: Any, where: str = "state_keys") -> tuple[StateKey, ...]:
    out = []
    seen: set[str] = set()
    for i, item in enumerate(_list(raw, where)):
        at = f"{where}[{i}]"
        data = _object(item, at)
        _only(data, {"name", "description"}, at)
        name = _text(data, "name", at, limit=MAX_NAME).strip()
        if not name:
            raise RubricError(f"{at}.name is required")
        if name in seen:
            raise RubricError(f"{at}: two state keys are named {name!r}")
        seen.add(name)
        out.append(StateKey(name, _text(data, "description", at).strip()))
    return tuple(out)


def _max_steps(raw: Any, where: str, limit: int) -> int | None:
    if raw is None:
        return None
    if isinstance(raw, bool) or not isinstance(raw, int) or not 1 <= raw <= limit:
        raise RubricError(f"{where}.max_steps must be a whole number from 1 to {limit}")
    return raw


def read_tasks(
    raw: Any,
    where: str = "tasks",
    *,
    state_keys=None,
    max_steps_limit: int = 1000,
    item_limit: int = 2000,
) -> tuple[Task, ...]:
    out = []
    seen: set[str] = set()
    for i, item in enumerate(_list(raw, where, item_limit)):
        at = f"{where}[{i}]"
        data = _object(item, at)
        _only(
            data,
            {"id", "instruction", "success_criteria", "expected", "max_steps", "rubric"},
            at,
        )
        task_id = _text(data, "id", at, limit=MAX_NAME).strip()
        if not TASK_ID.match(task_id):
            raise RubricError(
                f"{at}.id must be a slug (letters, digits, '-', '_' or '.', starting with a "
                f"letter or digit, at most 100), got {task_id!r}"
            )
        if task_id in seen:
            raise RubricError(f"{at}: two tasks have the id {task_id!r}")
        seen.add(task_id)
        at = f"{where}[{i}] ({task_id})"
        instruction = _text(data, "instruction", at).strip()
        if not instruction:
            raise RubricError(f"{at}.instruction is required (what the agent is told)")
        rubric = (
            read_rubric(data["rubric"], f"{where}[{i}].rubric", state_keys=state_keys)
            if data.get("rubric") is not None
            else None
        )
        out.append(
            Task(
                id=task_id,
                instruction=instruction,
                success_criteria=_text(data, "success_criteria", at).strip(),
                expected=_text(data, "expected", at).strip(),
                max_steps=_max_steps(data.get("max_steps"), at, max_steps_limit),
                rubric=rubric,
            )
        )
    return tuple(out)


def check_task_rubrics(tasks: Sequence[Task], world_rubric: Rubric, termination: Termination):
    """What only the task and its rubric together can say: an exact or contains check with
    no pattern needs the task's expected answer, a judge check without criteria needs the
    task's success criteria."""
    for i, task in enumerate(tasks):
        rubric = task.rubric if task.rubric is not None else world_rubric
        where = f"tasks[{i}].rubric" if task.rubric is not None else "rubric"
        parts = [("step", rubric.step), ("episode", rubric.episode)]
        if task.rubric is None:
            parts.append(("terminal", termination.terminal))
        for part, checks in parts:
            for j, check in enumerate(checks):
                at = f"termination.terminal[{j}]" if part == "terminal" else f"{where}.{part}[{j}]"
                if check.kind in ("exact", "contains") and not check.pattern and not task.expected:
                    raise RubricError(
                        f"{at} ({check.name}) has no pattern, so it compares with the task's "
                        f"expected answer, and task {task.id!r} (tasks[{i}]) has none: give "
                        "the check a pattern or the task an expected answer"
                    )
                if check.kind == "judge" and not check.criteria and not task.success_criteria:
                    raise RubricError(
                        f"{at} ({check.name}) has no criteria, so it judges by the task's "
                        f"success criteria, and task {task.id!r} (tasks[{i}]) has none"
                    )


# ---- scoring --------------------------------------------------------------------------------


def applies(check: Check, *, expected: str = "", success_criteria: str = "") -> bool:
    """Whether `check` can score a task with this expected answer and these success
    criteria: an exact or contains check without a pattern compares with the expected
    answer, a judge without criteria judges by the success criteria; without them there is
    nothing to score against (a 0 would be a false figure)."""
    if check.kind in ("exact", "contains"):
        return bool((check.pattern or expected).strip())
    if check.kind == "judge":
        return bool((check.criteria or success_criteria).strip())
    return True


def applicable(rubric: Rubric, *, expected: str = "", success_criteria: str = "") -> Rubric:
    """`rubric` without the checks that do not apply to the task (`applies`)."""

    def kept(checks: tuple[Check, ...]) -> tuple[Check, ...]:
        return tuple(
            c for c in checks if applies(c, expected=expected, success_criteria=success_criteria)
        )

    return Rubric(kept(rubric.step), kept(rubric.episode))


def _same(value: Any, wanted: Any) -> bool:
    """JSON equality: true is not 1, 1 is 1.0."""
    if isinstance(value, bool) or isinstance(wanted, bool):
        return isinstance(value, bool) and isinstance(wanted, bool) and value == wanted
    return bool(value == wanted)


_REGEX_CACHE: dict[str, re.Pattern] = {}


def _regex(pattern: str) -> re.Pattern:
    found = _REGEX_CACHE.get(pattern)
    if found is None:
        if len(_REGEX_CACHE) > 4096:
            _REGEX_CACHE.clear()
        found = _REGEX_CACHE[pattern] = re.compile(pattern)
    return found


def score_check(
    check: Check,
    *,
    observation: str = "",
    final_answer: str | None = None,
    state: Mapping[str, Any] | None = None,
    expected: str = "",
) -> float:
    """1.0 or 0.0 for every kind but judge (which needs a model: `studio.services.rewards`).
    A final-answer check with no answer submitted and a state check of an unreported key
    score 0; a blank exact/contains check with no expected answer scores 0 here too, but it
    does not apply to such a task (`applies`): rubrics leave it out rather than score it."""
    if check.kind == "judge":
        raise ValueError("a judge check is scored by asking a judge model")
    if check.kind == "state":
        if state is None or state.get(check.key) is None:
            return 0.0
        return 1.0 if _same(state.get(check.key), check.equals) else 0.0
    text = observation if check.target == "observation" else final_answer
    if text is None:
        return 0.0
    if check.kind == "regex":
        return 1.0 if _regex(check.pattern).search(text) else 0.0
    wanted = (check.pattern or expected).strip()
    if not wanted:
        return 0.0
    if check.kind == "exact":
        return 1.0 if text.strip() == wanted else 0.0
    return 1.0 if wanted in text else 0.0


def weighted(
    scored: Sequence[tuple[Check, float | None]],
) -> tuple[float | None, dict[str, float | None]]:
    """The rubric's score (the weighted mean of the checks scored; None when none was) and its
    breakdown {name: score}. A check scored None (a judge that did not answer) is in the
    breakdown as None and left out of the mean."""
    breakdown = {check.name: score for check, score in scored}
    counted = [(check.weight, score) for check, score in scored if score is not None]
    total_weight = sum(w for w, _ in counted)
    if not counted or total_weight <= 0:
        return None, breakdown
    return sum(w * s for w, s in counted) / total_weight, breakdown


def score_checks(checks: Sequence[Check], **facts) -> tuple[float | None, dict[str, float | None]]:
    """Score non-judge `checks` on `facts` (score_check's keywords) and combine them; a check
    that does not apply to the task (`applies`: no pattern and no expected answer) is left
    out, of the score and of the breakdown."""
    expected = str(facts.get("expected") or "")
    return weighted(
        [
            (check, score_check(check, **facts))
            for check in checks
            if applies(check, expected=expected)
        ]
    )


def terminal_check(termination: Termination, *, observation: str, state, expected: str = ""):
    """The name of the first terminal check that passes, or None."""
    for check in termination.terminal:
        if score_check(check, observation=observation, state=state, expected=expected) >= 1.0:
            return check.name
    return None


# ---- submit ---------------------------------------------------------------------------------

_NAME_KEYS = ("name", "tool_name", "tool")
_ARGUMENT_KEYS = ("arguments", "args", "input", "parameters")


def tool_call_of(action: Any) -> tuple[str, dict[str, Any]] | None:
    """(tool name, arguments) when `action` is a tool call: {"name", "arguments"} (OpenAI and
    MCP), {"tool_name", "arguments"} (openenv-core's CallToolAction), an OpenAI
    {"function": {...}} entry, or any of these as JSON text (how a trajectory records a
    call). Arguments given as JSON text are read."""
    if isinstance(action, str):
        text = action.strip()
        if not text.startswith("{"):
            return None
        try:
            action = json.loads(text)
        except (json.JSONDecodeError, RecursionError):
            return None
    if not isinstance(action, Mapping):
        return None
    if isinstance(action.get("function"), Mapping):
        action = action["function"]
    name = next((action[k] for k in _NAME_KEYS if isinstance(action.get(k), str)), None)
    if not name:
        return None
    arguments: Any = next((action[k] for k in _ARGUMENT_KEYS if k in action), {})
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except (json.JSONDecodeError, RecursionError):
            return name, {}
    return name, dict(arguments) if isinstance(arguments, Mapping) else {}


def action_text_of(action: Any) -> str | None:
    """The text of a text action: a string, or {"action" | "text" | "command": text}."""
    if isinstance(action, str):
        return action
    if isinstance(action, Mapping) and len(action) == 1:
        for key in ("action", "text", "command", "message"):
            if isinstance(action.get(key), str):
                return action[key]
    return None


def submitted(submit: Submit, action: Any) -> str | None:
    """The agent's final answer when `action` is the submit action, else None. A submit
    tool's answer is its `argument` (text as it is, another value as JSON), or all its
    arguments as JSON when no argument is named; a prefixed text's answer is what follows
    the prefix, stripped."""
    if not submit:
        return None
    if submit.tool:
        call = tool_call_of(action)
        if call is not None and call[0] == submit.tool:
            arguments = call[1]
            if not submit.argument:
                return json.dumps(arguments, ensure_ascii=False, sort_keys=True)
            value = arguments.get(submit.argument)
            if value is None:
                return ""
            return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    if submit.prefix:
        text = action_text_of(action)
        if text is not None and text.lstrip().startswith(submit.prefix):
            return text.lstrip()[len(submit.prefix) :].strip()
    return None


# ---- seeds and task choice ------------------------------------------------------------------


def _digest(*parts: Any) -> int:
    data = ":".join(str(p) for p in parts).encode()
    return int.from_bytes(hashlib.sha256(data).digest()[:8], "big")


def step_seed(episode_seed: int, index: int) -> int:
    """The seed of step `index` of an episode seeded `episode_seed`: sha256-derived, in
    0..2**31-1, the same on every machine and Python."""
    return _digest("agentworld-step", int(episode_seed), int(index)) % SEED_LIMIT


def draw_seed() -> int:
    """An episode seed when reset gave none (recorded, so the episode can be replayed)."""
    return secrets.randbelow(SEED_LIMIT)


def choose_task(tasks: Sequence[Task], seed: int) -> Task:
    """The world's task for an episode seeded `seed` (the same seed, the same task)."""
    if not tasks:
        raise ValueError("the world has no tasks to choose from")
    return tasks[_digest("agentworld-task", int(seed)) % len(tasks)]


def check_seed(value: Any, where: str = "seed") -> int | None:
    """An episode seed as reset takes it: None, or a whole number 0 <= seed < 2**63.
    RubricError (a ValueError) names what is wrong."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise RubricError(f"{where} must be a whole number, got {value!r}")
    if not 0 <= value < EPISODE_SEED_LIMIT:
        raise RubricError(f"{where} must be from 0 to 2**63-1, got {value}")
    return value


# ---- the judge's prompt ---------------------------------------------------------------------

JUDGE_SYSTEM_PROMPT = """\
You grade whether a software agent accomplished its task in an environment. You see the \
task the agent was given, the success criteria, the episode (each action of the agent and \
the observation the environment returned) and, when the agent submitted one, its final \
answer. Judge only by what the episode shows: an action the agent only announced, or an \
effect no observation confirms, does not count.

Score how fully the success criteria are met, from 0 (not at all) to 1 (completely); use \
values in between for partial success. Think it through briefly, then end with exactly this \
block and nothing after it:
<final_score>
```json
{"score": 0.0, "reason": "one short sentence"}
```
</final_score>"""

JUDGE_USER_TEMPLATE = """\
## Task
{task}

## Success criteria
{criteria}

## Episode
{episode}

## Final answer
{final_answer}"""

EPISODE_CHARS = 60_000  # the judge sees the end of a longer episode


def judge_messages(
    *,
    task: str,
    criteria: str,
    steps: Sequence[tuple[str, str]],
    final_answer: str | None,
    episode_chars: int = EPISODE_CHARS,
) -> list[dict[str, str]]:
    """The judge's prompt for one episode: `steps` are (action, observation) pairs."""
    turns = "\n\n".join(
        f"### Step {i + 1}\nAction:\n{action}\nObservation:\n{observation}"
        for i, (action, observation) in enumerate(steps)
    )
    if len(turns) > episode_chars:
        turns = "[... earlier steps cut ...]\n" + turns[-episode_chars:]
    user = JUDGE_USER_TEMPLATE.format(
        task=task or "(none given)",
        criteria=criteria or "The agent did what the task asks.",
        episode=turns or "(the agent took no step)",
        final_answer=final_answer if final_answer is not None else "(none submitted)",
    )
    return [{"role": "system", "content": JUDGE_SYSTEM_PROMPT}, {"role": "user", "content": user}]


_SCORE_BLOCK = re.compile(r"<final_score>(.*?)(?:</final_score>|\Z)", re.IGNORECASE | re.DOTALL)
_NUMBER = re.compile(r"(-?\d+(?:\.\d+)?)\s*(?:/\s*(\d+(?:\.\d+)?))?")


def parse_judge_score(text: str) -> float:
    """The judge's score in [0, 1] from its answer: "score" in the JSON of the last
    <final_score> block (or anywhere in the answer); "8/10" reads 0.8; a number above 1
    and at most 10 is read on a 0-10 scale, anything else is clamped to [0, 1]. ValueError
    when no score can be read (the judge is asked again)."""
    from inference.judge import JudgementError, _json_object

    text = text or ""
    blocks = _SCORE_BLOCK.findall(text)
    region = blocks[-1] if blocks else text
    try:
        data = {str(k).strip().lower(): v for k, v in _json_object(region).items()}
    except JudgementError:
        data = {}
    value = data.get("score")
    if value is None and blocks:
        value = region  # a bare number in the block
    if value is None:
        raise ValueError('no "score" in the judge\'s answer')
    if isinstance(value, bool):
        raise ValueError(f"the judge's score is not a number: {value!r}")
    if isinstance(value, int | float):
        number, scale = float(value), None
    else:
        match = _NUMBER.search(str(value))
        if match is None:
            raise ValueError(f"the judge's score is not a number: {value!r}")
        number = float(match.group(1))
        scale = float(match.group(2)) if match.group(2) else None
    if not math.isfinite(number):
        raise ValueError(f"the judge's score is not a number: {value!r}")
    if scale:
        number = number / scale
    elif 1 < number <= 10:
        number = number / 10
    return max(0.0, min(1.0, number))
