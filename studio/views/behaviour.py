"""Behaviour search: a project's searches and the form that starts one (researchers and
admins; annotators see the searches and their results), a search's live page (htmx polls it
and stops when it ends) with its matches grouped by cluster, filterable by cluster and by
yes/no, and the action that makes a cluster's matches, or all of them, a tag, an annotation
queue or a dataset (`studio.services.step_selection`)."""

from __future__ import annotations

from urllib.parse import urlencode

from django.contrib import messages
from django.http import Http404, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.template.loader import render_to_string
from django.urls import path, reverse
from django.views.decorators.http import require_http_methods, require_POST
from django_htmx.http import HttpResponseStopPolling

from studio.access import get_project_for_user, require_edit
from studio.forms.behaviour import BehaviourForm, MakeForm, sentence
from studio.forms.refusals import show_refusal
from studio.http import HtmxHttpRequest, whole_number
from studio.models import BehaviourCluster, BehaviourSearch, Membership
from studio.presenters import behaviour as present
from studio.services import behaviour as service
from studio.services import step_selection
from studio.services.blinding import blindness_for
from studio.services.embeddings import embedding_endpoint
from studio.services.job_limits import TooManyJobs
from studio.tasks import enqueue_behaviour_search

LISTED = 200  # the newest searches the list shows
READ_ONLY = (
    "Annotators read behaviour searches and their results; a researcher or an admin starts, "
    "cancels or resumes them and makes tags, queues or datasets of them."
)


def _get_search_for_user(
    request: HtmxHttpRequest, pk: int, *, edit: bool = False
) -> tuple[BehaviourSearch, Membership]:
    """The search, when the user is a member of its project (404 otherwise; 403 for an
    annotator with `edit`)."""
    job = get_object_or_404(
        BehaviourSearch.objects.select_related("project", "judge_endpoint", "embedding_endpoint"),
        pk=pk,
    )
    _, membership = get_project_for_user(request, job.project_id)
    if edit:
        require_edit(membership, READ_ONLY)
    return job, membership


def behaviour_list(request: HtmxHttpRequest, project_id: int) -> HttpResponse:
    project, membership = get_project_for_user(request, project_id)
    blindness = blindness_for(membership)
    every = service.jobs_of(project)
    jobs = list(every[:LISTED])
    counts = service.visible_counts(jobs, blindness)
    for job in jobs:
        job.status_text = present.status_text(job)  # type: ignore[attr-defined]
        job.shown = counts[job.pk]  # type: ignore[attr-defined]
    return render(
        request,
        "behaviour/list.html",
        {
            "project": project,
            "membership": membership,
            "jobs": jobs,
            "not_listed": every.count() - len(jobs) if len(jobs) == LISTED else 0,
            "can_edit": membership.can_edit,
            "hidden_note": blindness.note() if blindness else "",
        },
    )


@require_http_methods(["GET", "POST"])
def behaviour_new(request: HtmxHttpRequest, project_id: int) -> HttpResponse:
    project, membership = get_project_for_user(request, project_id)
    require_edit(membership, READ_ONLY)
    initial = {k: request.GET[k] for k in ("description", "query", "unit") if k in request.GET}
    form = BehaviourForm(request.POST or None, project=project, initial=initial)
    status = 200
    if request.method == "POST":
        status = 400
        if form.is_valid():
            try:
                job = service.start_behaviour_search(project, request.user, form.data_object())
            except TooManyJobs as exc:
                status = show_refusal(form, exc)
            except service.InvalidSearch as exc:
                field = exc.field if exc.field in form.fields else None
                form.add_error(field, sentence(exc.message))
            else:
                enqueue_behaviour_search(job)
                return redirect("behaviour_job", job_id=job.pk)
    embedder = embedding_endpoint(project)
    return render(
        request,
        "behaviour/new.html",
        {
            "project": project,
            "membership": membership,
            "form": form,
            "has_judge": form.fields["judge"].queryset.exists(),  # type: ignore[attr-defined]
            "embedder": embedder,
        },
        status=status,
    )


_number = whole_number


def _filters(request: HtmxHttpRequest) -> dict[str, str]:
    match = request.GET.get("match", "yes")
    if match not in service.FILTERS:
        match = "yes"
    cluster = request.GET.get("cluster", "")
    if cluster != "none" and _number(cluster) is None:
        cluster = ""
    return {"match": match, "cluster": cluster}


def _page(request: HtmxHttpRequest) -> int:
    return _number(request.GET.get("page", "1")) or 1


def _job_context(request: HtmxHttpRequest, job: BehaviourSearch, membership: Membership) -> dict:
    blindness = blindness_for(membership)
    filters = _filters(request)
    found = service.results(
        job, blindness, match=filters["match"], cluster=filters["cluster"], page=_page(request)
    )
    cluster = None
    cluster_id = _number(filters["cluster"])
    if cluster_id is not None:
        cluster = next((c for c in found.clusters if c.pk == cluster_id), None)
        if cluster is None and not BehaviourCluster.objects.filter(pk=cluster_id, job=job).exists():
            raise Http404("No such cluster of this search")
    base = reverse("behaviour_job", args=[job.pk])

    def link(**changes: str) -> str:
        query = {**filters, **changes}
        query = {k: v for k, v in query.items() if v and not (k == "match" and v == "yes")}
        return f"{base}?{urlencode(query)}" if query else base

    for label in found.labels:
        label.confidence_text = present.confidence_text(label.confidence)  # type: ignore[attr-defined]
    done = job.is_finished
    return {
        "project": job.project,
        "membership": membership,
        "job": job,
        "done": done,
        "found": found,
        "filters": filters,
        "cluster": cluster,
        "status_text": present.status_text(job),
        "phase_text": present.phase_text(job),
        "cost_rows": present.cost_rows(job),
        "can_edit": membership.can_edit,
        "can_resume": job.status in ("failed", "cancelled"),
        "poll_url": request.get_full_path(),
        "links": {
            "all_clusters": link(cluster=""),
            "unclustered": link(cluster="none"),
            "yes": link(match="yes"),
            "no": link(match="no", cluster=""),
            "failed": link(match="failed", cluster=""),
            "all": link(match="all", cluster=""),
            "previous": link(page=str(found.page - 1)) if found.page > 1 else "",
            "next": link(page=str(found.page + 1)) if found.page < found.pages else "",
        },
        "cluster_rows": [(c, link(cluster=str(c.pk), match="yes")) for c in found.clusters],
        "no_count": found.labelled - found.matched,
        # not labelled yet (running), or never asked (stopped, or its step deleted since)
        "waiting": max(0, found.candidates - found.labelled - found.failed),
        "clustered_by": present.clustered_by(job),
        "chosen_text": present.chosen_text(job),
        "default_name": _default_name(job, cluster),
        "can_make": membership.can_edit and done and found.matched > 0,
        "ranking_error": (job.params or {}).get("ranking_error", ""),
        "clustering_error": (job.params or {}).get("clustering_error", ""),
        "embedding_error": (job.params or {}).get("embedding_error", ""),
    }


def _default_name(job: BehaviourSearch, cluster: service.ClusterView | None) -> str:
    """A name for what the matches are made into: the search and its group, plain text."""
    what = cluster.name if cluster is not None else job.description
    name = f"behaviour {job.pk}: {what}".replace("<", "").replace(">", "")
    return name[:100].strip()


def behaviour_job(request: HtmxHttpRequest, job_id: int) -> HttpResponse:
    job, membership = _get_search_for_user(request, job_id)
    context = _job_context(request, job, membership)
    if request.htmx:
        html = render_to_string("behaviour/job.html#live", context, request=request)
        return HttpResponseStopPolling(html) if context["done"] else HttpResponse(html)
    return render(request, "behaviour/job.html", context)


@require_POST
def behaviour_cancel(request: HtmxHttpRequest, job_id: int) -> HttpResponse:
    job, _ = _get_search_for_user(request, job_id, edit=True)
    if job.is_finished:
        messages.error(request, f"Behaviour search {job.pk} has already ended ({job.status}).")
    else:
        service.cancel_search(job)
        messages.success(request, "Stopping: the candidates already labelled are kept.")
    return redirect("behaviour_job", job_id=job.pk)


@require_POST
def behaviour_resume(request: HtmxHttpRequest, job_id: int) -> HttpResponse:
    job, _ = _get_search_for_user(request, job_id, edit=True)
    try:
        resumed = service.resume_search(job)
    except TooManyJobs as exc:
        messages.error(request, f"Behaviour search {job.pk} was not resumed: {exc.message}.")
        return redirect("behaviour_job", job_id=job.pk)
    if resumed:
        job.refresh_from_db()
        enqueue_behaviour_search(job)
        messages.success(
            request,
            "Resumed: the candidates not labelled yet, and those that failed, are asked about; "
            "the labels are kept.",
        )
    else:
        messages.error(
            request, f"Behaviour search {job.pk} is {job.status}: only a stopped one resumes."
        )
    return redirect("behaviour_job", job_id=job.pk)


@require_POST
def behaviour_make(request: HtmxHttpRequest, job_id: int) -> HttpResponse:
    """A cluster's matches (or all of them) made into a tag, a queue or a dataset."""
    job, _ = _get_search_for_user(request, job_id, edit=True)
    form = MakeForm(request.POST)
    back = reverse("behaviour_job", args=[job.pk])
    if not form.is_valid():
        # the field's own message names what is wrong (a missing or unusable name...)
        problems = "; ".join(
            str(error).rstrip(".") for errors in form.errors.values() for error in errors
        )
        messages.error(request, f"Nothing was made: {problems}.")
        return redirect(back)
    data = form.cleaned_data
    cluster = None
    if data["cluster"]:
        cluster_id = _number(data["cluster"])
        if cluster_id is None:
            raise Http404("No such cluster")
        cluster = get_object_or_404(BehaviourCluster, pk=cluster_id, job=job)
        back += f"?cluster={cluster.pk}"
    if not job.is_finished:  # its matches and groups are not all in yet
        messages.error(request, "Nothing was made: the search has not ended yet.")
        return redirect(back)
    chosen = service.selection(job, cluster)
    left_out = (
        f" ({chosen.without_step} match{'es' if chosen.without_step != 1 else ''} of whole "
        "trajectories named no step and were left out)"
        if chosen.without_step
        else ""
    )
    project = job.project
    try:
        if data["make"] == "tag":
            tagged = step_selection.tag_trajectories(project, chosen.step_ids, data["name"])
            messages.success(
                request,
                f"Tagged {tagged.trajectories} trajector{'ies' if tagged.trajectories != 1 else 'y'} "
                f"{tagged.tag!r} ({tagged.newly_tagged} newly){left_out}.",
            )
            return redirect(
                reverse("library", args=[project.pk]) + "?" + urlencode({"tag": tagged.tag})
            )
        if data["make"] == "queue":
            queue = step_selection.queue_from_steps(
                project,
                request.user,
                chosen.step_ids,
                data["name"],
                what=chosen.what,
                blind=data["blind"],
            )
            messages.success(
                request, f"Made the queue {queue.name!r} of {queue.items.count()} steps{left_out}."
            )
            return redirect("queue_detail", queue_id=queue.pk)
        version = step_selection.dataset_from_steps(
            project,
            request.user,
            chosen.step_ids,
            data["name"],
            what=chosen.what,
            confirm_rejected=data["confirm_rejected"],
        )
        messages.success(
            request,
            f"Made version {version.number} of the dataset {version.dataset.name!r}{left_out}.",
        )
        return redirect(
            reverse("dataset_detail", args=[version.dataset_id]) + f"?version={version.number}"
        )
    except step_selection.SelectionError as exc:
        messages.error(request, f"Nothing was made: {exc}.")
        return redirect(back)


urlpatterns = [
    path("projects/<int:project_id>/behaviour/", behaviour_list, name="behaviour_list"),
    path("projects/<int:project_id>/behaviour/new/", behaviour_new, name="behaviour_new"),
    path("behaviour/<int:job_id>/", behaviour_job, name="behaviour_job"),
    path("behaviour/<int:job_id>/cancel/", behaviour_cancel, name="behaviour_cancel"),
    path("behaviour/<int:job_id>/resume/", behaviour_resume, name="behaviour_resume"),
    path("behaviour/<int:job_id>/make/", behaviour_make, name="behaviour_make"),
]
