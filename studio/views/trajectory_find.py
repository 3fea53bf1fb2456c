"""Find inside a trajectory: every step of the shown branch (its inherited steps too),
searched on the server, since the page holds only a few windows of steps.

The answer is the ordered list of hits (step index, field, which occurrence in the field,
offset), case-insensitive, at most HIT_LIMIT of them (`capped` says there are more). Only
what the trajectory page itself shows is searched: each step's thinking, action and
observation, never annotations or judge scores (which blind review hides), so a member finds
nothing the page would not show them. Each hit says whether the page shows it (`part`:
"shown", "load": behind a long observation's *Load full observation*, "cut": past what a page
renders) and carries the field's Show all address. GET only; nothing is
written."""

from __future__ import annotations

import re

from django.db.models import Q
from django.http import Http404, JsonResponse
from django.urls import path, reverse

from studio.access import get_trajectory_for_user
from studio.http import HtmxHttpRequest
from studio.rendering import PREVIEW_SHOWN
from studio.rendering.bounded import field_chars
from studio.views.trajectories import PREVIEW_CHARS, _int_param, _select_branch

HIT_LIMIT = 1000
QUERY_CHARS = 200
# The fields searched, in the order the page shows them in a step.
FIELDS = ("thinking", "action", "observation")
# How much of a thinking or an action the page's windows render (the template's bound).
WINDOW_FIELD_CHARS = 20_000


def where_shown(field: str, text: str, end: int) -> str:
    """Where a match ending at `end` of a step's `field` is on the trajectory page: "shown"
    (in the step's rendered text), "load" (past an observation's preview: its *Load full
    observation* button brings it) or "cut" (past what a page renders: only *Show all* has
    it)."""
    page = field_chars()
    if field != "observation":
        return "shown" if end <= min(WINDOW_FIELD_CHARS, page) else "cut"
    if len(text) <= PREVIEW_CHARS:  # rendered whole, up to the page's bound
        return "shown" if end <= page else "cut"
    if end <= min(PREVIEW_SHOWN, page):
        return "shown"
    return "load" if end <= page else "cut"


def find_hits(steps, query: str, limit: int = HIT_LIMIT) -> tuple[list[dict], bool]:
    """The hits of `query` in `steps` (ordered by index), at most `limit`; and whether more
    follow."""
    pattern = re.compile(re.escape(query), re.IGNORECASE)
    hits: list[dict] = []
    urls: dict[tuple[int, str], str] = {}
    for step in steps:
        for field in FIELDS:
            text = getattr(step, field) or ""
            for occurrence, match in enumerate(pattern.finditer(text)):
                if len(hits) == limit:
                    return hits, True
                part = where_shown(field, text, match.end())
                hits.append(
                    {
                        "step": step.index,
                        "field": field,
                        "occurrence": occurrence,
                        "offset": match.start(),
                        "part": part,
                        "full_url": urls.setdefault(
                            (step.pk, field), reverse("step_text", args=[step.pk, field])
                        ),
                    }
                )
    return hits, False


def trajectory_find(request: HtmxHttpRequest, trajectory_id: int) -> JsonResponse:
    trajectory, _ = get_trajectory_for_user(request, trajectory_id)
    branches = list(trajectory.branches.order_by("id"))
    branch = _select_branch(trajectory, branches, _int_param(request, "branch"))
    query = request.GET.get("q", "").strip()
    if len(query) > QUERY_CHARS:
        raise Http404(f"A find is at most {QUERY_CHARS} characters")
    hits: list[dict] = []
    capped = False
    if query:
        matching = Q()
        for field in FIELDS:
            matching |= Q(**{f"{field}__icontains": query})
        steps = (
            branch.all_steps().filter(matching).only("pk", "index", *FIELDS).iterator(chunk_size=50)
        )
        hits, capped = find_hits(steps, query)
    return JsonResponse(
        {"query": query, "branch": branch.pk, "hits": hits, "capped": capped, "limit": HIT_LIMIT}
    )


urlpatterns = [
    path("trajectories/<int:trajectory_id>/find/", trajectory_find, name="trajectory_find"),
]
