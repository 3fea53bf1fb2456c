"""Annotating one step, keyboard first (static/js/annotate.js): ratings on the five
dimensions, a verdict, a corrected observation, tags and a comment; every member of the
project annotates (annotators above all); each annotator's annotation is their own, others'
are listed beside it, and its history of saved versions is kept."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.urls import path, reverse
from django.views.decorators.http import require_http_methods

from inference.judge import DIMENSIONS
from studio.access import get_step_for_user, signed_in_user
from studio.http import HtmxHttpRequest
from studio.models import AnnotationQueue, Branch, Dataset, Step, StepAnnotation, Verdict
from studio.services import annotations as service
from studio.services.judging import latest_judgements


def _branch_of(request: HtmxHttpRequest, step: Step) -> Branch:
    """The branch the annotator came from (`?branch=`, on which an inherited step shows), if
    it is one of the step's trajectory; else the step's own."""
    wanted = request.POST.get("branch") or request.GET.get("branch") or ""
    if wanted.isdigit():
        found = Branch.objects.filter(pk=int(wanted), trajectory_id=step.branch.trajectory_id)
        branch = found.first()
        if branch is not None and branch.all_steps().filter(pk=step.pk).exists():
            return branch
    return step.branch


def _next_step(branch: Branch, step: Step) -> Step | None:
    """The next step of the branch, as the trajectory shows it (inherited steps too)."""
    return branch.all_steps().filter(index__gt=step.index).order_by("index").first()


def _url(step: Step, branch: Branch) -> str:
    return reverse("step_annotate", args=[step.pk]) + f"?branch={branch.pk}"


def _queue_of(request: HtmxHttpRequest, step: Step, user) -> AnnotationQueue | None:
    """The queue the step was opened from (`?queue=`): one of the step's project that holds
    it and that the user works."""
    from studio.services import queues

    wanted = request.POST.get("queue") or request.GET.get("queue") or ""
    if not wanted.isdigit():
        return None
    queue = AnnotationQueue.objects.filter(
        pk=int(wanted), project_id=step.branch.trajectory.project_id, items__step=step
    ).first()
    return queue if queue is not None and queues.may_work(queue, user) else None


@require_http_methods(["GET", "POST"])
def step_annotate(request: HtmxHttpRequest, step_id: int) -> HttpResponse:
    from studio.presenters.diff import any_diff_html
    from studio.services import queues
    from studio.services.diffs import meaning_diff

    step, membership = get_step_for_user(request, step_id)
    user = signed_in_user(request)
    branch = _branch_of(request, step)
    following = _next_step(branch, step)
    queue = _queue_of(request, step, user)
    mine = StepAnnotation.objects.filter(step=step, author=user).first()
    errors: dict[str, str] = {}
    posted = None
    status = 200
    if request.method == "POST":
        seen = request.POST.get("seen_version", "")
        try:
            data = service.AnnotationData.build(request.POST, step.observation)
            _, changed = service.save_annotation(
                step, user, data, seen_version=int(seen) if seen.isdigit() else None
            )
        except service.AnnotationError as exc:
            errors, posted, status = exc.errors, request.POST, 400
        except service.StaleAnnotation:
            errors = {
                "annotation": "your annotation of this step was saved from another tab or window "
                "since this page was opened: it is shown below; make your change again"
            }
            status = 409
            mine = StepAnnotation.objects.filter(step=step, author=user).first()
        else:
            wants_next = request.POST.get("then") == "next"
            if queue is not None:
                return _queue_saved(request, queue, step, user, changed, wants_next)
            message = "Saved." if changed else "Nothing changed."
            if wants_next and following is None:
                message += " This is the last step of the branch."
            messages.success(request, message)
            target = following if wants_next and following is not None else step
            return redirect(_url(target, branch))
    state = service.state_of(mine) if mine else service.AnnotationData().state()
    if posted is not None:  # show what was typed, with what is wrong with it
        state = {
            "ratings": {d: posted.get(f"rating_{d}", "") for d in DIMENSIONS},
            "verdict": posted.get("verdict", ""),
            "corrected_observation": service.correction_of(
                posted.get("corrected_observation", ""), step.observation
            ),
            "tags": [t.strip() for t in posted.get("tags", "").split(",") if t.strip()],
            "comment": posted.get("comment", ""),
        }
    corrected = state["corrected_observation"]
    trajectory = step.branch.trajectory
    versions = list(mine.versions.order_by("-number")) if mine else []
    context = {
        "project": trajectory.project,
        "membership": membership,
        "trajectory": trajectory,
        "step": step,
        "branch": branch,
        "mine": mine,
        "state": state,
        "errors": errors,
        "dimensions": [
            (d, service.DIMENSION_HELP[d], str(state["ratings"].get(d, ""))) for d in DIMENSIONS
        ],
        "verdicts": Verdict.choices,
        "editor_text": corrected or step.observation,
        "correction_diff": any_diff_html(meaning_diff(step.observation, corrected), limit=50)
        if corrected
        else "",
        "queue": queue,
        # a blind queue shows the others' work only once one's own is in
        "blind": queues.blind_for(step, user),
        "others": service.annotations_of(step).exclude(author=user),
        "judgement": latest_judgements([step.pk]).get(step.pk),
        "dataset_names": list(
            Dataset.objects.filter(project=trajectory.project).values_list("name", flat=True)
        ),
        "versions": versions,
        "seen_version": versions[0].number if versions else 0,
        "next_step": following,
        "back": reverse("trajectory", args=[trajectory.pk])
        + f"?branch={branch.pk}&step={step.index}",
    }
    return render(request, "annotations/step.html", context, status=status)


def _queue_saved(request, queue: AnnotationQueue, step: Step, user, changed: bool, wants_next):
    from studio.services import queues
    from studio.views.queues import item_url

    if not queues.complete(queue, step, user):
        messages.warning(
            request,
            "Saved, but not counted in the queue: your claim on this item had run out and "
            "others took its slots.",
        )
    if not wants_next:
        messages.success(request, "Saved." if changed else "Nothing changed.")
        return redirect(item_url(queue, step))
    item = queues.claim_next(queue, user)
    if item is None:
        messages.success(request, "Saved. Nothing left for you in this queue: thank you.")
        return redirect("queue_detail", queue_id=queue.pk)
    messages.success(request, "Saved: the next item of the queue.")
    return redirect(item_url(queue, item.step))


urlpatterns = [
    path("steps/<int:step_id>/annotate/", step_annotate, name="step_annotate"),
]
