"""No GET request writes to the database, whatever state its job is in (a job whose worker
died is settled by the workers' sweeper, not by whoever looks at it)."""

from __future__ import annotations

import re
from datetime import timedelta

from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from inference.worlds import parse_world
from studio.models import ImportJob, JobStatus, Perturbation, SimulationJob, Step
from studio.services.worlds import save_world
from tests.support.branching import make_child, make_job, make_trajectory

WRITE = re.compile(r"^\s*(INSERT|UPDATE|DELETE|REPLACE|CREATE|DROP|ALTER)\b", re.I)


def test_every_page_of_a_project_only_reads(researcher_client, project, settings):
    settings.STUDIO_JOB_STALE_S = 30
    traj, root = make_trajectory(project)
    job = make_job(root, 1, n=2, status="running")
    child = make_child(root, 1, ["out"], job=job, status="running", name="future")
    make_child(root, 1, ["other"], job=job, status="running", sample_index=1, name="other")
    long_ago = timezone.now() - timedelta(minutes=10)
    SimulationJob.objects.filter(pk=job.pk).update(heartbeat_at=long_ago)  # a dead worker
    imp = ImportJob.objects.create(
        project=project, original_name="a.json", stored_path="/x", status=JobStatus.RUNNING
    )
    ImportJob.objects.filter(pk=imp.pk).update(heartbeat_at=long_ago)
    step = Step.objects.filter(branch=child).first()
    perturbation = Perturbation.objects.create(project=project, name="Cut", kind="truncated")
    world = save_world(
        project, parse_world({"name": "W", "domain": "terminal", "files": {"/a": "b"}})
    ).world
    from studio.models import EvaluationRun, EvaluationSample

    run = EvaluationRun.objects.create(
        project=project, name="E", world_kind="retrieval", judge_model="j",
        judge_base_url="http://127.0.0.1:9/v1", status=JobStatus.RUNNING,
    )  # fmt: skip
    EvaluationRun.objects.filter(pk=run.pk).update(heartbeat_at=long_ago)  # a dead worker
    sample = EvaluationSample.objects.create(
        run=run, domain="terminal", trajectory=traj, step_index=1, key=f"{traj.pk}:1"
    )
    from studio.models import BehaviourSearch
    from studio.services.behaviour import save_clusters

    search = BehaviourSearch.objects.create(
        project=project, description="the agent deletes files", max_candidates=10,
        judge_model="j", judge_base_url="http://127.0.0.1:9/v1", status=JobStatus.RUNNING,
        candidate_ids=[step.pk], candidates=1, phase="labelling",
    )  # fmt: skip
    BehaviourSearch.objects.filter(pk=search.pk).update(heartbeat_at=long_ago)  # a dead worker
    save_clusters(search, [("deletes", True, [])])
    cluster = search.clusters.get()
    urls = [
        reverse("behaviour_list", args=[project.pk]),
        reverse("behaviour_new", args=[project.pk]),
        reverse("behaviour_job", args=[search.pk]),
        reverse("behaviour_job", args=[search.pk]) + f"?match=all&cluster={cluster.pk}&page=2",
        reverse("behaviour_job", args=[search.pk]) + "?match=no&cluster=none",
        reverse("evaluation_list", args=[project.pk]),
        reverse("evaluation_new", args=[project.pk]),
        reverse("evaluation_run", args=[run.pk]),
        reverse("evaluation_samples", args=[run.pk]),
        reverse("evaluation_sample", args=[sample.pk]),
        reverse("leaderboard", args=[project.pk]),
        reverse("leaderboard", args=[project.pk]) + "?format=csv",
        reverse("project_list"),
        reverse("library", args=[project.pk]),
        reverse("search", args=[project.pk]),
        reverse("search", args=[project.pk]) + "?q=output&sort=newest",
        reverse("search", args=[project.pk]) + "?q=re:/out/&page=2",
        reverse("project_members", args=[project.pk]),
        reverse("trajectory", args=[traj.pk]) + f"?branch={child.pk}",
        reverse("trajectory_steps", args=[traj.pk]) + "?start=0",
        reverse("step_observation", args=[step.pk]),
        reverse("step_raw_output", args=[step.pk]),
        reverse("import_upload", args=[project.pk]),
        reverse("import_job", args=[imp.pk]),
        reverse("branch_fork", args=[root.pk, 2]),
        reverse("simulation_job", args=[job.pk]),
        reverse("branch_tree", args=[traj.pk]),
        reverse("branch_compare", args=[traj.pk]) + f"?b={root.pk}&b={child.pk}",
        reverse("branch_delete", args=[child.pk]),
        reverse("branch_export", args=[child.pk]),
        reverse("perturbation_list", args=[project.pk]),
        reverse("perturbation_create", args=[project.pk]),
        reverse("perturbation_edit", args=[perturbation.pk]),
        reverse("library", args=[project.pk]) + "?perturbation=*",
        reverse("world_list", args=[project.pk]),
        reverse("world_create", args=[project.pk]),
        reverse("world_edit", args=[world.pk]),
        reverse("world_export", args=[world.pk]),
        reverse("playground", args=[root.pk]),
        reverse("playground", args=[root.pk]) + f"?job={job.pk}",
        reverse("playground_job", args=[job.pk]),
        reverse("gallery", args=[project.pk]),
        reverse("gallery_card", args=[project.pk, "terminal-permission"]),
    ]
    for url in urls:
        for headers in ({}, {"HX-Request": "true"}):
            with CaptureQueriesContext(connection) as queries:
                response = researcher_client.get(url, headers=headers)
            assert response.status_code in (200, 286, 400, 409), (url, response.status_code)
            writes = [q["sql"] for q in queries if WRITE.match(q["sql"])]
            assert writes == [], (url, writes)
    job.refresh_from_db()
    imp.refresh_from_db()
    assert job.status == imp.status == JobStatus.RUNNING  # shown as silent, not settled
    run.refresh_from_db()
    assert run.status == JobStatus.RUNNING
    search.refresh_from_db()
    assert search.status == JobStatus.RUNNING
