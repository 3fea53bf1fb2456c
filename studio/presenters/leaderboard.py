"""The leaderboard as the page shows it and as it is exported: rows of models grouped by the
sample set they scored (the published figures a group of their own, with a note saying they
were scored on other samples), columns of the seven domains and overall, each cell a total
(with its five dimensions and counts for the runs measured here), as CSV (numbers only),
Markdown and Plotly figures (grouped bars per domain and per dimension); and a run's sample
set as its page shows it."""

from __future__ import annotations

import csv
import io
from html import escape
from typing import Any

from inference.judge import DIMENSIONS
from studio.models import DOMAINS, EvaluationRun
from studio.services.evaluations import (
    ALL_SOURCES,
    LEADER_COLUMNS,
    LeaderGroup,
    LeaderRow,
    is_full_benchmark,
)
from studio.services.finetune_evaluations import SCRIPTED_JUDGE_NOTE, judged_by_script, model_name

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


def sample_set_settings(run: EvaluationRun) -> str:
    """The settings that fix a run's samples, in words."""
    files = (run.params or {}).get("files") or []
    if run.source == "benchmark":
        source = "AgentWorldBench files " + (", ".join(files) if files else "(all imported)")
    elif run.source == "heldout":
        source = f"the held-out trajectories of fine-tune {run.finetune_id}"
    else:
        source = "recorded trajectories"
    if run.finetune_id is not None:
        source += " (the fine-tune's training trajectories left out)"
    domains = ", ".join(run.domains) if run.domains else "every domain"
    return f"seed {run.sample_seed}, at most {run.limit_per_domain} per domain, {source}, {domains}"


def sample_set_view(run: EvaluationRun) -> dict[str, Any]:
    """What the run page says of its sample set."""
    files = (run.params or {}).get("files") or []
    return {
        "seed": run.sample_seed,
        "limit": run.limit_per_domain,
        "source": ALL_SOURCES.get(run.source, run.source),
        "files": files,
        "domains": list(run.domains) or ["every domain"],
        "digest": run.sample_set,
        "short": run.sample_set[:12],
        "count": run.samples_total,
        # in the domains' own order (PostgreSQL's JSON gives keys back shortest first)
        "pool": _in_domain_order((run.params or {}).get("sample_pool") or {}),
        "full": is_full_benchmark(run),
    }


def _in_domain_order(pool: dict[str, int]) -> dict[str, int]:
    order = {domain: i for i, domain in enumerate(DOMAINS)}
    return dict(sorted(pool.items(), key=lambda kv: (order.get(kv[0], len(order)), kv[0])))


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def group_heading(group: LeaderGroup) -> str:
    if group.published:
        return "Published figures (Qwen-AgentWorld model card), on the full AgentWorldBench"
    settings = sorted({sample_set_settings(run) for run in group.runs})
    whole = (
        " · every recorded step of the seven domains of the AgentWorldBench files imported here"
        if group.full
        else " · a subset"
    )
    return (
        f"Sample set {group.key[:12]} · {_plural(group.samples or 0, 'sample')}{whole} · "
        + "; ".join(settings)
    )


def published_note(groups: list[LeaderGroup]) -> str:
    """Beside the published rows, whenever a measured set is there: the published figures
    were scored on other samples (and another judge), so a rank across is not a like-for-like
    one."""
    measured = [g for g in groups if not g.published]
    if not measured:
        return ""
    sets = ", ".join(
        f"{_plural(g.samples or 0, 'sample')} (set {g.key[:12]}"
        + (", the whole benchmark as imported here)" if g.full else ", a subset)")
        for g in measured
    )
    return (
        "Published figures are on the full AgentWorldBench (every sample of its seven domains, "
        f"the model card's judge); the runs measured here scored {sets}: not the same "
        "samples, so these rows are not ranked with them."
    )


def _row_view(row: LeaderRow) -> dict[str, Any]:
    return {
        "row": row,
        "model": model_name(row.run) if row.run is not None else row.note,
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


def scripted_note(group: LeaderGroup) -> str:
    """A group some of whose runs the demo's scripted judge scored: which, and that their
    figures are text measurements, not judgements ("" when none)."""
    scripted = [run for run in group.runs if judged_by_script(run)]
    if not scripted:
        return ""
    if len(scripted) == len(group.runs):
        return run_scripted_note(scripted[0])
    names = ", ".join(run.name for run in scripted)
    return f"{names}: {SCRIPTED_JUDGE_NOTE}."


def run_scripted_note(run: EvaluationRun) -> str:
    """A run the demo's scripted judge scored: that its figures are text measurements."""
    return (
        SCRIPTED_JUDGE_NOTE[0].upper() + SCRIPTED_JUDGE_NOTE[1:] + "."
        if judged_by_script(run)
        else ""
    )


def table(groups: list[LeaderGroup]) -> list[dict[str, Any]]:
    """One part per group: its heading, a note (the published group), one for runs the
    scripted demo judge scored, its rows (each with the model: its endpoint's name)."""
    note = published_note(groups)
    return [
        {
            "group": group,
            "heading": group_heading(group),
            "note": note if group.published else "",
            "scripted_note": scripted_note(group),
            "lines": [_row_view(row) for row in group.rows],
        }
        for group in groups
    ]


def _number(cell: dict[str, Any] | None, key: str) -> str:
    """A figure as a CSV cell: the number, or empty for none."""
    value = (cell or {}).get(key)
    if value is None or isinstance(value, bool):
        return ""
    return f"{value:.2f}" if isinstance(value, float) else str(value)


def as_csv(groups: list[LeaderGroup]) -> str:
    """Numbers only in the figure and count columns (empty: none); published rows have no
    counts (not measured here)."""
    out = io.StringIO()
    writer = csv.writer(out)
    head = ["model", "source", "run", "sample_set", "sample_seed", "limit_per_domain", "samples"]
    for c in LEADER_COLUMNS:
        head += [LABELS[c], f"{LABELS[c]} valid", f"{LABELS[c]} failed"]
    writer.writerow(head)
    for group in groups:
        for row in group.rows:
            run = row.run
            line = [
                row.label,
                "published" if run is None else "measured",
                "" if run is None else run.pk,
                "" if run is None else group.key,
                "" if run is None else run.sample_seed,
                "" if run is None else run.limit_per_domain,
                "" if row.samples is None else row.samples,
            ]
            for c in LEADER_COLUMNS:
                cell = row.cells.get(c)
                total = cell.get("total") if cell else None
                line.append("" if total is None else f"{float(total):.2f}")
                line += ["", ""] if run is None else [_number(cell, "n"), _number(cell, "failed")]
            writer.writerow(line)
    return out.getvalue()


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def as_markdown(groups: list[LeaderGroup]) -> str:
    """A table per sample set, under its heading; the published one with its note."""
    head = ["Model", "Source", "Samples", *[LABELS[c] for c in LEADER_COLUMNS]]
    note = published_note(groups)
    parts = []
    for group in groups:
        lines = [f"### {_md(group_heading(group))}", ""]
        if group.published and note:
            lines += [f"> {_md(note)}", ""]
        if scripted_note(group):
            lines += [f"> {_md(scripted_note(group))}", ""]
        lines += ["| " + " | ".join(head) + " |", "|" + "|".join(":---:" for _ in head) + "|"]
        for row in group.rows:
            source = "published" if row.run is None else f"measured (run {row.run.pk})"
            samples = "–" if row.samples is None else str(row.samples)
            cells = [cell_text(row.cells.get(c)) for c in LEADER_COLUMNS]
            lines.append("| " + " | ".join([_md(row.label), source, samples, *cells]) + " |")
        parts.append("\n".join(lines))
    return "\n\n".join(parts) + "\n"


def measured_rows(groups: list[LeaderGroup]) -> list[LeaderRow]:
    return [row for group in groups if not group.published for row in group.rows]


def _grouped_bars(
    groups: list[LeaderGroup], x: list[str], y_of: Any, height: int
) -> dict[str, Any]:
    """Grouped bars over `x`, one bar per measured run, named with its sample set (runs of
    different sets scored different samples); published rows are in the table only: a chart
    of fourteen published models would bury the project's own."""
    named = [
        (f"{r.label} (set {g.key[:8]}, {_plural(g.samples or 0, 'sample')})", r)
        for g in groups
        if not g.published
        for r in g.rows
    ]
    data = [
        {
            "type": "bar",
            "name": escape(name),
            "x": x,
            "y": y_of(r),
            "hovertemplate": "%{x}: %{y:.2f}<extra>" + escape(name) + "</extra>",
        }
        for name, r in named
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


def dimension_figure(groups: list[LeaderGroup]) -> dict[str, Any]:
    """One group per dimension (over every domain)."""
    return _grouped_bars(
        groups,
        list(DIMENSIONS),
        lambda r: [(r.cells.get("overall") or {}).get(d) for d in DIMENSIONS],
        280,
    )


def figure(groups: list[LeaderGroup]) -> dict[str, Any]:
    """One group per domain, and overall."""
    return _grouped_bars(
        groups,
        [LABELS[c] for c in LEADER_COLUMNS],
        lambda r: [(r.cells.get(c) or {}).get("total") for c in LEADER_COLUMNS],
        320,
    )
