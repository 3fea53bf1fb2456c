from __future__ import annotations

from django.conf import settings
from django.db import models


class ApiToken(models.Model):
    """A project's credential for agents outside the studio (the episode API). Only a hash
    is stored; the token is shown once, when it is made. Revoked tokens stay listed."""

    project = models.ForeignKey(
        "studio.Project", on_delete=models.CASCADE, related_name="api_tokens"
    )
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=16)  # the first characters, to tell tokens apart
    token_hash = models.CharField(max_length=64, unique=True)  # sha256 hex of the token
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None
