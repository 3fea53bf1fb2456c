"""Step annotations: validate what an annotator gives (`AnnotationData.build`, which names the
field that is wrong), save it as their annotation of the step with a new version when it
changed, and read a step's annotations and an annotation's history.

Each queue asks anew: an annotator has one annotation of a step per queue it was asked in,
and one outside any queue (from the step's own page; `queue` NULL). Annotations made before
queues kept their own (all of them NULL) count as made outside any queue."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction
from django.db.models import Max

from inference.judge import DIMENSIONS
from studio.models import AnnotationQueue, AnnotationVersion, Step, StepAnnotation, Verdict
from studio.services import questions as questions_service

# What each dimension asks, shown as the rating's tooltip (the judge's rubric, in short).
DIMENSION_HELP = {
    "format": "Has the shape this environment produces (JSON, terminal output, element list, "
    "page text, error format), with no chatter.",
    "factuality": "The facts it states (values, files, results, states) agree with what the "
    "history and the real environment establish.",
    "consistency": "Follows from the history and the action; contradicts nothing shown before.",
    "realism": "A real environment could have returned it: plausible content, length, errors.",
    "quality": "Overall usefulness as a stand-in for the real observation, for training or "
    "testing an agent.",
}
MAX_TAGS = 20
MAX_TAG_CHARS = 50
MAX_COMMENT_CHARS = 10_000
MAX_CORRECTION_CHARS = 200_000


def _lines(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n")


def correction_of(edited: str, observation: str) -> str:
    """The correction the editor holds: none when it still reads as the observation (the
    editor starts from it; browsers send line ends as CRLF)."""
    edited = _lines(edited)
    return "" if edited == _lines(observation) else edited


class StaleAnnotation(Exception):
    """The annotation changed (another tab) since the page that sends this was opened."""


class AnnotationError(ValueError):
    def __init__(self, errors: dict[str, str]):
        super().__init__("; ".join(f"{k}: {v}" for k, v in errors.items()))
        self.errors = errors


@dataclass(frozen=True)
class AnnotationData:
    ratings: dict[str, int] = field(default_factory=dict)
    verdict: str = ""
    corrected_observation: str = ""
    tags: tuple[str, ...] = ()
    comment: str = ""
    answers: dict[str, Any] = field(default_factory=dict)  # the queue's custom questions

    @classmethod
    def build(
        cls,
        data: Mapping[str, Any],
        observation: str = "",
        questions: list[dict[str, Any]] | None = None,
    ) -> AnnotationData:
        """From form or JSON input: `rating_<dimension>` (1-5 or blank), `verdict`,
        `corrected_observation` (the same as the step's observation, or blank: none),
        `tags` (comma-separated or a list), `comment`, and the answers to `questions` (a
        queue's: `q_<key>` fields, see `studio.services.questions.validate_answers`)."""
        errors: dict[str, str] = {}
        answers: dict[str, Any] = {}
        if questions:
            try:
                answers = questions_service.validate_answers(questions, data)
            except ValueError as exc:
                errors["answers"] = str(exc)
        ratings: dict[str, int] = {}
        for dim in DIMENSIONS:
            raw = data.get(f"rating_{dim}", "")
            if raw in ("", None):
                continue
            try:
                value = int(str(raw))
            except ValueError:
                errors[f"rating_{dim}"] = f"the {dim} rating must be a whole number 1-5"
                continue
            if not 1 <= value <= 5:
                errors[f"rating_{dim}"] = f"the {dim} rating must be 1-5, got {value}"
                continue
            ratings[dim] = value
        verdict = str(data.get("verdict", "") or "")
        if verdict and verdict not in Verdict.values:
            errors["verdict"] = f"verdict must be one of {', '.join(Verdict.values)}"
        raw_tags = data.get("tags", "")
        items = raw_tags if isinstance(raw_tags, list | tuple) else str(raw_tags).split(",")
        tags: list[str] = []
        for tag in (str(t).strip() for t in items):
            if tag and tag not in tags:
                tags.append(tag)
        if len(tags) > MAX_TAGS:
            errors["tags"] = f"at most {MAX_TAGS} tags"
        elif any(len(t) > MAX_TAG_CHARS for t in tags):
            errors["tags"] = f"a tag has at most {MAX_TAG_CHARS} characters"
        comment = str(data.get("comment", "") or "").strip()
        if len(comment) > MAX_COMMENT_CHARS:
            errors["comment"] = f"the comment has at most {MAX_COMMENT_CHARS} characters"
        corrected = correction_of(str(data.get("corrected_observation", "") or ""), observation)
        if len(corrected) > MAX_CORRECTION_CHARS:
            errors["corrected_observation"] = "the corrected observation is too long"
        if errors:
            raise AnnotationError(errors)
        return cls(ratings, verdict, corrected, tuple(tags), comment, answers)

    def state(self) -> dict[str, Any]:
        return {
            "ratings": dict(self.ratings),
            "verdict": self.verdict,
            "corrected_observation": self.corrected_observation,
            "tags": list(self.tags),
            "comment": self.comment,
            "answers": dict(self.answers),
        }

    @property
    def empty(self) -> bool:
        return not any(self.state().values())


def state_of(annotation: StepAnnotation) -> dict[str, Any]:
    return {
        "ratings": dict(annotation.ratings or {}),
        "verdict": annotation.verdict,
        "corrected_observation": annotation.corrected_observation,
        "tags": list(annotation.tags or []),
        "comment": annotation.comment,
        "answers": dict(annotation.answers or {}),
    }


def annotation_of(step: Step, user, queue: AnnotationQueue | None) -> StepAnnotation | None:
    """The user's annotation of `step` in `queue` (None: outside any queue)."""
    return StepAnnotation.objects.filter(step=step, author=user, queue=queue).first()


def save_annotation(
    step: Step,
    user,
    data: AnnotationData,
    *,
    queue: AnnotationQueue | None = None,
    seen_version: int | None = None,
) -> tuple[StepAnnotation, bool]:
    """The user's annotation of `step` in `queue` (None: outside any queue), made or
    edited; a version is kept when it changed. `seen_version`: the version the editing page
    showed (0: none); a newer one saved meanwhile (another tab) raises StaleAnnotation
    instead of overwriting it. Returns (annotation, changed)."""
    if data.empty and annotation_of(step, user, queue) is None:
        raise AnnotationError({"annotation": "nothing to save: rate, judge, correct or comment"})
    with transaction.atomic():
        annotation, created = StepAnnotation.objects.select_for_update().get_or_create(
            step=step, author=user, queue=queue, defaults=data.state()
        )
        latest = annotation.versions.aggregate(n=Max("number"))["n"] or 0
        if not created and seen_version is not None and latest > seen_version:
            raise StaleAnnotation
        if not created:
            if state_of(annotation) == data.state():
                return annotation, False
            for name, value in data.state().items():
                setattr(annotation, name, value)
            annotation.save()
        number = (0 if created else latest) + 1
        AnnotationVersion.objects.create(annotation=annotation, number=number, state=data.state())
    return annotation, True


def annotations_of(step: Step, queue: AnnotationQueue | None = None):
    """The step's annotations asked in `queue` (None: those made outside any queue)."""
    return (
        StepAnnotation.objects.filter(step=step, queue=queue)
        .select_related("author", "queue")
        .order_by("created_at")
    )


def earlier_annotations(step: Step, queue: AnnotationQueue):
    """The step's annotations made before `queue` was, outside it (in other queues or
    outside any): what was said of the step before this queue asked anew."""
    return (
        StepAnnotation.objects.filter(step=step, created_at__lt=queue.created_at)
        .exclude(queue=queue)
        .select_related("author", "queue")
        .order_by("created_at")
    )


def in_queues(step: Step):
    """The step's annotations asked in queues (shown on its own page, by queue)."""
    return (
        StepAnnotation.objects.filter(step=step, queue__isnull=False)
        .select_related("author", "queue")
        .order_by("queue__name", "created_at")
    )


EARLIER_SHOWN_AT_ONCE = 30  # earlier steps rendered with the page; more load when opened
MAX_EARLIER = 500


@dataclass
class ItemContext:
    """What shaped a step, for the annotator: the task, the steps before it on the branch,
    the world or perturbation it was simulated under, and the recorded reference
    observation the judge would score it against (None: the judge would have none)."""

    task: str
    earlier_count: int
    earlier: list[Step]  # the last EARLIER_SHOWN_AT_ONCE of them, or all
    world: dict[str, Any] | None
    perturbation: dict[str, Any] | None
    reference: Step | None


def earlier_steps(branch, step: Step, limit: int = MAX_EARLIER) -> list[Step]:
    """The last `limit` steps before `step` on `branch` (inherited ones too), in order."""
    rows = branch.all_steps().filter(index__lt=step.index).order_by("-index")[:limit]
    return list(reversed(rows))


def item_context(branch, step: Step) -> ItemContext:
    from studio.services import judging  # the judge's services load the simulation's

    meta = step.meta or {}
    world = meta.get("world") if isinstance(meta.get("world"), dict) else None
    perturbation = meta.get("perturbation") if isinstance(meta.get("perturbation"), dict) else None
    count = branch.all_steps().filter(index__lt=step.index).count()
    return ItemContext(
        task=branch.trajectory.task_instruction or "",
        earlier_count=count,
        earlier=earlier_steps(branch, step, EARLIER_SHOWN_AT_ONCE),
        world=world,
        perturbation=perturbation,
        reference=judging.reference_step(branch, step),
    )
