"""The world model of a step the web process answered itself (`studio.serving.direct`: a
served model, no job row), named from what the step's meta records: on the trajectory
page, in the studio's own export and a dataset's rows, in the judge's results and in the
trajectory's colours; with the same `key` as the job path's step of the same model run the
same way. Steps played for real: a real uvicorn, the fake model server (a real HTTP server)."""

from __future__ import annotations

import json

import pytest
from django.urls import reverse

from inference.rubrics import step_seed
from inference.worlds import parse_world
from studio.models import ApiToken, JudgeJob, SimulationJob, Step, StepJudgement, Trajectory
from studio.services.endpoints import EndpointData, make_default, save_endpoint
from studio.services.model_identity import (
    identity_of_job,
    identity_of_step_meta,
    is_served_meta,
    job_of_step,
    models_of_trajectory,
)
from studio.services.tokens import create_token
from studio.services.worlds import save_world
from tests.support.asgi import asgi_server
from tests.support.fake_openai import fake_openai_server
from tests.test_direct_steps import SHELL, _seeded, _step, _url, http

LABEL = "served-qwen · org/served-model"


def _endpoint(project, base_url: str):
    endpoint = save_endpoint(
        project,
        EndpointData(name="served-qwen", role="world", kind="openai", base_url=base_url,
                     model="org/served-model", temperature=0.4, top_p=0.9, max_tokens=96),
    ).endpoint  # fmt: skip
    make_default(endpoint)
    return endpoint


@pytest.fixture
def played(project):
    """An episode of 3 steps at most, its first 2 played through the direct path."""
    world = save_world(project, parse_world(SHELL)).world
    _, token = create_token(project, "agent")
    with fake_openai_server(_seeded) as srv, asgi_server() as base:
        _endpoint(project, srv.base_url)
        url = _url(base, token, world)
        status, reset, _ = http(
            "POST", f"{url}/reset", {"task": "Read the notes.", "seed": 5, "max_steps": 3}
        )
        assert status == 200, reset
        episode = reset["observation"]["episode_id"]
        for action in ("cat /srv/notes.txt", "ls"):
            status, body, _ = _step(url, episode, {"action": action})
            assert status == 200, body
    assert len(srv.requests) == 2
    trajectory = Trajectory.objects.get(pk=int(episode))
    steps = list(Step.objects.filter(branch__trajectory=trajectory).order_by("index"))
    assert len(steps) == 2 and not SimulationJob.objects.exists()  # no job wrote them
    return trajectory, steps, world


@pytest.mark.django_db(transaction=True)
def test_a_served_step_records_its_model_and_sampling_and_its_identity_reads_them(played):
    trajectory, steps, world = played
    meta = steps[0].meta
    assert meta["served"] is True and "job" not in meta
    assert meta["backend"] == "openai" and meta["endpoint"] == "served-qwen"
    assert meta["model"] == "org/served-model"
    assert meta["sampling"] == {"temperature": 0.4, "top_p": 0.9, "max_tokens": 96}
    identity = identity_of_step_meta(meta)
    assert identity is not None
    assert identity.label == LABEL
    assert identity.sampling == f"T 0.4 · top-p 0.9 · max 96 tokens · seed {step_seed(5, 0)}"
    assert identity.world == "Tiny shell v1"
    # a step of no job: its branch's job (none here) is never taken for its writer
    assert job_of_step(steps[0], {steps[0].branch_id: 999}) is None
    # a job's step is still its job's, and a step with no model named has no identity
    assert identity_of_step_meta({"job": 3, "backend": "openai", "endpoint": "x"}) is None
    assert identity_of_step_meta({"model_call": False}) is None
    assert not is_served_meta({"seed": 1, "world": {"name": "w"}})


@pytest.mark.django_db(transaction=True)
def test_the_served_steps_key_is_the_job_paths_for_the_same_model_and_settings(project, played):
    """The same episode's next step queued on the job path (its job row, as the episode
    API makes it) groups with the served steps: one model, run the same way, seed apart."""
    from studio.services import episodes

    trajectory, steps, _ = played
    token = ApiToken.objects.get(project=project)
    job = episodes.start_step(token, str(trajectory.pk), {"action": "pwd"})
    by_job = identity_of_job(job)
    served = identity_of_step_meta(steps[0].meta)
    assert served is not None
    assert by_job.key == served.key and by_job.full.split(" · seed")[0] in served.full
    assert by_job.model_key == served.model_key and by_job.token == served.token
    assert by_job.seed == step_seed(5, 2) and served.seed == step_seed(5, 0)


@pytest.mark.django_db(transaction=True)
def test_the_trajectory_page_exports_and_colours_name_the_served_model(
    researcher_client, project, played
):
    from studio.exports.formats import ExportOptions
    from studio.services.datasets import ExportCounts, branch_examples, rows_of

    trajectory, steps, _ = played
    models = models_of_trajectory(trajectory.pk)
    assert [m.label for m in models] == [LABEL]
    assert [m.label for m in models_of_trajectory(trajectory.pk, episode=True)] == [LABEL]
    assert models_of_trajectory(trajectory.pk, episode=False) == []  # its steps unread
    # the trajectory page: each step's badge names the endpoint and model, with its sampling
    html = researcher_client.get(reverse("trajectory", args=[trajectory.pk])).content.decode()
    assert "model not known" not in html
    heads = [html[html.index(f'id="step-{i}"') :] for i in (0, 1)]
    for i, head in enumerate(heads):
        head = head[: head.index("</header>")]
        assert f">{LABEL}</span>" in head and "model-swatch" in head
        assert f"T 0.4 · top-p 0.9 · max 96 tokens · seed {step_seed(5, i)}" in head
    # the tree: the episode's branch is named by the model its steps name (no job made it)
    tree = researcher_client.get(reverse("branch_tree", args=[trajectory.pk])).content.decode()
    cell = tree[tree.index('class="tree-model-cell"') :]
    assert cell[: cell.index("</td>")].count(f">{LABEL}</span>") == 1
    # the studio's own file of the branch: each step says which model wrote it
    branch = trajectory.root_branch
    native = b"".join(
        researcher_client.get(reverse("branch_export", args=[branch.pk])).streaming_content
    ).decode()
    exported = json.loads(native)["trajectories"][0]["steps"]
    assert [s["world_model"]["label"] for s in exported] == [LABEL, LABEL]
    assert [s["world_model"]["seed"] for s in exported] == [step_seed(5, 0), step_seed(5, 1)]
    assert exported[0]["world_model"]["endpoint"] == "served-qwen"
    assert exported[0]["world_model"]["model"] == "org/served-model"
    assert exported[0]["world_model"]["temperature"] == 0.4
    # a dataset's rows: the same, per step
    rows = [
        json.loads(line)
        for line in rows_of(
            branch_examples(branch, ExportCounts()), "wm-turns", ExportOptions(), ExportCounts()
        )
    ]
    named = {row["meta"]["step"]: row["meta"]["world_model"] for row in rows}
    assert sorted(named) == [0, 1]
    assert {m["label"] for m in named.values()} == {LABEL}
    assert named[1]["seed"] == step_seed(5, 1) and named[1]["max_tokens"] == 96


@pytest.mark.django_db(transaction=True)
def test_judge_results_name_the_served_model_of_each_judged_step(
    researcher_client, project, played
):
    trajectory, steps, _ = played
    judge = JudgeJob.objects.create(
        project=project,
        target="branch",
        branch=trajectory.root_branch,
        description="the episode",
        judge_model="judge-model-x",
        judge_base_url="http://127.0.0.1:9/v1",
        status="succeeded",
    )
    for step in steps:
        StepJudgement.objects.create(
            step=step, job=judge, judge_model="judge-model-x", scores={"realism": 4},
            total_score=4.0,
        )  # fmt: skip
    html = researcher_client.get(reverse("judge_job", args=[judge.pk])).content.decode()
    assert 'id="judged-models">Judge <strong>judge-model-x</strong>' in html
    rows = html[html.index('id="judgements"') :]
    assert rows.count(f">{LABEL}</span>") == 2 and "not known" not in rows
    listing = researcher_client.get(reverse("judge_list", args=[project.pk])).content.decode()
    judged = listing[listing.index(f"#{judge.pk}</a>") :]
    judged = judged[: judged.index("</tr>")]
    assert LABEL in judged and "recorded or by hand" not in judged
    # a step of a job beside them (the endpoint turned in-process mid-episode): no one model
    Step.objects.create(branch=trajectory.root_branch, index=2, action="pwd", observation="/",
                        provenance="agent", observation_source="simulated",
                        meta={"job": 10_000})  # fmt: skip
    listing = researcher_client.get(reverse("judge_list", args=[project.pk])).content.decode()
    judged = listing[listing.index(f"#{judge.pk}</a>") :]
    judged = judged[: judged.index("</tr>")]
    assert LABEL not in judged and "per step, on its page" in judged
