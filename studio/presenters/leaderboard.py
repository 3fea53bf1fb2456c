"""The leaderboard as the page shows it and as it is exported: rows of models, columns of the
seven domains and overall, each cell a total (with its five dimensions and counts for the
runs measured here), as CSV, Markdown and a Plotly figure (grouped bars per domain)."""

from __future__ import annotations

import csv
import io
from html import escape
from typing import Any

from inference.judge import DIMENSIONS
from studio.services.evaluations import LEADER_COLUMNS, LeaderRow

LABELS = {
    "mcp": "MCP", "search": "Search", "terminal": "Terminal", "swe": "SWE",
    "android": "Android", "web": "Web", "os": "OS", "overall": "Overall",
}  # fmt: skip


def cell_text(cell: dict[str, Any] | None) -> str:
    if not cell or cell.get("total") is None:
        return "–" if not cell or "pooled" not in cell else "– (not every domain)"
    return f"{cell['total']:.2f}"


def cell_title(cell: dict[str, Any] | None) -> str:
    """What hovering a cell tells: the dimensions and the counts (measured runs), or that
    the figure is published."""
    if not cell or cell.get("total") is None:
        return "no sample of this domain"
    if cell.get("published"):
        return "published figure (not measured here)"
    if "pooled" in cell:
        pooled = cell.get("pooled")
        pooled_text = "–" if pooled is None else f"{pooled:.2f}"
        return (
            f"mean of the seven domains, as the published table; pooled over the samples: "
            f"{pooled_text} · {cell.get('n', 0)} valid, {cell.get('failed', 0)} failed"
        )
    dims = ", ".join(
        f"{d} {cell[d]:.2f}" if cell.get(d) is not None else f"{d} –" for d in DIMENSIONS
    )
    return f"{dims} · {cell.get('n', 0)} valid, {cell.get('failed', 0)} failed"


def table(rows: list[LeaderRow]) -> list[dict[str, Any]]:
    return [
        {
            "row": row,
            "cells": [
                {
                    "column": c,
                    "text": cell_text(row.cells.get(c)),
                    "title": cell_title(row.cells.get(c)),
                    "cell": row.cells.get(c) or {},
                }
                for c in LEADER_COLUMNS
            ],
        }
        for row in rows
    ]


def as_csv(rows: list[LeaderRow]) -> str:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["model", "source", *[LABELS[c] for c in LEADER_COLUMNS]])
    for row in rows:
        source = "published" if row.run is None else f"measured (run {row.run.pk})"
        totals = [cell_text(row.cells.get(c)).replace("–", "") for c in LEADER_COLUMNS]
        writer.writerow([row.label, source, *totals])
    return out.getvalue()


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def as_markdown(rows: list[LeaderRow]) -> str:
    head = ["Model", "Source", *[LABELS[c] for c in LEADER_COLUMNS]]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(":---:" for _ in head) + "|"]
    for row in rows:
        source = "published" if row.run is None else f"measured (run {row.run.pk})"
        cells = [cell_text(row.cells.get(c)) for c in LEADER_COLUMNS]
        lines.append("| " + " | ".join([_md(row.label), source, *cells]) + " |")
    return "\n".join(lines) + "\n"


def _grouped_bars(rows: list[LeaderRow], x: list[str], y_of: Any, height: int) -> dict[str, Any]:
    """Grouped bars over `x`, one bar per measured run (published rows are in the table
    only: a chart of fourteen published models would bury the project's own)."""
    data = [
        {
            "type": "bar",
            "name": escape(r.label),
            "x": x,
            "y": y_of(r),
            "hovertemplate": "%{x}: %{y:.2f}<extra>" + escape(r.label) + "</extra>",
        }
        for r in rows
        if r.run is not None
    ]
    return {
        "data": data,
        "layout": {
            "barmode": "group",
            "height": height,
            "margin": {"l": 40, "r": 10, "t": 10, "b": 40},
            "yaxis": {"range": [0, 100], "title": {"text": "score (0-100)"}},
            "legend": {"orientation": "h"},
        },
    }


def dimension_figure(rows: list[LeaderRow]) -> dict[str, Any]:
    """One group per dimension (over every domain)."""
    return _grouped_bars(
        rows,
        list(DIMENSIONS),
        lambda r: [(r.cells.get("overall") or {}).get(d) for d in DIMENSIONS],
        280,
    )


def figure(rows: list[LeaderRow]) -> dict[str, Any]:
    """One group per domain, and overall."""
    return _grouped_bars(
        rows,
        [LABELS[c] for c in LEADER_COLUMNS],
        lambda r: [(r.cells.get(c) or {}).get("total") for c in LEADER_COLUMNS],
        320,
    )
