"""A fine-tune evaluated against its base (issue 26, point 2): the held-out source reads only
the fine-tune's split and no run of a fine-tune ever samples a trajectory it trained on;
base and fine-tuned runs of one "Evaluate" score the same samples; the figures of a pair
are over the samples both judged, signed, with n; who may evaluate and when; the
leaderboard's "Fine-tuned vs base" with the lineage; GET never writes."""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from studio.models import (
    EvaluationRun,
    EvaluationSample,
    FineTuneRun,
    JobStatus,
    ModelEndpoint,
    Trajectory,
)
from studio.services import evaluations as evaluations_service
from studio.services import finetune_evaluations as service
from tests.support.jobs import make_trajectory

DIMS = ("format", "factuality", "consistency", "realism", "quality")
WRITE = re.compile(r"^\s*(INSERT|UPDATE|DELETE|REPLACE|CREATE|DROP|ALTER)\b", re.I)


def steps(name: str, n: int = 3) -> list[tuple[str, str]]:
    return [(f"echo {name} {i}", f"{name} {i}") for i in range(n)]


def trajectory(project, name: str, domain: str = "terminal", bench_file: str = "") -> Trajectory:
    made = make_trajectory(project, domain=domain, steps=steps(name), title=name, key=name)
    if bench_file:
        Trajectory.objects.filter(pk=made.pk).update(
            source_format="agentworldbench", source_file=bench_file
        )
    return made


def judge_endpoint(project) -> ModelEndpoint:
    return ModelEndpoint.objects.create(
        project=project, name="judge", role="judge", kind="openai",
        base_url="http://127.0.0.1:9/v1", model="jm",
    )  # fmt: skip


def finetune(project, *, heldout=(), train=(), status=JobStatus.SUCCEEDED, base=True, **fields):
    made = FineTuneRun.objects.filter(project=project).count()
    suffix = f" {made}" if made else ""  # endpoint names are unique in a project
    base_endpoint = (
        ModelEndpoint.objects.create(
            project=project,
            name=f"tiny base{suffix}",
            role="world",
            kind="hf",
            model="/models/tiny",
        )  # fmt: skip
        if base
        else None
    )
    tuned = ModelEndpoint.objects.create(
        project=project, name=f"tiny tuned{suffix}", role="world", kind="hf",
        model=f"/ft/{made}/adapter",
    )  # fmt: skip
    return FineTuneRun.objects.create(
        project=project, name="tiny on curated", dataset_name="curated", version_number=3,
        base_model="/models/tiny", base_endpoint=base_endpoint, endpoint=tuned,
        status=status, lora_rank=16, lora_alpha=32, epochs=2.0, learning_rate=1e-4, seed=11,
        code_version="0.9.0+abc1234",
        heldout_trajectory_ids=[t.pk for t in heldout],
        train_trajectory_ids=[t.pk for t in train], **fields,
    )  # fmt: skip


def drawn_keys(run: EvaluationRun) -> tuple[list[str], str]:
    found = evaluations_service.draw_samples(run)
    return sorted(s.key for s in found.samples), found.digest


def trajectories_of(keys: list[str]) -> set[int]:
    return {int(k.split(":")[0]) for k in keys}


@pytest.mark.django_db
def test_heldout_reads_only_the_split_and_no_run_of_a_fine_tune_samples_what_it_trained_on(
    project,
):
    held = [trajectory(project, f"held {i}") for i in range(4)]
    held_web = trajectory(project, "held web", domain="web")
    trained = [trajectory(project, f"train {i}") for i in range(3)]
    outside = trajectory(project, "outside the split")
    bench_trained = trajectory(project, "bench trained", bench_file="terminal_test.jsonl")
    bench_other = trajectory(project, "bench other", bench_file="terminal_test.jsonl")
    # one trajectory in both lists (never in a real split): being trained on wins
    both = held[0]
    run = finetune(project, heldout=[*held, held_web], train=[*trained, bench_trained, both])
    judge = judge_endpoint(project)
    data = service.FineTuneEvaluationData(
        judge=judge, sources=["heldout", "benchmark"], limit_per_domain=5, sample_seed=4
    )
    runs = service.start_finetune_evaluation(run, None, data)
    assert len(runs) == 4 and all(r.finetune_id == run.pk for r in runs)
    by = {(r.source, r.params["comparison"]["side"]): r for r in runs}
    assert {r.world_endpoint_id for r in runs} == {run.base_endpoint_id, run.endpoint_id}
    assert by["heldout", "base"].world_endpoint_id == run.base_endpoint_id
    assert by["heldout", "tuned"].world_endpoint_id == run.endpoint_id
    # the same settings on every run: the same seed, limit, domains, judge and sampling
    assert {(r.sample_seed, r.limit_per_domain, tuple(r.domains), r.judge_endpoint_id,
             r.params["temperature"], r.params["max_tokens"]) for r in runs} == {
        (4, 5, (), judge.pk, 0.6, 32768)
    }  # fmt: skip
    assert len({r.params["comparison"]["batch"] for r in runs}) == 1

    base_keys, base_digest = drawn_keys(by["heldout", "base"])
    tuned_keys, tuned_digest = drawn_keys(by["heldout", "tuned"])
    assert base_keys == tuned_keys and base_digest == tuned_digest and len(base_digest) == 64
    sampled = trajectories_of(base_keys)
    allowed = {t.pk for t in held[1:]} | {held_web.pk}
    assert sampled <= allowed and held_web.pk in sampled
    assert sampled.isdisjoint(run.train_trajectory_ids) and outside.pk not in sampled
    # the limit is per domain: 3 held-out terminal trajectories of 3 steps, 5 drawn
    assert sum(1 for k in base_keys if int(k.split(":")[0]) != held_web.pk) == 5
    # every step of the split is a candidate, nothing else
    candidates = evaluations_service.candidate_steps(by["heldout", "base"])
    assert {c.trajectory_id for c in candidates} == allowed

    bench_base, bench_digest = drawn_keys(by["benchmark", "base"])
    bench_tuned, bench_tuned_digest = drawn_keys(by["benchmark", "tuned"])
    assert bench_base == bench_tuned and bench_digest == bench_tuned_digest
    assert trajectories_of(bench_base) == {bench_other.pk}  # the trained-on one left out
    # a benchmark run that is not a fine-tune's scores every benchmark trajectory
    plain = evaluations_service.start_evaluation(
        project, None,
        evaluations_service.EvaluationData(
            name="plain", world=run.endpoint, judge=judge, source="benchmark",
            limit_per_domain=5, sample_seed=4,
        ),
    )  # fmt: skip
    plain_keys, plain_digest = drawn_keys(plain)
    assert trajectories_of(plain_keys) == {bench_trained.pk, bench_other.pk}
    assert plain_digest != bench_digest
    # a fine-tune that is gone leaves its held-out runs nothing to sample
    FineTuneRun.objects.filter(pk=run.pk).delete()
    orphan = EvaluationRun.objects.get(pk=by["heldout", "base"].pk)
    assert orphan.finetune_id is None and evaluations_service.candidate_steps(orphan) == []


def judged_run(project, ft, side, source, scores: dict[str, object], batch="b1", **fields):
    """A succeeded run of the fine-tune: `scores` maps a key "<domain>:<i>" to one score for
    every dimension, a dict of dimensions, or "failed" (the judge did not answer)."""
    endpoint = ft.base_endpoint if side == "base" else ft.endpoint
    run = EvaluationRun.objects.create(
        project=project, name=f"{side} {source}", world_endpoint=endpoint, world_kind="hf",
        world_model=endpoint.model, judge_model="jm", judge_base_url="http://x/v1",
        status=JobStatus.SUCCEEDED, source=source, finetune=ft, sample_set="d" * 64,
        samples_total=len(scores), params={"comparison": {"batch": batch, "side": side}},
        **fields,
    )  # fmt: skip
    for key, score in scores.items():
        domain, index = key.split(":")
        if score == "failed":
            EvaluationSample.objects.create(
                run=run, domain=domain, step_index=int(index), key=key, stage="judge_failed",
                judgement={"failed": 1.0},
            )  # fmt: skip
            continue
        dims = score if isinstance(score, dict) else dict.fromkeys(DIMS, score)
        total = sum(dims.values()) / len(dims)
        EvaluationSample.objects.create(
            run=run, domain=domain, step_index=int(index), key=key, stage="judged",
            judgement={**dims, "total_score": total, "failed": 0.0}, total_score=total,
        )  # fmt: skip
    EvaluationRun.objects.filter(pk=run.pk).update(results=evaluations_service.figures(run))
    run.refresh_from_db()
    return run


def norm(raw: float) -> float:
    return round((raw - 1) / 4 * 100, 2)


def a_pair(project):
    held = [trajectory(project, "h1"), trajectory(project, "h2", domain="web")]
    ft = finetune(project, heldout=held)
    # terminal: t0, t1 both judged; t2 judged by the base only; t3 failed for the tuned one;
    # web: w0 both judged (the tuned one worse); w1 judged by the tuned one only
    base = judged_run(project, ft, "base", "heldout", {
        "terminal:0": 2, "terminal:1": 3, "terminal:2": 5, "terminal:3": 1,
        "web:0": {**dict.fromkeys(DIMS, 4), "realism": 0},  # realism invalid on the base
    })  # fmt: skip
    tuned = judged_run(project, ft, "tuned", "heldout", {
        "terminal:0": 4, "terminal:1": 4, "terminal:3": "failed",
        "web:0": 3, "web:1": 5,
    })  # fmt: skip
    return ft, base, tuned


@pytest.mark.django_db
def test_the_deltas_are_over_the_samples_both_judged_signed_with_their_n(
    researcher_client, project
):
    ft, base, tuned = a_pair(project)
    [pair] = service.comparisons(ft)
    assert pair.base == base and pair.tuned == tuned and pair.same_samples
    assert pair.common == 3 and pair.base_judged == 5 and pair.tuned_judged == 4
    terminal, web = pair.lines
    assert terminal.name == "terminal" and web.name == "web"
    # terminal: the base's 2, 3 against the tuned one's 4, 4 (t2 and t3 left out)
    assert terminal.total.n == 2
    assert terminal.total.base == norm(2.5) == 37.5 and terminal.total.tuned == norm(4) == 75.0
    assert terminal.total.delta == 37.5 and terminal.total.delta_text == "+37.50"
    # web: the base's total is the mean of its four valid dimensions' sum over five (4 * 4 / 5
    # as it was judged: 3.2), the tuned one's 3: worse
    assert web.total.n == 1 and web.total.base == norm(3.2) and web.total.tuned == norm(3)
    assert web.total.delta == -5.0 and web.total.delta_text == "-5.00"
    # a dimension the base could not score on w0 has no pair there
    assert web.cells["realism"].n == 0 and web.cells["realism"].delta_text == "–"
    assert web.cells["format"].n == 1 and web.cells["format"].delta == norm(3) - norm(4)
    overall = pair.overall
    assert overall.total.n == 3
    assert overall.total.base == norm((2 + 3 + 3.2) / 3)
    assert overall.total.tuned == norm((4 + 4 + 3) / 3) == 66.67
    # the delta from the unrounded means (66.67 - 43.33 shown would be 23.34)
    assert overall.total.delta == round((11 / 3 - 8.2 / 3) / 4 * 100, 2) == 23.33
    assert overall.cells["realism"].n == 2  # t0, t1 (w0's base realism invalid)
    assert overall.cells["realism"].base == norm(2.5) and overall.cells["realism"].tuned == norm(4)
    # the same figures as inference.scoring computes for the common samples alone
    from inference.scoring import score_rows

    common_base = score_rows([
        {"task": "terminal", "failed": 0, **dict.fromkeys(DIMS, s), "total_score": s}
        for s in (2, 3)
    ])  # fmt: skip
    assert common_base["overall"]["total"] == terminal.total.base

    html = researcher_client.get(reverse("finetune_evaluations", args=[ft.pk])).content.decode()
    table = html.split('id="comparison-b1-heldout"', 1)[1]
    assert "Over the 3 samples both judged (base 5 judged, fine-tuned 4)" in table
    row = table.split('data-domain="terminal"', 1)[1].split("</tr>", 1)[0]
    assert "<td>2</td><td>37.50</td><td>75.00</td>" in row and "+37.50</span>" in row
    assert "(n=2)" in row
    web_row = table.split('data-domain="web"', 1)[1].split("</tr>", 1)[0]
    assert "-5.00</span>" in web_row and "delta-down" in web_row and "(n=1)" in web_row
    realism = table.split('data-dimension="realism"', 1)[1].split("</tr>", 1)[0]
    assert "(n=2)" in realism and "(n=0)" in realism and "–</span>" in realism
    assert f'href="{reverse("evaluation_run", args=[base.pk])}"' in html
    assert f'href="{reverse("evaluation_run", args=[tuned.pk])}"' in html
    assert "(the same for both)" in html and "Succeeded" in html


@pytest.mark.django_db
def test_a_pair_not_both_done_has_no_figures_and_the_section_polls(researcher_client, project):
    ft, base, tuned = a_pair(project)
    EvaluationRun.objects.filter(pk=tuned.pk).update(status=JobStatus.RUNNING, sample_set="")
    [pair] = service.comparisons(ft)
    assert not pair.done and pair.lines == [] and not pair.same_samples
    url = reverse("finetune_evaluations", args=[ft.pk])
    html = researcher_client.get(url).content.decode()
    assert 'id="comparison-' not in html and 'hx-trigger="every 2s"' in html
    assert "not drawn yet" in html
    partial = researcher_client.get(url, headers={"HX-Request": "true"})
    assert partial.status_code == 200 and "<html" not in partial.content.decode()
    EvaluationRun.objects.filter(pk=tuned.pk).update(status=JobStatus.SUCCEEDED)
    done = researcher_client.get(url, headers={"HX-Request": "true"})
    assert done.status_code == 286 and 'id="comparison-b1-heldout"' in done.content.decode()


def evaluate_form(judge, **extra) -> dict:
    return {"judge": judge.pk, "sources": ["heldout"], "limit_per_domain": 5, "sample_seed": 2,
            **extra}  # fmt: skip


@pytest.mark.django_db
def test_researchers_evaluate_annotators_cannot_outsiders_see_nothing(
    client, project, django_capture_on_commit_callbacks
):
    held = [trajectory(project, "h1")]
    ft = finetune(project, heldout=held, train=[trajectory(project, "t1")])
    judge = judge_endpoint(project)
    url = reverse("finetune_evaluate", args=[ft.pk])
    client.force_login(project.users["annotator"])
    assert client.post(url, evaluate_form(judge)).status_code == 403
    page = client.get(reverse("finetune_evaluations", args=[ft.pk])).content.decode()
    assert 'id="finetune-evaluate-form"' not in page and "Not evaluated yet." in page
    client.force_login(project.outsider)
    assert client.post(url, evaluate_form(judge)).status_code == 404
    assert client.get(reverse("finetune_evaluations", args=[ft.pk])).status_code == 404
    assert not EvaluationRun.objects.exists()

    client.force_login(project.users["researcher"])
    page = client.get(reverse("finetune_evaluations", args=[ft.pk])).content.decode()
    assert 'id="finetune-evaluate-form"' in page
    assert "The 1 trajectory it trained on is left out of every comparison" in page
    # no AgentWorldBench file here: the benchmark is not offered, and the page says why
    assert "Import an AgentWorldBench file to compare on the benchmark" in page
    assert 'value="benchmark"' not in page and 'value="heldout"' in page
    refused = client.post(url, evaluate_form(judge, sources=["benchmark"]))
    assert refused.status_code == 400 and not EvaluationRun.objects.exists()
    assert "benchmark" in refused.content.decode()
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        done = client.post(url, evaluate_form(judge))
    assert done.status_code == 302
    runs = list(EvaluationRun.objects.order_by("pk"))
    assert len(runs) == 2 and len(callbacks) == 2  # both enqueued once committed
    assert [r.params["comparison"]["side"] for r in runs] == ["base", "tuned"]
    assert {(r.source, r.sample_seed, r.limit_per_domain) for r in runs} == {("heldout", 2, 5)}
    assert all(r.requester == project.users["researcher"] for r in runs)
    assert done["Location"] == reverse("finetune_page", args=[ft.pk])
    followed = client.get(done["Location"]).content.decode()
    assert "2 evaluations queued" in followed and 'id="finetune-evaluations"' in followed

    # the benchmark is offered once an AgentWorldBench file is imported
    trajectory(project, "bench", bench_file="search_test.jsonl")
    page = client.get(reverse("finetune_evaluations", args=[ft.pk])).content.decode()
    assert 'value="benchmark"' in page and "to compare on the benchmark" not in page


@pytest.mark.django_db
def test_refused_before_the_fine_tune_succeeded_without_a_base_or_a_judge(client, project):
    client.force_login(project.users["admin"])
    held = [trajectory(project, "h1")]
    running = finetune(project, heldout=held, status=JobStatus.RUNNING)
    judge = judge_endpoint(project)
    response = client.post(reverse("finetune_evaluate", args=[running.pk]), evaluate_form(judge))
    assert response.status_code == 302 and not EvaluationRun.objects.exists()
    page = client.get(response["Location"]).content.decode()
    assert "Evaluate is offered once this fine-tune has succeeded; it is still training." in page
    assert 'id="evaluate-not-done"' in page and 'id="finetune-evaluate-form"' not in page
    with pytest.raises(service.EvaluationRefused):
        service.start_finetune_evaluation(
            running, None, service.FineTuneEvaluationData(judge=judge, sources=["heldout"])
        )

    baseless = finetune(project, heldout=held, base=False)
    response = client.post(reverse("finetune_evaluate", args=[baseless.pk]), evaluate_form(judge))
    page = client.get(response["Location"]).content.decode()
    assert "No base model is registered for this fine-tune" in page
    assert not EvaluationRun.objects.exists()

    ok = finetune(project, heldout=held)
    ModelEndpoint.objects.filter(role="judge").delete()
    page = client.get(reverse("finetune_evaluations", args=[ok.pk])).content.decode()
    assert 'id="evaluate-no-judge"' in page
    assert (
        f'href="{reverse("endpoint_list", kwargs={"project_id": project.pk})}">Models</a>' in page
    )


@pytest.mark.django_db
def test_the_job_limit_refuses_the_whole_evaluation(client, project, settings):
    settings.STUDIO_MAX_ACTIVE_JOBS = 1
    ft = finetune(project, heldout=[trajectory(project, "h1")])
    judge = judge_endpoint(project)
    client.force_login(project.users["researcher"])
    response = client.post(reverse("finetune_evaluate", args=[ft.pk]), evaluate_form(judge))
    assert response.status_code == 429 and not EvaluationRun.objects.exists()
    assert "STUDIO_MAX_ACTIVE_JOBS" in response.content.decode()


@pytest.mark.django_db
def test_the_leaderboard_sets_fine_tuned_beside_base_with_the_lineage(client, project):
    from tests.test_evaluations import finished_run

    ft, base, tuned = a_pair(project)
    # an older pair of the same source: the newest finished one is shown
    judged_run(project, ft, "base", "heldout", {"terminal:0": 1}, batch="old")
    other = finished_run(project, "plain run", "e" * 64, {"terminal": [3]})
    client.force_login(project.users["annotator"])
    html = client.get(reverse("leaderboard", args=[project.pk])).content.decode()
    assert ">plain run</a>" in html and 'data-sample-set="' + "e" * 64 + '"' in html
    section = html.split('id="finetune-board"', 1)[1].split("</section>", 1)[0]
    assert "Fine-tuned vs base" in html
    assert f'data-finetune="{ft.pk}"' in section and f">#{ft.pk} tiny on curated</a>" in section
    for text in ("Dataset <strong>curated v3</strong>",
                 "Method <strong>LoRA adapter (rank 16, alpha 32)</strong>",
                 "Epochs <strong>2</strong>", "Learning rate <strong>0.0001</strong>",
                 "Seed <strong>11</strong>", "Code version <strong>0.9.0+abc1234</strong>",
                 "Base model <strong>tiny base (/models/tiny)</strong>"):  # fmt: skip
        assert text in section, text
    [pair] = section.split('class="table compact finetune-pair"')[1:]
    assert f'href="{reverse("evaluation_run", args=[base.pk])}">Base</a>' in pair
    assert f'href="{reverse("evaluation_run", args=[tuned.pk])}">Fine-tuned</a>' in pair
    base_row = pair.split('class="pair-base"', 1)[1].split("</tr>", 1)[0]
    assert "<td>3</td><td>37.50</td><td>55.00</td>" in base_row  # n, terminal, web
    tuned_row = pair.split('class="pair-tuned"', 1)[1].split("</tr>", 1)[0]
    assert "<td>75.00</td><td>50.00</td>" in tuned_row
    delta_row = pair.split('class="pair-delta', 1)[1].split("</tr>", 1)[0]
    assert "+37.50</span>" in delta_row and "-5.00</span>" in delta_row
    assert 'data-dimension="quality"' in pair
    assert (
        f'both on sample set <code title="{base.sample_set}">{base.sample_set[:12]}</code>' in pair
    )
    # the fine-tune's page is linked (its evaluations' page where no fine-tune page exists)
    from studio.views.finetune_evaluations import finetune_page_url

    assert f'<a href="{finetune_page_url(ft)}">#{ft.pk} tiny on curated</a>' in section
    assert other.pk
    # a fine-tune without a finished pair is not listed
    EvaluationRun.objects.filter(pk=tuned.pk).update(status=JobStatus.FAILED)
    html = client.get(reverse("leaderboard", args=[project.pk])).content.decode()
    assert 'id="finetune-board"' not in html and ">plain run</a>" in html


@pytest.mark.django_db
def test_the_pages_only_read(researcher_client, project):
    ft, base, tuned = a_pair(project)
    EvaluationRun.objects.filter(pk=tuned.pk).update(status=JobStatus.RUNNING)
    urls = [
        reverse("finetune_evaluations", args=[ft.pk]),
        reverse("leaderboard", args=[project.pk]),
    ]
    for url in urls:
        for headers in ({}, {"HX-Request": "true"}):
            with CaptureQueriesContext(connection) as queries:
                response = researcher_client.get(url, headers=headers)
            assert response.status_code in (200, 286), url
            writes = [q["sql"] for q in queries if WRITE.match(q["sql"])]
            assert not writes, (url, writes)
    assert researcher_client.get(reverse("finetune_evaluate", args=[ft.pk])).status_code == 405


@pytest.mark.django_db(transaction=True)
def test_the_job_scores_base_and_fine_tuned_on_the_same_sample_set(project, isolated_queues):
    """Through the job's own code (in a thread, as a worker runs it), against the fake
    OpenAI-compatible server: both runs of the pair draw the same set (equal digests), from
    the held-out split only, and the page and the leaderboard set them side by side."""
    from django.test import Client

    from tests.support.fake_openai import fake_openai_server
    from tests.test_evaluations import _run_in_thread, judge_or_world

    held = [trajectory(project, f"held {i}") for i in range(3)]
    trained = [trajectory(project, "trained")]
    ft = finetune(project, heldout=held, train=trained)
    with fake_openai_server(judge_or_world({"echo": [4, 4, 3, 4, 4]})) as srv:
        ModelEndpoint.objects.filter(pk__in=[ft.base_endpoint_id, ft.endpoint_id]).update(
            kind="openai", base_url=srv.base_url
        )
        ModelEndpoint.objects.filter(pk=ft.endpoint_id).update(model="tuned")
        ModelEndpoint.objects.filter(pk=ft.base_endpoint_id).update(model="base")
        ft = FineTuneRun.objects.select_related("base_endpoint", "endpoint", "project").get(
            pk=ft.pk
        )
        judge = judge_endpoint(project)
        ModelEndpoint.objects.filter(pk=judge.pk).update(base_url=srv.base_url)
        judge.refresh_from_db()
        data = service.FineTuneEvaluationData(
            judge=judge, sources=["heldout"], limit_per_domain=4, sample_seed=9
        )
        runs = service.start_finetune_evaluation(ft, None, data)
        for run in runs:
            EvaluationRun.objects.filter(pk=run.pk).update(message_id=f"m-{run.pk}")
            _run_in_thread(run.pk, f"m-{run.pk}")
    base, tuned = (EvaluationRun.objects.get(pk=r.pk) for r in runs)
    assert base.status == tuned.status == JobStatus.SUCCEEDED, (base.error, tuned.error)
    assert base.sample_set == tuned.sample_set and len(base.sample_set) == 64
    keys = sorted(base.samples.values_list("key", flat=True))
    assert keys == sorted(tuned.samples.values_list("key", flat=True)) and len(keys) == 4
    assert trajectories_of(keys) <= {t.pk for t in held}
    assert {base.world_model, tuned.world_model} == {"base", "tuned"}

    client = Client()
    client.force_login(project.users["annotator"])
    page = client.get(reverse("finetune_page", args=[ft.pk])).content.decode()
    assert f'id="comparison-{base.params["comparison"]["batch"]}-heldout"' in page
    assert "Over the 4 samples both judged" in page and "±0.00</span>" in page
    board = client.get(reverse("leaderboard", args=[project.pk])).content.decode()
    assert f'data-finetune="{ft.pk}"' in board


# ---- after QA -----------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_section_says_in_words_why_a_fine_tune_not_succeeded_cannot_be_evaluated(
    client, project
):
    held = [trajectory(project, "h1")]
    ft = finetune(project, heldout=held, status=JobStatus.QUEUED)
    judge_endpoint(project)
    url = reverse("finetune_evaluations", args=[ft.pk])
    lead = "Evaluate is offered once this fine-tune has succeeded; "
    cases = [
        ({"status": JobStatus.QUEUED}, "it is queued and has not started training yet."),
        ({"status": JobStatus.RUNNING}, "it is still training."),
        ({"status": JobStatus.RUNNING, "cancel_requested": True}, "it is being cancelled."),
        (
            {"status": JobStatus.FAILED, "cancel_requested": False,
             "error": "CUDA out of memory.\nTraceback: ..."},
            "it failed: CUDA out of memory. It can be resumed, or another started.",
        ),
        ({"status": JobStatus.FAILED, "error": ""},
         "it failed: no reason was recorded. It can be resumed, or another started."),
        ({"status": JobStatus.FAILED, "phase": "not-trainable", "error": "Not trained: too long"},
         "it could not train with its settings (the error is on this page): a new fine-tune "
         "with other settings can be started."),
        ({"status": JobStatus.CANCELLED, "phase": "cancelled"},
         "it was cancelled: it can be resumed, or another started."),
    ]  # fmt: skip
    for user in ("researcher", "annotator"):
        client.force_login(project.users[user])
        for fields, said in cases:
            FineTuneRun.objects.filter(pk=ft.pk).update(**fields)
            for headers in ({}, {"HX-Request": "true"}):
                html = client.get(url, headers=headers).content.decode()
                assert lead + said in html, (user, fields)
                assert "(it is " not in html and "Traceback" not in html
                assert 'id="finetune-evaluate-form"' not in html
                # the run page fetches the section again when the fine-tune ends
                section = html.split('id="finetune-evaluate"', 1)[1].split(">", 1)[0]
                if fields["status"] in (JobStatus.QUEUED, JobStatus.RUNNING):
                    assert 'hx-trigger="finetune-ended from:body"' in section
                    assert f'hx-get="{url}"' in section
    # succeeded: the form, and nothing to wait for (the htmx answer stops polling)
    FineTuneRun.objects.filter(pk=ft.pk).update(status=JobStatus.SUCCEEDED, error="")
    client.force_login(project.users["researcher"])
    done = client.get(url, headers={"HX-Request": "true"})
    html = done.content.decode()
    assert done.status_code == 286 and 'id="finetune-evaluate-form"' in html
    assert lead not in html and "finetune-ended" not in html
    ft.refresh_from_db()
    assert service.refusal(ft) == ""


@pytest.mark.django_db
def test_a_fine_tune_that_holds_out_nothing_offers_only_the_benchmark_and_says_why(
    researcher_client, project
):
    trained = [trajectory(project, f"t{i}") for i in range(2)]
    ft = finetune(project, heldout=[], train=trained)
    judge = judge_endpoint(project)
    url = reverse("finetune_evaluations", args=[ft.pk])
    page = researcher_client.get(url).content.decode()
    assert service.ALL_TRAINED_ON == (
        "every recorded trajectory of the project was trained on: nothing is held out"
    )
    assert (
        '<p class="muted" id="evaluate-no-heldout">Held-out trajectories: Every recorded '
        "trajectory of the project was trained on: nothing is held out.</p>"
    ) in page
    assert "Held-out: the 0" not in page
    # no benchmark either: nothing to compare on, and why; a POST asking for it is refused
    assert 'id="evaluate-nothing"' in page and 'id="finetune-evaluate-form"' not in page
    post = reverse("finetune_evaluate", args=[ft.pk])
    refused = researcher_client.post(post, evaluate_form(judge))
    assert refused.status_code == 400 and not EvaluationRun.objects.exists()
    assert f"Nothing to compare on: {service.ALL_TRAINED_ON}, and " in refused.content.decode()
    with pytest.raises(service.EvaluationRefused, match="nothing is held out"):
        service.start_finetune_evaluation(
            ft, None, service.FineTuneEvaluationData(judge=judge, sources=["heldout"])
        )

    # an AgentWorldBench file imported since: the benchmark alone is offered; the held-out
    # note says what is still true (nothing was set aside), not "everything trained on"
    bench = trajectory(project, "bench", bench_file="search_test.jsonl")
    page = researcher_client.get(url).content.decode()
    assert 'value="benchmark"' in page and 'value="heldout"' not in page
    assert service.NONE_HELD_OUT == (
        "this fine-tune holds out no trajectory: none was set aside when it was made"
    )
    assert f"Held-out trajectories: {service.NONE_HELD_OUT.capitalize()}." in page
    assert "Every recorded trajectory" not in page
    for sources in (["heldout"], ["heldout", "benchmark"]):
        refused = researcher_client.post(post, evaluate_form(judge, sources=sources))
        assert refused.status_code == 400 and not EvaluationRun.objects.exists()
        assert f"Held-out trajectories: {service.NONE_HELD_OUT}." in refused.content.decode()
    done = researcher_client.post(post, evaluate_form(judge, sources=["benchmark"]))
    assert done.status_code == 302
    assert set(EvaluationRun.objects.values_list("source", flat=True)) == {"benchmark"}
    assert EvaluationRun.objects.count() == 2

    # a fine-tune that trained on every benchmark trajectory is not offered the benchmark
    every = finetune(project, heldout=[], train=[*trained, bench])
    assert service.offered(every, project) == {}
    assert service.unavailable(every, project) == {
        "heldout": service.ALL_TRAINED_ON,
        "benchmark": service.BENCHMARK_TRAINED_ON,
    }


@pytest.mark.django_db
def test_runs_fine_tunes_and_models_are_named_apart(researcher_client, project):
    held = [trajectory(project, "h1")]
    trajectory(project, "bench", bench_file="search_test.jsonl")
    one = finetune(project, heldout=held)
    two = finetune(project, heldout=held)  # the same dataset version, the same name
    ModelEndpoint.objects.filter(pk=one.base_endpoint_id).update(
        name="tiny-qwen3_5_moe (base)", model="/tmp/x/models/tiny-qwen3_5_moe"
    )
    one.refresh_from_db()
    judge = judge_endpoint(project)
    data = service.FineTuneEvaluationData(judge=judge, sources=["heldout", "benchmark"])
    runs = service.start_finetune_evaluation(one, None, data)
    assert sorted(r.name for r in runs) == sorted([
        f"tiny-qwen3_5_moe (base) (base of fine-tune #{one.pk}, held-out)",
        f"tiny tuned (fine-tune #{one.pk}, held-out)",
        f"tiny-qwen3_5_moe (base) (base of fine-tune #{one.pk}, AgentWorldBench)",
        f"tiny tuned (fine-tune #{one.pk}, AgentWorldBench)",
    ])  # fmt: skip
    long = ModelEndpoint(name="m" * 100)
    assert len(service.run_name(one, "base", "heldout", long)) <= 200

    # both fine-tunes on the leaderboard, each "#<id> <name>"; the models by their endpoints
    ft1_base = judged_run(project, one, "base", "heldout", {"terminal:0": 2})
    judged_run(project, one, "tuned", "heldout", {"terminal:0": 3})
    judged_run(project, two, "base", "heldout", {"terminal:0": 2}, batch="b2")
    judged_run(project, two, "tuned", "heldout", {"terminal:0": 2}, batch="b2")
    html = researcher_client.get(reverse("leaderboard", args=[project.pk])).content.decode()
    section = html.split('id="finetune-board"', 1)[1].split("</section>", 1)[0]
    assert f">#{one.pk} tiny on curated</a>" in section
    assert f">#{two.pk} tiny on curated</a>" in section
    entry = section.split(f'data-finetune="{one.pk}"', 1)[1].split("finetune-entry", 1)[0]
    base_row = entry.split('class="pair-base"', 1)[1].split("</tr>", 1)[0]
    assert 'title="/tmp/x/models/tiny-qwen3_5_moe">tiny-qwen3_5_moe (base)</span>' in base_row
    tuned_row = entry.split('class="pair-tuned"', 1)[1].split("</tr>", 1)[0]
    assert 'title="/ft/0/adapter">tiny tuned</span>' in tuned_row
    assert ">/tmp/x/models" not in html and ">/ft/" not in html
    # the main table's model column too
    main = html.split('id="leaderboard"', 1)[1].split("</table>", 1)[0]
    row = main.split(f'href="{reverse("evaluation_run", args=[ft1_base.pk])}"', 1)[1]
    assert row.split("</td>", 1)[0].endswith(
        'title="/tmp/x/models/tiny-qwen3_5_moe">tiny-qwen3_5_moe (base)</span>'
    )
    # the fine-tune's evaluations page says which fine-tune it is
    page = researcher_client.get(reverse("finetune_evaluations", args=[one.pk])).content.decode()
    assert f"Fine-tune #{one.pk} tiny on curated: base vs fine-tuned" in page
    assert f"Evaluations of fine-tune #{one.pk} tiny on curated" in page
    # a run without its endpoint: the model's last path part, never the path
    EvaluationRun.objects.filter(pk=ft1_base.pk).update(world_endpoint=None)
    ft1_base.refresh_from_db()
    assert service.model_name(ft1_base) == "tiny-qwen3_5_moe"


@pytest.mark.django_db
def test_the_lineage_says_the_step_limit_when_there_is_one(project):
    ft = finetune(project, heldout=[trajectory(project, "h1")], settings={"max_steps": 5})
    lineage = dict(service.lineage(ft))
    assert lineage["Training"] == "at most 5 steps" and "Epochs" not in lineage
    FineTuneRun.objects.filter(pk=ft.pk).update(settings={"max_steps": 1})
    ft.refresh_from_db()
    assert dict(service.lineage(ft))["Training"] == "at most 1 step"
    FineTuneRun.objects.filter(pk=ft.pk).update(settings={"max_steps": None})
    ft.refresh_from_db()
    lineage = dict(service.lineage(ft))
    assert lineage["Epochs"] == "2" and "Training" not in lineage


@pytest.mark.django_db
def test_figures_of_the_scripted_demo_judge_say_so_wherever_they_are_shown(client, project):
    from django.utils.html import escape

    from studio.demo_data.scripted_judge import JUDGE_MODEL
    from tests.test_evaluations import finished_run

    said = "judged by the scripted demo judge: text overlap measurements, not a model's judgement"
    note = escape(said)  # as the page writes it
    ft, base, tuned = a_pair(project)
    plain = finished_run(project, "judged by a model", "f" * 64, {"terminal": [3]})
    client.force_login(project.users["annotator"])
    section_url = reverse("finetune_evaluations", args=[ft.pk])
    board_url = reverse("leaderboard", args=[project.pk])
    for url in (section_url, board_url, reverse("evaluation_run", args=[base.pk])):
        assert "scripted demo judge" not in client.get(url).content.decode(), url

    EvaluationRun.objects.filter(pk__in=[base.pk, tuned.pk]).update(judge_model=JUDGE_MODEL)
    section = client.get(section_url).content.decode()
    comparison = section.split('id="comparison-b1-heldout"', 1)[1]
    assert f'id="comparison-scripted-b1-heldout">{note[0].upper()}{note[1:]}.</p>' in comparison
    assert "(scripted demo judge)" in section  # beside the runs, in the judge column
    board = client.get(board_url).content.decode()
    pair = board.split('id="finetune-board"', 1)[1].split("</caption>", 1)[0]
    assert f'judge {JUDGE_MODEL} <span class="scripted-judge-note">({note})</span>' in pair
    # the main table: one note on the group of the scripted runs, none on the other
    groups = board.split('<tbody class="sample-set')
    scripted_group = next(g for g in groups if f'data-sample-set="{"d" * 64}"' in g)
    other_group = next(g for g in groups if f'data-sample-set="{"f" * 64}"' in g)
    assert scripted_group.count("scripted-judge-note") == 1
    assert f"{note[0].upper()}{note[1:]}." in scripted_group
    assert "scripted" not in other_group
    run_page = client.get(reverse("evaluation_run", args=[base.pk])).content.decode()
    assert f'id="scripted-judge-note">{note[0].upper()}{note[1:]}.</p>' in run_page
    assert "scripted" not in client.get(reverse("evaluation_run", args=[plain.pk])).content.decode()
    # a group mixing judges names the runs it means
    EvaluationRun.objects.filter(pk=tuned.pk).update(judge_model="jm")
    board = client.get(board_url).content.decode()
    group = board.split(f'data-sample-set="{"d" * 64}"', 1)[1].split("</tbody>", 1)[0]
    assert f"{base.name}: {note}." in group
    md = client.get(board_url, {"format": "md"}).content.decode()
    assert f"> {base.name}: {said}." in md


@pytest.mark.django_db
def test_the_deltas_keep_their_sign_and_n_when_the_two_judged_different_subsets(
    researcher_client, project
):
    """The base judged a, b, c (a high); the fine-tuned one b, c, d (d low): each run's own
    mean says the fine-tuned one is worse, over the samples both judged it is better."""
    held = [trajectory(project, "h1")]
    ft = finetune(project, heldout=held)
    base = judged_run(project, ft, "base", "heldout", {
        "terminal:0": 5, "terminal:1": 2, "terminal:2": 3, "terminal:3": "failed",
    })  # fmt: skip
    tuned = judged_run(project, ft, "tuned", "heldout", {
        "terminal:1": 3, "terminal:2": 4, "terminal:3": 1, "terminal:4": 1,
    })  # fmt: skip
    assert tuned.results["overall"]["total"] < base.results["overall"]["total"]
    [pair] = service.comparisons(ft)
    assert pair.common == 2 and pair.base_judged == 3 and pair.tuned_judged == 4
    total = pair.overall.total
    assert (total.n, total.base, total.tuned) == (2, norm(2.5), norm(3.5))
    assert total.delta == 25.0 and total.delta_text == "+25.00"
    assert all(cell.n == 2 and cell.delta == 25.0 for _, cell in pair.overall.dimensions)
    [line] = pair.lines
    assert line.total.n == 2 and line.total.delta == 25.0
    # the other way round: fine-tuned minus base, so the sign flips with the sides
    swapped = service.compare(service.Comparison("heldout", tuned, base))
    assert swapped.overall is not None and swapped.overall.total.delta == -25.0
    html = researcher_client.get(reverse("finetune_evaluations", args=[ft.pk])).content.decode()
    assert "Over the 2 samples both judged (base 3 judged, fine-tuned 4)" in html
    row = html.split('data-domain="overall"', 1)[1].split("</tr>", 1)[0]
    assert "<td>2</td><td>37.50</td><td>62.50</td>" in row
    assert 'delta-up"' in row and "+25.00</span>" in row and "(n=2)" in row
    board = researcher_client.get(reverse("leaderboard", args=[project.pk])).content.decode()
    pair_html = board.split('class="table compact finetune-pair"', 1)[1].split("</table>", 1)[0]
    assert "<td>2</td><td>37.50</td><td>37.50</td>" in pair_html.split('class="pair-base"')[1]
    assert "+25.00</span>" in pair_html.split('class="pair-delta')[1].split("</tr>")[0]
