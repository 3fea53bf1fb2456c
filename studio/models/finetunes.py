"""Fine-tuning the world model on a dataset version: one job row per run (its settings, its
progress and loss curve, Cancel and Resume from the last checkpoint) and, once it succeeded,
the model it registered (a `ModelEndpoint` of kind `hf` whose model is the adapter folder).

The held-out split is fixed when the run is made: recorded trajectories of the project that
no item of the dataset version comes from, drawn with the run's seed. An evaluation of the
run's models on "held-out" samples reads only those trajectories, so no training step can
leak into it."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from studio.models.jobs import JobBase


class FineTuneMethod(models.TextChoices):
    LORA = "lora", "LoRA adapter"
    FULL = "full", "Full fine-tune"


class FineTuneRun(JobBase):
    project = models.ForeignKey("studio.Project", on_delete=models.CASCADE, related_name="+")
    requester = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    name = models.CharField(max_length=200)
    # The data it trains on, and its names as they were (the dataset may be renamed or go).
    dataset_version = models.ForeignKey(
        "studio.DatasetVersion", null=True, on_delete=models.SET_NULL, related_name="+"
    )
    dataset_name = models.CharField(max_length=200)
    version_number = models.PositiveIntegerField()
    # The base model: a local path (the tiny model's folder, or a checkpoint).
    base_model = models.CharField(max_length=1000)
    # The base as a registered model, for "base vs fine-tuned" evaluations (made or found
    # when the run is made; may be null for a base no endpoint names).
    base_endpoint = models.ForeignKey(
        "studio.ModelEndpoint", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    method = models.CharField(
        max_length=10, choices=FineTuneMethod.choices, default=FineTuneMethod.LORA
    )
    lora_rank = models.PositiveIntegerField(default=8)
    lora_alpha = models.PositiveIntegerField(default=16)
    lora_targets = models.JSONField(default=list, blank=True)  # module names; [] = all-linear
    epochs = models.FloatField(default=1.0)
    learning_rate = models.FloatField(default=2e-4)
    max_length = models.PositiveIntegerField(default=2048)
    seed = models.PositiveBigIntegerField(default=0)
    # Everything the trainer was given (inference.finetune.FineTuneConfig as a dict) and the
    # code it ran with (the studio's version and git commit where known): the lineage. Also
    # "fit" (rows trimmed to max_length / left out, from the trainer) and "resumed_from"
    # (the step of each resume), written by the job.
    settings = models.JSONField(default=dict, blank=True)
    code_version = models.CharField(max_length=100, blank=True)
    # The split fixed at creation: held-out recorded trajectory ids (never trained on) and
    # the ids of the trajectories the training items come from.
    heldout_trajectory_ids = models.JSONField(default=list, blank=True)
    train_trajectory_ids = models.JSONField(default=list, blank=True)
    # Where its checkpoints and result live (under STUDIO_DATA_DIR/finetunes/<id>, or the
    # command's --out).
    output_dir = models.CharField(max_length=1000, blank=True)
    result_dir = models.CharField(max_length=1000, blank=True)  # the adapter (or full model)
    queue = models.CharField(max_length=50, default="gpu")
    cancel_requested = models.BooleanField(default=False)
    # queued, preparing (rows built), training, saving, done; cancelled; not-trainable (its
    # settings or data cannot train: it failed, and Resume would fail the same way)
    phase = models.CharField(max_length=20, default="queued")
    progress = models.FloatField(default=0.0)
    examples = models.PositiveIntegerField(default=0)  # training rows built from the version
    step = models.PositiveIntegerField(default=0)  # optimizer steps done
    total_steps = models.PositiveIntegerField(default=0)
    tokens_seen = models.PositiveBigIntegerField(default=0)  # target + context tokens fed
    train_s = models.FloatField(default=0.0)
    # [[step, loss], ...] as logged, and the learning rate per logged step: the live chart
    loss_history = models.JSONField(default=list, blank=True)
    first_loss = models.FloatField(null=True, blank=True)
    final_loss = models.FloatField(null=True, blank=True)
    resumed_from_step = models.PositiveIntegerField(null=True, blank=True)
    # The model it registered once it succeeded.
    endpoint = models.ForeignKey(
        "studio.ModelEndpoint", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"fine-tune {self.pk} {self.name!r} ({self.status})"
