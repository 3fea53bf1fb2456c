"""A behaviour search in the worker: choose its candidates (once), ask the judge about each
one `concurrency` at a time in threads that only call the judge (this thread saves each
verdict the moment it is in, so a worker that dies loses no finished label and Resume skips
what is labelled), then cluster the matches' reasons and ask the judge to name each
cluster ("clustering").

As a judge job does (`studio.jobs.judging`): a judge whose server cannot be reached fails
the job after its first few candidates, naming the judge and its URL; near its task's time
limit the job hands the rest to a new message of itself; Cancel ends it after the requests
in flight, its labels kept."""

from __future__ import annotations

import logging
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any

from django.db.models import F

from inference import behaviour as prompts
from inference.embeddings import Embedder, EmbeddingError
from inference.judge import Judge
from studio.jobs.dispatch import BEHAVIOUR_TASK, send_again
from studio.jobs.judging import UNREACHABLE_AFTER, unreachable_message
from studio.jobs.runtime import JobMonitor, claim, finish
from studio.models import BehaviourLabel, BehaviourSearch, JobStatus
from studio.search.query import RegexTimeout
from studio.services import behaviour as service
from studio.services.embeddings import embedder_for_job
from studio.services.endpoints import EndpointError

log = logging.getLogger(__name__)

LABELLING_SHARE = 0.95  # of the progress bar; clustering is the rest


class SearchError(Exception):
    pass


def _judge(job: BehaviourSearch) -> Judge:
    """The job's judge; SearchError when its key may not be sent or its host may not be
    reached now, or its endpoint points elsewhere since the search was made."""
    from studio.jobs.evaluations import make_judge

    params = job.params or {}
    try:
        return make_judge(
            job.judge_endpoint,
            job.judge_base_url,
            job.judge_model,
            params.get("temperature", 0.0),
            params.get("max_tokens", 4096),
        )
    except EndpointError as exc:
        raise SearchError(f"the judge model {job.judge_model!r} was not asked: {exc}") from None


def _note(job: BehaviourSearch, **notes: str | None) -> None:
    """Notes in the job's params for its page (None removes one)."""
    params = dict(job.params or {})
    for key, value in notes.items():
        if value is None:
            params.pop(key, None)
        else:
            params[key] = value[:500]
    BehaviourSearch.objects.filter(pk=job.pk).update(params=params)
    job.params = params


def _embedder(job: BehaviourSearch) -> tuple[Embedder | None, str]:
    """The job's embeddings model and "", or None and why not: it has none (""), or its key
    may not be sent or its host may not be reached now (the search goes on without it)."""
    try:
        return (
            embedder_for_job(job.embedding_endpoint, job.embedding_base_url, job.embedding_model),
            "",
        )
    except EndpointError as exc:
        return None, f"not used: {exc}"


def _choose(job: BehaviourSearch, monitor: JobMonitor) -> BehaviourSearch:
    """The candidates, once: a resumed or handed-over job keeps those it chose."""
    if job.candidate_ids is not None:
        return job
    embedder, refusal = _embedder(job)
    try:
        chosen = service.choose_candidates(job, embedder)
    except RegexTimeout as exc:  # the query is at fault: Resume would only stop again
        raise SearchError(
            f"No candidates were chosen: {exc}. Start a search with another query."
        ) from None
    _note(job, embedding_error=refusal or None, ranking_error=chosen.ranking_error or None)
    BehaviourSearch.objects.filter(pk=job.pk).update(
        candidate_ids=chosen.ids,
        candidates=len(chosen.ids),
        capped=chosen.capped,
        chosen_by=chosen.chosen_by,
        embedding_tokens=F("embedding_tokens") + (embedder.tokens if embedder else 0),
    )
    monitor.set_job(progress=0.02)
    job.refresh_from_db()
    return job


def _progress(done: int, total: int) -> float:
    return 0.02 + (LABELLING_SHARE - 0.02) * done / max(1, total)


def _label(job: BehaviourSearch, monitor: JobMonitor, deadline: float) -> tuple[bool, bool]:
    """Ask about every candidate not labelled yet: (handed_over, cancelled); SearchError
    when the judge cannot be reached."""
    service.recount(job)
    todo = service.candidates_to_label(job)
    total = len(job.candidate_ids or [])
    done = total - len(todo)
    monitor.set_job(progress=_progress(done, total))  # a resumed job starts where it was
    judge = _judge(job)
    any_labelled = BehaviourLabel.objects.filter(job_id=job.pk, ok=True).exists()
    labelled_now = tried = 0
    unreachable_run, unreachable_why, stopped = 0, "", False
    asked_now = unreachable_now = 0
    handed_over = cancelled = False

    def cannot_reach() -> bool:
        return not any_labelled and unreachable_run >= UNREACHABLE_AFTER

    def work(candidate: service.Candidate) -> tuple[Any, float]:
        started = time.monotonic()
        asked = judge.ask(candidate.messages, lambda text: service.read_verdict(candidate, text))
        return asked, time.monotonic() - started

    in_flight: dict[Future, service.Candidate] = {}

    def drain_one() -> None:
        nonlocal done, labelled_now, tried, any_labelled, unreachable_run, unreachable_why
        nonlocal asked_now, unreachable_now
        finished, _ = wait(list(in_flight), return_when=FIRST_COMPLETED)
        for future in finished:
            candidate = in_flight.pop(future)
            done += 1
            tried += 1
            try:
                asked, seconds = future.result()
            except Exception as exc:  # noqa: BLE001 - that candidate fails, the job goes on
                log.exception("behaviour search %s: candidate %s failed", job.pk, candidate.key)
                service.save_label(
                    job, candidate, None, raw="", error=f"{type(exc).__name__}: {exc}"
                )
            else:
                service.save_label(
                    job,
                    candidate,
                    asked.value,
                    raw=asked.raw,
                    error="; ".join(asked.errors) or "the judge gave no verdict",
                    tokens_in=asked.tokens_in,
                    tokens_out=asked.tokens_out,
                    seconds=seconds,
                )
                ok = asked.value is not None
                labelled_now += ok
                any_labelled = any_labelled or ok
                why = asked.unreachable
                unreachable_run = unreachable_run + 1 if why else 0
                unreachable_why = why or unreachable_why
                asked_now += 1
                unreachable_now += bool(why)
            monitor.set_job(progress=_progress(done, total))

    with ThreadPoolExecutor(max_workers=job.concurrency) as pool:
        for candidate in service.candidates_for(job, todo):
            while len(in_flight) >= job.concurrency and not cannot_reach():
                drain_one()
            # looked at once a request may go out, after the answers in flight: a Cancel that
            # came meanwhile sends no other request
            if monitor.cancelled_now():
                cancelled = True
                break
            if time.monotonic() > deadline:
                handed_over = True
                break
            if cannot_reach():
                stopped = True  # the candidates in flight still end and are saved
                break
            in_flight[pool.submit(work, candidate)] = candidate
        while in_flight:
            drain_one()
    if cancelled or monitor.cancelled_now():
        return False, True
    if stopped or (
        not any_labelled and asked_now > 0 and unreachable_now == asked_now and not handed_over
    ):
        # stopped early, or every candidate of a small search was tried (all handed out
        # before the early stop could look) and none reached the server: the same words
        raise SearchError(
            unreachable_message(
                job.judge_model,
                job.judge_base_url,
                unreachable_why,
                judge.attempts,
                labelled_now,
                tried,
                total - done,
                noun="candidate",
                done_word="labelled",
                what="search",
            )
        )
    return handed_over, False


def _cluster(job: BehaviourSearch, monitor: JobMonitor) -> bool:
    """Group the matches' reasons (by their embeddings when the job has an embeddings
    model that answers, else by their words) and ask the judge to name each group; a group
    it cannot name is named by the words its reasons use most. False when a Cancel stopped
    it: no naming request goes out after it, and nothing is saved (the matches stay
    ungrouped, and Resume groups them)."""
    monitor.set_job(phase="clustering", progress=LABELLING_SHARE)
    labels = list(service.matched_labels(job).values_list("pk", "reason"))
    if not labels:
        _note(job, clustering_error=None, clustered_by=None)
        service.save_clusters(job, [])
        return True
    reasons = [reason or "(no reason given)" for _, reason in labels]
    vectors = None
    embedder, why_not = _embedder(job)
    if embedder is not None:
        try:
            vectors = embedder.embed(reasons)
        except EmbeddingError as exc:  # the words then; the page says so
            why_not = str(exc)
        BehaviourSearch.objects.filter(pk=job.pk).update(
            embedding_tokens=F("embedding_tokens") + embedder.tokens
        )
    groups = prompts.cluster_reasons(reasons, vectors)
    judge = _judge(job)

    def name(group: list[int]) -> tuple[str, bool, int, int] | None:
        if monitor.cancel_requested:  # (no query here: these threads hold no connection)
            return None
        texts = [reasons[i] for i in group]
        asked = judge.ask(
            prompts.build_naming_messages(job.description, texts), prompts.parse_cluster_name
        )
        if asked.value is not None:
            return asked.value, True, asked.tokens_in, asked.tokens_out
        words = prompts.top_words(texts)
        return (", ".join(words) or "reasons alike"), False, asked.tokens_in, asked.tokens_out

    with ThreadPoolExecutor(max_workers=min(job.concurrency, max(1, len(groups)))) as pool:
        names = list(pool.map(name, groups))
    BehaviourSearch.objects.filter(pk=job.pk).update(
        judge_tokens_in=F("judge_tokens_in") + sum(n[2] for n in names if n is not None),
        judge_tokens_out=F("judge_tokens_out") + sum(n[3] for n in names if n is not None),
    )
    named = [n for n in names if n is not None]
    if len(named) < len(groups) or monitor.cancelled_now():
        return False
    # this grouping's notes, not an earlier run's
    _note(
        job,
        clustering_error=why_not or None,
        clustered_by="embeddings" if vectors is not None else "words",
    )
    service.save_clusters(
        job,
        [
            (title, by_judge, [labels[i][0] for i in group])
            for group, (title, by_judge, _, _) in zip(groups, named, strict=True)
        ],
    )
    return True


def _nothing_labelled(job: BehaviourSearch) -> str:
    """Why a search that asked about every candidate it could labelled none."""
    if not job.failed:
        return (
            f"no candidate was labelled: none of its {job.candidates} is left (their steps were "
            "deleted since the search chose them)"
        )
    first = (
        BehaviourLabel.objects.filter(job_id=job.pk, ok=False)
        .values_list("error", flat=True)
        .first()
    )
    return (
        f"no candidate was labelled: the judge's answer to every one of the {job.failed} held "
        "no verdict that could be read"
        + (f" (the first: {first[:500]})" if first else "")
        + ". Resume asks about them again."
    )


def run_behaviour_search(job_id: int, message_id: str = "") -> None:
    """The body of the Celery task: claim, choose, label what is left, cluster, and end in
    a final state; or, when the task's time is nearly up, hand the rest to a new message of
    itself."""
    from studio.jobs.evaluations import task_budget_s

    deadline = time.monotonic() + task_budget_s()
    job = claim(BehaviourSearch, job_id, message_id, phase="choosing")
    if job is None:
        return
    status, error, handed_over = JobStatus.SUCCEEDED, "", False
    with JobMonitor(BehaviourSearch, job.pk) as monitor:
        try:
            job = _choose(job, monitor)
            if not job.candidate_ids:
                raise SearchError(
                    "no candidate: "
                    + (
                        f"the query {job.query!r} matches no step of the project now"
                        if job.query
                        else "the project has no step now"
                    )
                )
            monitor.set_job(phase="labelling")
            handed_over, cancelled = _label(job, monitor, deadline)
            job.refresh_from_db()
            if cancelled:
                status = JobStatus.CANCELLED
            elif handed_over:
                pass
            elif not job.labelled:
                raise SearchError(_nothing_labelled(job))
            elif not _cluster(job, monitor):
                status = JobStatus.CANCELLED
        except Exception as exc:  # noqa: BLE001 - the row says what went wrong
            if not isinstance(exc, SearchError):
                log.exception("behaviour search %s failed", job.pk)
            if monitor.cancel_requested:  # what its user asked for is what happened
                status, error = JobStatus.CANCELLED, ""
            else:
                status = JobStatus.FAILED
                error = (
                    str(exc)
                    if isinstance(exc, SearchError)
                    else f"The search failed ({type(exc).__name__}): {exc}. Its labels are kept; "
                    "Resume goes on."
                )
    mine = BehaviourSearch.objects.filter(
        pk=job.pk, status=JobStatus.RUNNING, claimed_by=message_id
    )
    if handed_over and status == JobStatus.SUCCEEDED:
        if mine.update(status=JobStatus.QUEUED, phase="queued"):
            send_again(BehaviourSearch, job.pk, job.message_id, BEHAVIOUR_TASK)
        return
    phase = {"succeeded": "done", "cancelled": "cancelled"}.get(str(status), "failed")
    fields: dict[str, Any] = {"phase": phase, "error": error}
    if status == JobStatus.SUCCEEDED:
        fields["progress"] = 1.0
    if not mine.exists():
        log.warning("behaviour search %s ended elsewhere meanwhile; this worker leaves it", job.pk)
        return
    finish(BehaviourSearch, job.pk, status, **fields)
