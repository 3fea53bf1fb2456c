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


class McpSession(models.Model):
    """An MCP session's episode, where every web process finds it: a standard MCP client
    (no vendor `_meta` key) plays one episode per session, and the session's next request
    may reach another web worker or machine."""

    session_id = models.CharField(max_length=128, unique=True)
    token = models.ForeignKey(ApiToken, on_delete=models.CASCADE, related_name="mcp_sessions")
    trajectory = models.ForeignKey(
        "studio.Trajectory", null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    last_seen_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"MCP session {self.session_id[:8]}… of {self.token}"


class TokenRateWindow(models.Model):
    """How many resets or steps a token made in one minute (`studio.services.episode_limits`),
    where Redis is not the broker: the embedded default counts here."""

    token = models.ForeignKey(ApiToken, on_delete=models.CASCADE, related_name="+")
    kind = models.CharField(max_length=16)  # "reset" | "step"
    minute = models.BigIntegerField()  # unix time // 60
    count = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["token", "kind", "minute"], name="one_rate_window")
        ]

    def __str__(self) -> str:
        return f"{self.kind}s of {self.token_id} in minute {self.minute}: {self.count}"
