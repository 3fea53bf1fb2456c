"""The world-model arena: two or more world models run on the same fork with the same seeds
(one `SimulationJob` per model, `SimulationJob.arena` points here), the judge scores every
future on its own (a `JudgeJob` of target "arena", `StepJudgement` rows) and pairwise: for
each seed index, which of two models' futures is more faithful (`ArenaPair`)."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from studio.models.jobs import JobBase


class ArenaRun(JobBase):
    project = models.ForeignKey("studio.Project", on_delete=models.CASCADE, related_name="+")
    requester = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    trajectory = models.ForeignKey(
        "studio.Trajectory", on_delete=models.CASCADE, related_name="arena_runs"
    )
    branch = models.ForeignKey("studio.Branch", on_delete=models.CASCADE, related_name="+")
    fork_index = models.PositiveIntegerField()
    action = models.TextField(blank=True)  # the action every model answers, as submitted
    edited = models.BooleanField(default=False)  # not the recorded action at the fork
    n = models.PositiveIntegerField(default=1)  # futures per model
    seed = models.BigIntegerField()  # the same seeds for every model: seed + sample index
    params = models.JSONField(default=dict, blank=True)  # temperature, top_p, max_tokens
    # the judge as it was when the arena was made (its endpoint may change or go)
    judge_endpoint = models.ForeignKey(
        "studio.ModelEndpoint", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    judge_model = models.CharField(max_length=300, blank=True)
    judge_base_url = models.CharField(max_length=500, blank=True)
    judge_params = models.JSONField(default=dict, blank=True)
    # the pointwise scores of every future
    judge_job = models.ForeignKey(
        "studio.JudgeJob", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    queue = models.CharField(max_length=50, default="default")
    cancel_requested = models.BooleanField(default=False)
    # queued, simulating, judging, comparing, done, cancelled, failed
    phase = models.CharField(max_length=20, default="queued")
    progress = models.FloatField(default=0.0)
    pairs_total = models.PositiveIntegerField(default=0)
    pairs_judged = models.PositiveIntegerField(default=0)
    pairs_failed = models.PositiveIntegerField(default=0)
    description = models.CharField(max_length=500, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"arena {self.pk} at step {self.fork_index} of {self.trajectory_id} ({self.status})"


class PairWinner(models.TextChoices):
    A = "a", "First model"
    B = "b", "Second model"
    TIE = "tie", "Tie"
    NONE = "", "Not judged"


class ArenaPair(models.Model):
    """One pairwise judgement: the futures of two models with the same seed index at the
    arena's fork, which is more faithful. The judge sees them in `shown_first` order (it
    alternates, so that a judge that prefers the first answer favours no model)."""

    arena = models.ForeignKey(ArenaRun, on_delete=models.CASCADE, related_name="pairs")
    job_a = models.ForeignKey("studio.SimulationJob", on_delete=models.CASCADE, related_name="+")
    job_b = models.ForeignKey("studio.SimulationJob", on_delete=models.CASCADE, related_name="+")
    step_a = models.ForeignKey("studio.Step", on_delete=models.CASCADE, related_name="+")
    step_b = models.ForeignKey("studio.Step", on_delete=models.CASCADE, related_name="+")
    sample_index = models.PositiveIntegerField(default=0)
    shown_first = models.CharField(max_length=1, default="a")  # "a" or "b"
    # the recorded step used as the reference (None: judged without one)
    reference = models.ForeignKey(
        "studio.Step", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    winner = models.CharField(max_length=3, choices=PairWinner.choices, blank=True)
    ok = models.BooleanField(default=False)
    reason = models.TextField(blank=True)
    raw = models.TextField(blank=True)
    error = models.TextField(blank=True)
    judge_model = models.CharField(max_length=300, blank=True)
    tokens_in = models.PositiveIntegerField(default=0)
    tokens_out = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["arena_id", "sample_index", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["arena", "step_a", "step_b"], name="one_judgement_per_arena_pair"
            )
        ]

    def __str__(self) -> str:
        return f"pair {self.step_a_id} vs {self.step_b_id} of arena {self.arena_id}"
