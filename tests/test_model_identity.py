"""Which world model said this: the identity service, and the pages that name the model."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from studio.presenters.model_colours import BASELINE_COLOUR, PALETTE, colour_map, colour_of
from studio.services.model_identity import (
    BASELINE,
    identities_of_jobs,
    identity_of_branch,
    identity_of_job,
    job_of_step,
    models_of_trajectory,
)


def fake_job(**over):
    job = {
        "backend": "openai",
        "world_name": "qwen-local",
        "model": "Qwen/Qwen-AgentWorld-35B-A3B",
        "params": {"temperature": 0.7, "top_p": 0.95, "max_tokens": 512, "seed": 7},
        "perturbations": [],
        "mode": "next",
        "agent_name": "",
        "agent_model": "",
    }
    job.update(over)
    return SimpleNamespace(**job)


def test_label_short_sampling_and_full():
    ident = identity_of_job(fake_job())
    assert ident.label == "qwen-local · Qwen/Qwen-AgentWorld-35B-A3B"
    assert ident.short == "qwen-local"
    assert ident.sampling == "T 0.7 · top-p 0.95 · max 512 tokens · seed 7"
    assert ident.full.startswith(ident.label + " · T 0.7")
    assert ident.full.endswith("next observation only")
    assert ident.as_dict()["endpoint"] == "qwen-local"
    assert ident.as_dict()["model"] == "Qwen/Qwen-AgentWorld-35B-A3B"


def test_model_id_alone_when_no_endpoint_was_named():
    ident = identity_of_job(fake_job(world_name=""))
    assert ident.label == "Qwen/Qwen-AgentWorld-35B-A3B"
    assert ident.as_dict()["endpoint"] is None


def test_baseline_names_no_model_and_no_sampling():
    ident = identity_of_job(fake_job(backend="retrieval", world_name="", model="retrieval"))
    assert ident.is_baseline
    assert ident.label == ident.short == BASELINE
    assert ident.sampling == ""
    assert ident.as_dict()["model"] is None
    assert colour_of(ident, colour_map([ident])) == BASELINE_COLOUR


def test_keys_separate_models_and_settings_but_not_seeds():
    a = identity_of_job(fake_job())
    other_model = identity_of_job(fake_job(model="other/model"))
    other_endpoint = identity_of_job(fake_job(world_name="qwen-remote"))
    hotter = identity_of_job(
        fake_job(params={"temperature": 1.0, "top_p": 0.95, "max_tokens": 512})
    )
    other_seed = identity_of_job(fake_job(params={**fake_job().params, "seed": 8}))
    assert len({a.key, other_model.key, other_endpoint.key, hotter.key}) == 4
    assert a.key == other_seed.key  # the seeds of one job's futures differ by design
    # a filter or a colour goes by the model alone
    assert a.model_key == hotter.model_key != other_model.model_key
    assert a.token == hotter.token != other_model.token
    assert a.token == identity_of_job(fake_job()).token  # stable
    colours = colour_map([a, hotter, other_model, None])
    assert list(colours.values()) == [PALETTE[0], PALETTE[1]]
    assert colour_of(None, colours) != colour_of(a, colours)


def test_world_and_perturbations_in_words():
    rule = {"kind": "tool_error", "params": {"code": 503}, "mode": "deterministic", "name": ""}
    named = {"kind": "timeout", "params": {}, "mode": "deterministic", "name": "slow API"}
    ident = identity_of_job(
        fake_job(
            params={"world": {"name": "Acme Air", "version": 3}},
            perturbations=[rule, named, "not a rule"],
        )
    )
    assert ident.world == "Acme Air v3"
    assert ident.perturbations[1] == "slow API"
    assert len(ident.perturbations) == 2
    assert ident.setting.startswith("world Acme Air v3 · perturbed: ")
    assert "slow API" in ident.setting
    assert ident.key != identity_of_job(fake_job()).key


def test_rollout_names_its_agent():
    ident = identity_of_job(fake_job(mode="rollout", agent_name="planner", agent_model="gpt-x"))
    assert ident.agent == "planner · gpt-x"
    assert "agent planner · gpt-x" in ident.full


@pytest.mark.django_db
def test_deleted_endpoint_keeps_its_name(project):
    from studio.models import ModelEndpoint
    from tests.support.branching import make_child, make_job, make_trajectory

    endpoint = ModelEndpoint.objects.create(
        project=project,
        role="world",
        kind="openai",
        name="fake-world",
        model="fake/model-a",
        base_url="http://127.0.0.1:9/v1",
    )
    traj, root = make_trajectory(project)
    job = make_job(root, 2, backend="openai")
    job.world_endpoint = endpoint
    job.world_name = endpoint.name
    job.model = endpoint.model
    job.save()
    child = make_child(root, 2, ["x"], job=job)
    endpoint.delete()
    child.refresh_from_db()
    ident = identity_of_branch(child)
    assert ident is not None and ident.label == "fake-world · fake/model-a"
    assert identity_of_branch(root) is None  # recorded
    assert identities_of_jobs([job.pk, None]) == {job.pk: ident}
    assert [m.label for m in models_of_trajectory(traj.pk)] == [ident.label]


def test_job_of_step_prefers_the_steps_own_job():
    branch_jobs = {1: None, 2: 20}
    recorded = SimpleNamespace(observation_source="recorded", meta={}, branch_id=1)
    own = SimpleNamespace(observation_source="simulated", meta={"job": 33}, branch_id=2)
    inherited = SimpleNamespace(observation_source="simulated", meta={}, branch_id=2)
    assert job_of_step(recorded, branch_jobs) is None
    assert job_of_step(own, branch_jobs) == 33
    assert job_of_step(inherited, branch_jobs) == 20


# ---- pages that name the model ---------------------------------------------------------


def two_model_tree(project):
    """A recorded trajectory with futures of two world models forked at step 2: two of the
    retrieval baseline (job 1) and one of an OpenAI-compatible endpoint (job 2), plus a
    grandchild of the endpoint's future by the baseline."""
    from tests.support.branching import make_child, make_job, make_trajectory

    traj, root = make_trajectory(project)
    base = make_job(root, 2, backend="retrieval", status="succeeded")
    fake = make_job(root, 2, backend="openai", status="succeeded", n=1)
    fake.world_name, fake.model = "fake-world", "fake/model-<b>"
    fake.params = {"temperature": 0.3, "max_tokens": 64, "seed": 11}
    fake.save()
    b1 = make_child(root, 2, ["b1"], job=base, name="baseline future 1")
    b2 = make_child(root, 2, ["b2"], job=base, name="baseline future 2", sample_index=1)
    f1 = make_child(root, 2, ["f1", "f1b"], job=fake, name="fake future")
    deeper = make_job(f1, 3, backend="retrieval", status="succeeded", n=1)
    g1 = make_child(f1, 3, ["g1"], job=deeper, name="grandchild")
    return SimpleNamespace(traj=traj, root=root, base=base, fake=fake, b1=b1, b2=b2, f1=f1, g1=g1)


def test_trajectory_page_names_the_model_of_each_step(researcher_client, project):
    t = two_model_tree(project)
    html = researcher_client.get(f"/trajectories/{t.traj.pk}/?branch={t.g1.pk}").content.decode()
    # the branch's own future (step 3) is the baseline's, step 2 the fake endpoint's,
    # steps 0-1 recorded; a model id is escaped
    assert 'id="branch-model">future by' in html
    assert "fake-world · fake/model-&lt;b&gt;" in html
    assert "fake/model-<b>" not in html
    assert html.count(">retrieval baseline</span>") >= 2  # branch header and step 3
    assert "T 0.3 · max 64 tokens · seed 11" in html
    step2 = html[html.index('id="step-2"') : html.index('id="step-3"')]
    assert "fake-world · fake/model-&lt;b&gt;" in step2 and "retrieval baseline" not in step2
    step0 = html[html.index('id="step-0"') : html.index('id="step-1"')]
    assert "model-badge" not in step0 and ">recorded<" in step0
    # the htmx window of steps names them too
    window = researcher_client.get(
        f"/trajectories/{t.traj.pk}/steps/?branch={t.g1.pk}&start=0"
    ).content.decode()
    assert "fake-world · fake/model-&lt;b&gt;" in window


def test_appended_steps_name_the_job_that_wrote_each(researcher_client, project):
    from studio.models import Step

    t = two_model_tree(project)
    # a played branch: its steps come from several jobs, each step says which
    Step.objects.filter(branch=t.f1, index=3).update(meta={"job": t.base.pk})
    html = researcher_client.get(f"/trajectories/{t.traj.pk}/?branch={t.f1.pk}").content.decode()
    step3 = html[html.index('id="step-3"') :]
    step3 = step3[: step3.index("</article>")]
    assert "retrieval baseline" in step3 and "fake-world" not in step3


def test_tree_names_colours_and_filters_by_model(researcher_client, project):
    import json
    import re

    from studio.presenters.model_colours import BASELINE_COLOUR, PALETTE
    from studio.services.model_identity import identity_of_job

    t = two_model_tree(project)
    url = f"/trajectories/{t.traj.pk}/tree/"
    html = researcher_client.get(url).content.decode()
    fig = json.loads(
        re.search(r'<script id="branch-tree-figure-\d+"[^>]*>(.*?)</script>', html, re.S)[1]
    )
    markers = next(tr for tr in fig["data"] if tr["name"] == "branches")
    hover = dict(zip(markers["ids"], markers["hovertext"], strict=True))
    colour = dict(zip(markers["ids"], markers["marker"]["color"], strict=True))
    assert "model: fake-world · fake/model-&lt;b&gt;" in hover[str(t.f1.pk)]
    assert "model: retrieval baseline" in hover[str(t.b1.pk)]
    assert "model: recorded" in hover[str(t.root.pk)]
    assert colour[str(t.b1.pk)] == colour[str(t.g1.pk)] == BASELINE_COLOUR
    assert colour[str(t.f1.pk)] == PALETTE[0]
    legend = html[html.index('id="tree-model-legend"') :]
    legend = legend[: legend.index("</div>")]
    assert "retrieval baseline <span" in legend and "(3)" in legend  # b1, b2, g1
    assert "fake-world · fake/model-&lt;b&gt;" in legend and "(1)" in legend
    token = identity_of_job(t.fake).token
    assert f'<option value="{token}">' in html
    # the filter: the fake model's future and its ancestor, counts true
    html = researcher_client.get(f"{url}?model={token}").content.decode()
    fig = json.loads(
        re.search(r'<script id="branch-tree-figure-\d+"[^>]*>(.*?)</script>', html, re.S)[1]
    )
    ids = next(tr for tr in fig["data"] if tr["name"] == "branches")["ids"]
    assert sorted(ids) == sorted([str(t.root.pk), str(t.f1.pk)])
    assert "1 future of fake-world · fake/model-&lt;b&gt;" in html
    assert "2 of 5 branches shown" in html
    baseline = identity_of_job(t.base).token
    html = researcher_client.get(f"{url}?model={baseline}").content.decode()
    ids = json.loads(
        re.search(r'<script id="branch-tree-figure-\d+"[^>]*>(.*?)</script>', html, re.S)[1]
    )["data"][2]["ids"]
    # the grandchild keeps its parent (another model's future) so the tree stays connected
    assert sorted(ids) == sorted(str(b.pk) for b in (t.root, t.b1, t.b2, t.f1, t.g1))
    assert "3 futures of retrieval baseline" in html
    # the side panel of the trajectory page filters in place (htmx), keeping its branch
    fragment = researcher_client.get(
        url,
        headers={
            "HX-Request": "true",
            "HX-Current-URL": f"http://testserver/trajectories/{t.traj.pk}/?branch={t.f1.pk}",
        },
    ).content.decode()
    assert "<html" not in fragment and 'hx-target="closest section"' in fragment
    assert f'name="branch" value="{t.f1.pk}"' in fragment
    # a token of no model of this trajectory: said, and nothing filtered
    html = researcher_client.get(f"{url}?model=nope").content.decode()
    assert "No future of this trajectory was made by the model asked for" in html
    assert ">5 branches<" in html


def test_job_page_names_model_sampling_and_world(researcher_client, project):
    t = two_model_tree(project)
    t.fake.params = {**t.fake.params, "world": {"name": "Acme Air", "version": 3}}
    t.fake.save()
    html = researcher_client.get(f"/jobs/{t.fake.pk}/").content.decode()
    head = html[html.index('id="job-model"') :]
    head = head[: head.index("</span>\n")]
    assert "fake-world · fake/model-&lt;b&gt;" in head
    assert "T 0.3 · max 64 tokens · seed 11" in head
    assert "in world <strong>Acme Air</strong> v3" in html
    html = researcher_client.get(f"/jobs/{t.base.pk}/").content.decode()
    assert ">retrieval baseline</span>" in html and "non-neural baseline" in html


def test_judge_results_name_the_world_model_beside_the_judge(researcher_client, project):
    from django.urls import reverse

    from studio.models import JudgeJob, StepJudgement

    t = two_model_tree(project)
    judge = JudgeJob.objects.create(
        project=project,
        target="fork",
        fork=t.fake,
        description="futures of job 2",
        judge_model="judge-model-x",
        judge_base_url="http://127.0.0.1:9/v1",
        status="succeeded",
    )
    for branch in (t.f1, t.b1):
        StepJudgement.objects.create(
            step=branch.steps.get(index=2),
            job=judge,
            judge_model="judge-model-x",
            scores={"consistency": 4, "realism": 3},
            total_score=3.5,
        )
    html = researcher_client.get(reverse("judge_job", args=[judge.pk])).content.decode()
    assert 'id="judged-models">Judge <strong>judge-model-x</strong>' in html
    assert "2 world models" in html
    rows = html[html.index('id="judgements"') :]
    fake_row = rows[rows.index(f"{t.f1.name}</a>") :]
    assert "fake-world · fake/model-&lt;b&gt;" in fake_row[: fake_row.index("</tr>")]
    base_row = rows[rows.index(f"{t.b1.name}</a>") :]
    assert "retrieval baseline" in base_row[: base_row.index("</tr>")]
    listing = researcher_client.get(reverse("judge_list", args=[project.pk])).content.decode()
    assert "World model judged" in listing and "fake-world · fake/model-&lt;b&gt;" in listing
    fidelity = researcher_client.get(reverse("branch_fidelity", args=[t.f1.pk])).content.decode()
    assert 'id="fidelity-model">Future simulated by' in fidelity
    table = fidelity[fidelity.index('id="fidelity-branches"') :]
    assert "fake-world · fake/model-&lt;b&gt;" in table and "retrieval baseline" in table


def test_export_rows_name_the_model_of_their_target(researcher_client, project):
    import json

    from studio.exports.formats import ExportOptions
    from studio.services.datasets import ExportCounts, branch_examples, rows_of

    t = two_model_tree(project)
    rows = [
        json.loads(line)
        for line in rows_of(
            branch_examples(t.g1, ExportCounts()), "wm-turns", ExportOptions(), ExportCounts()
        )
    ]
    models = {row["meta"]["step"]: row["meta"]["world_model"] for row in rows}
    assert models[0]["label"] == models[1]["label"] == "recorded"
    assert models[2]["endpoint"] == "fake-world" and models[2]["model"] == "fake/model-<b>"
    assert models[2]["temperature"] == 0.3 and models[2]["seed"] == 11
    assert models[3]["label"] == "retrieval baseline" and models[3]["backend"] == "retrieval"
    assert {tuple(sorted(m)) for m in models.values()} == {tuple(sorted(models[2]))}  # one shape
    # the studio's own file of a branch: each step and the branch say which model
    native = b"".join(
        researcher_client.get(f"/branches/{t.g1.pk}/export/").streaming_content
    ).decode()
    data = json.loads(native)["trajectories"][0]
    assert data["metadata"]["studio_branch"]["world_model"]["label"] == "retrieval baseline"
    labels = [s["world_model"]["label"] for s in data["steps"]]
    assert labels == ["recorded", "recorded", "fake-world · fake/model-<b>", "retrieval baseline"]


def test_gallery_names_the_world_model_by_endpoint_and_model_id(client, make_user):
    from io import StringIO

    from django.core.management import call_command
    from django.db import connection
    from django.test.utils import CaptureQueriesContext
    from django.urls import reverse

    from studio.demo_data.scenarios import SCENARIOS, scenario
    from studio.jobs.simulation import run_simulation_job
    from studio.models import Membership, ModelEndpoint, Project, Role
    from studio.services.gallery import run_scenario

    call_command("load_demo", stdout=StringIO())
    project = Project.objects.get(name="Demo")
    user = make_user("gallery-ident")
    Membership.objects.create(project=project, user=user, role=Role.RESEARCHER)
    client.force_login(user)
    for job in run_scenario(project, scenario("terminal-permission")):
        run_simulation_job(job.pk)
    url = reverse("gallery", args=[project.pk])
    with CaptureQueriesContext(connection) as queries:
        html = client.get(url).content.decode()
    assert html.count("Runs on <span") == len(SCENARIOS)
    assert ">retrieval baseline</span>" in html
    card = html[html.index('id="scenario-terminal-permission"') :]
    card = card[: card.index("</section>")]
    assert card.count(">retrieval baseline</span>") == 3  # runs on, and each run's model
    assert ">openai<" not in html and "· retrieval (" not in html
    assert len(queries) < 20  # a few queries for every card, not a few per card
    # an OpenAI-compatible endpoint as the default: named by endpoint name and model id
    ModelEndpoint.objects.filter(project=project).update(is_default=False)
    ModelEndpoint.objects.create(
        project=project,
        role="world",
        kind="openai",
        name="local-vllm",
        model="Qwen/Qwen-AgentWorld-35B-A3B",
        base_url="http://127.0.0.1:9/v1",
        is_default=True,
    )
    html = client.get(url).content.decode()
    assert html.count("Runs on <span") == len(SCENARIOS)
    assert "local-vllm · Qwen/Qwen-AgentWorld-35B-A3B" in html


def test_naming_models_costs_the_same_queries_whatever_the_number_of_jobs(
    researcher_client, project
):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from studio.models import Step
    from tests.support.branching import make_child, make_job, make_trajectory

    def queries(url):
        researcher_client.get(url)
        with CaptureQueriesContext(connection) as ctx:
            assert researcher_client.get(url).status_code == 200
        return len(ctx.captured_queries)

    counts = []
    for jobs in (1, 12):
        traj, root = make_trajectory(project, key=f"many-{jobs}")
        first = make_job(root, 1, backend="openai", status="succeeded", n=1)
        played = make_child(root, 1, [f"o{i}" for i in range(12)], job=first)
        for i, step in enumerate(played.steps.order_by("index")):
            job = first if jobs == 1 else make_job(root, 1 + i, backend="openai", n=1)
            job.world_name = f"model-{i % jobs}"
            job.save()
            Step.objects.filter(pk=step.pk).update(meta={"job": job.pk})
        counts.append(
            (
                queries(f"/trajectories/{traj.pk}/?branch={played.pk}"),
                queries(f"/trajectories/{traj.pk}/steps/?branch={played.pk}&start=0"),
                queries(f"/trajectories/{traj.pk}/tree/"),
            )
        )
        html = researcher_client.get(f"/trajectories/{traj.pk}/?branch={played.pk}")
        assert html.content.decode().count("model-badge") >= 12
    assert counts[0] == counts[1], counts
