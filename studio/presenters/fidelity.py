"""The fidelity panel as Plotly figures: per step of a branch, the judge's score on each
dimension (where simulations drift from reality), and per branch of a trajectory, the total
per step. Scores are the judge's 1-5; a step judged without a reference has consistency and
realism only (gaps in the other lines)."""

from __future__ import annotations

from typing import Any

from inference.judge import DIMENSIONS
from studio.presenters.model_colours import colour_map, colour_of
from studio.presenters.tree import plotly_text
from studio.services.judging import Fidelity
from studio.services.model_identity import ModelIdentity

LAYOUT = {
    "margin": {"l": 40, "r": 10, "t": 10, "b": 40},
    "yaxis": {"range": [0.8, 5.2], "title": {"text": "judge score (1-5)"}, "dtick": 1},
    "xaxis": {"title": {"text": "step"}, "dtick": 1},
    "legend": {"orientation": "h"},
}


def branch_figure(found: Fidelity) -> dict[str, Any]:
    data = [
        {
            "type": "scatter",
            "mode": "lines+markers",
            "name": dim,
            "x": found.indexes,
            "y": found.scores[dim],
            "connectgaps": False,
            "hovertemplate": "step %{x}: %{y}<extra>" + dim + "</extra>",
        }
        for dim in DIMENSIONS
        if any(v is not None for v in found.scores[dim])
    ]
    return {"data": data, "layout": {**LAYOUT, "height": 300}}


def trajectory_figure(
    per_branch: list[tuple[str, Fidelity]],
    models: list[ModelIdentity | None] | None = None,
) -> dict[str, Any]:
    """The total per step of each judged branch; with `models` (the model of each branch's
    future, None: recorded) each line is named by its model, coloured by it and grouped with
    the other branches of that model in the legend: branches of two models never read as one."""
    models = models if models is not None else [None] * len(per_branch)
    colours = colour_map(models)
    data = []
    for (name, found), model in zip(per_branch, models, strict=True):
        if not found.judged:
            continue
        group = model.label if model is not None else "recorded"
        trace: dict[str, Any] = {
            "type": "scatter",
            "mode": "lines+markers",
            "name": plotly_text(f"{name} · {model.short if model is not None else 'recorded'}"),
            "x": found.indexes,
            "y": found.totals,
            "hovertemplate": "step %{x}: %{y:.2f}<extra>"
            + plotly_text(f"{name} · {group}")
            + "</extra>",
        }
        if any(m is not None for m in models):
            trace["legendgroup"] = plotly_text(group)
            trace["line"] = {"color": colour_of(model, colours)}
            trace["marker"] = {"color": colour_of(model, colours)}
        data.append(trace)
    return {"data": data, "layout": {**LAYOUT, "height": 320}}
