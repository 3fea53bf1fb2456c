"""A queue's labels as data (one row per annotation made in it, annotators as pseudonyms) in
JSONL, CSV and Parquet, each read back; `manage.py queue_labels`; the owners-only download and
the per-annotator quality panel (items done, median time, alpha with the others' median,
agreement with adjudications)."""

from __future__ import annotations

import csv
import io
import json
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse
from django.utils import timezone

from studio.models import (
    Adjudication,
    Membership,
    QueueClaim,
    Role,
    StepAnnotation,
    StepJudgement,
)
from studio.services import queues
from studio.services.agreement import annotator_quality
from studio.services.labels import COLUMNS, write_labels
from tests.support.jobs import make_trajectory


def _annotate(queue, user, step, *, minutes: float, flagged=False, **fields):
    annotation = StepAnnotation.objects.create(step=step, author=user, queue=queue, **fields)
    now = timezone.now()
    claim = QueueClaim.objects.create(
        item=queue.items.get(step=step), user=user, expires_at=now, done_at=now
    )
    # claimed_at is set on create: move it back to give the time spent
    QueueClaim.objects.filter(pk=claim.pk).update(
        claimed_at=now - timedelta(minutes=minutes), flagged_at=now if flagged else None
    )
    return annotation


@pytest.fixture
def labelled(project, make_user):
    """Three steps, annotated by `zed` first and `amy` second (so zed is annotator-1), with a
    judge score on the first step and an adjudication of the second."""
    trajectory = make_trajectory(
        project, steps=[("ls", "a"), ("pwd", "/srv"), ("id", "uid=0")], key="labels"
    )
    queue = queues.create_queue(
        project,
        None,
        queues.QueueData(name="labels, v1", origin="recorded", annotators_per_item=2),
    )
    zed, amy = make_user("zed"), make_user("amy")
    for user in (zed, amy):
        Membership.objects.create(project=project, user=user, role=Role.ANNOTATOR)
    a, b, c = (s for s in trajectory.root_branch.steps.order_by("index"))

    def ratings(n: int) -> dict[str, int]:
        return dict.fromkeys(("format", "factuality", "consistency", "realism", "quality"), n)

    _annotate(queue, zed, a, minutes=2, verdict="accept", ratings=ratings(5), tags=["ok", "x"],
              answers={"sure": 4, "why": ["clear"]}, comment='says "fine", ok')  # fmt: skip
    _annotate(queue, amy, a, minutes=4, verdict="accept", ratings=ratings(5), flagged=True)
    _annotate(queue, zed, b, minutes=6, verdict="reject", ratings=ratings(1))
    _annotate(queue, amy, b, minutes=8, verdict="accept", ratings=ratings(4),
              corrected_observation="/srv/app")  # fmt: skip
    _annotate(queue, zed, c, minutes=10, verdict="needs_fix", ratings=ratings(3))
    _annotate(queue, amy, c, minutes=12, verdict="needs_fix", ratings=ratings(3))
    # outside the queue: not its label
    StepAnnotation.objects.create(step=a, author=project.users["admin"], verdict="reject")
    StepJudgement.objects.create(
        step=a, judge_model="judge-old", scores={"format": 1}, total_score=1.0
    )
    StepJudgement.objects.create(
        step=a, judge_model="judge-new", scores={"format": 4, "realism": 5}, total_score=4.5
    )
    Adjudication.objects.create(item=queue.items.get(step=b), verdict="accept")
    return queue, (a, b, c), zed, amy


def _rows(queue, fmt: str) -> list[dict]:
    out = io.BytesIO()
    count = write_labels(queue, fmt, out)
    data = out.getvalue()
    if fmt == "jsonl":
        rows = [json.loads(line) for line in data.decode().splitlines()]
    elif fmt == "csv":
        rows = list(csv.DictReader(io.StringIO(data.decode(), newline="")))
    else:
        import pyarrow.parquet as pq

        rows = pq.read_table(io.BytesIO(data)).to_pylist()
    assert len(rows) == count == 6
    return rows


@pytest.mark.django_db
def test_each_format_round_trips_one_row_per_annotation(labelled):
    queue, (a, b, c), zed, amy = labelled
    jsonl, table, parquet = (_rows(queue, f) for f in ("jsonl", "csv", "parquet"))
    first = jsonl[0]
    assert list(first) == COLUMNS
    assert first["step_id"] == a.pk and first["step_index"] == 0 and first["queue"] == "labels, v1"
    assert [r["annotator"] for r in jsonl] == ["annotator-1", "annotator-2"] * 3
    assert first["rating_format"] == 5 and first["verdict"] == "accept"
    assert first["answers"] == {"sure": 4, "why": ["clear"]} and first["tags"] == ["ok", "x"]
    assert first["seconds_spent"] == pytest.approx(120, abs=1)
    assert first["judge_model"] == "judge-new" and first["judge_format"] == 4.0
    assert first["judge_realism"] == 5.0 and first["judge_quality"] is None
    assert jsonl[1]["flagged"] is True and jsonl[0]["flagged"] is False
    assert jsonl[3]["corrected_observation"] == "/srv/app" and jsonl[2]["judge_model"] is None
    text = json.dumps(jsonl)
    assert "zed" not in text and "amy" not in text and "admin" not in text  # never named
    # CSV: text cells; lists and mappings as JSON text
    row = table[0]
    assert json.loads(row["answers"]) == {"sure": 4, "why": ["clear"]}
    assert json.loads(row["tags"]) == ["ok", "x"] and row["comment"] == 'says "fine", ok'
    assert row["rating_format"] == "5" and row["annotator"] == "annotator-1"
    assert table[2]["judge_model"] == ""  # none
    # Parquet: typed columns; answers as JSON text (an answer's type depends on its question)
    assert parquet[0]["tags"] == ["ok", "x"] and parquet[0]["rating_format"] == 5
    assert json.loads(parquet[0]["answers"]) == {"sure": 4, "why": ["clear"]}
    assert parquet[0]["judge_total"] == 4.5 and parquet[2]["judge_total"] is None
    assert [r["annotation_id"] for r in parquet] == [r["annotation_id"] for r in jsonl]


@pytest.mark.django_db
def test_the_command_writes_each_format(project, labelled, tmp_path):
    queue, *_ = labelled
    out = tmp_path / "labels.parquet"
    stdout = io.StringIO()
    call_command(
        "queue_labels", "labels, v1", "--project", project.name, "--format", "parquet",
        "--out", str(out), stdout=stdout,
    )  # fmt: skip
    import pyarrow.parquet as pq

    assert pq.read_table(out).num_rows == 6 and "6 annotations" in stdout.getvalue()
    assert [p.name for p in tmp_path.iterdir()] == ["labels.parquet"]  # no part file left
    call_command(
        "queue_labels", str(queue.pk), "--project", str(project.pk), "--format", "csv",
        "--out", str(tmp_path / "l.csv"), stdout=stdout,
    )  # fmt: skip
    assert len(list(csv.DictReader((tmp_path / "l.csv").open(newline="")))) == 6
    with pytest.raises(CommandError, match="has no queue 'nope'"):
        call_command(
            "queue_labels", "nope", "--project", project.name, "--format", "csv",
            "--out", str(tmp_path / "x.csv"),
        )  # fmt: skip


@pytest.mark.django_db
def test_downloads_and_the_quality_panel_are_for_owners(client, project, labelled):
    queue, *_ = labelled
    labels = reverse("queue_labels", args=[queue.pk])
    panel = reverse("queue_annotators", args=[queue.pk])
    client.force_login(project.users["annotator"])
    assert client.get(labels).status_code == 403 and client.get(panel).status_code == 403
    assert (
        'id="queue-quality"'
        not in client.get(reverse("queue_detail", args=[queue.pk])).content.decode()
    )
    client.force_login(project.users["researcher"])
    detail = client.get(reverse("queue_detail", args=[queue.pk])).content.decode()
    assert 'id="queue-quality"' in detail and f'hx-get="{panel}"' in detail
    response = client.get(labels, {"format": "csv"})
    assert response["Content-Type"] == "text/csv"
    assert 'filename="queue-' in response["Content-Disposition"]
    assert response["Content-Disposition"].endswith('-labels.csv"')
    assert len(list(csv.DictReader(io.StringIO(response.content.decode())))) == 6
    assert client.get(labels, {"format": "xml"}).status_code == 404
    html = client.get(panel).content.decode()
    assert "zed (annotator-1)" in html and "amy (annotator-2)" in html
    assert 'id="annotator-quality-figure"' in html and "annotator-quality-data" in html
    assert "median of the other annotators" in html  # which alpha it is, in words


@pytest.mark.django_db
def test_each_annotators_quality(labelled):
    import krippendorff
    import numpy as np

    queue, _, zed, amy = labelled
    found = {q.user_id: q for q in annotator_quality(queue)}
    z, a = found[zed.pk], found[amy.pk]
    assert (z.pseudonym, z.done, a.done) == ("annotator-1", 3, 3)
    assert z.median_seconds == pytest.approx(360, abs=1)  # 2, 6, 10 minutes
    assert a.median_seconds == pytest.approx(480, abs=1)  # 4, 8, 12 minutes
    # with two annotators the others' median is the other's rating: both get the same alpha
    zed_ratings = [5] * 5 + [1] * 5 + [3] * 5
    amy_ratings = [5] * 5 + [4] * 5 + [3] * 5
    expected = krippendorff.alpha(
        reliability_data=np.array([zed_ratings, amy_ratings], dtype=float),
        level_of_measurement="ordinal",
    )
    assert z.alpha == a.alpha == round(float(expected), 3) and z.alpha_units == 15
    # the one adjudicated item (b, accepted): amy accepted it, zed rejected it
    assert (z.adjudicated, z.agrees_with_adjudication, z.adjudication_share) == (1, 0, 0.0)
    assert (a.adjudicated, a.agrees_with_adjudication, a.adjudication_share) == (1, 1, 1.0)
