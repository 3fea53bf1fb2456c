"""The scripted demo judge (`scripted-judge` on `manage.py demo_models`): a stand-in for a judge
model, written as rules, so that a new user without weights can run evaluations, arenas and
step judging in the demo. It is NOT a model and says so in every answer.

It reads the studio's own judge prompts (`inference.judge`): the pointwise one, with or without
a reference observation, and the pairwise one. Its scores are measurements of the text, not
judgements of meaning:
- format: the prediction's shape against the reference's: for a JSON reference, whether the
  prediction parses as JSON of the same kind; for text, how close its line count and its mix of
  letters, digits, spaces and punctuation are to the reference's (1 for no output);
- factuality: how much of the reference's text the prediction reproduces (rapidfuzz's
  `ratio`, 0..100, mapped to 1..5);
- consistency: the share of the prediction's words that appear in the history or the action;
- realism: how close the prediction's length is to the reference's (or, without one, whether
  it is between 1 and 4,000 characters);
- quality: the rounded mean of the others.
A pairwise question picks the prediction with the higher factuality (or consistency without
a reference); equal within 2 points is a tie. Behaviour search's prompts (does a described
behaviour show in a step, and a name for a group of reasons) are answered by the rules of
`studio.demo_data.scripted_behaviour`."""

from __future__ import annotations

import json
import re
from typing import Any

from rapidfuzz import fuzz

JUDGE_MODEL = "scripted-judge"
NOTE = "scripted demo judge (rules, not a model): scores measure the text's overlap"

# The headings of the studio's judge prompts, exactly (a heading-like line inside an
# observation must not cut a section short).
_HEADINGS = (
    "## Interaction history (earlier turns)",
    "## Current turn (the agent's action)",
    "## Reference observation (real environment)",
    "## Reference observation (what the real environment returned)",
    "## Predicted observation (world model)",
    "## Prediction A",
    "## Prediction B",
)
_SECTION = re.compile("^(" + "|".join(re.escape(h) for h in _HEADINGS) + ")[ \t]*$", re.M)
_WORD = re.compile(r"[A-Za-z0-9_]{2,}")


def _sections(text: str) -> dict[str, str]:
    found: dict[str, str] = {}
    marks = list(_SECTION.finditer(text))
    for i, match in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(text)
        title = match.group(1)[3:].strip().lower()
        found[title] = text[match.end() : end].strip()
    return found


def _pick(sections: dict[str, str], prefix: str) -> str | None:
    for title, body in sections.items():
        if title.startswith(prefix):
            return body
    return None


def _scale(fraction: float) -> int:
    return max(1, min(5, 1 + round(4 * max(0.0, min(1.0, fraction)))))


def _kind(text: str) -> str:
    head = text.lstrip()[:1]
    return {"{": "object", "[": "list"}.get(head, "text")


def _profile(text: str) -> list[float]:
    """The shares of letters, digits, whitespace, punctuation and anything else in `text`."""
    counts = [0, 0, 0, 0, 0]
    for ch in text:
        if ch.isalpha():
            counts[0] += 1
        elif ch.isdigit():
            counts[1] += 1
        elif ch.isspace():
            counts[2] += 1
        elif ch.isascii() and ch.isprintable():
            counts[3] += 1
        else:
            counts[4] += 1
    total = max(1, len(text))
    return [c / total for c in counts]


def _format(prediction: str, reference: str) -> int:
    kind = _kind(reference)
    if kind != "text":
        try:
            parsed = json.loads(prediction)
        except ValueError:
            return 2 if _kind(prediction) == kind else 1
        return 5 if _kind(json.dumps(parsed)) == kind else 3
    lines_p, lines_r = prediction.count("\n") + 1, reference.count("\n") + 1
    lines = min(lines_p, lines_r) / max(lines_p, lines_r)
    shares = zip(_profile(prediction), _profile(reference), strict=True)
    mix = 1 - 0.5 * sum(abs(a - b) for a, b in shares)
    return _scale((lines + mix) / 2)


def _overlap(prediction: str, context: str) -> float:
    words = _WORD.findall(prediction.lower())
    if not words:
        return 0.0
    known = set(_WORD.findall(context.lower()))
    return sum(1 for w in words if w in known) / len(words)


def _factuality(prediction: str, reference: str) -> float:
    return fuzz.ratio(prediction, reference) / 100.0


def score(
    prediction: str, reference: str | None, history: str, action: str
) -> tuple[dict[str, int], list[str], list[str]]:
    """Scores of one prediction, with the strengths and weaknesses they stand for."""
    empty = not prediction.strip() or prediction.strip() == "No output"
    consistency = 1 if empty else _scale(_overlap(prediction, f"{history}\n{action}"))
    if reference is None:
        realism = 1 if empty else (4 if 1 <= len(prediction) <= 4000 else 2)
        scores = {"consistency": consistency, "realism": realism}
    else:
        fmt = 1 if empty else _format(prediction, reference)
        factual = 1 if empty else _scale(_factuality(prediction, reference))
        longer = max(len(prediction), len(reference), 1)
        realism = 1 if empty else _scale(min(len(prediction), len(reference)) / longer)
        scores = {
            "format": fmt,
            "factuality": factual,
            "consistency": consistency,
            "realism": realism,
        }
        scores["quality"] = round(sum(scores.values()) / len(scores))
    strengths = [f"{k} {v}/5 by overlap" for k, v in scores.items() if v >= 4]
    weaknesses = [f"{k} {v}/5 by overlap" for k, v in scores.items() if v <= 2]
    return scores, strengths, weaknesses


def _evaluation(scores: dict[str, int], strengths: list[str], weaknesses: list[str]) -> str:
    body = json.dumps({"scores": scores, "strengths": strengths, "weaknesses": weaknesses})
    return f"{NOTE}.\n<final_evaluation>\n```json\n{body}\n```\n</final_evaluation>"


def _verdict(winner: str, reason: str) -> str:
    body = json.dumps({"winner": winner, "reason": reason})
    return f"{NOTE}.\n<final_verdict>\n```json\n{body}\n```\n</final_verdict>"


def judge_answer(messages: list[dict[str, Any]]) -> str:
    """The judge's answer to one of the studio's judge prompts (the last user message); a
    behaviour search's prompts are answered by `studio.demo_data.scripted_behaviour`."""
    from studio.demo_data.scripted_behaviour import behaviour_answer

    answered = behaviour_answer(messages)
    if answered is not None:
        return answered
    user = ""
    for message in messages:
        if message.get("role") == "user" and isinstance(message.get("content"), str):
            user = message["content"]
    sections = _sections(user)
    history = _pick(sections, "interaction history") or ""
    action = _pick(sections, "current turn") or ""
    reference = _pick(sections, "reference observation")
    first, second = _pick(sections, "prediction a"), _pick(sections, "prediction b")
    if first is not None and second is not None:
        if reference is not None:
            a, b = _factuality(first, reference), _factuality(second, reference)
            basis = "closer to the reference's text"
        else:
            context = f"{history}\n{action}"
            a, b = _overlap(first, context), _overlap(second, context)
            basis = "more of its words in the history"
        if abs(a - b) <= 0.02:
            return _verdict("tie", f"equal overlap ({a:.2f} and {b:.2f})")
        winner = "A" if a > b else "B"
        return _verdict(winner, f"{winner} is {basis} ({a:.2f} against {b:.2f})")
    prediction = _pick(sections, "predicted observation")
    if prediction is None:
        return (
            f"{NOTE}: this prompt is none of the studio's judge prompts (no "
            "'## Predicted observation' section), so there is nothing to score."
        )
    scores, strengths, weaknesses = score(prediction, reference, history, action)
    return _evaluation(scores, strengths, weaknesses)
