"""Annotating one step, keyboard first (static/js/annotate.js): ratings on the five
dimensions, a verdict, a corrected observation, tags, a comment and, in a queue, the queue's
own questions; every member of the project annotates (annotators above all). Each queue asks
anew: an annotator's annotation of a step in a queue is that queue's, and the one made from
the step's own page is outside any queue. The others' annotations of the same queue (or of
none) are listed beside it unless blind review hides them; earlier annotations of the step
show only in a non-blind queue, labelled as earlier. In a queue the page also gives what
shaped the step (the task, the earlier steps, the world or perturbation, the recorded
reference), the queue's guidelines, and skip and flag."""

from __future__ import annotations

from django.contrib import messages
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.urls import path, reverse
from django.views.decorators.http import require_GET, require_http_methods

from inference.judge import DIMENSIONS
from studio.access import get_step_for_user, signed_in_user
from studio.http import HtmxHttpRequest, whole_number
from studio.models import AnnotationQueue, Branch, Dataset, Step, Verdict
from studio.rendering.bounded import field_chars, is_cut
from studio.rendering.markdown import render_markdown
from studio.services import annotations as service
from studio.services import questions as questions_service
from studio.services.blinding import blindness_for
from studio.services.judging import latest_judgements


def _branch_of(request: HtmxHttpRequest, step: Step) -> Branch:
    """The branch the annotator came from (`?branch=`, on which an inherited step shows), if
    it is one of the step's trajectory; else the step's own."""
    wanted = whole_number(request.POST.get("branch") or request.GET.get("branch") or "")
    if wanted is not None:
        found = Branch.objects.filter(pk=wanted, trajectory_id=step.branch.trajectory_id)
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

    wanted = whole_number(request.POST.get("queue") or request.GET.get("queue") or "")
    if wanted is None:
        return None
    queue = AnnotationQueue.objects.filter(
        pk=wanted, project_id=step.branch.trajectory.project_id, items__step=step
    ).first()
    return queue if queue is not None and queues.may_work(queue, user) else None


def _with_answers(annotations, questions=None) -> list:
    """Annotations with `.answer_rows` (label, answer) for their queue's questions."""
    rows = list(annotations)
    for a in rows:
        asked = questions if questions is not None else (a.queue.questions if a.queue else [])
        a.answer_rows = questions_service.display(asked or [], a.answers or {})
    return rows


def _editor(step: Step, corrected: str) -> dict:
    """The correction editor. It starts from the saved correction, else from the
    observation; never from an observation longer than the page shows (STUDIO_PAGE_FIELD_CHARS:
    it would be on the page twice): then it starts empty and says so. An empty editor, or
    one that holds the whole observation as it is, is no correction, so nothing typed from
    a part of the observation can pass for the whole of it: what is typed replaces the
    observation, and the page says that. An observation a correction can hold
    (MAX_CORRECTION_CHARS) can be loaded into it whole, from its Show all address
    (static/js/annotate.js)."""
    observation = step.observation or ""
    cut = is_cut(observation)
    return {
        "text": corrected or ("" if cut else observation),
        "cut": cut,
        "loadable": cut and len(observation) <= service.MAX_CORRECTION_CHARS,
        "total": len(observation),
        "shown": field_chars(),
        "max": service.MAX_CORRECTION_CHARS,
        "url": reverse("step_text", args=[step.pk, "observation"]),
    }


def _question_fields(questions: list, answers: dict) -> list[dict]:
    """The queue's questions with what the form holds for each (str, or a list: multi)."""
    fields = []
    for q in questions:
        value = answers.get(q["key"], [] if q["kind"] == "multi" else "")
        if q["kind"] == "multi":
            value = [str(v) for v in (value if isinstance(value, list) else [value])]
        else:
            value = str(value)
        choices: list[str] = []
        if q["kind"] == "scale":
            choices = [str(n) for n in range(q["min"], q["max"] + 1)]
        elif q["kind"] in ("single", "multi"):
            choices = list(q["options"])
        fields.append({**q, "value": value, "choices": choices})
    return fields


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
    questions = list(queue.questions or []) if queue else []
    mine = service.annotation_of(step, user, queue)
    errors: dict[str, str] = {}
    posted = None
    status = 200
    if request.method == "POST":
        seen = request.POST.get("seen_version", "")
        try:
            data = service.AnnotationData.build(request.POST, step.observation, questions)
            _, changed = service.save_annotation(
                step,
                user,
                data,
                queue=queue,
                seen_version=whole_number(seen),
            )
        except service.AnnotationError as exc:
            errors, posted, status = exc.errors, request.POST, 400
        except service.StaleAnnotation:
            errors = {
                "annotation": "your annotation of this step was saved from another tab or window "
                "since this page was opened: it is shown below; make your change again"
            }
            status = 409
            mine = service.annotation_of(step, user, queue)
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
            "answers": {
                q["key"]: posted.getlist(f"q_{q['key']}")
                if q["kind"] == "multi"
                else posted.get(f"q_{q['key']}", "")
                for q in questions
            },
        }
    corrected = state["corrected_observation"]
    trajectory = step.branch.trajectory
    versions = list(mine.versions.order_by("-number")) if mine else []
    # blind review (studio.services.blinding): no judge score and nobody else's annotation
    # of a step a blind queue holds for this member before they submit it there
    blind = blindness_for(membership).hides(step.pk)
    others = (
        []
        if blind
        else _with_answers(service.annotations_of(step, queue).exclude(author=user), questions)
    )
    if blind:
        elsewhere = []
    elif queue is not None:
        # earlier annotations are shown in a non-blind queue only: a blind one asks anew
        elsewhere = [] if queue.blind else _with_answers(service.earlier_annotations(step, queue))
    else:
        elsewhere = _with_answers(service.in_queues(step))
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
        "editor": _editor(step, corrected),
        # no diff is drawn against an observation longer than a page shows: it would be
        # the size of the observation (and slow to make)
        "correction_diff": any_diff_html(meaning_diff(step.observation, corrected), limit=50)
        if corrected and not is_cut(step.observation)
        else "",
        "queue": queue,
        "questions": _question_fields(questions, state.get("answers") or {}),
        "guidelines": render_markdown(queue.guidelines) if queue else "",
        "first_in_queue": queue is not None and not queues.my_share(queue, user),
        "item": queue.items.filter(step=step).first() if queue else None,
        "context": service.item_context(branch, step),
        "blind": blind,
        "others": others,
        "elsewhere": elsewhere,
        "judgement": None if blind else latest_judgements([step.pk]).get(step.pk),
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


@require_GET
def step_earlier(request: HtmxHttpRequest, step_id: int) -> HttpResponse:
    """The steps before a step on its branch (the item page loads them when opened, for a
    long trajectory)."""
    step, _ = get_step_for_user(request, step_id)
    branch = _branch_of(request, step)
    if not request.htmx:
        raise Http404("a fragment of the annotation page")
    rows = service.earlier_steps(branch, step)
    return render(
        request,
        "annotations/step.html#earlier-steps",
        {"trajectory": step.branch.trajectory, "rows": rows, "limit": service.MAX_EARLIER},
    )


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
    path("steps/<int:step_id>/earlier/", step_earlier, name="step_earlier"),
]
