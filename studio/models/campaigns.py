"""Rollout campaigns: an agent model plays many episodes of a world's tasks (M per task, in
each perturbation arm), answered by a world model, on workers, many at once. The campaign is
one job row (its progress, figures, Cancel and Resume); each episode it plays is a
`CampaignEpisode` slot (task x arm x repeat) pointing at the episode trajectory it made, so
Resume plays only the slots not done and the campaign page's figures are read from the slots."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from studio.models.jobs import JobBase


class CampaignSource(models.TextChoices):
    WORLD = "world", "The world's tasks"
    TYPED = "typed", "Tasks typed in"
    FILE = "file", "Tasks imported from JSONL"
    TRAJECTORIES = "trajectories", "Recorded trajectories' starting states"


class Campaign(JobBase):
    project = models.ForeignKey("studio.Project", on_delete=models.CASCADE, related_name="+")
    requester = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    name = models.CharField(max_length=200)
    # The world and the version its episodes play in (fixed when it was made); blank for a
    # campaign over recorded trajectories' starting states.
    world = models.ForeignKey(
        "studio.World", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    world_version = models.ForeignKey(
        "studio.WorldVersion", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    world_label = models.JSONField(default=dict, blank=True)  # {"id", "name", "version"}
    source = models.CharField(
        max_length=20, choices=CampaignSource.choices, default=CampaignSource.WORLD
    )
    # The tasks as resolved when it was made: [{"id", "instruction", "expected"?,
    # "success_criteria"?, "max_steps"?, "rubric"?, "trajectory"? (a recorded start)}]
    tasks = models.JSONField(default=list, blank=True)
    # The agent model and the world model as they were when it was made.
    agent_endpoint = models.ForeignKey(
        "studio.ModelEndpoint", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    agent_name = models.CharField(max_length=100, blank=True)
    agent_model = models.CharField(max_length=300, blank=True)
    agent_base_url = models.CharField(max_length=500, blank=True)
    world_endpoint = models.ForeignKey(
        "studio.ModelEndpoint", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    world_model_name = models.CharField(max_length=100, blank=True)  # the endpoint's name
    world_model = models.CharField(max_length=300, blank=True)
    world_base_url = models.CharField(max_length=500, blank=True)
    world_kind = models.CharField(max_length=20, blank=True)
    episodes_per_task = models.PositiveIntegerField(default=1)
    max_steps = models.PositiveIntegerField(default=10)
    # The perturbation arms besides "none" (arm 0, always played):
    # [{"name", "rules": [Rule.as_dict(), ...]}], copied from the library when made.
    arms = models.JSONField(default=list, blank=True)
    seed = models.BigIntegerField(default=0)  # slot seeds derive from it (same across arms)
    concurrency = models.PositiveIntegerField(default=4)  # episodes at once
    agent_params = models.JSONField(default=dict, blank=True)  # temperature, max_tokens
    # The campaign's own API token (never shown): its episodes are one token's on the
    # world's page, as a training run's are.
    token = models.ForeignKey(
        "studio.ApiToken", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    queue = models.CharField(max_length=50, default="default")
    cancel_requested = models.BooleanField(default=False)
    # queued, playing, done, cancelled, failed
    phase = models.CharField(max_length=20, default="queued")
    progress = models.FloatField(default=0.0)
    episodes_total = models.PositiveIntegerField(default=0)
    episodes_done = models.PositiveIntegerField(default=0)  # ended (any cause)
    episodes_failed = models.PositiveIntegerField(default=0)  # an error ended them
    agent_tokens_in = models.PositiveBigIntegerField(default=0)
    agent_tokens_out = models.PositiveBigIntegerField(default=0)
    world_tokens_in = models.PositiveBigIntegerField(default=0)
    world_tokens_out = models.PositiveBigIntegerField(default=0)
    # The judge job started from its page (scores its simulated steps)
    judge_job = models.ForeignKey(
        "studio.JudgeJob", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    description = models.CharField(max_length=500, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"campaign {self.pk} {self.name!r} ({self.status})"


class SlotStatus(models.TextChoices):
    PENDING = "pending", "Not played yet"
    RUNNING = "running", "Playing"
    DONE = "done", "Ended"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"


class CampaignEpisode(models.Model):
    """One episode slot of a campaign: task `task_index`, perturbation arm `arm` (0: none),
    repeat `repeat`, played with `seed`. `trajectory` is the episode it played last (a slot
    played again after Cancel or a failure points at its new episode; the old one stays in
    the library as the cancelled or failed episode it is)."""

    campaign = models.ForeignKey(Campaign, on_delete=models.CASCADE, related_name="episodes")
    task_index = models.PositiveIntegerField()
    task_id = models.CharField(max_length=100, blank=True)
    arm = models.PositiveIntegerField(default=0)
    arm_name = models.CharField(max_length=100, default="none")
    repeat = models.PositiveIntegerField(default=0)
    seed = models.BigIntegerField()
    status = models.CharField(
        max_length=20, choices=SlotStatus.choices, default=SlotStatus.PENDING, db_index=True
    )
    attempts = models.PositiveIntegerField(default=0)
    trajectory = models.ForeignKey(
        "studio.Trajectory", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    reward = models.FloatField(null=True, blank=True)  # the episode's return (None: unscored)
    success = models.BooleanField(null=True, blank=True)  # None: the task has no success rule
    end_cause = models.CharField(max_length=30, blank=True)
    steps = models.PositiveIntegerField(default=0)
    error = models.TextField(blank=True)
    agent_tokens_in = models.PositiveIntegerField(default=0)
    agent_tokens_out = models.PositiveIntegerField(default=0)
    world_tokens_in = models.PositiveIntegerField(default=0)
    world_tokens_out = models.PositiveIntegerField(default=0)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["campaign_id", "task_index", "arm", "repeat"]
        constraints = [
            models.UniqueConstraint(
                fields=["campaign", "task_index", "arm", "repeat"], name="one_campaign_slot"
            )
        ]

    def __str__(self) -> str:
        return f"slot {self.task_index}/{self.arm}/{self.repeat} of campaign {self.campaign_id}"
