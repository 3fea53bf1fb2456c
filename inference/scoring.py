"""AgentWorldBench scores from judged predictions, computed as the reference pipeline computes
them (QwenLM/Qwen-AgentWorld eval/eval.py `score`): per domain and overall, each dimension and
the total normalised as (raw - 1) / 4 * 100 with two decimals; a row counts when its `failed`
is 0 (rows judged by the reference, or by the studio, which writes the same fields; rows of
older studio files without `failed` count when their `scores` are whole); a value of 0 (the
reference's mark of an invalid value) is left out of its dimension; the overall figure pools
every valid sample's total (a mean over samples, not over domain means)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from inference.awb_runner import BenchDataError, domain_of
from inference.judge import DIMENSIONS

COLUMNS = (*DIMENSIONS, "total")
INVALID = 0  # the reference's value for a score it could not get


def normalise(raw: float) -> float:
    return round((raw - 1) / 4 * 100, 2)


@dataclass
class Group:
    rows: int = 0  # every row of the group, failed ones included
    n: int = 0  # the valid ones
    sums: dict[str, float] = field(default_factory=lambda: dict.fromkeys(COLUMNS, 0.0))
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(COLUMNS, 0))

    def add(self, values: dict[str, float]) -> None:
        self.n += 1
        for column, value in values.items():
            self.sums[column] += value
            self.counts[column] += 1

    def figures(self) -> dict:
        figures: dict = {"n": self.n, "failed": self.rows - self.n}
        for c in COLUMNS:
            figures[c] = normalise(self.sums[c] / self.counts[c]) if self.counts[c] else None
        return figures


def _number(value) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return None if value == INVALID else float(value)


def valid_values(row: dict) -> dict[str, float] | None:
    """The row's scores by column (dimensions and total) when it counts, else None."""
    if "failed" in row:
        if row.get("failed") != 0:
            return None
        found = row.get("scores")
        nested = found if isinstance(found, dict) else {}
        source = {d: row.get(d, nested.get(d)) for d in DIMENSIONS}
    else:  # a studio file from before the reference's fields
        scores = row.get("scores")
        if not isinstance(scores, dict) or any(_number(scores.get(d)) is None for d in DIMENSIONS):
            return None
        source = {d: scores[d] for d in DIMENSIONS}
    values = {d: v for d in DIMENSIONS if (v := _number(source.get(d))) is not None}
    total = _number(row.get("total_score"))
    if total is None and len(values) == len(DIMENSIONS):
        total = sum(values.values()) / len(DIMENSIONS)
    if total is not None:
        values["total"] = total
    return values


def score_rows(rows: list[dict]) -> dict:
    domains: dict[str, Group] = {}
    overall = Group()
    for row in rows:
        group = domains.setdefault(domain_of(row), Group())
        group.rows += 1
        overall.rows += 1
        values = valid_values(row)
        if values is None:
            continue
        group.add(values)
        overall.add(values)
    return {
        "domains": {name: g.figures() for name, g in sorted(domains.items())},
        "overall": overall.figures(),
        "samples": overall.rows,
        "invalid": overall.rows - overall.n,
    }


def read_judged(path: str | Path) -> list[dict]:
    rows = []
    p = Path(path)
    if not p.is_file():
        raise BenchDataError(f"{p}: no such file")
    with open(p, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise BenchDataError(f"{p}:{lineno}: not valid JSON ({exc.msg})") from None
    return rows


def format_table(result: dict) -> str:
    header = f"{'domain':<12}{'valid':>7}{'failed':>7}" + "".join(f"{c:>13}" for c in COLUMNS)
    lines = [header, "-" * len(header)]

    def line(name: str, fig: dict) -> str:
        cells = "".join(f"{'-' if fig[c] is None else format(fig[c], '.2f'):>13}" for c in COLUMNS)
        return f"{name:<12}{fig['n']:>7}{fig['failed']:>7}{cells}"

    for name, fig in result["domains"].items():
        lines.append(line(name, fig))
    lines.append("-" * len(header))
    lines.append(line("overall", result["overall"]))
    lines.append(
        f"Total samples: {result['samples']}, Valid: {result['overall']['n']}, "
        f"Failed: {result['invalid']} (failed ones are left out of every figure)"
    )
    return "\n".join(lines)
