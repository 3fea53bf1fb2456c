"""The search page: step hits of a project for the search language (`studio.search`), grouped
by trajectory, paged and sorted, each opening its trajectory at that step with the match
marked; saved searches; every hit of a search made into a tag of their trajectories, an
annotation queue or a dataset version in one action (researchers and admins).

Every member searches; what they find is what they may see (`viewer_for`: blind review
hides other people's annotations of a blind queue's steps, so a search does not find a
step by them). GET only reads."""

from __future__ import annotations

from urllib.parse import urlencode

from django.contrib import messages
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import path, reverse
from django.utils.text import capfirst
from django.views.decorators.http import require_GET, require_POST

from inference.embeddings import EmbeddingError
from studio.access import get_project_for_user, require_edit
from studio.forms.search import (
    PER_PAGE,
    HitsDatasetForm,
    HitsForm,
    HitsQueueForm,
    HitsTagForm,
    SaveSearchForm,
    SearchForm,
)
from studio.http import HtmxHttpRequest
from studio.models import Membership, Project, SavedSearch
from studio.presenters.search import present_results, sort_label
from studio.search.indexer import waiting_for
from studio.search.meaning import search_by_meaning
from studio.search.query import RegexTimeout, parse
from studio.search.service import (
    matching_step_ids,
    regex_candidates,
    search_steps,
    viewer_for,
)
from studio.services import saved_searches
from studio.services import step_selection as selection
from studio.services.embeddings import embedder_for, embedding_endpoint
from studio.services.endpoints import EndpointError


def _search_url(project: Project, q: str = "", sort: str = "") -> str:
    params = {k: v for k, v in {"q": q, "sort": sort}.items() if v}
    url = reverse("search", kwargs={"project_id": project.pk})
    return f"{url}?{urlencode(params)}" if params else url


def _get_saved_search_for_user(request: HtmxHttpRequest, pk: int) -> tuple[SavedSearch, Membership]:
    """A saved search the user may see (theirs, or shared in one of their projects); 404
    otherwise."""
    saved = get_object_or_404(SavedSearch.objects.select_related("project"), pk=pk)
    _, membership = get_project_for_user(request, saved.project_id)
    if saved.owner_id != membership.user_id and not saved.shared:
        from django.http import Http404

        raise Http404("No such saved search")
    return saved, membership


def _problems(form) -> str:
    """A form's errors in one line, each after its field's label."""
    parts = []
    for name, errors in form.errors.items():
        label = f"{form.fields[name].label}: " if name in form.fields else ""
        parts.append(label + " ".join(str(e) for e in errors))
    return "; ".join(parts)


@require_GET
def search_page(request: HtmxHttpRequest, project_id: int) -> HttpResponse:
    project, membership = get_project_for_user(request, project_id)
    meaning = embedding_endpoint(project) is not None
    form = SearchForm(request.GET or None, meaning=meaning)
    results = None
    status = 200
    meaning_problem = ""
    if form.is_bound and not form.is_valid():
        status = 400
    elif form.is_bound and form.cleaned_data.get("q"):
        data = form.cleaned_data
        sort = data.get("sort") or "relevance"
        page = data.get("page") or 1
        viewer = viewer_for(membership)
        try:
            if sort == "meaning":
                try:
                    embedder = embedder_for(project)
                    assert embedder is not None  # the form offers "meaning" only then
                    results = search_by_meaning(
                        [project.pk],
                        data["q"],
                        embedder,
                        page=page,
                        per_page=PER_PAGE,
                        viewer=viewer,
                    )
                except RegexTimeout:
                    raise
                except (EmbeddingError, EndpointError, ValueError) as exc:
                    meaning_problem = f"Not ranked by meaning: {exc}. Best match first instead."
                    sort = "relevance"
            if results is None:
                results = search_steps(
                    [project.pk], data["q"], page=page, per_page=PER_PAGE, sort=sort, viewer=viewer
                )
        except RegexTimeout as exc:
            # the query is at fault, as with a syntax error: the form says so
            form.add_error("q", f"{capfirst(str(exc))}.")
            results, status = None, 400
    q = form.cleaned_data.get("q", "") if form.is_bound and form.is_valid() else ""
    sort = form.cleaned_data.get("sort", "") if form.is_bound and form.is_valid() else ""
    context = {
        "sort_label": sort_label(results) if results is not None else "",
        "meaning_problem": meaning_problem,
        "page_prefix": urlencode({"q": q, "sort": sort or "relevance"}) + "&",
        "project": project,
        "membership": membership,
        "form": form,
        "q": q,
        "sort": sort or "relevance",
        "results": present_results(results, project) if results is not None else None,
        # steps imported moments ago, not indexed yet (`studio.search.indexer`)
        "unindexed": waiting_for([project.pk]) if results is not None else None,
        "saved": list(saved_searches.visible_to(project, request.user)),
        "can_edit": membership.can_edit,
        "save_form": SaveSearchForm(initial={"q": q, "sort": sort}),
        "regex_limit": regex_candidates(),
        "max_steps": selection.MAX_STEPS,
    }
    template = "search/search.html"
    if request.htmx and not request.htmx.history_restore_request:
        template += "#results"
    return render(request, template, context, status=status)


@require_POST
def saved_search_create(request: HtmxHttpRequest, project_id: int) -> HttpResponse:
    project, membership = get_project_for_user(request, project_id)
    form = SaveSearchForm(request.POST)
    if not form.is_valid():
        messages.error(request, f"Not saved: {_problems(form)}")
        return redirect(_search_url(project, request.POST.get("q", "")[:1000]))
    data = form.cleaned_data
    try:
        saved, created = saved_searches.save(
            project,
            request.user,
            saved_searches.SearchData(
                name=data["name"],
                query=data["q"],
                sort=data.get("sort") or "relevance",
                shared=data.get("shared", False),
            ),
        )
    except saved_searches.SavedSearchError as exc:
        messages.error(request, f"Not saved: {exc}.")
    else:
        shared = " (shared with the project)" if saved.shared else " (only you see it)"
        messages.success(
            request,
            f"{'Saved' if created else 'Replaced'} the search “{saved.name}”{shared}.",
        )
    return redirect(_search_url(project, data["q"], data.get("sort") or ""))


@require_POST
def saved_search_delete(request: HtmxHttpRequest, saved_id: int) -> HttpResponse:
    saved, membership = _get_saved_search_for_user(request, saved_id)
    project = saved.project
    try:
        saved_searches.delete(saved, membership)
    except saved_searches.SavedSearchError as exc:
        messages.error(request, f"Not deleted: {exc}.")
    else:
        messages.success(request, f"Deleted the saved search “{saved.name}”.")
    return redirect(_search_url(project))


def _hits_of(form: HitsForm, project: Project, membership: Membership) -> tuple[list[int], str]:
    """Every hit of the form's query (as the member sees them) and what they are, in words;
    SelectionError when there are more than one selection holds."""
    q = form.cleaned_data["q"]
    query = parse(q)
    ids = matching_step_ids(
        [project.pk], query, selection.MAX_STEPS + 1, viewer=viewer_for(membership)
    )
    if len(ids) > selection.MAX_STEPS:
        raise selection.SelectionError(
            f"the search has more than {selection.MAX_STEPS:,} hits: narrow it (a tag, queue "
            "or dataset is made of every hit, not of the page shown)"
        )
    if not ids:
        raise selection.SelectionError("the search has no hit")
    what = f"the {selection.plural(len(ids), 'hit')} of the search “{q}”"
    if query.regexes:
        what += f" (its regular expression applied to at most {regex_candidates():,} steps)"
    return ids, what


def _hits_action(request: HtmxHttpRequest, project_id: int, form_class, act) -> HttpResponse:
    project, membership = get_project_for_user(request, project_id)
    require_edit(
        membership, "Annotators can search but not make tags, queues or datasets of the hits."
    )
    form = form_class(request.POST)
    q = request.POST.get("q", "")[:1000]
    if not form.is_valid():
        messages.error(request, f"Nothing made: {_problems(form)}")
        return redirect(_search_url(project, q))
    try:
        ids, what = _hits_of(form, project, membership)
        return act(project, membership, form.cleaned_data, ids, what)
    except (selection.SelectionError, RegexTimeout) as exc:
        messages.error(request, f"Nothing made: {exc}.")
        return redirect(_search_url(project, q))


@require_POST
def hits_tag(request: HtmxHttpRequest, project_id: int) -> HttpResponse:
    def act(project, membership, data, ids, what):
        done = selection.tag_trajectories(project, ids, data["tag"])
        messages.success(
            request,
            f"Tagged {selection.plural(done.trajectories, 'trajectory', 'trajectories')} "
            f"holding {what} “{done.tag}” ({done.newly_tagged:,} newly"
            f"{', a new tag' if done.created else ''}).",
        )
        library = reverse("library", kwargs={"project_id": project.pk})
        return redirect(f"{library}?{urlencode({'tag': done.tag})}")

    return _hits_action(request, project_id, HitsTagForm, act)


@require_POST
def hits_queue(request: HtmxHttpRequest, project_id: int) -> HttpResponse:
    def act(project, membership, data, ids, what):
        queue = selection.queue_from_steps(
            project, request.user, ids, data["name"], what=what, blind=data.get("blind", False)
        )
        messages.success(
            request,
            f"Made the queue “{queue.name}” of {selection.plural(queue.items.count(), 'step')}.",
        )
        return redirect("queue_detail", queue_id=queue.pk)

    return _hits_action(request, project_id, HitsQueueForm, act)


@require_POST
def hits_dataset(request: HtmxHttpRequest, project_id: int) -> HttpResponse:
    def act(project, membership, data, ids, what):
        version = selection.dataset_from_steps(
            project,
            request.user,
            ids,
            data["name"],
            what=what,
            confirm_rejected=data.get("confirm_rejected", False),
        )
        messages.success(
            request,
            f"Made version {version.number} of the dataset “{version.dataset.name}” "
            f"({selection.plural(version.item_count, 'step')}).",
        )
        return redirect("dataset_detail", dataset_id=version.dataset_id)

    return _hits_action(request, project_id, HitsDatasetForm, act)


urlpatterns = [
    path("projects/<int:project_id>/search/", search_page, name="search"),
    path("projects/<int:project_id>/search/save/", saved_search_create, name="saved_search_create"),
    path("saved-searches/<int:saved_id>/delete/", saved_search_delete, name="saved_search_delete"),
    path("projects/<int:project_id>/search/tag/", hits_tag, name="search_hits_tag"),
    path("projects/<int:project_id>/search/queue/", hits_queue, name="search_hits_queue"),
    path("projects/<int:project_id>/search/dataset/", hits_dataset, name="search_hits_dataset"),
]
