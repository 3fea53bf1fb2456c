"""A branch as a file in the studio's own format (`agentworld-studio/v1`, which the importer
reads back): the branch's whole path from step 0, each step with where its action and its
observation came from, and its meta (a simulated step's model, its perturbation, ...).
Written as a stream of JSON pieces: one step in memory at a time, whatever the length."""

from __future__ import annotations

import json
from collections.abc import Iterator

from studio.importers.native import NAME
from studio.models import Branch
from studio.services.model_identity import identities_of_jobs, identity_of_step, world_model_dict

STEP_FIELDS = (
    "index",
    "action",
    "observation",
    "state",
    "thinking",
    "raw_prompt",
    "provenance",
    "observation_source",
    "parse_status",
    "meta",
)


def export_chunks(branch: Branch) -> Iterator[str]:
    trajectory = branch.trajectory
    # The model of each simulated step (its own job, else its branch's; a served episode
    # step, with no job, names it in its meta): the jobs named by the path's steps and
    # branches, read before the steps stream.
    lineage = [pk for pk, _ in (branch.lineage or branch.compute_lineage())]
    branch_jobs = dict(Branch.objects.filter(pk__in=lineage).values_list("pk", "job_id"))
    named = (
        branch.all_steps()
        .exclude(observation_source="recorded")
        .values_list("meta__job", flat=True)
    )
    identities = identities_of_jobs(
        [*(j for j in named if isinstance(j, int)), *branch_jobs.values(), branch.job_id]
    )
    head = {
        "title": trajectory.title if branch.is_root else f"{trajectory.title} · {branch.name}",
        "domain": trajectory.domain,
        "task_instruction": trajectory.task_instruction or "",
        "system_prompt": trajectory.system_prompt or "",
        "tools": trajectory.tools or [],
        "tags": list(trajectory.tags.values_list("name", flat=True)),
        "metadata": {
            **(trajectory.metadata or {}),
            "studio_branch": {
                "name": branch.name,
                "origin": branch.origin,
                "fork_index": branch.fork_index,
                "job": branch.job_id,
                "sample_index": branch.sample_index,
                "world_model": world_model_dict(identities.get(branch.job_id or 0)),
            },
        },
    }
    opening = json.dumps({"format": NAME, "trajectories": [head]}, ensure_ascii=False)
    # ... "metadata": {...}}]}  ->  insert the steps before the closing "}]}"
    yield opening[: -len("}]}")] + ', "steps": ['
    first = True
    for step in branch.all_steps().only(*STEP_FIELDS, "branch_id").iterator(chunk_size=200):
        item = {name: getattr(step, name) for name in STEP_FIELDS if name != "index"}
        item["world_model"] = world_model_dict(
            identity_of_step(step, branch_jobs, identities),
            recorded=step.observation_source == "recorded",
        )
        yield ("" if first else ", ") + json.dumps(item, ensure_ascii=False)
        first = False
    yield "]}]}\n"
