"""Saved searches: a member keeps a query under a name, for themselves or shared with the
project. Saving under a name the member already used replaces that search (its query, sort
and sharing); only its owner or a project admin deletes one."""

from __future__ import annotations

from dataclasses import dataclass

from django.db import IntegrityError, transaction
from django.db.models import Q, QuerySet

from studio.models import Membership, Project, Role, SavedSearch


@dataclass(frozen=True)
class SearchData:
    name: str
    query: str
    sort: str = "relevance"
    shared: bool = False


class SavedSearchError(ValueError):
    pass


def visible_to(project: Project, user) -> QuerySet[SavedSearch]:
    """The member's own searches and those others shared, by name."""
    return (
        SavedSearch.objects.filter(project=project)
        .filter(Q(owner=user) | Q(shared=True))
        .select_related("owner")
        .order_by("name", "id")
    )


def save(project: Project, user, data: SearchData) -> tuple[SavedSearch, bool]:
    """The saved search and whether it is new (False: the member's search of that name was
    replaced)."""
    with transaction.atomic():
        try:
            saved, created = SavedSearch.objects.update_or_create(
                project=project,
                owner=user,
                name=data.name,
                defaults={"query": data.query, "sort": data.sort, "shared": data.shared},
            )
        except IntegrityError:  # two saves of one name at once: the other one won
            raise SavedSearchError(
                f"a search named {data.name!r} was saved at the same moment; try again"
            ) from None
    return saved, created


def may_delete(saved: SavedSearch, membership: Membership) -> bool:
    return saved.owner_id == membership.user_id or membership.role == Role.ADMIN


def delete(saved: SavedSearch, membership: Membership) -> None:
    if not may_delete(saved, membership):
        raise SavedSearchError("only its owner or a project admin deletes a saved search")
    saved.delete()
