"""Behaviour searches run by a real Celery worker against a fake OpenAI-compatible judge on a
real HTTP server (127.0.0.1): from the form to its clusters, Cancel then Resume finishing
without asking about any candidate twice, a judge that cannot be reached failing the search
with its URL named; and in this process (the job's body in a thread): a judge whose answers
hold no verdict, the hand-over near the task's time limit, and a search whose worker died
settled by the sweeper."""

from __future__ import annotations

import json
import re
import socket
import threading
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from inference import behaviour as B
from studio.models import BehaviourCluster, BehaviourLabel, BehaviourSearch, JobStatus
from studio.services import behaviour as service
from studio.services.endpoints import EndpointData, save_endpoint
from tests.support.branching import make_trajectory
from tests.support.fake_openai import fake_openai_server
from tests.support.jobs import wait_job
from tests.support.worker import wait_for
from tests.test_behaviour_search import run, run_in_thread

STEPS = [
    ("ls /srv/app/build", "main.js  cache"),
    ("rm -rf /srv/app/build/cache", ""),
    ("cat README.md", "Run make build."),
    ("rm -rf /srv/app/build", ""),
    ("find /tmp -name '*.tmp' -delete", ""),
    ("git status", "nothing to commit"),
]


def section(body: dict, heading: str) -> str:
    user = body["messages"][-1]["content"]
    return user.split(heading, 1)[1].split("\n## ", 1)[0] if heading in user else ""


def judge_responder(body: dict, index: int) -> str:
    """The fake judge: a step whose action deletes is a yes, with a reason by how it
    deletes; a group of reasons is named by its first reason's first word."""
    system = body["messages"][0]["content"]
    if system.startswith(B.NAMING_SYSTEM_START):
        first = section(body, B.H_REASONS).split("\n- ", 1)[1]
        return f"<name>{first.split()[0]} deletions</name>"
    action = section(body, B.H_ACTION)
    if "rm -rf" in action:
        verdict = {"match": "yes", "confidence": 0.9, "reason": "rm -rf removes a directory"}
    elif "-delete" in action:
        verdict = {
            "match": "yes",
            "confidence": 0.7,
            "reason": "find with -delete removes temporary files",
        }
    else:
        verdict = {"match": "no", "confidence": 0.8, "reason": "nothing is deleted"}
    return f"<verdict>{json.dumps(verdict)}</verdict>"


def judge_of(project, url: str):
    data = EndpointData(name="judge", role="judge", kind="openai", base_url=url, model="jm")
    return save_endpoint(project, data).endpoint


def form(judge, **more) -> dict:
    return {
        "description": "the agent deletes files", "query": "", "unit": "steps",
        "max_candidates": 50, "judge": judge.pk, "temperature": 0.1, "max_tokens": 256,
        "concurrency": 2, **more,
    }  # fmt: skip


def asked_actions(srv) -> list[str]:
    return [
        section(b, B.H_ACTION).split("\n", 1)[1].strip()
        for b in srv.requests
        if b["messages"][0]["content"].startswith(B.STEP_SYSTEM_START)
    ]


@pytest.mark.django_db(transaction=True)
@pytest.mark.worker
def test_a_search_from_the_form_labels_and_clusters_on_a_worker(
    researcher_client, project, default_worker
):
    make_trajectory(project, steps=STEPS)
    with fake_openai_server(judge_responder) as srv:
        judge = judge_of(project, srv.base_url)
        page = researcher_client.post(reverse("behaviour_new", args=[project.pk]), form(judge))
        job = BehaviourSearch.objects.get()
        assert page.status_code == 302 and page["Location"] == reverse(
            "behaviour_job", args=[job.pk]
        )
        done = wait_for(
            lambda: BehaviourSearch.objects.filter(pk=job.pk, status=JobStatus.SUCCEEDED).first(),
            timeout=90,
        )
        asked = list(srv.requests)
    assert (done.candidates, done.labelled, done.matched, done.failed) == (6, 6, 3, 0)
    assert done.progress == 1.0 and done.phase == "done" and done.clustered
    assert done.judge_tokens_in > 0 and done.judge_tokens_out > 0
    assert sorted(asked_actions(srv)) == sorted(a for a, _ in STEPS)  # each once
    assert all(b["temperature"] == 0.1 and b["max_tokens"] == 256 for b in asked)
    clusters = {c.name: c.size for c in BehaviourCluster.objects.filter(job=done)}
    assert clusters == {"rm deletions": 2, "find deletions": 1}
    html = researcher_client.get(reverse("behaviour_job", args=[done.pk])).content.decode()
    assert 'id="behaviour-status">Done<' in html
    assert "rm deletions · 2" in html and "find deletions · 1" in html
    assert (
        "<strong>6</strong> candidates: 6 labelled by the judge (<strong>3 matches</strong>, 3 no)"
        in html
    )


@pytest.mark.django_db(transaction=True)
@pytest.mark.worker
def test_cancel_keeps_the_labels_and_resume_asks_only_about_the_rest(
    researcher_client, project, default_worker
):
    make_trajectory(project, steps=STEPS)
    release = threading.Event()

    def responder(body, index):
        if index >= 2 and not release.is_set():
            release.wait(timeout=60)  # the third question waits: the search is cancelled then
        return judge_responder(body, index)

    with fake_openai_server(responder) as srv:
        judge = judge_of(project, srv.base_url)
        researcher_client.post(
            reverse("behaviour_new", args=[project.pk]), form(judge, concurrency=1)
        )
        job = BehaviourSearch.objects.get()
        wait_for(lambda: BehaviourLabel.objects.filter(job=job).count() == 2, timeout=90)
        researcher_client.post(reverse("behaviour_cancel", args=[job.pk]))
        # the worker sees it (its monitor marks the phase) before the held answer comes
        wait_for(lambda: BehaviourSearch.objects.filter(pk=job.pk, phase="cancelling").exists())
        release.set()
        cancelled = wait_job(job)
        assert cancelled.status == JobStatus.CANCELLED and cancelled.error == ""
        kept = BehaviourLabel.objects.filter(job=job).count()
        assert kept == 3 and cancelled.labelled == 3  # the one in flight was saved too
        page = researcher_client.get(reverse("behaviour_job", args=[job.pk])).content.decode()
        assert 'id="behaviour-status">Cancelled<' in page and 'id="behaviour-resume"' in page
        assert "6</strong> candidates: 3 labelled by the judge" in page
        assert "0 failed, 3 not asked</p>" in page
        # the newest three were asked: git status (no), find -delete and rm -rf (yes)
        assert cancelled.matched == 2
        assert "Not grouped: the search stopped before it grouped" in page

        researcher_client.post(reverse("behaviour_resume", args=[job.pk]))
        done = wait_for(
            lambda: BehaviourSearch.objects.filter(pk=job.pk, status=JobStatus.SUCCEEDED).first(),
            timeout=90,
        )
        actions = asked_actions(srv)
    assert (done.labelled, done.matched, done.failed, done.candidates) == (6, 3, 0, 6)
    assert sorted(actions) == sorted(a for a, _ in STEPS)  # nobody asked twice
    assert BehaviourLabel.objects.filter(job=job).count() == 6 and done.clustered


def closed_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


@pytest.mark.django_db(transaction=True)
@pytest.mark.worker
def test_a_judge_that_cannot_be_reached_fails_the_search_naming_it(
    researcher_client, project, default_worker
):
    make_trajectory(project, steps=STEPS)
    url = closed_url()
    judge = judge_of(project, url)
    researcher_client.post(reverse("behaviour_new", args=[project.pk]), form(judge, concurrency=1))
    failed = wait_job(BehaviourSearch.objects.get())
    assert failed.status == JobStatus.FAILED and failed.phase == "failed"
    assert failed.error.startswith(
        f"the judge model 'jm' at {url} cannot be reached: Connection error"
    )
    assert (
        "No candidate was labelled (3 candidates tried, twice each; the other 3 not tried)"
        in failed.error
    )
    assert failed.error.endswith("Resume the search once the server answers.")
    assert (failed.failed, failed.labelled) == (3, 0)
    html = researcher_client.get(reverse("behaviour_job", args=[failed.pk])).content.decode()
    assert f"at {url} cannot be reached" in html and 'id="behaviour-status">Failed<' in html
    rows = researcher_client.get(reverse("behaviour_job", args=[failed.pk]) + "?match=failed")
    assert (
        len(re.findall(r'class="judge-failure">[^<]*Connection refused', rows.content.decode()))
        == 3
    )


# ---- in this process ---------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_judge_that_answers_no_verdict_fails_the_search_saying_so(project):
    make_trajectory(project, steps=STEPS[:2])
    with fake_openai_server(lambda body, index: "I would rather not say.") as srv:
        judge = judge_of(project, srv.base_url)
        job = service.start_behaviour_search(
            project, None, service.BehaviourData(judge=judge, description="deletes", concurrency=2)
        )
        job = run(job)
    assert job.status == JobStatus.FAILED and (job.failed, job.labelled) == (2, 0)
    assert job.error.startswith(
        "no candidate was labelled: the judge's answer to every one of the 2 held no verdict"
    )
    assert "the answer has no <verdict> tag and no JSON object" in job.error
    label = BehaviourLabel.objects.filter(job=job).first()
    assert label is not None and label.raw == "I would rather not say." and not label.ok


@pytest.mark.django_db(transaction=True)
def test_near_its_time_limit_a_search_hands_over_to_a_new_message(
    project, isolated_queues, monkeypatch
):
    from studio.jobs import evaluations

    make_trajectory(project, steps=STEPS)
    with fake_openai_server(judge_responder) as srv:
        judge = judge_of(project, srv.base_url)
        job = service.start_behaviour_search(
            project, None, service.BehaviourData(judge=judge, description="deletes")
        )
        monkeypatch.setattr(evaluations, "task_budget_s", lambda: -1.0)  # out of time at once
        job = run(job)
        assert job.status == JobStatus.QUEUED and job.message_id not in ("", f"m-{job.pk}")
        assert job.candidate_ids is not None and len(job.candidate_ids) == 6  # chosen, kept
        assert srv.requests == [] and not BehaviourLabel.objects.filter(job=job).exists()
        monkeypatch.setattr(evaluations, "task_budget_s", lambda: 600.0)
        BehaviourSearch.objects.filter(pk=job.pk).update(message_id="again")
        run_in_thread(job.pk, "again")
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED and job.labelled == 6, job.error


@pytest.mark.django_db
def test_a_search_whose_worker_died_is_failed_by_the_sweeper_keeping_its_labels(project, settings):
    from studio.jobs.sweeper import reap_stale_jobs

    settings.STUDIO_JOB_STALE_S = 8
    make_trajectory(project, steps=STEPS)
    judge = judge_of(project, "http://127.0.0.1:9/v1")
    job = service.start_behaviour_search(
        project, None, service.BehaviourData(judge=judge, description="deletes")
    )
    long_ago = timezone.now() - timedelta(minutes=5)
    BehaviourSearch.objects.filter(pk=job.pk).update(
        status=JobStatus.RUNNING, started_at=long_ago, heartbeat_at=long_ago, phase="labelling"
    )
    assert reap_stale_jobs() == 1
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED and job.phase == "failed"
    assert job.error.endswith("use Resume (its labels are kept).")


@pytest.mark.django_db(transaction=True)
def test_a_cancel_while_the_groups_are_named_keeps_the_labels_and_resume_groups_them(project):
    """Cancel in the clustering phase: the naming request in flight ends, no other goes out,
    no half-named groups are saved (the page says the matches are not grouped); Resume asks
    no candidate again and groups them."""
    from django.db import connection

    from studio.jobs.behaviour import run_behaviour_search

    make_trajectory(project, steps=STEPS)
    naming, release = threading.Event(), threading.Event()

    def responder(body, index):
        if body["messages"][0]["content"].startswith(B.NAMING_SYSTEM_START):
            naming.set()
            release.wait(timeout=60)
        return judge_responder(body, index)

    with fake_openai_server(responder) as srv:
        judge = judge_of(project, srv.base_url)
        job = service.start_behaviour_search(
            project,
            None,
            service.BehaviourData(judge=judge, description="deletes", concurrency=1),
        )
        BehaviourSearch.objects.filter(pk=job.pk).update(message_id="m1")

        def body():
            try:
                run_behaviour_search(job.pk, "m1")
            finally:
                connection.close()

        runner = threading.Thread(target=body)
        runner.start()
        try:
            assert naming.wait(timeout=60)
            service.cancel_search(job)
            wait_for(lambda: BehaviourSearch.objects.filter(pk=job.pk, phase="cancelling").exists())
        finally:
            release.set()
            runner.join(timeout=120)
        namings = [
            b for b in srv.requests if b["messages"][0]["content"].startswith(B.NAMING_SYSTEM_START)
        ]
        job.refresh_from_db()
        assert job.status == JobStatus.CANCELLED and job.error == ""
        assert len(namings) == 1  # two groups, the second never asked to be named
        assert (job.labelled, job.matched, job.clustered) == (6, 3, False)
        assert not BehaviourCluster.objects.filter(job=job).exists()
        assert job.judge_tokens_out > 0

        assert service.resume_search(job)
        BehaviourSearch.objects.filter(pk=job.pk).update(message_id="m2")
        run_in_thread(job.pk, "m2")
        job.refresh_from_db()
        actions = asked_actions(srv)
    assert job.status == JobStatus.SUCCEEDED and job.clustered and job.progress == 1.0
    assert sorted(actions) == sorted(a for a, _ in STEPS)  # no candidate asked again
    clusters = {c.name: c.size for c in BehaviourCluster.objects.filter(job=job)}
    assert clusters == {"rm deletions": 2, "find deletions": 1}
    assert job.params["clustered_by"] == "words"
