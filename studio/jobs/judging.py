"""A judge job in the worker: score each simulated step of its target with the judge model,
`concurrency` requests at a time in threads that only call the judge; this thread writes each
step's judgement the moment it is in, so a worker that dies loses no finished judgement and a
retried job skips the steps it already judged. A judge whose server cannot be reached fails the
job after its first few steps (UNREACHABLE_AFTER), saying so, instead of trying every step."""

from __future__ import annotations

import logging
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any

from django.db import IntegrityError
from django.db.models import F

from inference.judge import Judge
from studio.jobs.dispatch import JUDGE_TASK, send_again
from studio.jobs.runtime import JobMonitor, claim, finish
from studio.models import JobStatus, JudgeJob, StepJudgement
from studio.services.judging import JudgeItem, items_for, judged_steps, target_steps

log = logging.getLogger(__name__)

# Steps in a row whose every attempt failed to reach the judge's server (refused, unknown host),
# before any step of the job was judged, that end the job: the rest would fail the same way.
UNREACHABLE_AFTER = 3


class JudgingError(Exception):
    pass


def _judge(job: JudgeJob) -> Judge:
    from studio.jobs.evaluations import make_judge

    params = job.params or {}
    return make_judge(
        job.judge_endpoint,
        job.judge_base_url,
        job.judge_model,
        params.get("temperature", 0.6),
        params.get("max_tokens", 32768),
    )


def _save(job: JudgeJob, item: JudgeItem, out: dict[str, Any]) -> bool:
    """The step's judgement; True when it was judged (False: failed)."""
    meta = out.get("judge") or {}
    ok = out.get("failed") == 0.0
    fields: dict[str, Any] = {
        "judge_model": job.judge_model,
        "reference_id": item.reference.pk if item.reference is not None else None,
        "ok": ok,
        "scores": out.get("scores") or {},
        "total_score": round(float(out["total_score"]), 3) if ok else None,
        "strengths": out.get("strengths") or [],
        "weaknesses": out.get("weaknesses") or [],
        "raw": meta.get("raw", "") or "",
        "error": "" if ok else ("; ".join(meta.get("errors") or []) or out.get("error", ""))[:2000],
    }
    try:
        StepJudgement.objects.create(job_id=job.pk, step_id=item.step.pk, **fields)
    except IntegrityError:  # another worker saved it (this one was taken for lost)
        return ok
    counter = "steps_judged" if ok else "steps_failed"
    JudgeJob.objects.filter(pk=job.pk).update(
        **{counter: F(counter) + 1},
        judge_tokens_in=F("judge_tokens_in") + meta.get("tokens_in", 0),
        judge_tokens_out=F("judge_tokens_out") + meta.get("tokens_out", 0),
        judge_s=F("judge_s") + round(out.get("_s", 0.0), 4),
    )
    return ok


def unreachable_message(
    model: str,
    base_url: str,
    why: str,
    attempts: int,
    done: int,
    tried: int,
    left: int,
    *,
    noun: str = "step",
    done_word: str = "judged",
    what: str = "job",
) -> str:
    """Why a job that asks a judge stopped early: its server could not be reached. `done`
    of the `tried` items (`noun`s: steps, candidates) were `done_word` (only one in flight
    when it stopped can have been), `left` were not tried. Shared by the judge job and
    behaviour search (`what`: "job", "search")."""
    where = f"the judge model {model!r} at {base_url}"
    times = {1: "once", 2: "twice"}.get(attempts, f"{attempts} times")
    rest = f"; the other {left} not tried" if left else ""
    if not done:
        return (
            f"{where} cannot be reached: {why}. No {noun} was {done_word} ({tried} "
            f"{noun}{'s' if tried != 1 else ''} tried, {times} each{rest}). "
            f"Resume the {what} once the server answers."
        )
    return (
        f"{where} could not be reached for {UNREACHABLE_AFTER} {noun}s in a row ({why}), so the "
        f"{what} stopped: {done} of the {tried} {noun}s tried were {done_word}{rest}. "
        f"Resume the {what} once the server answers."
    )


def run_judge_job(job_id: int, message_id: str = "") -> None:
    """The body of the Celery task: claim, judge what is left, and end in a final state, or,
    when the task's time is nearly up, hand the rest to a new message of itself (as an
    evaluation does), so a long job needs no one to resume it."""
    from studio.jobs.evaluations import task_budget_s

    deadline = time.monotonic() + task_budget_s()
    job = claim(JudgeJob, job_id, message_id, phase="judging")
    if job is None:
        return
    status, error, handed_over = JobStatus.SUCCEEDED, "", False
    with JobMonitor(JudgeJob, job.pk) as monitor:
        try:
            total = target_steps(job).count()
            todo = judged_steps(job).exclude(judgements__job_id=job.pk)
            to_judge = judged_steps(job).count()
            done_before = to_judge - todo.count()
            JudgeJob.objects.filter(pk=job.pk).update(
                steps_total=to_judge, steps_skipped=total - to_judge
            )
            judge = _judge(job)
            done = done_before
            judged_now = 0
            tried = 0
            # Until a step is judged, a run of steps that never reached the server ends the job.
            any_judged = StepJudgement.objects.filter(job_id=job.pk, ok=True).exists()
            unreachable_run, unreachable_why, stopped = 0, "", False
            # this run's steps asked of the judge, and those whose every attempt was a
            # connection failure (a job of few steps can end before the early stop looks)
            asked_now, unreachable_now = 0, 0

            def cannot_reach() -> bool:
                return not any_judged and unreachable_run >= UNREACHABLE_AFTER

            def work(item: JudgeItem) -> dict[str, Any]:
                started = time.monotonic()
                out = judge.judge_row(item.row)
                out["_s"] = time.monotonic() - started
                return out

            in_flight: dict[Future, JudgeItem] = {}

            def drain_one() -> None:
                nonlocal done, judged_now, tried, any_judged, unreachable_run, unreachable_why
                nonlocal asked_now, unreachable_now
                finished, _ = wait(list(in_flight), return_when=FIRST_COMPLETED)
                for future in finished:
                    item = in_flight.pop(future)
                    try:
                        out = future.result()
                    except Exception as exc:  # noqa: BLE001 - that step fails, the job goes on
                        log.exception("judge job %s: step %s failed", job.pk, item.step.pk)
                        out = {"failed": 1.0, "error": f"{type(exc).__name__}: {exc}"}
                    ok = _save(job, item, out)
                    judged_now += ok
                    any_judged = any_judged or ok
                    meta = out.get("judge") or {}
                    if meta.get("attempts") != 0:  # 0: not asked (the step had no generation)
                        why = meta.get("unreachable") or ""
                        unreachable_run = unreachable_run + 1 if why else 0
                        unreachable_why = why or unreachable_why
                        asked_now += 1
                        unreachable_now += bool(why)
                    tried += 1
                    done += 1
                    monitor.set_job(progress=min(0.99, done / max(1, to_judge)))

            with ThreadPoolExecutor(max_workers=job.concurrency) as pool:
                for item in items_for(todo.iterator(chunk_size=500)):
                    while len(in_flight) >= job.concurrency and not cannot_reach():
                        drain_one()
                    # looked at once a request may go out, after the answers in flight (which
                    # can take minutes): a Cancel that came meanwhile sends no other request
                    if monitor.cancelled_now():
                        break
                    if time.monotonic() > deadline:
                        handed_over = True
                        break
                    if cannot_reach():
                        stopped = True  # the steps in flight still end and are saved
                        break
                    in_flight[pool.submit(work, item)] = item
                while in_flight:
                    drain_one()
            if monitor.cancelled_now():
                status = JobStatus.CANCELLED
            elif stopped or (
                not any_judged
                and asked_now > 0
                and unreachable_now == asked_now
                and not handed_over
            ):
                # stopped early, or every step of a small job was tried (all handed out before
                # the early stop could look) and none reached the server: the same words
                raise JudgingError(
                    unreachable_message(
                        job.judge_model,
                        job.judge_base_url,
                        unreachable_why,
                        judge.attempts,
                        judged_now,
                        tried,
                        to_judge - done,
                    )
                )
            elif handed_over:
                pass
            elif not StepJudgement.objects.filter(job_id=job.pk, ok=True).exists():
                first = (
                    StepJudgement.objects.filter(job_id=job.pk, ok=False)
                    .values_list("error", flat=True)
                    .first()
                )
                raise JudgingError(
                    f"no step was judged: every one of the {to_judge} failed"
                    + (f" (the first: {first})" if first else "")
                )
        except Exception as exc:  # noqa: BLE001 - the row says what went wrong
            if not isinstance(exc, JudgingError):
                log.exception("judge job %s failed", job.pk)
            status = JobStatus.FAILED
            error = (
                str(exc)
                if isinstance(exc, JudgingError)
                else f"Judging failed ({type(exc).__name__}): {exc}. Finished judgements are kept."
            )
    mine = JudgeJob.objects.filter(pk=job.pk, status=JobStatus.RUNNING, claimed_by=message_id)
    if handed_over and status == JobStatus.SUCCEEDED:
        if mine.update(status=JobStatus.QUEUED, phase="queued"):
            send_again(JudgeJob, job.pk, job.message_id, JUDGE_TASK)
        return
    phase = {"succeeded": "done", "cancelled": "cancelled"}.get(str(status), "failed")
    fields: dict[str, Any] = {"phase": phase, "error": error}
    if status == JobStatus.SUCCEEDED:
        fields["progress"] = 1.0
    if not mine.exists():
        log.warning("judge job %s ended elsewhere meanwhile; this worker leaves it", job.pk)
        return
    finish(JudgeJob, job.pk, status, **fields)
