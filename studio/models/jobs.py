from __future__ import annotations

from django.conf import settings
from django.db import models

from inference.simulation.limits import MODES


class JobStatus(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"


FINISHED_STATUSES = (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED)


class JobBase(models.Model):
    status = models.CharField(
        max_length=20, choices=JobStatus.choices, default=JobStatus.QUEUED, db_index=True
    )
    error = models.TextField(blank=True)
    attempts = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    # The broker message last sent for this job (the sweeper sends it again if the broker
    # lost it), and the one whose task claimed it. A job runs once: any message for a job
    # that already runs is ignored.
    message_id = models.CharField(max_length=64, blank=True)
    claimed_by = models.CharField(max_length=64, blank=True)
    dispatched_at = models.DateTimeField(null=True, blank=True)
    # The Celery worker ("jobs@host") whose task claimed it: its heartbeat row says within
    # seconds when that worker stopped (`studio.services.workers`).
    worker = models.CharField(max_length=200, blank=True)

    class Meta:
        abstract = True

    @property
    def is_finished(self) -> bool:
        return self.status in FINISHED_STATUSES


class ImportJob(JobBase):
    """An uploaded file imported by a worker; the page polls this row for progress."""

    project = models.ForeignKey(
        "studio.Project", on_delete=models.CASCADE, related_name="import_jobs"
    )
    requester = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    original_name = models.CharField(max_length=500)
    stored_path = models.CharField(max_length=1000)
    size_bytes = models.BigIntegerField(default=0)
    format = models.CharField(max_length=40, blank=True)  # forced format, or blank to detect
    domain = models.CharField(max_length=20, blank=True)  # forced domain, or blank
    detected_format = models.CharField(max_length=40, blank=True)
    # 0..1: share of records parsed, then written
    progress = models.FloatField(default=0.0)
    trajectories_created = models.PositiveIntegerField(default=0)
    steps_created = models.PositiveIntegerField(default=0)
    trajectories_skipped = models.PositiveIntegerField(default=0)
    # Cancel: a queued import ends at once, a running one rolls back at its next batch.
    cancel_requested = models.BooleanField(default=False)
    phase = models.CharField(max_length=20, default="queued")
    # When the retention sweep removed the uploaded file (`studio.jobs.file_retention`):
    # after the import succeeded, or STUDIO_UPLOAD_RETENTION_DAYS after it stopped. Retry
    # needs the file, so it is offered only while this is empty.
    upload_removed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"import of {self.original_name} ({self.status})"


# The modes and their labels are defined once, in inference.simulation.limits.
SimulationMode = models.TextChoices(  # type: ignore[call-overload]
    "SimulationMode", [(name.upper(), (name, label)) for name, label in MODES.items()]
)


class SimulationJob(JobBase):
    """One request to the world model: N futures of `branch` forked at step `fork_index`.

    The job creates N sibling branches up front (Branch.job points here); the worker fills
    their steps. Timings and token counts add up over all samples."""

    requester = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    trajectory = models.ForeignKey(
        "studio.Trajectory", on_delete=models.CASCADE, related_name="simulation_jobs"
    )
    branch = models.ForeignKey(
        "studio.Branch", on_delete=models.CASCADE, related_name="simulation_jobs_from"
    )
    fork_index = models.PositiveIntegerField()  # index of the step whose observation is simulated
    action = models.TextField(blank=True)  # the (possibly edited) action at fork_index
    mode = models.CharField(
        max_length=20, choices=SimulationMode.choices, default=SimulationMode.NEXT
    )
    n = models.PositiveIntegerField(default=1)
    max_steps = models.PositiveIntegerField(default=1)  # rollout: agent steps at most
    # temperature, top_p, max_tokens, seed
    params = models.JSONField(default=dict, blank=True)
    # The world model that ran, as it was then (the endpoint may change or go later).
    world_endpoint = models.ForeignKey(
        "studio.ModelEndpoint", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    backend = models.CharField(max_length=20)  # retrieval | openai | hf
    # The endpoint's name when the job was made (blank: none, e.g. the retrieval baseline
    # or a request by URL): the job says which model it ran after the endpoint is renamed
    # or deleted. `studio.services.model_identity` reads these.
    world_name = models.CharField(max_length=100, blank=True)
    model = models.CharField(max_length=300, blank=True)
    base_url = models.CharField(max_length=500, blank=True)
    # The agent model of a rollout (blank for the other modes).
    agent_endpoint = models.ForeignKey(
        "studio.ModelEndpoint", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    agent_name = models.CharField(max_length=100, blank=True)
    agent_model = models.CharField(max_length=300, blank=True)
    agent_base_url = models.CharField(max_length=500, blank=True)
    queue = models.CharField(max_length=50, default="default")
    # The perturbation rules it ran (`inference.perturbations.Rule.as_dict`), copied from
    # the library when submitted; their draws' seed is params["perturbation_seed"].
    perturbations = models.JSONField(default=list, blank=True)
    # The fictional world it ran in (its system prompt and tools replace the trajectory's);
    # params["world"] keeps its name and version number should the version go.
    world_version = models.ForeignKey(
        "studio.WorldVersion", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # The job's one future is written into `branch` itself, after its last step, instead of
    # a new child branch: an episode served to an outside agent grows its own trajectory.
    appends = models.BooleanField(default=False)
    # The arena this job is one model of (`studio.models.arena`).
    arena = models.ForeignKey(
        "studio.ArenaRun",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="simulations",
    )
    cancel_requested = models.BooleanField(default=False)
    # 0..1 over all samples, and a phase: queued, prefill, decoding, agent, saving; a step of
    # an episode: answering (its answer is asked whole)
    progress = models.FloatField(default=0.0)
    phase = models.CharField(max_length=20, default="queued")
    # While it runs: where each future stands, by sample index ("0", "1", ...): phase,
    # step, tokens_out, tokens_per_s and the tail of the text so far. Written by the job's
    # monitor thread with the heartbeat, one row write per tick; emptied when it ends.
    live = models.JSONField(default=dict, blank=True)
    queue_wait_s = models.FloatField(null=True, blank=True)
    prefill_s = models.FloatField(null=True, blank=True)
    decode_s = models.FloatField(null=True, blank=True)
    tokens_in = models.PositiveIntegerField(default=0)
    tokens_out = models.PositiveIntegerField(default=0)
    tokens_per_s = models.FloatField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            # An episode answers one step at a time: a second step sent before the first was
            # answered is refused by the database itself, with no lock to take per step.
            models.UniqueConstraint(
                fields=["branch"],
                condition=models.Q(appends=True, status__in=["queued", "running"]),
                name="one_open_step_per_episode",
            )
        ]

    def __str__(self) -> str:
        return f"simulation {self.pk} of {self.trajectory_id} at step {self.fork_index} ({self.status})"

    @property
    def ran_s(self) -> float | None:
        """Seconds from its claim to its end (None: it never ran, or runs still)."""
        if self.started_at is None or self.finished_at is None:
            return None
        return (self.finished_at - self.started_at).total_seconds()
