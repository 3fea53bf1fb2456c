"""People's judgements of steps: each annotator's ratings of a step on AgentWorldBench's five
dimensions, a verdict, a corrected observation, tags and a comment. One annotation per
annotator and step, edited in place, with every saved state kept as a version (its history)."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class Verdict(models.TextChoices):
    ACCEPT = "accept", "Accept"
    REJECT = "reject", "Reject"
    NEEDS_FIX = "needs_fix", "Needs fix"


class StepAnnotation(models.Model):
    step = models.ForeignKey("studio.Step", on_delete=models.CASCADE, related_name="annotations")
    author = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="step_annotations"
    )
    ratings = models.JSONField(default=dict, blank=True)  # dimension -> 1..5
    verdict = models.CharField(max_length=20, choices=Verdict.choices, blank=True)
    # the observation as it should have been (blank: no correction)
    corrected_observation = models.TextField(blank=True)
    tags = models.JSONField(default=list, blank=True)
    comment = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["created_at"]
        constraints = [
            models.UniqueConstraint(fields=["step", "author"], name="one_annotation_per_author")
        ]

    def __str__(self) -> str:
        return f"annotation of step {self.step_id} by {self.author_id}"


class AnnotationVersion(models.Model):
    """A saved state of an annotation (the first save, then every change)."""

    annotation = models.ForeignKey(
        StepAnnotation, on_delete=models.CASCADE, related_name="versions"
    )
    number = models.PositiveIntegerField()
    saved_at = models.DateTimeField(auto_now_add=True)
    state = models.JSONField(default=dict)

    class Meta:
        ordering = ["annotation_id", "number"]
        constraints = [
            models.UniqueConstraint(
                fields=["annotation", "number"], name="unique_annotation_version"
            )
        ]

    def __str__(self) -> str:
        return f"version {self.number} of annotation {self.annotation_id}"
