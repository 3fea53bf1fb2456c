"""Saved searches: a query of the search language (`studio.search.query`) kept under a name,
by its owner, for themselves or for everyone in the project."""

from __future__ import annotations

from django.conf import settings
from django.db import models

QUERY_CHARS = 2_000  # the search box's own limit (studio.forms.search)


class SavedSearch(models.Model):
    project = models.ForeignKey(
        "studio.Project", on_delete=models.CASCADE, related_name="saved_searches"
    )
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="saved_searches"
    )
    name = models.CharField(max_length=200)
    query = models.CharField(max_length=QUERY_CHARS)
    sort = models.CharField(max_length=20, default="relevance")
    # shown to every member of the project (False: to its owner only)
    shared = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["project", "owner", "name"], name="unique_saved_search_name"
            )
        ]

    def __str__(self) -> str:
        return f"saved search {self.name!r}"
