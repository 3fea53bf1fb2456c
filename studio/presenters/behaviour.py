"""What a behaviour search's pages say of it: its status in the job pages' one vocabulary,
its phase in words, and its tokens and cost per model (the endpoint's price per million
tokens; "no price set" when the endpoint has none, or is gone)."""

from __future__ import annotations

from typing import Any

from studio.presenters.campaigns import STATUS_WORDS, cost_text
from studio.services.behaviour import RANK_POOL_FACTOR, RANK_POOL_MAX
from studio.services.campaigns import cost_of

PHASE_WORDS = {
    "queued": "waiting for a worker",
    "choosing": "choosing the candidates",
    "labelling": "asking the judge about each candidate",
    "clustering": "grouping the matches' reasons and naming the groups",
    "cancelling": "stopping after the requests in flight",
}


def status_text(job: Any) -> str:
    if job.cancel_requested and not job.is_finished:
        return "Cancelling…"
    return STATUS_WORDS.get(job.status, job.get_status_display())


def phase_text(job: Any) -> str:
    if job.is_finished:
        return ""
    return PHASE_WORDS.get(job.phase, job.phase)


def chosen_text(job: Any) -> str:
    """How the job's candidates were chosen, in a sentence ("" before they were)."""
    if job.candidate_ids is None:
        return ""
    whole = job.unit == "trajectories"
    things = "trajectories" if whole else "steps"
    source = f"the query {job.query!r} matches" if job.query else "the project has"
    if not job.capped:
        one = "trajectory" if whole else "step"
        where = "the query matches" if job.query else "of the project"
        return f"Every {one} {where} is a candidate ({len(job.candidate_ids)})."
    most = job.max_candidates
    said = f"{source[:1].upper()}{source[1:]} more than {most:,} {things}: "
    if job.chosen_by == "meaning":
        pool = max(most + 1, min(most * RANK_POOL_FACTOR, RANK_POOL_MAX))
        return (
            f"{said}the {most:,} closest in meaning to the behaviour were taken, by the "
            f"embeddings model, among the newest {pool:,} at most."
        )
    return f"{said}the newest {most:,} were taken."


def clustered_by(job: Any) -> str:
    """How the matches' groups were made: "embeddings" or "words" (the job's notes; a job
    that has no note of it grouped by embeddings when it had an embeddings model)."""
    by = (job.params or {}).get("clustered_by")
    if by in ("embeddings", "words"):
        return str(by)
    return "embeddings" if job.embedding_model else "words"


def cost_rows(job: Any) -> list[dict[str, Any]]:
    """One row per model the search used: the judge, and the embeddings model if any."""
    judge = job.judge_endpoint
    judge_cost = (
        cost_of(
            job.judge_tokens_in,
            job.judge_tokens_out,
            judge.price_in_per_mtok,
            judge.price_out_per_mtok,
        )
        if judge is not None
        else None
    )
    rows = [
        {
            "role": "judge",
            "name": job.judge_name or job.judge_model,
            "model": job.judge_model,
            "tokens_in": job.judge_tokens_in,
            "tokens_out": job.judge_tokens_out,
            "cost": judge_cost,
            "cost_text": cost_text(judge_cost),
            "gone": judge is None,
        }
    ]
    if job.embedding_model:
        embedding = job.embedding_endpoint
        price = embedding.price_in_per_mtok if embedding is not None else None
        cost = None if price is None else int(job.embedding_tokens) * float(price) / 1_000_000
        rows.append(
            {
                "role": "embedding",
                "name": job.embedding_name or job.embedding_model,
                "model": job.embedding_model,
                "tokens_in": job.embedding_tokens,
                "tokens_out": 0,
                "cost": cost,
                "cost_text": cost_text(cost),
                "gone": embedding is None,
            }
        )
    return rows


def confidence_text(value: Any) -> str:
    if value is None:
        return "–"
    return f"{float(value):.2f}"
