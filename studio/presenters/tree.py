"""The branch tree as a Plotly figure (a plain dict, for json_script) from the plain
`TreeNode`s of `studio.services.branches`."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.urls import reverse

from studio.models import Trajectory
from studio.models.trajectories import BranchStatus
from studio.presenters.model_colours import RECORDED_COLOUR, colour_map, colour_of
from studio.services.branches import TreeNode, filter_tree_by_model, layout_tree, tree_nodes
from studio.services.model_identity import ModelIdentity

STATUS_COLORS: dict[str, str] = {
    BranchStatus.READY: "#3b5bdb",
    BranchStatus.SUCCEEDED: "#2b8a3e",
    BranchStatus.QUEUED: "#b7791f",
    BranchStatus.RUNNING: "#f08c00",
    BranchStatus.FAILED: "#c92a2a",
    BranchStatus.CANCELLED: "#868e96",
}
ORIGIN_SYMBOLS = {
    "recorded": "square",
    "simulated": "circle",
    "edited": "diamond",
    "played": "triangle-up",  # a person typed its actions (the playground)
    "group": "circle-open-dot",  # several sibling futures drawn as one
}
# Above this many branches, per-node labels would overlap: hover text carries them instead.
LABEL_LIMIT = 40
# A group of sibling futures of several models has no one model's colour.
MIXED_COLOUR = "#ffffff"


@dataclass(frozen=True)
class ModelChoice:
    """One world model present in the tree: for the legend and the filter's select."""

    token: str
    label: str
    colour: str
    futures: int  # branches of the tree whose future this model made
    baseline: bool = False


@dataclass
class TreeModels:
    choices: list[ModelChoice]
    colours: dict[str, str]  # model_key -> colour, as on the trajectory page


@dataclass(frozen=True)
class ModelFilter:
    """`?model=` of the tree: the model asked for, how many of its futures and how many
    branches (its futures and their ancestors) are shown; or why nothing was filtered."""

    choice: ModelChoice | None
    matching: int = 0
    shown: int = 0
    error: str = ""


def model_filter_choices(nodes: Iterable[TreeNode], colours: dict[str, str]) -> TreeModels:
    """The models of the tree's futures (nodes named by `name_tree_models`), in the order of
    `colours` (the order they first ran), each with its count of futures."""
    counts: dict[str, int] = {}
    firsts: dict[str, ModelIdentity] = {}
    for n in nodes:
        if n.identity is None:
            continue
        key = n.identity.model_key
        counts[key] = counts.get(key, 0) + 1
        firsts.setdefault(key, n.identity)
    order = [key for key in colours if key in firsts] + [k for k in firsts if k not in colours]
    return TreeModels(
        choices=[
            ModelChoice(
                token=firsts[key].token,
                label=firsts[key].label,
                colour=colour_of(firsts[key], colours),
                futures=counts[key],
                baseline=firsts[key].is_baseline,
            )
            for key in order
        ],
        colours=colours,
    )


def filter_nodes_by_model(
    nodes: list[TreeNode], token: str, models: TreeModels
) -> tuple[list[TreeNode], ModelFilter | None]:
    """The nodes `?model=<token>` asks for (that model's futures and their ancestors)."""
    token = token.strip()
    if not token:
        return nodes, None
    choice = next((c for c in models.choices if c.token == token), None)
    if choice is None:
        return nodes, ModelFilter(
            choice=None,
            error=(
                f"No future of this trajectory was made by the model asked for "
                f"(model={token[:40]}): all branches are shown."
            ),
        )
    kept, matching = filter_tree_by_model(nodes, token)
    return kept, ModelFilter(choice=choice, matching=matching, shown=len(kept))


def model_words(n: TreeNode) -> str:
    """The model of a node's future in words, for its label and hover."""
    if n.identity is not None:
        return n.identity.label
    if n.models > 1:
        return f"{n.models} models"
    if n.is_group or n.job_id is not None:
        return "model not known"
    return "recorded" if n.origin == "recorded" else "no model (made by hand)"


def node_colour(n: TreeNode, colours: dict[str, str]) -> str:
    if n.identity is None and n.models > 1:
        return MIXED_COLOUR
    return colour_of(n.identity, colours) if n.identity is not None else RECORDED_COLOUR


def plotly_text(value: str) -> str:
    """Escape user text for Plotly's text/hover strings, which understand a few HTML-like
    tags (<b>, <br>, <a>) and only a few named entities: neutralise tags, keep quotes."""
    return value.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def status_counts(statuses: dict[str, int]) -> str:
    return ", ".join(f"{count} {status}" for status, count in sorted(statuses.items()))


def node_label(n: TreeNode) -> str:
    """What tells a branch from its siblings: its name (a future's names its job, number and
    action), then its status and length; a group says how many and how they ended."""
    model = f" · {n.identity.short}" if n.identity is not None else ""
    if n.is_group:
        model = model or (f" · {n.models} models" if n.models > 1 else "")
        return f"{n.name}{model} · {status_counts(n.statuses)}"
    star = "★ " if n.starred else ""
    if n.parent_id is None:
        return f"{star}{n.name} · {n.total_steps} steps"
    return f"{star}{n.name}{model} · {n.status} · {n.total_steps} steps"


def node_url(page: str, compare: str, n: TreeNode) -> str:
    """A branch opens at its fork step; a group opens the outcomes of its fork."""
    if n.is_group:
        return f"{compare}?fork={n.parent_id}&at={n.fork_index}"
    if n.parent_id is None:
        return f"{page}?branch={n.pk}"
    return f"{page}?branch={n.pk}&step={n.fork_index}"


def build_tree_figure(
    trajectory: Trajectory,
    current_id: int | None = None,
    nodes: list[TreeNode] | None = None,
    *,
    compact: bool = False,
    colours: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A Plotly figure (plain dict, for json_script) of the trajectory's branch tree.

    Each branch is a row: a marker at its fork step (colour = status, symbol = origin), a line
    over its own steps, a connector from the parent's row, and a label at its end. Clicking a
    marker or label opens the branch (customdata holds its URL). `compact` (a narrow side
    panel) and large trees drop the labels: hover text carries them.

    A marker's fill is the model of its future (`colours`: model_key -> colour, the page's
    `colour_map`; recorded and hand-made branches dark grey), its outline its status."""
    nodes = layout_tree(nodes if nodes is not None else tree_nodes(trajectory))
    if colours is None:
        colours = colour_map(n.identity for n in nodes)
    by_id = {n.pk: n for n in nodes}
    page = reverse("trajectory", args=[trajectory.pk])
    compare = reverse("branch_compare", args=[trajectory.pk])
    urls = [node_url(page, compare, n) for n in nodes]
    many = compact or len(nodes) > LABEL_LIMIT

    seg_x: list[float | None] = []
    seg_y: list[float | None] = []
    link_x: list[float | None] = []
    link_y: list[float | None] = []
    for n in nodes:
        seg_x += [n.fork_index, n.last_index, None]
        seg_y += [n.y, n.y, None]
        parent = by_id.get(n.parent_id) if n.parent_id else None
        if parent is not None:
            # Elbow: along the parent's row to the fork step, then down to the child's row.
            link_x += [parent.x, n.fork_index, n.fork_index, None]
            link_y += [parent.y, parent.y, n.y, None]

    hover = [
        "<br>".join(
            [
                f"<b>{plotly_text(n.name)}</b>",
                f"model: {plotly_text(model_words(n))}",
                f"fork step: {n.fork_index}",
                f"statuses: {status_counts(n.statuses)}",
                "click for their outcomes",
            ]
        )
        if n.is_group
        else "<br>".join(
            [
                f"<b>{plotly_text(n.name)}</b> (branch {n.pk})",
                f"model: {plotly_text(model_words(n))}",
                *(
                    [plotly_text(n.identity.full.removeprefix(n.identity.label).strip(" ·"))]
                    if n.identity is not None and n.identity.full != n.identity.label
                    else []
                ),
                f"fork step: {n.fork_index if n.parent_id else 'root'}",
                f"origin: {n.origin} · status: {n.status}",
                f"steps: {n.total_steps} ({n.own_steps} own)",
                "click to open at its fork step" if n.parent_id else "click to open",
            ]
        )
        for n in nodes
    ]
    # An en space keeps each label clear of the marker drawn at the same point.
    labels = ["\u2002" + plotly_text(node_label(n)) for n in nodes]
    current = by_id.get(current_id) if current_id else None
    data: list[dict[str, Any]] = [
        {
            "type": "scatter",
            "mode": "lines",
            "x": link_x,
            "y": link_y,
            "line": {"color": "#adb5bd", "width": 1},
            "hoverinfo": "skip",
            "showlegend": False,
            "name": "forks",
        },
        {
            "type": "scatter",
            "mode": "lines",
            "x": seg_x,
            "y": seg_y,
            "line": {"color": "#ced4da", "width": 4},
            "hoverinfo": "skip",
            "showlegend": False,
            "name": "steps",
        },
        {
            "type": "scatter",
            "mode": "markers",
            "x": [n.x for n in nodes],
            "y": [n.y for n in nodes],
            "customdata": urls,
            "ids": [str(n.pk) for n in nodes],
            "hovertext": hover,
            "hoverinfo": "text",
            "marker": {
                "size": [
                    (16 if n.is_group else 9) if many else (18 if n.is_group else 12) for n in nodes
                ],
                "color": [node_colour(n, colours) for n in nodes],
                "symbol": [ORIGIN_SYMBOLS.get(n.origin, "circle") for n in nodes],
                "line": {
                    "color": [STATUS_COLORS.get(n.status, "#495057") for n in nodes],
                    "width": 2.5,
                },
            },
            "showlegend": False,
            "name": "branches",
        },
    ]
    if not many:
        data.append(
            {
                "type": "scatter",
                "mode": "text",
                "x": [n.last_index for n in nodes],
                "y": [n.y for n in nodes],
                "text": labels,
                "textposition": "middle right",
                "cliponaxis": False,  # the root's label sits right of the last step
                "textfont": {"size": 11, "color": "#344054"},
                "customdata": urls,
                "hovertext": hover,
                "hoverinfo": "text",
                "showlegend": False,
                "name": "labels",
            }
        )
    if current is not None:
        data.append(
            {
                "type": "scatter",
                "mode": "markers",
                "x": [current.x],
                "y": [current.y],
                "customdata": [node_url(page, compare, current)],
                "hovertext": [f"current branch: {plotly_text(current.name)}"],
                "hoverinfo": "text",
                "marker": {
                    "size": 20,
                    "color": "rgba(0,0,0,0)",
                    "line": {"color": "#111827", "width": 3},
                },
                "showlegend": False,
                "name": "current",
            }
        )
    max_x = max((n.last_index for n in nodes), default=0)
    # ~22 px a row while labels show; denser rows for big trees (the plot div scrolls).
    row_px = 22 if len(nodes) <= LABEL_LIMIT else 14
    height = max(220, 60 + row_px * len(nodes))
    layout: dict[str, Any] = {
        "height": height,
        "margin": {
            "l": 20,
            "r": 20 if many else 320,
            "t": 50 if len(nodes) > LABEL_LIMIT else 10,
            "b": 10 if len(nodes) > LABEL_LIMIT else 40,
        },
        "xaxis": {
            "title": {"text": "step"},
            # Tall trees scroll: keep the step axis at the top where it is seen first.
            "side": "top" if len(nodes) > LABEL_LIMIT else "bottom",
            "range": [-0.7, max_x + 0.7],
            "zeroline": False,
            "dtick": 1 if max_x <= 30 else None,
        },
        "yaxis": {
            # Reversed (row 0 on top) with a fixed range: no autorange padding at 200 rows.
            "range": [len(nodes) - 0.5, -0.7],
            "showticklabels": False,
            "zeroline": False,
            "showgrid": False,
        },
        "hovermode": "closest",
        "plot_bgcolor": "#fff",
        "paper_bgcolor": "#fff",
        "dragmode": "pan",
    }
    if layout["xaxis"]["dtick"] is None:
        del layout["xaxis"]["dtick"]
    return {
        "data": data,
        "layout": layout,
        "config": {"displaylogo": False, "responsive": True, "scrollZoom": False},
        "meta": {
            "branches": sum(len(n.members) or 1 for n in nodes),
            "nodes": len(nodes),
            "groups": sum(1 for n in nodes if n.is_group),
            "current": current.pk if current else None,
        },
    }
