"""Celery queue names: `default` (imports, retrieval and HTTP-backend simulations) and `gpu`
(the in-process transformers backend, one model per worker process)."""

from __future__ import annotations

from django.conf import settings


def queue_name(base: str) -> str:
    """Queue names carry STUDIO_QUEUE_PREFIX so test runs never share queues with a dev worker."""
    return f"{settings.STUDIO_QUEUE_PREFIX}{base}"
