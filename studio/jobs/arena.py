"""An arena in the worker. It never holds a worker while it waits: each look at it is one
short task (`studio.tasks.advance_arena`) that starts the next phase when the last one is
over, else sends itself again with a countdown (STUDIO_ARENA_POLL_S). The end of each of its
simulations and of its judge job sends a look at once (`studio.tasks.poke_arena_of`), so a
phase starts as soon as the last job ends; the countdown only catches what a look missed.

- simulating (QUEUED): its simulations run as any simulation does;
- judging (QUEUED): a judge job of target "arena" scores every future at the fork, reusing
  the pointwise judge (against the recorded observation when the path matches it, else
  consistency and realism);
- comparing (RUNNING, claimed once, with heartbeats: the sweeper fails it if its worker dies):
  for every two models and every sample index where both have a future, the judge says which
  prediction is more faithful, or tie; each verdict is saved the moment it is in
  (`ArenaPair`), a failed one with its error.

Only the message the row names sends the next look, so one chain of looks runs however many
messages a phase change produced."""

from __future__ import annotations

import logging
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any, cast

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from inference.judge import compare_pair
from studio.jobs.runtime import JobMonitor, claim, finish
from studio.models import (
    ArenaPair,
    ArenaRun,
    JobStatus,
    JudgeJob,
    JudgeTarget,
    PairWinner,
    SimulationJob,
    Step,
)
from studio.services.arena import arena_jobs, planned_pairs
from studio.services.judging import JudgeData, items_for, start_judging

log = logging.getLogger(__name__)

# How the arena's progress bar splits between its phases.
SIMULATING_SHARE, JUDGING_SHARE = 0.5, 0.25


def poll_s() -> float:
    return float(getattr(settings, "STUDIO_ARENA_POLL_S", 2.0))


def advance_arena(arena_id: int, message_id: str = "") -> None:
    """One look: see where the arena is, and move it on or look again later."""
    arena = ArenaRun.objects.filter(pk=arena_id).first()
    if arena is None or arena.status != JobStatus.QUEUED:
        return  # running (comparing), finished or deleted: nothing for this message
    if arena.phase in ("queued", "simulating"):
        jobs = arena_jobs(arena)
        if any(not job.is_finished for job in jobs):
            progress = sum(1.0 if j.is_finished else float(j.progress or 0) for j in jobs)
            _set(arena, progress=SIMULATING_SHARE * progress / max(1, len(jobs)))
            _look_again(arena, message_id)
            return
        if not _start_judging(arena, jobs):
            _look_again(arena, message_id)
            return
        arena.refresh_from_db()
    if arena.phase == "judging" and arena.status == JobStatus.QUEUED:
        judge_job = (
            JudgeJob.objects.filter(pk=arena.judge_job_id).first() if arena.judge_job_id else None
        )
        if judge_job is not None and not judge_job.is_finished:
            share = float(judge_job.progress or 0)
            _set(arena, progress=SIMULATING_SHARE + JUDGING_SHARE * share)
            _look_again(arena, message_id)
            return
        compare(arena.pk, message_id)


def _set(arena: ArenaRun, **fields: Any) -> None:
    ArenaRun.objects.filter(pk=arena.pk, status=JobStatus.QUEUED).update(**fields)


def _look_again(arena: ArenaRun, message_id: str) -> None:
    from studio.tasks import recheck_arena

    if message_id:  # a look called directly (a test, a command) starts no chain
        recheck_arena(arena.pk, message_id, poll_s())


def _end_waiting(arena: ArenaRun, status: str, error: str) -> None:
    """End an arena that is not running (it waited for its jobs)."""
    ArenaRun.objects.filter(pk=arena.pk, status=JobStatus.QUEUED).update(
        status=status,
        error=error,
        phase="failed" if status == JobStatus.FAILED else "cancelled",
        finished_at=timezone.now(),
    )


def _start_judging(arena: ArenaRun, jobs: list[SimulationJob]) -> bool:
    """Every simulation has ended: the judge job of its futures, or the arena's end when
    there is nothing to judge. False: not now (the project has no room for one more job, or
    another look started it meanwhile)."""
    from studio.tasks import enqueue_judging

    futures = Step.objects.filter(
        branch__job__in=jobs, index=arena.fork_index, observation_source__in=("simulated",)
    ).exclude(observation="")
    if not futures.exists():
        failures = "; ".join(
            f"{job.world_name or job.model or job.backend}: {job.error or job.status}"
            for job in jobs
        )
        _end_waiting(
            arena,
            JobStatus.FAILED,
            f"No model produced a future at step {arena.fork_index}, so nothing was judged "
            f"({failures or 'no simulation'}).",
        )
        return True
    if arena.judge_endpoint is None:
        _end_waiting(
            arena,
            JobStatus.FAILED,
            "The arena's judge endpoint was deleted before judging; start a new arena with a "
            "judge that exists. The futures are kept.",
        )
        return True
    params = arena.judge_params or {}
    try:
        with transaction.atomic():
            if not ArenaRun.objects.filter(
                pk=arena.pk, status=JobStatus.QUEUED, phase__in=("queued", "simulating")
            ).update(phase="judging", progress=SIMULATING_SHARE):
                return True  # another look started it
            job = start_judging(
                arena.project,
                arena.requester,
                JudgeData(
                    judge=arena.judge_endpoint,
                    target=JudgeTarget.ARENA,
                    arena=arena,
                    temperature=float(params.get("temperature", 0.6)),
                    max_tokens=int(params.get("max_tokens", 32768)),
                    concurrency=int(params.get("concurrency", 4)),
                ),
            )
            ArenaRun.objects.filter(pk=arena.pk).update(judge_job=job)
            enqueue_judging(job)
    except ValueError as exc:  # TooManyJobs: the project is full; the next look tries again
        log.info("arena %s waits to judge: %s", arena.pk, exc)
        return False
    return True


def compare(arena_id: int, message_id: str = "") -> None:
    """The comparing phase: claim the arena, judge every planned pair not judged yet, end;
    or, when the task's time is nearly up, hand the rest to a new look (as a judge job does),
    which claims it again and skips the pairs already judged."""
    from studio.jobs.evaluations import make_judge, task_budget_s

    deadline = time.monotonic() + task_budget_s()

    arena = cast(
        "ArenaRun | None",
        claim(cast(Any, ArenaRun), arena_id, message_id, phase="comparing"),
    )
    if arena is None:
        return
    status, error, handed_over = JobStatus.SUCCEEDED, "", False
    with JobMonitor(ArenaRun, arena.pk) as monitor:
        try:
            planned = planned_pairs(arena)
            done = set(ArenaPair.objects.filter(arena=arena).values_list("step_a_id", "step_b_id"))
            ArenaRun.objects.filter(pk=arena.pk).update(pairs_total=len(planned))
            params = arena.judge_params or {}
            judge = make_judge(
                arena.judge_endpoint,
                arena.judge_base_url,
                arena.judge_model,
                params.get("temperature", 0.6),
                params.get("max_tokens", 32768),
            )
            rows = {item.step.pk: item for item in items_for(_in_branch_order(planned))}
            in_flight: dict[Future, tuple[Any, ...]] = {}
            finished = len(done)

            def drain_one() -> None:
                nonlocal finished
                ended, _ = wait(list(in_flight), return_when=FIRST_COMPLETED)
                for future in ended:
                    entry = in_flight.pop(future)
                    try:
                        out = future.result()
                    except Exception as exc:  # noqa: BLE001 - that pair fails, the rest go on
                        out = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
                    _save_pair(arena, entry, out)
                    finished += 1
                    share = finished / max(1, len(planned))
                    monitor.set_job(progress=SIMULATING_SHARE + JUDGING_SHARE + 0.25 * share)

            concurrency = max(1, int(params.get("concurrency", 4)))
            with ThreadPoolExecutor(max_workers=concurrency) as pool:
                for number, (job_a, job_b, sample, step_a, step_b) in enumerate(planned):
                    if monitor.cancel_requested:
                        break
                    if time.monotonic() > deadline:
                        handed_over = True
                        break
                    if (step_a.pk, step_b.pk) in done:
                        continue
                    item = rows.get(step_a.pk)
                    # the judge sees them in turn first and second, so that a judge that
                    # prefers the first answer favours no model
                    shown_first = "a" if number % 2 == 0 else "b"
                    first, second = (step_a, step_b) if shown_first == "a" else (step_b, step_a)
                    entry = (job_a, job_b, sample, step_a, step_b, shown_first, item)
                    if item is None:
                        _save_pair(arena, entry, {"ok": False, "error": "the future is gone"})
                        continue
                    while len(in_flight) >= concurrency:
                        drain_one()
                    in_flight[
                        pool.submit(
                            compare_pair, judge, item.row, first.observation, second.observation
                        )
                    ] = entry
                while in_flight:
                    drain_one()
            counts = ArenaRun.objects.values("pairs_total", "pairs_judged", "pairs_failed").get(
                pk=arena.pk
            )
            if monitor.cancel_requested:
                status = JobStatus.CANCELLED
            elif handed_over:
                pass
            elif not counts["pairs_total"]:
                status = JobStatus.FAILED
                error = (
                    "Nothing to compare: fewer than two models have a future at the same "
                    "sample index (see each model's simulation). Their scores are kept."
                )
            elif not counts["pairs_judged"]:
                first_error = (
                    ArenaPair.objects.filter(arena=arena, ok=False)
                    .values_list("error", flat=True)
                    .first()
                )
                status = JobStatus.FAILED
                error = f"No pair was judged: every one of the {counts['pairs_total']} failed" + (
                    f" (the first: {first_error[:500]})" if first_error else ""
                )
        except Exception as exc:  # noqa: BLE001 - the row says what went wrong
            log.exception("arena %s failed while comparing", arena.pk)
            status = JobStatus.FAILED
            error = f"Comparing failed ({type(exc).__name__}): {exc}. The pairs judged are kept."
    if handed_over and status == JobStatus.SUCCEEDED:
        from studio.tasks import redispatch

        mine = ArenaRun.objects.filter(pk=arena.pk, status=JobStatus.RUNNING, claimed_by=message_id)
        if mine.update(status=JobStatus.QUEUED, phase="judging"):
            redispatch(cast(Any, ArenaRun), arena.pk, previous=arena.message_id)
        return
    phase = {"succeeded": "done", "cancelled": "cancelled"}.get(str(status), "failed")
    fields: dict[str, Any] = {"phase": phase, "error": error}
    if status == JobStatus.SUCCEEDED:
        fields["progress"] = 1.0
    finish(cast(Any, ArenaRun), arena.pk, status, **fields)


def _in_branch_order(planned: list[tuple[Any, ...]]) -> list[Step]:
    """The first model's step of each planned pair, in branch order (as `items_for` reads);
    the second's history is the same: both answer the same fork."""
    seen: dict[int, Step] = {}
    for _, _, _, step_a, _ in planned:
        seen.setdefault(step_a.pk, step_a)
    return sorted(seen.values(), key=lambda s: (s.branch_id, s.index))


def _save_pair(arena: ArenaRun, entry: tuple[Any, ...], out: dict[str, Any]) -> None:
    job_a, job_b, sample, step_a, step_b, shown_first, item = entry
    ok = bool(out.get("ok"))
    winner = ""
    if ok:
        shown = out.get("winner")
        if shown == "tie":
            winner = PairWinner.TIE
        else:
            # "A" is the prediction shown first: model a's when a went first
            first_is_a = shown_first == "a"
            winner = PairWinner.A if (shown == "A") == first_is_a else PairWinner.B
    try:
        ArenaPair.objects.create(
            arena=arena,
            job_a=job_a,
            job_b=job_b,
            step_a=step_a,
            step_b=step_b,
            sample_index=sample,
            shown_first=shown_first,
            reference=getattr(item, "reference", None),
            winner=winner,
            ok=ok,
            reason=str(out.get("reason") or "")[:2000],
            raw=str(out.get("raw") or ""),
            error="" if ok else str(out.get("error") or "the judge gave no verdict")[:2000],
            judge_model=arena.judge_model,
            tokens_in=int(out.get("tokens_in") or 0),
            tokens_out=int(out.get("tokens_out") or 0),
        )
    except IntegrityError:  # judged by another worker meanwhile (this one was taken for lost)
        return
    counter = "pairs_judged" if ok else "pairs_failed"
    ArenaRun.objects.filter(pk=arena.pk).update(**{counter: F(counter) + 1})
