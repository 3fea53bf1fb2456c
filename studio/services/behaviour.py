"""Behaviour search, web side: validating and starting a job, Cancel and Resume, choosing
its candidates (the steps a search query matches, newest first, or, when they are more than
the job takes and an embeddings model is configured, those closest in meaning to the
description), the judge's prompt of each candidate, saving its verdict, and reading the
results for a member (blind review respected). The worker side is `studio.jobs.behaviour`.

A label is the judge's verdict on a step (or a trajectory), so it is a judge score in the
sense of blind review (`studio.services.blinding`): a member may not see the labels of steps
hidden from them, nor of trajectories holding such a step; counts and clusters shown to
them leave those out and say so."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Count, F, OuterRef, QuerySet, Subquery

from inference import behaviour as prompts
from inference.embeddings import Embedder, EmbeddingError, cosine
from studio.models import (
    BehaviourCluster,
    BehaviourLabel,
    BehaviourSearch,
    BehaviourUnit,
    Branch,
    EndpointRole,
    ModelEndpoint,
    Project,
    Step,
    Trajectory,
)
from studio.queues import queue_name
from studio.search.query import QueryError, RegexTimeout, parse
from studio.services import job_limits
from studio.services.blinding import SEES_ALL, Blindness
from studio.services.embeddings import embedding_endpoint
from studio.services.jobs import STOPPED, reopen, request_cancel

MAX_QUERY_CHARS = 1000
MAX_CONCURRENCY = 64
MAX_TOKENS = 262144
# With an embeddings model, a capped query's candidates are ranked from a pool this many
# times larger than the job takes (at most RANK_POOL_MAX steps), closest in meaning first.
RANK_POOL_FACTOR = 4
RANK_POOL_MAX = 5000
RANK_TEXT_CHARS = 1000  # of a step's action and of its observation, embedded to rank it
# Trajectories: the steps read to find that many trajectories a query matches.
TRAJECTORY_STEP_POOL = 20000
LABELS_PER_PAGE = 100


def max_candidates() -> int:
    return int(settings.STUDIO_BEHAVIOUR_MAX_CANDIDATES)


class InvalidSearch(ValueError):
    """A request for a behaviour search that cannot run: `field` names the field at fault,
    the message says why."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


@dataclass(frozen=True)
class BehaviourData:
    """A request for a behaviour search (`studio.forms.behaviour.BehaviourForm` makes it)."""

    judge: ModelEndpoint
    description: str
    query: str = ""
    unit: str = BehaviourUnit.STEPS
    max_candidates: int = 100
    temperature: float = 0.0
    max_tokens: int = 4096
    concurrency: int = 8


def matching_steps(project_id: int, query: str, limit: int) -> list[int]:
    """The ids of the newest `limit` steps of the project the query matches (every step for
    an empty query), by the library's search (`studio.search`)."""
    from studio.search.service import matching_step_ids

    return list(matching_step_ids([project_id], query, limit))


def clean_description(value: Any) -> str:
    text = " ".join(str(value or "").split())
    if not text:
        raise InvalidSearch("description", "describe the behaviour to look for")
    if len(text) > prompts.MAX_DESCRIPTION_CHARS:
        raise InvalidSearch(
            "description",
            f"at most {prompts.MAX_DESCRIPTION_CHARS:,} characters (got {len(text):,})",
        )
    if any(ord(c) < 32 for c in text):
        raise InvalidSearch("description", "control characters are not allowed")
    return text


def clean_query(value: Any) -> str:
    """The query, stripped; InvalidSearch naming the query with the parser's words."""
    text = str(value or "").strip()
    if len(text) > MAX_QUERY_CHARS:
        raise InvalidSearch("query", f"at most {MAX_QUERY_CHARS:,} characters (got {len(text):,})")
    try:
        parse(text)
    except QueryError as exc:
        raise InvalidSearch("query", str(exc)) from None
    return text


def validate(project: Project, data: BehaviourData) -> BehaviourData:
    """The request, cleaned; InvalidSearch naming the first field at fault."""
    description = clean_description(data.description)
    query = clean_query(data.query)
    if data.unit not in BehaviourUnit.values:
        raise InvalidSearch("unit", f"steps or trajectories (got {data.unit!r})")
    most = max_candidates()
    if not isinstance(data.max_candidates, int) or not 1 <= data.max_candidates <= most:
        raise InvalidSearch(
            "max_candidates",
            f"from 1 to {most:,} (STUDIO_BEHAVIOUR_MAX_CANDIDATES), got {data.max_candidates}",
        )
    judge = data.judge
    if (
        judge is None
        or judge.project_id != project.pk
        or judge.role != EndpointRole.JUDGE
        or judge.kind != "openai"
    ):
        raise InvalidSearch("judge", "choose one of this project's judge models")
    if not 1 <= int(data.concurrency) <= MAX_CONCURRENCY:
        raise InvalidSearch("concurrency", f"from 1 to {MAX_CONCURRENCY}")
    if not (math.isfinite(float(data.temperature)) and 0.0 <= float(data.temperature) <= 2.0):
        raise InvalidSearch("temperature", "from 0 to 2")
    if not 1 <= int(data.max_tokens) <= MAX_TOKENS:
        raise InvalidSearch("max_tokens", f"from 1 to {MAX_TOKENS:,}")
    return BehaviourData(
        judge=judge,
        description=description,
        query=query,
        unit=data.unit,
        max_candidates=data.max_candidates,
        temperature=float(data.temperature),
        max_tokens=int(data.max_tokens),
        concurrency=int(data.concurrency),
    )


def start_behaviour_search(project: Project, user, data: BehaviourData) -> BehaviourSearch:
    """The job row (the caller enqueues it). InvalidSearch for a request that cannot run,
    including a query that matches no step; TooManyJobs past the project's limit."""
    data = validate(project, data)
    try:
        matches = matching_steps(project.pk, data.query, 1)
    except RegexTimeout as exc:
        raise InvalidSearch("query", str(exc)) from None
    if not matches:
        where = f"the query {data.query!r} matches no step" if data.query else "it has no step"
        raise InvalidSearch("query", f"nothing to search: {where} in this project")
    embedder = embedding_endpoint(project)
    job = BehaviourSearch(
        project=project,
        requester=user,
        description=data.description,
        query=data.query,
        unit=data.unit,
        max_candidates=data.max_candidates,
        judge_endpoint=data.judge,
        judge_name=data.judge.name,
        judge_model=data.judge.model,
        judge_base_url=data.judge.base_url,
        params={"temperature": data.temperature, "max_tokens": data.max_tokens},
        embedding_endpoint=embedder,
        embedding_name=embedder.name if embedder else "",
        embedding_model=embedder.model if embedder else "",
        embedding_base_url=embedder.base_url if embedder else "",
        concurrency=data.concurrency,
        queue=queue_name("default"),
    )
    with transaction.atomic():
        job_limits.check_room(project.pk)  # TooManyJobs (a ValueError) past the limit
        job.save()
    return job


def cancel_search(job: BehaviourSearch) -> None:
    request_cancel(BehaviourSearch, job.pk)


def resume_search(job: BehaviourSearch) -> bool:
    """A stopped job (failed, cancelled, its worker lost) goes on with the candidates it has
    not labelled, asks again about those whose verdict failed, and clusters the matches
    again; its labels are kept. The caller enqueues. TooManyJobs when the project has as
    many jobs at once as it may (nothing changed)."""
    with transaction.atomic():
        if BehaviourSearch.objects.filter(pk=job.pk, status__in=STOPPED).exists():
            job_limits.check_room(job.project_id)
        resumed = reopen(BehaviourSearch, job.pk)
        if resumed:  # the failed ones are asked again: not failed any more, nor counted so
            BehaviourLabel.objects.filter(job_id=job.pk, ok=False).delete()
            BehaviourSearch.objects.filter(pk=job.pk).update(failed=0, clustered=False)
    return resumed


# ---- choosing the candidates ---------------------------------------------------------------


@dataclass(frozen=True)
class Chosen:
    ids: list[int]  # step ids; (trajectories) a step of each, on the branch to read
    capped: bool  # the query matched more than the job takes
    chosen_by: str  # "newest" | "meaning"
    ranking_error: str = ""  # ranking by meaning failed: the newest were taken (why)


def _step_text(step: Step) -> str:
    return f"{step.action[:RANK_TEXT_CHARS]}\n{step.observation[:RANK_TEXT_CHARS]}"


def _rank(embedder: Embedder, description: str, ids: list[int], texts: list[str]) -> list[int]:
    """`ids` closest in meaning to the description first (ties: in the order given)."""
    vectors = embedder.embed([description, *texts])
    target = vectors[0]
    scored = [(-cosine(target, v), i) for i, v in enumerate(vectors[1:])]
    return [ids[i] for _, i in sorted(scored)]


def choose_candidates(job: BehaviourSearch, embedder: Embedder | None = None) -> Chosen:
    """The job's candidates: the newest `max_candidates` the query matches, or, when it
    matches more and `embedder` is given, those closest in meaning to the description among
    a pool RANK_POOL_FACTOR times larger (at most RANK_POOL_MAX)."""
    limit = job.max_candidates
    if job.unit == BehaviourUnit.TRAJECTORIES:
        return _choose_trajectories(job, embedder)
    pool = limit + 1
    if embedder is not None:
        pool = max(limit + 1, min(limit * RANK_POOL_FACTOR, RANK_POOL_MAX))
    ids = matching_steps(job.project_id, job.query, pool)
    if len(ids) <= limit:
        return Chosen(ids, False, "newest")
    if embedder is None:
        return Chosen(ids[:limit], True, "newest")
    steps = Step.objects.only("pk", "action", "observation").in_bulk(ids)
    present = [pk for pk in ids if pk in steps]
    try:
        ranked = _rank(
            embedder, job.description, present, [_step_text(steps[pk]) for pk in present]
        )
    except EmbeddingError as exc:
        return Chosen(ids[:limit], True, "newest", str(exc))
    return Chosen(ranked[:limit], True, "meaning")


def _choose_trajectories(job: BehaviourSearch, embedder: Embedder | None) -> Chosen:
    """One step per trajectory, on the branch to read: the trajectory's newest matching step
    (for an empty query, the first step of its first branch), newest trajectories first."""
    limit = job.max_candidates
    want = limit + 1
    if embedder is not None:
        want = max(limit + 1, min(limit * RANK_POOL_FACTOR, RANK_POOL_MAX))
    step_of: dict[int, int] = {}  # trajectory -> step, in the order found
    if not job.query:
        first = Step.objects.filter(branch=OuterRef("pk")).order_by("index").values("pk")[:1]
        roots = (
            Branch.objects.filter(trajectory__project_id=job.project_id, parent__isnull=True)
            .annotate(first_step=Subquery(first))
            .filter(first_step__isnull=False)
            .order_by("-trajectory_id")
            .values_list("trajectory_id", "first_step")[:want]
        )
        step_of = dict(roots)
    else:
        ids = matching_steps(job.project_id, job.query, TRAJECTORY_STEP_POOL)
        rows = Step.objects.filter(pk__in=ids).values_list("pk", "branch__trajectory_id")
        trajectory_of = dict(rows)
        for pk in ids:
            if pk in trajectory_of:
                step_of.setdefault(trajectory_of[pk], pk)
                if len(step_of) >= want:
                    break
    trajectories = list(step_of)
    if len(trajectories) <= limit:
        return Chosen([step_of[t] for t in trajectories], False, "newest")
    if embedder is None:
        return Chosen([step_of[t] for t in trajectories[:limit]], True, "newest")
    found = Trajectory.objects.in_bulk(trajectories)
    texts = [
        f"{found[t].title}\n{found[t].task_instruction[:RANK_TEXT_CHARS]}" if t in found else ""
        for t in trajectories
    ]
    try:
        ranked = _rank(embedder, job.description, trajectories, texts)
    except EmbeddingError as exc:
        return Chosen([step_of[t] for t in trajectories[:limit]], True, "newest", str(exc))
    return Chosen([step_of[t] for t in ranked[:limit]], True, "meaning")


# ---- the judge's prompts --------------------------------------------------------------------


@dataclass
class Candidate:
    """One question to the judge: a step, or a trajectory read along a branch."""

    key: int  # the candidate step's id (the trajectory unit: a step on the branch read)
    trajectory_id: int
    branch_id: int
    step_id: int | None  # the step (the step unit)
    messages: list[dict[str, str]]
    # the trajectory unit: the step numbers shown to the judge (the only ones its verdict may
    # name), and their steps' ids
    steps_by_index: dict[int, int] | None = None


def candidates_to_label(job: BehaviourSearch) -> list[int]:
    """The job's candidates (step ids) it has no label of yet, in their order."""
    ids = list(job.candidate_ids or [])
    rows = BehaviourLabel.objects.filter(job_id=job.pk)
    if job.unit == BehaviourUnit.TRAJECTORIES:
        done = set(rows.values_list("trajectory_id", flat=True))
        trajectory_of = dict(
            Step.objects.filter(pk__in=ids).values_list("pk", "branch__trajectory_id")
        )
        return [pk for pk in ids if trajectory_of.get(pk) not in done]
    labelled = set(rows.values_list("step_id", flat=True))
    return [pk for pk in ids if pk not in labelled]


def candidates_for(job: BehaviourSearch, keys: Sequence[int]) -> Iterator[Candidate]:
    """The judge's question for each of `keys` (those deleted since are skipped)."""
    if job.unit == BehaviourUnit.TRAJECTORIES:
        yield from _trajectory_candidates(job, keys)
    else:
        yield from _step_candidates(job, keys)


def _step_candidates(job: BehaviourSearch, keys: Sequence[int]) -> Iterator[Candidate]:
    for start in range(0, len(keys), 200):
        chunk = keys[start : start + 200]
        steps = Step.objects.select_related("branch__trajectory").in_bulk(chunk)
        for pk in chunk:
            step = steps.get(pk)
            if step is None:
                continue
            branch = step.branch
            earlier = list(
                Step.objects.filter(branch.steps_q(), index__lt=step.index)
                .order_by("-index")
                .values_list("index", "action", "observation")[: prompts.HISTORY_STEPS]
            )
            history = [prompts.StepText(i, a, o) for i, a, o in reversed(earlier)]
            messages = prompts.build_step_messages(
                job.description,
                prompts.StepText(step.index, step.action, step.observation),
                history,
                branch.trajectory.task_instruction,
                earlier=step.index,
            )
            yield Candidate(pk, branch.trajectory_id, branch.pk, pk, messages)


def _trajectory_candidates(job: BehaviourSearch, keys: Sequence[int]) -> Iterator[Candidate]:
    for pk in keys:
        step = Step.objects.select_related("branch__trajectory").filter(pk=pk).first()
        if step is None:  # deleted since (its branch, or its trajectory)
            continue
        branch = step.branch
        rows = list(branch.all_steps().values_list("pk", "index", "action", "observation"))
        steps = [prompts.StepText(i, a, o) for _, i, a, o in rows]
        messages = prompts.build_trajectory_messages(
            job.description, steps, branch.trajectory.task_instruction
        )
        shown = set(prompts.shown_step_indexes(steps))  # a step left out cannot be named
        yield Candidate(
            pk,
            branch.trajectory_id,
            branch.pk,
            None,
            messages,
            steps_by_index={i: step_id for step_id, i, _, _ in rows if i in shown},
        )


def read_verdict(candidate: Candidate, text: str) -> prompts.Verdict:
    indexes = list(candidate.steps_by_index) if candidate.steps_by_index is not None else None
    return prompts.parse_verdict(text, step_indexes=indexes)


def save_label(
    job: BehaviourSearch,
    candidate: Candidate,
    verdict: prompts.Verdict | None,
    *,
    raw: str,
    error: str = "",
    tokens_in: int = 0,
    tokens_out: int = 0,
    seconds: float = 0.0,
) -> bool:
    """The candidate's label, and the job's counts; True when it was saved (False: a label
    was there already, saved by another worker)."""
    whole = candidate.steps_by_index is not None
    step_id = candidate.step_id
    if whole and verdict is not None and verdict.step is not None:
        step_id = (candidate.steps_by_index or {}).get(verdict.step)
    fields: dict[str, Any] = {
        "ok": verdict is not None,
        "match": verdict.match if verdict is not None else None,
        "confidence": verdict.confidence if verdict is not None else None,
        "reason": verdict.reason if verdict is not None else "",
        "raw": raw[:20000],
        "error": "" if verdict is not None else error[:2000],
    }
    counts: dict[str, Any] = {
        "judge_tokens_in": F("judge_tokens_in") + tokens_in,
        "judge_tokens_out": F("judge_tokens_out") + tokens_out,
        "judge_s": F("judge_s") + round(seconds, 4),
    }
    if verdict is None:
        counts["failed"] = F("failed") + 1
    else:
        counts["labelled"] = F("labelled") + 1
        if verdict.match:
            counts["matched"] = F("matched") + 1
    try:
        with transaction.atomic():
            BehaviourLabel.objects.create(
                job_id=job.pk,
                trajectory_id=candidate.trajectory_id,
                branch_id=candidate.branch_id,
                step_id=step_id,
                whole_trajectory=whole,
                **fields,
            )
            BehaviourSearch.objects.filter(pk=job.pk).update(**counts)
    except IntegrityError:  # another worker saved it (this one was taken for lost)
        return False
    return True


def recount(job: BehaviourSearch) -> None:
    """The job's counts from its labels (a resumed or handed-over job starts from them)."""
    labels = BehaviourLabel.objects.filter(job_id=job.pk)
    BehaviourSearch.objects.filter(pk=job.pk).update(
        candidates=len(job.candidate_ids or []),
        labelled=labels.filter(ok=True).count(),
        matched=labels.filter(ok=True, match=True).count(),
        failed=labels.filter(ok=False).count(),
    )


def matched_labels(job: BehaviourSearch) -> QuerySet[BehaviourLabel]:
    return BehaviourLabel.objects.filter(job_id=job.pk, ok=True, match=True).order_by("pk")


def save_clusters(job: BehaviourSearch, groups: list[tuple[str, bool, list[int]]]) -> None:
    """The job's clusters, replacing any it had: (name, named by the judge, label ids), in
    order, largest first."""
    with transaction.atomic():
        BehaviourCluster.objects.filter(job_id=job.pk).delete()  # labels' cluster -> NULL
        for order, (name, by_judge, ids) in enumerate(groups):
            cluster = BehaviourCluster.objects.create(
                job_id=job.pk, name=name[:120], named_by_judge=by_judge, size=len(ids), order=order
            )
            BehaviourLabel.objects.filter(job_id=job.pk, pk__in=ids).update(cluster=cluster)
        BehaviourSearch.objects.filter(pk=job.pk).update(clustered=True)


# ---- reading the results ----------------------------------------------------------------------


def hidden_trajectories(blindness: Blindness) -> set[int]:
    """Trajectories holding a step hidden from the member."""
    if not blindness:
        return set()
    return set(
        Step.objects.filter(pk__in=blindness.step_ids)
        .values_list("branch__trajectory_id", flat=True)
        .distinct()
    )


def visible_labels(
    job: BehaviourSearch, blindness: Blindness = SEES_ALL
) -> QuerySet[BehaviourLabel]:
    """The job's labels less those of steps hidden from the member (and, of the trajectory
    unit, of trajectories holding one)."""
    rows = BehaviourLabel.objects.filter(job_id=job.pk)
    if not blindness:
        return rows
    rows = rows.exclude(step_id__in=blindness.step_ids)
    hidden = hidden_trajectories(blindness)
    if hidden:
        rows = rows.exclude(whole_trajectory=True, trajectory_id__in=hidden)
    return rows


def visible_counts(
    jobs: Sequence[BehaviourSearch], blindness: Blindness
) -> dict[int, dict[str, int]]:
    """Each job's candidates, labelled, matched and failed counts as a member may see them
    (their job row's when nothing is hidden from them)."""
    counts = {
        j.pk: {
            "candidates": j.candidates,
            "labelled": j.labelled,
            "matched": j.matched,
            "failed": j.failed,
        }
        for j in jobs
    }
    if not blindness or not jobs:
        return counts
    rows = BehaviourLabel.objects.filter(job_id__in=list(counts)).exclude(
        step_id__in=blindness.step_ids
    )
    hidden = hidden_trajectories(blindness)
    if hidden:
        rows = rows.exclude(whole_trajectory=True, trajectory_id__in=hidden)
    counts = {
        j.pk: {
            "candidates": max(0, j.candidates - _hidden_candidates(j, blindness)),
            "labelled": 0,
            "matched": 0,
            "failed": 0,
        }
        for j in jobs
    }
    for job_id, ok, match, n in (
        rows.values_list("job_id", "ok", "match").annotate(n=Count("pk")).order_by()
    ):
        key = "failed" if not ok else "labelled"
        counts[job_id][key] += n
        if ok and match:
            counts[job_id]["matched"] += n
    return counts


@dataclass
class ClusterView:
    pk: int
    name: str
    named_by_judge: bool
    size: int  # matches in it the member may see


@dataclass
class Results:
    """What a member sees of a job: its counts, clusters and a page of labels, less what
    blind review hides from them (`hidden_note` says so)."""

    candidates: int
    labelled: int
    matched: int
    failed: int
    clusters: list[ClusterView]
    unclustered: int  # matches in no cluster (clustering not done yet)
    labels: list[BehaviourLabel]
    shown_total: int  # labels the filter matched
    page: int
    pages: int
    hidden_note: str = ""
    hidden_count: int = 0
    filters: dict[str, str] = field(default_factory=dict)


FILTERS = ("yes", "no", "failed", "all")


def results(
    job: BehaviourSearch,
    blindness: Blindness = SEES_ALL,
    *,
    match: str = "yes",
    cluster: str = "",
    page: int = 1,
) -> Results:
    """The job's results for a member: `match` yes (the default), no, failed or all;
    `cluster` a cluster's id ("none": matches in no cluster; "": any)."""
    rows = visible_labels(job, blindness)
    hidden_count = 0
    hidden_note = ""
    if blindness:
        every = BehaviourLabel.objects.filter(job_id=job.pk)
        hidden_ids = set(every.values_list("pk", flat=True)) - set(
            rows.values_list("pk", flat=True)
        )
        hidden_count = len(hidden_ids)
        if hidden_count:
            steps = set(
                every.filter(pk__in=hidden_ids).exclude(step=None).values_list("step_id", flat=True)
            )
            trajectories = set(
                every.filter(pk__in=hidden_ids).values_list("trajectory_id", flat=True)
            )
            steps |= {
                pk
                for pk, t in Step.objects.filter(pk__in=blindness.step_ids).values_list(
                    "pk", "branch__trajectory_id"
                )
                if t in trajectories
            }
            hidden_note = blindness.note(steps)
        counts = {
            "labelled": rows.filter(ok=True).count(),
            "matched": rows.filter(ok=True, match=True).count(),
            "failed": rows.filter(ok=False).count(),
        }
        candidates = job.candidates - _hidden_candidates(job, blindness)
    else:
        counts = {"labelled": job.labelled, "matched": job.matched, "failed": job.failed}
        candidates = job.candidates
    sizes: dict[int | None, int] = {}
    for cluster_id in rows.filter(ok=True, match=True).values_list("cluster_id", flat=True):
        sizes[cluster_id] = sizes.get(cluster_id, 0) + 1
    clusters = [
        ClusterView(c.pk, c.name, c.named_by_judge, sizes[c.pk])
        for c in BehaviourCluster.objects.filter(job_id=job.pk).order_by("order", "pk")
        if sizes.get(c.pk)
    ]
    shown = rows
    if match == "yes":
        shown = shown.filter(ok=True, match=True)
    elif match == "no":
        shown = shown.filter(ok=True, match=False)
    elif match == "failed":
        shown = shown.filter(ok=False)
    if cluster == "none":
        shown = shown.filter(cluster__isnull=True)
    elif cluster:
        shown = shown.filter(cluster_id=int(cluster))
    total = shown.count()
    pages = max(1, math.ceil(total / LABELS_PER_PAGE))
    page = min(max(1, page), pages)
    labels = list(
        shown.select_related("step", "branch", "trajectory", "cluster")
        .defer("raw", "step__raw_output", "step__raw_prompt", "step__state", "step__thinking")
        .order_by(F("confidence").desc(nulls_last=True), "pk")[
            (page - 1) * LABELS_PER_PAGE : page * LABELS_PER_PAGE
        ]
    )
    return Results(
        candidates=max(0, candidates),
        clusters=clusters,
        unclustered=sizes.get(None, 0),
        labels=labels,
        shown_total=total,
        page=page,
        pages=pages,
        hidden_note=hidden_note,
        hidden_count=hidden_count,
        filters={"match": match, "cluster": cluster},
        **counts,
    )


def _hidden_candidates(job: BehaviourSearch, blindness: Blindness) -> int:
    ids = job.candidate_ids or []
    if job.unit == BehaviourUnit.TRAJECTORIES:
        hidden = hidden_trajectories(blindness)
        rows = Step.objects.filter(pk__in=ids).values_list("branch__trajectory_id", flat=True)
        return sum(1 for t in rows if t in hidden)
    return len(blindness.hidden(ids))


# ---- a selection of the matches -------------------------------------------------------------


@dataclass(frozen=True)
class Selection:
    step_ids: list[int]
    what: str  # in words, for the queue's description or the dataset version's source
    without_step: int  # matches of whole trajectories that named no step (left out)


def selection(job: BehaviourSearch, cluster: BehaviourCluster | None) -> Selection:
    """The steps of the job's matches (of one cluster, or all), highest confidence first."""
    rows = matched_labels(job)
    if cluster is not None:
        rows = rows.filter(cluster=cluster)
    ordered = rows.order_by(F("confidence").desc(nulls_last=True), "pk")
    ids = [pk for pk in ordered.values_list("step_id", flat=True) if pk is not None]
    without = rows.filter(step__isnull=True).count()
    where = f' in the group "{cluster.name}"' if cluster is not None else ""
    count = len(ids)
    what = (
        f"the {count} match{'es' if count != 1 else ''}{where} of behaviour search "
        f'#{job.pk} "{job.description[:120]}"'
    )
    return Selection(list(dict.fromkeys(ids)), what, without)


def jobs_of(project: Project) -> QuerySet[BehaviourSearch]:
    return BehaviourSearch.objects.filter(project=project).order_by("-created_at", "-id")


def unit_label(job: BehaviourSearch) -> str:
    return "trajectories" if job.unit == BehaviourUnit.TRAJECTORIES else "steps"
