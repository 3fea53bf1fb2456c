"""Celery queue names: `default` (imports, retrieval and HTTP-backend simulations), `gpu`
(the in-process transformers backend, one model per worker process) and `episodes` (steps of
episodes served to outside agents, on a threads pool: each waits on a model server)."""

from __future__ import annotations

from django.conf import settings


def queue_name(base: str) -> str:
    """Queue names carry STUDIO_QUEUE_PREFIX so test runs never share queues with a dev worker."""
    return f"{settings.STUDIO_QUEUE_PREFIX}{base}"
