"""A judge whose server cannot be reached: the judge tells a connection failure from an answer
that came back, and a judge job stops after its first few steps with a message naming the
judge model and its URL, instead of trying every step; each step's reason shows in its row."""

from __future__ import annotations

import re
import socket

import pytest
from django.urls import reverse

from inference.judge import Judge, connection_failure
from studio.jobs.judging import UNREACHABLE_AFTER
from studio.models import JobStatus, JudgeJob, StepJudgement
from studio.services.endpoints import EndpointData, save_endpoint
from tests.support.branching import make_child, make_job, make_trajectory
from tests.support.fake_openai import fake_openai_server

MESSAGES = [{"role": "user", "content": "score this"}]


def closed_url() -> str:
    """The URL of a port of 127.0.0.1 that nothing listens on (taken, then let go)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


def judge_endpoint(project, base_url):
    data = EndpointData(name="judge", role="judge", kind="openai", base_url=base_url, model="jm")
    return save_endpoint(project, data).endpoint


@pytest.fixture
def many_steps(project):
    """A fork job whose futures hold 8 simulated steps to judge."""
    traj, root = make_trajectory(project)
    job = make_job(root, 0, status="succeeded")
    make_child(root, 0, [f"obs {i}" for i in range(5)], name="long", job=job)
    make_child(root, 2, ["x", "y", "z"], name="short", job=job, sample_index=1, action="ls -x")
    return job


def test_the_judge_says_when_no_attempt_reached_its_server():
    asked = Judge(base_url=closed_url(), model="jm", attempts=2, backoff_s=0).ask(MESSAGES, str)
    assert asked.value is None and asked.attempts == 2
    assert asked.unreachable == "Connection error ([Errno 111] Connection refused)"
    assert asked.errors[0].startswith("attempt 1: APIConnectionError: Connection error (")

    with fake_openai_server(lambda body, index: (500, {"message": "judge down"})) as srv:
        asked = Judge(base_url=srv.base_url, model="jm", attempts=2, backoff_s=0).ask(MESSAGES, str)
    assert asked.value is None and asked.unreachable == ""  # it answered, with an error
    assert "judge down" in asked.errors[0] or "500" in asked.errors[0]


def test_a_connection_failure_is_told_from_a_timeout_and_an_answer():
    import httpx
    from openai import APIConnectionError, APITimeoutError

    request = httpx.Request("POST", "http://h/v1/chat/completions")
    try:
        try:
            raise httpx.ConnectError("[Errno -2] Name or service not known")
        except httpx.ConnectError as err:
            raise APIConnectionError(request=request) from err
    except APIConnectionError as exc:
        assert connection_failure(exc) == "Connection error ([Errno -2] Name or service not known)"
    assert connection_failure(APITimeoutError(request=request)) is None
    assert connection_failure(ValueError("no JSON object")) is None


@pytest.mark.django_db(transaction=True)
def test_a_judge_job_against_an_unreachable_server_fails_fast_naming_it(
    project, many_steps, researcher_client
):
    from studio.jobs.judging import run_judge_job
    from studio.services.judging import JudgeData, start_judging

    url = closed_url()
    judge = judge_endpoint(project, url)
    data = JudgeData(judge=judge, target="fork", fork=many_steps, concurrency=1)
    made = start_judging(project, None, data)
    JudgeJob.objects.filter(pk=made.pk).update(message_id="m0")
    run_judge_job(made.pk, "m0")  # the task's body, as a worker runs it
    made.refresh_from_db()

    assert made.status == JobStatus.FAILED and made.steps_total == 8
    assert made.steps_failed == UNREACHABLE_AFTER == 3 and made.steps_judged == 0
    assert made.error == (
        f"the judge model 'jm' at {url} cannot be reached: Connection error ([Errno 111] "
        "Connection refused). No step was judged (3 steps tried, twice each; the other 5 not "
        "tried). Resume the job once the server answers."
    )
    failed = list(StepJudgement.objects.filter(job=made))
    assert len(failed) == 3 and all(not j.ok for j in failed)
    assert all(
        re.search(r"attempt 2: APIConnectionError: .*Connection refused", j.error) for j in failed
    )

    html = researcher_client.get(reverse("judge_job", args=[made.pk])).content.decode()
    assert f"at {url} cannot be reached" in html
    assert "8 simulated steps to judge: 0 judged, 3 failed" in html
    # each failed row says why in the row itself, not only in a tooltip
    rows = re.findall(r'<td colspan="\d+" class="judge-failure small-text">([^<]*)</td>', html)
    assert len(rows) == 3 and all("Connection refused" in r for r in rows)


@pytest.mark.django_db(transaction=True)
def test_a_judge_that_answers_with_errors_is_tried_on_every_step(project, many_steps):
    """An error the server answered with (here 500) is no reason to stop early: the server is
    up, the next step may be judged."""
    from studio.jobs.judging import run_judge_job
    from studio.services.judging import JudgeData, start_judging

    with fake_openai_server(lambda body, index: (500, {"message": "judge down"})) as srv:
        judge = judge_endpoint(project, srv.base_url)
        data = JudgeData(judge=judge, target="fork", fork=many_steps, concurrency=8)
        made = start_judging(project, None, data)
        JudgeJob.objects.filter(pk=made.pk).update(message_id="m0")
        run_judge_job(made.pk, "m0")
        asked = len(srv.requests)
    made.refresh_from_db()
    assert made.status == JobStatus.FAILED and made.steps_failed == 8 and asked == 16
    assert made.error.startswith("no step was judged: every one of the 8 failed")


@pytest.mark.django_db(transaction=True)
def test_a_small_job_against_an_unreachable_server_names_it_after_trying_every_step(project):
    """A job of fewer steps than its concurrency hands every step out before the early stop
    can look: it still ends naming the judge model and its URL, with true counts."""
    from studio.jobs.judging import run_judge_job
    from studio.services.judging import JudgeData, start_judging

    traj, root = make_trajectory(project)
    fork = make_job(root, 0, status="succeeded")
    make_child(root, 0, [f"obs {i}" for i in range(4)], name="four", job=fork)
    url = closed_url()
    data = JudgeData(judge=judge_endpoint(project, url), target="fork", fork=fork, concurrency=8)
    made = start_judging(project, None, data)
    JudgeJob.objects.filter(pk=made.pk).update(message_id="m0")
    run_judge_job(made.pk, "m0")
    made.refresh_from_db()

    assert made.status == JobStatus.FAILED and made.steps_total == 4
    assert (made.steps_failed, made.steps_judged) == (4, 0)
    assert made.error == (
        f"the judge model 'jm' at {url} cannot be reached: Connection error ([Errno 111] "
        "Connection refused). No step was judged (4 steps tried, twice each). "
        "Resume the job once the server answers."
    )
    assert StepJudgement.objects.filter(job=made, ok=False).count() == 4
