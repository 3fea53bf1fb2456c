"""World-model evaluations in the studio: an AgentWorldBench run over the project's recorded
trajectories (every recorded step a sample, its recorded observation the ground truth;
trajectories imported from AgentWorldBench files keep their prompts verbatim), a world model
and a judge. One row per sample, written as soon as it is predicted and again once judged, so
a worker that dies loses no finished sample and Resume goes on where it stopped."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from studio.models.jobs import JobBase


class EvaluationRun(JobBase):
    project = models.ForeignKey(
        "studio.Project", on_delete=models.CASCADE, related_name="evaluation_runs"
    )
    requester = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    name = models.CharField(max_length=200)
    # The models as they were when the run was made (their endpoints may change or go).
    world_endpoint = models.ForeignKey(
        "studio.ModelEndpoint", null=True, on_delete=models.SET_NULL, related_name="+"
    )
    world_kind = models.CharField(max_length=20)
    world_model = models.CharField(max_length=300, blank=True)
    world_base_url = models.CharField(max_length=500, blank=True)
    judge_endpoint = models.ForeignKey(
        "studio.ModelEndpoint", null=True, on_delete=models.SET_NULL, related_name="+"
    )
    judge_model = models.CharField(max_length=300)
    judge_base_url = models.CharField(max_length=500)
    # temperature, max_tokens, top_p (world model); judge_temperature, judge_max_tokens
    params = models.JSONField(default=dict, blank=True)
    source = models.CharField(max_length=20, default="recorded")  # recorded | benchmark | heldout
    # A run made from a fine-tune's "Evaluate" (base or fine-tuned model): the leaderboard
    # sets such runs side by side; source "heldout" reads only that fine-tune's held-out
    # trajectories.
    finetune = models.ForeignKey(
        "studio.FineTuneRun", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    domains = models.JSONField(default=list, blank=True)  # empty: every domain
    limit_per_domain = models.PositiveIntegerField(default=50)
    # the sample set is fixed by the source (and files picked), the domains, the limit and
    # this seed: two runs with the same four score the same samples
    sample_seed = models.PositiveBigIntegerField(default=0)
    # a digest of the keys of the samples drawn (set once sampled): runs with the same digest
    # were scored on the same samples
    sample_set = models.CharField(max_length=64, blank=True)
    concurrency = models.PositiveIntegerField(default=8)
    queue = models.CharField(max_length=50, default="default")
    cancel_requested = models.BooleanField(default=False)
    phase = models.CharField(max_length=20, default="queued")  # sampling, infer, judge, done
    progress = models.FloatField(default=0.0)
    samples_total = models.PositiveIntegerField(default=0)
    tokens_in = models.PositiveBigIntegerField(default=0)  # the world model's
    tokens_out = models.PositiveBigIntegerField(default=0)
    judge_tokens_in = models.PositiveBigIntegerField(default=0)
    judge_tokens_out = models.PositiveBigIntegerField(default=0)
    infer_s = models.FloatField(default=0.0)  # model time, summed over the samples
    judge_s = models.FloatField(default=0.0)
    # the figures (inference.scoring.score_rows) once it ended
    results = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"evaluation {self.pk} {self.name!r} ({self.status})"


class SampleStage(models.TextChoices):
    PENDING = "pending", "Waiting"
    PREDICTED = "predicted", "Predicted"
    INFER_FAILED = "infer_failed", "Generation failed"
    JUDGED = "judged", "Judged"
    JUDGE_FAILED = "judge_failed", "Judgement failed"


class EvaluationSample(models.Model):
    run = models.ForeignKey(EvaluationRun, on_delete=models.CASCADE, related_name="samples")
    domain = models.CharField(max_length=20)
    # which recorded step it is (the row the models see is rebuilt from the trajectory)
    trajectory = models.ForeignKey(
        "studio.Trajectory", null=True, on_delete=models.SET_NULL, related_name="+"
    )
    step_index = models.PositiveIntegerField()
    key = models.CharField(max_length=100)  # "<trajectory id>:<step index>", across runs
    stage = models.CharField(
        max_length=20, choices=SampleStage.choices, default=SampleStage.PENDING
    )
    gen = models.TextField(blank=True)
    reasoning = models.TextField(blank=True)
    predicted_observation = models.TextField(blank=True)
    error = models.TextField(blank=True)
    tokens_in = models.PositiveIntegerField(default=0)
    tokens_out = models.PositiveIntegerField(default=0)
    infer_s = models.FloatField(default=0.0)
    # the judge's fields, as the reference writes them: the five dimensions, total_score,
    # failed, strengths, weaknesses, judge_raw_output
    judgement = models.JSONField(default=dict, blank=True)
    total_score = models.FloatField(null=True, blank=True)  # 1-5; None: not judged

    class Meta:
        ordering = ["domain", "trajectory_id", "step_index"]
        constraints = [models.UniqueConstraint(fields=["run", "key"], name="unique_sample_per_run")]
        indexes = [models.Index(fields=["run", "stage"]), models.Index(fields=["run", "domain"])]

    def __str__(self) -> str:
        return f"sample {self.key} of evaluation {self.run_id} ({self.stage})"
