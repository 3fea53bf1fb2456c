from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

from inference.simulation.limits import BACKENDS

# How long the Models page waits for a gpu worker to answer a test of an in-process model.
PROBE_WAIT_S = 120


class EndpointRole(models.TextChoices):
    WORLD = "world", "World model"
    AGENT = "agent", "Agent model"
    JUDGE = "judge", "Judge model"
    EMBEDDING = "embedding", "Embedding model"


# Kinds are the world-model backends (inference.simulation.limits.BACKENDS, defined once).
EndpointKind = models.TextChoices(  # type: ignore[call-overload]
    "EndpointKind", [(name.upper(), (name, label)) for name, label in BACKENDS.items()]
)


class ModelEndpoint(models.Model):
    """A model the project can run: a world model, an agent model (rollouts), a judge, or an
    embeddings model (behaviour search ranks and clusters by meaning with it).
    Admins register them; every form that runs a model picks one. The API key is stored
    encrypted (`studio.secrets`) or named as an environment variable of the workers, and
    never shown again."""

    project = models.ForeignKey(
        "studio.Project", on_delete=models.CASCADE, related_name="endpoints"
    )
    name = models.CharField(max_length=100)
    role = models.CharField(max_length=10, choices=EndpointRole.choices)
    kind = models.CharField(max_length=20, choices=EndpointKind.choices)
    base_url = models.CharField(max_length=500, blank=True)
    model = models.CharField(max_length=300, blank=True)  # served model name, or a path/hub id
    api_key_encrypted = models.TextField(blank=True)
    api_key_env = models.CharField(max_length=100, blank=True)  # or: read from this variable
    # Defaults of the forms that run it (blank: the studio's).
    temperature = models.FloatField(null=True, blank=True)
    top_p = models.FloatField(null=True, blank=True)
    max_tokens = models.PositiveIntegerField(null=True, blank=True)
    context_length = models.PositiveIntegerField(null=True, blank=True)
    supports_n = models.BooleanField(
        default=True, help_text="The server samples N choices of one prompt in one request."
    )
    # What the provider charges, in US dollars per million tokens (blank: not known, and
    # pages say "no price set" rather than a cost of 0).
    price_in_per_mtok = models.FloatField(null=True, blank=True)
    price_out_per_mtok = models.FloatField(null=True, blank=True)
    is_default = models.BooleanField(default=False)  # the first choice for its role
    seeded_from_env = models.BooleanField(default=False)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(auto_now_add=True)
    # The last "Test": when, whether it answered, how fast, or the exact error.
    tested_at = models.DateTimeField(null=True, blank=True)
    test_ok = models.BooleanField(null=True, blank=True)
    test_latency_ms = models.FloatField(null=True, blank=True)
    test_detail = models.TextField(blank=True)
    # A test job is queued or running; `tested_at` is then when it was asked for.
    test_pending = models.BooleanField(default=False)

    class Meta:
        ordering = ["role", "-is_default", "name"]
        constraints = [
            models.UniqueConstraint(fields=["project", "name"], name="unique_endpoint_name")
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def key_status(self) -> str:
        if self.api_key_encrypted:
            return "stored encrypted"
        if self.api_key_env:
            return f"from ${self.api_key_env}"
        return "none"

    @property
    def test_unanswered(self) -> bool:
        """A test asked of a gpu worker that none has answered for PROBE_WAIT_S: the page
        stops polling and says so (a worker that comes up later still answers it)."""
        if not self.test_pending or self.tested_at is None:
            return False
        return (timezone.now() - self.tested_at).total_seconds() > PROBE_WAIT_S

    @property
    def is_neural(self) -> bool:
        return self.kind != "retrieval"
