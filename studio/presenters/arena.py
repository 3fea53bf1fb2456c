"""The arena as its page shows it: its phases, each model (identity, colour, its simulation's
state, mean judge score per dimension with n, overall win rate with its interval), the
pairwise table, and the futures side by side (a row per sample index, a column per model);
and the project's arena leaderboard rows. Figures as text here; the template only places
them."""

from __future__ import annotations

from typing import Any

from inference.judge import DIMENSIONS
from studio.models import ArenaPair, ArenaRun, JobStatus, PairWinner
from studio.presenters.model_colours import colour_map, colour_of
from studio.services.arena import ArenaResults, Mean, RollupRow, WinRate

PHASE_LABELS = {
    "simulating": "Simulating",
    "judging": "Scoring every future",
    "comparing": "Comparing pairs",
}
COLUMNS = (*DIMENSIONS, "total")


def percent(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.0f}%"


def rate_text(rate: WinRate) -> str:
    """ "62% (95% CI 41–79%, n 12)", or "–" with no judged pair."""
    if not rate.n:
        return "–"
    low, high = rate.interval or (0.0, 0.0)
    return f"{percent(rate.rate)} (95% CI {100 * low:.0f}–{100 * high:.0f}%, n {rate.n})"


def rate_title(rate: WinRate) -> str:
    parts = [f"{rate.wins} won, {rate.losses} lost, {rate.ties} tied (a tie counts half)"]
    if rate.failed:
        parts.append(f"{rate.failed} failed to judge (not counted)")
    return "; ".join(parts)


def mean_text(mean: Mean | None) -> str:
    if mean is None or mean.value is None:
        return "–"
    return f"{mean.value:.2f}"


def score_cells(scores: dict[str, Mean]) -> list[dict[str, Any]]:
    return [
        {
            "column": column,
            "text": mean_text(scores.get(column)),
            "n": scores[column].n if column in scores else 0,
        }
        for column in COLUMNS
    ]


def phases(arena: ArenaRun, results: ArenaResults) -> list[dict[str, Any]]:
    """Each phase with its state (done, current, waiting, failed) and what it did, in words."""
    jobs = [m.job for m in results.models]
    ended = sum(1 for j in jobs if j.is_finished)
    failed = [j for j in jobs if j.status == JobStatus.FAILED]
    judge = results.judge_job
    order = ("simulating", "judging", "comparing")
    # a comparing arena asked to stop says "cancelling" until its worker ends it
    phase = "comparing" if arena.phase == "cancelling" else arena.phase
    current = phase if phase in order else None
    reached = order.index(current) if current else len(order)
    if arena.phase in ("failed", "cancelled"):
        # how far it got: the judge job or the pairs it had
        # (the comparing phase is the only one that claims it: started_at)
        reached = 2 if arena.started_at is not None else 1 if judge is not None else 0
    sim_detail = f"{ended} of {len(jobs)} simulations ended"
    if failed:
        sim_detail += f", {len(failed)} failed"
    judge_detail = "not started"
    if judge is not None:
        judge_detail = (
            f"{judge.steps_judged} of {judge.steps_total} futures scored"
            + (f", {judge.steps_failed} failed" if judge.steps_failed else "")
            + f" ({judge.get_status_display().lower()})"
        )
    pair_detail = "not started"
    if arena.pairs_total or arena.phase in ("comparing", "done"):
        pair_detail = f"{arena.pairs_judged} of {arena.pairs_total} pairs judged" + (
            f", {arena.pairs_failed} failed" if arena.pairs_failed else ""
        )
    details = {"simulating": sim_detail, "judging": judge_detail, "comparing": pair_detail}
    out = []
    for number, name in enumerate(order):
        if arena.status == JobStatus.SUCCEEDED or number < reached:
            state = "done"
        elif number == reached and not arena.is_finished:
            state = "current"
        elif number == reached and arena.is_finished:
            state = str(arena.status)  # failed or cancelled here
        else:
            state = "waiting"
        out.append(
            {"name": name, "label": PHASE_LABELS[name], "state": state, "detail": details[name]}
        )
    return out


def arena_view(results: ArenaResults) -> dict[str, Any]:
    arena = results.arena
    colours = colour_map(m.identity for m in results.models)
    models = []
    for m in results.models:
        models.append(
            {
                "result": m,
                "job": m.job,
                "identity": m.identity,
                "colour": colour_of(m.identity, colours),
                "futures": len(m.steps),
                "scores": score_cells(m.scores),
                "overall": rate_text(m.overall),
                "overall_title": rate_title(m.overall),
            }
        )
    pairs = [
        {
            "first": p.first.identity,
            "second": p.second.identity,
            "rate": rate_text(p.rate),
            "title": rate_title(p.rate),
            "wins": p.rate.wins,
            "losses": p.rate.losses,
            "ties": p.rate.ties,
            "failed": p.rate.failed,
        }
        for p in results.pairs
    ]
    labels = {m.job.pk: m.identity.label for m in results.models}
    pair_rows: dict[int, list[ArenaPair]] = {}
    for p in results.pairs:
        for pair in p.pairs:
            pair_rows.setdefault(pair.sample_index, []).append(pair)
    grid = []
    for i in range(arena.n):
        cells = []
        for m in results.models:
            step = m.steps.get(i)
            branch = m.branches.get(i)
            judgement = m.judgements.get(step.pk) if step is not None else None
            cells.append(
                {
                    "identity": m.identity,
                    "colour": colour_of(m.identity, colours),
                    "step": step,
                    "branch": branch,
                    "judgement": judgement,
                    "scores": [
                        (d, (judgement.scores or {}).get(d))
                        for d in DIMENSIONS
                        if judgement is not None and d in (judgement.scores or {})
                    ],
                }
            )
        grid.append(
            {
                "index": i,
                "seed": arena.seed + i,
                "cells": cells,
                "verdicts": [verdict(p, labels) for p in pair_rows.get(i, [])],
            }
        )
    return {
        "phases": phases(arena, results),
        "models": models,
        "pairs": pairs,
        "grid": grid,
        "columns": COLUMNS,
        "colours": colours,
    }


def verdict(pair: ArenaPair, labels: dict[int, str]) -> dict[str, Any]:
    """One pairwise judgement in words: who won (or the tie, or that it failed), and in
    which order the judge saw the two."""
    a, b = labels.get(pair.job_a_id, "?"), labels.get(pair.job_b_id, "?")
    first, second = (a, b) if pair.shown_first == "a" else (b, a)
    # the judge's reason speaks of "A" and "B": the order it saw them in
    order = f"the judge saw A = {first}, B = {second}"
    if not pair.ok:
        text = f"{a} vs {b}: not judged"
    elif pair.winner == PairWinner.TIE:
        text = f"{a} vs {b}: tie"
    else:
        text = f"{a} vs {b}: {a if pair.winner == PairWinner.A else b} more faithful"
    return {"text": text, "ok": pair.ok, "reason": pair.reason, "error": pair.error, "order": order}


def leaderboard(rows: list[RollupRow]) -> dict[str, Any]:
    """The arena leaderboard's rows and the colours of their models."""
    colours = colour_map(r.identity for r in rows)
    lines = [
        {
            "identity": r.identity,
            "colour": colour_of(r.identity, colours),
            "scores": score_cells(r.scores),
            "overall": rate_text(r.overall),
            "overall_title": rate_title(r.overall),
            "arenas": len(r.arenas),
            "forks": len(r.forks),
            "futures": r.futures,
        }
        for r in rows
    ]
    return {"rows": lines, "colours": colours, "columns": COLUMNS}
