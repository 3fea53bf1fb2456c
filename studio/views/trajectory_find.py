"""The find bar's answers (`static/js/find.js`): every hit of a text in the steps a page
shows, found by `studio.services.step_find` since a page holds only a few windows of steps.

Two pages ask: the trajectory page (the shown branch: each step's thinking, action and
observation) and the compare view (every compared branch from the first step the page
shows: each cell's action and observation). The answer is the ordered list of hits (step
index, field, which occurrence in the field, offset; in compare also the branch of the
column), a window of at most HIT_LIMIT of them: from `at` (a step index, and `nth`: which of
its hits) on, or with `back=1` the hits just before it (without `at`: the last ones); `at`
is asked as `step=` (the compare view's own `at=` is a cell). The answer says how many hits
come before the window (`before`), how many there are (`total`, counted up to COUNT_LIMIT
past the window; `more`: there are more than that) and whether hits follow the window
(`capped`). Each hit says where the page shows it (`part`) and carries the field's Show all
address and its place (`nth`), which the next window starts after. Only what the pages show
is searched, never annotations or judge scores (which blind review hides). GET only; nothing
is written."""

from __future__ import annotations

from django.core.exceptions import BadRequest
from django.http import Http404, JsonResponse
from django.urls import path, reverse

from studio.access import get_trajectory_for_user
from studio.forms.branching import CompareRowsForm
from studio.http import HtmxHttpRequest, whole_number
from studio.rendering import PREVIEW_SHOWN
from studio.rendering.bounded import field_chars
from studio.services.compare import start_comparison
from studio.services.step_find import (
    HIT_LIMIT,
    QUERY_CHARS,
    FindWindow,
    StepHit,
    earlier_in_comparison,
    find_in_branch,
    find_in_comparison,
)
from studio.views.trajectories import PREVIEW_CHARS, _int_param, _select_branch

__all__ = ["HIT_LIMIT", "QUERY_CHARS", "where_shown"]

# How much of a thinking or an action the trajectory page's windows render (the template's
# bound).
WINDOW_FIELD_CHARS = 20_000


def where_shown(field: str, length: int, end: int) -> str:
    """Where a match ending at `end` of a step's `field` (`length` characters long) is on
    the trajectory page: "shown" (in the step's rendered text), "load" (past an observation's
    preview: its *Load full observation* button brings it) or "cut" (past what a page
    renders: only *Show all* has it)."""
    page = field_chars()
    if field != "observation":
        return "shown" if end <= min(WINDOW_FIELD_CHARS, page) else "cut"
    if length <= PREVIEW_CHARS:  # rendered whole, up to the page's bound
        return "shown" if end <= page else "cut"
    if end <= min(PREVIEW_SHOWN, page):
        return "shown"
    return "load" if end <= page else "cut"


def where_shown_in_compare(end: int) -> str:
    """Where a match ending at `end` is in a compare cell: "shown" (in what the cell shows
    whole, with its *Show all*, up to the page's bound: an excerpt or a diff may still leave
    it out, which the page tells by looking) or "cut" (only the field's *Show all* page has
    it)."""
    return "shown" if end <= field_chars() else "cut"


def _query(request: HtmxHttpRequest) -> str:
    query = request.GET.get("q", "").strip()
    if len(query) > QUERY_CHARS:
        raise Http404(f"A find is at most {QUERY_CHARS} characters")
    return query


def _place(request: HtmxHttpRequest) -> tuple[tuple[int, int] | None, bool]:
    """The window asked for: (`at`, `back`); a bad number is a 400 naming it."""
    numbers: dict[str, int] = {}
    for name in ("step", "nth"):
        raw = request.GET.get(name, "").strip()
        if raw:
            value = whole_number(raw)
            if value is None:
                raise BadRequest(f"{name} must be a whole number from 0 (got {raw[:20]!r})")
            numbers[name] = value
    back = request.GET.get("back") == "1"
    if "step" not in numbers:
        return (None if back else (0, 0)), back
    return (numbers["step"], numbers.get("nth", 0)), back


def _window_json(found: FindWindow) -> dict:
    return {
        "before": found.before,
        "total": found.total,
        "more": found.more,
        "capped": found.after,
        "limit": HIT_LIMIT,
    }


def _hit_json(hit: StepHit, part: str, urls: dict[tuple[int, str], str]) -> dict:
    return {
        "step": hit.index,
        "nth": hit.nth,
        "field": hit.field,
        "occurrence": hit.occurrence,
        "offset": hit.start,
        "part": part,
        "full_url": urls.setdefault(
            (hit.step_id, hit.field), reverse("step_text", args=[hit.step_id, hit.field])
        ),
    }


def trajectory_find(request: HtmxHttpRequest, trajectory_id: int) -> JsonResponse:
    trajectory, _ = get_trajectory_for_user(request, trajectory_id)
    branches = list(trajectory.branches.order_by("id"))
    branch = _select_branch(trajectory, branches, _int_param(request, "branch"))
    query = _query(request)
    at, back = _place(request)
    found = FindWindow([], 0, 0)
    if query:
        found = find_in_branch(branch, query, at=at, back=back, limit=HIT_LIMIT)
    urls: dict[tuple[int, str], str] = {}
    return JsonResponse(
        {
            "query": query,
            "branch": branch.pk,
            "hits": [_hit_json(h, where_shown(h.field, h.length, h.end), urls) for h in found.hits],
            **_window_json(found),
        }
    )


def compare_find(request: HtmxHttpRequest, trajectory_id: int) -> JsonResponse:
    """`?b=..&b=..&start=&q=`: the hits in the compared branches (the compare page's `b`, in
    its column order) from step `start` (the page's first; never before the steps every
    branch shares, which the page does not show), and how many earlier steps have it."""
    trajectory, _ = get_trajectory_for_user(request, trajectory_id)
    form = CompareRowsForm(request.GET, branches=list(trajectory.branches.order_by("pk")))
    if not form.is_valid():
        # a branch of another trajectory (or project) is no branch of this one
        raise Http404(" ".join(str(e) for errs in form.errors.values() for e in errs))
    selected = form.cleaned_data["selected"]
    comparison = start_comparison(trajectory, selected, diff="meaning")
    start = max(comparison.shared_until, form.cleaned_data["start"])
    query = _query(request)
    at, back = _place(request)
    found = FindWindow([], 0, 0)
    earlier = 0
    if query:
        found = find_in_comparison(
            comparison, query, start=start, at=at, back=back, limit=HIT_LIMIT
        )
        earlier = earlier_in_comparison(comparison, query, start=start)
    urls: dict[tuple[int, str], str] = {}
    return JsonResponse(
        {
            "query": query,
            "start": start,
            "branches": [{"id": b.pk, "name": b.name} for b in selected],
            "hits": [
                {
                    **_hit_json(h, where_shown_in_compare(h.end), urls),
                    "branch": selected[h.column].pk,
                }
                for h in found.hits
            ],
            **_window_json(found),
            "earlier": earlier,
        }
    )


urlpatterns = [
    path("trajectories/<int:trajectory_id>/find/", trajectory_find, name="trajectory_find"),
    path(
        "trajectories/<int:trajectory_id>/compare/find/", compare_find, name="branch_compare_find"
    ),
]
