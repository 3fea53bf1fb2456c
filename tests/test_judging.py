"""The AgentWorldBench judge on the studio's simulated steps: which steps a job judges and
against what reference, the two prompts, a job from the form run by a real worker against
the fake OpenAI-compatible judge, scores beside people's on the step page, the fidelity
panel, the judge against people, and the queue filter on the judge's score."""

from __future__ import annotations

import json

import pytest
from django.urls import reverse

from inference.judge import NO_REFERENCE_DIMENSIONS, build_judge_messages, parse_judgement
from studio.models import JobStatus, JudgeJob, StepAnnotation, StepJudgement
from studio.services.endpoints import EndpointData, save_endpoint
from studio.services.judging import (
    fidelity,
    items_for,
    judge_vs_human,
    judged_steps,
    latest_judgements,
    steps_judged_below,
)
from studio.services.queues import QueueData, create_queue
from tests.support.branching import make_child, make_job, make_trajectory
from tests.support.fake_openai import fake_openai_server
from tests.support.worker import wait_for

DIMS = ("format", "factuality", "consistency", "realism", "quality")


def judge_answer(scores: dict[str, int]) -> str:
    block = {"scores": scores, "strengths": ["shape"], "weaknesses": ["values"]}
    return f"<final_evaluation>\n```json\n{json.dumps(block)}\n```\n</final_evaluation>"


def responder(body, index):
    """Scores 4 on everything against a reference, 2 on the two dimensions without one."""
    user = body["messages"][1]["content"]
    if "## Reference observation" in user:
        return judge_answer(dict.fromkeys(DIMS, 4))
    return judge_answer({"consistency": 2, "realism": 2})


def judge_endpoint(project, base_url):
    data = EndpointData(name="judge", role="judge", kind="openai", base_url=base_url, model="jm")
    return save_endpoint(project, data).endpoint


@pytest.fixture
def fork(project):
    """A recorded trajectory and two futures forked at step 2: one replays the recorded
    action (so the recorded observation is its reference at step 2), one has a new action."""
    traj, root = make_trajectory(project)
    job = make_job(root, 2, status="succeeded")
    same = make_child(root, 2, ["3 passed", "clean"], name="same", job=job)
    edited = make_child(
        root, 2, ["error: no tests"], name="edited", origin="edited", action="pytest -x", job=job
    )
    return traj, root, job, same, edited


@pytest.mark.django_db
def test_a_step_is_judged_against_the_recorded_observation_only_where_the_action_is_the_same(
    project, fork
):
    traj, root, job, same, edited = fork
    steps = list(judged_steps(JudgeJob(project=project, target="fork", fork=job)))
    items = {(i.step.branch_id, i.step.index): i for i in items_for(steps)}
    assert set(items) == {(same.pk, 2), (same.pk, 3), (edited.pk, 2)}
    at_fork = items[(same.pk, 2)]
    assert at_fork.reference is not None and at_fork.reference.branch_id == root.pk
    row = at_fork.row
    assert row["no_reference"] is False and row["turn_idx"] == 3
    assert row["response"][2].endswith("3 passed in 0.12s")  # the recorded observation
    assert row["predicted_observation"] == "3 passed"
    # the inherited history is the recorded branch's
    assert row["prompt"][0].endswith("ls") and row["response"][0].endswith("setup.py  src")
    # the edited action, and a step after the fork: judged without a reference
    assert items[(edited.pk, 2)].row["no_reference"] and items[(edited.pk, 2)].reference is None
    # step 3 replays the recorded action too ("git status" at 3): its reference is step 3's
    assert items[(same.pk, 3)].reference is not None
    messages = build_judge_messages(items[(edited.pk, 2)].row)
    assert "Reference observation" not in messages[1]["content"]
    assert "pytest -x" in messages[1]["content"] and "error: no tests" in messages[1]["content"]
    assert "consistency" in messages[0]["content"] and "factuality" not in messages[0]["content"]
    # after an edited action, a replayed recorded action has no reference (the history
    # diverged), and neither has a step simulated in a fictional world
    later = make_child(edited, 3, ["nothing to commit"], name="after the edit")
    worldly = make_child(root, 4, ["done"], name="in a world")
    worldly.steps.update(meta={"world": {"name": "w", "version": 1}})
    items = {i.step.branch_id: i for i in items_for(later.steps.all())}
    items.update({i.step.branch_id: i for i in items_for(worldly.steps.all())})
    assert items[later.pk].reference is None and items[later.pk].row["no_reference"]
    assert items[worldly.pk].reference is None
    # a recorded branch has nothing to judge
    assert not judged_steps(JudgeJob(project=project, target="branch", branch=root)).exists()


def test_a_judgement_without_a_reference_reads_its_two_dimensions_only():
    found = parse_judgement(
        judge_answer({"consistency": 5, "realism": "3/5"}), NO_REFERENCE_DIMENSIONS
    )
    assert found.scores == {"consistency": 5, "realism": 3} and found.total == 4
    # a partial answer is scored on what it scores, as the reference's parser takes it
    partial = parse_judgement(judge_answer({"consistency": 5}), NO_REFERENCE_DIMENSIONS)
    assert partial.scores == {"consistency": 5} and partial.missing == ["realism"]
    with pytest.raises(ValueError, match="missing dimensions .*'consistency', 'realism'"):
        parse_judgement(judge_answer({"format": 5}), NO_REFERENCE_DIMENSIONS)


@pytest.mark.django_db
def test_the_form_refuses_a_target_without_simulated_steps_and_another_projects_target(
    researcher_client, project, fork
):
    from django.test import Client

    traj, root, job, same, edited = fork
    judge = judge_endpoint(project, "http://127.0.0.1:9/v1")
    url = reverse("judge_new", args=[project.pk])
    form = {"judge": judge.pk, "target": "branch", "branch": root.pk, "temperature": 0.6,
            "max_tokens": 64, "concurrency": 2}  # fmt: skip
    page = researcher_client.post(url, form)
    assert page.status_code == 400 and "has no simulated step to judge" in page.content.decode()
    other_traj, other_root = make_trajectory(project.other, key="other")
    page = researcher_client.post(url, {**form, "branch": other_root.pk})
    assert page.status_code == 400 and "not one of this project" in page.content.decode()
    assert not JudgeJob.objects.exists()
    annotator = Client()
    annotator.force_login(project.users["annotator"])
    assert annotator.post(url, {**form, "branch": same.pk}).status_code == 403


@pytest.mark.django_db(transaction=True)
@pytest.mark.worker
def test_a_judge_job_from_the_form_scores_a_forks_futures_on_a_worker(
    researcher_client, project, fork, default_worker
):
    traj, root, job, same, edited = fork
    with fake_openai_server(responder) as srv:
        judge = judge_endpoint(project, srv.base_url)
        page = researcher_client.post(
            reverse("judge_new", args=[project.pk]),
            {
                "judge": judge.pk,
                "target": "fork",
                "fork": job.pk,
                "temperature": 0.2,
                "max_tokens": 128,
                "concurrency": 2,
            },  # fmt: skip
        )
        made = JudgeJob.objects.get()
        assert page.status_code == 302 and page["Location"] == reverse("judge_job", args=[made.pk])
        done = wait_for(
            lambda: JudgeJob.objects.filter(pk=made.pk, status=JobStatus.SUCCEEDED).first(),
            timeout=90,
        )
        asked = list(srv.requests)
    assert done.steps_total == 3 and done.steps_judged == 3 and done.steps_failed == 0
    assert done.progress == 1.0 and done.judge_tokens_out > 0
    assert all(b["temperature"] == 0.2 and b["max_tokens"] == 128 for b in asked)
    by_step = {(j.step.branch_id, j.step.index): j for j in StepJudgement.objects.all()}
    assert by_step[(same.pk, 2)].scores == dict.fromkeys(DIMS, 4)
    assert by_step[(same.pk, 2)].reference is not None
    assert by_step[(edited.pk, 2)].scores == {"consistency": 2, "realism": 2}
    assert by_step[(edited.pk, 2)].total_score == 2.0

    html = researcher_client.get(reverse("judge_job", args=[done.pk])).content.decode()
    assert "3 simulated steps to judge: 3 judged, 0 failed" in html and "Succeeded" in html
    # beside people's ratings on the step's page
    step = by_step[(same.pk, 2)].step
    page = researcher_client.get(reverse("step_annotate", args=[step.pk])).content.decode()
    assert 'id="judge-total">4.00' in page and "against the recorded observation" in page
    # the fidelity panel
    page = researcher_client.get(reverse("branch_fidelity", args=[same.pk])).content.decode()
    assert "2 judged steps" in page and 'id="fidelity-data"' in page


@pytest.mark.django_db
def test_fidelity_the_judge_against_people_and_the_queue_filter_on_the_judges_score(project, fork):
    traj, root, job, same, edited = fork
    steps = {
        (s.branch_id, s.index): s
        for s in judged_steps(JudgeJob(project=project, target="fork", fork=job))
    }
    a, b, c = steps[(same.pk, 2)], steps[(same.pk, 3)], steps[(edited.pk, 2)]
    for step, scores in (
        (a, dict.fromkeys(DIMS, 5)),
        (b, {"consistency": 2, "realism": 1}),
        (c, {"consistency": 4, "realism": 4}),
    ):
        StepJudgement.objects.create(
            step=step,
            judge_model="jm",
            scores=scores,
            total_score=sum(scores.values()) / len(scores),
        )
    # an older failed and an older lower judgement do not count
    StepJudgement.objects.create(step=a, judge_model="jm", ok=False, error="boom")
    assert latest_judgements([a.pk])[a.pk].total_score == 5
    found = fidelity(same)
    assert found.indexes == [2, 3] and found.scores["format"] == [5, None]
    assert found.scores["realism"] == [5, 1] and found.mean["realism"] == 3.0

    below = set(steps_judged_below(project, 3.0).values_list("pk", flat=True))
    assert below == {b.pk}
    queue = create_queue(
        project, project.users["researcher"], QueueData(name="bad ones", judge_below=3.0)
    )
    assert list(queue.items.values_list("step_id", flat=True)) == [b.pk]
    assert "judge score below 3" in queue.description

    people = [project.users["annotator"], project.users["researcher"]]
    for step, rating in ((a, 5), (b, 1), (c, 3)):
        for person in people:
            StepAnnotation.objects.create(
                step=step, author=person, ratings={"realism": rating, "consistency": rating}
            )
    versus = {r["dimension"]: r for r in judge_vs_human([a.pk, b.pk, c.pk]).rows}
    assert versus["realism"]["pairs"] == 3 and versus["realism"]["mean_abs_diff"] == 0.33
    assert versus["realism"]["alpha"] is not None and versus["realism"]["alpha"] > 0.5
    assert versus["format"]["pairs"] == 0 and versus["format"]["alpha"] is None


@pytest.mark.django_db(transaction=True)
def test_a_job_out_of_time_hands_over_one_that_failed_everywhere_fails_and_resumes(
    project, fork, isolated_queues, monkeypatch
):
    from studio.jobs import evaluations
    from studio.jobs.judging import run_judge_job
    from studio.services.judging import JudgeData, resume_judging, start_judging

    traj, root, job, same, edited = fork
    broken = {"on": True}

    def answer(body, index):
        if broken["on"]:
            return (500, {"message": "judge down"})
        return responder(body, index)

    with fake_openai_server(answer) as srv:
        data = JudgeData(
            judge=judge_endpoint(project, srv.base_url), target="fork", fork=job, concurrency=3
        )
        made = start_judging(project, None, data)
        JudgeJob.objects.filter(pk=made.pk).update(message_id="m0")
        monkeypatch.setattr(evaluations, "task_budget_s", lambda: -1.0)  # out of time at once
        run_judge_job(made.pk, "m0")  # the task's body, as a worker runs it
        made.refresh_from_db()
        assert made.status == JobStatus.QUEUED and made.message_id not in ("", "m0")
        assert srv.requests == []  # handed over before judging anything
        monkeypatch.setattr(evaluations, "task_budget_s", lambda: 600.0)
        run_judge_job(made.pk, made.message_id)
        made.refresh_from_db()
        assert made.status == JobStatus.FAILED and made.steps_failed == 3
        assert made.error.startswith("no step was judged: every one of the 3 failed")
        page_error = StepJudgement.objects.filter(job=made, ok=False).first().error
        assert "judge down" in page_error or "500" in page_error
        broken["on"] = False
        assert resume_judging(made)
        run_judge_job(made.pk, "m2")
    made.refresh_from_db()
    assert made.status == JobStatus.SUCCEEDED and made.steps_judged == 3 and made.steps_failed == 0
    assert StepJudgement.objects.filter(job=made, ok=True).count() == 3
    assert not resume_judging(made)  # only a stopped job resumes


@pytest.mark.django_db(transaction=True)
def test_a_cancel_while_a_request_is_in_flight_sends_no_other(project, fork):
    """The worker looks at Cancel after the answers in flight come, not before it waits for
    them: one step at a time, the first answer held until the worker has seen the Cancel,
    and no second request goes out."""
    import threading

    from django.db import connection

    from studio.jobs.judging import run_judge_job
    from studio.services.judging import JudgeData, cancel_judging, start_judging

    traj, root, job, same, edited = fork
    arrived, release = threading.Event(), threading.Event()

    def answer(body, index):
        arrived.set()
        release.wait(timeout=60)
        return responder(body, index)

    with fake_openai_server(answer) as srv:
        data = JudgeData(
            judge=judge_endpoint(project, srv.base_url), target="fork", fork=job, concurrency=1
        )
        made = start_judging(project, None, data)
        JudgeJob.objects.filter(pk=made.pk).update(message_id="m0")

        def body():
            try:
                run_judge_job(made.pk, "m0")  # the task's body, as a worker runs it
            finally:
                connection.close()

        runner = threading.Thread(target=body)
        runner.start()
        try:
            assert arrived.wait(timeout=60)
            cancel_judging(made)
            # the worker's monitor has seen it while the first answer is still held
            wait_for(lambda: JudgeJob.objects.filter(pk=made.pk, phase="cancelling").exists())
        finally:
            release.set()
            runner.join(timeout=120)
        asked = len(srv.requests)
    made.refresh_from_db()
    assert made.status == JobStatus.CANCELLED and made.phase == "cancelled"
    assert asked == 1 and made.steps_judged == 1  # the one in flight was saved, no other sent
    assert StepJudgement.objects.filter(job=made).count() == 1
