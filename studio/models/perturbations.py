from __future__ import annotations

from django.conf import settings
from django.db import models

from inference import perturbations as perturbing

PerturbationKind = models.TextChoices(  # type: ignore[call-overload]
    "PerturbationKind", [(k.name.upper(), (k.name, k.label)) for k in perturbing.KINDS.values()]
)
PerturbationMode = models.TextChoices(  # type: ignore[call-overload]
    "PerturbationMode", [(m.upper(), (m, label)) for m, label in perturbing.MODES.items()]
)


class Perturbation(models.Model):
    """A reusable perturbation of the project's library: how the environment deviates (kind
    and parameters, `inference.perturbations`) and how it is applied by default. A job keeps
    a copy of what it ran, so editing or deleting an entry never changes past results."""

    project = models.ForeignKey(
        "studio.Project", on_delete=models.CASCADE, related_name="perturbations"
    )
    name = models.CharField(max_length=100)
    kind = models.CharField(max_length=30, choices=PerturbationKind.choices)
    params = models.JSONField(default=dict, blank=True)
    mode = models.CharField(
        max_length=20, choices=PerturbationMode.choices, default=perturbing.DETERMINISTIC
    )
    description = models.TextField(blank=True)
    domain = models.CharField(max_length=20, blank=True)  # the preset's domain, if any
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["project", "name"], name="one_perturbation_name")
        ]

    def __str__(self) -> str:
        return self.name

    def as_perturbation(self, mode: str | None = None) -> perturbing.Perturbation:
        """The validated perturbation (raises PerturbationError if the row went bad)."""
        return perturbing.build(self.kind, self.params, mode or self.mode, self.name)

    @property
    def spec(self) -> str:
        try:
            return perturbing.spec_of(self.as_perturbation())
        except perturbing.PerturbationError:
            return self.kind
