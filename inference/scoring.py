"""AgentWorldBench scores from judged predictions: per domain and overall, each dimension and
the total normalised as (raw - 1) / 4 * 100 with two decimals. The overall figures pool all
valid samples (a mean over samples, not over domain means); failed judgements are left out."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from inference.awb_runner import BenchDataError, domain_of
from inference.judge import DIMENSIONS

COLUMNS = (*DIMENSIONS, "total")


def normalise(raw: float) -> float:
    return round((raw - 1) / 4 * 100, 2)


@dataclass
class Group:
    n: int = 0
    sums: dict[str, float] = field(default_factory=lambda: dict.fromkeys(COLUMNS, 0.0))

    def add(self, scores: dict[str, float], total: float) -> None:
        self.n += 1
        for dim in DIMENSIONS:
            self.sums[dim] += scores[dim]
        self.sums["total"] += total

    def figures(self) -> dict:
        if not self.n:
            return {"n": 0, **dict.fromkeys(COLUMNS)}
        return {"n": self.n, **{c: normalise(self.sums[c] / self.n) for c in COLUMNS}}


def valid_scores(row: dict) -> tuple[dict, float] | None:
    scores = row.get("scores")
    if not isinstance(scores, dict) or any(
        not isinstance(scores.get(d), int | float) or isinstance(scores.get(d), bool)
        for d in DIMENSIONS
    ):
        return None
    total = row.get("total_score")
    if not isinstance(total, int | float):
        total = sum(scores[d] for d in DIMENSIONS) / len(DIMENSIONS)
    return scores, float(total)


def score_rows(rows: list[dict]) -> dict:
    domains: dict[str, Group] = {}
    overall = Group()
    invalid = 0
    for row in rows:
        valid = valid_scores(row)
        if valid is None:
            invalid += 1
            continue
        scores, total = valid
        domains.setdefault(domain_of(row), Group()).add(scores, total)
        overall.add(scores, total)
    return {
        "domains": {name: g.figures() for name, g in sorted(domains.items())},
        "overall": overall.figures(),
        "invalid": invalid,
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
    header = f"{'domain':<12}{'n':>6}" + "".join(f"{c:>13}" for c in COLUMNS)
    lines = [header, "-" * len(header)]

    def line(name: str, fig: dict) -> str:
        cells = "".join(f"{'-' if fig[c] is None else format(fig[c], '.2f'):>13}" for c in COLUMNS)
        return f"{name:<12}{fig['n']:>6}{cells}"

    for name, fig in result["domains"].items():
        lines.append(line(name, fig))
    lines.append("-" * len(header))
    lines.append(line("overall", result["overall"]))
    if result["invalid"]:
        lines.append(f"({result['invalid']} sample(s) without a valid judgement left out)")
    return "\n".join(lines)
