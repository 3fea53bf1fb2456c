"""The trajectory page: header, branch selector and a step timeline that loads in windows.

The first response holds one window of steps (STEPS_PER_PAGE, or the setting
STUDIO_STEPS_PER_WINDOW); a sentinel at its end loads the next window when it scrolls into
view. Observations longer than PREVIEW_CHARS are sent as their first characters (the
database cuts them: the full text never leaves it) with a button that loads the full
rendering. So the page costs the same few queries and roughly the same bytes whatever the
trajectory's length.

The browser keeps at most STUDIO_STEP_WINDOWS_KEPT windows (default WINDOWS_KEPT) holding at
most STUDIO_STEP_ELEMENTS_KEPT elements (default ELEMENTS_KEPT) in the page, besides those
near the viewport: `static/js/ui.js` turns windows far from the viewport into empty
placeholders of the same height and loads them again (`dir=none`: the window alone) when
they come back near."""

from __future__ import annotations

from django.conf import settings
from django.db.models import QuerySet
from django.db.models.functions import Length, Substr
from django.http import Http404, HttpResponse, StreamingHttpResponse
from django.shortcuts import render
from django.template.loader import render_to_string
from django.urls import path, reverse
from django.utils.html import format_html
from django_htmx.http import HttpResponseStopPolling

from studio.access import get_branch_for_user, get_step_for_user, get_trajectory_for_user
from studio.http import HtmxHttpRequest, streaming_response
from studio.models import Branch, BranchOrigin, Campaign, Step, Trajectory
from studio.presenters.episode_rewards import annotate_steps, episode_summary
from studio.presenters.model_colours import colour_map
from studio.rendering import render_observation
from studio.rendering.bounded import bounded_text
from studio.services.exports import export_chunks
from studio.services.model_identity import (
    identities_of_jobs,
    identity_of_step,
    job_of_step,
    models_of_trajectory,
)

STEPS_PER_PAGE = 25
PREVIEW_CHARS = 32_000
# Windows of steps the browser keeps loaded, and elements in them, beyond the windows near
# the viewport (a window of 25 terminal steps of 100 KB coloured output is ~1,700 elements,
# of 20 KB ~7,000: their whole text is shown): the page stays under ~15,000 elements however
# far one scrolls.
WINDOWS_KEPT = 6
ELEMENTS_KEPT = 12_000


def steps_per_window() -> int:
    return max(1, int(getattr(settings, "STUDIO_STEPS_PER_WINDOW", STEPS_PER_PAGE)))


def windows_kept() -> int:
    return max(2, int(getattr(settings, "STUDIO_STEP_WINDOWS_KEPT", WINDOWS_KEPT)))


def elements_kept() -> int:
    return max(1000, int(getattr(settings, "STUDIO_STEP_ELEMENTS_KEPT", ELEMENTS_KEPT)))


def _int_param(request: HtmxHttpRequest, name: str) -> int | None:
    raw = request.GET.get(name, "").strip()
    if not raw:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise Http404(f"{name} must be a whole number, got {raw!r}") from None
    if value < 0:
        raise Http404(f"{name} must not be negative")
    return value


def _select_branch(trajectory: Trajectory, branches: list[Branch], branch_id: int | None) -> Branch:
    if branch_id is None and trajectory.source_format == "world":
        # started in a world, its root is empty: the page opens on the branch played last
        played = [b for b in branches if b.origin == BranchOrigin.PLAYED]
        if played:
            return played[-1]
    for branch in branches:
        if (branch_id is None and branch.parent_id is None) or branch.pk == branch_id:
            return branch
    if branch_id is None:
        raise Http404("This trajectory has no root branch")
    raise Http404(f"Branch {branch_id} is not a branch of trajectory {trajectory.pk}")


def step_window(branch: Branch, start: int, size: int) -> QuerySet[Step]:
    """Steps start..start+size (one extra to tell whether more follow), with only the first
    PREVIEW_CHARS of each observation and its length."""
    return (
        branch.all_steps()
        .filter(index__gte=start, index__lt=start + size + 1)
        .defer("observation", "raw_prompt", "raw_output")
        .annotate(obs_head=Substr("observation", 1, PREVIEW_CHARS), obs_len=Length("observation"))
    )


def no_model_asked(step: Step) -> str:
    """What wrote a simulated step's observation when no world model was asked (its meta
    says `model_call: false`: a deterministic perturbation answered in the model's place),
    in words for its header ("perturbation Disk full: no model was asked"); "" when a model
    was asked, or the step is recorded or has no observation (the submit action's)."""
    meta = step.meta if isinstance(step.meta, dict) else {}
    if meta.get("model_call") is not False or step.observation_source in ("recorded", "none"):
        return ""
    perturbation = meta.get("perturbation")
    if isinstance(perturbation, dict):
        name = perturbation.get("label") or perturbation.get("name") or perturbation.get("kind")
        if name:
            return f"perturbation {name}: no model was asked"
    return "no model was asked"


def campaign_of(trajectory: Trajectory) -> dict | None:
    """The campaign that played this episode (`metadata["campaign"]`), with its name now,
    when it is still one of the trajectory's project's; else None."""
    found = (trajectory.metadata or {}).get("campaign")
    if not isinstance(found, dict):
        return None
    pk = found.get("id")
    if isinstance(pk, bool) or not isinstance(pk, int):
        return None
    row = (
        Campaign.objects.filter(pk=pk, project_id=trajectory.project_id)
        .values("pk", "name")
        .first()
    )
    return {"id": row["pk"], "name": row["name"]} if row else None


def _name_models(
    trajectory: Trajectory,
    branch: Branch,
    steps: list[Step],
    branches: list[Branch] | None = None,
) -> dict:
    """Each step's `identity` (the world model that wrote its observation, None: recorded),
    the branch's own, and the page's colours; with `branches` (the page's side list, read
    already) each of those gets its `identity` too. Two or three small queries whatever the
    window."""
    branch_jobs: dict[int, int | None]
    if branches is None:
        lineage_ids = [pk for pk, _ in (branch.lineage or branch.compute_lineage())]
        branch_jobs = dict(Branch.objects.filter(pk__in=lineage_ids).values_list("pk", "job_id"))
    else:
        branch_jobs = {b.pk: b.job_id for b in branches}
    step_jobs = [job_of_step(step, branch_jobs) for step in steps]
    identities = identities_of_jobs([*step_jobs, *branch_jobs.values(), branch.job_id])
    for step in steps:
        unasked = no_model_asked(step)
        # no model answered: none is named (its job's model ran the job's other steps)
        step.unasked = unasked  # type: ignore[attr-defined]
        # its job's model, else (a served episode step, no job) the one its meta records
        step.identity = (  # type: ignore[attr-defined]
            None if unasked else identity_of_step(step, branch_jobs, identities)
        )
    for b in branches or ():
        b.identity = identities.get(b.job_id) if b.job_id else None  # type: ignore[attr-defined]
    return {
        "branch_identity": identities.get(branch.job_id) if branch.job_id else None,
        "model_colours": colour_map(
            models_of_trajectory(trajectory.pk, episode=trajectory.source_format == "episode")
        ),
    }


def _window_context(
    trajectory: Trajectory, branch: Branch, start: int, branches: list[Branch] | None = None
) -> dict:
    size = steps_per_window()
    rows = list(step_window(branch, start, size))
    steps = rows[:size]
    annotate_steps(steps, trajectory)  # an episode's rewards, rubric, state per step
    return {
        **_name_models(trajectory, branch, steps, branches),
        "trajectory": trajectory,
        "branch": branch,
        "steps": steps,
        "start": start,
        "end": start + len(steps) - 1,
        "prev_start": max(0, start - size) if start > 0 else None,
        "next_start": start + size if len(rows) > size else None,
        "page_size": size,
        "windows_kept": windows_kept(),
        "elements_kept": elements_kept(),
    }


def trajectory_page(request: HtmxHttpRequest, trajectory_id: int) -> HttpResponse:
    trajectory, membership = get_trajectory_for_user(request, trajectory_id)
    branches = list(trajectory.branches.order_by("id"))
    branch = _select_branch(trajectory, branches, _int_param(request, "branch"))
    total = branch.all_steps().count()
    jump = _int_param(request, "step")
    start = 0
    if jump is not None and total:
        jump = min(jump, total - 1)
        start = jump - jump % steps_per_window()
    context = {
        "project": trajectory.project,
        "membership": membership,
        "can_edit": membership.can_edit,
        "branches": branches,
        "total_steps": total,
        "jump": jump,
        "tags": list(trajectory.tags.all()),
        "campaign": campaign_of(trajectory) if trajectory.source_format == "episode" else None,
        "episode_summary": episode_summary(trajectory),
        # a running episode's root grows: the page polls `trajectory_live` for its new steps
        "episode_live": branch.is_root
        and (episode_summary(trajectory) or {}).get("status") == "running",
        # the side list names the model of each future too (`_name_models`)
        **_window_context(trajectory, branch, start, branches),
    }
    return render(request, "trajectories/trajectory.html", context)


def trajectory_steps(request: HtmxHttpRequest, trajectory_id: int) -> HttpResponse:
    """One window of steps (the htmx partial behind lazy loading and jumping)."""
    trajectory, membership = get_trajectory_for_user(request, trajectory_id)
    branch_id = _int_param(request, "branch")
    if branch_id is None:
        branch = trajectory.branches.filter(parent__isnull=True).first()
    else:
        branch = trajectory.branches.filter(pk=branch_id).first()
    if branch is None:
        raise Http404(f"Branch {branch_id} is not a branch of trajectory {trajectory.pk}")
    start = _int_param(request, "start") or 0
    # Windows are aligned, so one loaded above or below the shown ones never overlaps them.
    start -= start % steps_per_window()
    context = {"membership": membership, **_window_context(trajectory, branch, start)}
    # A window loaded below the shown ones (`dir=down`, the scroll sentinel) must not bring a
    # "load earlier steps" button: those steps are already on the page; one loaded above
    # (`dir=up`) must not bring a sentinel for the steps below it; one loaded again into its
    # placeholder (`dir=none`) brings neither. A window that replaces the timeline (jump to a
    # step) has both.
    direction = request.GET.get("dir", "")
    if direction in ("down", "none"):
        context["prev_start"] = None
    if direction in ("up", "none"):
        context["next_start"] = None
    return render(request, "trajectories/trajectory.html#steps", context)


def trajectory_live(request: HtmxHttpRequest, trajectory_id: int) -> HttpResponse:
    """What a running episode's page polls: the root branch's steps from `after` (the first
    index the page lacks; absent: none, the page's own windows load the steps below it), at
    most a window of them, in the aligned windows they belong to (`static/js/episode_live.js`
    adds them to the page's windows, so a window loaded again later holds them once), and
    the header's status, step count and summary. Once the episode has ended and its last
    step is sent: 286, and htmx stops polling."""
    trajectory, membership = get_trajectory_for_user(request, trajectory_id)
    branch = trajectory.branches.filter(parent__isnull=True).first()
    if branch is None:
        raise Http404("This trajectory has no root branch")
    after = _int_param(request, "after")
    size = steps_per_window()
    windows: list[str] = []
    more = False
    if after is not None:
        rows = list(step_window(branch, after, size))
        more = len(rows) > size
        steps = rows[:size]
        annotate_steps(steps, trajectory)
        names = _name_models(trajectory, branch, steps)
        by_window: dict[int, list[Step]] = {}
        for step in steps:
            by_window.setdefault(step.index - step.index % size, []).append(step)
        for start, chunk in by_window.items():
            context = {
                **names,
                "membership": membership,
                "can_edit": membership.can_edit,
                "trajectory": trajectory,
                "branch": branch,
                "steps": chunk,
                "start": start,
                "end": chunk[-1].index,
                "prev_start": None,
                "next_start": None,
            }
            windows.append(render_to_string("trajectories/trajectory.html#steps", context, request))
    status = str(((trajectory.metadata or {}).get("episode") or {}).get("status") or "running")
    html = render_to_string(
        "trajectories/episode_live.html",
        {
            "trajectory": trajectory,
            "windows": windows,
            "status": status,
            "total_steps": branch.all_steps().count(),
            "episode_summary": episode_summary(trajectory),
        },
        request,
    )
    if status != "running" and not more:
        return HttpResponseStopPolling(html)
    return HttpResponse(html)


def step_observation(request: HtmxHttpRequest, step_id: int) -> HttpResponse:
    """The rendering of one observation asked for from a preview: whole, up to what a page
    shows (STUDIO_PAGE_FIELD_CHARS), else its start with the Show all link."""
    step, _ = get_step_for_user(request, step_id)
    html = render_observation(
        step.branch.trajectory.domain,
        step.observation,
        step.meta,
        full_url=reverse("step_text", args=[step.pk, "observation"]),
    )
    return HttpResponse(html)


def step_raw_output(request: HtmxHttpRequest, step_id: int) -> HttpResponse:
    """The world model's raw text for a simulated step (asked for when its fold opens)."""
    step, _ = get_step_for_user(request, step_id)
    if not step.raw_output:
        return HttpResponse(
            format_html('<p class="muted small-text">{}</p>', "No raw output stored.")
        )
    url = reverse("step_text", args=[step.pk, "raw_output"])
    return HttpResponse(bounded_text(step.raw_output, url, "obs-text raw-output"))


def branch_export(request: HtmxHttpRequest, branch_id: int) -> StreamingHttpResponse:
    """The branch as an `agentworld-studio/v1` file, provenance and perturbations kept."""
    branch, _ = get_branch_for_user(request, branch_id)
    response = streaming_response(request, export_chunks(branch), "application/json")
    response["Content-Disposition"] = (
        f'attachment; filename="trajectory-{branch.trajectory_id}-branch-{branch.pk}.json"'
    )
    return response


urlpatterns = [
    path("trajectories/<int:trajectory_id>/", trajectory_page, name="trajectory"),
    path("trajectories/<int:trajectory_id>/steps/", trajectory_steps, name="trajectory_steps"),
    path("trajectories/<int:trajectory_id>/live/", trajectory_live, name="trajectory_live"),
    path("steps/<int:step_id>/observation/", step_observation, name="step_observation"),
    path("steps/<int:step_id>/raw/", step_raw_output, name="step_raw_output"),
    path("branches/<int:branch_id>/export/", branch_export, name="branch_export"),
]
