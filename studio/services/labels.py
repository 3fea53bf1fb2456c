"""A queue's labels as data: one row per annotation made in the queue (its step, the annotator
under a pseudonym stable within the queue, the five ratings, the custom answers, the verdict,
the correction, tags, comment, the time spent on the item, the step's newest judge scores, and
whether the annotator flagged the item), written as JSONL, CSV or Parquet.

Annotators are never named: "annotator-N" numbers them by their first annotation in the
queue (`studio.services.agreement.pseudonyms`). CSV cells that hold a list or a mapping
(tags, answers) hold it as JSON text; in Parquet, tags are a list of strings and answers JSON
text (an answer is a number, a text or a list, depending on its question, which no one column
type holds)."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from typing import IO, Any

from inference.judge import DIMENSIONS
from studio.models import AnnotationQueue, QueueClaim, StepAnnotation
from studio.services.agreement import pseudonyms
from studio.services.datasets import file_stem
from studio.services.judging import latest_judgements

FORMATS = {
    "jsonl": ("application/x-ndjson", "jsonl"),
    "csv": ("text/csv", "csv"),
    "parquet": ("application/vnd.apache.parquet", "parquet"),
}
COLUMNS = [
    "annotation_id", "step_id", "trajectory_id", "trajectory", "branch_id", "branch",
    "step_index", "queue_id", "queue", "annotator",
    *[f"rating_{d}" for d in DIMENSIONS],
    "answers", "verdict", "corrected_observation", "tags", "comment", "seconds_spent",
    "flagged", "judge_model", *[f"judge_{d}" for d in DIMENSIONS], "judge_total",
    "created_at", "updated_at",
]  # fmt: skip


def file_name(queue: AnnotationQueue, fmt: str) -> str:
    return f"queue-{queue.pk}-{file_stem(queue.name)[:60]}-labels.{FORMATS[fmt][1]}"


def label_rows(queue: AnnotationQueue) -> Iterator[dict[str, Any]]:
    """The queue's annotations as rows (COLUMNS), in the order they were made."""
    names = pseudonyms(queue)
    claims = {
        (item_step, user): (claimed, done, flagged)
        for item_step, user, claimed, done, flagged in QueueClaim.objects.filter(
            item__queue=queue
        ).values_list("item__step_id", "user_id", "claimed_at", "done_at", "flagged_at")
    }
    judged = latest_judgements(queue.items.values_list("step_id", flat=True))
    rows = (
        StepAnnotation.objects.filter(queue=queue)
        .select_related("step__branch__trajectory")
        .order_by("created_at", "id")
    )
    for a in rows.iterator(chunk_size=500):
        step = a.step
        claimed, done, flagged = claims.get((a.step_id, a.author_id), (None, None, None))
        judgement = judged.get(a.step_id)
        ratings = a.ratings or {}
        scores = (judgement.scores or {}) if judgement else {}
        yield {
            "annotation_id": a.pk,
            "step_id": a.step_id,
            "trajectory_id": step.branch.trajectory_id,
            "trajectory": step.branch.trajectory.title,
            "branch_id": step.branch_id,
            "branch": step.branch.name,
            "step_index": step.index,
            "queue_id": queue.pk,
            "queue": queue.name,
            "annotator": names.get(a.author_id, "annotator-?"),
            **{f"rating_{d}": _int(ratings.get(d)) for d in DIMENSIONS},
            "answers": a.answers or {},
            "verdict": a.verdict or None,
            "corrected_observation": a.corrected_observation or None,
            "tags": [str(t) for t in (a.tags or [])],
            "comment": a.comment,
            "seconds_spent": (
                round(max((done - claimed).total_seconds(), 0.0), 1) if claimed and done else None
            ),
            "flagged": flagged is not None,
            "judge_model": judgement.judge_model if judgement else None,
            **{f"judge_{d}": _float(scores.get(d)) for d in DIMENSIONS},
            "judge_total": judgement.total_score if judgement else None,
            "created_at": a.created_at.isoformat(),
            "updated_at": a.updated_at.isoformat(),
        }


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _float(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def write_labels(queue: AnnotationQueue, fmt: str, out: IO[bytes]) -> int:
    """Write the queue's labels to `out` in `fmt` (jsonl, csv, parquet); the number of rows."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown labels format {fmt!r}: one of {', '.join(FORMATS)}")
    rows = label_rows(queue)
    if fmt == "parquet":
        return _write_parquet(rows, out)
    count = 0
    if fmt == "jsonl":
        for row in rows:
            out.write(json.dumps(row, ensure_ascii=False).encode() + b"\n")
            count += 1
        return count
    text = io.TextIOWrapper(out, encoding="utf-8", newline="", write_through=True)
    writer = csv.DictWriter(text, fieldnames=COLUMNS)
    writer.writeheader()
    for row in rows:
        writer.writerow(
            {
                k: (json.dumps(v, ensure_ascii=False) if isinstance(v, list | dict) else v)
                for k, v in row.items()
            }
        )
        count += 1
    text.detach()  # leave `out` open for the caller
    return count


def _write_parquet(rows: Iterator[dict[str, Any]], out: IO[bytes]) -> int:
    import pyarrow as pa
    import pyarrow.parquet as pq

    types: dict[str, Any] = {c: pa.string() for c in COLUMNS}
    for c in ("annotation_id", "step_id", "trajectory_id", "branch_id", "step_index", "queue_id"):
        types[c] = pa.int64()
    for d in DIMENSIONS:
        types[f"rating_{d}"] = pa.int8()
        types[f"judge_{d}"] = pa.float64()
    types.update(
        judge_total=pa.float64(),
        seconds_spent=pa.float64(),
        flagged=pa.bool_(),
        tags=pa.list_(pa.string()),
    )
    schema = pa.schema([(c, types[c]) for c in COLUMNS])
    columns: dict[str, list[Any]] = {c: [] for c in COLUMNS}
    count = 0
    for row in rows:
        for c in COLUMNS:
            value = row[c]
            columns[c].append(json.dumps(value, ensure_ascii=False) if c == "answers" else value)
        count += 1
    pq.write_table(pa.table(columns, schema=schema), out)
    return count
