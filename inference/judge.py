"""LLM-as-judge for AgentWorldBench predictions: a judge model compares each predicted
observation with the ground truth (`response[turn_idx - 1]`) and scores five dimensions 1-5.
Its answer is a fenced ```json block inside <final_evaluation> tags. Prompts written for this
project. A judgement that fails (API error or unparseable answer) is retried, then marked
failed in the output so scoring leaves it out."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any, cast

from inference.awb_runner import RunStats, run_concurrently

DIMENSIONS = ("format", "factuality", "consistency", "realism", "quality")

JUDGE_SYSTEM_PROMPT = """\
You grade a world model: a model that plays the environment of a software agent and writes the
observation the environment would return after the agent's action. You see the interaction so
far, the agent's latest action, the observation the real environment returned (the reference)
and the observation the world model predicted. Judge the prediction as an observation of this
environment, not its wording: a prediction can differ from the reference and still be right
when the environment could plausibly have answered that way.

Score each dimension with an integer from 1 (very poor) to 5 (excellent):
- format: the prediction has the shape this environment produces (JSON structure, terminal
  output, element list, page text, error format), with no chatter or commentary.
- factuality: the facts it states (values, files, results, states) agree with the reference
  and with what the history establishes; invented facts that contradict them score low.
- consistency: it follows from the history and the action, and contradicts nothing shown
  earlier (files created, pages visited, values returned).
- realism: a real environment could have returned it: plausible content, length and detail,
  errors where the action is invalid.
- quality: overall usefulness as a stand-in for the real observation when training or testing
  an agent.

Think it through briefly, then end with exactly this block and nothing after it:
<final_evaluation>
```json
{"format": 1-5, "factuality": 1-5, "consistency": 1-5, "realism": 1-5, "quality": 1-5}
```
</final_evaluation>"""

JUDGE_USER_TEMPLATE = """\
## Interaction history (earlier turns)
{history}

## Current turn (the agent's action)
{current}

## Reference observation (real environment)
{reference}

## Predicted observation (world model)
{prediction}"""

HISTORY_CHARS = 12000  # keep the judge prompt bounded: the most recent history wins
FIELD_CHARS = 16000


class JudgementError(ValueError):
    pass


def _clip(text: str, limit: int, *, keep_end: bool = False) -> str:
    if len(text) <= limit:
        return text
    if keep_end:
        return "[... earlier text cut ...]\n" + text[-limit:]
    return text[:limit] + "\n[... cut ...]"


def build_judge_messages(row: dict) -> list[dict]:
    turn = int(row["turn_idx"])
    prompts, responses = row["prompt"], row["response"]
    history = "\n\n".join(
        f"{prompts[i]}\n\n{responses[i]}" for i in range(turn - 1) if i < len(responses)
    )
    user = JUDGE_USER_TEMPLATE.format(
        history=_clip(history, HISTORY_CHARS, keep_end=True) or "(none: this is the first turn)",
        current=_clip(prompts[turn - 1], FIELD_CHARS),
        reference=_clip(str(responses[turn - 1]), FIELD_CHARS),
        prediction=_clip(str(row.get("predicted_observation", "")), FIELD_CHARS) or "(empty)",
    )
    return [
        {"role": "system", "content": JUDGE_SYSTEM_PROMPT},
        {"role": "user", "content": user},
    ]


_FINAL = re.compile(r"<final_evaluation>(.*?)</final_evaluation>", re.S)
_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.S)


def parse_judgement(text: str) -> dict[str, int]:
    """Scores from the LAST <final_evaluation> block's fenced JSON; every dimension an
    integer 1-5, else JudgementError naming what is wrong."""
    blocks = _FINAL.findall(text or "")
    if not blocks:
        raise JudgementError("no <final_evaluation>...</final_evaluation> block in the answer")
    fences = _FENCE.findall(blocks[-1])
    if not fences:
        raise JudgementError("no fenced ```json block inside <final_evaluation>")
    try:
        data = json.loads(fences[-1])
    except json.JSONDecodeError as exc:
        raise JudgementError(f"the JSON inside <final_evaluation> is invalid ({exc.msg})") from None
    if not isinstance(data, dict):
        raise JudgementError("the JSON inside <final_evaluation> is not an object")
    scores: dict[str, int] = {}
    for dim in DIMENSIONS:
        value = data.get(dim)
        if isinstance(value, str) and value.strip().isdigit():
            value = int(value.strip())
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 5:
            raise JudgementError(f"score {dim!r} must be an integer 1-5, got {value!r}")
        scores[dim] = value
    return scores


def total_score(scores: dict[str, int]) -> float:
    return sum(scores[d] for d in DIMENSIONS) / len(DIMENSIONS)


class Judge:
    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key: str = "EMPTY",
        temperature: float = 0.0,
        max_tokens: int = 2048,
        attempts: int = 3,
        timeout: float = 300,
        backoff_s: float = 1.0,
    ):
        from openai import OpenAI

        self.model = model
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.attempts = attempts
        self.backoff_s = backoff_s
        self.client = OpenAI(base_url=base_url, api_key=api_key, timeout=timeout, max_retries=0)

    def judge_row(self, row: dict) -> dict:
        messages = build_judge_messages(row)
        errors: list[str] = []
        raw = ""
        for attempt in range(self.attempts):
            try:
                response = self.client.chat.completions.create(
                    model=self.model,
                    messages=cast(Any, messages),
                    temperature=self.temperature,
                    max_tokens=self.max_tokens,
                )
                raw = response.choices[0].message.content or ""
                scores = parse_judgement(raw)
                return {
                    **row,
                    "judge": {
                        "status": "ok",
                        "scores": scores,
                        "raw": raw,
                        "attempts": attempt + 1,
                    },
                    "scores": scores,
                    "total_score": total_score(scores),
                }
            except Exception as exc:  # noqa: BLE001 - API or parse failure: retry
                errors.append(f"attempt {attempt + 1}: {type(exc).__name__}: {exc}")
                if attempt + 1 < self.attempts:
                    time.sleep(self.backoff_s * (2**attempt))
        return {
            **row,
            "judge": {"status": "failed", "errors": errors, "raw": raw, "attempts": self.attempts},
            "scores": None,
            "total_score": None,
        }


def run_judge(
    rows: list[dict],
    judge: Judge,
    out_path: str | Path,
    *,
    concurrency: int = 8,
    show_progress: bool = True,
) -> RunStats:
    stats = run_concurrently(
        rows,
        judge.judge_row,
        Path(out_path),
        concurrency=concurrency,
        desc="judge",
        show_progress=show_progress,
    )
    return stats
