"""Each annotator's quality in a queue as a Plotly figure (grouped bars per annotator: their
agreement with the others, Krippendorff's alpha, and their share of adjudicated items where
their verdict is the adjudicator's) and as table rows for the page."""

from __future__ import annotations

from typing import Any

from studio.presenters.tree import plotly_text
from studio.services.agreement import AnnotatorQuality


def duration_text(seconds: float | None) -> str:
    if seconds is None:
        return "–"
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def label(row: AnnotatorQuality) -> str:
    return f"{row.username} ({row.pseudonym})"


def figure(rows: list[AnnotatorQuality]) -> dict[str, Any]:
    """Two bars per annotator: alpha with the others (-1..1; none where undefined) and the
    share agreeing with adjudications (0..1; none where nothing they did was adjudicated)."""
    names = [plotly_text(label(r)) for r in rows]
    return {
        "data": [
            {
                "type": "bar",
                "name": "alpha with the others' median (ordinal)",
                "x": names,
                "y": [r.alpha for r in rows],
                "customdata": [r.alpha_units for r in rows],
                "hovertemplate": "%{x}: alpha %{y:.3f} over %{customdata} ratings<extra></extra>",
            },
            {
                "type": "bar",
                "name": "verdict = adjudication (share)",
                "x": names,
                "y": [r.adjudication_share for r in rows],
                "customdata": [f"{r.agrees_with_adjudication} of {r.adjudicated}" for r in rows],
                "hovertemplate": "%{x}: %{customdata} adjudicated items<extra></extra>",
            },
        ],
        "layout": {
            "barmode": "group",
            "height": 280,
            "margin": {"l": 40, "r": 10, "t": 10, "b": 60},
            "yaxis": {"range": [-1, 1], "title": {"text": "agreement"}},
            "legend": {"orientation": "h"},
        },
    }


def table(rows: list[AnnotatorQuality]) -> list[dict[str, Any]]:
    return [
        {
            "row": r,
            "label": label(r),
            "median": duration_text(r.median_seconds),
            "alpha": "–" if r.alpha is None else f"{r.alpha:.3f}",
            "share": (
                "–"
                if r.adjudication_share is None
                else f"{round(r.adjudication_share * 100)}% ({r.agrees_with_adjudication} of "
                f"{r.adjudicated})"
            ),
        }
        for r in rows
    ]
