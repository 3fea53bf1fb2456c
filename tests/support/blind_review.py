"""A project state for the blind-review tests, written straight to the database: a blind
queue of two simulated steps that the project's annotator works beside `other`, who has
submitted both (with distinctive ratings, comment and correction); the judge's scores of
those steps (distinctive totals and strength text); a judged and annotated step outside the
queue that everyone may see; and a dataset version holding the queue's steps with `other`'s
correction. Nothing here may reach the annotator's pages until they submit."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from django.utils import timezone

from studio.models import (
    AnnotationQueue,
    Branch,
    Dataset,
    DatasetItem,
    DatasetVersion,
    ExportJob,
    JobStatus,
    JudgeJob,
    JudgeTarget,
    Membership,
    QueueClaim,
    QueueItem,
    Role,
    Step,
    StepAnnotation,
    StepJudgement,
)
from tests.support.branching import make_child, make_trajectory

JUDGE_SECRET = "JUDGE-SECRET"
OTHER_SECRET = "OTHER-SECRET"
OTHER_CORRECTION = "OTHER-CORRECTION of the observation"
# the judge's totals of the hidden steps, as the pages write them (2 decimals): values no
# mean of whole scores gives, so they appear only where a hidden judgement is shown
HIDDEN_TOTALS = (1.37, 1.13)
VISIBLE_TOTAL = 4.62
# every string that must not reach a blind annotator who has not submitted
SECRETS = (JUDGE_SECRET, OTHER_SECRET, "OTHER-CORRECTION", "1.37", "1.13")


@dataclass
class BlindReview:
    queue: AnnotationQueue
    branch: Branch  # the queue's steps are this branch's own
    visible_branch: Branch  # judged, outside the queue
    hidden: list[Step]
    visible: Step
    job: JudgeJob
    visible_job: JudgeJob
    version: DatasetVersion
    export: ExportJob
    other: object  # the other annotator of the queue


def build(project, export_dir: Path | None = None) -> BlindReview:
    from django.contrib.auth import get_user_model

    other = get_user_model().objects.create_user(username="other", password="pw-for-tests-1")
    Membership.objects.create(project=project, user=other, role=Role.ANNOTATOR)
    annotator = project.users["annotator"]
    researcher = project.users["researcher"]
    traj, root = make_trajectory(project)
    branch = make_child(root, 2, ["simulated A at 2", "simulated A at 3"], name="blind-branch")
    visible_branch = make_child(root, 3, ["simulated B at 3"], name="open-branch")
    hidden = list(branch.steps.order_by("index"))
    visible = visible_branch.steps.get()

    queue = AnnotationQueue.objects.create(
        project=project, name="blind pair", annotators_per_item=2, blind=True, created_by=researcher
    )
    queue.assignees.set([annotator, other])
    now = timezone.now()
    for position, step in enumerate(hidden):
        item = QueueItem.objects.create(queue=queue, step=step, position=position)
        QueueClaim.objects.create(
            item=item, user=other, expires_at=now + timedelta(minutes=30), done_at=now
        )
        StepAnnotation.objects.create(
            step=step,
            author=other,
            queue=queue,
            ratings={"consistency": 1, "realism": 1},
            verdict="needs_fix",
            corrected_observation=OTHER_CORRECTION,
            comment=f"{OTHER_SECRET}: this output is wrong",
            tags=["other-secret-tag"],
        )
    # outside the queue: seen by everyone
    StepAnnotation.objects.create(
        step=visible, author=other, ratings={"consistency": 5, "realism": 4}, comment="open note"
    )

    def judge_job(target_branch: Branch) -> JudgeJob:
        return JudgeJob.objects.create(
            project=project,
            requester=researcher,
            target=JudgeTarget.BRANCH,
            branch=target_branch,
            description=f"branch {target_branch.name!r}",
            judge_model="judge-m",
            judge_base_url="http://judge.invalid/v1",
            status=JobStatus.SUCCEEDED,
            phase="done",
            progress=1.0,
            steps_total=target_branch.steps.count(),
            steps_judged=target_branch.steps.count(),
        )

    job = judge_job(branch)
    for step, total in zip(hidden, HIDDEN_TOTALS, strict=True):
        StepJudgement.objects.create(
            step=step,
            job=job,
            judge_model="judge-m",
            scores={"consistency": 1, "realism": 2},
            total_score=total,
            strengths=[f"{JUDGE_SECRET} strength"],
            weaknesses=["judge-secret weakness"],
        )
    visible_job = judge_job(visible_branch)
    StepJudgement.objects.create(
        step=visible,
        job=visible_job,
        judge_model="judge-m",
        scores={"consistency": 5, "realism": 4},
        total_score=VISIBLE_TOTAL,
        strengths=["open strength"],
    )

    dataset = Dataset.objects.create(project=project, name="curated", created_by=researcher)
    version = DatasetVersion.objects.create(
        dataset=dataset,
        number=1,
        source=f"accepted items of queue {queue.name!r}",
        created_by=researcher,
        item_count=3,
        corrected_count=1,
    )
    DatasetItem.objects.create(
        version=version,
        position=0,
        step=hidden[0],
        observation=OTHER_CORRECTION,
        corrected=True,
        correction_by=other,
    )
    DatasetItem.objects.create(version=version, position=1, step=hidden[1])
    DatasetItem.objects.create(version=version, position=2, step=visible)
    export = ExportJob.objects.create(
        version=version, requester=researcher, format="openai", status=JobStatus.SUCCEEDED
    )
    if export_dir is not None:  # a researcher's finished export file, corrections in it
        path = export_dir / "curated-v1-openai.jsonl"
        path.write_text('{"messages": [{"content": "' + OTHER_CORRECTION + '"}]}\n')
        ExportJob.objects.filter(pk=export.pk).update(
            stored_path=str(path), file_name="curated-v1-openai.jsonl"
        )
    return BlindReview(
        queue=queue,
        branch=branch,
        visible_branch=visible_branch,
        hidden=hidden,
        visible=visible,
        job=job,
        visible_job=visible_job,
        version=version,
        export=export,
        other=other,
    )


def hold(review: BlindReview, user):
    """`user` holds a claim on the queue's first item (taken, not submitted)."""
    item = review.queue.items.order_by("position").first()
    return QueueClaim.objects.create(
        item=item, user=user, expires_at=timezone.now() + timedelta(minutes=30)
    )


def submit(review: BlindReview, user) -> None:
    """`user` submits their annotations of the queue's items (as the item page saves them)."""
    now = timezone.now()
    for item in review.queue.items.all():
        StepAnnotation.objects.create(
            step=item.step,
            author=user,
            queue=review.queue,
            ratings={"realism": 3},
            verdict="accept",
        )
        QueueClaim.objects.create(
            item=item, user=user, expires_at=now + timedelta(minutes=30), done_at=now
        )
