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
    # the queue it was asked in (None: annotated from the step's own page). Each queue asks
    # anew, so an annotator has one annotation per step outside queues and one per queue.
    queue = models.ForeignKey(
        "studio.AnnotationQueue",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="annotations",
    )
    # answers to the queue's custom questions: question key -> int | str | list[str]
    answers = models.JSONField(default=dict, blank=True)
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
            models.UniqueConstraint(
                fields=["step", "author"],
                condition=models.Q(queue__isnull=True),
                name="one_annotation_per_author",
            ),
            models.UniqueConstraint(
                fields=["step", "author", "queue"],
                condition=models.Q(queue__isnull=False),
                name="one_annotation_per_author_and_queue",
            ),
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


class AnnotationQueue(models.Model):
    """Steps chosen by a filter, to be annotated by `annotators_per_item` people each;
    blind: an annotator sees no one else's annotation of an item before submitting theirs."""

    project = models.ForeignKey(
        "studio.Project", on_delete=models.CASCADE, related_name="annotation_queues"
    )
    name = models.CharField(max_length=200)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    annotators_per_item = models.PositiveSmallIntegerField(default=1)
    blind = models.BooleanField(default=False)
    claim_minutes = models.PositiveIntegerField(default=30)
    description = models.TextField(blank=True)  # the filter it was made from, in words
    # what annotators read before they start (Markdown, rendered without raw HTML)
    guidelines = models.TextField(blank=True)
    # custom questions beside the five dimensions, in order: each
    # {"key", "label", "kind": "scale"|"single"|"multi"|"text", "options": [...], "min", "max",
    #  "required"} (studio.services.questions validates them)
    questions = models.JSONField(default=list, blank=True)
    # who works it (none: every member of the project)
    assignees = models.ManyToManyField(settings.AUTH_USER_MODEL, blank=True, related_name="+")

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"queue {self.name!r}"


class QueueItem(models.Model):
    queue = models.ForeignKey(AnnotationQueue, on_delete=models.CASCADE, related_name="items")
    step = models.ForeignKey("studio.Step", on_delete=models.CASCADE, related_name="+")
    position = models.PositiveIntegerField()

    class Meta:
        ordering = ["queue_id", "position"]
        constraints = [models.UniqueConstraint(fields=["queue", "step"], name="unique_queue_step")]

    def __str__(self) -> str:
        return f"item {self.position} of queue {self.queue_id}"


class QueueClaim(models.Model):
    """One annotator's slot on an item: held until `expires_at`, then free again unless done."""

    item = models.ForeignKey(QueueItem, on_delete=models.CASCADE, related_name="claims")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    claimed_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    done_at = models.DateTimeField(null=True, blank=True)
    # skipped: this annotator gave the slot back and is not offered the item again
    skipped_at = models.DateTimeField(null=True, blank=True)
    skip_reason = models.TextField(blank=True)
    # flagged for the queue's lead (a question, a broken step), with or without a skip
    flagged_at = models.DateTimeField(null=True, blank=True)
    flag_note = models.TextField(blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["item", "user"], name="one_claim_per_annotator")
        ]

    def __str__(self) -> str:
        return f"claim of item {self.item_id} by {self.user_id}"


class Adjudication(models.Model):
    """The final word on a queue item where annotators disagree: once given, it stands."""

    item = models.OneToOneField(QueueItem, on_delete=models.CASCADE, related_name="adjudication")
    adjudicator = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    verdict = models.CharField(max_length=20, choices=Verdict.choices)
    ratings = models.JSONField(default=dict, blank=True)
    note = models.TextField(blank=True)
    decided_at = models.DateTimeField(auto_now_add=True)
    # the correction that stands (blank: none): an annotator's, picked, or the adjudicator's
    # own; `correction_by` is whose it is
    corrected_observation = models.TextField(blank=True)
    correction_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    def __str__(self) -> str:
        return f"adjudication of item {self.item_id}"
