"""World-model evaluations in the studio: a run made from the form, answered by real workers
and Redis against the fake OpenAI-compatible server (world model and judge), its figures as
the reference computes them, the leaderboard with the published figures and its exports, the
drill-down to a sample and to the same sample of another run, and Resume after a killed
worker, which loses no finished sample."""

from __future__ import annotations

import json
import os
import signal
import threading

import pytest
from django.urls import reverse

from studio.models import EvaluationRun, EvaluationSample, JobStatus
from studio.services.endpoints import EndpointData, save_endpoint
from tests.support.fake_openai import fake_openai_server
from tests.support.jobs import TERMINAL_STEPS, make_trajectory
from tests.support.worker import running_worker, wait_for

DIMS = ("format", "factuality", "consistency", "realism", "quality")


def judge_or_world(scores_by_action: dict[str, list[int]]):
    """One fake server for both models: the judge (its system prompt says so) scores by the
    action it sees; the world model answers with a prediction."""

    def respond(body, index):
        system = body["messages"][0]["content"] if body["messages"] else ""
        if system.startswith("You grade a world model"):
            user = body["messages"][1]["content"]
            for action, scores in scores_by_action.items():
                if action in user.split("## Current turn", 1)[1].split("## Reference", 1)[0]:
                    block = {"scores": dict(zip(DIMS, scores, strict=True)),
                             "strengths": [f"shape of {action}"], "weaknesses": ["values"]}  # fmt: skip
                    return f"<final_evaluation>\n```json\n{json.dumps(block)}\n```\n</final_evaluation>"
            return "no idea"
        return "<think>predicting</think><predicted_observation>predicted output</predicted_observation>"

    return respond


def endpoints(project, base_url: str) -> tuple:
    world = save_endpoint(
        project,
        EndpointData(name="world-a", role="world", kind="openai", base_url=base_url, model="wm-a"),
    ).endpoint
    judge = save_endpoint(
        project,
        EndpointData(name="judge", role="judge", kind="openai", base_url=base_url, model="jm"),
    ).endpoint
    return world, judge


def form(world, judge, name="run A", **extra) -> dict:
    return {
        "name": name, "world": world.pk, "judge": judge.pk, "source": "recorded",
        "limit_per_domain": 50, "temperature": 0.6, "max_tokens": 256, "judge_temperature": 0.6,
        "judge_max_tokens": 256, "concurrency": 2, **extra,
    }  # fmt: skip


SCORES = {a: [5, 4, 4, 5, 4] for a, _ in TERMINAL_STEPS}
SCORES[TERMINAL_STEPS[0][0]] = [1, 1, 1, 1, 1]


@pytest.mark.django_db(transaction=True)
@pytest.mark.worker
def test_an_evaluation_from_the_form_runs_on_a_worker_and_scores_like_the_reference(
    researcher_client, project, default_worker
):
    make_trajectory(project)
    with fake_openai_server(judge_or_world(SCORES)) as srv:
        world, judge = endpoints(project, srv.base_url)
        page = researcher_client.post(
            reverse("evaluation_new", args=[project.pk]), form(world, judge)
        )
        run = EvaluationRun.objects.get()
        assert page.status_code == 302 and page["Location"] == reverse(
            "evaluation_run", args=[run.pk]
        )
        run = wait_for(
            lambda: EvaluationRun.objects.filter(pk=run.pk, status="succeeded").first(), timeout=90
        )
        world_bodies = [
            b for b in srv.requests if not b["messages"][0]["content"].startswith("You grade")
        ]
        # the same settings again (the form's fixed default seed): the same samples
        researcher_client.post(
            reverse("evaluation_new", args=[project.pk]), form(world, judge, name="run B")
        )
        second = wait_for(
            lambda: EvaluationRun.objects.filter(name="run B", status="succeeded").first(),
            timeout=90,
        )
    assert second.sample_seed == run.sample_seed == 0
    assert sorted(second.samples.values_list("key", flat=True)) == sorted(
        run.samples.values_list("key", flat=True)
    )
    assert second.sample_set == run.sample_set and len(run.sample_set) == 64
    samples = list(EvaluationSample.objects.filter(run=run).order_by("step_index"))
    assert [s.step_index for s in samples] == list(
        range(len(TERMINAL_STEPS))
    )  # every recorded step
    assert all(
        s.stage == "judged" and s.predicted_observation == "predicted output" for s in samples
    )
    assert samples[0].total_score == 1.0 and samples[1].judgement["strengths"]
    # the reference's figures: (mean - 1) / 4 * 100, pooled
    n = len(TERMINAL_STEPS)
    expected = round(((1 + 4.4 * (n - 1)) / n - 1) / 4 * 100, 2)
    assert run.results["overall"]["total"] == expected and run.results["overall"]["n"] == n
    assert run.samples_total == n and run.progress == 1.0 and run.tokens_out > 0
    assert run.judge_s > 0 and run.infer_s > 0
    # the world model was asked the reference's way: the sample's history, its sampling
    assert any(b.get("max_tokens") == 256 and "top_p" not in b for b in world_bodies)

    html = researcher_client.get(reverse("evaluation_run", args=[run.pk])).content.decode()
    assert "Succeeded" in html and f'id="run-overall">{expected:.2f}' in html
    assert f"{n} samples: {n} judged" in html
    board = researcher_client.get(reverse("leaderboard", args=[project.pk])).content.decode()
    assert "run A" in board and "Qwen-AgentWorld-397B-A17B" in board and "published" in board
    csv_text = researcher_client.get(
        reverse("leaderboard", args=[project.pk]) + "?format=csv"
    ).content.decode()
    assert f"run A,measured,{run.pk},{run.sample_set},0,50,{n}," in csv_text
    assert "GPT-5.4,published,,,,,,70.10,,," in csv_text
    assert board.count(f'data-sample-set="{run.sample_set}"') == 1  # both runs, one set
    md = researcher_client.get(
        reverse("leaderboard", args=[project.pk]) + "?format=md"
    ).content.decode()
    assert md.startswith("### Sample set") and "| Model | Source | Samples | MCP |" in md
    assert "| run A |" in md

    # drill-down: worst first, and a sample with its judge's notes and the diff
    listing = researcher_client.get(
        reverse("evaluation_samples", args=[run.pk]) + "?domain=terminal"
    ).content.decode()
    assert listing.index("step 0") < listing.index("step 1")  # score 1 before 4.4
    one = samples[1]
    page = researcher_client.get(reverse("evaluation_sample", args=[one.pk])).content.decode()
    assert TERMINAL_STEPS[1][0] in page and TERMINAL_STEPS[1][1] in page  # action, truth
    assert "predicted output" in page and "shape of" in page
    assert "<del>" in page or "<ins>" in page  # the prediction against the ground truth
    assert "Check the web app" in page  # its trajectory, linked


@pytest.mark.django_db
def test_the_form_names_what_is_wrong_and_annotators_cannot_start_a_run(client, project):
    url = reverse("evaluation_new", args=[project.pk])
    client.force_login(project.users["researcher"])
    page = client.get(url).content.decode()
    assert 'id="no-judge"' in page  # a project without a judge model is told so
    world, judge = endpoints(project, "http://127.0.0.1:9/v1")
    page = client.get(url).content.decode()
    assert 'name="sample_seed" value="0"' in page  # a fixed default: runs compare
    bad = client.post(
        url, {**form(world, judge), "limit_per_domain": 0, "concurrency": 99, "sample_seed": -1}
    )
    assert bad.status_code == 400
    assert set(bad.context["form"].errors) == {"limit_per_domain", "concurrency", "sample_seed"}
    from studio.forms.evaluations import EvaluationForm

    for given, seed in (("7", 7), ("", 0)):
        made = EvaluationForm({**form(world, judge), "sample_seed": given}, project=project)
        assert made.is_valid(), made.errors
        assert made.data_object().sample_seed == seed
    assert EvaluationRun.objects.count() == 0
    client.force_login(project.users["annotator"])
    assert client.post(url, form(world, judge)).status_code == 403
    assert client.get(reverse("evaluation_list", args=[project.pk])).status_code == 200


@pytest.mark.django_db
def test_a_sample_of_another_run_sits_beside_it_and_other_projects_see_nothing(
    client, project, make_user
):
    trajectory = make_trajectory(project)
    runs = []
    for name, score, text in (("A", 5, "alpha out"), ("B", 2, "beta out")):
        run = EvaluationRun.objects.create(
            project=project, name=name, world_kind="openai", world_model=f"wm-{name}",
            judge_model="jm", judge_base_url="http://x/v1", status=JobStatus.SUCCEEDED,
        )  # fmt: skip
        EvaluationSample.objects.create(
            run=run, domain="terminal", trajectory=trajectory, step_index=1,
            key=f"{trajectory.pk}:1", stage="judged", gen=text, predicted_observation=text,
            judgement={**dict.fromkeys(DIMS, score), "total_score": score, "failed": 0.0,
                       "strengths": [], "weaknesses": [f"weak {name}"]},
            total_score=score,
        )  # fmt: skip
        runs.append(run)
    a = runs[0].samples.get()
    client.force_login(project.users["annotator"])  # every member reads evaluations
    html = client.get(
        reverse("evaluation_sample", args=[a.pk]) + f"?compare={runs[1].pk}"
    ).content.decode()
    assert "alpha out" in html and "beta out" in html and "weak A" in html and "weak B" in html
    missing = reverse("evaluation_sample", args=[a.pk]) + "?compare=999999"
    assert client.get(missing).status_code == 404
    board = client.get(reverse("leaderboard", args=[project.pk])).content.decode()
    assert board.index(">A</a>") < board.index(">B</a>")  # by overall, best first
    client.force_login(make_user("stranger"))
    for url in (
        reverse("evaluation_run", args=[runs[0].pk]),
        reverse("evaluation_sample", args=[a.pk]),
        reverse("evaluation_samples", args=[runs[0].pk]),
        reverse("leaderboard", args=[project.pk]),
    ):
        assert client.get(url).status_code == 404


STALE_S = 4
STALE_ENV = {"STUDIO_JOB_STALE_S": str(STALE_S)}


@pytest.mark.django_db(transaction=True)
@pytest.mark.worker
def test_resume_after_a_killed_worker_loses_no_finished_sample(
    researcher_client, project, settings, isolated_queues
):
    settings.STUDIO_JOB_STALE_S = STALE_S
    make_trajectory(project)
    release = threading.Event()
    asked: dict[str, int] = {}
    lock = threading.Lock()

    def respond(body, index):
        user = body["messages"][-1]["content"]
        if body["messages"][0]["content"].startswith("You grade a world model"):
            return judge_or_world(SCORES)(body, index)
        with lock:
            asked[user] = asked.get(user, 0) + 1
            first_ones = len(asked) <= 2
        if not first_ones:
            release.wait(timeout=120)  # held: the worker dies while it waits
        return "<predicted_observation>predicted output</predicted_observation>"

    with fake_openai_server(respond) as srv:
        world, judge = endpoints(project, srv.base_url)
        with running_worker(("default",), extra_env=STALE_ENV) as proc:
            researcher_client.post(
                reverse("evaluation_new", args=[project.pk]), form(world, judge, concurrency=1)
            )
            run = EvaluationRun.objects.get()
            wait_for(lambda: run.samples.filter(stage="predicted").count() == 2, timeout=90)
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        with running_worker(("gpu",), extra_env=STALE_ENV):  # a worker that only sweeps
            lost = wait_for(
                lambda: EvaluationRun.objects.filter(pk=run.pk, status="failed").first(), timeout=60
            )
        assert "stopped without finishing" in lost.error and "use Resume" in lost.error
        page = researcher_client.get(reverse("evaluation_run", args=[run.pk])).content.decode()
        assert 'id="evaluation-resume"' in page
        release.set()
        with running_worker(("default",), extra_env=STALE_ENV):
            researcher_client.post(reverse("evaluation_resume", args=[run.pk]))
            done = wait_for(
                lambda: EvaluationRun.objects.filter(pk=run.pk, status="succeeded").first(),
                timeout=90,
            )
    assert done.samples.filter(stage="judged").count() == len(TERMINAL_STEPS)
    # the two samples predicted before the kill were not asked again
    assert sorted(asked.values()).count(1) >= 2 and max(asked.values()) <= 2
    assert sum(1 for v in asked.values() if v == 2) <= 1  # only the one in flight was redone


def _run_in_thread(run_id: int, message_id: str) -> None:
    """The job's body as a worker runs it, in a thread of this process (closing its
    database connection after)."""
    from django.db import connection

    from studio.jobs.evaluations import run_evaluation

    def body():
        try:
            run_evaluation(run_id, message_id)
        finally:
            connection.close()

    thread = threading.Thread(target=body)
    thread.start()
    thread.join(timeout=120)


@pytest.mark.django_db(transaction=True)
def test_a_run_out_of_time_hands_over_to_a_new_message_and_a_failed_one_resumes(
    project, isolated_queues, monkeypatch
):
    """Near its task's time limit a run stops taking samples and sends itself again (a run
    may take many tasks' time); a run where nothing could be judged fails saying why, and
    Resume tries its failed samples again."""
    from studio.jobs import evaluations as job
    from studio.services import evaluations as service
    from studio.services.evaluations import EvaluationData

    make_trajectory(project)
    broken = {"on": True}

    def respond(body, index):
        if broken["on"] and not body["messages"][0]["content"].startswith("You grade"):
            return (500, "the model is down")
        return judge_or_world(SCORES)(body, index)

    with fake_openai_server(respond) as srv:
        world, judge = endpoints(project, srv.base_url)
        data = EvaluationData(name="R", world=world, judge=judge, max_tokens=64, concurrency=2)
        run = service.start_evaluation(project, None, data)
        EvaluationRun.objects.filter(pk=run.pk).update(message_id="m-1")
        monkeypatch.setattr(job, "task_budget_s", lambda: -1.0)  # out of time at once
        _run_in_thread(run.pk, "m-1")
        run.refresh_from_db()
        assert run.status == JobStatus.QUEUED and run.message_id not in ("", "m-1")
        assert run.samples.filter(stage="pending").count() == len(TERMINAL_STEPS)
        assert srv.requests == []  # no sample was taken

        monkeypatch.setattr(job, "task_budget_s", lambda: 600.0)
        _run_in_thread(run.pk, run.message_id)
        run.refresh_from_db()
        assert run.status == JobStatus.FAILED
        assert "no sample was judged" in run.error and "the model is down" in run.error
        assert run.samples.filter(stage="infer_failed").count() == len(TERMINAL_STEPS)

        broken["on"] = False
        assert service.resume_evaluation(run)
        run.refresh_from_db()
        assert run.status == JobStatus.QUEUED and run.samples.filter(
            stage="pending"
        ).count() == len(TERMINAL_STEPS)
        EvaluationRun.objects.filter(pk=run.pk).update(message_id="m-3")
        _run_in_thread(run.pk, "m-3")
    run.refresh_from_db()
    assert run.status == JobStatus.SUCCEEDED, run.error
    assert run.samples.filter(stage="judged").count() == len(TERMINAL_STEPS)
    assert not service.resume_evaluation(run)  # a run that succeeded does not resume


@pytest.mark.django_db
def test_a_run_over_imported_benchmark_files_asks_each_row_as_the_reference_does(project):
    """Trajectories imported from AgentWorldBench files: each row comes back as the sample
    of its turn, and the world model is sent exactly the reference's messages for it."""
    from inference.prompts import reference_messages
    from studio.services import evaluations as service
    from studio.services.imports import do_import_file
    from tests.support.jobs import AWB_DIR, read_awb_rows

    for name in ("terminal_test.jsonl", "mcp_test.jsonl"):
        do_import_file(project=project, path=AWB_DIR / name)
    make_trajectory(project)  # a recorded trajectory that is not from the benchmark
    world, judge = endpoints(project, "http://127.0.0.1:9/v1")
    data = service.EvaluationData(name="bench", world=world, judge=judge, source="benchmark")
    run = service.start_evaluation(project, None, data)
    samples = service.draw_samples(run).samples
    originals = read_awb_rows("terminal_test.jsonl") + read_awb_rows("mcp_test.jsonl")
    assert len(samples) == len(originals)  # the other trajectory is left out
    rebuilt = []
    for sample in samples:
        sample.save()
        rebuilt.append(reference_messages(service.row_of(sample)))
    expected = [reference_messages(row) for row in originals]
    assert sorted(map(json.dumps, rebuilt)) == sorted(map(json.dumps, expected))
    # the files can be picked: only the terminal file's rows
    from studio.forms.evaluations import EvaluationForm

    picked = EvaluationForm(
        {**form(world, judge), "source": "benchmark", "benchmark_files": ["terminal_test.jsonl"]},
        project=project,
    )
    assert picked.is_valid(), picked.errors
    only = service.start_evaluation(project, None, picked.data_object())
    assert {s.domain for s in service.draw_samples(only).samples} == {"terminal"}
    refused = EvaluationForm(
        {**form(world, judge), "benchmark_files": ["nope.jsonl"]}, project=project
    )
    assert not refused.is_valid() and "benchmark_files" in refused.errors


# ---- comparable evaluations: a sample set fixed by its settings ----------------------------


def many_steps(domain: str, key: str) -> list[tuple[str, str]]:
    return [(f"echo {domain} {key} {i}", f"{domain} {key} {i}") for i in range(4)]


def make_pool(project, order=("k1", "k2", "k3")) -> None:
    """Three trajectories in each of two domains (twelve steps per domain), made in `order`."""
    for key in order:
        for domain in ("terminal", "web"):
            make_trajectory(
                project, domain=domain, steps=many_steps(domain, key), title=f"{domain} {key}",
                key=f"{domain}-{key}",
            )  # fmt: skip


def drawn(project, world, judge, **settings) -> tuple[list[str], str]:
    """The identities (trajectory key, step) a run with these settings draws, and its digest."""
    from studio.models import Trajectory
    from studio.services import evaluations as service

    data = service.EvaluationData(name="s", world=world, judge=judge, **settings)
    run = service.start_evaluation(project, None, data)
    found = service.draw_samples(run)
    keys = {t.pk: t.source_key for t in Trajectory.objects.filter(project=project)}
    return sorted(f"{keys[s.trajectory_id]}:{s.step_index}" for s in found.samples), found.digest


@pytest.mark.django_db
def test_the_same_settings_draw_the_same_samples_and_another_seed_draws_others(project, make_user):
    from studio.models import Project

    make_pool(project)
    world, judge = endpoints(project, "http://127.0.0.1:9/v1")
    first, digest = drawn(project, world, judge, limit_per_domain=3)
    again, digest_again = drawn(project, world, judge, limit_per_domain=3)
    assert first == again and digest == digest_again  # two runs, the same samples
    assert len(first) == 6 and len(digest) == 64 and int(digest, 16) >= 0
    assert sum(k.startswith("terminal-") for k in first) == 3  # the limit is per domain
    # the seed the user sets decides the draw: other seeds, other sets
    sets = {tuple(drawn(project, world, judge, limit_per_domain=3, sample_seed=s)[0])
            for s in range(8)}  # fmt: skip
    assert len(sets) >= 5
    assert drawn(project, world, judge, limit_per_domain=3, sample_seed=1)[0] != first
    # the domains and the limit are part of the settings too
    web_only, web_digest = drawn(project, world, judge, limit_per_domain=3, domains=["web"])
    assert web_only == [k for k in first if k.startswith("web-")] and web_digest != digest
    assert drawn(project, world, judge, limit_per_domain=4)[1] != digest
    # the database's ids do not matter: the same trajectories made in another order, in
    # another project, draw the same steps
    other = Project.objects.create(name="Same data, other ids")
    make_pool(other, order=("k3", "k1", "k2"))
    o_world, o_judge = endpoints(other, "http://127.0.0.1:9/v1")
    assert drawn(other, o_world, o_judge, limit_per_domain=3) == (first, digest)


@pytest.mark.django_db(transaction=True)
def test_two_runs_of_the_job_with_the_same_settings_score_the_same_samples(
    project, isolated_queues
):
    """Through the job's own code (in a thread, as a worker runs it): the sample set is drawn
    once, its digest and what it was drawn from kept on the run; the run page and the
    leaderboard show it; Resume keeps it."""
    from django.test import Client

    from studio.services import evaluations as service

    make_pool(project)
    every = {"echo": [4, 4, 4, 4, 4]}  # every action of the pool
    with fake_openai_server(judge_or_world(every)) as srv:
        world, judge = endpoints(project, srv.base_url)
        runs = []
        for name in ("first", "second"):
            data = service.EvaluationData(
                name=name, world=world, judge=judge, limit_per_domain=3, sample_seed=7,
                max_tokens=64, concurrency=2,
            )  # fmt: skip
            run = service.start_evaluation(project, None, data)
            EvaluationRun.objects.filter(pk=run.pk).update(message_id=f"m-{name}")
            _run_in_thread(run.pk, f"m-{name}")
            run.refresh_from_db()
            runs.append(run)
        a, b = runs
        assert a.status == b.status == JobStatus.SUCCEEDED, (a.error, b.error)
        keys = [sorted(r.samples.values_list("key", flat=True)) for r in runs]
        assert keys[0] == keys[1] and len(keys[0]) == 6
        assert a.sample_set == b.sample_set and len(a.sample_set) == 64
        assert a.params["sample_pool"] == {"terminal": 12, "web": 12}
        assert a.samples_total == 6
        # a resumed run keeps its set: the samples are not drawn again
        EvaluationRun.objects.filter(pk=a.pk).update(status=JobStatus.FAILED)
        a.samples.update(stage="infer_failed")
        assert service.resume_evaluation(a)
        EvaluationRun.objects.filter(pk=a.pk).update(message_id="m-again")
        _run_in_thread(a.pk, "m-again")
    a.refresh_from_db()
    assert a.status == JobStatus.SUCCEEDED, a.error
    assert sorted(a.samples.values_list("key", flat=True)) == keys[0]
    assert a.sample_set == b.sample_set

    client = Client()
    client.force_login(project.users["annotator"])
    page = client.get(reverse("evaluation_run", args=[a.pk])).content.decode()
    assert 'id="sample-seed">7<' in page and f">{a.sample_set[:12]}</code>" in page
    assert 'id="sample-count">6<' in page and "terminal 12, web 12" in page
    assert reverse("evaluation_samples", args=[a.pk]) in page


def finished_run(project, name, sample_set, scores_by_domain, **fields) -> EvaluationRun:
    """A succeeded run with judged samples (`scores_by_domain`: domain -> one total each)."""
    from studio.services import evaluations as service

    samples = sum(len(v) for v in scores_by_domain.values())
    run = EvaluationRun.objects.create(
        project=project, name=name, world_kind="openai", world_model=f"wm-{name}",
        judge_model="jm", judge_base_url="http://x/v1", status=JobStatus.SUCCEEDED,
        sample_set=sample_set, samples_total=samples, **fields,
    )  # fmt: skip
    for domain, totals in scores_by_domain.items():
        for i, score in enumerate(totals):
            EvaluationSample.objects.create(
                run=run, domain=domain, step_index=i, key=f"{domain}:{i}", stage="judged",
                judgement={**dict.fromkeys(DIMS, score), "total_score": score, "failed": 0.0},
                total_score=score,
            )  # fmt: skip
    EvaluationRun.objects.filter(pk=run.pk).update(results=service.figures(run))
    run.refresh_from_db()
    return run


@pytest.mark.django_db
def test_the_leaderboard_groups_runs_by_sample_set_counts_them_and_exports_numbers(client, project):
    import csv
    import io

    set_a, set_b = "a" * 64, "b" * 64
    low = finished_run(project, "low", set_a, {"terminal": [2, 2, 2]}, sample_seed=0)
    high = finished_run(project, "high", set_a, {"terminal": [4, 5, 4]}, sample_seed=0)
    other = finished_run(project, "other set", set_b, {"terminal": [5], "web": [1]},
                         sample_seed=3, limit_per_domain=1)  # fmt: skip
    client.force_login(project.users["annotator"])
    html = client.get(reverse("leaderboard", args=[project.pk])).content.decode()
    # one part per set, ranked within it; the published figures a part of their own
    parts = html.split('<tbody class="sample-set')
    assert len(parts) == 4  # the table head, two sets, the published figures
    newest_set, older_set, published = parts[1], parts[2], parts[3]
    assert f'data-sample-set="{set_b}"' in newest_set and "other set" in newest_set
    assert f"Sample set {set_b[:12]} · 2 samples · a subset" in newest_set
    assert "seed 3, at most 1 per domain, recorded trajectories, every domain" in newest_set
    assert f'data-sample-set="{set_a}"' in older_set and "3 samples" in older_set
    assert older_set.index(">high</a>") < older_set.index(">low</a>")  # best first, in its set
    assert "published-set" in published and published.count('class="published"') == 14
    note = published.split('id="published-note">', 1)[1].split("</td>", 1)[0]
    assert "full AgentWorldBench" in note and "not ranked with them" in note
    assert f"3 samples (set {set_a[:12]}, a subset)" in note
    assert f"2 samples (set {set_b[:12]}, a subset)" in note
    # each row says how many samples it was scored on
    assert '<td class="sample-count">3</td>' in older_set
    assert '<td class="sample-count">2</td>' in newest_set

    rows = list(csv.DictReader(io.StringIO(
        client.get(reverse("leaderboard", args=[project.pk]) + "?format=csv").content.decode()
    )))  # fmt: skip
    by_model = {r["model"]: r for r in rows}
    assert by_model["high"]["run"] == str(high.pk) and by_model["high"]["sample_set"] == set_a
    assert by_model["high"]["samples"] == "3" and by_model["high"]["Terminal valid"] == "3"
    assert by_model["high"]["Terminal"] == f"{(13 / 3 - 1) / 4 * 100:.2f}"
    assert by_model["other set"]["sample_seed"] == "3" and by_model["other set"]["Web"] == "0.00"
    assert by_model["low"]["Overall"] == ""  # no overall without every domain: empty
    assert by_model["GPT-5.4"]["Terminal"] == "53.69" and by_model["GPT-5.4"]["samples"] == ""
    assert by_model["GPT-5.4"]["Terminal valid"] == ""  # not measured here: no count
    numeric = [k for k in rows[0] if k not in ("model", "source", "sample_set")]
    for row in rows:
        for column in numeric:
            if row[column]:
                float(row[column])  # numbers only, or empty
    assert low.pk and other.pk

    md = client.get(reverse("leaderboard", args=[project.pk]) + "?format=md").content.decode()
    assert f"### Sample set {set_a[:12]} · 3 samples" in md
    assert "> Published figures are on the full AgentWorldBench" in md
    assert "| Model | Source | Samples | MCP |" in md


@pytest.mark.django_db
def test_a_run_of_the_whole_imported_benchmark_is_named_so(project):
    from studio.presenters.leaderboard import group_heading, published_note
    from studio.services import evaluations as service

    pool = dict.fromkeys(service.DOMAINS, 10)
    whole = finished_run(
        project, "whole", "c" * 64, {"terminal": [3]}, source="benchmark",
        limit_per_domain=50, params={"sample_pool": pool},
    )  # fmt: skip
    assert service.is_full_benchmark(whole)
    groups = service.leaderboard(project)
    assert "every recorded step of the seven domains" in group_heading(groups[0])
    assert "the whole benchmark as imported here" in published_note(groups)
    cut = {**pool, "web": 51}  # the limit left some out
    EvaluationRun.objects.filter(pk=whole.pk).update(params={"sample_pool": cut})
    whole.refresh_from_db()
    assert not service.is_full_benchmark(whole)
    EvaluationRun.objects.filter(pk=whole.pk).update(params={"sample_pool": pool}, domains=["web"])
    whole.refresh_from_db()
    assert not service.is_full_benchmark(whole)
