"""The outcomes of a fork as a Plotly bar chart (a plain dict for json_script): one bar per
outcome, then malformed, failed, ended and unfinished futures in their own colours. With
futures of several models, each model is a trace of its own colour over its own categories
(a two-level axis: model, then outcome): no bar pools two models' futures, and a share is
of one model's futures. Clicking a bar opens its representative at the step summarised."""

from __future__ import annotations

from typing import Any

from django.urls import reverse

from studio.presenters.model_colours import colour_of
from studio.presenters.tree import plotly_text
from studio.services.futures import FutureSummary, ModelGroup

OUTCOME_COLOUR = "#3b5bdb"
APART = {
    "malformed": "#f08c00",
    "failed": "#c92a2a",
    "ended before": "#7048e8",
    "unfinished": "#adb5bd",
}
EXCERPT = 160


def _excerpt(text: str) -> str:
    one_line = " ".join(text.split())
    return one_line if len(one_line) <= EXCERPT else one_line[: EXCERPT - 1] + "…"


def group_title(group: ModelGroup) -> str:
    """The model group as the chart's axis and a heading name it: "2 · qwen-local"."""
    identity = group.identity
    name = identity.short if identity is not None else "no job (made by hand)"
    return f"{group.number} · {name}"


def _group_bars(summary: FutureSummary, group: ModelGroup, page: str) -> dict[str, list]:
    bars: dict[str, list] = {"x": [], "y": [], "colours": [], "hover": [], "urls": []}
    total = group.size
    who = group.identity.label if group.identity is not None else "no job"
    for outcome in group.outcomes:
        bars["x"].append(outcome.label)
        bars["y"].append(outcome.size)
        kind = "same meaning" if outcome.exact else "near-duplicates"
        bars["hover"].append(
            f"<b>{plotly_text(who)}: outcome {outcome.label}</b>: {outcome.size} of this "
            f"model's {total} futures ({outcome.share:.0%} of those with an outcome, "
            f"{kind})<br>" + plotly_text(_excerpt(outcome.step.observation))
        )
        bars["urls"].append(f"{page}?branch={outcome.representative.pk}&step={summary.at}")
        bars["colours"].append(None)
    for name, branches in group.apart:
        if branches:
            bars["x"].append(name)
            bars["y"].append(len(branches))
            bars["colours"].append(APART[name])
            bars["hover"].append(
                f"<b>{plotly_text(who)}: {name}</b>: {len(branches)} of this model's "
                f"{total} futures"
            )
            bars["urls"].append(f"{page}?branch={branches[0].pk}&step={summary.at}")
    return bars


def outcome_figure(summary: FutureSummary, colours: dict[str, str] | None = None) -> dict[str, Any]:
    """`colours`: model_key -> colour (`colour_map`), the same as the page's other views."""
    page = reverse("trajectory", args=[summary.parent.trajectory_id])
    several = len(summary.models) > 1
    traces = []
    top = 0
    for group in summary.models:
        bars = _group_bars(summary, group, page)
        # the model's colour, as on its heading, the tree and the compare columns
        colour = colour_of(group.identity, colours or {}) if group.identity else OUTCOME_COLOUR
        x: list[Any] = bars["x"]
        if several:
            # a two-level axis: every category names its model, so outcome "A" of one model
            # is never the same bar as outcome "A" of another
            x = [[group_title(group)] * len(x), x]
        top = max([top, *bars["y"]])
        traces.append(
            {
                "type": "bar",
                "x": x,
                "y": bars["y"],
                "marker": {"color": [c or colour for c in bars["colours"]]},
                "hovertext": bars["hover"],
                "hoverinfo": "text",
                "customdata": bars["urls"],
                "text": [str(v) for v in bars["y"]],
                "textposition": "auto",
                "name": group_title(group),
            }
        )
    return {
        "data": traces,
        "layout": {
            "height": 240 if several else 220,
            "margin": {"l": 40, "r": 10, "t": 10, "b": 60 if several else 40},
            "showlegend": False,
            "xaxis": {
                "type": "multicategory" if several else "category",
                "title": {"text": "" if several else "outcome"},
            },
            "yaxis": {"title": {"text": "futures"}, "rangemode": "tozero"}
            | ({"dtick": 1} if top <= 10 else {}),
            "plot_bgcolor": "#fff",
            "paper_bgcolor": "#fff",
        },
        "config": {"displaylogo": False, "responsive": True, "displayModeBar": False},
        "meta": {
            "outcomes": len(summary.outcomes),
            "futures": len(summary.children),
            "models": len(summary.models),
        },
    }
