"""Steps of episodes on their lean path (`studio.jobs.episode_steps`), in this process: one
step at a time per episode, the outcome and the step written together, the shared monitor's
heartbeat and cancel, a deleted world, and the web side's wait when no answer comes. The
paths through a real worker, uvicorn and the clients are in tests/test_episodes.py."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest

from inference.rubrics import step_seed
from inference.simulation.sink import RunOutcome
from inference.worlds import parse_world
from studio.jobs import episode_steps, replies
from studio.models import JobStatus, SimulationJob, Step, Trajectory
from studio.services import episodes
from studio.services.endpoints import EndpointData, make_default, save_endpoint
from studio.services.tokens import create_token
from studio.services.worlds import save_world
from tests.support.fake_openai import fake_openai_server
from tests.support.worker import wait_for

WORLD = {"name": "Shell", "domain": "terminal", "description": "A box.", "files": {"/a": "1"}}


def _episode(project, base_url: str | None = None):
    # an episode plays in its world, so never on the baseline: a world model that reads the
    # world's prompt (no server behind it unless given: these steps are not run)
    endpoint = save_endpoint(
        project,
        EndpointData(
            name="fake",
            role="world",
            kind="openai",
            base_url=base_url or "http://127.0.0.1:9/v1",
            model="m",
        ),
    ).endpoint
    make_default(endpoint)
    world = save_world(project, parse_world(WORLD)).world
    token, _ = create_token(project, "agent")
    trajectory, _ = episodes.reset(token, world, task="look", max_steps=5)
    return token, world, trajectory


def _closing(fn):
    """`fn` for a thread of its own, which closes its database connection when done (an
    open one would keep the test database from being dropped)."""

    def run(*args):
        from django.db import connection

        try:
            fn(*args)
        finally:
            connection.close()

    return run


@pytest.mark.django_db
def test_a_second_step_before_the_first_is_answered_is_refused(project):
    token, _, trajectory = _episode(project)
    first = episodes.start_step(token, trajectory.pk, {"action": "ls"})
    assert (first.fork_index, first.appends, first.status) == (0, True, JobStatus.QUEUED)
    with pytest.raises(episodes.EpisodeError, match="previous step is still being answered"):
        episodes.start_step(token, trajectory.pk, {"action": "pwd"})
    assert SimulationJob.objects.filter(appends=True).count() == 1  # nothing half-made
    # once it ended (here failed, so no step was added) the episode goes on at that step
    SimulationJob.objects.filter(pk=first.pk).update(status=JobStatus.FAILED)
    again = episodes.start_step(token, trajectory.pk, {"action": "pwd"})
    assert again.fork_index == 0 and again.action == "pwd"


@pytest.mark.django_db
def test_a_step_whose_job_ended_elsewhere_writes_no_step(project):
    token, _, trajectory = _episode(project)
    job = episodes.start_step(token, trajectory.pk, {"action": "ls"})
    step = Step(branch_id=job.branch_id, index=0, action="ls", observation="a b")
    # swept as lost meanwhile: its late answer is not kept
    SimulationJob.objects.filter(pk=job.pk).update(status=JobStatus.FAILED)
    job.refresh_from_db()
    assert episode_steps.settle(job, RunOutcome("succeeded"), JobStatus.SUCCEEDED, "", step) is None
    assert not Step.objects.filter(branch_id=job.branch_id).exists()
    # running: the outcome, the step and the episode's step count land together
    SimulationJob.objects.filter(pk=job.pk).update(status=JobStatus.RUNNING)
    job.refresh_from_db()
    assert episode_steps.settle(job, RunOutcome("succeeded"), JobStatus.SUCCEEDED, "", step)
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED and job.progress == 1.0 and job.phase == "done"
    assert Trajectory.objects.get(pk=trajectory.pk).step_count == 1
    assert Step.objects.get(branch_id=job.branch_id).observation == "a b"


@pytest.mark.django_db
def test_an_answer_for_a_step_another_answer_took_is_not_kept(project):
    """Two answers at one index (a step sent the moment the previous one was answered): the
    first is kept; the second fails saying why, and the episode is not stuck."""
    token, _, trajectory = _episode(project)
    late = episodes.start_step(token, trajectory.pk, {"action": "ls"})
    SimulationJob.objects.filter(pk=late.pk).update(status=JobStatus.RUNNING)
    Trajectory.objects.filter(pk=trajectory.pk).update(step_count=1)  # step 0 was answered
    late.refresh_from_db()
    step = Step(branch_id=late.branch_id, index=0, action="ls", observation="late")
    kept = episode_steps.settle(late, RunOutcome("succeeded"), JobStatus.SUCCEEDED, "", step)
    assert kept is not None and kept[0] == JobStatus.FAILED
    assert "another step of this episode was answered at step 0" in kept[1]
    late.refresh_from_db()
    assert late.status == JobStatus.FAILED and late.error == kept[1] and late.phase == "failed"
    assert not Step.objects.filter(branch_id=late.branch_id).exists()
    assert episodes.start_step(token, trajectory.pk, {"action": "pwd"}).fork_index == 1


@pytest.mark.django_db
def test_a_step_over_the_websocket_or_mcp_records_the_tokens_use(project):
    from studio.models import ApiToken
    from studio.services import tokens

    token, _, trajectory = _episode(project)
    ApiToken.objects.filter(pk=token.pk).update(last_used_at=None)
    tokens._touched.clear()  # as in a web process that has not seen this token yet
    episodes.start_step(token, trajectory.pk, {"action": "ls"}, check_token=True)
    assert ApiToken.objects.get(pk=token.pk).last_used_at is not None
    tokens.revoke(token)
    with pytest.raises(episodes.TokenRevoked):
        episodes.start_step(token, trajectory.pk, {"action": "ls"}, check_token=True)


@pytest.mark.django_db(transaction=True)
def test_a_long_step_beats_and_a_cancel_stops_it_without_a_step(project, settings):
    """The shared monitor beats for a step that outlasts the heartbeat interval and reads its
    cancel request; the model's late answer is then dropped and the job says cancelled."""
    settings.STUDIO_JOB_STALE_S = 2  # a heartbeat every 0.25 s
    release = threading.Event()

    def slow(request, index):
        release.wait(timeout=60)
        return "<predicted_observation>late</predicted_observation>"

    with fake_openai_server(slow) as srv:
        token, _, trajectory = _episode(project, srv.base_url)
        job = episodes.start_step(token, trajectory.pk, {"action": "sleep 100"})
        runner = threading.Thread(
            target=_closing(episode_steps.run_episode_step), args=(job.pk, "m-1")
        )
        runner.start()
        try:
            running = wait_for(lambda: SimulationJob.objects.filter(pk=job.pk, status="running"))
            started = running.get().started_at
            assert running.get().phase == "answering"  # the whole answer is awaited
            wait_for(
                lambda: SimulationJob.objects.filter(pk=job.pk, heartbeat_at__gt=started).exists(),
                timeout=10,
                interval=0.05,
            )
            SimulationJob.objects.filter(pk=job.pk).update(cancel_requested=True)
            wait_for(lambda: SimulationJob.objects.filter(pk=job.pk, phase="cancelling").exists())
        finally:
            release.set()
            runner.join(timeout=60)
    job.refresh_from_db()
    assert job.status == JobStatus.CANCELLED and job.claimed_by == "m-1"
    assert not Step.objects.filter(branch_id=job.branch_id).exists()
    assert Trajectory.objects.get(pk=trajectory.pk).step_count == 0


@pytest.mark.django_db(transaction=True)
def test_a_model_that_never_answers_fails_the_step_in_its_time(project, settings):
    settings.STUDIO_EPISODE_STEP_TIMEOUT_S = 1
    never = threading.Event()
    with fake_openai_server(lambda request, index: never.wait(30) and "") as srv:
        try:
            token, _, trajectory = _episode(project, srv.base_url)
            job = episodes.start_step(token, trajectory.pk, {"action": "ls"})
            episode_steps.run_episode_step(job.pk, "m-3")
            asked = len(srv.requests)
        finally:
            never.set()
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED and "timed out" in job.error.lower(), job.error
    assert "raise STUDIO_EPISODE_STEP_TIMEOUT_S" in job.error  # what to change, named
    assert asked == 1  # a timeout is not retried: the agent hears it at once
    assert not Step.objects.filter(branch_id=job.branch_id).exists()


@pytest.mark.django_db(transaction=True)
def test_an_answered_step_records_its_world_and_answers_the_waiting_agent(project):
    with fake_openai_server() as srv:
        token, world, trajectory = _episode(project, srv.base_url)
        job = episodes.start_step(token, trajectory.pk, {"action": "cat /a"})
        episode_steps.run_episode_step(job.pk, "m-2")
        prompt = srv.requests[0]["messages"][0]["content"]
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED and job.world_version_id == world.latest.pk
    assert job.params["world"] == {"id": world.pk, "name": "Shell", "version": 1}
    assert "/a" in prompt  # the world's composed prompt, files included
    step = Step.objects.get(branch_id=job.branch_id)
    assert step.observation == "ok 0" and step.meta["world"]["name"] == "Shell"
    assert "stream" not in srv.requests[0]  # asked whole: nobody watches tokens arrive
    result = episodes.step_result(job)  # what the agent gets when no message reached it
    seed = step_seed(trajectory.metadata["episode"]["seed"], 0)
    assert result.observation == {
        "episode_id": str(trajectory.pk), "text": "ok 0", "step": 1, "parse_status": "well_formed",
        "metadata": {"seed": seed, "rubric": {}, "end_cause": None},
    }  # fmt: skip
    assert result.done is False and result.reward is None
    assert srv.requests[0]["seed"] == seed == step.meta["seed"]  # the step's own seed


REWARDED = {
    **WORLD,
    "rubric": {
        "step": [{"name": "says-ok", "kind": "contains", "target": "observation", "pattern": "ok"}],
        "episode": [
            {"name": "ends-on-1", "kind": "regex", "target": "observation", "pattern": "ok 1$"}
        ],
    },
    "termination": {
        "terminal": [
            {"name": "one", "kind": "contains", "target": "observation", "pattern": "ok 1"}
        ]
    },
}


@pytest.mark.django_db(transaction=True)
def test_a_rewarded_world_scores_each_step_and_ends_the_episode_on_its_terminal_check(project):
    """The job path (an in-process model's) applies the world's rubric as the direct path
    does: a reward on every step, the return kept, and at the terminal check the episode's
    end with the episode rubric added, on the step, in the answer and on the trajectory."""
    sent: list[dict] = []  # what the waiting agents are told (`replies.publish`)
    with fake_openai_server() as srv, pytest.MonkeyPatch.context() as patch:
        patch.setattr(replies, "publish", lambda to, answer: sent.append(answer))
        token, _, _ = _episode(project, srv.base_url)  # answers "ok 0", then "ok 1"
        world = save_world(project, parse_world({**REWARDED, "name": "Rewarded"})).world
        trajectory, _ = episodes.reset(token, world, task="look", seed=3, max_steps=5)
        for action in ("ls", "cat /a"):
            job = episodes.start_step(token, trajectory.pk, {"action": action})
            episode_steps.run_episode_step(job.pk, f"m-{action}")
    assert [answer["ok"] for answer in sent] == [True, True], sent
    first, last = sent
    assert first["reward"] == 1.0 and first["done"] is False
    assert first["observation"]["metadata"]["rubric"] == {"says-ok": 1.0}
    assert first["observation"]["metadata"]["end_cause"] is None
    assert last["done"] is True and last["reward"] == 2.0  # the step's 1.0 + the episode's 1.0
    assert last["observation"]["metadata"]["end_cause"] == "terminal"
    steps = list(Step.objects.filter(branch__trajectory=trajectory).order_by("index"))
    assert [s.meta["reward"] for s in steps] == [1.0, 2.0]
    assert steps[1].meta["end_cause"] == "terminal"
    assert steps[1].meta["rubric"] == {"says-ok": 1.0, "ends-on-1": 1.0}
    episode = Trajectory.objects.get(pk=trajectory.pk).metadata["episode"]
    assert episode["status"] == "done" and episode["return"] == 3.0
    assert episode["end"]["cause"] == "terminal" and episode["end"]["step"] == 1
    assert episode["end"]["reward"] == 2.0
    # read back from the rows (no message reached the agent): the same end
    job = SimulationJob.objects.get(trajectory=trajectory, fork_index=1)
    result = episodes.step_result(job)
    assert result.done is True and result.reward == 2.0


@pytest.mark.django_db(transaction=True)
def test_a_deleted_world_ends_the_episode_saying_so(project):
    """The episode never goes on without its world (its model would lack the world's
    prompt): the agent is told the version was deleted, even with the version cached."""
    with fake_openai_server() as srv:
        token, world, trajectory = _episode(project, srv.base_url)
        first = episodes.start_step(token, trajectory.pk, {"action": "ls"})  # caches the version
        assert first.world_version_id is not None
        SimulationJob.objects.filter(pk=first.pk).update(status=JobStatus.FAILED)
        world.delete()
        with pytest.raises(episodes.EpisodeError, match="of world 'Shell'.*was deleted"):
            episodes.start_step(token, trajectory.pk, {"action": "ls"})
    assert SimulationJob.objects.count() == 1


@pytest.mark.django_db
def test_an_episode_is_never_answered_by_the_baseline(project):
    """A world's episode skips the baseline even when it is the project's default, and
    says what to add when it is the only world model."""
    from studio.models import ModelEndpoint

    token, _, trajectory = _episode(project)
    baseline = save_endpoint(
        project, EndpointData(name="baseline", role="world", kind="retrieval")
    ).endpoint
    make_default(baseline)
    job = episodes.start_step(token, trajectory.pk, {"action": "ls"})
    assert job.backend == "openai" and job.world_version_id is not None
    SimulationJob.objects.filter(pk=job.pk).update(status=JobStatus.FAILED)
    ModelEndpoint.objects.filter(project=project).exclude(pk=baseline.pk).delete()
    with pytest.raises(episodes.EpisodeError, match="no world model that reads a world's prompt"):
        episodes.start_step(token, trajectory.pk, {"action": "ls"})


@pytest.mark.django_db
def test_a_step_no_worker_takes_fails_naming_the_queue(project):
    token, _, trajectory = _episode(project)
    job = episodes.start_step(token, trajectory.pk, {"action": "ls"})
    assert episodes.finished_job(job.pk, unclaimed_after_s=60) is None  # still in time
    old = job.created_at - timedelta(seconds=61)
    SimulationJob.objects.filter(pk=job.pk).update(created_at=old)
    failed = episodes.finished_job(job.pk, unclaimed_after_s=60)
    assert failed is not None and failed.status == JobStatus.FAILED
    assert "no worker took this step within 60 s" in failed.error
    assert f"consuming the {job.queue} queue" in failed.error and job.queue.endswith("episodes")
    with pytest.raises(episodes.EpisodeError, match="no worker took this step"):
        episodes.step_result(failed)
    # a running step is never failed here: its heartbeat is the sweeper's business
    again = episodes.start_step(token, trajectory.pk, {"action": "ls"})
    SimulationJob.objects.filter(pk=again.pk).update(status=JobStatus.RUNNING, created_at=old)
    assert episodes.finished_job(again.pk, unclaimed_after_s=60) is None


def test_the_wait_reads_the_job_row_when_no_answer_comes(monkeypatch):
    """A step whose worker died says nothing on Redis: the sweeper fails its row, and the
    waiting agent hears that from the row."""
    monkeypatch.setattr(replies, "CHECK_S", (0.05, 0.1))
    failed = SimulationJob(pk=1, status=JobStatus.FAILED, error="worker lost", appends=True)
    failed.params = {"reply_to": "nobody-answers-this"}
    monkeypatch.setattr(episodes, "finished_job", lambda pk, **kw: failed if pk == 1 else None)
    from studio.serving import episodes as serving

    async def wait():
        return await serving._answer_of(failed)

    # in a thread of its own: a browser test's event loop may still run in this one
    with ThreadPoolExecutor(1) as pool:
        waited = pool.submit(asyncio.run, wait())
        with pytest.raises(episodes.EpisodeError, match="did not answer: worker lost"):
            waited.result(timeout=30)
