"""The outcomes at a fork per world model (`studio.services.futures`): futures of two models,
or of one model at two temperatures, are never pooled into one share; futures of several jobs
of one model are one group that says which jobs; a future counts at the steps it has (one
whose rollout failed later still has its outcome at the fork)."""

from __future__ import annotations

import json
import re

from django.urls import reverse

from studio.models import SimulationJob
from studio.presenters.futures import outcome_figure
from studio.services import futures
from tests.support.branching import make_child, make_trajectory


def _job(root, *, backend="openai", model="m-a", name="alpha", temperature=0.7, mode="next"):
    return SimulationJob.objects.create(
        trajectory=root.trajectory,
        branch=root,
        fork_index=2,
        action="python -m pytest -q",
        n=4,
        status="succeeded",
        backend=backend,
        model=model,
        world_name=name,
        mode=mode,
        params={"temperature": temperature, "top_p": 0.95, "max_tokens": 64, "seed": 3},
    )


def _futures(root, job, observations, *, start=0, **kwargs):
    return [
        make_child(
            root,
            2,
            obs if isinstance(obs, list) else [obs],
            job=job,
            sample_index=i,
            name=f"{job.pk}-{i}",
            **kwargs,
        )
        for i, obs in enumerate(observations, start=start)
    ]


def test_two_models_are_never_pooled(project, researcher_client):
    t, root = make_trajectory(project, key="two-models")
    a = _job(root, model="m-a", name="alpha")
    b = _job(root, model="m-b", name="beta")
    _futures(root, a, ["3 passed in 0.12s"] * 3 + ["1 failed"])
    _futures(root, b, ["1 failed"] * 2)
    summary = futures.summarise_fork(root, 2)
    assert len(summary.children) == 6 and len(summary.models) == 2
    alpha, beta = summary.models
    assert alpha.identity.label == "alpha · m-a" and beta.identity.label == "beta · m-b"
    # each model's shares are of its own futures: "1 failed" is 25% of alpha's, 100% of beta's
    assert [(o.size, round(o.share, 2)) for o in alpha.outcomes] == [(3, 0.75), (1, 0.25)]
    assert [(o.size, o.share) for o in beta.outcomes] == [(2, 1.0)]
    assert {b.job_id for o in alpha.outcomes for b in o.branches} == {a.pk}
    # the chart: one trace per model, categories that name the model
    figure = outcome_figure(summary, {})
    assert [trace["y"] for trace in figure["data"]] == [[3, 1], [2]]
    assert figure["layout"]["xaxis"]["type"] == "multicategory"
    assert figure["data"][1]["x"] == [["2 · beta"], ["A"]]
    # the page: a heading per model, its own counts and shares
    html = researcher_client.get(
        reverse("branch_compare", args=[t.pk]) + f"?fork={root.pk}&at=2"
    ).content.decode()
    assert "These futures come from 2 models (or settings) in 2 jobs" in html
    groups = [g.split("</table>")[0] for g in html.split('class="model-outcomes"')[1:]]
    assert len(groups) == 2
    assert "alpha · m-a" in groups[0] and "4 futures" in groups[0] and "T 0.7" in groups[0]
    assert "beta · m-b" in groups[1] and "2 futures" in groups[1]
    assert f"job {b.pk}" in groups[1] and f"job {a.pk}" not in groups[1]
    shares = re.findall(r'<td class="num">(\d+%)</td>', groups[1])
    assert shares == ["100%"]
    # every compare column names its model; the recorded one says recorded
    heads = html.split("<thead>")[-1].split("</thead>")[0]
    assert "recorded</span>" in heads and "alpha · m-a" in heads and "beta · m-b" in heads


def test_one_model_at_two_temperatures_is_two_groups_and_two_jobs_of_one_are_one(project):
    t, root = make_trajectory(project, key="temps")
    cold = _job(root, temperature=0.2)
    warm = _job(root, temperature=1.0)
    again = _job(root, temperature=0.2)  # the same model, the same settings: the same group
    _futures(root, cold, ["x"] * 2)
    _futures(root, warm, ["y"] * 3, start=2)
    _futures(root, again, ["x", "z"], start=5)
    summary = futures.summarise_fork(root, 2)
    assert [g.size for g in summary.models] == [4, 3]
    four, three = summary.models
    assert four.identity.temperature == 0.2 and three.identity.temperature == 1.0
    assert four.jobs == [cold.pk, again.pk] and three.jobs == [warm.pk]
    assert four.outcomes[0].jobs == [(cold.pk, 2), (again.pk, 1)]
    assert [round(o.share, 2) for o in four.outcomes] == [0.75, 0.25]
    # the baseline is a model of its own too
    base = _job(root, backend="retrieval", model="", name="")
    _futures(root, base, ["x"], start=9)
    assert len(futures.summarise_fork(root, 2).models) == 3


def test_several_jobs_of_one_model_say_so_on_the_page(project, researcher_client):
    t, root = make_trajectory(project, key="jobs3")
    jobs = [_job(root) for _ in range(3)]
    for k, job in enumerate(jobs):
        _futures(root, job, ["3 passed in 0.12s"], start=k)
    html = researcher_client.get(
        reverse("branch_compare", args=[t.pk]) + f"?fork={root.pk}&at=2"
    ).content.decode()
    group = html.split('class="model-outcomes"')[1].split("</table>")[0]
    assert "3 futures" in group and "from 3 jobs" in group
    assert ", ".join(f"job {j.pk}: 1" for j in jobs).replace(", ", " · ") in group


def test_a_future_failed_at_a_later_step_counts_at_the_steps_it_has(project):
    t, root = make_trajectory(project, key="later")
    job = _job(root, mode="rollout")
    ok = _futures(root, job, [["3 passed", "clean"], ["3 passed", "clean"]])
    # failed at step 3 (fork+1): its step 2 stands
    late = _futures(root, job, [["3 passed"]], start=2, status="failed")
    # failed before its first step: no observation anywhere
    early = _futures(root, job, [[]], start=3, status="failed")
    # a rollout that ended (final answer) at step 2: no step 3, but it did not fail
    ended = _futures(root, job, [["1 failed"]], start=4)
    running = _futures(root, job, [["3 passed"]], start=5, status="running")
    at_fork = futures.summarise_fork(root, 2)
    (group,) = at_fork.models
    assert group.failed == early and group.unfinished == [] and group.ended == []
    assert [o.size for o in group.outcomes] == [4, 1] and group.counted == 5
    assert set(group.outcomes[0].branches) == {*ok, *late, *running}
    later = futures.summarise_fork(root, 2, at=3)
    (group,) = later.models
    assert group.failed == [*late, *early] and group.ended == ended
    assert group.unfinished == running and group.counted == 2
    figure = outcome_figure(later, {})
    assert figure["data"][0]["x"] == ["A", "failed", "ended before", "unfinished"]
    assert figure["data"][0]["y"] == [2, 2, 1, 1]


def test_outcomes_page_counts_stay_true_for_each_model(project, researcher_client):
    """What the page says each group counts adds up to the futures summarised."""
    t, root = make_trajectory(project, key="counts")
    a = _job(root, model="m-a")
    b = _job(root, backend="retrieval", model="", name="")
    _futures(root, a, ["one", "one", "two"])
    _futures(root, b, ["one"], start=3)
    make_child(root, 2, [], job=b, sample_index=4, status="failed", name="lost")
    html = researcher_client.get(
        reverse("branch_compare", args=[t.pk]) + f"?fork={root.pk}&at=2"
    ).content.decode()
    assert "5 futures of <em>recorded</em> at step 2" in html
    counts = re.findall(r'<span class="model-count">(\d+) futures?</span>', html)
    assert sorted(map(int, counts)) == [2, 3]
    figure = json.loads(
        re.search(r'id="outcome-figure" type="application/json">(.*?)</script>', html, re.S)[1]
    )
    assert sum(sum(trace["y"]) for trace in figure["data"]) == 5
    assert figure["meta"] == {"outcomes": 3, "futures": 5, "models": 2}


def test_compare_filters_and_colours_columns_by_model(project, researcher_client):
    t, root = make_trajectory(project, key="filter")
    a = _job(root, model="m-a", name="alpha")
    b = _job(root, model="m-b", name="beta")
    fa = _futures(root, a, ["alpha says", "alpha again"])
    fb = _futures(root, b, ["beta says"], start=2)
    url = reverse("branch_compare", args=[t.pk])
    both = researcher_client.get(url + f"?b={root.pk}&b={fa[0].pk}&b={fb[0].pk}").content.decode()
    heads = re.findall(r'<th data-branch-id="(\d+)"[^>]*style="border-top-color: (#\w+)"', both)
    assert [int(pk) for pk, _ in heads] == [root.pk, fa[0].pk, fb[0].pk]
    assert len({colour for _, colour in heads}) == 3  # recorded, alpha, beta: each its own
    token = SimulationJob.objects.get(pk=b.pk)
    from studio.services.model_identity import identity_of_job

    beta = identity_of_job(token).token
    only = researcher_client.get(
        url + f"?b={root.pk}&b={fa[0].pk}&b={fb[0].pk}&model={beta}"
    ).content.decode()
    kept = re.findall(r'<th data-branch-id="(\d+)"', only)
    assert [int(pk) for pk in kept] == [root.pk, fb[0].pk]
    assert f'<option value="{beta}" selected>' in only
    # at a fork: the default columns are that model's
    fork = researcher_client.get(url + f"?fork={root.pk}&at=2&model={beta}").content.decode()
    kept = re.findall(r'<th data-branch-id="(\d+)"', fork.split("compare-table")[1])
    assert [int(pk) for pk in kept] == [root.pk, fb[0].pk]
    # a token of no model here: said, and nothing filtered
    odd = researcher_client.get(url + f"?b={root.pk}&b={fa[0].pk}&model=feedfacecafe")
    assert odd.status_code == 200
    assert "No branch of this trajectory was made by the model asked for" in odd.content.decode()
    # nothing picked of that model: a clear error
    none = researcher_client.get(url + f"?b={fa[0].pk}&b={fa[1].pk}&model={beta}")
    assert none.status_code == 400 and "None of the branches picked was made by" in (
        none.content.decode()
    )
