"""The project library: search, filter, sort and page through trajectories (episodes by
world, client, token, state and reward; those without steps hidden unless asked for);
delete one; end a running episode."""

from __future__ import annotations

from urllib.parse import urlencode

from django.contrib import messages
from django.core.paginator import Paginator
from django.db.models import Exists, OuterRef, Q, QuerySet
from django.db.models.expressions import RawSQL
from django.db.models.fields.json import KT
from django.db.models.functions import Lower
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.urls import path
from django.utils.text import capfirst
from django.views.decorators.http import require_http_methods

from studio.access import get_project_for_user, get_trajectory_for_user
from studio.forms.library import SORTS, LibraryFilterForm
from studio.http import HtmxHttpRequest
from studio.models import ObservationSource, Project, Step, Trajectory
from studio.search.backends import SEES_ALL, Viewer
from studio.search.indexer import waiting_for
from studio.search.query import QueryError, RegexTimeout, parse
from studio.search.service import trajectory_ids_by_regex, trajectory_ids_sql, viewer_for
from studio.services.episode_library import (
    EndRefused,
    end_episode,
    filter_episodes,
    reward_expression,
    without_steps,
)

PAGE_SIZE = 25


def search_trajectories(
    project: Project, data: dict, viewer: Viewer = SEES_ALL
) -> QuerySet[Trajectory]:
    """Trajectories of `project` matching the cleaned filter data, in the requested order.
    Text search is the step search's query language (`studio.search`): a trajectory matches
    when one of its steps does (its text, or an annotation `viewer` sees), or its title,
    task or world name holds the words."""
    qs = project.trajectories.all()
    if data.get("domain"):
        qs = qs.filter(domain=data["domain"])
    if data.get("source"):
        qs = qs.filter(source_format=data["source"])
    if data.get("tag"):
        qs = qs.filter(tags__name=data["tag"])
    perturbation = data.get("perturbation")
    if perturbation:
        perturbed = Step.objects.filter(branch__trajectory=OuterRef("pk"))
        if perturbation == "*":
            perturbed = perturbed.filter(observation_source=ObservationSource.PERTURBED)
        else:
            perturbed = perturbed.filter(
                meta__perturbation__label=perturbation,
                observation_source=ObservationSource.PERTURBED,
            )
        qs = qs.filter(Exists(perturbed))
    qs = filter_episodes(qs, data)
    q = data.get("q")
    if q:
        # the index (`studio.search`): a trajectory with a matching step (its text or an
        # annotation the viewer sees), or whose title, task or world name hold the words
        query = parse(q)
        if query.regexes:  # over a bounded candidate set (`studio.search.service`)
            found = Q(pk__in=trajectory_ids_by_regex([project.pk], query, viewer))
        else:
            sql, params = trajectory_ids_sql([project.pk], query, viewer)
            found = Q(pk__in=RawSQL(sql, params))
        qs = qs.filter(found)
    sort = data.get("sort") or "newest"
    order = SORTS[sort]
    if sort == "title":
        qs = qs.order_by(Lower("title"), "id")
    else:
        qs = qs.order_by(*order)
    # an episode's row says its state, client and reward (a few keys, not the metadata)
    qs = qs.annotate(
        ep_status=KT("metadata__episode__status"),
        ep_client=KT("metadata__episode__client"),
        ep_reward=reward_expression(),
    )
    return qs.defer("system_prompt", "tools", "metadata").prefetch_related("tags")


def library(request: HtmxHttpRequest, project_id: int) -> HttpResponse:
    project, membership = get_project_for_user(request, project_id)
    form = LibraryFilterForm(request.GET or None, project=project)
    status = 200
    page = None
    hidden = 0
    unindexed = None
    if form.is_bound and form.is_valid() and form.cleaned_data.get("q"):
        try:
            parse(form.cleaned_data["q"])
        except QueryError as exc:
            form.add_error("q", str(exc))
    data: dict = {"sort": "newest", "page": 1}
    found = None
    if form.is_bound and form.is_valid():
        data = form.cleaned_data
    if not form.is_bound or form.is_valid():
        try:
            found = search_trajectories(project, data, viewer_for(membership))
        except RegexTimeout as exc:  # the query is at fault, as with a syntax error
            form.add_error("q", f"{capfirst(str(exc))}.")
    if found is None:
        status = 400
    else:
        if not data.get("empty"):
            # a reset alone is no record yet (the sweeper deletes it later): hidden, counted
            hidden = found.filter(without_steps()).count()
            found = found.exclude(without_steps())
        paginator = Paginator(found, PAGE_SIZE)
        page = paginator.get_page(int(data.get("page") or 1))
        if data.get("q"):
            # steps imported moments ago are not indexed yet (`studio.search.indexer`)
            unindexed = waiting_for([project.pk])
    # Links keep the filters and change only the page number.
    params = {k: v for k, v in request.GET.items() if k != "page" and v}
    context = {
        "project": project,
        "membership": membership,
        "form": form,
        "page": page,
        "query_prefix": urlencode(params) + ("&" if params else ""),
        "can_edit": membership.can_edit,
        "total": project.trajectories.count(),
        "hidden_empty": hidden,
        "episode_filters": project.trajectories.filter(source_format="episode").exists(),
        "show_empty_query": urlencode({**params, "empty": "on"}),
        "unindexed": unindexed,
    }
    template = "library/library.html"
    if request.htmx and not request.htmx.history_restore_request:
        template += "#results"
    return render(request, template, context, status=status)


@require_http_methods(["GET", "POST"])
def trajectory_delete(request: HtmxHttpRequest, trajectory_id: int) -> HttpResponse:
    trajectory, membership = get_trajectory_for_user(request, trajectory_id, edit=True)
    if request.method == "GET":
        return render(
            request,
            "library/confirm_delete.html",
            {"project": trajectory.project, "membership": membership, "trajectory": trajectory},
        )
    project_id = trajectory.project_id
    title = trajectory.title
    trajectory.delete()
    if request.htmx:
        # The library row asked: it is replaced by nothing.
        return HttpResponse("")
    messages.success(request, f"Deleted trajectory “{title}”.")
    return redirect("library", project_id=project_id)


@require_http_methods(["POST"])
def trajectory_end_episode(request: HtmxHttpRequest, trajectory_id: int) -> HttpResponse:
    """End a running episode (researchers and admins): its agent's next step is refused."""
    trajectory, _ = get_trajectory_for_user(request, trajectory_id, edit=True)
    try:
        end_episode(trajectory.pk)
    except EndRefused as exc:
        messages.error(request, f"Not ended: {exc}.")
    else:
        messages.success(
            request,
            "Ended the episode (cancelled): its agent's next step is refused, and a step "
            "being answered now is not recorded.",
        )
    return redirect("trajectory", trajectory_id=trajectory.pk)


urlpatterns = [
    path("projects/<int:project_id>/", library, name="library"),
    path("trajectories/<int:trajectory_id>/delete/", trajectory_delete, name="trajectory_delete"),
    path(
        "trajectories/<int:trajectory_id>/end-episode/",
        trajectory_end_episode,
        name="trajectory_end_episode",
    ),
]
