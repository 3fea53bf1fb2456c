"""The AgentWorldBench judge on the studio's own simulated steps: a job scores the steps of a
branch, of a fork's futures or of a queue, one `StepJudgement` per step. Where the recorded
trajectory has the same action at the same step, its observation is the reference (how close
the simulation is to reality, all five dimensions); otherwise the judge scores realism and
consistency only."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from studio.models.jobs import JobBase


class JudgeTarget(models.TextChoices):
    BRANCH = "branch", "a branch"
    FORK = "fork", "a fork's futures"
    QUEUE = "queue", "an annotation queue"
    ARENA = "arena", "an arena's futures"
    CAMPAIGN = "campaign", "a campaign's episodes"


class JudgeJob(JobBase):
    project = models.ForeignKey("studio.Project", on_delete=models.CASCADE, related_name="+")
    requester = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    target = models.CharField(max_length=20, choices=JudgeTarget.choices)
    branch = models.ForeignKey(
        "studio.Branch", null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    fork = models.ForeignKey(
        "studio.SimulationJob", null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    annotation_queue = models.ForeignKey(
        "studio.AnnotationQueue", null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    arena = models.ForeignKey(
        "studio.ArenaRun", null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    campaign = models.ForeignKey(
        "studio.Campaign", null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    description = models.CharField(max_length=500)  # what it judges, in words
    # the judge as it was when the job was made (its endpoint may change or go)
    judge_endpoint = models.ForeignKey(
        "studio.ModelEndpoint", null=True, on_delete=models.SET_NULL, related_name="+"
    )
    judge_model = models.CharField(max_length=300)
    judge_base_url = models.CharField(max_length=500)
    params = models.JSONField(default=dict, blank=True)  # temperature, max_tokens
    concurrency = models.PositiveIntegerField(default=8)
    queue = models.CharField(max_length=50, default="default")
    cancel_requested = models.BooleanField(default=False)
    phase = models.CharField(max_length=20, default="queued")  # judging, done, ...
    progress = models.FloatField(default=0.0)
    steps_total = models.PositiveIntegerField(default=0)
    steps_judged = models.PositiveIntegerField(default=0)
    steps_failed = models.PositiveIntegerField(default=0)
    # steps of the target that have nothing to judge (recorded observations, final answers)
    steps_skipped = models.PositiveIntegerField(default=0)
    judge_tokens_in = models.PositiveBigIntegerField(default=0)
    judge_tokens_out = models.PositiveBigIntegerField(default=0)
    judge_s = models.FloatField(default=0.0)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"judge job {self.pk} of {self.description} ({self.status})"


class StepJudgement(models.Model):
    step = models.ForeignKey("studio.Step", on_delete=models.CASCADE, related_name="judgements")
    job = models.ForeignKey(
        JudgeJob, null=True, on_delete=models.SET_NULL, related_name="judgements"
    )
    judge_model = models.CharField(max_length=300)
    # the recorded step whose observation was the reference (None: judged without one)
    reference = models.ForeignKey(
        "studio.Step", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    ok = models.BooleanField(default=True)
    scores = models.JSONField(default=dict, blank=True)  # dimension -> 1..5, those judged
    total_score = models.FloatField(null=True, blank=True)  # their mean; None: failed
    strengths = models.JSONField(default=list, blank=True)
    weaknesses = models.JSONField(default=list, blank=True)
    raw = models.TextField(blank=True)  # the judge's answer
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["job", "step"], name="one_judgement_per_job_step")
        ]
        indexes = [models.Index(fields=["step", "-created_at"])]

    def __str__(self) -> str:
        return f"judgement of step {self.step_id} by {self.judge_model}"

    @property
    def with_reference(self) -> bool:
        return "factuality" in (self.scores or {})
