"""The world page's Plotly figures of its episodes (`studio.services.world_episodes`): reward
per episode with a moving average line, success rate over time (over the last k scored
episodes) and steps per episode, one colour per group (client or token). Every point is one
ended episode: its customdata is [trajectory page URL, trajectory id], which the page's
script opens on a click and collects from a box or lasso selection. User text (token names,
task ids) goes through `plotly_text`."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC
from typing import Any

from studio.presenters.model_colours import PALETTE
from studio.presenters.tree import plotly_text
from studio.services.world_episodes import X_AXES, EpisodeRow, Group, WorldEpisodes, success_rate
from studio.services.world_episodes import moving_average as moving

CHARTS = ("reward", "success", "steps")
TITLES = {
    "reward": "Reward per episode (its return)",
    "success": "Success rate",
    "steps": "Steps per episode",
}
CAUSES = {
    "submit": "submitted",
    "terminal": "terminal condition",
    "max_steps": "max steps",
    "cancelled": "cancelled",
    "final_answer": "final answer",
    "error": "error",
}


def _figure_number(value: float | None) -> str:
    return "–" if value is None else f"{value:.3g}"


def _x(row: EpisodeRow, axis: str) -> Any:
    if axis == "time":
        # Plotly reads no time zone: the axis says UTC
        return row.started.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
    return row.number


def _hover(row: EpisodeRow, group: Group) -> str:
    outcome = {True: "success", False: "not a success", None: "not scored"}[row.success]
    if row.cause == "error":
        outcome = "error"  # the agent or the world model failed
    cause = CAUSES.get(row.cause or "", row.cause or "")
    lines = [
        f"<b>episode {row.number}</b> · trajectory {row.pk}",
        plotly_text(group.label),
        f"task {plotly_text(row.task_id)}" if row.task_id else "task typed at reset",
        f"reward {_figure_number(row.reward)} · {outcome}",
        f"{row.steps} step{'s' if row.steps != 1 else ''} · {plotly_text(cause)}"
        + (" · ended in the studio" if row.status == "cancelled" and not cause else ""),
    ]
    return "<br>".join(lines)


def _points(
    group: Group,
    rows: list[EpisodeRow],
    value: Callable[[EpisodeRow], float | None],
    colour: str,
    axis: str,
    url_of: Callable[[int], str],
    *,
    mode: str = "markers",
    legend: bool = True,
) -> dict[str, Any]:
    shown = [(r, value(r)) for r in rows]
    shown = [(r, v) for r, v in shown if v is not None]
    return {
        "type": "scatter",
        "mode": mode,
        "name": plotly_text(group.label),
        "legendgroup": group.key,
        "showlegend": legend,
        "x": [_x(r, axis) for r, _ in shown],
        "y": [v for _, v in shown],
        "customdata": [[url_of(r.pk), r.pk] for r, _ in shown],
        "text": [_hover(r, group) for r, _ in shown],
        "hovertemplate": "%{text}<extra></extra>",
        "marker": {
            "color": colour,
            "size": 8,
            "symbol": ["x" if r.status == "cancelled" else "circle" for r, _ in shown],
        },
        "line": {"color": colour, "width": 1},
        "meta": {"kind": "episodes"},
    }


def _line(
    group: Group, rows: list[EpisodeRow], values: list[float | None], colour: str, axis: str
) -> dict[str, Any]:
    shown = [(r, v) for r, v in zip(rows, values, strict=True) if v is not None]
    return {
        "type": "scatter",
        "mode": "lines",
        "name": f"{plotly_text(group.label)} (moving average)",
        "legendgroup": group.key,
        "showlegend": False,
        "x": [_x(r, axis) for r, _ in shown],
        "y": [v for _, v in shown],
        "hovertemplate": "moving average %{y:.3g}<extra></extra>",
        "line": {"color": colour, "width": 2.5},
        "meta": {"kind": "average"},
    }


def _layout(chart: str, y_title: str, x_axis: str, empty: bool, span: int) -> dict[str, Any]:
    layout: dict[str, Any] = {
        "title": {"text": TITLES[chart], "font": {"size": 14}},
        "height": 300,
        "margin": {"l": 55, "r": 15, "t": 40, "b": 45},
        "xaxis": {
            "title": {"text": X_AXES[x_axis] + (" (UTC)" if x_axis == "time" else "")},
            "type": "date" if x_axis == "time" else "linear",
            "zeroline": False,
        },
        "yaxis": {"title": {"text": y_title}, "zeroline": False},
        "dragmode": "select",
        "clickmode": "event",
        "hovermode": "closest",
        "legend": {"orientation": "h", "y": -0.25},
        # the page redraws as episodes come in: zoom and legend choices stay
        "uirevision": "world-episodes",
        "paper_bgcolor": "rgba(0,0,0,0)",
        "plot_bgcolor": "rgba(0,0,0,0)",
    }
    if x_axis == "number" and span <= 20:
        layout["xaxis"]["dtick"] = 1  # whole episodes, not 1.5
    if chart == "success":
        layout["yaxis"]["range"] = [-0.05, 1.05]
        layout["yaxis"]["tickformat"] = ".0%"
    if empty:
        layout["annotations"] = [
            {
                "text": "no ended episode to plot yet",
                "showarrow": False,
                "xref": "paper",
                "yref": "paper",
                "x": 0.5,
                "y": 0.5,
                "font": {"color": "#777"},
            }
        ]
    return layout


CONFIG = {
    "displaylogo": False,
    "responsive": True,
    "modeBarButtonsToRemove": ["toImage", "autoScale2d"],
}


def figures(data: WorldEpisodes, url_of: Callable[[int], str]) -> dict[str, Any]:
    """The three figures {"reward", "success", "steps"} and the data's signature."""
    axis = data.filters.x
    k = data.filters.average
    reward: list[dict[str, Any]] = []
    success: list[dict[str, Any]] = []
    steps: list[dict[str, Any]] = []
    for i, group in enumerate(data.groups):
        colour = PALETTE[i % len(PALETTE)]
        ended = [r for r in group.rows if r.ended]
        if not ended:
            continue
        if any(r.reward is not None for r in ended):
            reward.append(_points(group, ended, lambda r: r.reward, colour, axis, url_of))
            reward.append(_line(group, ended, moving([r.reward for r in ended], k), colour, axis))
        rates = success_rate([r.success for r in ended], k)
        if any(rate is not None for rate in rates):
            rate_of: dict[int, float | None] = dict(zip([r.pk for r in ended], rates, strict=True))

            def rate(row: EpisodeRow, rate_of: dict[int, float | None] = rate_of) -> float | None:
                return rate_of.get(row.pk)

            success.append(
                _points(
                    group,
                    ended,
                    rate,
                    colour,
                    axis,
                    url_of,
                    mode="lines+markers",
                )
            )
        steps.append(_points(group, ended, lambda r: float(r.steps), colour, axis, url_of))
    plotted = {
        "reward": (reward, f"return (line: mean of the last {k})"),
        "success": (success, f"successes of the last {k} scored"),
        "steps": (steps, "steps"),
    }
    out: dict[str, Any] = {"signature": data.signature()}
    for chart, (traces, y_title) in plotted.items():
        out[chart] = {
            "data": traces,
            "layout": _layout(
                chart, y_title, axis, empty=not any(t["y"] for t in traces), span=len(data.rows)
            ),
            "config": CONFIG,
        }
    return out
