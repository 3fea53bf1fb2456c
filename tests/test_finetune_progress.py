"""The job's progress writer (`studio.jobs.finetunes.Progress`): what reaches the row, and
when, as the trainer reports a step's end and then its logged loss."""

from __future__ import annotations

from types import SimpleNamespace

from inference.finetune import TrainProgress
from studio.jobs.finetunes import Progress


class Monitor:
    cancel_requested = False

    def __init__(self):
        self.writes: list[dict] = []

    def set_job(self, **fields):
        self.writes.append(fields)


def test_a_loss_logged_just_after_its_steps_end_is_written_at_once():
    run = SimpleNamespace(loss_history=[], settings={})
    monitor = Monitor()
    progress = Progress(run, monitor)  # type: ignore[arg-type]
    progress(TrainProgress(1, 5, 0.2, None, None, 40, 0.5))  # step 1 ends: written
    progress(TrainProgress(1, 5, 0.2, 2.5, 1e-3, 40, 0.5))  # its loss, a moment later
    curves = [w["loss_history"] for w in monitor.writes if "loss_history" in w]
    assert curves[-1] == [[1, 2.5, 1e-3]]  # not left for the next write
    assert [w["first_loss"] for w in monitor.writes if "first_loss" in w][-1] == 2.5
    # within the throttle, a step's end with no owed loss is not written again
    before = len(monitor.writes)
    progress(TrainProgress(2, 5, 0.4, None, None, 80, 0.6))
    assert len(monitor.writes) == before


def test_the_rows_line_counts_the_rows_that_train():
    from studio.presenters.finetune_charts import rows_text

    run = SimpleNamespace(examples=93, settings={"fit": {"rows_trimmed": 56, "rows_dropped": 10}})
    assert rows_text(run) == "83 of the 93 rows built train"
    assert rows_text(SimpleNamespace(examples=1, settings={})) == "1 training row"
    assert rows_text(SimpleNamespace(examples=0, settings={})) == ""
