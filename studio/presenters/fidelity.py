"""The fidelity panel as Plotly figures: per step of a branch, the judge's score on each
dimension (where simulations drift from reality), and per branch of a trajectory, the total
per step. Scores are the judge's 1-5; a step judged without a reference has consistency and
realism only (gaps in the other lines)."""

from __future__ import annotations

from typing import Any

from inference.judge import DIMENSIONS
from studio.presenters.tree import plotly_text
from studio.services.judging import Fidelity

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


def trajectory_figure(per_branch: list[tuple[str, Fidelity]]) -> dict[str, Any]:
    data = [
        {
            "type": "scatter",
            "mode": "lines+markers",
            "name": plotly_text(name),
            "x": found.indexes,
            "y": found.totals,
            "hovertemplate": "step %{x}: %{y:.2f}<extra>" + plotly_text(name) + "</extra>",
        }
        for name, found in per_branch
        if found.judged
    ]
    return {"data": data, "layout": {**LAYOUT, "height": 320}}
