"""`{% load worker_tags %}`: what the workers' heartbeat rows say of one job, for the
`jobs/worker_status.html` partial on every job page (`studio.services.workers`). Reads
only."""

from __future__ import annotations

from typing import Any

from django import template

from studio.services.workers import gone_after_s, queue_status, worker_state

register = template.Library()


@register.simple_tag
def worker_status(job: Any) -> dict[str, Any] | None:
    """{"no_consumer": {"queue", "start"}} for a queued job that no live worker would take,
    {"gone": WorkerState} for a running job whose worker went away; None otherwise (or for
    anything that is not a job row)."""
    if job is None or not hasattr(job, "status"):
        return None
    waiting = queue_status(job)
    if waiting is not None:
        return {"no_consumer": waiting}
    state = worker_state(job)
    if state is not None and not state.alive:
        return {"gone": state, "gone_after_s": gone_after_s()}
    return None
