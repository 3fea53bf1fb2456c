"""A world's page: the episodes played in it over time, live (reward, success rate, steps per
episode, grouped by token or client), and a selection of them made into an annotation queue
or a dataset. Every member of the world's project sees it; only those who can edit
(researchers, admins) make queues and datasets of a selection.

The page polls its "live" part (`?part=live`, every few seconds): the counts, the figures'
JSON, the tokens to filter by and (out of band) the latest-episodes table, or 204 when
nothing changed since the signature the page sent (`since`), so an idle world costs one
small query set a poll. `static/js/world_episodes.js` redraws the charts with Plotly.react,
keeps the table's ticked episodes ticked and the token filter's list current."""

from __future__ import annotations

from urllib.parse import urlencode

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import NoReverseMatch, path, reverse
from django.views.decorators.http import require_GET, require_POST

from studio.access import membership_for
from studio.forms.world_episodes import (
    SelectionDatasetForm,
    SelectionQueueForm,
    WorldEpisodesForm,
)
from studio.http import HtmxHttpRequest
from studio.models import Membership, World
from studio.presenters.world_episodes import figures
from studio.services import episode_selection
from studio.services import world_episodes as service

TABLE_ROWS = 50  # the table's latest episodes (the charts hold the window)
POLL_MS = 2500


def _get_world_for_user(request: HtmxHttpRequest, world_id: int) -> tuple[World, Membership]:
    """The world and the user's membership of its project; 404 outside their projects."""
    world = get_object_or_404(World.objects.select_related("project"), pk=world_id)
    return world, membership_for(request, world.project_id)


def _trajectory_url(pk: int) -> str:
    return reverse("trajectory", kwargs={"trajectory_id": pk})


def _campaign_url(project_id: int, world_id: int) -> str | None:
    """Where a campaign in this world starts, when the campaigns page exists."""
    try:
        return f"{reverse('campaign_new', kwargs={'project_id': project_id})}?world={world_id}"
    except NoReverseMatch:
        return None


def _given_choices(request: HtmxHttpRequest) -> dict[str, list[tuple[str, str]]]:
    """The token and task the request names, as the only choices: a polled part reads
    the filters the page already validated (a token that is no whole number is still
    refused), so a token or task the page offered stays its filter however the lists
    change."""
    token, task = request.GET.get("token", ""), request.GET.get("task_id", "")
    return {
        "tokens": [(token, token)] if token else [],
        "tasks": [(task, task)] if task else [],
    }


def _read(
    request: HtmxHttpRequest, world: World, *, part: str = ""
) -> tuple[WorldEpisodesForm, service.Filters, list[tuple[str, str]] | None]:
    """The form, its filters and (the whole page) the tokens its filter lists."""
    choices = _given_choices(request) if part else service.choices_of(world)
    form = WorldEpisodesForm(request.GET or None, choices=choices)
    tokens = None if part else choices["tokens"]
    if form.is_bound and not form.is_valid():
        return form, service.Filters(), tokens
    if not form.is_bound:
        form.cleaned_data = {}
    return form, form.filters(), tokens


def _table(
    world: World, filters: service.Filters, data: service.WorldEpisodes
) -> list[service.EpisodeRow]:
    """The latest episodes for the table, newest first: the latest of the charts' window
    when it holds as many, else read on their own."""
    if filters.window >= TABLE_ROWS:
        return list(reversed(data.rows))[:TABLE_ROWS]
    shown = service.world_episodes(
        world, service.Filters(**{**filters.__dict__, "window": TABLE_ROWS})
    )
    return list(reversed(shown.rows))


def _live_context(
    world: World, filters: service.Filters, tokens: list[tuple[str, str]] | None = None
) -> dict:
    """What the live part shows: the counts and figures, the table and the tokens to filter
    by (`tokens`: read already), under one signature (`service.live_signature`)."""
    data = service.world_episodes(world, filters)
    table = _table(world, filters, data)
    if tokens is None:
        tokens = service.token_choices(world)
    figs = figures(data, _trajectory_url)
    figs["signature"] = service.live_signature(data, table, tokens)
    return {"data": data, "figures": figs, "table": table, "tokens": tokens, "filters": filters}


@require_GET
def world_page(request: HtmxHttpRequest, world_id: int) -> HttpResponse:
    world, membership = _get_world_for_user(request, world_id)
    part = request.GET.get("part", "")
    if part and part != "live":
        raise Http404(f"no part {part!r} of the world page (live)")
    form, filters, tokens = _read(request, world, part=part)
    query = urlencode(filters.query())
    live_url = f"{reverse('world_page', args=[world.pk])}?{query + '&' if query else ''}part=live"
    live = _live_context(world, filters, tokens)
    common = {
        "world": world,
        "can_edit": membership.can_edit,
        "campaign_url": _campaign_url(world.project_id, world.pk),
        "table_rows": TABLE_ROWS,
        **live,
    }
    if part == "live":
        if request.GET.get("since") == live["figures"]["signature"]:
            return HttpResponse(status=204)  # nothing new: htmx swaps nothing
        return render(request, "worlds/world.html#poll", common)
    # the library's source filter offers the formats the project holds: "episode" once any
    where: dict[str, int | str] = {"world": world.pk}
    if live["data"].counts["episodes"] or service.episodes_of(world).exists():
        where["source"] = service.EPISODE
    library = f"{reverse('library', args=[world.project_id])}?{urlencode(where)}"
    return render(
        request,
        "worlds/world.html",
        {
            **common,
            "project": world.project,
            "membership": membership,
            "latest": world.latest,
            "form": form,
            "live_url": live_url,
            "poll_ms": POLL_MS,
            "library_url": library,
            "queue_form": SelectionQueueForm(),
            "dataset_form": SelectionDatasetForm(),
        },
    )


def _origin(world: World) -> str:
    """Where a selection was made, in the words of the queue's description or the dataset
    version's source."""
    return f"from a selection on the page of world '{world.name}'"


def _selection_post(request: HtmxHttpRequest, world_id: int, form_class):
    world, membership = _get_world_for_user(request, world_id)
    if not membership.can_edit:
        raise PermissionDenied("Annotators see a world's episodes but make no queue or dataset.")
    form = form_class(request.POST)
    back = reverse("world_page", args=[world.pk])
    if not form.is_valid():
        for field, errors in form.errors.items():
            where = "" if field == "__all__" else f"{form.fields[field].label or field}: "
            for error in errors:
                messages.error(request, f"{where}{error}")
        return world, membership, form, None, back
    return world, membership, form, form.ids(), back


@require_POST
def world_episode_queue(request: HtmxHttpRequest, world_id: int) -> HttpResponse:
    world, _, form, ids, back = _selection_post(request, world_id, SelectionQueueForm)
    if ids is None:
        return redirect(back)
    try:
        queue = episode_selection.queue_from_episodes(
            world.project,
            request.user,
            ids,
            form.cleaned_data["name"],
            blind=form.cleaned_data.get("blind", False),
            origin=_origin(world),
        )
    except episode_selection.SelectionError as exc:
        messages.error(request, f"No queue made: {exc}")
        return redirect(back)
    messages.success(
        request,
        f"Queue {queue.name!r} made of the steps of {len(ids)} episode{'s' if len(ids) != 1 else ''}.",
    )
    return redirect("queue_detail", queue_id=queue.pk)


@require_POST
def world_episode_dataset(request: HtmxHttpRequest, world_id: int) -> HttpResponse:
    world, _, form, ids, back = _selection_post(request, world_id, SelectionDatasetForm)
    if ids is None:
        return redirect(back)
    try:
        version = episode_selection.dataset_from_episodes(
            world.project,
            request.user,
            ids,
            form.cleaned_data["name"],
            turns=form.cleaned_data["turns"],
            origin=_origin(world),
        )
    except episode_selection.SelectionError as exc:
        messages.error(request, f"No dataset made: {exc}")
        return redirect(back)
    messages.success(
        request,
        f"Dataset {version.dataset.name!r} v{version.number}: {version.item_count} steps "
        f"({episode_selection.TURNS[form.cleaned_data['turns']]} of {len(ids)} "
        f"episode{'s' if len(ids) != 1 else ''}).",
    )
    return redirect("dataset_detail", dataset_id=version.dataset_id)


urlpatterns = [
    path("worlds/<int:world_id>/", world_page, name="world_page"),
    path("worlds/<int:world_id>/episodes/queue/", world_episode_queue, name="world_episode_queue"),
    path(
        "worlds/<int:world_id>/episodes/dataset/",
        world_episode_dataset,
        name="world_episode_dataset",
    ),
]
