"""Branch tree, compare, rename, star and delete."""

from __future__ import annotations

from urllib.parse import parse_qs, urlparse

from django.contrib import messages
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.urls import path, reverse
from django.views.decorators.http import require_http_methods, require_POST

from inference.simulation.limits import MODES
from studio.access import get_branch_for_user, get_trajectory_for_user
from studio.forms.branching import CompareForm, CompareRowsForm, RenameBranchForm
from studio.http import HtmxHttpRequest, back_url
from studio.models import Branch, Step
from studio.models.trajectories import BranchOrigin
from studio.presenters.compare import column_heads, compare_models, model_filter
from studio.presenters.futures import outcome_figure
from studio.presenters.model_colours import RECORDED_COLOUR, colour_map, colour_of
from studio.presenters.tree import (
    LABEL_LIMIT,
    build_tree_figure,
    filter_nodes_by_model,
    model_filter_choices,
)
from studio.services.branches import (
    BranchError,
    check_delete_branch,
    do_delete_branch,
    do_rename_branch,
    do_toggle_star,
    group_forks,
    group_key,
    layout_tree,
    name_tree_models,
    tree_nodes,
)
from studio.services.compare import (
    Comparison,
    build_comparison,
    compare_row,
    jump_window,
    run_window,
    scan_window,
    start_comparison,
)
from studio.services.futures import default_columns, summarise_fork
from studio.services.model_identity import identities_of_jobs, models_of_trajectory


def _int_or_none(value: str | None) -> int | None:
    try:
        return int(value) if value not in (None, "") else None
    except ValueError:
        return None


def _current_branch_id(request: HtmxHttpRequest) -> int | None:
    """`?branch=` of this request, or of the page that loaded this fragment with htmx."""
    current = _int_or_none(request.GET.get("branch"))
    if current is None and request.htmx and request.htmx.current_url:
        query = parse_qs(urlparse(request.htmx.current_url).query)
        current = _int_or_none((query.get("branch") or [""])[0])
    return current


def branch_page_url(branch: Branch) -> str:
    return f"{reverse('trajectory', args=[branch.trajectory_id])}?branch={branch.pk}"


def _with_expand(request: HtmxHttpRequest) -> str:
    """This page's URL, for links that open one more group (`&expand=<parent>:<step>`)."""
    query = request.GET.copy()
    query.pop("expand", None)
    kept = "".join(f"&expand={key}" for key in request.GET.getlist("expand"))
    assert request.resolver_match is not None
    tree = reverse("branch_tree", args=[request.resolver_match.kwargs["trajectory_id"]])
    return f"{tree}?{query.urlencode()}{kept}"


def branch_tree(request: HtmxHttpRequest, trajectory_id: int) -> HttpResponse:
    """The Plotly tree of all branches plus a branch list to pick branches to compare. A
    fragment for the trajectory page (htmx) and a page of its own otherwise."""
    trajectory, membership = get_trajectory_for_user(request, trajectory_id)
    current_id = _current_branch_id(request)
    every = tree_nodes(trajectory)
    episode = trajectory.source_format == "episode"  # its served steps name models too
    name_tree_models(every, episode=episode)
    colours = colour_map(models_of_trajectory(trajectory.pk, episode=episode))
    models = model_filter_choices(every, colours)
    shown, model_filter = filter_nodes_by_model(every, request.GET.get("model", ""), models)
    standalone = not request.htmx
    if current_id is None and not standalone:
        # The trajectory page without `?branch=` shows the recorded branch: that is current.
        current_id = next((n.pk for n in every if n.parent_id is None), None)
    # Large sets of sibling futures collapse into one node; "expand" opens them, and the
    # current branch's own set is always open.
    expanded = set(request.GET.getlist("expand"))
    current = next((n for n in every if n.pk == current_id), None)
    if current is not None and current.parent_id is not None:
        expanded.add(group_key(current.parent_id, current.fork_index))
    nodes = layout_tree(group_forks(shown, expanded=expanded))
    figure = build_tree_figure(
        trajectory, current_id, nodes=nodes, compact=not standalone, colours=models.colours
    )
    by_row = sorted(nodes, key=lambda n: n.y)
    # "Compare all children of one fork" links: children grouped by parent and fork step.
    groups: dict[int, dict[int, int]] = {}
    for n in every:
        if n.parent_id is not None and n.origin != BranchOrigin.RECORDED:  # futures only
            at = groups.setdefault(n.parent_id, {})
            at[n.fork_index] = at.get(n.fork_index, 0) + 1
    for n in by_row:
        n.fork_groups = sorted((at, c) for at, c in groups.get(n.pk, {}).items() if c > 1)
    # Back links from forms in the fragment lead to the page the user is on.
    here = (request.htmx.current_url if request.htmx else None) or request.get_full_path()
    context = {
        "trajectory": trajectory,
        "project": trajectory.project,
        "membership": membership,
        "figure": figure,
        "figure_id": f"branch-tree-figure-{trajectory.pk}",
        "nodes": by_row,
        "current_id": current_id,
        "collapsed": len(by_row) > LABEL_LIMIT,
        "n_branches": len(every),
        "models": models,
        "recorded_colour": RECORDED_COLOUR,
        "model_filter": model_filter,
        "expand_url": _with_expand(request),
        "here": here,
        "can_edit": membership.can_edit,
        "standalone": standalone,
    }
    template = "branches/tree.html" if standalone else "branches/tree.html#tree"
    return render(request, template, context)


def branch_compare(request: HtmxHttpRequest, trajectory_id: int) -> HttpResponse:
    trajectory, membership = get_trajectory_for_user(request, trajectory_id)
    branches = list(trajectory.branches.order_by("pk"))
    asked = any(key in request.GET for key in ("b", "fork"))
    form = CompareForm(request.GET if asked else None, branches=branches)
    # every column names its model, in the colours of the tree (one query for the jobs)
    identities = identities_of_jobs(b.job_id for b in branches)
    episode = trajectory.source_format == "episode"  # its served steps name models too
    colours = colour_map(models_of_trajectory(trajectory.pk, episode=episode))
    models = compare_models(branches, identities, colours)
    by_model = model_filter(request.GET.get("model", ""), models)
    keep = None
    chosen_model = by_model.choice if by_model is not None else None
    if chosen_model is not None:
        token = chosen_model.token

        def keep(b: Branch) -> bool:
            identity = identities.get(b.job_id) if b.job_id is not None else None
            return b.origin == BranchOrigin.RECORDED or (
                identity is not None and identity.token == token
            )

    comparison = None
    diff = "meaning"
    summary = None
    summary_figure = None
    if asked and form.is_valid():
        diff = form.cleaned_data.get("diff") or "meaning"
        selected: list[Branch] = form.cleaned_data.get("selected") or []
        if form.cleaned_data.get("fork_parent") is not None:
            action = form.cleaned_data.get("action") or None
            summary = summarise_fork(
                form.cleaned_data["fork_parent"], form.cleaned_data["at"], action=action
            )
            if action and (summary.action is None or summary.action.key != action):
                form.add_error(
                    "action",
                    f"No futures at step {summary.fork_index} of {summary.parent.name!r} were "
                    "given this action (its futures may have been deleted).",
                )
                summary = None
            else:
                chosen = form.cleaned_data["chosen"]
                if keep is not None:
                    # ticked columns of the model filtered by; none (another model's were
                    # ticked): this model's default columns
                    chosen = [b for b in chosen if keep(b)]
                    if all(b.origin == BranchOrigin.RECORDED for b in chosen):
                        chosen = []
                selected = chosen or default_columns(summary, keep=keep)
                summary_figure = outcome_figure(summary, colours)
        elif keep is not None and chosen_model is not None and form.is_valid():
            kept = [b for b in selected if keep(b)]
            if not kept:
                form.add_error(
                    None,
                    f"None of the branches picked was made by {chosen_model.label}: pick "
                    "others, or show every model.",
                )
            selected = kept
    if asked and form.is_valid():
        comparison = build_comparison(
            trajectory, selected, diff=diff, start=form.cleaned_data["start"]
        )
    return render(
        request,
        "branches/compare.html",
        {
            "trajectory": trajectory,
            "project": trajectory.project,
            "membership": membership,
            "compared_ids": ",".join(str(b.pk) for b in comparison.branches)
            if comparison is not None
            else "",
            "form": form,
            "comparison": comparison,
            "branches": branches,
            "pick_heads": column_heads(branches, identities, colours),
            "heads": column_heads(comparison.branches, identities, colours) if comparison else [],
            "colours": colours,
            "models": models,
            "model_filter": by_model,
            "model_token": chosen_model.token if chosen_model is not None else "",
            "selected_ids": [b.pk for b in comparison.branches] if comparison else [],
            "diff": diff,
            "summary": summary,
            "summary_figure": summary_figure,
            "mode_words": {key: words.lower() for key, words in MODES.items()},
            "group_colours": {g.number: colour_of(g.identity, colours) for g in summary.models}
            if summary
            else {},
            "max_columns": CompareForm.MAX_BRANCHES,
            **(_rows_context(trajectory, comparison) if comparison is not None else {}),
        },
        status=400 if asked and comparison is None else 200,
    )


def _rows_context(trajectory, comparison: Comparison) -> dict:
    """What the rows partial needs besides the window: the URLs of the next windows and of
    one cell in full, which name the compared branches and the diff."""
    query = "&".join(f"b={b.pk}" for b in comparison.branches) + f"&diff={comparison.diff}"
    return {
        "comparison": comparison,
        "window": comparison.window,
        "diff": comparison.diff,
        "rows_url": f"{reverse('branch_compare_rows', args=[trajectory.pk])}?{query}",
        "columns": len(comparison.branches) + 1,
    }


def branch_compare_rows(request: HtmxHttpRequest, trajectory_id: int) -> HttpResponse:
    """One window of a comparison's rows (htmx, as the page scrolls or a run opens), or one
    cell in full (`at` and `column`: "Show all")."""
    trajectory, membership = get_trajectory_for_user(request, trajectory_id)
    form = CompareRowsForm(request.GET, branches=list(trajectory.branches.order_by("pk")))
    if not form.is_valid():
        # Only a stale or edited URL gets here (a branch deleted since the page loaded): the
        # row that asked says why, in place.
        problems = [
            " ".join(map(str, errs)) if name == "__all__" else f"{name}: {' '.join(map(str, errs))}"
            for name, errs in form.errors.items()
        ]
        return render(
            request,
            "branches/compare.html#rows-error",
            {"problems": problems, "columns": CompareForm.MAX_BRANCHES + 1},
            status=400,
        )
    data = form.cleaned_data
    comparison = start_comparison(trajectory, data["selected"], diff=data.get("diff") or "meaning")
    context: dict[str, object] = {"trajectory": trajectory, "membership": membership}
    if data.get("at") is not None:
        row = compare_row(comparison, data["at"])
        if row is None:
            raise Http404(
                f"No step {data['at']} in these branches (the last is {comparison.last})."
            )
        cell = next(c for c in row.cells if c.branch.pk == data["column"])
        context.update(_rows_context(trajectory, comparison), row=row, cell=cell, full=True)
        return render(request, "branches/compare.html#cell", context)
    if data.get("jump") is not None:
        comparison.window = jump_window(
            comparison,
            data["start"],
            data["jump"],
            open_run=data.get("run"),
            run_end=data.get("to"),
            until=data.get("until"),
        )
    elif data.get("to") is not None:
        comparison.window = run_window(comparison, data["start"], data["to"])
    else:
        comparison.window = scan_window(
            comparison, data["start"], open_run=data.get("run"), until=data.get("until")
        )
    context.update(_rows_context(trajectory, comparison))
    return render(request, "branches/compare.html#rows", context)


@require_POST
def branch_rename(request: HtmxHttpRequest, branch_id: int) -> HttpResponse:
    branch, _ = get_branch_for_user(request, branch_id, edit=True)
    form = RenameBranchForm(request.POST)
    if form.is_valid():
        old = branch.name
        do_rename_branch(branch, form.cleaned_data["name"])
        messages.success(request, f"Renamed branch {old!r} to {branch.name!r}.")
    else:
        messages.error(
            request, f"Branch not renamed: {' '.join(str(e) for e in form.errors['name'])}"
        )
    return redirect(back_url(request, branch_page_url(branch)))


@require_POST
def branch_star(request: HtmxHttpRequest, branch_id: int) -> HttpResponse:
    branch, _ = get_branch_for_user(request, branch_id, edit=True)
    do_toggle_star(branch)
    word = "Starred" if branch.starred else "Unstarred"
    messages.success(request, f"{word} branch {branch.name!r}.")
    return redirect(back_url(request, branch_page_url(branch)))


@require_http_methods(["GET", "POST"])
def branch_delete(request: HtmxHttpRequest, branch_id: int) -> HttpResponse:
    """GET: what will be deleted, with a confirmation button. POST: delete it."""
    branch, membership = get_branch_for_user(request, branch_id, edit=True)
    trajectory = branch.trajectory
    after = f"{reverse('trajectory', args=[trajectory.pk])}?branch={branch.parent_id or branch.pk}"
    try:
        doomed = check_delete_branch(branch)
    except BranchError as exc:
        if request.method == "POST":
            messages.error(request, str(exc))
            return redirect(branch_page_url(branch))
        doomed, error = [], str(exc)
    else:
        error = ""
    if request.method == "POST" and not error:
        try:
            count = do_delete_branch(branch)
        except BranchError as exc:  # something started running in between
            messages.error(request, str(exc))
            return redirect(branch_page_url(branch))
        messages.success(
            request,
            f"Deleted branch {branch.name!r}"
            + (f" and {count - 1} descendant branch(es)." if count > 1 else "."),
        )
        return redirect(after)
    n_steps = Step.objects.filter(branch__in=[b.pk for b in doomed]).count() if doomed else 0
    return render(
        request,
        "branches/delete.html",
        {
            "trajectory": trajectory,
            "project": trajectory.project,
            "membership": membership,
            "branch": branch,
            "doomed": doomed,
            "n_steps": n_steps,
            "error": error,
        },
        status=409 if error else 200,
    )


urlpatterns = [
    path("trajectories/<int:trajectory_id>/tree/", branch_tree, name="branch_tree"),
    path("trajectories/<int:trajectory_id>/compare/", branch_compare, name="branch_compare"),
    path(
        "trajectories/<int:trajectory_id>/compare/rows/",
        branch_compare_rows,
        name="branch_compare_rows",
    ),
    path("branches/<int:branch_id>/rename/", branch_rename, name="branch_rename"),
    path("branches/<int:branch_id>/star/", branch_star, name="branch_star"),
    path("branches/<int:branch_id>/delete/", branch_delete, name="branch_delete"),
]
