"""For the project archive tests: a project with at least one row of every archived model (the
demo data plus what the demo lacks), and a dump of every row of a database written without
`studio.archive`'s code, to compare databases with.

Run in a process whose DATABASE_URL names the database:
    python -m tests.support.archive_project build NAME   (ids from 100,000 on)
    python -m tests.support.archive_project offset BASE  (ids from BASE on)
    python -m tests.support.archive_project dump OUT.jsonl"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any

EXTRA_USER = "curator"  # a member the target installation does not have
SECRET = "sk-archive-test-key"


def _at(days: float) -> dt.datetime:
    """A distinctive past time, with microseconds."""
    return dt.datetime(2025, 3, 4, 5, 6, 7, 891011, tzinfo=dt.UTC) + dt.timedelta(days=days)


def build(name: str) -> None:
    from django.contrib.auth import get_user_model
    from django.core.files.uploadedfile import SimpleUploadedFile
    from django.core.management import call_command

    from studio import secrets
    from studio.jobs.exports import export_folder
    from studio.models import (
        Adjudication,
        AnnotationQueue,
        AnnotationVersion,
        ApiToken,
        ArenaPair,
        ArenaRun,
        Branch,
        Campaign,
        CampaignEpisode,
        Dataset,
        DatasetItem,
        DatasetVersion,
        EvaluationRun,
        EvaluationSample,
        ExportJob,
        FineTuneRun,
        ImportJob,
        JudgeJob,
        Membership,
        ModelEndpoint,
        Project,
        QueueClaim,
        QueueItem,
        SimulationJob,
        Step,
        StepAnnotation,
        StepJudgement,
        Tag,
        Trajectory,
        World,
        WorldVersion,
    )
    from studio.services.import_jobs import do_start_import_job
    from studio.services.perturbations import add_presets
    from studio.services.tokens import create_token
    from studio.services.worlds import import_world, start_trajectory

    call_command("load_demo", "--project", name, verbosity=0, stdout=open(os.devnull, "w"))
    project = Project.objects.get(name=name)
    Project.objects.filter(pk=project.pk).update(created_at=_at(0), description="Archived ✓")
    users = {u.username: u for u in get_user_model().objects.all()}
    admin = users["admin"]
    curator = get_user_model().objects.create_user(
        EXTRA_USER, email="curator@example.org", first_name="Cu", last_name="Rator"
    )
    Membership.objects.create(project=project, user=curator, role="annotator")

    world = import_world(
        project,
        {
            "name": "Lyon Weather Co",
            "domain": "mcp",
            "description": "A weather service that only knows French cities.",
            "knowledge": ["It has rained in Lyon for 40 days."],
            "tools": [
                {
                    "name": "get_weather",
                    "description": "Weather of a city",
                    "parameters": {
                        "type": "object",
                        "properties": {"city": {"type": "string"}},
                        "required": ["city"],
                    },
                }
            ],
        },
        user=admin,
    ).version
    World.objects.filter(pk=world.world_id).update(created_at=_at(1))
    WorldVersion.objects.filter(pk=world.pk).update(created_at=_at(1.5))
    deleted_world_id = 987654  # a world since deleted, still named in a step's meta
    add_presets(project, "terminal", user=admin)
    token, _text = create_token(project, "agent box", user=admin)
    ApiToken.objects.filter(pk=token.pk).update(last_used_at=_at(2))

    world_endpoint = ModelEndpoint.objects.filter(project=project, role="world").first()
    assert world_endpoint is not None
    served = ModelEndpoint.objects.create(
        project=project, name="served", role="world", kind="openai",
        base_url="http://models.internal:8001/v1", model="Qwen/Qwen-AgentWorld-35B-A3B",
        api_key_encrypted=secrets.encrypt(SECRET), temperature=0.6, top_p=0.95,
        max_tokens=2048, context_length=32768, tested_at=_at(3), test_ok=True,
        test_latency_ms=12.345678901, created_by=admin,
    )  # fmt: skip
    judge = ModelEndpoint.objects.create(
        project=project, name="judge", role="judge", kind="openai", base_url="http://j/v1",
        model="judge-m", api_key_env="JUDGE_KEY",
    )  # fmt: skip

    trajectory = Trajectory.objects.filter(project=project).order_by("pk").first()
    assert trajectory is not None
    root = trajectory.root_branch
    steps = list(root.all_steps())
    tag = Tag.objects.create(project=project, name="archived/🧪")
    trajectory.tags.add(tag)

    job = SimulationJob.objects.create(
        requester=admin, trajectory=trajectory, branch=root, fork_index=1,
        action=steps[1].action + " --edited", mode="rollout", n=2, max_steps=3,
        params={"temperature": 0.7, "seed": 2**53 + 1, "world": {"id": world.world_id,
                "name": "Lyon Weather Co", "version": 1}},
        world_endpoint=served, backend="openai", model="m", base_url="http://models/v1",
        agent_endpoint=served, agent_model="a", world_version=world, status="succeeded",
        progress=1.0, phase="done", queue_wait_s=0.125, tokens_in=10, tokens_out=20,
        tokens_per_s=33.3333333333, started_at=_at(4), finished_at=_at(4.01),
        perturbations=[{"kind": "timeout", "params": {}, "mode": "deterministic",
                        "name": "t", "first_step": None, "last_step": 2, "tool": "",
                        "probability": 0.5}],
    )  # fmt: skip
    child = Branch.objects.create(
        trajectory=trajectory, parent=root, fork_index=1, name=f"job {job.pk} #1 @1 · edited",
        origin="simulated", status="succeeded", job=job, sample_index=0, created_by=admin,
    )  # fmt: skip
    grandchild = Branch.objects.create(
        trajectory=trajectory, parent=child, fork_index=2, name="deeper", origin="edited",
        job=job, sample_index=1, starred=True,
    )  # fmt: skip
    simulated = [
        Step.objects.create(
            branch=branch, index=index, action=f"act {index}", observation=f"obs {index} ünïcode",
            provenance="edited", observation_source="simulated", parse_status="well_formed",
            meta={"job": job.pk, "world": {"id": world.world_id, "name": "Lyon", "version": 1},
                  "backend": "openai"},
            timings={"duration_s": 0.5, "tokens_out": 7}, raw_output="<predicted_observation>",
        )
        for branch, index in ((child, 1), (child, 2), (grandchild, 2))
    ]  # fmt: skip
    Step.objects.create(
        branch=grandchild, index=3, action="final", provenance="agent",
        observation_source="none", meta={"world": {"id": deleted_world_id, "name": "gone"}},
    )  # fmt: skip
    episode = start_trajectory(world, "Is it raining in Lyon?", user=admin)
    episode_root = episode.root_branch
    Trajectory.objects.filter(pk=episode.pk).update(
        source_format="episode",
        metadata={**episode.metadata, "episode": {"token": "agent box", "branch": episode_root.pk}},
    )

    annotation = StepAnnotation.objects.create(
        step=simulated[0], author=users["annotator"], ratings={"format": 4, "quality": 5},
        verdict="needs_fix", corrected_observation="obs 1, fixed", tags=["typo"], comment="ok",
    )  # fmt: skip
    AnnotationVersion.objects.create(annotation=annotation, number=1, state={"verdict": "reject"})
    queue = AnnotationQueue.objects.create(
        project=project, name="Queue ✓", created_by=admin, annotators_per_item=2, blind=True,
        description="simulated steps",
    )  # fmt: skip
    queue.assignees.add(users["annotator"], curator)
    item = QueueItem.objects.create(queue=queue, step=simulated[0], position=0)
    QueueItem.objects.create(queue=queue, step=steps[0], position=1)
    QueueClaim.objects.create(item=item, user=curator, expires_at=_at(5), done_at=_at(5.1))
    Adjudication.objects.create(item=item, adjudicator=admin, verdict="accept", ratings={"a": 1})

    from studio.models import SavedSearch

    SavedSearch.objects.create(
        project=project, owner=curator, name="Typos ✓", query='tag:typo "obs 1"', shared=True
    )
    dataset = Dataset.objects.create(project=project, name="train", created_by=admin)
    version = DatasetVersion.objects.create(
        dataset=dataset, number=1, source="queue Queue ✓", item_count=2, corrected_count=1
    )
    DatasetItem.objects.create(
        version=version, position=0, step=simulated[0], observation="fixed", corrected=True
    )
    DatasetItem.objects.create(version=version, position=1, step=None)  # its step went
    folder = export_folder()
    folder.mkdir(parents=True, exist_ok=True)
    export_path = folder / "0123456789ab-train-v1-openai.jsonl"
    export_path.write_bytes(b'{"messages": []}\n' * 3)
    ExportJob.objects.create(
        version=version, requester=admin, format="openai", options={"turns": "wm"},
        status="succeeded", phase="done", progress=1.0, items_done=2, rows=1, deleted=1,
        file_name="train-v1-openai.jsonl", stored_path=str(export_path),
        size_bytes=export_path.stat().st_size,
    )  # fmt: skip

    run = EvaluationRun.objects.create(
        project=project, requester=admin, name="awb", world_endpoint=served, world_kind="openai",
        judge_endpoint=judge, judge_model="judge-m", judge_base_url="http://j/v1",
        domains=["terminal"], results={"overall": 71.25, "by_domain": {"terminal": 71.25}},
        status="failed", error="judge down", infer_s=1.5,
    )  # fmt: skip
    EvaluationSample.objects.create(
        run=run, domain="terminal", trajectory=trajectory, step_index=1,
        key=f"{trajectory.pk}:1", stage="judged", judgement={"format": 4}, total_score=3.8,
    )  # fmt: skip
    EvaluationSample.objects.create(
        run=run, domain="terminal", trajectory=None, step_index=0, key="424242:0"
    )
    judge_job = JudgeJob.objects.create(
        project=project, requester=admin, target="fork", fork=job, branch=child,
        annotation_queue=queue, description="job's futures", judge_endpoint=judge,
        judge_model="judge-m", judge_base_url="http://j/v1", steps_total=2, steps_judged=1,
    )  # fmt: skip
    # an arena of the job's model against itself, its judge job the one above (a cycle:
    # JudgeJob.arena <-> ArenaRun.judge_job)
    arena = ArenaRun.objects.create(
        project=project, requester=admin, trajectory=trajectory, branch=root, fork_index=1,
        action="act 1", n=1, seed=7, params={"temperature": 0.5}, judge_endpoint=judge,
        judge_model="judge-m", judge_base_url="http://j/v1", judge_job=judge_job,
        status="succeeded", phase="done", pairs_total=1, pairs_judged=1,
    )  # fmt: skip
    JudgeJob.objects.filter(pk=judge_job.pk).update(arena=arena)
    SimulationJob.objects.filter(pk=job.pk).update(arena=arena)
    ArenaPair.objects.create(
        arena=arena, job_a=job, job_b=job, step_a=simulated[0], step_b=simulated[1],
        reference=steps[1], winner="tie", ok=True, reason="both fine ✓", judge_model="judge-m",
    )  # fmt: skip
    StepJudgement.objects.create(
        step=simulated[0], job=judge_job, judge_model="judge-m", reference=steps[1],
        scores={"format": 5, "factuality": 4}, total_score=4.5, strengths=["s"],
        weaknesses=["w"], raw="{}",
    )  # fmt: skip

    # a campaign that played one episode (the trajectory above stands for it), judged by the
    # judge job above, with its own token
    campaign = Campaign.objects.create(
        project=project, requester=admin, name="rollouts", world_id=world.world_id,
        world_version=world, world_label={"id": world.world_id, "name": "w", "version": 1},
        source="world", tasks=[{"id": "t1", "instruction": "do it"}], agent_endpoint=judge,
        agent_name="judge", agent_model="judge-m", world_endpoint=served,
        world_model_name="served", world_model="Qwen/Qwen-AgentWorld-35B-A3B",
        arms=[{"name": "typo", "rules": []}], seed=11, token=token, judge_job=judge_job,
        status="succeeded", phase="done", progress=1.0, episodes_total=2, episodes_done=2,
        agent_tokens_in=10, world_tokens_out=20,
    )  # fmt: skip
    slot = CampaignEpisode.objects.create(
        campaign=campaign, task_index=0, task_id="t1", arm=1, arm_name="typo", seed=99,
        status="done", trajectory=episode, reward=0.5, success=False, end_cause="submit",
        steps=2, finished_at=_at(5.5),
    )  # fmt: skip
    # the episode says which token played it and which campaign slot it is
    meta = Trajectory.objects.get(pk=episode.pk).metadata
    meta["episode"]["token_id"] = token.pk
    meta["campaign"] = {"id": campaign.pk, "name": "rollouts", "slot": slot.pk, "arm": 1}
    Trajectory.objects.filter(pk=episode.pk).update(metadata=meta)
    JudgeJob.objects.filter(pk=judge_job.pk).update(campaign=campaign)

    # a fine-tune of the dataset version that registered a model; its split names
    # trajectories (ids kept in JSON: rewritten like foreign keys)
    tuned = ModelEndpoint.objects.create(
        project=project, name="tuned", role="world", kind="hf", model="/models/tuned/adapter"
    )
    FineTuneRun.objects.create(
        project=project, requester=admin, name="tune", dataset_version=version,
        dataset_name="train", version_number=version.number, base_model="/models/base",
        base_endpoint=served, settings={"lora_rank": 8}, code_version="0.1.0",
        heldout_trajectory_ids=[episode.pk], train_trajectory_ids=[trajectory.pk],
        output_dir="/models/tuned", result_dir="/models/tuned/adapter", status="succeeded",
        phase="done", progress=1.0, step=3, total_steps=3, loss_history=[[1, 2.0, 1e-4]],
        first_loss=2.0, final_loss=1.0, endpoint=tuned,
    )  # fmt: skip

    failed = do_start_import_job(
        project=project, user=admin, uploaded=SimpleUploadedFile("kept.json", b'{"x": 1}')
    )
    ImportJob.objects.filter(pk=failed.pk).update(
        status="failed", error="The worker running this job stopped", finished_at=_at(6),
        attempts=1, phase="failed",
    )  # fmt: skip
    ImportJob.objects.create(
        project=project, requester=curator, original_name="done.json",
        stored_path="/nowhere/done.json", size_bytes=10, status="succeeded",
        upload_removed_at=_at(6.5), trajectories_created=3, steps_created=9,
    )  # fmt: skip
    # a behaviour search with an embeddings model: its candidates are step ids kept in JSON
    # (rewritten like foreign keys), a label in a named cluster and one that failed
    from studio.models import BehaviourCluster, BehaviourLabel, BehaviourSearch

    embeddings = ModelEndpoint.objects.create(
        project=project, name="embeddings ✓", role="embedding", kind="openai",
        base_url="http://127.0.0.1:8002/v1", model="embed-m", price_in_per_mtok=0.02,
    )  # fmt: skip
    search = BehaviourSearch.objects.create(
        project=project, requester=admin, description="the agent deletes files ✓",
        query='domain:terminal "rm"', unit="steps", max_candidates=3, judge_endpoint=judge,
        judge_name="judge", judge_model="judge-m", judge_base_url="http://j/v1",
        params={"temperature": 0.0, "max_tokens": 64}, embedding_endpoint=embeddings,
        embedding_name="embeddings ✓", embedding_model="embed-m",
        embedding_base_url="http://127.0.0.1:8002/v1",
        status="succeeded", phase="done", progress=1.0,
        candidate_ids=[steps[0].pk, simulated[0].pk], capped=True, chosen_by="meaning",
        candidates=2, labelled=1, matched=1, failed=1, judge_tokens_in=40, judge_tokens_out=8,
        embedding_tokens=12, clustered=True,
    )  # fmt: skip
    cluster = BehaviourCluster.objects.create(job=search, name="removes ✓", size=1, order=0)
    BehaviourLabel.objects.create(
        job=search, trajectory=trajectory, branch=root, step=steps[0], match=True,
        confidence=0.75, reason="rm ✓", raw="<verdict>{}</verdict>", cluster=cluster,
    )  # fmt: skip
    BehaviourLabel.objects.create(
        job=search, trajectory=trajectory, branch=child, step=simulated[0], ok=False,
        error="attempt 1: no verdict",
    )  # fmt: skip

    # distinctive timestamps (auto_now_add gave them all "now")
    Step.objects.filter(branch=child).update(created_at=_at(7))
    Branch.objects.filter(pk=grandchild.pk).update(created_at=_at(7.5))


def offset_ids(base: int) -> None:
    """Make every table hand out ids of its own range (base + 10,000 x its place), so that an
    id copied unmapped, or mapped through another model's map, cannot pass for the right
    one in a comparison."""
    from django.apps import apps
    from django.contrib.auth import get_user_model
    from django.db import connection

    tables = sorted(
        m._meta.db_table
        for m in [
            *apps.get_app_config("studio").get_models(include_auto_created=True),
            get_user_model(),
        ]
    )
    with connection.cursor() as cursor:
        for i, table in enumerate(tables):
            start = base + 10_000 * i
            if connection.vendor == "sqlite":
                cursor.execute("DELETE FROM sqlite_sequence WHERE name = %s", [table])
                cursor.execute(
                    "INSERT INTO sqlite_sequence (name, seq) VALUES (%s, %s)", [table, start]
                )
            else:
                cursor.execute(
                    "SELECT setval(pg_get_serial_sequence(%s, 'id'), %s)", [table, start]
                )


def _encode(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        return value.astimezone(dt.UTC).isoformat()
    if isinstance(value, dt.date | dt.time):
        return value.isoformat()
    return value


def dump(out: Path) -> None:
    """Every row of every studio model and every user, as {"model", "row"} lines; a path to
    an existing file is dumped with its sha256 beside it."""
    from django.apps import apps
    from django.contrib.auth import get_user_model

    with out.open("w") as handle:
        for model in [
            *apps.get_app_config("studio").get_models(include_auto_created=True),
            get_user_model(),
        ]:
            attnames = [f.attname for f in model._meta.concrete_fields]
            for values in model._default_manager.order_by("pk").values_list(*attnames):
                row = {a: _encode(v) for a, v in zip(attnames, values, strict=True)}
                path = row.get("stored_path")
                if path and Path(path).is_file():
                    row["stored_sha256"] = hashlib.sha256(Path(path).read_bytes()).hexdigest()
                handle.write(json.dumps({"model": model._meta.label_lower, "row": row}) + "\n")


if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    import django

    django.setup()
    if sys.argv[1] == "build":
        offset_ids(100_000)
        build(sys.argv[2])
    elif sys.argv[1] == "offset":
        offset_ids(int(sys.argv[2]))
    elif sys.argv[1] == "dump":
        dump(Path(sys.argv[2]))
    else:
        raise SystemExit(f"unknown action {sys.argv[1]!r}")
