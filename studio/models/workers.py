"""Workers as the studio sees them: each Celery worker writes its row every few seconds
(`studio.celery.WorkerHeartbeat` bootstep), with the queues it consumes. A page or a command
tells from these rows, within seconds, that no worker consumes a queue, or that the worker
running a job stopped answering (`studio.services.workers`)."""

from __future__ import annotations

from django.db import models


class WorkerHeartbeat(models.Model):
    name = models.CharField(max_length=200, unique=True)  # Celery's hostname, "jobs@host"
    queues = models.JSONField(default=list, blank=True)
    pid = models.PositiveIntegerField(default=0)
    pool = models.CharField(max_length=40, blank=True)
    concurrency = models.PositiveIntegerField(default=0)
    started_at = models.DateTimeField()
    seen_at = models.DateTimeField(db_index=True)
    stopped_at = models.DateTimeField(null=True, blank=True)  # a clean shutdown

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name
