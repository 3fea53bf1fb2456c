"""Annotations made in a queue before each queue asked anew (migration 0016) were one row per
step and annotator, with no queue. The queues' agreement, adjudication and datasets now read
only their own rows, so each such row goes to the queue where its author completed the item;
where the author completed the same step in several queues, each further queue gets a copy
(with the history), so every queue keeps the annotation it counted before. Rows with no
completed item stay outside any queue, as annotations of the step's own page."""

from django.db import migrations


def forwards(apps, schema_editor):
    StepAnnotation = apps.get_model("studio", "StepAnnotation")
    AnnotationVersion = apps.get_model("studio", "AnnotationVersion")
    QueueClaim = apps.get_model("studio", "QueueClaim")

    done: dict[tuple[int, int], list[int]] = {}
    claims = (
        QueueClaim.objects.filter(done_at__isnull=False)
        .order_by("done_at", "pk")
        .values_list("item__step_id", "user_id", "item__queue_id")
    )
    for step_id, user_id, queue_id in claims.iterator():
        queues = done.setdefault((step_id, user_id), [])
        if queue_id not in queues:
            queues.append(queue_id)
    if not done:
        return
    for annotation in StepAnnotation.objects.filter(queue__isnull=True).iterator():
        queues = done.get((annotation.step_id, annotation.author_id))
        if not queues:
            continue
        versions = list(
            AnnotationVersion.objects.filter(annotation_id=annotation.pk).values_list(
                "number", "state"
            )
        )
        StepAnnotation.objects.filter(pk=annotation.pk).update(queue_id=queues[0])
        for queue_id in queues[1:]:
            copy = StepAnnotation.objects.create(
                step_id=annotation.step_id,
                author_id=annotation.author_id,
                queue_id=queue_id,
                ratings=annotation.ratings,
                verdict=annotation.verdict,
                corrected_observation=annotation.corrected_observation,
                tags=annotation.tags,
                comment=annotation.comment,
                answers=annotation.answers,
            )
            # keep the original's times, not the migration's
            StepAnnotation.objects.filter(pk=copy.pk).update(
                created_at=annotation.created_at, updated_at=annotation.updated_at
            )
            AnnotationVersion.objects.bulk_create(
                AnnotationVersion(annotation_id=copy.pk, number=number, state=state)
                for number, state in versions
            )


class Migration(migrations.Migration):
    dependencies = [
        ("studio", "0016_per_queue_annotations_skips_guidelines_sample_sets"),
    ]

    operations = [
        migrations.RunPython(forwards, migrations.RunPython.noop),
    ]
