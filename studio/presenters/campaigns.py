"""What a campaign's page shows of its results (`studio.services.campaigns.results`): the
figures in words (a success rate says of how many scored episodes; an unscored episode is
never a failure; a figure nobody measured is "–", never 0), the tables per task and arm, the
models' tokens and cost ("no price set" where a price is unknown), and the Plotly figures
(success rate and mean reward per task, grouped by arm when the campaign has arms; the reward
distribution, the steps to the end and the failure causes, per arm). User text that goes into
a figure (task ids, arm names) goes through `plotly_text`; everything else the template
escapes."""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from typing import Any
from urllib.parse import urlencode

from django.urls import reverse

from studio.presenters.episode_rewards import figure as number_text
from studio.presenters.tree import plotly_text

NONE_ARM = "none"
# a bar colour per arm, in arm order ("none" first), repeated past the end
ARM_COLOURS = ("#4c6ef5", "#f08c00", "#2f9e44", "#e03131", "#7048e8", "#1098ad", "#c2255c")
CAUSE_WORDS = {
    "terminal": "terminal condition",
    "submit": "submitted",
    "max_steps": "max steps",
    "cancelled": "cancelled",
    "final_answer": "final answer",
    "error": "error",
}
STATUS_WORDS = {
    "queued": "Queued",
    "running": "Running",
    "succeeded": "Done",
    "failed": "Failed",
    "cancelled": "Cancelled",
}
# "Campaign 3 is done": the status in a sentence
STATE_WORDS = {
    "queued": "queued",
    "running": "running",
    "succeeded": "done",
    "failed": "failed",
    "cancelled": "cancelled",
}
# an episode slot's status, in the words the progress line and the tables use
SLOT_WORDS = {
    "pending": "not played yet",
    "running": "playing",
    "done": "ended",
    "failed": "failed (error)",
    "cancelled": "cancelled",
}


SLOT_KEYS = ("ended", "failed", "cancelled", "running", "pending")


def plural(n: int, word: str, words: str | None = None) -> str:
    """ "1 episode", "2 episodes" ("1 task", "3 tasks")."""
    return f"{n} {word if n == 1 else (words or word + 's')}"


def progress_view(overall: dict[str, Any], *, can_resume: bool) -> dict[str, Any]:
    """The progress line: "5 of 8 episodes played: 3 ended, 1 failed (error), 1 cancelled
    (Resume plays them again), 3 not played yet". An episode is played once it ended, failed
    with an error or was cancelled; each count is said once, in the words of the tables."""
    counts = {key: int(overall.get(key) or 0) for key in SLOT_KEYS}
    total = int(overall.get("episodes") or 0)
    played = counts["ended"] + counts["failed"] + counts["cancelled"]
    parts = [{"key": "ended", "text": f"{counts['ended']} ended", "alert": False}]
    if counts["failed"]:
        parts.append({"key": "failed", "text": f"{counts['failed']} failed (error)", "alert": True})
    if counts["cancelled"]:
        more = " (Resume plays them again)" if can_resume else ""
        parts.append(
            {"key": "cancelled", "text": f"{counts['cancelled']} cancelled{more}", "alert": False}
        )
    if counts["running"]:
        parts.append({"key": "running", "text": f"{counts['running']} playing", "alert": False})
    if counts["pending"]:
        parts.append(
            {"key": "pending", "text": f"{counts['pending']} not played yet", "alert": False}
        )
    return {
        "played": played,
        "total": total,
        "episodes_word": "episode" if total == 1 else "episodes",
        "parts": parts,
    }


def status_text(campaign: Any) -> str:
    """The campaign's status as its badge says it: a cancel asked of a running campaign is
    "Cancelling…"; a campaign that ended with every slot played is "Done" (some episodes may
    have failed: the page counts them); Cancelled is never Failed."""
    if campaign.cancel_requested and not campaign.is_finished:
        return "Cancelling…"
    return STATUS_WORDS.get(campaign.status, campaign.get_status_display())


def percent(rate: Any) -> str:
    if rate is None or not isinstance(rate, (int, float)) or not math.isfinite(rate):
        return "–"
    return f"{rate * 100:.0f}%"


def rate_text(row: dict[str, Any]) -> str:
    """ "62% (5 of 8 scored)"; "not scored" when no episode of the row has a score."""
    scored = row.get("scored") or 0
    if not row.get("ended"):
        return "–"  # nothing ended yet: nothing to say
    if not scored:
        return "not scored"
    return f"{percent(row.get('success_rate'))} ({row.get('successes') or 0} of {scored} scored)"


def mean_text(value: Any) -> str:
    text = number_text(round(value, 3) if isinstance(value, float) else value)
    return "–" if text is None else text


def _row_view(row: dict[str, Any]) -> dict[str, Any]:
    return {
        **row,
        "rate_text": rate_text(row),
        "reward_text": mean_text(row.get("mean_reward")),
        "steps_text": mean_text(row.get("mean_steps")),
    }


def cost_text(cost: Any) -> str:
    if cost is None:
        return "no price set"
    return f"${cost:,.4f}" if cost < 1 else f"${cost:,.2f}"


def arm_names(campaign: Any) -> list[str]:
    return [NONE_ARM] + [str(a.get("name") or f"arm {i}") for i, a in enumerate(campaign.arms, 1)]


def _colour(i: int) -> str:
    return ARM_COLOURS[i % len(ARM_COLOURS)]


def _layout(height: int, x_title: str, y_title: str, **more: Any) -> dict[str, Any]:
    """A grouped bar chart's layout: the legend (the arms) above the plot, in the top margin,
    so the x-axis title below has the bottom to itself."""
    layout: dict[str, Any] = {
        "barmode": "group",
        "height": height,
        "margin": {"l": 50, "r": 10, "t": 40, "b": 50},
        "xaxis": {"title": {"text": x_title}, "type": "category", "automargin": True},
        "yaxis": {"title": {"text": y_title}, "rangemode": "tozero", "automargin": True},
        "legend": {
            "orientation": "h",
            "title": {"text": "arm"},
            "x": 0,
            "xanchor": "left",
            "y": 1.02,
            "yanchor": "bottom",
        },
        "showlegend": True,
    }
    layout.update(more)
    return layout


CONFIG = {"displaylogo": False, "responsive": True}


def _task_label(row: dict[str, Any]) -> str:
    task_id = str(row.get("task_id") or f"task {int(row.get('task_index') or 0) + 1}")
    return plotly_text(task_id)


def per_task_figure(
    campaign: Any, results: Any, key: str, y_title: str, *, scale: float = 1.0
) -> dict[str, Any]:
    """One bar per task (of `key`: "success_rate" or "mean_reward"), one bar colour per arm;
    a task with no figure in an arm has no bar there (never a 0 nobody measured)."""
    names = arm_names(campaign)
    tasks = [_task_label(r) for r in results.by_task]
    index_of = {r["task_index"]: i for i, r in enumerate(results.by_task)}
    rows = results.by_task_arm if campaign.arms else results.by_task
    by_arm: dict[int, list[Any]] = defaultdict(lambda: [None] * len(tasks))
    labels: dict[int, list[str]] = defaultdict(lambda: [""] * len(tasks))
    hover: dict[int, list[str]] = defaultdict(lambda: [""] * len(tasks))
    for r in rows:
        arm = int(r.get("arm") or 0)
        i = index_of.get(r["task_index"])
        if i is None:
            continue
        value = r.get(key)
        by_arm[arm][i] = None if value is None else value * scale
        if key == "success_rate":
            labels[arm][i] = percent(value) if value is not None else ""
            hover[arm][i] = plotly_text(rate_text(r))
        else:
            labels[arm][i] = mean_text(value) if value is not None else ""
            hover[arm][i] = plotly_text(f"mean {mean_text(value)} of {r.get('scored') or 0} scored")
    data = []
    for arm in sorted(by_arm) or [0]:
        name = plotly_text(names[arm] if arm < len(names) else f"arm {arm}")
        data.append(
            {
                "type": "bar",
                "name": name,
                "x": tasks,
                "y": by_arm[arm],
                # the figure above each bar (a 0 is a bar of no height: its label shows it)
                "text": labels[arm],
                "textposition": "outside",
                "cliponaxis": False,
                "hovertext": hover[arm],
                "marker": {"color": _colour(arm)},
                "hovertemplate": "%{x}: %{hovertext}<extra>" + name + "</extra>",
            }
        )
    more: dict[str, Any] = {}
    if key == "success_rate":
        more["yaxis"] = {"title": {"text": y_title}, "range": [0, 112]}
    return {"data": data, "layout": _layout(320, "task", y_title, **more), "config": CONFIG}


def _bins(values: list[float]) -> list[tuple[float, float]]:
    """Up to 10 equal bins over the values' range (one bin when they are all equal)."""
    low, high = min(values), max(values)
    if math.isclose(low, high):
        return [(low, high)]
    width = (high - low) / 10
    return [(low + i * width, low + (i + 1) * width) for i in range(10)]


def reward_figure(campaign: Any, results: Any) -> dict[str, Any]:
    """How many scored episodes of each arm ended with each reward: one bar per reward when
    there are 10 or fewer distinct ones, else 10 equal bins, each named by its range (the
    plotly bundle served has no histogram trace)."""
    names = arm_names(campaign)
    rewards = [r for r in results.rewards if isinstance(r.get("reward"), (int, float))]
    if not rewards:
        return {}
    values = sorted({float(r["reward"]) for r in rewards})
    if len(values) <= 10:
        labels = [mean_text(v) for v in values]

        def at(value: float) -> int:
            return values.index(value)
    else:
        bins = _bins(values)
        last = len(bins) - 1
        labels = [
            f"[{mean_text(lo)}, {mean_text(hi)}{']' if i == last else ')'}"
            for i, (lo, hi) in enumerate(bins)
        ]

        def at(value: float) -> int:
            return next((i for i, (_, hi) in enumerate(bins) if value < hi), len(bins) - 1)

    counts: dict[int, list[int]] = defaultdict(lambda: [0] * len(labels))
    for r in rewards:
        counts[_arm_of(r, names)][at(float(r["reward"]))] += 1
    data = [
        {
            "type": "bar",
            "name": plotly_text(names[arm]),
            "x": labels,
            "y": counts[arm],
            "marker": {"color": _colour(arm)},
            "hovertemplate": "reward %{x}: %{y} episodes<extra>"
            + plotly_text(names[arm])
            + "</extra>",
        }
        for arm in sorted(counts)
    ]
    return {
        "data": data,
        "layout": _layout(300, "reward (episode return)", "episodes"),
        "config": CONFIG,
    }


def _arm_of(row: dict[str, Any], names: list[str]) -> int:
    arm = row.get("arm")
    if isinstance(arm, int):
        return arm
    name = str(row.get("arm_name") or NONE_ARM)
    return names.index(name) if name in names else 0


def steps_figure(campaign: Any, results: Any) -> dict[str, Any]:
    """How many ended episodes of each arm took each number of steps."""
    names = arm_names(campaign)
    rows = [r for r in results.rewards if isinstance(r.get("steps"), int)]
    if not rows:
        return {}
    values = sorted({r["steps"] for r in rows})
    counts: dict[int, Counter] = defaultdict(Counter)
    for r in rows:
        counts[_arm_of(r, names)][r["steps"]] += 1
    data = [
        {
            "type": "bar",
            "name": plotly_text(names[arm]),
            "x": [str(v) for v in values],
            "y": [counts[arm][v] for v in values],
            "marker": {"color": _colour(arm)},
            "hovertemplate": "%{x} steps: %{y} episodes<extra>"
            + plotly_text(names[arm])
            + "</extra>",
        }
        for arm in sorted(counts)
    ]
    return {"data": data, "layout": _layout(300, "steps to the end", "episodes"), "config": CONFIG}


def causes_figure(campaign: Any, results: Any) -> dict[str, Any]:
    """How the episodes that were scored and not a success ended (their end cause), and the
    episodes that failed with an error ("error"), per arm; unscored episodes are not in it."""
    names = arm_names(campaign)
    if not results.causes:
        return {}
    causes = sorted({str(c["cause"]) for c in results.causes})
    counts: dict[int, Counter] = defaultdict(Counter)
    for c in results.causes:
        counts[_arm_of(c, names)][str(c["cause"])] += int(c.get("count") or 0)
    labels = [plotly_text(CAUSE_WORDS.get(c, c)) for c in causes]
    data = [
        {
            "type": "bar",
            "name": plotly_text(names[arm]),
            "x": labels,
            "y": [counts[arm][c] for c in causes],
            "marker": {"color": _colour(arm)},
            "hovertemplate": "%{x}: %{y} episodes<extra>" + plotly_text(names[arm]) + "</extra>",
        }
        for arm in sorted(counts)
    ]
    return {
        "data": data,
        "layout": _layout(300, "end cause (or error)", "episodes"),
        "config": CONFIG,
    }


def episode_rows(campaign: Any, slots: list[Any]) -> list[dict[str, Any]]:
    """The episodes table: one row per slot (task, arm, repeat, seed, status, reward, steps,
    end cause, its trajectory)."""
    names = arm_names(campaign)
    out = []
    for s in slots:
        success = s.success
        out.append(
            {
                "slot": s,
                "status_text": SLOT_WORDS.get(s.status, s.status).capitalize(),
                "arm_name": s.arm_name or (names[s.arm] if s.arm < len(names) else ""),
                "reward_text": mean_text(s.reward) if s.reward is not None else "–",
                "success_text": (
                    "not scored" if success is None else ("success" if success else "not a success")
                ),
                "cause_text": CAUSE_WORDS.get(s.end_cause, s.end_cause) if s.end_cause else "",
                "url": reverse("trajectory", kwargs={"trajectory_id": s.trajectory_id})
                if s.trajectory_id
                else "",
            }
        )
    return out


def campaign_view(campaign: Any, results: Any, *, can_resume: bool = False) -> dict[str, Any]:
    """Everything of the results the template shows, the figures as dicts for json_script."""
    overall = results.overall
    has_ended = bool(overall.get("ended"))
    failed = int(overall.get("failed") or 0)
    replaced = int(overall.get("replaced") or 0)
    return {
        "progress": progress_view(overall, can_resume=can_resume),
        # nothing ended and every episode failed with an error: the results say so
        "all_failed": not has_ended and failed > 0 and failed == int(overall.get("episodes") or 0),
        "errors": list(getattr(results, "errors", []) or [])[:5],
        "has_cancelled": any(int(r.get("cancelled") or 0) for r in results.by_arm)
        or bool(overall.get("cancelled")),
        "replaced": replaced,
        "replaced_text": (
            f"{plural(replaced, 'earlier episode')} "
            f"{'was' if replaced == 1 else 'were'} cancelled or failed and played again; "
            f"{'it stays' if replaced == 1 else 'they stay'} in the library"
        )
        if replaced
        else "",
        "tag_name": f"campaign:{campaign.pk}",
        "library_url": reverse("library", kwargs={"project_id": campaign.project_id})
        + "?"
        + urlencode({"tag": f"campaign:{campaign.pk}"}),
        "overall": _row_view(overall),
        "by_task": [_row_view(r) for r in results.by_task],
        "by_task_arm": [_row_view(r) for r in results.by_task_arm],
        "by_arm": [_row_view(r) for r in results.by_arm],
        "has_arms": bool(campaign.arms),
        "arm_names": arm_names(campaign),
        "models": [{**m, "cost_text": cost_text(m.get("cost"))} for m in results.models],
        "causes": [
            {**c, "cause_text": CAUSE_WORDS.get(str(c["cause"]), str(c["cause"]))}
            for c in results.causes
        ],
        "figures": {
            "success": per_task_figure(
                campaign, results, "success_rate", "success rate (%)", scale=100.0
            )
            if overall.get("scored")
            else {},
            "reward": per_task_figure(campaign, results, "mean_reward", "mean reward")
            if overall.get("scored")
            else {},
            "distribution": reward_figure(campaign, results) if has_ended else {},
            "steps": steps_figure(campaign, results) if has_ended else {},
            "causes": causes_figure(campaign, results) if has_ended else {},
        },
    }
