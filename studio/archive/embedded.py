"""Ids of other rows kept inside JSON or text fields: a project archive gives every row a new
id, so these are rewritten like foreign keys. A new field that keeps an id of another row
must be declared here (the round-trip test compares such fields through the new ids).

Each entry names the models whose ids the value holds, a function that rewrites the value
given `lookup(label, old_id) -> new_id | None` (None: that row is not in the archive, e.g. a
world deleted since; the id becomes None, as a foreign key with SET_NULL would), and which
rows hold studio ids at all (`applies`, given the row's fields by attname): an imported
trajectory's metadata or a recorded step's meta is the source file's, whose numbers are not
ours. Names and descriptions ("job 12 #3 @4 · ls") are text people read and keep the numbers
they had."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Lookup = Callable[[str, Any], int | None]


def _every_row(row: dict[str, Any]) -> bool:
    return True


@dataclass(frozen=True)
class Embedded:
    targets: tuple[str, ...]
    remap: Callable[[Any, Lookup], Any]
    applies: Callable[[dict[str, Any]], bool] = _every_row
    # the other fields `applies` reads (the fix-up pass reads them back with the value)
    reads: tuple[str, ...] = ()


def _made_in_a_world(row: dict[str, Any]) -> bool:
    return row.get("source_format") in ("world", "episode")


def _not_recorded(row: dict[str, Any]) -> bool:
    return row.get("provenance") != "recorded" or row.get("observation_source") != "recorded"


def _id(lookup: Lookup, label: str, value: Any) -> Any:
    """An id (a whole number, not a bool) rewritten; anything else kept as it is."""
    if isinstance(value, int) and not isinstance(value, bool):
        return lookup(label, value)
    return value


def _world_label(value: Any, lookup: Lookup) -> Any:
    """{"id": world id, "name": ..., "version": ...}, as jobs, steps and trajectories keep it."""
    if isinstance(value, dict) and "id" in value:
        return {**value, "id": _id(lookup, "studio.world", value["id"])}
    return value


def branch_lineage(value: Any, lookup: Lookup) -> Any:
    """[[branch id, start index], ...] from the root down (`Branch.lineage`)."""
    if not isinstance(value, list):
        return value
    return [
        [_id(lookup, "studio.branch", entry[0]), *entry[1:]]
        if isinstance(entry, list) and entry
        else entry
        for entry in value
    ]


def trajectory_metadata(value: Any, lookup: Lookup) -> Any:
    """A trajectory started in a world keeps the world; an episode also its branch."""
    if not isinstance(value, dict):
        return value
    out = dict(value)
    if "world" in out:
        out["world"] = _world_label(out["world"], lookup)
    episode = out.get("episode")
    if isinstance(episode, dict) and "branch" in episode:
        episode = {**episode, "branch": _id(lookup, "studio.branch", episode["branch"])}
        if "token_id" in episode:  # the token that played it (a training run, a campaign)
            episode["token_id"] = _id(lookup, "studio.apitoken", episode["token_id"])
        out["episode"] = episode
    campaign = out.get("campaign")
    if isinstance(campaign, dict):  # a campaign's episode: the campaign and its slot
        campaign = dict(campaign)
        if "id" in campaign:
            campaign["id"] = _id(lookup, "studio.campaign", campaign["id"])
        if "slot" in campaign:
            campaign["slot"] = _id(lookup, "studio.campaignepisode", campaign["slot"])
        out["campaign"] = campaign
    return out


def campaign_tasks(value: Any, lookup: Lookup) -> Any:
    """A campaign over recorded starting states names each task's trajectory."""
    if not isinstance(value, list):
        return value
    return [
        {**task, "trajectory": _id(lookup, "studio.trajectory", task["trajectory"])}
        if isinstance(task, dict) and "trajectory" in task
        else task
        for task in value
    ]


def step_meta(value: Any, lookup: Lookup) -> Any:
    """A simulated step names the job that made it and the world it ran in."""
    if not isinstance(value, dict):
        return value
    out = dict(value)
    if "job" in out:
        out["job"] = _id(lookup, "studio.simulationjob", out["job"])
    if "world" in out:
        out["world"] = _world_label(out["world"], lookup)
    return out


def job_params(value: Any, lookup: Lookup) -> Any:
    """A job run in a world keeps the world (`SimulationJob.params["world"]`)."""
    if isinstance(value, dict) and "world" in value:
        return {**value, "world": _world_label(value["world"], lookup)}
    return value


def sample_key(value: Any, lookup: Lookup) -> Any:
    """ "<trajectory id>:<step index>", which matches a sample across runs. A trajectory no
    longer there keeps its number behind "deleted-", so it can match no new trajectory."""
    if not isinstance(value, str) or ":" not in value:
        return value
    head, rest = value.split(":", 1)
    if not head.isdigit():
        return value
    new = lookup("studio.trajectory", int(head))
    return f"{new}:{rest}" if new is not None else f"deleted-{head}:{rest}"


def trajectory_ids(value: Any, lookup: Lookup) -> Any:
    """[trajectory id, ...] (a fine-tune's split); a trajectory no longer there is left out,
    as a deleted row leaves a many-to-many relation."""
    if not isinstance(value, list):
        return value
    out = [_id(lookup, "studio.trajectory", v) for v in value]
    return [v for v in out if v is not None]


def step_ids(value: Any, lookup: Lookup) -> Any:
    """[step id, ...] (a behaviour search's candidates); a step no longer there is left out."""
    if not isinstance(value, list):
        return value
    out = [_id(lookup, "studio.step", v) for v in value]
    return [v for v in out if v is not None]


EMBEDDED: dict[tuple[str, str], Embedded] = {
    ("studio.branch", "lineage"): Embedded(("studio.branch",), branch_lineage),
    ("studio.trajectory", "metadata"): Embedded(
        (
            "studio.world",
            "studio.branch",
            "studio.apitoken",
            "studio.campaign",
            "studio.campaignepisode",
        ),
        trajectory_metadata,
        _made_in_a_world,
        ("source_format",),
    ),
    ("studio.step", "meta"): Embedded(
        ("studio.simulationjob", "studio.world"),
        step_meta,
        _not_recorded,
        ("provenance", "observation_source"),
    ),
    ("studio.simulationjob", "params"): Embedded(("studio.world",), job_params),
    ("studio.campaign", "world_label"): Embedded(("studio.world",), _world_label),
    ("studio.campaign", "tasks"): Embedded(("studio.trajectory",), campaign_tasks),
    ("studio.evaluationsample", "key"): Embedded(("studio.trajectory",), sample_key),
    ("studio.finetunerun", "heldout_trajectory_ids"): Embedded(
        ("studio.trajectory",), trajectory_ids
    ),
    ("studio.finetunerun", "train_trajectory_ids"): Embedded(
        ("studio.trajectory",), trajectory_ids
    ),
    ("studio.behavioursearch", "candidate_ids"): Embedded(("studio.step",), step_ids),
}
