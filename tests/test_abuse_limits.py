"""Abuse limits, in this process: login throttling (django-axes: 5 wrong passwords per
username and client IP lock the pair out for 15 minutes, the right password included), upload
size and rate per person, and what one project may ask of the workers (futures per
simulation, history sent to the model, jobs at once, episode steps waiting). Each refusal is a
clear message naming the limit and its setting, with its HTTP status, and nothing is written.
The lock-out in a real browser: tests/test_browser_lockout.py."""

from __future__ import annotations

import io
import re
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from axes.models import AccessAttempt
from django.conf import settings
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.files.uploadhandler import FileUploadHandler
from django.core.management import CommandError, call_command
from django.db.models import F
from django.http.multipartparser import MultiPartParser
from django.test import Client, RequestFactory
from django.test.client import BOUNDARY, MULTIPART_CONTENT, encode_multipart
from django.urls import reverse
from django.utils import timezone

from studio.models import (
    Dataset,
    DatasetVersion,
    EvaluationRun,
    ExportJob,
    ImportJob,
    JobStatus,
    JudgeJob,
    SimulationJob,
    Trajectory,
)
from studio.services import episodes, job_limits
from studio.services.endpoints import EndpointData, save_endpoint
from studio.upload_handlers import LimitedUploadHandler
from tests.support.branching import make_child, make_job, make_trajectory
from tests.support.imports import native_file, upload

PASSWORD = "pw-for-tests-1"  # the fixtures' users
LOCKED = re.compile(
    r"Too many failed sign-ins for this account from this address; try again in (\d+) "
    r"minutes? or ask an admin to unlock it\."
)


def sign_in(client: Client, username: str, password: str):
    return client.post(reverse("login"), {"username": username, "password": password})


def signed_in(client: Client) -> bool:
    return "_auth_user_id" in client.session


def fail_times(client: Client, username: str, times: int) -> list[int]:
    return [sign_in(client, username, "not-the-password").status_code for _ in range(times)]


# ---- login throttling ----------------------------------------------------------------------


@pytest.mark.django_db
def test_five_wrong_passwords_lock_the_account_out_the_right_one_included(project):
    client = Client()
    assert fail_times(client, "researcher", 4) == [200] * 4  # the form says they did not match
    fifth = sign_in(client, "researcher", "not-the-password")
    assert fifth.status_code == 429
    page = fifth.content.decode()
    assert LOCKED.search(page).group(1) == "15"
    assert "Traceback" not in page and 'name="password"' in page  # the login page, not a trace
    right = sign_in(client, "researcher", PASSWORD)
    assert right.status_code == 429 and LOCKED.search(right.content.decode())
    assert not signed_in(client)
    # attempts during the lock-out are not counted: it ends when the page said it would
    assert AccessAttempt.objects.get(username="researcher").failures_since_start == 5
    # an admin unlocks the account: the right password works again
    call_command("axes_reset_username", "researcher")
    assert sign_in(client, "researcher", PASSWORD).status_code == 302
    assert signed_in(client)


@pytest.mark.django_db
def test_an_admin_unlocks_from_the_admin_pages(project, django_user_model):
    fail_times(Client(), "researcher", 5)
    attempt = AccessAttempt.objects.get(username="researcher")
    boss = Client()
    boss.force_login(django_user_model.objects.create_superuser("boss", password=PASSWORD))
    listed = boss.get(reverse("admin:axes_accessattempt_changelist")).content.decode()
    assert "researcher" in listed
    url = reverse("admin:axes_accessattempt_delete", args=[attempt.pk])
    assert boss.post(url, {"post": "yes"}).status_code == 302
    assert sign_in(Client(), "researcher", PASSWORD).status_code == 302


@pytest.mark.django_db
def test_the_lock_out_counts_down_and_ends_after_its_minutes(project):
    client = Client()
    fail_times(client, "researcher", 5)
    AccessAttempt.objects.update(attempt_time=F("attempt_time") - timedelta(minutes=6))
    page = sign_in(client, "researcher", PASSWORD)
    assert page.status_code == 429 and LOCKED.search(page.content.decode()).group(1) == "9"
    AccessAttempt.objects.update(attempt_time=F("attempt_time") - timedelta(minutes=10))
    assert sign_in(client, "researcher", PASSWORD).status_code == 302  # 16 minutes on


@pytest.mark.django_db
def test_the_lock_out_is_per_username_and_client_address(project):
    here = Client()
    fail_times(here, "researcher", 5)
    assert sign_in(here, "researcher", PASSWORD).status_code == 429
    # another account from the same address, the same account from another address
    assert sign_in(Client(), "admin", PASSWORD).status_code == 302
    elsewhere = Client(REMOTE_ADDR="10.1.2.3")
    assert sign_in(elsewhere, "researcher", PASSWORD).status_code == 302


@pytest.mark.django_db
def test_a_good_sign_in_forgets_the_earlier_failures(project):
    client = Client()
    fail_times(client, "researcher", 4)
    assert sign_in(client, "researcher", PASSWORD).status_code == 302
    client.logout()
    assert fail_times(client, "researcher", 4) == [200] * 4  # not locked: counted from 0


@pytest.mark.django_db
def test_the_limit_and_minutes_are_settings(project, settings):
    settings.AXES_FAILURE_LIMIT = 2
    settings.AXES_COOLOFF_TIME = timedelta(minutes=3)
    client = Client()
    assert fail_times(client, "researcher", 2) == [200, 429]
    assert LOCKED.search(sign_in(client, "researcher", PASSWORD).content.decode()).group(1) == "3"


@pytest.mark.django_db
def test_behind_a_proxy_the_client_address_comes_from_the_configured_header(project, settings):
    # what STUDIO_CLIENT_IP_HEADER=X-Real-IP sets (checked below), in this process
    settings.AXES_IPWARE_META_PRECEDENCE_ORDER = ("HTTP_X_REAL_IP", "REMOTE_ADDR")
    attacker = Client(HTTP_X_REAL_IP="203.0.113.7")  # all through one proxy: one REMOTE_ADDR
    fail_times(attacker, "researcher", 5)
    assert sign_in(attacker, "researcher", PASSWORD).status_code == 429
    assert AccessAttempt.objects.get().ip_address == "203.0.113.7"
    person = Client(HTTP_X_REAL_IP="198.51.100.20")
    assert sign_in(person, "researcher", PASSWORD).status_code == 302


def settings_of(env: dict[str, str], expression: str) -> subprocess.CompletedProcess:
    code = f"import studio.settings as s; print({expression})"
    return subprocess.run(
        [sys.executable, "-c", code],
        env={"PATH": "/usr/bin:/bin", "DEBUG": "1", **env},
        cwd=Path(__file__).resolve().parents[1],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_throttling_settings_come_from_the_environment():
    shown = (
        "(s.AXES_FAILURE_LIMIT, s.AXES_COOLOFF_TIME.seconds, s.AXES_IPWARE_META_PRECEDENCE_ORDER)"
    )
    default = settings_of({}, shown)
    assert default.stdout.strip() == "(5, 900, ('REMOTE_ADDR',))", default.stderr
    env = {
        "STUDIO_LOGIN_FAILURE_LIMIT": "3",
        "STUDIO_LOGIN_LOCKOUT_MINUTES": "30",
        "STUDIO_CLIENT_IP_HEADER": "X-Real-IP",
    }
    given = settings_of(env, shown)
    assert given.stdout.strip() == "(3, 1800, ('HTTP_X_REAL_IP', 'REMOTE_ADDR'))", given.stderr
    bad = settings_of({"STUDIO_CLIENT_IP_HEADER": "X Real IP"}, "1")
    assert bad.returncode != 0 and "STUDIO_CLIENT_IP_HEADER='X Real IP' is not a header" in (
        bad.stderr
    )
    too_many = settings_of({"STUDIO_MAX_FUTURES": "65"}, "1")
    assert "STUDIO_MAX_FUTURES=65 must be at most 64" in too_many.stderr


@pytest.mark.django_db(transaction=True)
def test_under_asgi_the_lock_out_page_is_the_same(project):
    """uvicorn runs the studio: axes' middleware takes its async path there."""
    import http.cookiejar
    import urllib.error
    import urllib.parse
    import urllib.request

    from tests.support.asgi import asgi_server

    jar = http.cookiejar.CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))

    def post(base: str, password: str) -> tuple[int, str]:
        form = opener.open(f"{base}/login/", timeout=30).read().decode()
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form).group(1)
        body = urllib.parse.urlencode(
            {"csrfmiddlewaretoken": token, "username": "researcher", "password": password}
        ).encode()
        try:
            with opener.open(f"{base}/login/", data=body, timeout=30) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    with asgi_server() as base:
        statuses = [post(base, "not-the-password")[0] for _ in range(5)]
        status, page = post(base, PASSWORD)
    assert statuses == [200] * 4 + [429]
    assert status == 429 and LOCKED.search(page).group(1) == "15"


# ---- uploads ---------------------------------------------------------------------------------


@pytest.fixture
def media(settings, tmp_path):
    settings.MEDIA_ROOT = tmp_path  # this test's uploads alone
    return tmp_path


def stored_uploads(project) -> list[Path]:
    """The uploaded files kept (one folder each, beside what the import keeps of its own)."""
    folder = Path(settings.MEDIA_ROOT) / "imports" / str(project.pk)
    return [p for p in folder.rglob("*") if p.is_file() and not p.name.startswith(".")]


@pytest.mark.django_db
def test_an_upload_over_the_size_limit_is_refused_and_nothing_is_stored(
    researcher_client, project, settings, media
):
    settings.STUDIO_MAX_UPLOAD_BYTES = 1000
    page = researcher_client.get(reverse("import_upload", args=[project.pk])).content.decode()
    assert "at most 1000\xa0bytes a file and 60 uploads an hour" in page  # the form says so
    for size in (5000, 200_000):  # found while reading; told by the body's length up front
        response = upload(researcher_client, project, b"x" * size, name="big.jsonl")
        html = response.content.decode()
        assert response.status_code == 413
        assert 'data-error-for="file"' in html and (
            "big.jsonl is larger than the upload limit of 1000\xa0bytes a file "
            "(STUDIO_MAX_UPLOAD_MB); nothing of it was stored." in html
        )
    assert not ImportJob.objects.exists() and not stored_uploads(project)
    ok = upload(researcher_client, project, native_file(1, 1))
    assert ok.status_code == 200 and ImportJob.objects.count() == 1


class CountingHandler(FileUploadHandler):
    """The handler after ours: what it is given is what Django would have stored."""

    received = 0

    def receive_data_chunk(self, raw_data, start):
        self.received += len(raw_data)
        return None

    def file_complete(self, file_size):
        return None


@pytest.mark.parametrize(
    ("size", "limit", "passed_on"),
    [
        (200_000, 1000, 0),  # longer than the limit by far: not a byte of it is read
        (3000, 1000, 0),  # over by little: dropped when the limit is reached (its chunk)
        (3000, 10_000, 3000),  # under the limit: all of it goes on
    ],
)
def test_the_upload_handler_refuses_a_file_before_the_next_handler_stores_it(
    size, limit, passed_on, settings
):
    settings.STUDIO_MAX_UPLOAD_BYTES = limit
    body = encode_multipart(
        BOUNDARY, {"csrfmiddlewaretoken": "t", "file": SimpleUploadedFile("a.jsonl", b"y" * size)}
    )
    request = RequestFactory().get("/")
    ours, after = LimitedUploadHandler(request), CountingHandler(request)
    meta = {"CONTENT_TYPE": MULTIPART_CONTENT, "CONTENT_LENGTH": str(len(body))}
    post, files = MultiPartParser(meta, io.BytesIO(body), [ours, after]).parse()
    assert after.received == passed_on
    assert post["csrfmiddlewaretoken"] == "t"  # the fields before the file are read
    refusal = getattr(request, "upload_refusal", None)
    assert (refusal.status if refusal else None) == (None if passed_on else 413)


@pytest.mark.django_db
def test_uploads_per_hour_are_limited_per_person(researcher_client, project, settings, media):
    settings.STUDIO_MAX_UPLOADS_PER_HOUR = 2
    for _ in range(2):
        assert upload(researcher_client, project, native_file(1, 1)).status_code == 200
    third = upload(researcher_client, project, native_file(1, 1))
    html = third.content.decode()
    assert third.status_code == 429
    assert (
        "You uploaded 2 files in the last hour: the limit is 2 an hour "
        "(STUDIO_MAX_UPLOADS_PER_HOUR). Try again in 60 minutes." in html
    )
    assert ImportJob.objects.count() == 2 and len(stored_uploads(project)) == 2
    # another person is not held back by this one
    other = Client()
    other.force_login(project.users["admin"])
    assert upload(other, project, native_file(1, 1)).status_code == 200
    # the oldest leaves the hour: one more is allowed
    first = ImportJob.objects.filter(requester=project.users["researcher"]).order_by("pk")[0]
    ImportJob.objects.filter(pk=first.pk).update(created_at=timezone.now() - timedelta(hours=1))
    assert upload(researcher_client, project, native_file(1, 1)).status_code == 200


# ---- simulations: futures and history ----------------------------------------------------------

EDITOR = {
    "action": "ls -la", "action_format": "auto", "mode": "next", "max_steps": "", "n": "1",
    "temperature": "0.7", "top_p": "0.95", "max_tokens": "32", "seed": "1",
}  # fmt: skip


def editor_post(project, **changes) -> dict:
    return {**EDITOR, "world_endpoint": str(project.endpoints.get(kind="retrieval").pk), **changes}


def errors_of(html: str) -> str:
    return " ".join(re.findall(r'<ul class="errorlist[^"]*"[^>]*>(.*?)</ul>', html, re.S))


@pytest.mark.django_db
def test_futures_per_simulation_are_capped_by_the_setting(researcher_client, project, settings):
    settings.STUDIO_MAX_FUTURES = 4
    _, root = make_trajectory(project)
    url = reverse("branch_fork", args=[root.pk, 1])
    assert 'max="4"' in researcher_client.get(url).content.decode()  # the field says it first
    page = researcher_client.post(url, editor_post(project, n="5"))
    assert page.status_code == 400
    assert (
        "5 futures: this installation allows at most 4 per simulation (STUDIO_MAX_FUTURES)."
        in errors_of(page.content.decode())
    )
    assert not SimulationJob.objects.exists()
    # a sweep's N x K futures count: 3 perturbations x 2 futures
    from studio.services.simulation import InvalidRequest, build_request, start_simulation

    sweep = [{"kind": "timeout"}, {"kind": "empty_result"}, {"kind": "rate_limit"}]
    request = build_request(root, {"fork_index": 1, "n": 2, "sweep": sweep})
    with pytest.raises(InvalidRequest) as refused:
        start_simulation(user=None, branch=root, request=request)
    assert refused.value.errors["n"] == [
        "a sweep of 3 perturbations x 2 futures is 6 futures: this installation allows at most "
        "4 per simulation (STUDIO_MAX_FUTURES)"
    ]
    assert researcher_client.post(url, editor_post(project, n="4")).status_code == 302


@pytest.mark.django_db
def test_history_steps_sent_to_the_model_are_capped_in_every_mode(
    researcher_client, project, settings
):
    from studio.services.simulation import InvalidRequest, build_request, start_simulation

    settings.STUDIO_MAX_HISTORY_STEPS = 2
    _, root = make_trajectory(project)  # 5 steps
    page = researcher_client.post(reverse("branch_fork", args=[root.pk, 3]), editor_post(project))
    assert page.status_code == 400
    assert (
        "step 3 sends 3 steps of history to the world model: the limit is 2 "
        "(STUDIO_MAX_HISTORY_STEPS); branch from an earlier step."
        in errors_of(page.content.decode())
    )

    def refusal(**data) -> str:
        with pytest.raises(InvalidRequest) as refused:
            start_simulation(user=None, branch=root, request=build_request(root, data))
        return refused.value.errors["history"][0]

    assert refusal(fork_index=1, mode="replay").startswith(
        "a replay from step 1 to the branch's last step sends up to 4 steps of history"
    )
    rollout = {"fork_index": 1, "mode": "rollout", "max_steps": 3, "agent_model": "a",
               "agent_base_url": "http://127.0.0.1:9/v1"}  # fmt: skip
    assert refusal(**rollout).startswith("a rollout of 3 steps from step 1 sends up to 3 steps")
    assert not SimulationJob.objects.exists()
    ok = researcher_client.post(reverse("branch_fork", args=[root.pk, 2]), editor_post(project))
    assert ok.status_code == 302


@pytest.mark.django_db
def test_history_text_is_counted_in_bytes_and_capped(researcher_client, project, settings):
    steps = [("ls", "é" * 30), ("cat a", "b" * 20), ("pwd", "/")]  # é: 2 bytes in UTF-8
    _, root = make_trajectory(project, steps=steps)
    assert job_limits.history_bytes(root, 2) == 2 + 60 + 5 + 20
    child = make_child(root, 1, ["ü"], name="child")  # its own step 1 ("cat a" -> "ü")
    assert job_limits.history_bytes(child, 2) == 2 + 60 + 5 + 2  # and the inherited step 0
    settings.STUDIO_MAX_HISTORY_BYTES = 80
    page = researcher_client.post(reverse("branch_fork", args=[root.pk, 2]), editor_post(project))
    assert page.status_code == 400
    assert (
        "the history before step 2 holds 87\xa0bytes of text (actions, observations, states and "
        "prompts): the limit is 80\xa0bytes (STUDIO_MAX_HISTORY_MB); branch from an earlier step."
        in errors_of(page.content.decode())
    )
    assert (
        researcher_client.post(
            reverse("branch_fork", args=[root.pk, 1]), editor_post(project)
        ).status_code
        == 302
    )


# ---- jobs at once ------------------------------------------------------------------------------


@pytest.fixture
def busy_project(project, settings):
    """A project at its limit of 3 jobs at once: a running simulation, a queued evaluation and
    a queued export (an episode's step, a finished job and another project's do not count)."""
    settings.STUDIO_MAX_ACTIVE_JOBS = 3
    _, root = make_trajectory(project)
    make_job(root, 1, status="running")
    make_job(root, 2, status="succeeded")
    other_traj, other_root = make_trajectory(project.other, key="other")
    make_job(other_root, 1, status="running")
    episode_step = make_job(root, 5, status="queued")
    SimulationJob.objects.filter(pk=episode_step.pk).update(appends=True)
    endpoint = project.endpoints.get(kind="retrieval")
    EvaluationRun.objects.create(
        project=project, name="q", world_endpoint=endpoint, judge_endpoint=endpoint
    )
    dataset = Dataset.objects.create(project=project, name="d")
    version = DatasetVersion.objects.create(dataset=dataset, number=1, source="x", item_count=1)
    ExportJob.objects.create(version=version, format="openai")
    assert job_limits.active_jobs(project.pk) == 3
    project.root = root  # type: ignore[attr-defined]
    project.version = version  # type: ignore[attr-defined]
    return project


BUSY = (
    "this project has 3 jobs queued or running (simulations, evaluations, judge jobs, "
    "behaviour searches and exports): the limit is 3 at once (STUDIO_MAX_ACTIVE_JOBS); wait "
    "for one to finish or cancel one"
)


def counts() -> tuple[int, int, int, int]:
    return (
        SimulationJob.objects.count(),
        EvaluationRun.objects.count(),
        JudgeJob.objects.count(),
        ExportJob.objects.count(),
    )


@pytest.mark.django_db
def test_a_busy_project_refuses_each_kind_of_job_naming_the_limit(researcher_client, busy_project):
    project, root = busy_project, busy_project.root
    before = counts()
    editor = researcher_client.post(reverse("branch_fork", args=[root.pk, 1]), editor_post(project))
    assert editor.status_code == 429 and BUSY + "." in errors_of(editor.content.decode())
    play = researcher_client.post(
        reverse("playground", args=[root.pk]) + "?at=5",
        {"action": "make", "action_format": "auto", "world_endpoint": editor_post(project)[
            "world_endpoint"]},
    )  # fmt: skip
    assert play.status_code == 429 and BUSY in play.content.decode()

    judge = save_endpoint(
        project, EndpointData(name="judge", role="judge", kind="openai",
                              base_url="http://127.0.0.1:9/v1", model="jm")
    ).endpoint  # fmt: skip
    world = project.endpoints.get(kind="retrieval")
    evaluation = researcher_client.post(
        reverse("evaluation_new", args=[project.pk]),
        {"name": "run", "world": world.pk, "judge": judge.pk, "source": "recorded",
         "limit_per_domain": 5, "temperature": 0.6, "max_tokens": 64, "judge_temperature": 0.6,
         "judge_max_tokens": 64, "concurrency": 1},
    )  # fmt: skip
    assert evaluation.status_code == 429 and BUSY in evaluation.content.decode()
    future = make_child(
        root, 2, ["3 passed"], name="future", job=make_job(root, 2, status="failed")
    )
    judging = researcher_client.post(
        reverse("judge_new", args=[project.pk]),
        {"judge": judge.pk, "target": "branch", "branch": future.pk, "temperature": 0.6,
         "max_tokens": 64, "concurrency": 1},
    )  # fmt: skip
    assert judging.status_code == 429 and BUSY in judging.content.decode()
    export = researcher_client.post(
        reverse("export_start", args=[project.version.pk]), {"format": "openai"}, follow=True
    )
    assert f"The export was not started: {BUSY}." in export.content.decode()
    failed = future.job
    retry = researcher_client.post(reverse("simulation_job_retry", args=[failed.pk]), follow=True)
    assert f"Could not retry job {failed.pk}: {BUSY}" in retry.content.decode()
    with pytest.raises(CommandError, match=re.escape(BUSY)):
        call_command("simulate", "--trajectory", str(root.trajectory_id), "--step", "1", "--n", "1")
    assert counts() == (before[0] + 1, *before[1:])  # only the failed job made for the judge


@pytest.mark.django_db
def test_resuming_a_stopped_run_counts_too_and_changes_nothing_when_refused(
    researcher_client, busy_project
):
    project = busy_project
    endpoint = project.endpoints.get(kind="retrieval")
    stopped = EvaluationRun.objects.create(
        project=project, name="stopped", world_endpoint=endpoint, judge_endpoint=endpoint,
        status=JobStatus.FAILED, finished_at=timezone.now(),
    )  # fmt: skip
    page = researcher_client.post(reverse("evaluation_resume", args=[stopped.pk]), follow=True)
    assert f"Evaluation {stopped.pk} was not resumed: {BUSY}." in page.content.decode()
    stopped.refresh_from_db()
    assert stopped.status == JobStatus.FAILED
    ExportJob.objects.update(status=JobStatus.CANCELLED)  # a place frees up
    researcher_client.post(reverse("evaluation_resume", args=[stopped.pk]))
    stopped.refresh_from_db()
    assert stopped.status == JobStatus.QUEUED


WORLD = {"name": "Shell", "domain": "terminal", "description": "A box.", "files": {"/a": "1"}}


def _episode_world_model(project) -> None:
    """A world model that reads a world's prompt (an episode is never answered by the
    baseline); nothing is served behind it: these steps are not run."""
    from studio.services.endpoints import EndpointData, save_endpoint

    data = EndpointData(
        name="reader", role="world", kind="openai", base_url="http://127.0.0.1:9/v1", model="m"
    )
    save_endpoint(project, data)


@pytest.mark.django_db
def test_episode_steps_have_a_limit_of_their_own(project, settings):
    from inference.worlds import parse_world
    from studio.services.tokens import create_token
    from studio.services.worlds import save_world

    settings.STUDIO_MAX_ACTIVE_JOBS = 1
    settings.STUDIO_MAX_ACTIVE_EPISODE_STEPS = 2
    world = save_world(project, parse_world(WORLD)).world
    _episode_world_model(project)
    token, _ = create_token(project, "agent")
    plays = [episodes.reset(token, world, task="look", max_steps=5)[0] for _ in range(3)]
    for trajectory in plays[:2]:
        episodes.start_step(token, trajectory.pk, {"action": "ls"})
    with pytest.raises(episodes.EpisodeBusy) as busy:
        episodes.start_step(token, plays[2].pk, {"action": "ls"})
    assert busy.value.status == 429 and str(busy.value) == (
        "the project's episodes have 2 steps waiting for the world model: the limit is 2 at "
        "once (STUDIO_MAX_ACTIVE_EPISODE_STEPS); send the step again shortly"
    )
    # the studio's own jobs are counted apart: its one place is still free
    assert job_limits.active_jobs(project.pk) == 0
    job_limits.check_room(project.pk)
    # an episode's history is capped as a simulation's
    settings.STUDIO_MAX_HISTORY_STEPS = 2
    SimulationJob.objects.update(status=JobStatus.SUCCEEDED)
    Trajectory.objects.filter(pk=plays[0].pk).update(step_count=3)  # as after 3 steps
    with pytest.raises(episodes.EpisodeError) as long:
        episodes.start_step(token, plays[0].pk, {"action": "pwd"})
    assert str(long.value) == (
        "step 3 would send 3 steps of history to the world model: the limit is 2 "
        "(STUDIO_MAX_HISTORY_STEPS); reset to start a new episode"
    )


@pytest.mark.django_db(transaction=True)
def test_the_episode_api_answers_429_when_its_steps_are_busy(project, settings):
    """A served world model answers in the web process (no job row): its steps waiting on
    the model are counted there, per project (`studio.serving.direct`)."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from inference.worlds import parse_world
    from studio.services.endpoints import EndpointData, make_default, save_endpoint
    from studio.services.tokens import create_token
    from studio.services.worlds import save_world
    from tests.support.asgi import asgi_server
    from tests.support.fake_openai import fake_openai_server
    from tests.test_episodes import http

    settings.STUDIO_MAX_ACTIVE_EPISODE_STEPS = 1
    world = save_world(project, parse_world(WORLD)).world
    token, text = create_token(project, "agent")
    gate, arrived = threading.Event(), threading.Event()

    def held(request, index):
        arrived.set()
        gate.wait(30)
        return "<predicted_observation>ok</predicted_observation>"

    with fake_openai_server(held) as srv, asgi_server() as base:
        endpoint = save_endpoint(
            project,
            EndpointData(
                name="fake", role="world", kind="openai", base_url=srv.base_url, model="m"
            ),
        ).endpoint
        make_default(endpoint)
        url = f"{base}/env/worlds/{world.pk}"
        first, second = (
            http("POST", f"{url}/reset", {"task": "t"}, token=text)[1]["observation"]["episode_id"]
            for _ in range(2)
        )
        with ThreadPoolExecutor(1) as pool:
            waiting = pool.submit(
                http, "POST", f"{url}/step", {"episode_id": first, "action": {"action": "ls"}}, text
            )
            assert arrived.wait(30)  # its step waits on the model
            status, answer = http(
                "POST", f"{url}/step", {"episode_id": second, "action": {"action": "ls"}},
                token=text,
            )  # fmt: skip
            gate.set()
            assert waiting.result(timeout=60)[0] == 200
    assert status == 429 and "STUDIO_MAX_ACTIVE_EPISODE_STEPS" in answer["detail"]
    assert not SimulationJob.objects.exists()


@pytest.mark.django_db(transaction=True)
@pytest.mark.worker
def test_a_place_frees_up_when_a_job_ends_on_a_worker(project, settings, default_worker):
    from tests.support.fake_openai import fake_openai_server
    from tests.support.jobs import make_trajectory as recorded
    from tests.support.jobs import start_job, wait_job
    from tests.support.worker import wait_for

    settings.STUDIO_MAX_ACTIVE_JOBS = 1
    answer = "<predicted_observation>" + "tock " * 20 + "</predicted_observation>"
    with fake_openai_server(lambda body, i: answer, hold_after_chunks=2) as srv:
        root = recorded(project).root_branch
        ask = {"fork_index": 1, "action": "cat /etc/hostname", "n": 1, "backend": "openai",
               "base_url": srv.base_url, "model": "m"}  # fmt: skip
        first = start_job(root, **ask)
        wait_for(lambda: SimulationJob.objects.filter(pk=first.pk, status="running").first())
        with pytest.raises(job_limits.TooManyJobs, match="the limit is 1 at once"):
            start_job(root, **ask)  # held by the model server: still running
        srv.release.set()
        assert wait_job(first).status == JobStatus.SUCCEEDED
        second = start_job(root, **ask)  # its place is free again
        assert wait_job(second).status == JobStatus.SUCCEEDED
    assert SimulationJob.objects.count() == 2
