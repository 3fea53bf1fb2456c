"""Parse a world model's raw output into the predicted observation, the same way the reference
AgentWorldBench evaluation does, and record which case happened so the UI can flag it.

Rules, in order:
1. every complete `<think>...</think>` block is dropped;
2. an orphan `</think>` (left after step 1) drops everything before it (the last one wins);
3. an orphan `<think>` drops everything from it up to the next `<predicted_observation>` (or to
   the end of the text when none follows);
4. the LAST `<predicted_observation>` block is the answer: its text up to the closing tag, or to
   the end when the block is not closed, stripped;
5. without any `<predicted_observation>`, the answer is the whole cleaned text, stripped.

A world with state keys asks the model to append `<state>{...}</state>` after its
observation: the last such block that holds a JSON object and ends the (cleaned) text is the
reported state (`state`, None without one) and is never part of the observation, in any
case above.

Tags match in any case. Status: "well_formed" (a closed block), "unclosed" (last block has no
closing tag), "no_tag".
These strings equal `studio.models.trajectories.ParseStatus` values."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"
OBS_OPEN = "<predicted_observation>"
OBS_CLOSE = "</predicted_observation>"

WELL_FORMED = "well_formed"
NO_TAG = "no_tag"
UNCLOSED = "unclosed"

# Tags match in any case (<Think>, <PREDICTED_OBSERVATION>), as the reference parser's do.
_I = re.IGNORECASE | re.DOTALL
_THINK_BLOCK = re.compile(re.escape(THINK_OPEN) + r"(.*?)" + re.escape(THINK_CLOSE), _I)
_THINK_OPEN = re.compile(re.escape(THINK_OPEN), _I)
_THINK_CLOSE = re.compile(re.escape(THINK_CLOSE), _I)
_OBS_OPEN = re.compile(re.escape(OBS_OPEN), _I)
_OBS_CLOSE = re.compile(re.escape(OBS_CLOSE), _I)
# the state report: a JSON object in state tags at the very end (after the observation)
_STATE_AT_END = re.compile(r"<state>\s*(\{.*\})\s*(?:</state>\s*)?\Z", _I)


@dataclass(frozen=True)
class ParsedPrediction:
    observation: str
    thinking: str  # text of the dropped think parts, joined by blank lines
    status: str  # well_formed | no_tag | unclosed
    raw: str = ""
    state: dict | None = None  # what a world with state keys reported, when it did


def _last(pattern: re.Pattern, text: str) -> re.Match | None:
    found = None
    for found in pattern.finditer(text):  # noqa: B007 - the last one is wanted
        pass
    return found


def strip_thinking(text: str) -> tuple[str, list[str]]:
    """Apply rules 1-3; return the cleaned text and the dropped thinking parts. A nested
    block (<think>a <think>b</think> c</think>) leaves an orphan closing tag after rule 1,
    which rule 2 resolves: everything up to the last one is thinking."""
    dropped: list[str] = []

    def _drop(match: re.Match) -> str:
        dropped.append(match.group(1))
        return ""

    cleaned = _THINK_BLOCK.sub(_drop, text)

    close = _last(_THINK_CLOSE, cleaned)
    if close is not None:
        dropped.append(cleaned[: close.start()])
        cleaned = cleaned[close.end() :]

    while (opened := _THINK_OPEN.search(cleaned)) is not None:
        obs = _OBS_OPEN.search(cleaned, opened.start())
        end = len(cleaned) if obs is None else obs.start()
        dropped.append(cleaned[opened.end() : end])
        cleaned = cleaned[: opened.start()] + cleaned[end:]
    return cleaned, dropped


def split_state(text: str) -> tuple[str, dict | None]:
    """The text without a trailing `<state>{...}</state>` report, and the report's object
    (None when the text ends with none, or its JSON is no object). An unclosed state tag at
    the very end counts (a model cut off at its length limit)."""
    start = None
    for start in re.finditer(r"<state>", text, _I):  # noqa: B007 - the last one is wanted
        pass
    if start is None:
        return text, None
    match = _STATE_AT_END.match(text, start.start())
    if match is None:
        return text, None
    try:
        data = json.loads(match.group(1))
    except (json.JSONDecodeError, RecursionError):
        try:
            import json_repair

            data = json_repair.loads(match.group(1))
        except Exception:  # noqa: BLE001 - unreadable: no report, the text stays
            return text, None
    if not isinstance(data, dict):
        return text, None
    return text[: start.start()], data


def parse_prediction(text: str) -> ParsedPrediction:
    if text is None:
        raise TypeError("parse_prediction needs the model output as a string, got None")
    cleaned, dropped = strip_thinking(text)
    thinking = "\n\n".join(part.strip() for part in dropped if part.strip())
    cleaned, state = split_state(cleaned)

    opened = _last(_OBS_OPEN, cleaned)
    if opened is None:
        return ParsedPrediction(cleaned.strip(), thinking, NO_TAG, text, state)
    body = cleaned[opened.end() :]
    close = _OBS_CLOSE.search(body)
    if close is None:
        return ParsedPrediction(body.strip(), thinking, UNCLOSED, text, state)
    return ParsedPrediction(body[: close.start()].strip(), thinking, WELL_FORMED, text, state)
