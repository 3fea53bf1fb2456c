"""The outcomes of a fork as a Plotly bar chart (a plain dict for json_script): one bar per
outcome, then malformed, failed and unfinished futures in their own colours. Clicking a bar
opens its representative at the fork step."""

from __future__ import annotations

from typing import Any

from django.urls import reverse

from studio.presenters.tree import plotly_text
from studio.services.futures import FutureSummary

OUTCOME_COLOUR = "#3b5bdb"
APART = {"malformed": "#f08c00", "failed": "#c92a2a", "unfinished": "#adb5bd"}
EXCERPT = 160


def _excerpt(text: str) -> str:
    one_line = " ".join(text.split())
    return one_line if len(one_line) <= EXCERPT else one_line[: EXCERPT - 1] + "…"


def outcome_figure(summary: FutureSummary) -> dict[str, Any]:
    page = reverse("trajectory", args=[summary.parent.trajectory_id])
    x, y, colours, hover, urls = [], [], [], [], []
    total = len(summary.children)
    for outcome in summary.outcomes:
        x.append(f"{outcome.label}")
        y.append(outcome.size)
        colours.append(OUTCOME_COLOUR)
        kind = "same meaning" if outcome.exact else "near-duplicates"
        hover.append(
            f"<b>outcome {outcome.label}</b>: {outcome.size} of {total} futures "
            f"({outcome.share:.0%} of those with an outcome, {kind})<br>"
            + plotly_text(_excerpt(outcome.step.observation))
        )
        urls.append(f"{page}?branch={outcome.representative.pk}&step={summary.at}")
    for name, branches in (
        ("malformed", summary.malformed),
        ("failed", summary.failed),
        ("unfinished", summary.unfinished),
    ):
        if branches:
            x.append(name)
            y.append(len(branches))
            colours.append(APART[name])
            hover.append(f"<b>{name}</b>: {len(branches)} of {total} futures")
            urls.append(f"{page}?branch={branches[0].pk}&step={summary.at}")
    return {
        "data": [
            {
                "type": "bar",
                "x": x,
                "y": y,
                "marker": {"color": colours},
                "hovertext": hover,
                "hoverinfo": "text",
                "customdata": urls,
                "text": [str(v) for v in y],
                "textposition": "auto",
                "name": "outcomes",
            }
        ],
        "layout": {
            "height": 220,
            "margin": {"l": 40, "r": 10, "t": 10, "b": 40},
            "xaxis": {"type": "category", "title": {"text": "outcome"}},
            "yaxis": {"title": {"text": "futures"}, "rangemode": "tozero"}
            | ({"dtick": 1} if max(y or [0]) <= 10 else {}),
            "plot_bgcolor": "#fff",
            "paper_bgcolor": "#fff",
        },
        "config": {"displaylogo": False, "responsive": True, "displayModeBar": False},
        "meta": {"outcomes": len(summary.outcomes), "futures": total},
    }
