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

Status: "well_formed" (a closed block), "unclosed" (last block has no closing tag), "no_tag".
These strings equal `studio.models.trajectories.ParseStatus` values."""

from __future__ import annotations

import re
from dataclasses import dataclass

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"
OBS_OPEN = "<predicted_observation>"
OBS_CLOSE = "</predicted_observation>"

WELL_FORMED = "well_formed"
NO_TAG = "no_tag"
UNCLOSED = "unclosed"

_THINK_BLOCK = re.compile(re.escape(THINK_OPEN) + r"(.*?)" + re.escape(THINK_CLOSE), re.DOTALL)


@dataclass(frozen=True)
class ParsedPrediction:
    observation: str
    thinking: str  # text of the dropped think parts, joined by blank lines
    status: str  # well_formed | no_tag | unclosed
    raw: str = ""


def strip_thinking(text: str) -> tuple[str, list[str]]:
    """Apply rules 1-3; return the cleaned text and the dropped thinking parts."""
    dropped: list[str] = []

    def _drop(match: re.Match) -> str:
        dropped.append(match.group(1))
        return ""

    cleaned = _THINK_BLOCK.sub(_drop, text)

    close_at = cleaned.rfind(THINK_CLOSE)
    if close_at != -1:
        dropped.append(cleaned[:close_at])
        cleaned = cleaned[close_at + len(THINK_CLOSE) :]

    while (open_at := cleaned.find(THINK_OPEN)) != -1:
        obs_at = cleaned.find(OBS_OPEN, open_at)
        end = len(cleaned) if obs_at == -1 else obs_at
        dropped.append(cleaned[open_at + len(THINK_OPEN) : end])
        cleaned = cleaned[:open_at] + cleaned[end:]
    return cleaned, dropped


def parse_prediction(text: str) -> ParsedPrediction:
    if text is None:
        raise TypeError("parse_prediction needs the model output as a string, got None")
    cleaned, dropped = strip_thinking(text)
    thinking = "\n\n".join(part.strip() for part in dropped if part.strip())

    open_at = cleaned.rfind(OBS_OPEN)
    if open_at == -1:
        return ParsedPrediction(cleaned.strip(), thinking, NO_TAG, text)
    body = cleaned[open_at + len(OBS_OPEN) :]
    close_at = body.find(OBS_CLOSE)
    if close_at == -1:
        return ParsedPrediction(body.strip(), thinking, UNCLOSED, text)
    return ParsedPrediction(body[:close_at].strip(), thinking, WELL_FORMED, text)
