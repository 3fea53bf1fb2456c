"""Datasets: named, versioned selections of steps for training, and their export.

A version is made from a queue's accepted items (added to the latest version's, or replacing
them), from a filter (the queue filters) or from hand-picked steps added to the latest
version (a step someone rejected only once confirmed). Each item keeps the corrected
observation it was chosen with, and whose it is (a queue's: the adjudicated correction, else
that of an annotator who gave the final verdict; otherwise the newest correction saved on the
step), so an export is the same whatever happens to the annotations later. An item whose step was deleted since is left
out of exports, and the export says how many.

Exports stream: items are read in position order, one branch's path in memory at a time, and
each row is written as soon as it is made (`write_rows`); memory stays flat in the dataset's
size. The row shapes are `studio.exports.formats`."""

from __future__ import annotations

import functools
import io
import json
import os
import tempfile
import uuid
import zipfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import IO, Any, NamedTuple

from django.db import connection, transaction

from inference.prompts import build_system_prompt
from studio.exports.examples import Example, ExportTurn
from studio.exports.files import default_file_mode
from studio.exports.formats import (
    FORMATS,
    ExportOptions,
    context_rejected,
    dataset_info_entry,
    file_suffix,
    has_thinking,
    row_for,
    trains_world_model,
)
from studio.models import (
    Adjudication,
    AnnotationQueue,
    Branch,
    BranchOrigin,
    Dataset,
    DatasetItem,
    DatasetVersion,
    ExportJob,
    Project,
    QueueItem,
    Step,
    StepAnnotation,
    Trajectory,
    Verdict,
)
from studio.queues import queue_name
from studio.services import job_limits
from studio.services.model_identity import (
    ModelIdentity,
    identities_of_jobs,
    identity_of_step_meta,
    is_served_meta,
    world_model_dict,
)
from studio.services.queues import QueueData, counted_annotations, steps_for

MAX_ITEMS = 200_000
MAX_LOADED_STEPS = 20_000  # steps of branch paths an export holds at once, about
STEP_COLUMNS = (
    "pk", "branch_id", "index", "action", "observation", "state", "thinking", "raw_prompt",
    "observation_source", "meta",
)  # fmt: skip


class DatasetError(ValueError):
    pass


class Fix(NamedTuple):
    """The observation an item trains on instead of the step's own, and whose correction it
    is (a user id; None: nobody's known)."""

    text: str
    by: int | None


@dataclass(frozen=True)
class SelectionData:
    """A validated request for a new version (`studio.forms.datasets.DatasetForm` makes it):
    the steps of `queue`'s accepted items (added to the latest version's unless `replace`),
    or of the `filter`, or `steps` added to the latest version (a step someone rejected only
    with `confirm_rejected`)."""

    name: str
    description: str = ""
    queue: AnnotationQueue | None = None
    with_fixed: bool = True  # a queue's "needs fix" items that have a correction count too
    replace: bool = False  # a queue's items replace the latest version's instead of adding
    filter: QueueData | None = None
    steps: tuple[int, ...] = field(default_factory=tuple)
    confirm_rejected: bool = False  # hand-picked steps go in even when someone rejected them


class RejectedSteps(DatasetError):
    """Hand-picked steps whose final verdict somewhere is reject: `reasons` says where; the
    request needs `confirm_rejected`."""

    def __init__(self, reasons: list[str]):
        self.reasons = reasons
        super().__init__("rejected: " + "; ".join(reasons))


# ---- choosing steps -----------------------------------------------------------------------


def accepted_steps(queue: AnnotationQueue, *, with_fixed: bool = True) -> list[int]:
    """The queue's items whose final verdict accepts them, in queue order (see
    `accepted_items`)."""
    return list(accepted_items(queue, with_fixed=with_fixed))


def queue_decisions(
    queue: AnnotationQueue, *, with_fixed: bool = True
) -> dict[int, Fix | None | bool]:
    """The queue's decision on each of its steps that has a final verdict, in queue order:
    a `Fix` (accepted, trained on that correction), True (accepted, its own observation) or
    None (not accepted: rejected, or "needs fix" without a correction to train on). Steps
    without a final verdict (unannotated, or split and not adjudicated) are absent.

    Only annotations made in the queue by the annotators who completed its item count. The
    final verdict is the adjudicator's where there is one, with the correction they chose
    (an annotator's or their own; none is none); else, once as many annotators as the queue
    asks for per item completed it, the verdict every one of them gave,
    with the newest correction saved by one of them (an item accepted over a "needs fix"
    keeps its observation only when nobody who accepted it corrected it). With `with_fixed`,
    items whose final verdict is "needs fix" count when such a correction exists."""
    items = list(queue.items.values_list("pk", "step_id"))
    adjudications = Adjudication.objects.filter(item__queue=queue).only(
        "item_id", "verdict", "corrected_observation", "correction_by_id"
    )
    decided = {a.item_id: a for a in adjudications}
    item_of = {step: item for item, step in items}
    # item -> (verdict, correction, author), newest first
    marks: dict[int, list[tuple[str, str, int]]] = {}
    rows = (
        counted_annotations(queue)
        .order_by("-updated_at", "-id")
        .values_list("step_id", "author_id", "verdict", "corrected_observation")
    )
    for step_id, author, verdict, correction in rows:
        if step_id in item_of:
            marks.setdefault(item_of[step_id], []).append((verdict, correction, author))
    chosen: dict[int, Fix | None | bool] = {}
    for item, step_id in items:
        given = marks.get(item, [])
        adjudication = decided.get(item)
        fix: Fix | None
        if adjudication is not None:
            final: str | None = adjudication.verdict
            text = adjudication.corrected_observation
            fix = Fix(text, adjudication.correction_by_id) if text else None
        elif len(given) < queue.annotators_per_item:
            # fewer reviews than the queue asks for (a skip left a slot open): undecided
            continue
        else:
            verdicts = {v for v, _, _ in given}
            final = next(iter(verdicts)) if len(verdicts) == 1 else None
            fix = next((Fix(c, by) for v, c, by in given if v == final and c), None)
        if not final:
            continue  # no final verdict: the queue has not decided this step
        if final == Verdict.ACCEPT:
            chosen[step_id] = fix or True
        elif with_fixed and final == Verdict.NEEDS_FIX and fix:
            chosen[step_id] = fix
        else:
            chosen[step_id] = None
    return chosen


def accepted_items(queue: AnnotationQueue, *, with_fixed: bool = True) -> dict[int, Fix | None]:
    """The steps of the queue's items whose final verdict accepts them, in queue order, each
    with the correction to train on and whose it is (None: its own observation); see
    `queue_decisions`."""
    return {
        step: (decision if isinstance(decision, Fix) else None)
        for step, decision in queue_decisions(queue, with_fixed=with_fixed).items()
        if decision is not None
    }


def corrections(step_ids: Iterable[int]) -> dict[int, Fix]:
    """The newest corrected observation saved on each step, in any queue or none, and whose
    it is (steps without one are absent)."""
    found: dict[int, Fix] = {}
    rows = (
        StepAnnotation.objects.filter(step_id__in=list(step_ids))
        .exclude(corrected_observation="")
        .order_by("step_id", "-updated_at", "-id")
        .values_list("step_id", "corrected_observation", "author_id")
    )
    for step_id, text, author in rows:
        found.setdefault(step_id, Fix(text, author))
    return found


def rejections(step_id: int) -> list[str]:
    """Where the step was rejected, in words (empty: nowhere): each queue whose final verdict
    on it is reject (the adjudicator's, else every annotator's there), each queue item not
    adjudicated where an annotator rejected it, and each annotation outside queues that
    rejects it."""
    reasons: list[str] = []
    items = QueueItem.objects.filter(step_id=step_id).select_related("queue", "adjudication")
    for item in items.order_by("queue__created_at", "pk"):
        adjudication = getattr(item, "adjudication", None)
        if adjudication is not None:
            if adjudication.verdict == Verdict.REJECT:
                reasons.append(f"queue {item.queue.name!r}: the adjudicator rejected it")
            continue
        verdicts = list(
            counted_annotations(item.queue_id)
            .filter(step_id=step_id)
            .values_list("verdict", flat=True)
        )
        rejected = verdicts.count(Verdict.REJECT)
        if rejected:
            reasons.append(
                f"queue {item.queue.name!r}: {rejected} of {len(verdicts)} annotator"
                f"{'s' if len(verdicts) != 1 else ''} rejected it"
            )
    outside = StepAnnotation.objects.filter(
        step_id=step_id, queue__isnull=True, verdict=Verdict.REJECT
    ).count()
    if outside:
        reasons.append(
            f"{outside} annotation{'s' if outside != 1 else ''} on the step's own page "
            f"reject{'s' if outside == 1 else ''} it"
        )
    return reasons


def _chosen_steps(
    project: Project, data: SelectionData
) -> tuple[list[int], str, dict[int, Fix] | None]:
    """The steps, the source in words, and their corrections when the source decides them
    (a queue's; None: the newest correction saved on each step)."""
    if data.queue is not None:
        found = accepted_items(data.queue, with_fixed=data.with_fixed)
        kind = "accepted" + (" and fixed" if data.with_fixed else "")
        fixes = {pk: fix for pk, fix in found.items() if fix}
        return list(found), f"the {kind} items of queue {data.queue.name!r}", fixes
    if data.filter is not None:
        ids = list(
            steps_for(project, data.filter)
            .values_list("pk", flat=True)
            .distinct()[: data.filter.limit]
        )
        return ids, data.filter.describe(), None
    mine = set(
        Step.objects.filter(pk__in=data.steps, branch__trajectory__project=project).values_list(
            "pk", flat=True
        )
    )
    missing = [pk for pk in data.steps if pk not in mine]
    if missing:
        raise DatasetError(f"step {missing[0]} is not one of this project's")
    words = f"{len(data.steps)} hand-picked step{'s' if len(data.steps) != 1 else ''}"
    rejected = [reason for pk in data.steps for reason in rejections(pk)]
    if rejected and not data.confirm_rejected:
        raise RejectedSteps(rejected)
    if rejected:
        words += f", added although rejected ({'; '.join(rejected)})"
    return list(data.steps), words, None


Kept = tuple[int | None, str, bool, int | None]  # step, observation, corrected, correction_by


def _kept_items(
    previous: DatasetVersion, data: SelectionData, ids: list[int]
) -> tuple[list[Kept], str]:
    """The previous version's items a new version keeps, and how, in words (appended to the
    source): every one for hand-picked steps (a step picked again is replaced); for a queue,
    every one the queue has not decided (a step it accepts is replaced by its decision, one
    it rejects is dropped)."""
    rows: list[Kept] = list(
        previous.items.order_by("position").values_list(
            "step_id", "observation", "corrected", "correction_by_id"
        )
    )
    new = set(ids)
    if data.queue is None:
        return [r for r in rows if r[0] not in new], ""
    decided = queue_decisions(data.queue, with_fixed=data.with_fixed)
    kept = [r for r in rows if r[0] not in decided]
    held = {r[0] for r in rows}
    replaced = len(new & held)
    dropped = sum(1 for r in rows if r[0] in decided and decided[r[0]] is None)
    parts = [f"{len(new - held)} new"]
    if replaced:
        parts.append(f"{replaced} replaced by the queue's decision")
    if dropped:
        them = "it" if dropped == 1 else "them"
        parts.append(f"{dropped} dropped as the queue did not accept {them}")
    return kept, f" ({', '.join(parts)})"


def create_version(project: Project, user, data: SelectionData) -> DatasetVersion:
    """A new version of the dataset `data.name` (made when new): its steps and their
    corrections, all written or none. Hand-picked steps, and a queue's unless `replace`, are
    added to the latest version's."""
    ids, source, decided = _chosen_steps(project, data)
    with transaction.atomic():
        dataset, _ = Dataset.objects.get_or_create(
            project=project,
            name=data.name,
            defaults={"created_by": user, "description": data.description},
        )
        Dataset.objects.select_for_update().filter(pk=dataset.pk).first()  # one version at a time
        previous = dataset.versions.order_by("-number").first()
        keep: list[Kept] = []
        if previous is not None and (data.steps or (data.queue is not None and not data.replace)):
            keep, how = _kept_items(previous, data, ids)
            source = f"v{previous.number} + {source}{how}"
        elif previous is not None and data.queue is not None:
            source = f"{source}, replacing v{previous.number}"
        if not ids and not keep:
            raise DatasetError(f"no step to put in the dataset: {source} holds none")
        if len(ids) + len(keep) > MAX_ITEMS:
            raise DatasetError(
                f"a version holds at most {MAX_ITEMS} steps ({source} has {len(ids)})"
            )
        fixes = corrections(ids) if decided is None else decided
        number = (previous.number if previous else 0) + 1
        version = DatasetVersion.objects.create(
            dataset=dataset, number=number, source=source[:500], created_by=user
        )
        chosen: list[Kept] = [
            (pk, fixes[pk].text, True, fixes[pk].by) if pk in fixes else (pk, "", False, None)
            for pk in ids
        ]
        rows = [
            DatasetItem(
                version=version,
                position=i,
                step_id=step,
                observation=text,
                corrected=fixed,
                correction_by_id=by,
            )
            for i, (step, text, fixed, by) in enumerate([*keep, *chosen])
        ]
        DatasetItem.objects.bulk_create(rows, batch_size=2000)
        DatasetVersion.objects.filter(pk=version.pk).update(
            item_count=len(rows), corrected_count=sum(r.corrected for r in rows)
        )
        version.item_count, version.corrected_count = len(rows), sum(r.corrected for r in rows)
    return version


# ---- examples -----------------------------------------------------------------------------


_WORLD_MODEL_SOURCES = frozenset({"simulated", "perturbed"})
_FINAL_SOURCE = "none"
# shared, read-only: one dict per turn would be a large part of reading a dataset
_NO_META: dict[str, Any] = {}
_FILE_META: dict[str, Any] = {"awb_source": True}


_RECORDED_MODEL = world_model_dict(None)
_UNKNOWN_MODEL = world_model_dict(None, recorded=False)


def _world_model_of(
    row: tuple,
    meta: dict[str, Any],
    segment_jobs: dict[int, int | None],
    identities: dict[int, dict[str, Any]],
) -> dict[str, Any]:
    """A `STEP_COLUMNS` row's `world_model` (`model_identity.identity_of_step`, on plain
    rows)."""
    if row[8] == "recorded":
        return _RECORDED_MODEL
    # simulated, perturbed, or a rollout's final answer (its run names the agent too)
    job = meta.get("job")
    if not isinstance(job, int) or isinstance(job, bool):
        if is_served_meta(meta):  # a served episode step: no job, its meta names the model
            return _served_model(identity_of_step_meta(meta))
        job = segment_jobs.get(row[1])
    return identities.get(job, _UNKNOWN_MODEL) if job is not None else _UNKNOWN_MODEL


@functools.lru_cache(maxsize=4096)
def _served_model(identity: ModelIdentity | None) -> dict[str, Any]:
    """One shared, read-only dict per served model, settings and seed (as `identities`)."""
    return world_model_dict(identity, recorded=False)


def _export_turn(
    row: tuple,
    correction: str | None,
    meta: dict[str, Any],
    from_file: bool = False,
    rejected: bool = False,
    world_model: dict[str, Any] | None = None,
) -> ExportTurn:
    """A step (a `STEP_COLUMNS` row, its meta decoded) as an export turn. A corrected step
    keeps no world-model thinking: it reasoned towards the observation that was replaced."""
    _, _, index, action, observation, state, thinking, raw_prompt, source, _ = row
    if meta:
        raw_response = meta.get("raw_response") or ""
        tool_name, call_id = str(meta.get("tool_name") or ""), str(meta.get("call_id") or "")
    else:
        raw_response = tool_name = call_id = ""
    corrected = correction is not None
    # positional, in the field order of ExportTurn (keywords cost a quarter of the time)
    return ExportTurn(
        index,
        action,
        correction if corrected else observation,  # type: ignore[arg-type]
        corrected,
        state,
        "" if corrected else thinking,
        source in _WORLD_MODEL_SOURCES,
        raw_prompt,
        "" if corrected else raw_response,
        tool_name,
        call_id,
        source == _FINAL_SOURCE,
        _FILE_META if from_file else _NO_META,
        rejected,
        world_model,
    )


BRANCH_COLUMNS = (
    "pk", "trajectory_id", "parent_id", "origin", "lineage", "trajectory__domain",
    "trajectory__title", "trajectory__task_instruction", "trajectory__system_prompt",
    "trajectory__tools", "trajectory__metadata", "trajectory__source_format",
    "job__world_version_id",
)  # fmt: skip


def _plain_rows(queryset: Any) -> list[tuple]:
    """The rows of a `values_list` queryset as the driver gives them: JSON columns stay text
    (decoded by `_json` where read), which spares Django's per-value converters, most of
    the time of reading a dataset's steps."""
    sql, params = queryset.query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


def _world_prompts(rows: list[tuple]) -> dict[int, tuple[str, list[Any]]]:
    """The system prompt and tools of each branch simulated in a fictional world (its job's
    world version, or the world its trajectory was started in), as the simulation composed
    them (`jobs.simulation.world_context`)."""
    from inference.worlds import compose
    from studio.models import WorldVersion

    wanted: dict[int, int] = {}
    for r in rows:
        version_id = r[12]
        if version_id is None and r[11] in ("world", "episode"):
            world = _json(r[10], {}).get("world") or {}
            world_id, number = world.get("id"), world.get("version")
            if isinstance(world_id, int) and isinstance(number, int):
                version_id = (
                    WorldVersion.objects.filter(world_id=world_id, number=number)
                    .values_list("pk", flat=True)
                    .first()
                )
        if version_id is not None:
            wanted[r[0]] = version_id
    composed: dict[int, tuple[str, list[Any]]] = {}
    for version in WorldVersion.objects.filter(pk__in=set(wanted.values())):
        spec = version.spec()
        composed[version.pk] = (compose(spec).system_prompt, list(spec.tools))
    return {pk: composed[v] for pk, v in wanted.items() if v in composed}


_ANY_SQL: dict[str, str | None] = {}


def _rows_with_ids(key: str, build: Callable[[list[int]], Any], ids: Iterable[int]) -> list[tuple]:
    """`_plain_rows(build(ids))`, where `build` filters one column `__in` the ids. On
    PostgreSQL the ids go as one array (`= ANY(%s)`) in SQL made once per `key`: Django
    would compile a placeholder per id into every query, a large part of an export's time."""
    ids = list(ids)
    if not ids:  # `pk__in=[]` compiles to no SQL at all (EmptyResultSet): nothing to read
        return []
    if connection.vendor != "postgresql":
        return _plain_rows(build(ids))
    if key not in _ANY_SQL:
        sql, params = build([0]).query.sql_with_params()
        ok = sql.count("IN (%s)") == 1 and tuple(params) == (0,)
        _ANY_SQL[key] = sql.replace("IN (%s)", "= ANY(%s)") if ok else None
    sql = _ANY_SQL[key]
    if sql is None:
        return _plain_rows(build(ids))
    with connection.cursor() as cursor:
        cursor.execute(sql, [ids])
        return cursor.fetchall()


def _json(value: Any, empty: Any) -> Any:
    if value is None or value in ("{}", "[]", ""):
        return empty
    return json.loads(value) if isinstance(value, str) else value


@dataclass(slots=True)
class _BranchFacts:
    pk: int
    trajectory_id: int
    parent_id: int | None
    origin: str
    lineage: list[list[int]]


@dataclass(slots=True)
class _TrajectoryFacts:
    pk: int
    domain: str
    title: str
    task_instruction: str
    system_prompt: str
    tools: list[Any]
    tags: list[str]
    awb_task: str
    agent_system_prompt: str = ""


@dataclass(slots=True)
class _BranchContext:
    branch: _BranchFacts
    trajectory: _TrajectoryFacts
    steps: list[ExportTurn]
    position: dict[int, int]  # step index -> position in `steps`
    metas: dict[int, dict[str, Any]]  # step index -> the step's meta (its AWB row facts)


_ID_CHUNK = 5000  # ids a query (SQLite's bound-parameter limit)


def rejected_steps(step_ids: Iterable[int]) -> set[int]:
    """The steps a review rejected, as `rejections` says (in bulk): a queue item whose
    adjudication rejects it; a queue item not adjudicated where an annotator who completed it
    rejected it; an annotation outside queues that rejects it. A step only accepted, or never
    reviewed, is not rejected."""
    ids = list(step_ids)
    rejected: set[int] = set()
    for begin in range(0, len(ids), _ID_CHUNK):
        part = ids[begin : begin + _ID_CHUNK]
        decided: set[tuple[int, int]] = set()
        for step_id, queue_id, verdict in Adjudication.objects.filter(
            item__step_id__in=part
        ).values_list("item__step_id", "item__queue_id", "verdict"):
            decided.add((step_id, queue_id))
            if verdict == Verdict.REJECT:
                rejected.add(step_id)
        in_queues = counted_annotations().filter(step_id__in=part, verdict=Verdict.REJECT)
        for step_id, queue_id in in_queues.values_list("step_id", "queue_id"):
            if (step_id, queue_id) not in decided:
                rejected.add(step_id)
        rejected.update(
            StepAnnotation.objects.filter(
                step_id__in=part, queue__isnull=True, verdict=Verdict.REJECT
            ).values_list("step_id", flat=True)
        )
    return rejected


def _contexts(
    branch_ids: Iterable[int],
    version: DatasetVersion | None,
    known: dict[int, str | None] | None = None,
    *,
    reviews: bool = False,
) -> dict[int, _BranchContext]:
    """The path of each branch as export turns, in a fixed number of queries whatever the
    number of branches: the observation of each step the version holds with a correction is
    that correction (in the history of later steps too). `known`: the version's items already
    read (step id -> its correction, or None), so only the other steps are looked up. With
    `reviews`, each turn says whether a review rejected its step (`rejected_steps`)."""
    branch_ids = list(branch_ids)
    if not branch_ids:
        return {}
    rows = _rows_with_ids(
        "branches",
        lambda ids: Branch.objects.filter(pk__in=ids).values_list(*BRANCH_COLUMNS),
        branch_ids,
    )
    branches = {
        r[0]: _BranchFacts(r[0], r[1], r[2], r[3], _json(r[4], []) or [[r[0], 0]]) for r in rows
    }
    trajectories = {r[1]: r[5:12] for r in rows}
    worlds = _world_prompts(rows)
    lineages = {pk: b.lineage for pk, b in branches.items()}
    segments = {seg for lineage in lineages.values() for seg, _ in lineage}
    rows_of_branch: dict[int, list[tuple]] = {}
    steps = _rows_with_ids(
        "steps",
        lambda ids: (
            Step.objects.filter(branch_id__in=ids)
            .order_by("branch_id", "index")
            .values_list(*STEP_COLUMNS)
        ),
        segments,
    )
    for row in steps:
        rows_of_branch.setdefault(row[1], []).append(row)
    rejected = rejected_steps(r[0] for r in steps) if reviews else set()
    known = known or {}
    fixes: dict[int, str] = {pk: text for pk, text in known.items() if text is not None}
    if version is not None:
        others = [r[0] for rows in rows_of_branch.values() for r in rows if r[0] not in known]
        if others:
            fixes.update(
                version.items.filter(corrected=True, step_id__in=others).values_list(
                    "step_id", "observation"
                )
            )
    tags: dict[int, list[str]] = {pk: [] for pk in trajectories}
    through = Trajectory.tags.through.objects.filter(trajectory_id__in=list(trajectories))
    for trajectory_id, name in through.order_by("tag__name").values_list(
        "trajectory_id", "tag__name"
    ):
        tags[trajectory_id].append(name)
    facts: dict[int, _TrajectoryFacts] = {}
    for pk, (domain, title, task, system, tools, metadata, source_format) in trajectories.items():
        tools = _json(tools, [])
        metadata = _json(metadata, {})
        awb = metadata.get("agentworldbench") or {}
        agent_system = metadata.get("agent_system_prompt")
        facts[pk] = _TrajectoryFacts(
            pk=pk,
            domain=domain,
            title=title,
            task_instruction=task or "",
            # as `simulation.system_prompt_for`: the stored prompt, else the domain's template
            system_prompt=system or build_system_prompt(domain, tools or None),
            tools=tools,
            tags=tags[pk],
            awb_task=str(awb.get("task") or "") if source_format == "agentworldbench" else "",
            agent_system_prompt=agent_system if isinstance(agent_system, str) else "",
        )
    # The model behind each simulated step: the job the step names (an appended branch
    # holds steps of many jobs), else its branch's; two queries for the whole chunk.
    segment_jobs = dict(
        _rows_with_ids(
            "segment-jobs",
            lambda ids: Branch.objects.filter(pk__in=ids).values_list("pk", "job_id"),
            segments,
        )
    )
    step_jobs = {_json(r[9], {}).get("job") if r[8] != "recorded" else None for r in steps} | set(
        segment_jobs.values()
    )
    identities = {
        pk: world_model_dict(identity)
        for pk, identity in identities_of_jobs(j for j in step_jobs if isinstance(j, int)).items()
    }
    found = {}
    for pk, branch in branches.items():
        lineage = lineages[pk]
        path: list[tuple] = []
        for i, (seg, begin) in enumerate(lineage):
            stop = lineage[i + 1][1] if i + 1 < len(lineage) else None
            path += [
                r
                for r in rows_of_branch.get(seg, ())
                if r[2] >= begin and (stop is None or r[2] < stop)
            ]
        metas = [_json(r[9], {}) for r in path]
        models = [
            _world_model_of(r, m, segment_jobs, identities)
            for r, m in zip(path, metas, strict=True)
        ]
        trajectory = facts[branch.trajectory_id]
        if pk in worlds:  # simulated in a fictional world: its prompt and tools, as it ran
            system_prompt, tools = worlds[pk]
            trajectory = replace(trajectory, system_prompt=system_prompt, tools=tools)
        # a turn of an AgentWorldBench file's own trajectory: written back only where the
        # file had a row for it (`awb_row`), never as a row made up for the others
        from_file = bool(trajectory.awb_task) and branch.parent_id is None
        found[pk] = _BranchContext(
            branch=branch,
            trajectory=trajectory,
            steps=[
                _export_turn(r, fixes.get(r[0]), m, from_file, r[0] in rejected, model)
                for r, m, model in zip(path, metas, models, strict=True)
            ],
            position={r[2]: i for i, r in enumerate(path)},
            metas={r[2]: m for r, m in zip(path, metas, strict=True)},
        )
    return found


def _example(ctx: _BranchContext, index: int) -> Example:
    at = ctx.position[index]
    meta = ctx.metas[index]
    t = ctx.trajectory
    awb_row = None
    # the file's own row, written back as it was: only on the recorded branch it came from
    if (
        t.awb_task
        and ctx.branch.parent_id is None
        and ctx.branch.origin == BranchOrigin.RECORDED
        and "row_id" in meta
    ):
        awb_row = {
            "task": t.awb_task,
            "id": meta["row_id"],
            "row_turns": int(meta.get("row_turns") or len(ctx.steps)),
            "total_turns": int(meta.get("row_total_turns") or len(ctx.steps)),
        }
    # positional, in the field order of Example (one per row: keywords cost)
    return Example(
        t.pk, ctx.branch.pk, t.domain, t.title, t.task_instruction, t.system_prompt, t.tools,
        ctx.steps, at, t.tags, awb_row, t.agent_system_prompt,
    )  # fmt: skip


@dataclass
class ExportCounts:
    rows: int = 0
    items: int = 0
    deleted: int = 0  # items whose step is gone
    no_row: int = 0  # items the format has no row for (a final answer's world-model turn, ...)
    # rows left out because their context holds a rejected step (`drop_rejected_context`)
    rejected_context: int = 0
    # `thinking` rows whose target had no world-model thinking: written with an empty block
    empty_thinking: int = 0

    def left_out(self) -> dict[str, int]:
        """What an export job keeps beside its own counters (in its `options`)."""
        return {"rejected_context": self.rejected_context, "empty_thinking": self.empty_thinking}


def version_examples(
    version: DatasetVersion, counts: ExportCounts, *, chunk: int = 2000, reviews: bool = False
) -> Iterator[Example]:
    """The version's items as examples, in position order, `chunk` items at a time (fewer
    when their branches' paths hold more than `MAX_LOADED_STEPS` steps): the paths of a
    chunk's branches are read together, and only they are in memory. A branch that runs on
    into the next chunk keeps its context (a chunk may read no new branch at all). With
    `reviews`, each turn says whether a review rejected its step."""
    items = version.items.order_by("position").values_list(
        "step_id", "step__branch_id", "step__index", "corrected", "observation"
    )
    batch: list[tuple[Any, ...]] = []
    kept: dict[int, _BranchContext] = {}
    size = chunk

    def flush() -> Iterator[Example]:
        nonlocal kept, size
        wanted = {row[1] for row in batch if row[1] is not None}
        known = {row[0]: (row[4] if row[3] else None) for row in batch if row[0] is not None}
        # a branch that runs on from the last chunk keeps its context (and its cache)
        contexts = {pk: kept[pk] for pk in wanted & kept.keys()}
        contexts.update(_contexts(wanted - contexts.keys(), version, known, reviews=reviews))
        for step_id, branch_id, index, _, _ in batch:
            counts.items += 1
            if step_id is None or branch_id is None or index is None:
                counts.deleted += 1
                continue
            yield _example(contexts[branch_id], index)
        kept = contexts
        # items spread over long branches load many steps each: take fewer at a time
        loaded = sum(len(c.steps) for c in contexts.values())
        size = max(50, min(chunk, size * MAX_LOADED_STEPS // max(1, loaded)))

    rows = items.iterator(chunk_size=chunk)
    try:
        for item in rows:
            batch.append(item)
            if len(batch) >= size:
                yield from flush()
                batch = []
        if batch:
            yield from flush()
    finally:
        # On PostgreSQL the rows come from a server-side cursor: a stopped or failed export
        # must close it now, in its own transaction. Left to the garbage collector, it is
        # closed later inside whatever transaction runs then, which the error of closing a
        # cursor that no longer exists aborts.
        rows.close()  # type: ignore[attr-defined]


def branch_examples(
    branch: Branch, counts: ExportCounts, *, reviews: bool = False
) -> Iterator[Example]:
    """Every step of a branch (its whole path from step 0), as recorded: no corrections."""
    ctx = _contexts([branch.pk], None, reviews=reviews)[branch.pk]
    for index in ctx.position:
        counts.items += 1
        yield _example(ctx, index)


# ---- writing ------------------------------------------------------------------------------


def rows_of(
    examples: Iterable[Example], fmt: str, options: ExportOptions, counts: ExportCounts
) -> Iterator[bytes]:
    """One JSON line per row, UTF-8. orjson encodes (rows carry their whole history, so encoding is
    most of an export's time); text it refuses (half a surrogate pair, which AgentWorldBench
    files may hold) goes through the json module instead."""
    import orjson

    fallback = json.JSONEncoder(ensure_ascii=True).encode  # escapes keep it valid UTF-8
    drop = options.drop_rejected_context
    thinking = options.thinking and trains_world_model(fmt, options)
    try:
        for example in examples:
            if drop and context_rejected(example):
                counts.rejected_context += 1
                continue
            row = row_for(fmt, example, options)
            if row is None:
                counts.no_row += 1
                continue
            counts.rows += 1
            if thinking and not has_thinking(example.turn):
                counts.empty_thinking += 1
            try:
                yield orjson.dumps(row, option=orjson.OPT_APPEND_NEWLINE)
            except orjson.JSONEncodeError:
                yield fallback(row).encode("ascii") + b"\n"
    finally:
        close_upstream(examples)


def close_upstream(source: Iterable[Any]) -> None:
    """Close a generator feeding a stage that ends early (stopped, failed, abandoned), so the
    database cursor at the head of the chain closes now (see `version_examples`)."""
    close = getattr(source, "close", None)
    if close is not None:
        close()


def write_rows(lines: Iterable[bytes], out: IO[bytes], *, buffer: int = 1 << 20) -> None:
    """The lines into `out`, about `buffer` bytes a write (rows are a few KB: one write
    each would be most of the writing's time)."""
    pending: list[bytes] = []
    size = 0
    for line in lines:
        pending.append(line)
        size += len(line)
        if size >= buffer:
            out.write(b"".join(pending))
            pending, size = [], 0
    if pending:
        out.write(b"".join(pending))


def zip_chunks(lines: Iterator[bytes], data_name: str, info: Callable[[], str]) -> Iterator[bytes]:
    """A zip of the rows and dataset_info.json, written as it is read (a zip file can be
    streamed: each entry's sizes follow its data)."""
    buffer = _Pipe()
    archive = zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED)
    try:
        with archive.open(data_name, "w", force_zip64=True) as entry:
            for line in lines:
                entry.write(line)
                if buffer.pending() >= 1 << 16:
                    yield buffer.take()
        archive.writestr("dataset_info.json", info())
    except BaseException:
        # a failed export must not end as a complete-looking zip: the central directory
        # (written on close) is never made, so what was sent reads as a broken archive
        buffer.broken = True
        raise
    archive.close()
    yield buffer.take()


class _Pipe(io.RawIOBase):
    """A write-only, unseekable sink whose bytes are taken out as they come."""

    def __init__(self) -> None:
        self._chunks: list[bytes] = []
        self._size = 0
        self._position = 0
        self.broken = False  # set on a failure: later writes (the zip's close) are dropped

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:  # type: ignore[override]
        if self.broken:
            return len(data)
        data = bytes(data)
        self._chunks.append(data)
        self._size += len(data)
        self._position += len(data)
        return len(data)

    def tell(self) -> int:
        return self._position

    def pending(self) -> int:
        return self._size

    def take(self) -> bytes:
        out = b"".join(self._chunks)
        self._chunks, self._size = [], 0
        return out


class ExportStopped(Exception):
    """The export was cancelled: its file is removed."""


@dataclass
class ExportFile:
    path: Path
    name: str  # the download's file name
    size: int


def ticking(
    examples: Iterable[Example],
    counts: ExportCounts,
    tick: Callable[[ExportCounts], None] | None = None,
    stop: Callable[[], bool] | None = None,
) -> Iterator[Example]:
    """The examples, calling `tick(counts)` after each one; `stop()` true: ExportStopped."""
    try:
        for example in examples:
            if stop is not None and stop():
                raise ExportStopped
            yield example
            if tick is not None:
                tick(counts)
    finally:
        close_upstream(examples)


def version_chunks(
    version: DatasetVersion,
    fmt: str,
    options: ExportOptions,
    counts: ExportCounts,
    *,
    tick: Callable[[ExportCounts], None] | None = None,
    stop: Callable[[], bool] | None = None,
) -> tuple[str, Iterator[bytes]]:
    """A version's export as a file name and its bytes, made as they are read (LLaMA-Factory:
    a zip with its `dataset_info.json`): the one shape of the download and the file."""
    check_format(fmt)
    dataset = version.dataset
    stem = f"{file_stem(dataset.name)}-v{version.number}-{file_suffix(fmt, options)}"
    reviews = options.drop_rejected_context
    examples = ticking(version_examples(version, counts, reviews=reviews), counts, tick, stop)
    lines = rows_of(examples, fmt, options, counts)
    name = f"{stem}.jsonl"
    if fmt != "llamafactory":
        return name, broken_on_error(lines)
    info_name = f"{file_stem(dataset.name)}-v{version.number}"
    return f"{stem}.zip", zip_chunks(lines, name, lambda: dataset_info(info_name, options, name))


# What a JSONL export that fails midway ends with: an unterminated JSON object, so the file
# does not parse as complete JSON lines even where the connection's end looked clean.
BROKEN_TAIL = b'\n{"export_failed": '


def broken_on_error(lines: Iterable[bytes]) -> Iterator[bytes]:
    """The lines; on an error, `BROKEN_TAIL` and then the error again (which aborts a
    streamed response's connection)."""
    try:
        yield from lines
    except Exception:
        yield BROKEN_TAIL
        raise


def write_atomically(chunks: Iterable[bytes], dest: Path) -> int:
    """The bytes into `dest`, written under a temporary name beside it and moved into place
    once complete, so a failed or stopped export leaves no half file. Returns the size."""
    fd, tmp = tempfile.mkstemp(prefix=".export-", dir=dest.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            os.fchmod(out.fileno(), default_file_mode())  # mkstemp's 0600, as a new file's
            write_rows(chunks, out)
        os.replace(tmp, dest)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return dest.stat().st_size


def export_file(
    version: DatasetVersion,
    fmt: str,
    options: ExportOptions,
    folder: Path,
    counts: ExportCounts,
    *,
    tick: Callable[[ExportCounts], None] | None = None,
    stop: Callable[[], bool] | None = None,
) -> ExportFile:
    """The version in `fmt` as a file in `folder` (see `version_chunks`, `write_atomically`);
    `tick(counts)` after each step read; `stop()` true: ExportStopped, and no file is left."""
    name, chunks = version_chunks(version, fmt, options, counts, tick=tick, stop=stop)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{uuid.uuid4().hex[:12]}-{name}"
    return ExportFile(path, name, write_atomically(chunks, path))


def dataset_info(name: str, options: ExportOptions, file_name: str) -> str:
    return (
        json.dumps(dataset_info_entry(name, options, file_name), indent=2, ensure_ascii=False)
        + "\n"
    )


def check_format(fmt: str) -> None:
    if fmt not in FORMATS:
        raise DatasetError(f"unknown format {fmt!r}; the formats are: {', '.join(FORMATS)}")


def file_stem(name: str) -> str:
    """A name safe as a file name."""
    import re

    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.") or "dataset"


def start_export(version: DatasetVersion, user, fmt: str, options: ExportOptions) -> ExportJob:
    """The row of an export a worker writes to a file (the caller enqueues it);
    TooManyJobs when the project has as many jobs at once as it may."""
    with transaction.atomic():
        job_limits.check_room(version.dataset.project_id)
        return ExportJob.objects.create(
            version=version,
            requester=user,
            format=fmt,
            options=asdict(options),
            queue=queue_name("default"),
        )
