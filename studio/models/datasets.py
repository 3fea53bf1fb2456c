"""Training data: a dataset is a named selection of steps, kept in versions. A version never
changes once made (a new selection is a new version); each item keeps the observation it was
made with when an annotator had corrected it, so an export is the same whatever happens to the
annotations later."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from studio.models.jobs import JobBase


class Dataset(models.Model):
    project = models.ForeignKey("studio.Project", on_delete=models.CASCADE, related_name="datasets")
    name = models.CharField(max_length=200)
    description = models.TextField(blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["project", "name"], name="unique_dataset_name")
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def latest(self) -> DatasetVersion | None:
        return self.versions.order_by("-number").first()


class DatasetVersion(models.Model):
    dataset = models.ForeignKey(Dataset, on_delete=models.CASCADE, related_name="versions")
    number = models.PositiveIntegerField()
    source = models.CharField(max_length=500)  # how its steps were chosen, in words
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    item_count = models.PositiveIntegerField(default=0)
    corrected_count = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["dataset_id", "-number"]
        constraints = [
            models.UniqueConstraint(fields=["dataset", "number"], name="unique_dataset_version")
        ]

    def __str__(self) -> str:
        return f"{self.dataset.name} v{self.number}"


class DatasetItem(models.Model):
    version = models.ForeignKey(DatasetVersion, on_delete=models.CASCADE, related_name="items")
    position = models.PositiveIntegerField()
    # None once the step was deleted (its branch went): the export leaves it out and says so
    step = models.ForeignKey("studio.Step", null=True, on_delete=models.SET_NULL, related_name="+")
    # the corrected observation it was chosen with (blank: the step's own observation)
    observation = models.TextField(blank=True)
    corrected = models.BooleanField(default=False)
    # whose correction `observation` is (an annotator's, or the adjudicator's they chose)
    correction_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["version_id", "position"]
        constraints = [
            models.UniqueConstraint(fields=["version", "position"], name="unique_item_position")
        ]
        # an export looks up the corrections among the steps of the branches it reads
        indexes = [
            models.Index(
                fields=["step"], condition=models.Q(corrected=True), name="corrected_items"
            )
        ]

    def __str__(self) -> str:
        return f"item {self.position} of {self.version_id}"


class ExportJob(JobBase):
    """A version written to a file by a worker, with live progress; the page polls this row
    and offers the file once it is complete."""

    version = models.ForeignKey(DatasetVersion, on_delete=models.CASCADE, related_name="exports")
    requester = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    format = models.CharField(max_length=40)
    options = models.JSONField(default=dict, blank=True)  # ExportOptions, as a dict
    queue = models.CharField(max_length=50, default="default")
    cancel_requested = models.BooleanField(default=False)
    phase = models.CharField(max_length=20, default="queued")
    progress = models.FloatField(default=0.0)
    items_done = models.PositiveIntegerField(default=0)
    rows = models.PositiveIntegerField(default=0)
    deleted = models.PositiveIntegerField(default=0)  # items whose step was gone
    no_row = models.PositiveIntegerField(default=0)  # items the format has no row for
    file_name = models.CharField(max_length=300, blank=True)  # the download's name
    stored_path = models.CharField(max_length=1000, blank=True)  # set once complete
    size_bytes = models.BigIntegerField(default=0)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"export {self.pk} of {self.version_id} as {self.format} ({self.status})"
