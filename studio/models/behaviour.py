"""Behaviour search: a job that asks a judge model whether a behaviour described in plain
language shows in each of a set of candidate steps (or whole trajectories) chosen by a
search query, then groups the matches' reasons into clusters the judge names
(`studio.jobs.behaviour`, `inference.behaviour`)."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from studio.models.jobs import JobBase


class BehaviourUnit(models.TextChoices):
    STEPS = "steps", "Steps"
    TRAJECTORIES = "trajectories", "Trajectories"


class BehaviourSearch(JobBase):
    project = models.ForeignKey("studio.Project", on_delete=models.CASCADE, related_name="+")
    requester = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    description = models.CharField(max_length=1000)  # the behaviour, in plain language
    # The candidates: a query in the search box's language ("" = every step of the project).
    query = models.CharField(max_length=1000, blank=True)
    unit = models.CharField(max_length=20, choices=BehaviourUnit.choices, default="steps")
    max_candidates = models.PositiveIntegerField()
    # The judge as it was when the job was made (its endpoint may change or go).
    judge_endpoint = models.ForeignKey(
        "studio.ModelEndpoint", null=True, on_delete=models.SET_NULL, related_name="+"
    )
    judge_name = models.CharField(max_length=100, blank=True)
    judge_model = models.CharField(max_length=300)
    judge_base_url = models.CharField(max_length=500)
    params = models.JSONField(default=dict, blank=True)  # temperature, max_tokens
    # The embeddings model that ranks capped candidates and clusters reasons (blank: none).
    embedding_endpoint = models.ForeignKey(
        "studio.ModelEndpoint", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    embedding_name = models.CharField(max_length=100, blank=True)
    embedding_model = models.CharField(max_length=300, blank=True)
    embedding_base_url = models.CharField(max_length=500, blank=True)
    concurrency = models.PositiveIntegerField(default=8)
    queue = models.CharField(max_length=50, default="default")
    cancel_requested = models.BooleanField(default=False)
    # queued, choosing, labelling, clustering, done, cancelling, cancelled, failed
    phase = models.CharField(max_length=20, default="queued")
    progress = models.FloatField(default=0.0)
    # The candidates, chosen once (a resumed job labels the same ones): step ids; for the
    # trajectory unit, one step of each trajectory, whose branch is the one read (the
    # trajectory's newest matching step, or its first step). None: not chosen yet.
    candidate_ids = models.JSONField(null=True, blank=True)
    # The query matched more candidates than max_candidates (only the first were taken);
    # how they were chosen then: "newest" or "meaning" (closest to the description).
    capped = models.BooleanField(default=False)
    chosen_by = models.CharField(max_length=20, blank=True)
    candidates = models.PositiveIntegerField(default=0)
    labelled = models.PositiveIntegerField(default=0)  # answered by the judge (yes or no)
    matched = models.PositiveIntegerField(default=0)  # of those, yes
    failed = models.PositiveIntegerField(default=0)  # no verdict could be read
    judge_tokens_in = models.PositiveBigIntegerField(default=0)
    judge_tokens_out = models.PositiveBigIntegerField(default=0)
    judge_s = models.FloatField(default=0.0)
    embedding_tokens = models.PositiveBigIntegerField(default=0)
    clustered = models.BooleanField(default=False)  # the matches' clusters are current

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"behaviour search {self.pk}: {self.description[:60]} ({self.status})"


class BehaviourCluster(models.Model):
    """Matches whose reasons are alike, named in a few words by the judge (or, when it
    could not, by the words the reasons use most: `named_by_judge` False)."""

    job = models.ForeignKey(BehaviourSearch, on_delete=models.CASCADE, related_name="clusters")
    name = models.CharField(max_length=120)
    named_by_judge = models.BooleanField(default=True)
    size = models.PositiveIntegerField(default=0)
    order = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["order", "id"]

    def __str__(self) -> str:
        return f"{self.name} ({self.size})"


class BehaviourLabel(models.Model):
    """The judge's verdict on one candidate: a step, or (the trajectory unit) a trajectory
    read along one branch, with the step where the behaviour shows when it named one."""

    job = models.ForeignKey(BehaviourSearch, on_delete=models.CASCADE, related_name="labels")
    trajectory = models.ForeignKey("studio.Trajectory", on_delete=models.CASCADE, related_name="+")
    branch = models.ForeignKey("studio.Branch", on_delete=models.CASCADE, related_name="+")
    step = models.ForeignKey(
        "studio.Step", null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    whole_trajectory = models.BooleanField(default=False)
    ok = models.BooleanField(default=True)  # False: no verdict could be read (see error)
    match = models.BooleanField(null=True)
    confidence = models.FloatField(null=True, blank=True)  # 0..1, None: the judge gave none
    reason = models.CharField(max_length=500, blank=True)
    raw = models.TextField(blank=True)
    error = models.TextField(blank=True)
    cluster = models.ForeignKey(
        BehaviourCluster, null=True, blank=True, on_delete=models.SET_NULL, related_name="labels"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-confidence", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["job", "step"],
                condition=models.Q(whole_trajectory=False),
                name="one_behaviour_label_per_job_step",
            ),
            models.UniqueConstraint(
                fields=["job", "trajectory"],
                condition=models.Q(whole_trajectory=True),
                name="one_behaviour_label_per_job_trajectory",
            ),
        ]
        indexes = [models.Index(fields=["job", "match", "cluster"])]

    def __str__(self) -> str:
        where = (
            f"trajectory {self.trajectory_id}" if self.whole_trajectory else f"step {self.step_id}"
        )
        return f"{where}: {'yes' if self.match else 'no'}"
