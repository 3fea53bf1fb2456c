"""An evaluation run in the worker: choose its samples (once), predict every pending one with
the world model, judge every predicted one, and leave the run in a final state with its
figures. Requests run `concurrency` at a time in threads that only call the models; the main
thread writes each sample's row the moment its answer is in, so a worker that dies loses no
finished sample and Resume (a new message for the same run) goes on with what is left.

Rows are rebuilt per trajectory (`services.evaluations.rows_of`) as the samples are walked in
trajectory order: memory holds one trajectory's rows and the requests in flight."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from itertools import groupby
from typing import Any

from django.db import transaction

from inference.judge import DIMENSIONS, Judge
from inference.types import GenerationRequest, SamplingParams
from studio.jobs.dispatch import EVALUATION_TASK, send_again
from studio.jobs.runtime import JobMonitor, claim, finish
from studio.models import EvaluationRun, EvaluationSample, JobStatus, SampleStage, Trajectory
from studio.services.evaluations import draw_samples, figures, rows_of, sample_set_of_saved

log = logging.getLogger(__name__)

JUDGEMENT_FIELDS = (
    *DIMENSIONS, "total_score", "failed", "strengths", "weaknesses", "extracted_output",
    "judge_raw_output", "error_message",
)  # fmt: skip


class EvaluationError(Exception):
    pass


# A request waits at most this long for a model (and is tried twice). A run stops taking new
# samples this long before its task's time is up, with time left for the requests in flight,
# and hands the rest over to a new message of itself: a run may take many tasks' time.
REQUEST_TIMEOUT_S = 300


def task_budget_s() -> float:
    from django.conf import settings

    margin = 2 * REQUEST_TIMEOUT_S + 60
    return max(60.0, settings.STUDIO_JOB_SOFT_LIMIT_S - margin)


class Progress:
    """Two units per sample (predicted, judged); figures accumulate from the row's own, so a
    resumed run goes on counting."""

    def __init__(self, run: EvaluationRun, monitor: JobMonitor, total: int, done: int):
        self.monitor = monitor
        self.total = max(1, 2 * total)
        self.done = done
        self.counters = {
            name: getattr(run, name)
            for name in (
                "tokens_in",
                "tokens_out",
                "judge_tokens_in",
                "judge_tokens_out",
                "infer_s",
                "judge_s",
            )  # fmt: skip
        }

    def add(self, units: int = 1, **counters: float) -> None:
        self.done += units
        for name, value in counters.items():
            self.counters[name] += value
        self.monitor.set_job(progress=min(0.99, self.done / self.total), **self.counters)


def _world_backend(run: EvaluationRun, rows_for_retrieval: Callable[[], list[dict]]):
    from inference.awb_runner import LeaveOneOutRetrieval
    from inference.backends import make_backend
    from studio.services.endpoints import key_for_job

    if run.world_kind == "retrieval":
        # answered from the other trajectories: a sample's own answer is never looked up
        return LeaveOneOutRetrieval(rows_for_retrieval(), keep=4)
    return make_backend(
        run.world_kind,
        model=run.world_model,
        base_url=run.world_base_url,
        api_key=(
            key_for_job(run.world_endpoint, run.world_base_url, env="WORLD_MODEL_API_KEY")
            if run.world_kind == "openai"
            else ""
        ),
        concurrency=run.concurrency,
        # bounded, so that a run stops in time to hand over to its next message
        timeout=REQUEST_TIMEOUT_S,
        max_retries=1,
    )


def make_judge(
    endpoint: Any, base_url: str, model: str, temperature: Any, max_tokens: Any
) -> Judge:
    """The judge model of a job, as the row recorded it (an evaluation, a judge job): bounded
    requests, so a job stops in time to hand over to its next message."""
    from studio.services.endpoints import key_for_job

    return Judge(
        base_url=base_url,
        model=model,
        api_key=key_for_job(endpoint, base_url, env="JUDGE_MODEL_API_KEY"),
        temperature=float(temperature),
        max_tokens=int(max_tokens),
        timeout=REQUEST_TIMEOUT_S,
        attempts=2,
    )


def _judge(run: EvaluationRun) -> Judge:
    params = run.params or {}
    return make_judge(
        run.judge_endpoint,
        run.judge_base_url,
        run.judge_model,
        params.get("judge_temperature", 0.6),
        params.get("judge_max_tokens", 32768),
    )


def _with_rows(samples: Iterator[EvaluationSample]) -> Iterator[tuple[EvaluationSample, Any]]:
    """Each sample with its row (None: its trajectory or step is gone), one trajectory's rows
    alive at a time."""
    for trajectory_id, group in groupby(samples, key=lambda s: s.trajectory_id):
        trajectory = Trajectory.objects.filter(pk=trajectory_id).first() if trajectory_id else None
        rows = {r["step_index"]: r for r in rows_of(trajectory)} if trajectory else {}
        for sample in group:
            yield sample, rows.get(sample.step_index)


class OutOfTime(Exception):
    """The task's time is nearly up: the run goes on in a new message."""


def _run_pool(
    run: EvaluationRun,
    monitor: JobMonitor,
    items: Iterator[tuple[EvaluationSample, Any]],
    work: Callable[[Any], dict],
    save: Callable[[EvaluationSample, dict], None],
    deadline: float,
) -> None:
    """`work(row)` in threads, at most `concurrency` in flight; `save` in this thread, for
    each result as it comes (a work item that raises fails its sample only). Stops taking
    samples when cancelled, or past `deadline` (then raises OutOfTime once the requests in
    flight are saved)."""
    in_flight: dict[Future, EvaluationSample] = {}

    def drain_one() -> None:
        done, _ = wait(list(in_flight), return_when=FIRST_COMPLETED)
        for future in done:
            sample = in_flight.pop(future)
            try:
                out = future.result()
            except Exception as exc:  # noqa: BLE001 - that sample fails, the run goes on
                log.exception("evaluation %s: sample %s failed", run.pk, sample.key)
                out = {"error": f"{type(exc).__name__}: {exc}"}
            save(sample, out)

    out_of_time = False
    with ThreadPoolExecutor(max_workers=run.concurrency) as pool:
        for sample, row in items:
            if monitor.cancel_requested:
                break
            if time.monotonic() > deadline:
                out_of_time = True
                break
            if row is None:
                save(sample, {"error": "its trajectory or step was deleted"})
                continue
            while len(in_flight) >= run.concurrency:
                drain_one()
            in_flight[pool.submit(work, row)] = sample
        while in_flight:
            drain_one()
    if out_of_time:
        raise OutOfTime


def _predict(backend, params: dict) -> Callable[[dict], dict]:
    from inference.parsing import parse_prediction
    from inference.prompts import reference_messages

    sampling = SamplingParams(
        temperature=float(params.get("temperature", 0.6)),
        top_p=params.get("top_p"),
        max_tokens=int(params.get("max_tokens", 32768)),
        seed=None,
        n=1,
    )

    def predict(row: dict) -> dict:
        started = time.monotonic()
        try:
            target = backend.for_row(row) if hasattr(backend, "for_row") else backend
            completion = target.generate(
                GenerationRequest(messages=reference_messages(row), params=sampling), None
            )[0]
        except Exception as exc:  # noqa: BLE001 - the sample fails, the run goes on
            return {"error": f"{type(exc).__name__}: {exc}"}
        if completion.finish_reason == "error":
            return {"error": completion.error or "the model returned an error"}
        gen = completion.text if completion.answer is None else completion.answer
        return {
            "gen": gen,
            "reasoning": completion.reasoning,
            "predicted_observation": parse_prediction(gen).observation,
            "tokens_in": completion.tokens_in,
            "tokens_out": completion.tokens_out,
            "infer_s": time.monotonic() - started,
        }

    return predict


def _infer(run: EvaluationRun, progress: Progress, monitor: JobMonitor, deadline: float) -> None:
    from studio.services.evaluations import rows_of as rows_of_trajectory

    monitor.set_job(phase="infer")
    pending = run.samples.filter(stage=SampleStage.PENDING).order_by("trajectory_id", "step_index")

    def all_rows() -> list[dict]:
        ids = run.samples.values_list("trajectory_id", flat=True).distinct()
        return [r for t in Trajectory.objects.filter(pk__in=ids) for r in rows_of_trajectory(t)]

    backend = _world_backend(run, all_rows)

    def save(sample: EvaluationSample, out: dict) -> None:
        mine = EvaluationSample.objects.filter(pk=sample.pk, stage=SampleStage.PENDING)
        if out.get("error"):
            if mine.update(stage=SampleStage.INFER_FAILED, error=out["error"][:2000], gen=""):
                progress.add(2)  # it will not be judged either
            return
        if not mine.update(
            stage=SampleStage.PREDICTED, gen=out["gen"], reasoning=out["reasoning"],
            predicted_observation=out["predicted_observation"], tokens_in=out["tokens_in"],
            tokens_out=out["tokens_out"], infer_s=round(out["infer_s"], 4), error="",
        ):  # fmt: skip
            return  # another worker saved it (this one was taken for lost)
        progress.add(
            1,
            tokens_in=out["tokens_in"],
            tokens_out=out["tokens_out"],
            infer_s=round(out["infer_s"], 4),
        )

    _run_pool(
        run, monitor, _with_rows(pending.iterator()), _predict(backend, run.params), save, deadline
    )


def _judge_all(
    run: EvaluationRun, progress: Progress, monitor: JobMonitor, deadline: float
) -> None:
    monitor.set_job(phase="judge")
    judge = _judge(run)
    predicted = (
        run.samples.filter(stage=SampleStage.PREDICTED)
        .defer("reasoning")
        .order_by("trajectory_id", "step_index")
    )

    def items() -> Iterator[tuple[EvaluationSample, Any]]:
        for sample, row in _with_rows(predicted.iterator()):
            if row is not None:
                row = {
                    **row,
                    "gen": sample.gen,
                    "predicted_observation": sample.predicted_observation,
                }
            yield sample, row

    def work(row: dict) -> dict:
        started = time.monotonic()
        judged = judge.judge_row(row)
        judged["_s"] = time.monotonic() - started
        return judged

    def save(sample: EvaluationSample, out: dict) -> None:
        mine = EvaluationSample.objects.filter(pk=sample.pk, stage=SampleStage.PREDICTED)
        if "error" in out and "judge" not in out:  # its trajectory went, or the judge broke
            if mine.update(stage=SampleStage.JUDGE_FAILED, error=out["error"][:2000]):
                progress.add(1)
            return
        ok = out.get("failed") == 0.0
        judgement = {k: out[k] for k in JUDGEMENT_FIELDS if k in out}
        if not mine.update(
            stage=SampleStage.JUDGED if ok else SampleStage.JUDGE_FAILED,
            judgement=judgement,
            total_score=out.get("total_score") if ok else None,
            error="" if ok else "; ".join((out.get("judge") or {}).get("errors", []))[:2000],
        ):
            return  # another worker saved it
        meta = out.get("judge") or {}
        progress.add(
            1,
            judge_tokens_in=meta.get("tokens_in", 0),
            judge_tokens_out=meta.get("tokens_out", 0),
            judge_s=round(out.get("_s", 0.0), 4),
        )

    _run_pool(run, monitor, items(), work, save, deadline)


def _done_units(run: EvaluationRun) -> int:
    units = 0
    for stage in run.samples.values_list("stage", flat=True):
        if stage == SampleStage.PREDICTED:
            units += 1
        elif stage != SampleStage.PENDING:
            units += 2
    return units


def run_evaluation(run_id: int, message_id: str = "") -> None:
    """The body of the Celery task: claim, run the stages, and end in a final state, or,
    when the task's time is nearly up, hand the rest of the run to a new message."""
    deadline = time.monotonic() + task_budget_s()
    run = claim(EvaluationRun, run_id, message_id, phase="sampling")
    if run is None:
        return
    status, error, handed_over = JobStatus.SUCCEEDED, "", False
    with JobMonitor(EvaluationRun, run.pk) as monitor:
        try:
            if not run.samples.exists():
                drawn = draw_samples(run)
                with transaction.atomic():  # all the samples, or none (then chosen again)
                    EvaluationSample.objects.bulk_create(
                        drawn.samples, batch_size=500, ignore_conflicts=True
                    )
                    # what they were drawn from: the leaderboard tells a run that scored
                    # every candidate from one the limit cut
                    params = {**(run.params or {}), "sample_pool": drawn.pool}
                    EvaluationRun.objects.filter(pk=run.pk).update(
                        sample_set=drawn.digest, params=params
                    )
                run.params = params
            elif not run.sample_set:  # sampled before digests were kept: from what it holds
                EvaluationRun.objects.filter(pk=run.pk).update(sample_set=sample_set_of_saved(run))
            total = run.samples.count()
            EvaluationRun.objects.filter(pk=run.pk).update(samples_total=total)
            if total == 0:
                raise EvaluationError(
                    "no recorded step to evaluate: the project has no recorded trajectory"
                    + (f" in {', '.join(run.domains)}" if run.domains else "")
                    + (" imported from AgentWorldBench" if run.source == "benchmark" else "")
                )
            progress = Progress(run, monitor, total, _done_units(run))
            _infer(run, progress, monitor, deadline)
            if not monitor.cancel_requested:
                _judge_all(run, progress, monitor, deadline)
            if monitor.cancel_requested:
                status = JobStatus.CANCELLED
            elif not run.samples.filter(stage=SampleStage.JUDGED).exists():
                first = run.samples.exclude(error="").values_list("error", flat=True).first()
                raise EvaluationError(
                    f"no sample was judged: every one of the {total} failed"
                    + (f" (the first: {first})" if first else "")
                    + ". The samples are kept with their errors: fix the model, then Resume."
                )
        except OutOfTime:
            handed_over = True
        except Exception as exc:  # noqa: BLE001 - the row says what went wrong
            if not isinstance(exc, EvaluationError):
                log.exception("evaluation %s failed", run.pk)
            status = JobStatus.FAILED
            error = (
                str(exc)
                if isinstance(exc, EvaluationError)
                else (
                    f"Evaluation failed ({type(exc).__name__}): {exc}. Finished samples are kept: "
                    "use Resume."
                )
            )
    mine = EvaluationRun.objects.filter(pk=run.pk, status=JobStatus.RUNNING, claimed_by=message_id)
    if handed_over:
        if mine.update(status=JobStatus.QUEUED, phase="queued"):
            send_again(EvaluationRun, run.pk, run.message_id, EVALUATION_TASK)
        return
    phase = {"succeeded": "done", "cancelled": "cancelled"}.get(str(status), "failed")
    fields: dict[str, Any] = {"phase": phase, "error": error, "results": figures(run)}
    if status == JobStatus.SUCCEEDED:
        fields["progress"] = 1.0
    if not mine.exists():
        log.warning("evaluation %s ended elsewhere meanwhile; this worker leaves it", run.pk)
        return
    finish(EvaluationRun, run.pk, status, **fields)
