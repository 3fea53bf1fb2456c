"""The world-model arena, in process: the pairwise judge's prompt and verdict parser, the
win-rate and interval arithmetic (ties half), the form's refusals, one job per model with the
same fork, action, sampling and seed (or none at all), the judging and comparing phases
against the fake OpenAI-compatible judge, the arena page, and the project's roll-up."""

from __future__ import annotations

import json
import math

import pytest
from django.urls import reverse

from inference.judge import (
    JudgementError,
    build_pairwise_messages,
    parse_pair_verdict,
)
from inference.simulation.request import ForkFacts, InvalidRequest
from studio.forms.arena import ArenaForm
from studio.jobs import arena as worker
from studio.models import (
    ArenaPair,
    ArenaRun,
    Branch,
    JobStatus,
    JudgeJob,
    JudgeTarget,
    SimulationJob,
    Step,
    StepJudgement,
)
from studio.models.trajectories import BranchStatus
from studio.services import arena as service
from studio.services.endpoints import EndpointData, save_endpoint
from studio.services.judging import judged_steps
from tests.support.branching import make_trajectory
from tests.support.fake_openai import fake_openai_server

DIMS = ("format", "factuality", "consistency", "realism", "quality")


def endpoint(project, name, role, model, base_url="http://127.0.0.1:9/v1", kind="openai"):
    found = project.endpoints.filter(name=name).first()
    if found is not None:
        return found
    data = EndpointData(name=name, role=role, kind=kind, base_url=base_url, model=model)
    return save_endpoint(project, data).endpoint


def verdict(winner: str, reason: str = "closer to the reference") -> str:
    block = json.dumps({"winner": winner, "reason": reason})
    return f"They differ.\n<final_verdict>\n```json\n{block}\n```\n</final_verdict>"


def form_for(branch, index, data):
    steps = branch.all_steps()
    fork = ForkFacts(
        step_count=steps.count(),
        recorded_action=steps.get(index=index).action,
        domain=branch.trajectory.domain,
    )
    return ArenaForm(data, branch=branch, fork_index=index, fork=fork)


def form_data(models, judge, **extra):
    return {
        "world_models": [m.pk for m in models],
        "n": 2,
        "temperature": 0.5,
        "top_p": 0.9,
        "max_tokens": 64,
        "seed": 41,
        "judge": judge.pk if judge else "",
        "judge_temperature": 0.0,
        "judge_max_tokens": 128,
        **extra,
    }


# ---- the pairwise judge ---------------------------------------------------------------------


def test_the_pairwise_verdict_is_read_in_its_forms_and_a_bad_one_is_named():
    assert parse_pair_verdict(verdict("A")).winner == "A"
    assert parse_pair_verdict(verdict("b", "B lists the files")).reason == "B lists the files"
    assert parse_pair_verdict(verdict("Prediction B")).winner == "B"
    assert parse_pair_verdict(verdict("TIE")).winner == "tie"
    # no closing tag, no fence, near-JSON
    assert parse_pair_verdict('<final_verdict>{"winner": "A", "reason": "x",').winner == "A"
    # the last block counts (the judge may quote the format first)
    two = verdict("A") + "\n" + verdict("B")
    assert parse_pair_verdict(two).winner == "B"
    with pytest.raises(JudgementError, match='no "winner"'):
        parse_pair_verdict('<final_verdict>{"reason": "both fine"}</final_verdict>')
    with pytest.raises(JudgementError, match='must be "A", "B" or "tie"'):
        parse_pair_verdict(verdict("both"))
    with pytest.raises(JudgementError, match="no JSON object"):
        parse_pair_verdict("I prefer A.")


def test_the_pairwise_prompt_shows_the_reference_only_when_there_is_one():
    row = {
        "prompt": ["turn 1: ls", "turn 2: cat README.md"],
        "response": ["README.md setup.py", "# Demo"],
        "turn_idx": 2,
        "no_reference": False,
    }
    system, user = (m["content"] for m in build_pairwise_messages(row, "first one", "second"))
    assert "the reference" in system and "## Reference observation" in user
    assert user.index("## Prediction A\nfirst one") < user.index("## Prediction B\nsecond")
    assert "turn 1: ls\n\nREADME.md setup.py" in user and "turn 2: cat README.md" in user
    _, user = (
        m["content"] for m in build_pairwise_messages({**row, "no_reference": True}, "", "x")
    )
    assert "Reference observation" not in user and "# Demo" not in user
    assert "## Prediction A\nNo output" in user  # an empty prediction is said to be empty


# ---- win rates ---------------------------------------------------------------------------


def test_wilson_intervals_and_ties_counted_half():
    low, high = service.wilson(8, 10)
    assert math.isclose(low, 0.4902, abs_tol=1e-4) and math.isclose(high, 0.9433, abs_tol=1e-4)
    assert service.wilson(0, 0) is None
    low, high = service.wilson(0, 5)
    assert low == 0.0 and 0.43 < high < 0.44
    rate = service.WinRate()
    for outcome in ("win", "tie", "tie", "loss", "failed"):
        rate.add(outcome)
    assert (rate.n, rate.rate, rate.failed) == (4, 0.5, 1)  # failed: in no rate
    assert rate.interval == service.wilson(2.0, 4)
    from studio.presenters.arena import rate_text

    assert rate_text(rate) == "50% (95% CI 15–85%, n 4)"
    assert rate_text(service.WinRate()) == "–"


# ---- the form ------------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_form_says_what_is_wrong(project, world_endpoints):
    traj, root = make_trajectory(project)
    a = endpoint(project, "model-a", "world", "world-a")
    baseline = world_endpoints["retrieval"]
    judge = endpoint(project, "judge", "judge", "judge-m")
    form = form_for(root, 2, form_data([a], judge))
    assert not form.is_valid()
    assert "two or more world models; 1 ticked" in form.errors["world_models"][0]
    form = form_for(root, 2, form_data([a, baseline], judge, temperature=9, n=0))
    assert not form.is_valid()
    assert "temperature" in form.errors and "n" in form.errors
    assert len(form.errors["temperature"]) == 1  # one message, not one per model
    # a blank seed is drawn; a blank action is the recorded one
    form = form_for(root, 2, form_data([a, baseline], judge, seed=""))
    assert form.is_valid(), form.errors
    data = form.data_object()
    assert 0 <= data.seed and {r.action for _, r in data.models} == {"python -m pytest -q"}
    assert not any(r.edited for _, r in data.models)


@pytest.mark.django_db
def test_without_a_judge_the_form_says_how_to_add_one(project, world_endpoints, researcher_client):
    traj, root = make_trajectory(project)
    a = endpoint(project, "model-a", "world", "world-a")
    form = form_for(root, 1, form_data([a, world_endpoints["retrieval"]], None))
    assert not form.is_valid()
    assert "An admin adds one on the Models page" in " ".join(form.errors["judge"])
    page = researcher_client.get(reverse("arena_new", args=[root.pk, 1]))
    assert page.status_code == 200 and 'id="no-judge"' in page.content.decode()
    assert 'id="too-few-models"' not in page.content.decode()  # two world models here


@pytest.mark.django_db
def test_with_one_world_model_the_form_says_an_arena_needs_another(project, researcher_client):
    traj, root = make_trajectory(project)
    assert project.endpoints.filter(role="world").count() == 1  # the baseline alone
    html = researcher_client.get(reverse("arena_new", args=[root.pk, 1])).content.decode()
    assert 'id="too-few-models"' in html and "This project has 1 world model," in html
    assert "An admin adds world models" in html  # a researcher cannot add one


@pytest.mark.django_db
def test_a_trajectory_started_in_a_world_refuses_the_baseline(project, world_endpoints):
    from studio.services.worlds import import_world, start_trajectory

    admin = project.users["admin"]
    version = import_world(
        project,
        {"name": "Lyon", "domain": "mcp", "description": "weather of Lyon", "tools": []},
        user=admin,
    ).version
    traj = start_trajectory(version, "Is it raining in Lyon?", user=admin)
    root = traj.root_branch
    Step.objects.create(branch=root, index=0, action='{"name": "w"}', observation="{}")
    a = endpoint(project, "model-a", "world", "world-a")
    judge = endpoint(project, "judge", "judge", "judge-m")
    form = form_for(root, 0, form_data([a, world_endpoints["retrieval"]], judge))
    assert not form.is_valid()
    message = form.errors["world_models"][0]
    assert "retrieval baseline" in message and "'Lyon'" in message and "never reads" in message


# ---- starting one ----------------------------------------------------------------------


@pytest.mark.django_db
def test_one_job_per_model_with_the_same_fork_action_sampling_and_seed(
    project, world_endpoints, django_capture_on_commit_callbacks
):
    traj, root = make_trajectory(project)
    a = endpoint(project, "model-a", "world", "world-a")
    b = endpoint(project, "model-b", "world", "world-b")
    judge = endpoint(project, "judge", "judge", "judge-m")
    form = form_for(
        root, 2, form_data([a, b, world_endpoints["retrieval"]], judge, action="ls -la")
    )
    assert form.is_valid(), form.errors
    from studio.tasks import enqueue_arena

    with django_capture_on_commit_callbacks() as callbacks:
        arena = service.start_arena(project.users["researcher"], form.data_object())
        enqueue_arena(arena)
    assert len(callbacks) == 4  # three simulations and the arena's first look
    jobs = list(SimulationJob.objects.filter(arena=arena).order_by("pk"))
    assert sorted(j.world_name for j in jobs) == ["Retrieval baseline", "model-a", "model-b"]
    assert {(j.fork_index, j.action, j.n, j.mode) for j in jobs} == {(2, "ls -la", 2, "next")}
    assert all(
        (j.params["seed"], j.params["temperature"], j.params["top_p"], j.params["max_tokens"])
        == (41, 0.5, 0.9, 64)
        for j in jobs
    )
    assert (arena.seed, arena.n, arena.edited, arena.phase) == (41, 2, True, "simulating")
    assert arena.judge_model == "judge-m" and arena.judge_params["max_tokens"] == 128
    assert Branch.objects.filter(job__arena=arena).count() == 6


@pytest.mark.django_db
def test_past_the_project_limit_nothing_is_made(project, world_endpoints, settings):
    settings.STUDIO_MAX_ACTIVE_JOBS = 1
    traj, root = make_trajectory(project)
    a = endpoint(project, "model-a", "world", "world-a")
    judge = endpoint(project, "judge", "judge", "judge-m")
    form = form_for(root, 2, form_data([a, world_endpoints["retrieval"]], judge))
    assert form.is_valid(), form.errors
    with pytest.raises(InvalidRequest, match="the limit is 1 at once"):
        service.start_arena(None, form.data_object())
    assert not ArenaRun.objects.exists() and not SimulationJob.objects.exists()


# ---- judging and comparing, in process ------------------------------------------------------


@pytest.fixture
def no_messages(monkeypatch):
    """These phases run in this process: no message goes to a worker (a session's shared
    worker may be running, and would take the judge job)."""
    monkeypatch.setattr("studio.tasks._send", lambda *args, **kwargs: False)


def finished_arena(project, root, models, *, n=2, observations=None, judge_url=None):
    """An arena whose simulations have ended as a worker leaves them: futures at step 2."""
    judge = endpoint(
        project, "judge", "judge", "judge-m", **({"base_url": judge_url} if judge_url else {})
    )
    arena = ArenaRun.objects.create(
        project=project, trajectory=root.trajectory, branch=root, fork_index=2,
        action="python -m pytest -q", n=n, seed=7, params={"temperature": 0.5},
        judge_endpoint=judge, judge_model="judge-m", judge_base_url=judge.base_url,
        judge_params={"temperature": 0.0, "max_tokens": 64, "concurrency": 2}, phase="simulating",
    )  # fmt: skip
    for number, (name, model) in enumerate(models):
        job = SimulationJob.objects.create(
            trajectory=root.trajectory, branch=root, fork_index=2, action="python -m pytest -q",
            n=n, status=JobStatus.SUCCEEDED, backend="openai", model=model, world_name=name,
            params={"seed": 7, "temperature": 0.5}, arena=arena,
        )  # fmt: skip
        for i in range(n):
            child = Branch.objects.create(
                trajectory=root.trajectory, parent=root, fork_index=2, name=f"{name} #{i}",
                origin="simulated", status=BranchStatus.SUCCEEDED, job=job, sample_index=i,
            )  # fmt: skip
            text = (observations or {}).get((number, i), f"{model} says {i}")
            if text is None:
                Branch.objects.filter(pk=child.pk).update(status=BranchStatus.FAILED)
                continue
            Step.objects.create(
                branch=child, index=2, action="python -m pytest -q", observation=text,
                provenance="replayed", observation_source="simulated",
            )  # fmt: skip
    return arena


def judge_responder(body, index):
    """Pointwise: 4 everywhere against a reference. Pairwise: the prediction from world-a
    wins, except at sample 1 where model b's says "tie"."""
    system, user = body["messages"][0]["content"], body["messages"][1]["content"]
    if "You compare two world models" in system:
        first = user.split("## Prediction A\n")[1].split("\n\n## Prediction B")[0]
        second = user.split("## Prediction B\n")[1]
        if "tie" in first + second:
            return verdict("tie")
        return verdict("A" if "world-a" in first else "B")
    scores = dict.fromkeys(DIMS, 4) if "## Reference observation" in user else {"realism": 2}
    block = {"scores": scores, "strengths": [], "weaknesses": []}
    return f"<final_evaluation>\n```json\n{json.dumps(block)}\n```\n</final_evaluation>"


@pytest.mark.django_db(transaction=True)
def test_the_judging_and_comparing_phases_score_every_future_and_judge_every_pair(
    project, no_messages
):
    from studio.jobs.judging import run_judge_job

    traj, root = make_trajectory(project)
    models = [("model-a", "world-a"), ("model-b", "world-b"), ("model-c", "world-c")]
    observations = {(1, 1): "world-b tie 1", (2, 1): None}  # model c's second future failed
    with fake_openai_server(judge_responder) as srv:
        arena = finished_arena(
            project, root, models, observations=observations, judge_url=srv.base_url
        )
        worker.advance_arena(arena.pk)  # simulations ended: the judge job of its futures
        arena.refresh_from_db()
        assert arena.phase == "judging" and arena.status == JobStatus.QUEUED
        judge_job = JudgeJob.objects.get(pk=arena.judge_job_id)
        assert judge_job.target == JudgeTarget.ARENA and judge_job.arena_id == arena.pk
        # every future at the fork, of every model, and nothing else
        assert judged_steps(judge_job).count() == 5
        worker.advance_arena(arena.pk)  # the judge job has not run: nothing changes
        assert ArenaRun.objects.get(pk=arena.pk).phase == "judging"
        run_judge_job(judge_job.pk, "")
        worker.advance_arena(arena.pk, "")  # judged: compare
        asked = [b for b in srv.requests if "You compare" in b["messages"][0]["content"]]
    arena.refresh_from_db()
    assert arena.status == JobStatus.SUCCEEDED and arena.phase == "done", arena.error
    # a vs b at 0 and 1, a vs c at 0, b vs c at 0 (c has no future at 1)
    assert (arena.pairs_total, arena.pairs_judged, arena.pairs_failed) == (4, 4, 0)
    assert len(asked) == 4 and all(b["temperature"] == 0.0 for b in asked)
    pairs = list(ArenaPair.objects.filter(arena=arena).order_by("id"))
    assert sorted(p.shown_first for p in pairs) == ["a", "a", "b", "b"]  # alternating
    by = {(p.job_a.world_name, p.job_b.world_name, p.sample_index): p.winner for p in pairs}
    assert set(by) == {
        ("model-a", "model-b", 0), ("model-a", "model-b", 1), ("model-a", "model-c", 0),
        ("model-b", "model-c", 0),
    }  # fmt: skip
    assert by[("model-a", "model-b", 0)] == "a" and by[("model-a", "model-c", 0)] == "a"
    assert by[("model-a", "model-b", 1)] == "tie"
    # b vs c: neither is world-a, so the judge said B: the one shown second
    bc = next(
        p for p in pairs if p.job_a.world_name == "model-b" and p.job_b.world_name == "model-c"
    )
    assert bc.winner == ("b" if bc.shown_first == "a" else "a")
    assert all(p.reference_id is not None for p in pairs)  # the recorded action: a reference

    found = service.arena_results(arena)
    by_model = {m.identity.name: m for m in found.models}
    a = by_model["model-a"]
    assert a.scores["factuality"].value == 4.0 and a.scores["factuality"].n == 2
    assert (a.overall.wins, a.overall.ties, a.overall.n) == (2, 1, 3)
    assert len(by_model["model-c"].steps) == 1
    ab = next(p for p in found.pairs if p.first is a and p.second.identity.name == "model-b")
    assert (ab.rate.wins, ab.rate.ties, ab.rate.rate) == (1, 1, 0.75)


@pytest.mark.django_db(transaction=True)
def test_a_failed_pair_is_recorded_with_its_error_and_counts_for_no_one(project, no_messages):
    traj, root = make_trajectory(project)

    def answer(body, index):
        user = body["messages"][1]["content"]
        return "no verdict here" if "says 1" in user else verdict("A")

    with fake_openai_server(answer) as srv:
        models = [("model-a", "world-a"), ("model-b", "world-b")]
        arena = finished_arena(project, root, models, judge_url=srv.base_url)
        ArenaRun.objects.filter(pk=arena.pk).update(phase="judging")
        worker.advance_arena(arena.pk)
    arena.refresh_from_db()
    assert arena.status == JobStatus.SUCCEEDED
    assert (arena.pairs_total, arena.pairs_judged, arena.pairs_failed) == (2, 1, 1)
    failed = ArenaPair.objects.get(arena=arena, ok=False)
    assert failed.winner == "" and "no JSON object" in failed.error
    found = service.arena_results(arena)
    rate = found.pairs[0].rate
    assert (rate.n, rate.failed) == (1, 1)


@pytest.mark.django_db
def test_every_simulation_failed_ends_the_arena_and_says_why(project, no_messages):
    traj, root = make_trajectory(project)
    arena = finished_arena(
        project, root, [("model-a", "world-a"), ("model-b", "world-b")],
        observations={(0, 0): None, (0, 1): None, (1, 0): None, (1, 1): None},
    )  # fmt: skip
    SimulationJob.objects.filter(arena=arena).update(status=JobStatus.FAILED, error="server down")
    worker.advance_arena(arena.pk)
    arena.refresh_from_db()
    assert (
        arena.status == JobStatus.FAILED and "No model produced a future at step 2" in arena.error
    )
    assert "model-a: server down" in arena.error and not JudgeJob.objects.exists()


@pytest.mark.django_db
def test_cancelling_an_arena_cancels_its_jobs(project, researcher_client):
    traj, root = make_trajectory(project)
    arena = finished_arena(project, root, [("model-a", "world-a"), ("model-b", "world-b")])
    SimulationJob.objects.filter(arena=arena).update(status=JobStatus.QUEUED)
    page = researcher_client.post(reverse("arena_cancel", args=[arena.pk]))
    assert page.status_code == 302
    arena.refresh_from_db()
    assert arena.status == JobStatus.CANCELLED
    assert set(SimulationJob.objects.filter(arena=arena).values_list("status", flat=True)) == {
        JobStatus.CANCELLED
    }


# ---- pages and the roll-up ----------------------------------------------------------------


def judged_arena(project, root, winners, models=(("model-a", "world-a"), ("model-b", "world-b"))):
    """A finished arena with pointwise scores and pairs: `winners` one per sample index."""
    arena = finished_arena(project, root, list(models), n=len(winners))
    judge_job = JudgeJob.objects.create(
        project=project, target="arena", arena=arena, judge_model="judge-m", status="succeeded"
    )
    jobs = list(SimulationJob.objects.filter(arena=arena).order_by("pk"))
    steps = {
        (s.branch.job_id, s.branch.sample_index): s
        for s in Step.objects.filter(branch__job__arena=arena).select_related("branch")
    }
    for (job_id, _), step in steps.items():
        score = 5 if job_id == jobs[0].pk else 3
        StepJudgement.objects.create(
            job=judge_job, step=step, judge_model="judge-m", ok=True,
            scores={"consistency": score, "realism": score}, total_score=score,
        )  # fmt: skip
    for i, winner in enumerate(winners):
        ArenaPair.objects.create(
            arena=arena, job_a=jobs[0], job_b=jobs[1], step_a=steps[(jobs[0].pk, i)],
            step_b=steps[(jobs[1].pk, i)], sample_index=i, winner=winner, ok=winner != "",
            error="" if winner else "judge down",
        )  # fmt: skip
    ArenaRun.objects.filter(pk=arena.pk).update(
        status="succeeded", phase="done", judge_job=judge_job, progress=1.0,
        pairs_total=len(winners), pairs_judged=sum(1 for w in winners if w),
        pairs_failed=sum(1 for w in winners if not w),
    )  # fmt: skip
    arena.refresh_from_db()
    return arena


@pytest.mark.django_db
def test_the_arena_page_shows_scores_win_rates_and_the_futures_side_by_side(
    project, researcher_client
):
    traj, root = make_trajectory(project)
    arena = judged_arena(project, root, ["a", "a", "tie", ""])
    html = researcher_client.get(reverse("arena_page", args=[arena.pk])).content.decode()
    assert "model-a · world-a" in html and "model-b · world-b" in html
    assert "a tie counts as half a win" in html
    # a: 2 wins + 1 tie of 3 judged; the failed pair counts for no one
    assert "83% (95% CI" in html and "n 3)" in html and "17% (95% CI" in html
    assert '5.00 <span class="muted small-text">(n 4)' in html
    assert "world-a says 0" in html and "world-b says 3" in html
    assert "not judged" in html and "judge down" in html
    assert "4 of 4 pairs judged" not in html and "3 of 4 pairs judged, 1 failed" in html
    # htmx: the live part, and polling stops once it ended
    part = researcher_client.get(reverse("arena_page", args=[arena.pk]), HTTP_HX_REQUEST="true")
    assert part.status_code == 286 and 'id="arena-models"' in part.content.decode()
    # the step's actions offer it
    page = researcher_client.get(reverse("trajectory", args=[traj.pk])).content.decode()
    assert reverse("arena_new", args=[root.pk, 2]) in page


@pytest.mark.django_db
def test_the_project_rollup_pools_every_finished_arena_per_model(project, researcher_client):
    traj, root = make_trajectory(project)
    judged_arena(project, root, ["a", "b"])
    other_traj, other_root = make_trajectory(project, key="k2", title="Second")
    judged_arena(project, other_root, ["a", "tie", "a"])
    running = judged_arena(project, other_root, ["b", "b"])
    ArenaRun.objects.filter(pk=running.pk).update(status="running")  # not counted
    rows = service.rollup(project)
    assert [r.identity.name for r in rows] == ["model-a", "model-b"]
    a = rows[0]
    assert (a.overall.wins, a.overall.losses, a.overall.ties) == (3, 1, 1)
    assert (len(a.arenas), len(a.forks), a.futures) == (2, 2, 5)
    assert a.scores["consistency"].value == 5.0 and a.scores["consistency"].n == 5
    html = researcher_client.get(
        reverse("arena_leaderboard", args=[project.pk]), HTTP_HX_REQUEST="true"
    ).content.decode()
    assert "Over the 2 finished arenas" in html and "70% (95% CI" in html
    assert "<html" not in html  # a fragment for the AgentWorldBench leaderboard's page
    board = researcher_client.get(reverse("leaderboard", args=[project.pk])).content.decode()
    assert reverse("arena_leaderboard", args=[project.pk]) in board
    listing = researcher_client.get(reverse("arena_list", args=[project.pk])).content.decode()
    assert 'id="arena-board"' in listing and 'id="arena-list"' in listing


@pytest.mark.django_db
def test_no_arena_page_writes_on_get(project, researcher_client):
    import re

    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    write = re.compile(r"^\s*(INSERT|UPDATE|DELETE|REPLACE|CREATE|DROP|ALTER)\b", re.I)
    traj, root = make_trajectory(project)
    finished = judged_arena(project, root, ["a", "tie"])
    waiting = finished_arena(project, root, [("model-a", "world-a"), ("model-b", "world-b")])
    urls = [
        reverse("arena_new", args=[root.pk, 2]),
        reverse("arena_page", args=[finished.pk]),
        reverse("arena_page", args=[waiting.pk]),
        reverse("arena_list", args=[project.pk]),
        reverse("arena_leaderboard", args=[project.pk]),
        reverse("leaderboard", args=[project.pk]),
    ]
    for url in urls:
        for headers in ({}, {"HX-Request": "true"}):
            with CaptureQueriesContext(connection) as queries:
                response = researcher_client.get(url, headers=headers)
            assert response.status_code in (200, 286), (url, response.status_code)
            assert [q["sql"] for q in queries if write.match(q["sql"])] == [], url
    # an annotator reads arenas, and may not start one
    from django.test import Client

    annotator = Client()
    annotator.force_login(project.users["annotator"])
    assert annotator.get(reverse("arena_page", args=[finished.pk])).status_code == 200
    assert annotator.get(reverse("arena_new", args=[root.pk, 2])).status_code == 403
    outsider = Client()
    outsider.force_login(project.outsider)
    assert outsider.get(reverse("arena_page", args=[finished.pk])).status_code in (403, 404)


@pytest.mark.django_db
def test_a_comparing_arena_whose_worker_died_is_failed_by_the_sweeper(project, settings):
    from datetime import timedelta

    from django.utils import timezone

    from studio.jobs.sweeper import reap_stale_jobs

    settings.STUDIO_JOB_STALE_S = 4
    traj, root = make_trajectory(project)
    arena = finished_arena(project, root, [("model-a", "world-a"), ("model-b", "world-b")])
    long_ago = timezone.now() - timedelta(minutes=5)
    ArenaRun.objects.filter(pk=arena.pk).update(
        status=JobStatus.RUNNING, phase="comparing", claimed_by="m", started_at=long_ago,
        heartbeat_at=long_ago,
    )  # fmt: skip
    assert reap_stale_jobs() == 1
    arena.refresh_from_db()
    assert arena.status == JobStatus.FAILED and arena.phase == "failed"
    assert "stopped without finishing" in arena.error and "start another arena" in arena.error


@pytest.mark.django_db
def test_the_phases_say_where_an_arena_stopped(project):
    from django.utils import timezone

    from studio.presenters.arena import phases

    traj, root = make_trajectory(project)
    arena = finished_arena(project, root, [("model-a", "world-a"), ("model-b", "world-b")])

    def states(**fields):
        ArenaRun.objects.filter(pk=arena.pk).update(**fields)
        arena.refresh_from_db()
        return [p["state"] for p in phases(arena, service.arena_results(arena))]

    assert states() == ["current", "waiting", "waiting"]
    assert states(status="failed", phase="failed") == ["failed", "waiting", "waiting"]
    judge_job = JudgeJob.objects.create(project=project, target="arena", arena=arena)
    assert states(judge_job=judge_job) == ["done", "failed", "waiting"]
    assert states(started_at=timezone.now()) == ["done", "done", "failed"]
    assert states(status="running", phase="cancelling") == ["done", "done", "current"]
    assert states(status="succeeded", phase="done") == ["done", "done", "done"]


@pytest.mark.django_db(transaction=True)
def test_comparing_out_of_time_hands_the_rest_to_the_next_look(project, no_messages, monkeypatch):
    traj, root = make_trajectory(project)
    with fake_openai_server(lambda body, index: verdict("A")) as srv:
        models = [("model-a", "world-a"), ("model-b", "world-b")]
        arena = finished_arena(project, root, models, judge_url=srv.base_url)
        ArenaRun.objects.filter(pk=arena.pk).update(phase="judging")
        monkeypatch.setattr("studio.jobs.evaluations.task_budget_s", lambda: -1.0)
        worker.advance_arena(arena.pk)
        arena.refresh_from_db()
        assert (arena.status, arena.phase, arena.pairs_judged) == ("queued", "judging", 0)
        monkeypatch.setattr("studio.jobs.evaluations.task_budget_s", lambda: 600.0)
        worker.advance_arena(arena.pk)
    arena.refresh_from_db()
    assert arena.status == JobStatus.SUCCEEDED and (arena.pairs_total, arena.pairs_judged) == (2, 2)
    assert arena.attempts == 2  # claimed once per look that compared
