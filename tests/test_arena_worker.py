"""An arena end to end on a real Celery worker: two world models on the fake OpenAI-compatible
server and the retrieval baseline, the same server as the judge; the form starts it, the
worker runs the simulations, the judge job and the pairwise comparisons without anyone
polling, and the page reads the scores and win rates."""

from __future__ import annotations

import json

import pytest
from django.urls import reverse

from studio.models import ArenaPair, ArenaRun, JobStatus, JudgeJob, SimulationJob, StepJudgement
from studio.services.endpoints import EndpointData, save_endpoint
from tests.support.branching import make_trajectory
from tests.support.fake_openai import fake_openai_server
from tests.support.worker import wait_for

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]

DIMS = ("format", "factuality", "consistency", "realism", "quality")


def responder(body, index):
    """world-a answers like the recorded step, world-b does not; the judge scores world-a's
    futures 5 and the others 2, and prefers world-a's in every pair (else the first shown)."""
    model = body["model"]
    if model == "world-a":
        return "<predicted_observation>3 passed in 0.10s</predicted_observation>"
    if model == "world-b":
        return "<predicted_observation>ERROR: file not found: tests</predicted_observation>"
    system, user = body["messages"][0]["content"], body["messages"][1]["content"]
    if "You compare two world models" in system:
        first = user.split("## Prediction A\n")[1].split("\n\n## Prediction B")[0]
        second = user.split("## Prediction B\n")[1]
        winner = "A" if "3 passed in 0.10s" in first else "B" if "0.10s" in second else "A"
        block = json.dumps({"winner": winner, "reason": "matches the test run"})
        return f"<final_verdict>\n```json\n{block}\n```\n</final_verdict>"
    prediction = user.split("## Predicted observation (world model)\n")[1]
    score = 5 if "3 passed in 0.10s" in prediction else 2
    dims = DIMS if "## Reference observation" in user else ("consistency", "realism")
    block = {"scores": dict.fromkeys(dims, score), "strengths": [], "weaknesses": []}
    return f"<final_evaluation>\n```json\n{json.dumps(block)}\n```\n</final_evaluation>"


def test_an_arena_runs_end_to_end_on_a_worker(
    researcher_client, project, world_endpoints, default_worker
):
    traj, root = make_trajectory(project)
    with fake_openai_server(responder) as srv:
        made = {}
        for name, role, model in (
            ("model-a", "world", "world-a"),
            ("model-b", "world", "world-b"),
            ("judge", "judge", "judge-m"),
        ):
            data = EndpointData(name=name, role=role, kind="openai", base_url=srv, model=model)
            made[name] = save_endpoint(project, data).endpoint
        models = [made["model-a"], made["model-b"], world_endpoints["retrieval"]]
        page = researcher_client.post(
            reverse("arena_new", args=[root.pk, 2]),
            {
                "world_models": [m.pk for m in models],
                "n": 2,
                "temperature": 0.5,
                "top_p": 0.9,
                "max_tokens": 64,
                "seed": 41,
                "judge": made["judge"].pk,
                "judge_temperature": 0.0,
                "judge_max_tokens": 256,
            },
        )
        arena = ArenaRun.objects.get()
        assert page.status_code == 302 and page["Location"] == reverse(
            "arena_page", args=[arena.pk]
        )
        done = wait_for(
            lambda: ArenaRun.objects.filter(pk=arena.pk).exclude(status="queued")
            .exclude(status="running").first(),
            timeout=120,
        )  # fmt: skip
        asked = list(srv.requests)
    assert done.status == JobStatus.SUCCEEDED, done.error
    assert done.phase == "done" and done.progress == 1.0
    jobs = list(SimulationJob.objects.filter(arena=arena))
    assert len(jobs) == 3 and all(j.status == JobStatus.SUCCEEDED for j in jobs)
    worlds = [b for b in asked if b["model"] in ("world-a", "world-b")]
    assert {b["model"] for b in worlds} == {"world-a", "world-b"}
    assert all(b.get("seed") == 41 and b["temperature"] == 0.5 for b in worlds)
    judge_job = JudgeJob.objects.get(pk=done.judge_job_id)
    assert judge_job.status == JobStatus.SUCCEEDED and judge_job.steps_judged == 6
    assert StepJudgement.objects.filter(job=judge_job, ok=True).count() == 6
    # 3 pairs of models x 2 seeds
    assert (done.pairs_total, done.pairs_judged, done.pairs_failed) == (6, 6, 0)
    a_job = next(j for j in jobs if j.model == "world-a")
    won = ArenaPair.objects.filter(arena=arena, job_a=a_job).values_list("winner", flat=True)
    assert set(won) == {"a"}  # model a was picked first: it is "a" in each of its pairs

    html = researcher_client.get(reverse("arena_page", args=[arena.pk])).content.decode()
    assert "model-a · world-a" in html and "model-b · world-b" in html
    assert "retrieval baseline" in html
    assert "100% (95% CI 51–100%, n 4)" in html  # model a won its 4 pairs
    assert "3 passed in 0.10s" in html and "ERROR: file not found" in html
    listing = researcher_client.get(reverse("arena_list", args=[project.pk])).content.decode()
    assert "Over the 1 finished arena" in listing
