"""A queue's custom questions, asked beside the five dimensions, and the answers to them.

A question is {"key", "label", "kind", "options", "min", "max", "required"}:
- `scale`: a whole number from `min` to `max` (0-9: each value is one key on the item page);
- `single`: one of `options`; `multi`: any of `options` (at least one when required);
- `text`: free text.
`validate_questions` checks what a lead wrote (from the form or JSON) and gives it back in
one shape; `validate_answers` checks an annotator's answers against them. Both raise
ValueError naming the question and what is wrong with it."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

KINDS = ("scale", "single", "multi", "text")
MAX_QUESTIONS = 20
MAX_OPTIONS = 20
MAX_LABEL_CHARS = 300
MAX_OPTION_CHARS = 100
MAX_TEXT_CHARS = 5_000
# 0-9: one key per value on the item page (the digit keys)
SCALE_LOWEST, SCALE_HIGHEST = 0, 9
KEY = re.compile(r"^[a-z][a-z0-9_]{0,39}$")
# the five dimensions' form fields and the annotation's own are not a question's key
RESERVED = {"format", "factuality", "consistency", "realism", "quality", "verdict", "tags",
            "comment", "corrected_observation"}  # fmt: skip


def _int(value: Any, what: str) -> int:
    if isinstance(value, bool):
        raise ValueError(what)
    try:
        return int(str(value).strip())
    except ValueError:
        raise ValueError(what) from None


def validate_questions(raw: Any) -> list[dict[str, Any]]:
    """The questions in order, each with every field (options [] and min/max None where the
    kind has none)."""
    if raw in (None, ""):
        return []
    if not isinstance(raw, list):
        raise ValueError("the questions must be a list")
    if len(raw) > MAX_QUESTIONS:
        raise ValueError(f"at most {MAX_QUESTIONS} questions")
    found: list[dict[str, Any]] = []
    keys: set[str] = set()
    for n, item in enumerate(raw, 1):
        if not isinstance(item, Mapping):
            raise ValueError(f"question {n} is not an object with a key, a label and a kind")
        key = str(item.get("key") or "").strip()
        name = f"question {key!r}" if key else f"question {n}"
        if not KEY.match(key):
            raise ValueError(
                f"{name}: the key must be lower-case letters, digits or _ (at most 40), "
                "starting with a letter"
            )
        if key in RESERVED:
            raise ValueError(f"{name}: {key!r} is the name of one of the annotation's own fields")
        if key in keys:
            raise ValueError(f"{name}: two questions have this key")
        keys.add(key)
        label = str(item.get("label") or "").strip() or key
        if len(label) > MAX_LABEL_CHARS:
            raise ValueError(f"{name}: the label has at most {MAX_LABEL_CHARS} characters")
        kind = str(item.get("kind") or "").strip()
        if kind not in KINDS:
            raise ValueError(f"{name}: the kind must be one of {', '.join(KINDS)}")
        question: dict[str, Any] = {
            "key": key,
            "label": label,
            "kind": kind,
            "options": [],
            "min": None,
            "max": None,
            "required": bool(item.get("required", False)),
        }
        if kind == "scale":
            bounds = f"{name}: min and max must be whole numbers"
            low = _int(item.get("min", 1), bounds)
            high = _int(item.get("max", 5), bounds)
            if not SCALE_LOWEST <= low < high <= SCALE_HIGHEST:
                raise ValueError(
                    f"{name}: the scale must run from a lower to a higher whole number within "
                    f"{SCALE_LOWEST}-{SCALE_HIGHEST} (got {low}-{high})"
                )
            question["min"], question["max"] = low, high
        elif kind in ("single", "multi"):
            options_raw = item.get("options") or []
            if isinstance(options_raw, str):
                options_raw = options_raw.split(",")
            if not isinstance(options_raw, list | tuple):
                raise ValueError(f"{name}: the options must be a list")
            options: list[str] = []
            for option in (str(o).strip() for o in options_raw):
                if option and option not in options:
                    options.append(option)
            if len(options) < 2:
                raise ValueError(f"{name}: a {kind} choice needs at least two options")
            if len(options) > MAX_OPTIONS:
                raise ValueError(f"{name}: at most {MAX_OPTIONS} options")
            if any(len(o) > MAX_OPTION_CHARS for o in options):
                raise ValueError(f"{name}: an option has at most {MAX_OPTION_CHARS} characters")
            question["options"] = options
        found.append(question)
    return found


def validate_answers(questions: list[dict[str, Any]], raw: Mapping[str, Any]) -> dict[str, Any]:
    """The answers {key: int | str | list[str]} to `questions` (already valid) from `raw`:
    a form's `q_<key>` fields (a QueryDict: a multi choice's values with getlist) or a dict
    by key. Unanswered optional questions are left out; anything not a question is ignored."""
    answers: dict[str, Any] = {}
    for q in questions:
        key, kind = q["key"], q["kind"]
        name = f"question {q['label']!r}"
        value: Any
        if kind == "multi":
            if hasattr(raw, "getlist"):
                values = raw.getlist(f"q_{key}") or raw.getlist(key)
            else:
                values = raw.get(f"q_{key}", raw.get(key)) or []
                if isinstance(values, str):
                    values = [values]
            if not isinstance(values, list | tuple):
                raise ValueError(f"{name}: the answer must be a list of options")
            chosen = [str(v) for v in values if str(v) != ""]
            wrong = [v for v in chosen if v not in q["options"]]
            if wrong:
                raise ValueError(f"{name}: {wrong[0]!r} is not one of its options")
            # in the options' order, once each: two answers that pick the same are equal
            value = [o for o in q["options"] if o in chosen]
            empty = not value
        else:
            value = raw.get(f"q_{key}", raw.get(key, ""))
            if isinstance(value, list | tuple):
                value = value[-1] if value else ""
            value = "" if value is None else value
            text = str(value).strip()
            empty = text == ""
            if kind == "scale" and not empty:
                number = _int(text, f"{name}: the answer must be a whole number")
                if not q["min"] <= number <= q["max"]:
                    raise ValueError(
                        f"{name}: the answer must be {q['min']}-{q['max']}, got {number}"
                    )
                value = number
            elif kind == "single" and not empty:
                if text not in q["options"]:
                    raise ValueError(f"{name}: {text!r} is not one of its options")
                value = text
            elif kind == "text":
                if len(text) > MAX_TEXT_CHARS:
                    raise ValueError(f"{name}: the answer has at most {MAX_TEXT_CHARS} characters")
                value = text
        if empty:
            if q.get("required"):
                raise ValueError(f"{name} is required")
            continue
        answers[key] = value
    return answers


def display(questions: list[dict[str, Any]], answers: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(label, answer in words) of each answered question, in the questions' order."""
    rows = []
    for q in questions:
        if q["key"] not in (answers or {}):
            continue
        value = answers[q["key"]]
        rows.append((q["label"], ", ".join(value) if isinstance(value, list) else str(value)))
    return rows
