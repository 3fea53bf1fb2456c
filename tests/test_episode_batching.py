"""Steps of an in-process model (the tiny qwen3_5_moe model, on CPU) through a real worker of
the gpu queue on a threads pool: the steps of several episodes that arrive together are
answered by ONE engine call (`inference.step_batcher`), each with its step's own seed, each
recorded as its episode's step; the same seeds and actions give the same observations."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

import pytest

from inference.rubrics import step_seed
from inference.worlds import parse_world
from studio.models import JobStatus, SimulationJob, Step, Trajectory
from studio.services import episodes
from studio.services.endpoints import EndpointData, make_default, save_endpoint
from studio.services.tokens import create_token
from studio.services.worlds import save_world
from tests.support.tiny_model import tiny_model_path  # noqa: F401
from tests.support.worker import running_worker

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.worker,
    pytest.mark.torch,
    pytest.mark.usefixtures("isolated_queues"),
]

WORLD = {"name": "Shell", "domain": "terminal", "description": "A box.", "files": {"/a": "1"}}
SEEDS = (101, 202, 303, 404)
ACTIONS = ("ls", "cat /a", "pwd", "echo hi")
# a batch goes when its four rows are there (the window is long enough never to decide)
BATCH_ENV = {"STUDIO_GPU_BATCH_MAX_ROWS": "4", "STUDIO_GPU_BATCH_WINDOW_MS": "120000"}


def _world(project, model_path: str):
    endpoint = save_endpoint(
        project,
        EndpointData(
            name="tiny",
            role="world",
            kind="hf",
            model=model_path,
            temperature=0.9,
            max_tokens=12,
        ),
    ).endpoint
    make_default(endpoint)
    world = save_world(project, parse_world(WORLD)).world
    token, _ = create_token(project, "agent")
    return token, world


def _play_together(token, world) -> list[tuple[Trajectory, episodes.StepResult]]:
    """Four episodes (seeds SEEDS) each send their first action at once; the web side's
    wait (`serving.steps.answer_of`) hears each answer."""
    from studio.serving.steps import answer_of
    from studio.tasks import enqueue_episode_step

    started = []
    for seed, action in zip(SEEDS, ACTIONS, strict=True):
        trajectory, _ = episodes.reset(token, world, task="look around", seed=seed, max_steps=5)
        job = episodes.start_step(token, trajectory.pk, {"action": action})
        assert job.queue.endswith("gpu") and job.params["seed"] == step_seed(seed, 0)
        started.append((trajectory, job))
    for _, job in started:
        enqueue_episode_step(job)

    async def wait_all():
        return await asyncio.gather(*(answer_of(job) for _, job in started))

    with ThreadPoolExecutor(1) as pool:  # an event loop of its own, as uvicorn's
        results = pool.submit(asyncio.run, wait_all()).result(timeout=300)
    return [(t, r) for (t, _), r in zip(started, results, strict=True)]


def test_concurrent_steps_of_four_episodes_are_one_engine_call(project, tiny_model_path, tmp_path):  # noqa: F811
    token, world = _world(project, tiny_model_path)
    # a log of its own: "ready." in a log another worker of this run wrote is not this one's
    log = tmp_path / "worker.log"
    with running_worker(("gpu",), pool="threads", concurrency=4, extra_env=BATCH_ENV, log_path=log):
        first = _play_together(token, world)
        steps = [Step.objects.get(branch__trajectory=t, index=0) for t, _ in first]
        # one engine call answered all four: one batch id, four rows, each its own place
        assert len({s.meta["batch"]["id"] for s in steps}) == 1
        assert [s.meta["batch"]["rows"] for s in steps] == [4, 4, 4, 4]
        assert sorted(s.meta["batch"]["row"] for s in steps) == [0, 1, 2, 3]
        for (trajectory, result), step, seed, action in zip(
            first, steps, SEEDS, ACTIONS, strict=True
        ):
            trajectory.refresh_from_db()
            assert trajectory.step_count == 1 and step.action == action
            assert step.raw_output and step.meta["backend"] == "hf"  # real tokens, sampled
            assert step.meta["seed"] == step_seed(seed, 0)
            assert result.observation["text"] == step.observation
            assert result.observation["step"] == 1 and result.done is False
            assert result.observation["metadata"]["seed"] == step_seed(seed, 0)
        jobs = SimulationJob.objects.filter(appends=True)
        assert set(jobs.values_list("status", flat=True)) == {JobStatus.SUCCEEDED}
        # the same seeds and actions again: the same observations, episode by episode
        again = _play_together(token, world)
        replayed = [Step.objects.get(branch__trajectory=t, index=0) for t, _ in again]
        assert [s.raw_output for s in replayed] == [s.raw_output for s in steps]
        assert [r.observation["text"] for _, r in again] == [
            r.observation["text"] for _, r in first
        ]
        assert replayed[0].meta["batch"]["id"] != steps[0].meta["batch"]["id"]  # a new call
        assert [s.meta["batch"]["rows"] for s in replayed] == [4, 4, 4, 4]
        assert len({s.raw_output for s in steps}) > 1  # each row sampled with its own seed
