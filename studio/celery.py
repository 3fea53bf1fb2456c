"""The Celery application. Queues: `default` (imports, retrieval/HTTP simulations) and `gpu`
(in-process transformers model, one model per worker process, concurrency 1)."""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "studio.settings")

app = Celery("studio")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["studio"])


def queue_name(base: str) -> str:
    """Queue names carry STUDIO_QUEUE_PREFIX so test runs never share queues with a dev worker."""
    from django.conf import settings

    return f"{settings.STUDIO_QUEUE_PREFIX}{base}"
