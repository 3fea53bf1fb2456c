"""The search page's results as the template shows them: each hit's link into its
trajectory (the branch, the step, and the text the trajectory page's find bar marks there),
the trajectory matches with their titles, and the pager's links."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlencode

from django.urls import reverse

from studio.forms.search import SORT_LABELS
from studio.models import Project, Trajectory
from studio.search.query import STEP_FIELDS
from studio.search.service import StepHit, StepResults, TrajectoryGroup

FIND_CHARS = 200  # the find bar's own limit on what it searches for


def hit_url(hit: StepHit) -> str:
    """The trajectory page at the hit's step of its branch, the match marked by the page's
    find bar (`find`: the matched text of the step's own action or observation; `at`: the
    step). A match in an annotation opens the step alone. `step`: the page comes with the
    step's window in it (no second request, which would race the find bar's own)."""
    params: dict[str, str | int] = {"branch": hit.branch_id, "step": hit.index}
    text = matched_text(hit)
    if text:
        params.update({"find": text, "at": hit.index})
    base = reverse("trajectory", kwargs={"trajectory_id": hit.trajectory_id})
    return f"{base}?{urlencode(params)}#step-{hit.index}"


def matched_text(hit: StepHit) -> str:
    snippet = hit.snippet
    if snippet is None or snippet.field not in ("action", "observation"):
        return ""
    for text, marked in snippet.pieces:
        if marked and text.strip():
            return text.strip()[:FIND_CHARS]
    return ""


@dataclass(frozen=True)
class PresentedHit:
    hit: StepHit
    url: str
    similarity: float | None = None  # ranked by meaning: its cosine to the query


@dataclass(frozen=True)
class PresentedGroup:
    group: TrajectoryGroup
    url: str
    hits: list[PresentedHit]


@dataclass(frozen=True)
class PresentedResults:
    results: StepResults
    groups: list[PresentedGroup]
    trajectories: list[Trajectory]  # whose title, task or world name match
    first: int  # the number of this page's first hit (1-based)
    last: int


def present_results(results: StepResults, project: Project) -> PresentedResults:
    groups = [
        PresentedGroup(
            group,
            reverse("trajectory", kwargs={"trajectory_id": group.trajectory_id}),
            [
                PresentedHit(hit, hit_url(hit), results.similarity.get(hit.step_id))
                for hit in group.hits
            ],
        )
        for group in results.groups
    ]
    found = {
        t.pk: t
        for t in Trajectory.objects.filter(project=project, pk__in=results.trajectory_matches).only(
            "id", "title", "domain", "task_instruction", "step_count"
        )
    }
    trajectories = [found[pk] for pk in results.trajectory_matches if pk in found]
    first = (results.page - 1) * results.per_page + 1 if results.hits else 0
    return PresentedResults(results, groups, trajectories, first, first + len(results.hits) - 1)


def sort_label(results: StepResults) -> str:
    """The order the hits are in, in words (relevance without words to rank by is newest
    first, and says so)."""
    if results.sort == "relevance" and not results.query.positive_in((None, *STEP_FIELDS)):
        return "Newest first (the query has no words to rank by)"
    if results.ranking_label:
        return results.ranking_label[0].upper() + results.ranking_label[1:]
    return SORT_LABELS.get(results.sort, results.sort)
