"""What the trajectory page shows of an episode's rewards: from `Trajectory.metadata["episode"]`
the header's task, seed, status and end (its cause in words, the final reward, the return and
the episode rubric's breakdown, the judge's errors), and from each step's `Step.meta` its
reward, rubric breakdown, reported state, submitted answer, end cause and seed.

Only what is recorded is shown: a key that is absent or null gives no figure (never a zero),
and values from the metadata are handed to the template as plain text for it to escape."""

from __future__ import annotations

import json
import math
from typing import Any

EPISODE = "episode"

# The end cause as the page says it ("ended: ..."); max_steps names the episode's limit.
CAUSE_WORDS = {
    "submit": "ended: the agent submitted",
    "terminal": "ended: terminal condition",
    "cancelled": "ended in the studio",
}


def figure(value: Any) -> str | None:
    """A recorded score or reward as text (4 decimals at most: 0.5, 1.0, 0.3333); None for
    no figure (absent or null). A value that is not a number is shown as it was recorded."""
    if value is None:
        return None
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            return str(value)
        return repr(round(value, 4))
    return str(value)


def cause_words(cause: Any, max_steps: Any = None) -> str | None:
    """How an episode ended, in words; None when it has not (no cause recorded)."""
    if not cause:
        return None
    if cause == "max_steps":
        return f"ended: max steps ({max_steps})" if max_steps else "ended: max steps"
    return CAUSE_WORDS.get(str(cause), f"ended: {cause}")


def _plain(value: Any) -> str:
    """A state value as the world model reported it (JSON's true/false/numbers), text as is."""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, sort_keys=True)
    except (TypeError, ValueError):
        return str(value)


def _scores(breakdown: Any) -> list[dict[str, Any]]:
    """A rubric breakdown {check name: score} as rows; a null score (a judge that gave none)
    has no figure."""
    if not isinstance(breakdown, dict):
        return []
    # by name: PostgreSQL's jsonb keeps no key order, so the recorded order is not the checks'
    return [
        {"name": str(name), "score": figure(score)} for name, score in sorted(breakdown.items())
    ]


def _errors(errors: Any) -> list[dict[str, str]]:
    if not isinstance(errors, dict):
        return []
    return [
        {"name": str(name), "message": str(message)} for name, message in sorted(errors.items())
    ]


def _state(state: Any) -> list[dict[str, Any]]:
    """A reported state as rows; a null value is a key the world model did not report."""
    if not isinstance(state, dict):
        return []
    return [
        {"key": str(key), "value": None if value is None else _plain(value)}
        for key, value in sorted(state.items())
    ]


def _whole(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def episode_of(trajectory: Any) -> dict[str, Any] | None:
    """The trajectory's episode record, None for a trajectory that is no served episode."""
    if getattr(trajectory, "source_format", "") != EPISODE:
        return None
    episode = (trajectory.metadata or {}).get("episode")
    return episode if isinstance(episode, dict) else None


def episode_summary(trajectory: Any) -> dict[str, Any] | None:
    """The header's account of an episode: task id, seed, status, and once it ended its end
    cause in words, the step it ended at, the final reward, the total (the episode's
    return), the episode rubric's breakdown and the judge's errors."""
    episode = episode_of(trajectory)
    if episode is None:
        return None
    end = episode.get("end") if isinstance(episode.get("end"), dict) else None
    summary: dict[str, Any] = {
        "task_id": str(episode.get("task_id") or ""),
        "seed": _whole(episode.get("seed")),
        "status": str(episode.get("status") or "running"),
        "max_steps": episode.get("max_steps"),
        "ended": end is not None,
        "end_words": None,
        "end_step": None,
        "reward": None,
        # while it runs the return is the sum of the rewards so far; at the end, end.total
        "total": figure(episode.get("return")),
        "breakdown": [],
        "errors": [],
    }
    if end is not None:
        total = end.get("total") if "total" in end else episode.get("return")
        summary.update(
            end_words=cause_words(end.get("cause"), episode.get("max_steps")),
            end_step=end.get("step"),
            reward=figure(end.get("reward")),
            total=figure(total),
            breakdown=_scores(end.get("breakdown")),
            errors=_errors(end.get("errors")),
        )
    return summary


def step_rewards(meta: Any, episode: dict[str, Any] | None) -> dict[str, Any] | None:
    """One step's reward, rubric breakdown, reported state, submitted answer, end cause and
    seed, as its `Step.meta` records them; None for a step with none of them."""
    if not isinstance(meta, dict):
        return None
    max_steps = episode.get("max_steps") if episode else None
    shown: dict[str, Any] = {
        "reward": figure(meta.get("reward")),
        "rubric": _scores(meta.get("rubric")),
        "rubric_errors": _errors(meta.get("rubric_errors")),
        "state": _state(meta.get("state")),
        "submitted": bool(meta.get("submit")),
        "final_answer": None if meta.get("final_answer") is None else str(meta["final_answer"]),
        "end_words": cause_words(meta.get("end_cause"), max_steps),
        "seed": _whole(meta.get("seed")),
    }
    if not any(
        (
            shown["reward"] is not None,
            shown["rubric"],
            shown["rubric_errors"],
            shown["state"],
            shown["submitted"],
            shown["end_words"],
            shown["seed"] is not None,
        )
    ):
        return None
    # the fold holds the tables; a step with none of them shows its badges alone
    shown["has_details"] = bool(shown["rubric"] or shown["rubric_errors"] or shown["state"])
    return shown


def annotate_steps(steps: list[Any], trajectory: Any) -> None:
    """Give each step of an episode its `rewards` (step_rewards); other trajectories' steps
    get None, so the page shows nothing of it."""
    episode = episode_of(trajectory)
    for step in steps:
        step.rewards = step_rewards(step.meta, episode) if episode is not None else None
