"""LLM-as-judge for AgentWorldBench predictions: a judge model compares each predicted
observation with the ground truth (`response[turn_idx - 1]`) and scores five dimensions 1-5.
Prompts written for this project; the answer shape and the row fields are the reference
pipeline's (QwenLM/Qwen-AgentWorld eval/eval.py), so files go both ways:

- the judge answers inside <final_evaluation> with a fenced JSON object whose five scores sit
  under "scores", beside "strengths" and "weaknesses"; the parser also takes a flat object
  (whole only), an unclosed or missing tag, a missing fence, near-JSON (repaired), and tags in
  any case; values are read as the reference's parser reads them (eval/lwm_eval_utils
  judge_parser): "4/5" and "8/10" by their numerator (8 clamps to 5), floats rounded, 0 or
  unreadable values left out; a partial "scores" object is scored on the dimensions present;
- a prediction row carries `predicted_observation` (the studio's infer) or only `gen` (the
  reference's), parsed as the reference does ("No output" when nothing is left);
- a judged row gets the reference's fields (the five dimensions flat, `total_score`, `failed`
  1.0/0.0, `strengths`, `weaknesses`, `extracted_output`, `judge_raw_output`) beside the
  studio's (`scores`, `judge`). A row without a generation is marked failed without asking the
  judge; a judgement that fails (API error, unparseable answer) is retried, then marked failed
  (its `judge.unreachable` says why when no attempt reached the server, so a caller can stop
  instead of trying every row). Scoring leaves failed rows out."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar, cast

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

Think it through briefly, then end with exactly this block and nothing after it (each score an
integer; strengths and weaknesses short phrases, possibly none):
<final_evaluation>
```json
{"scores": {"format": 1-5, "factuality": 1-5, "consistency": 1-5, "realism": 1-5,
            "quality": 1-5},
 "strengths": ["..."], "weaknesses": ["..."]}
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

# Without a real observation to compare with (a future whose action the recorded trajectory
# never took, a fictional world, a perturbation), only what needs no reference is scored.
NO_REFERENCE_DIMENSIONS = ("consistency", "realism")

NO_REFERENCE_SYSTEM_PROMPT = """\
You grade a world model: a model that plays the environment of a software agent and writes the
observation the environment would return after the agent's action. You see the interaction so
far, the agent's latest action and the observation the world model predicted. No real
observation exists for this action, so judge only what the history and the action let you
judge.

Score each dimension with an integer from 1 (very poor) to 5 (excellent):
- consistency: it follows from the history and the action, and contradicts nothing shown
  earlier (files created, pages visited, values returned).
- realism: a real environment could have returned it: plausible content, length and detail,
  the environment's own format, errors where the action is invalid.

Think it through briefly, then end with exactly this block and nothing after it (each score an
integer; strengths and weaknesses short phrases, possibly none):
<final_evaluation>
```json
{"scores": {"consistency": 1-5, "realism": 1-5},
 "strengths": ["..."], "weaknesses": ["..."]}
```
</final_evaluation>"""

NO_REFERENCE_USER_TEMPLATE = """\
## Interaction history (earlier turns)
{history}

## Current turn (the agent's action)
{current}

## Predicted observation (world model)
{prediction}"""

NO_OUTPUT = "No output"  # what the judge sees of a prediction with nothing left after parsing


class JudgementError(ValueError):
    pass


def _clip(text: str, limit: int | None, *, keep_end: bool = False) -> str:
    if limit is None or len(text) <= limit:
        return text
    if keep_end:
        return "[... earlier text cut ...]\n" + text[-limit:]
    return text[:limit] + "\n[... cut ...]"


def prediction_of(row: dict) -> str | None:
    """The predicted observation of a prediction row: `predicted_observation` (the studio's
    infer) or `gen` parsed as the reference parses it; "No output" when nothing is left (an
    empty or thinking-only answer); None for a row without a generation (failed)."""
    from inference.parsing import parse_prediction

    if isinstance(row.get("predicted_observation"), str) and row.get("gen", True):
        return row["predicted_observation"].strip() or NO_OUTPUT
    gen = row.get("gen")
    if not isinstance(gen, str) or not gen:
        return None
    return parse_prediction(gen).observation or NO_OUTPUT


def dimensions_of(row: dict) -> tuple[str, ...]:
    """What a row is judged on: the five dimensions, or two for a row marked `no_reference`
    (the studio's simulated steps with no recorded observation to compare with)."""
    return NO_REFERENCE_DIMENSIONS if row.get("no_reference") else DIMENSIONS


def build_judge_messages(row: dict, *, history_chars: int | None = None) -> list[dict]:
    """The judge's prompt for one row: the whole history by default, as the reference sends
    it; `history_chars` keeps only its last characters. A `no_reference` row gets the prompt
    without a reference observation (`response[turn_idx - 1]` is not read)."""
    turn = int(row["turn_idx"])
    prompts, responses = row["prompt"], row["response"]
    history = "\n\n".join(
        f"{prompts[i]}\n\n{responses[i]}" for i in range(turn - 1) if i < len(responses)
    )
    prediction = prediction_of(row)
    if row.get("no_reference"):
        return [
            {"role": "system", "content": NO_REFERENCE_SYSTEM_PROMPT},
            {
                "role": "user",
                "content": NO_REFERENCE_USER_TEMPLATE.format(
                    history=_clip(history, history_chars, keep_end=True)
                    or "(none: this is the first turn)",
                    current=prompts[turn - 1],
                    prediction=NO_OUTPUT if prediction is None else prediction,
                ),
            },
        ]
    user = JUDGE_USER_TEMPLATE.format(
        history=_clip(history, history_chars, keep_end=True) or "(none: this is the first turn)",
        current=prompts[turn - 1],
        reference=str(responses[turn - 1]) if turn - 1 < len(responses) else "",
        prediction=NO_OUTPUT if prediction is None else prediction,
    )
    return [
        {"role": "system", "content": JUDGE_SYSTEM_PROMPT},
        {"role": "user", "content": user},
    ]


@dataclass
class Judgement:
    scores: dict[str, float]  # each dimension scored, 1-5 (a partial answer: only those)
    strengths: list[str] = field(default_factory=list)
    weaknesses: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)  # dimensions asked for and not scored

    @property
    def total(self) -> float:
        """The mean of the dimensions scored, as the reference's total_score."""
        return sum(self.scores.values()) / len(self.scores)


_I = re.IGNORECASE | re.DOTALL
_FINAL_OPEN = re.compile(r"<final_evaluation>", _I)
_FINAL_CLOSE = re.compile(r"</final_evaluation>", _I)
_FENCE = re.compile(r"```(?:json)?[ \t]*\n?(.*?)(?:```|\Z)", _I)
INVALID_SCORE = 0  # what the reference writes for a dimension it could not read


def _evaluation_text(text: str) -> str:
    """The last <final_evaluation> block (to its closing tag, or to the end when it is not
    closed), else the whole answer."""
    opened = None
    for opened in _FINAL_OPEN.finditer(text):  # noqa: B007 - the last one is wanted
        pass
    if opened is None:
        return text
    body = text[opened.end() :]
    close = _FINAL_CLOSE.search(body)
    return body if close is None else body[: close.start()]


def _json_object(region: str) -> dict:
    import json_repair

    candidates = [m.group(1) for m in _FENCE.finditer(region) if "{" in m.group(1)]
    if not candidates:
        start, end = region.find("{"), region.rfind("}")
        if start == -1:
            raise JudgementError("no JSON object with the scores in the answer")
        candidates = [region[start : end + 1] if end > start else region[start:]]
    text = candidates[-1].strip()
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        data = json_repair.loads(text)  # near-JSON: trailing commas, quotes, cut off
    if not isinstance(data, dict):
        raise JudgementError("the JSON with the scores is not an object")
    return data


def read_score(value: Any) -> int | None:
    """A dimension's value as the reference reads it: an int as it is, a float rounded, a
    string by the whole number before any "/" ("4", "4/5"; "8/10" reads 8, clamped to 5: the
    reference does not rescale), clamped to 1-5. None (not scored) for anything else: a
    missing value, a bool, "3.5", "great", and 0 or below (the reference writes 0 there and
    leaves it out of every figure; it keeps a negative value, which would pull a figure below
    0, so the studio leaves that out too)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        number = value
    elif isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            return None
        number = int(round(value))
    elif isinstance(value, str):
        try:
            number = int(value.split("/")[0].strip())
        except ValueError:
            return None
    else:
        return None
    if number <= INVALID_SCORE:
        return None
    return max(1, min(5, number))


def _phrases(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value] if value.strip() else []
    if isinstance(value, list):
        return [str(v) for v in value if str(v).strip()]
    return []


def _names(dims: list[str]) -> str:
    return ", ".join(dims)


def parse_judgement(text: str, dimensions: tuple[str, ...] = DIMENSIONS) -> Judgement:
    """The judge's scores on `dimensions` (and strengths, weaknesses) from its answer, as the
    reference parser reads them. Scores under "scores" (the reference's shape) may be partial,
    as the reference takes them: the row is scored on the dimensions present (its total their
    mean) and the others are left out; an answer that scores none fails (the reference would
    keep it, with a total of 0 that no figure counts). A flat object (no "scores", which the
    reference refuses) is taken only whole. JudgementError says what is wrong."""
    data = {
        str(k).strip().lower(): v for k, v in _json_object(_evaluation_text(text or "")).items()
    }
    nested = data.get("scores")
    flat = not isinstance(nested, dict)
    source = data
    if isinstance(nested, dict):
        source = {str(k).strip().lower(): v for k, v in nested.items()}
    scores: dict[str, float] = {}
    missing: list[str] = []
    unreadable: list[str] = []
    for dim in dimensions:
        value = read_score(source.get(dim))
        if value is not None:
            scores[dim] = value
        else:
            missing.append(dim)
            if source.get(dim) is not None:
                unreadable.append(f"{dim!r} is not a number (got {source.get(dim)!r})")
    if missing and (flat or not scores):
        where = "in the JSON object" if flat else 'under "scores"'
        detail = f" ({'; '.join(unreadable)})" if unreadable else ""
        raise JudgementError(
            f"missing dimensions {where}: " + _names([f"{d!r}" for d in missing]) + detail
        )
    return Judgement(
        scores, _phrases(data.get("strengths")), _phrases(data.get("weaknesses")), missing
    )


def judge_shape_problem(text: str, dimensions: tuple[str, ...] = DIMENSIONS) -> str | None:
    """What keeps a judge's answer from the judge answer shape (a JSON object scoring every
    dimension 1-5), in words ("no JSON object", "missing dimensions: realism"); None when it
    has it. Stricter than `parse_judgement`, which scores a partial answer: the Test of a
    judge model asks for the whole shape."""
    if not (text or "").strip():
        return "no JSON object (an empty answer)"
    try:
        data = _json_object(_evaluation_text(text))
    except JudgementError:
        return "no JSON object"
    data = {str(k).strip().lower(): v for k, v in data.items()}
    nested = data.get("scores")
    source = data if not isinstance(nested, dict) else nested
    source = {str(k).strip().lower(): v for k, v in source.items()}
    missing = [d for d in dimensions if source.get(d) is None]
    unreadable = [
        f"{d} ({source[d]!r})"
        for d in dimensions
        if d not in missing and read_score(source[d]) is None
    ]
    problems = []
    if missing:
        problems.append("missing dimensions: " + ", ".join(missing))
    if unreadable:
        problems.append("not a score 1-5: " + ", ".join(unreadable))
    return "; ".join(problems) or None


def total_score(scores: dict[str, float]) -> float:
    return sum(scores[d] for d in DIMENSIONS) / len(DIMENSIONS)


T = TypeVar("T")


def connection_failure(exc: BaseException) -> str | None:
    """Why the judge's server could not be reached ("Connection error ([Errno 111] Connection
    refused)": refused, unknown host, no route), or None when `exc` is not that: an answer
    that came back (an HTTP error status, an unparseable text) or a timeout (a server that
    took the request and is slow)."""
    from openai import APIConnectionError, APITimeoutError

    if not isinstance(exc, APIConnectionError) or isinstance(exc, APITimeoutError):
        return None
    text = str(exc).rstrip(".") or type(exc).__name__
    cause = exc.__cause__
    return f"{text} ({cause})" if cause is not None and str(cause) else text


@dataclass
class Asked(Generic[T]):
    """What asking the judge gave: the parsed answer (None: every attempt failed), the last
    raw text, the tokens over every attempt, each failed attempt's error, and, when no
    attempt reached the server at all, why (`unreachable`; "" once one did)."""

    value: T | None = None
    raw: str = ""
    tokens_in: int = 0
    tokens_out: int = 0
    attempts: int = 0
    errors: list[str] = field(default_factory=list)
    unreachable: str = ""


class Judge:
    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key: str = "EMPTY",
        temperature: float = 0.6,
        max_tokens: int = 32768,
        attempts: int = 3,
        timeout: float = 600,
        backoff_s: float = 1.0,
        history_chars: int | None = None,
    ):
        """Defaults as the reference judge's: temperature 0.6, 32,768 tokens, the whole
        history, three attempts."""
        from openai import DefaultHttpxClient, OpenAI

        self.model = model
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.attempts = attempts
        self.backoff_s = backoff_s
        self.history_chars = history_chars
        self.client = OpenAI(
            base_url=base_url,
            api_key=api_key,
            timeout=timeout,
            max_retries=0,
            http_client=DefaultHttpxClient(follow_redirects=False),
        )

    def ask(self, messages: list[dict], parse: Callable[[str], T]) -> Asked[T]:
        """The judge's answer to `messages`, read by `parse`, with retries: an API error or
        an answer `parse` refuses is tried again, after a growing pause, up to `attempts`."""
        asked: Asked[T] = Asked()
        reached = False
        for attempt in range(self.attempts):
            asked.attempts = attempt + 1
            try:
                response = self.client.chat.completions.create(
                    model=self.model,
                    messages=cast(Any, messages),
                    temperature=self.temperature,
                    max_tokens=self.max_tokens,
                )
                asked.raw = response.choices[0].message.content or ""
                usage = getattr(response, "usage", None)
                if usage is not None:
                    asked.tokens_in += usage.prompt_tokens or 0
                    asked.tokens_out += usage.completion_tokens or 0
                asked.value = parse(asked.raw)
                return asked
            except Exception as exc:  # noqa: BLE001 - API or parse failure: retry
                unreachable = connection_failure(exc)
                reached = reached or unreachable is None
                asked.unreachable = "" if reached else (unreachable or "")
                detail = unreachable if unreachable is not None else str(exc)
                asked.errors.append(f"attempt {attempt + 1}: {type(exc).__name__}: {detail}")
                if attempt + 1 < self.attempts:
                    time.sleep(self.backoff_s * (2**attempt))
        return asked

    def judge_row(self, row: dict) -> dict:
        prediction = prediction_of(row)
        if prediction is None:  # the generation failed: nothing to judge
            return failed_row(row, "No model generation", [], "", 0, None)
        messages = build_judge_messages(row, history_chars=self.history_chars)
        asked = self.ask(messages, lambda raw: parse_judgement(raw, dimensions_of(row)))
        if asked.value is not None:
            out = judged_row(row, asked.value, prediction, asked.raw, asked.attempts)
        else:
            out = failed_row(
                row, "Judge scoring failed", asked.errors, asked.raw, self.attempts, prediction
            )
            out["judge"]["unreachable"] = asked.unreachable
        out["judge"].update(tokens_in=asked.tokens_in, tokens_out=asked.tokens_out)
        return out


def judged_row(row: dict, judgement: Judgement, prediction: str, raw: str, attempts: int) -> dict:
    """A judged row: the reference's fields and the studio's."""
    return {
        **row,
        **judgement.scores,
        # a dimension a partial answer left out: the reference's invalid value, which no
        # figure counts
        **dict.fromkeys(judgement.missing, INVALID_SCORE),
        "total_score": judgement.total,
        "failed": 0.0,
        "strengths": judgement.strengths,
        "weaknesses": judgement.weaknesses,
        "extracted_output": prediction,
        "judge_raw_output": raw,
        "scores": judgement.scores,
        "judge": {"status": "ok", "scores": judgement.scores, "raw": raw, "attempts": attempts},
    }


def failed_row(
    row: dict, message: str, errors: list[str], raw: str, attempts: int, prediction: str | None
) -> dict:
    """A row left out of the scores, as the reference marks one: failed 1.0, total 0."""
    return {
        **row,
        "total_score": 0,
        "failed": 1.0,
        "error_message": message,
        "extracted_output": prediction or "",
        "scores": None,
        "judge": {
            "status": "failed",
            "message": message,
            "errors": errors,
            "raw": raw,
            "attempts": attempts,
        },
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
        # a judgement that failed is asked again on a rerun; a row with no generation is not
        redo=lambda row: (row.get("judge") or {}).get("message") == "Judge scoring failed",
    )
    return stats


# ---- pairwise: which of two predictions is more faithful -----------------------------------

PAIRWISE_SYSTEM_PROMPT = """\
You compare two world models: models that play the environment of a software agent and write
the observation the environment would return after the agent's action. You see the interaction
so far, the agent's latest action, {reference_line}and the observations two world models
predicted for it, labelled A and B. Decide which prediction is the more faithful stand-in for
what this environment would return: its shape and format, facts that agree with {facts_source},
consistency with everything the history established, and realism. Judge the content, not the
length, and not the order in which the two are shown; say "tie" only when neither is better.

Think it through briefly, then end with exactly this block and nothing after it (winner is
"A", "B" or "tie"; reason one short sentence):
<final_verdict>
```json
{{"winner": "A", "reason": "..."}}
```
</final_verdict>"""

PAIRWISE_USER_TEMPLATE = """\
## Interaction history (earlier turns)
{history}

## Current turn (the agent's action)
{current}
{reference}
## Prediction A
{first}

## Prediction B
{second}"""

PAIR_WINNERS = ("A", "B", "tie")
_VERDICT_OPEN = re.compile(r"<final_verdict>", _I)
_VERDICT_CLOSE = re.compile(r"</final_verdict>", _I)


@dataclass
class PairVerdict:
    winner: str  # "A" (the prediction shown first), "B" (shown second) or "tie"
    reason: str = ""


def build_pairwise_messages(
    row: dict, first: str, second: str, *, history_chars: int | None = None
) -> list[dict]:
    """The pairwise prompt for one fork: `row` is a judge row (`prompt`, `response`,
    `turn_idx`, `no_reference`, as the pointwise judge reads it) and `first` / `second` the
    two predictions in the order shown. With a reference (`no_reference` false) the recorded
    observation is shown too."""
    turn = int(row["turn_idx"])
    prompts, responses = row["prompt"], row["response"]
    history = "\n\n".join(
        f"{prompts[i]}\n\n{responses[i]}" for i in range(turn - 1) if i < len(responses)
    )
    has_reference = not row.get("no_reference") and turn - 1 < len(responses)
    reference = (
        f"\n## Reference observation (what the real environment returned)\n{responses[turn - 1]}\n"
        if has_reference
        else ""
    )
    system = PAIRWISE_SYSTEM_PROMPT.format(
        reference_line="the observation the real environment returned (the reference), "
        if has_reference
        else "",
        facts_source="the reference and the history" if has_reference else "the history",
    )
    user = PAIRWISE_USER_TEMPLATE.format(
        history=_clip(history, history_chars, keep_end=True) or "(none: this is the first turn)",
        current=prompts[turn - 1],
        reference=reference,
        first=first.strip() or NO_OUTPUT,
        second=second.strip() or NO_OUTPUT,
    )
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def parse_pair_verdict(text: str) -> PairVerdict:
    """The winner ("A", "B" or "tie") and reason from a pairwise answer: the JSON object in
    the last <final_verdict> block (or anywhere, when the block is missing or not closed;
    near-JSON repaired). The winner is read in any case, with or without "prediction"
    before it ("Prediction A", "b", "TIE", "draw" for a tie). JudgementError says what is
    wrong with an answer that names none."""
    text = text or ""
    region = text
    opened = None
    for opened in _VERDICT_OPEN.finditer(text):  # noqa: B007 - the last one is wanted
        pass
    if opened is not None:
        body = text[opened.end() :]
        close = _VERDICT_CLOSE.search(body)
        region = body if close is None else body[: close.start()]
    data = {str(k).strip().lower(): v for k, v in _json_object(region).items()}
    value = data.get("winner")
    if not isinstance(value, str) or not value.strip():
        raise JudgementError(f'no "winner" in the verdict (got {value!r})')
    word = value.strip().lower().removeprefix("prediction").strip(" :.")
    winner = {"a": "A", "b": "B", "tie": "tie", "draw": "tie", "equal": "tie"}.get(word)
    if winner is None:
        raise JudgementError(f'the winner must be "A", "B" or "tie" (got {value!r})')
    reason = data.get("reason")
    return PairVerdict(winner, reason.strip() if isinstance(reason, str) else "")


def compare_pair(judge: Judge, row: dict, first: str, second: str) -> dict:
    """Ask `judge` which of two predictions (in the order shown) is more faithful, with its
    retries: {"ok": True, "winner": "A" | "B" | "tie", "reason", "raw", "tokens_in",
    "tokens_out", "attempts"} or {"ok": False, "error", "raw", ...} once every attempt
    failed (an API error, an answer without a verdict)."""
    messages = build_pairwise_messages(row, first, second, history_chars=judge.history_chars)
    asked = judge.ask(messages, parse_pair_verdict)
    counts = {"raw": asked.raw, "tokens_in": asked.tokens_in, "tokens_out": asked.tokens_out}
    if asked.value is None:
        return {"ok": False, "error": "; ".join(asked.errors), **counts, "attempts": judge.attempts}
    verdict = asked.value
    return {
        "ok": True,
        "winner": verdict.winner,
        "reason": verdict.reason,
        **counts,
        "attempts": asked.attempts,
    }
