from __future__ import annotations

from django.conf import settings
from django.db import models

from studio.models.trajectories import Domain


class World(models.Model):
    """A fictional world of a project. Its content lives in versions: every save is a new
    `WorldVersion`, and whatever ran in the world records the version it used."""

    project = models.ForeignKey("studio.Project", on_delete=models.CASCADE, related_name="worlds")
    name = models.CharField(max_length=200)
    domain = models.CharField(max_length=20, choices=Domain.choices)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        constraints = [models.UniqueConstraint(fields=["project", "name"], name="one_world_name")]

    def __str__(self) -> str:
        return self.name

    @property
    def latest(self) -> WorldVersion | None:
        return self.versions.order_by("-number").first()


class WorldVersion(models.Model):
    """One saved state of a world: its file's JSON (`inference.worlds.world_to_file`)."""

    world = models.ForeignKey(World, on_delete=models.CASCADE, related_name="versions")
    number = models.PositiveIntegerField()
    data = models.JSONField()
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["world", "-number"]
        constraints = [
            models.UniqueConstraint(fields=["world", "number"], name="one_world_version_number")
        ]

    def __str__(self) -> str:
        return f"{self.world.name} v{self.number}"

    def spec(self):
        from inference.worlds import parse_world

        return parse_world(self.data)
