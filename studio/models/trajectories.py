from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q


class Domain(models.TextChoices):
    MCP = "mcp", "MCP tool calls"
    SEARCH = "search", "Search"
    TERMINAL = "terminal", "Terminal"
    SWE = "swe", "Software engineering"
    ANDROID = "android", "Android"
    WEB = "web", "Web"
    OS = "os", "Operating system"


DOMAINS = [d.value for d in Domain]


class Tag(models.Model):
    project = models.ForeignKey("studio.Project", on_delete=models.CASCADE, related_name="tags")
    name = models.CharField(max_length=100)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["project", "name"], name="unique_tag_per_project")
        ]

    def __str__(self) -> str:
        return self.name


class Trajectory(models.Model):
    project = models.ForeignKey(
        "studio.Project", on_delete=models.CASCADE, related_name="trajectories"
    )
    domain = models.CharField(max_length=20, choices=Domain.choices, db_index=True)
    title = models.CharField(max_length=500)
    task_instruction = models.TextField(blank=True)
    # The world-model system prompt: for AgentWorldBench imports the file's `system_str`,
    # used unchanged when simulating.
    system_prompt = models.TextField(blank=True)
    # Tool definitions (OpenAI/MCP function schemas) the agent had, as a JSON list.
    tools = models.JSONField(default=list, blank=True)
    source_format = models.CharField(max_length=40, db_index=True)
    source_file = models.CharField(max_length=500, blank=True)
    # Content hash of the imported record: importing the same file twice adds nothing.
    source_key = models.CharField(max_length=64)
    metadata = models.JSONField(default=dict, blank=True)
    tags = models.ManyToManyField(Tag, blank=True, related_name="trajectories")
    step_count = models.PositiveIntegerField(default=0)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["project", "source_key"], name="unique_source_per_project"
            )
        ]
        indexes = [models.Index(fields=["project", "domain"])]

    def __str__(self) -> str:
        return self.title

    @property
    def root_branch(self) -> Branch:
        return self.branches.get(parent__isnull=True)


class BranchOrigin(models.TextChoices):
    RECORDED = "recorded", "Recorded"
    SIMULATED = "simulated", "Simulated"
    EDITED = "edited", "Edited"
    # played in the playground: a person typed its actions
    PLAYED = "played", "Played by a person"


class BranchStatus(models.TextChoices):
    READY = "ready", "Ready"
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"


class Branch(models.Model):
    """A node of the trajectory's tree. The root holds the recorded steps; a child inherits the
    first `fork_index` steps of its parent (steps 0..fork_index-1) and owns its steps from
    index `fork_index` on."""

    trajectory = models.ForeignKey(Trajectory, on_delete=models.CASCADE, related_name="branches")
    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.CASCADE, related_name="children"
    )
    fork_index = models.PositiveIntegerField(default=0)
    # [[branch_id, start_index], ...] from the root down to this branch: lets one query read
    # the whole step list whatever the depth of the tree.
    lineage = models.JSONField(default=list, blank=True)
    name = models.CharField(max_length=200)
    origin = models.CharField(
        max_length=20, choices=BranchOrigin.choices, default=BranchOrigin.RECORDED
    )
    status = models.CharField(
        max_length=20, choices=BranchStatus.choices, default=BranchStatus.READY
    )
    starred = models.BooleanField(default=False)
    job = models.ForeignKey(
        "studio.SimulationJob",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="branches",
    )
    # Position among the job's N samples (0-based); its live progress is on the job row.
    sample_index = models.PositiveIntegerField(default=0)
    error = models.TextField(blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]
        verbose_name_plural = "branches"

    def __str__(self) -> str:
        return self.name

    def save(self, *args, **kwargs):
        if self.parent_id is None:
            self.fork_index = 0
        super().save(*args, **kwargs)
        if not self.lineage:
            self.lineage = self.compute_lineage()
            Branch.objects.filter(pk=self.pk).update(lineage=self.lineage)

    def compute_lineage(self) -> list[list[int]]:
        if self.parent_id is None:
            return [[self.pk, 0]]
        parent = self.parent
        assert parent is not None
        return [*(parent.lineage or parent.compute_lineage()), [self.pk, self.fork_index]]

    def steps_q(self) -> Q:
        """A filter matching exactly the steps visible on this branch (inherited and own)."""
        lineage = self.lineage or self.compute_lineage()
        q = Q()
        for i, (branch_id, start) in enumerate(lineage):
            cond = Q(branch_id=branch_id, index__gte=start)
            if i + 1 < len(lineage):
                cond &= Q(index__lt=lineage[i + 1][1])
            q |= cond
        return q

    def all_steps(self) -> models.QuerySet[Step]:
        return Step.objects.filter(self.steps_q()).order_by("index")

    @property
    def is_root(self) -> bool:
        return self.parent_id is None


class Provenance(models.TextChoices):
    """Where a step's action came from. Whether its observation was recorded, simulated or
    perturbed is `Step.observation_source`."""

    RECORDED = "recorded", "Recorded"
    REPLAYED = "replayed", "Recorded action replayed"
    EDITED = "edited", "Edited action"
    AGENT = "agent", "Agent-proposed action"
    TYPED = "typed", "Action typed by a person"


class ObservationSource(models.TextChoices):
    RECORDED = "recorded", "Recorded observation"
    SIMULATED = "simulated", "Simulated observation"
    PERTURBED = "perturbed", "Perturbed observation"
    NONE = "none", "No observation (final answer)"


class ParseStatus(models.TextChoices):
    NONE = "", "Not simulated"
    WELL_FORMED = "well_formed", "Well-formed"
    NO_TAG = "no_tag", "No <predicted_observation> tag"
    UNCLOSED = "unclosed", "Unclosed <predicted_observation> tag"


class Step(models.Model):
    branch = models.ForeignKey(Branch, on_delete=models.CASCADE, related_name="steps")
    index = models.PositiveIntegerField()  # 0-based position in the trajectory
    action = models.TextField(blank=True)
    observation = models.TextField(blank=True)
    state = models.TextField(blank=True)  # the "current state" shown to the world model
    thinking = models.TextField(blank=True)  # the agent's reasoning or the world model's
    raw_output = models.TextField(blank=True)  # raw world-model text of a simulated step
    # AgentWorldBench turn prompt as in the file, so rebuilt prompts are byte-identical.
    raw_prompt = models.TextField(blank=True)
    provenance = models.CharField(
        max_length=20, choices=Provenance.choices, default=Provenance.RECORDED
    )
    observation_source = models.CharField(
        max_length=20, choices=ObservationSource.choices, default=ObservationSource.RECORDED
    )
    parse_status = models.CharField(
        max_length=20, choices=ParseStatus.choices, default=ParseStatus.NONE, blank=True
    )
    # Per-step details: tool name, call id, agent thought, rating, etc.
    meta = models.JSONField(default=dict, blank=True)
    # {"duration_s": ..., "prefill_s": ..., "decode_s": ..., "tokens_in": ..., "tokens_out": ...}
    timings = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["branch_id", "index"]
        constraints = [
            models.UniqueConstraint(fields=["branch", "index"], name="unique_step_index")
        ]

    def __str__(self) -> str:
        return f"step {self.index} of branch {self.branch_id}"

    @property
    def provenance_label(self) -> str:
        """What is recorded and what is not, in words: "recorded", "recorded action replayed,
        simulated observation", "edited action, perturbed observation", ..."""
        if self.provenance == Provenance.RECORDED:
            return "recorded"
        action = self.get_provenance_display().lower()
        return f"{action}, {self.get_observation_source_display().lower()}"
