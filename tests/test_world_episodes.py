"""A world's page of episodes (studio.services.world_episodes, its presenter and views) and
the selection service that makes a queue or a dataset of chosen episodes
(studio.services.episode_selection): aggregates, success, grouping, roles."""

from __future__ import annotations

import json
import re
from datetime import UTC, timedelta

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from inference.worlds import parse_world
from studio.models import (
    AnnotationQueue,
    Branch,
    BranchOrigin,
    Dataset,
    ObservationSource,
    Step,
    Trajectory,
)
from studio.presenters.world_episodes import figures
from studio.services import episode_selection, episodes
from studio.services import world_episodes as service
from studio.services.episode_selection import SelectionError
from studio.services.tokens import create_token
from studio.services.worlds import save_world

RELAY = {
    "name": "Relay desk",
    "domain": "mcp",
    "description": "A help desk that relays questions.",
    "initial_state": "{}",
    "tasks": [
        {
            "id": "count",
            "instruction": "How many tickets are open? Submit the number.",
            "expected": "3",
            "rubric": {
                "step": [],
                "episode": [
                    {"name": "answer", "kind": "exact", "target": "final_answer", "weight": 3},
                    {"name": "polite", "kind": "contains", "pattern": "thanks", "weight": 1},
                ],
            },
        },
        {"id": "chat", "instruction": "Say hello (nothing scores this)."},
    ],
}
OTHER = {
    "name": "Quiet shell",
    "domain": "terminal",
    "description": "A shell.",
    "initial_state": "$",
}


def play(
    token,
    world,
    *,
    client="http",
    task_id="count",
    steps=2,
    status="done",
    breakdown=None,
    total=None,
    cause="submit",
    campaign=None,
    ago=None,
):
    """An episode as the episode API and the rewards path record it: `steps` steps on its
    root branch (the last a submit when it ended by one), and its end."""
    trajectory, _ = episodes.reset(token, world, client=client, task_id=task_id)
    root = trajectory.root_branch
    for i in range(steps):
        submit = status == "done" and cause == "submit" and i == steps - 1
        Step.objects.create(
            branch=root,
            index=i,
            action=f'{{"name": "look", "arguments": {{"i": {i}}}}}',
            observation="" if submit else f"ticket list {i}",
            observation_source=ObservationSource.NONE if submit else ObservationSource.SIMULATED,
            meta={"reward": None},
        )
    meta = dict(trajectory.metadata)
    episode = dict(meta["episode"])
    episode["status"] = status
    episode["return"] = total
    if status != "running":
        episode["end"] = {
            "cause": "cancelled" if status == "cancelled" else cause,
            "step": steps - 1,
            "reward": total,
            "total": total,
            "breakdown": breakdown or {},
        }
    meta["episode"] = episode
    if campaign is not None:
        meta["campaign"] = campaign
    fields = {"metadata": meta, "step_count": steps}
    if ago is not None:
        fields["created_at"] = timezone.now() - ago
    Trajectory.objects.filter(pk=trajectory.pk).update(**fields)
    return Trajectory.objects.get(pk=trajectory.pk)


WIN = {"answer": 1.0, "polite": 1.0}
HALF = {"answer": 1.0, "polite": 0.0}  # weighted 3/4: not a success
LOSS = {"answer": 0.0, "polite": 0.0}


@pytest.fixture
def desk(project):
    world = save_world(project, parse_world(RELAY)).world
    trainer, _ = create_token(project, "grpo run 7")
    other, _ = create_token(project, "<b>eval</b> token")
    return world, trainer, other


# ---- series and success -------------------------------------------------------------------


def test_moving_average_is_the_mean_of_the_last_k_values_skipping_none():
    assert service.moving_average([1, 2, 3, 4], 2) == [1, 1.5, 2.5, 3.5]
    assert service.moving_average([1, None, 3], 5) == [1, None, 2]
    assert service.moving_average([2.0], 1) == [2.0]
    with pytest.raises(ValueError):
        service.moving_average([1], 0)


def test_success_rate_counts_scored_episodes_only():
    # an unscored episode is neither a success nor a failure, and has no point
    assert service.success_rate([True, None, False, True], 2) == [1.0, None, 0.5, 0.5]
    assert service.success_rate([False, False, True], 3) == [0.0, 0.0, pytest.approx(1 / 3)]


@pytest.mark.django_db
def test_success_is_the_episode_rubric_scored_1_and_none_when_not_scored(desk):
    world, trainer, _ = desk
    outcomes = service.Outcomes()

    def success(**kw):
        return outcomes.success(play(trainer, world, **kw).metadata)

    assert success(breakdown=WIN, total=2.0) is True
    assert success(breakdown=HALF, total=0.75) is False  # weighted mean 0.75
    assert success(breakdown=LOSS, total=0.0) is False
    # a judge that gave no score is left out of the mean (as the reward did)
    assert success(breakdown={"answer": 1.0, "polite": None}, total=1.0) is True
    assert success(task_id="chat", breakdown={}, total=None) is None  # nothing scores it
    assert success(status="cancelled", breakdown={}, total=None) is None
    assert success(status="running") is None
    # a step check in the breakdown is not the episode rubric's
    assert success(breakdown={"answer": 1.0, "polite": 1.0, "other": 0.0}, total=2.0) is True


# ---- aggregates ---------------------------------------------------------------------------


@pytest.mark.django_db
def test_counts_are_every_matching_episode_and_the_window_the_latest(project, desk):
    world, trainer, other = desk
    shell = save_world(project, parse_world(OTHER)).world
    made = []
    for i in range(5):
        made.append(
            play(
                trainer,
                world,
                breakdown=WIN if i % 2 else LOSS,
                total=float(i),
                ago=timedelta(minutes=10 - i),
            )
        )
    running = play(other, world, client="websocket", status="running", total=0.5)
    cancelled = play(other, world, client="websocket", status="cancelled", total=None, steps=1)
    play(trainer, shell, task_id="", breakdown=WIN, total=9.0)  # another world: not counted
    data = service.world_episodes(world)
    counts = data.counts
    assert counts["episodes"] == 7
    assert (counts["running"], counts["done"], counts["cancelled"]) == (1, 5, 1)
    # the ended episodes with a return: 0..4 (the cancelled one has none)
    assert counts["mean_return"] == pytest.approx(2.0)
    assert counts["rewarded"] == 5
    assert [r.pk for r in data.rows][:5] == [t.pk for t in made]  # oldest first
    assert [r.number for r in data.rows] == [1, 2, 3, 4, 5, 6, 7]
    assert data.window["ended"] == 6 and data.window["scored"] == 5
    assert data.window["successes"] == 2 and data.window["success_rate"] == pytest.approx(0.4)
    # the latest 3 only: numbered as the 5th..7th of the world's episodes
    small = service.world_episodes(world, service.Filters(window=3))
    assert [r.number for r in small.rows] == [5, 6, 7]
    assert {r.pk for r in small.rows} == {made[-1].pk, running.pk, cancelled.pk}
    assert small.counts["episodes"] == 7  # counts are not the window's


@pytest.mark.django_db
def test_grouped_by_client_or_by_token_a_campaign_being_one_token(project, desk):
    world, trainer, other = desk
    campaign_token, _ = create_token(project, "campaign 3: five tasks")
    play(trainer, world, client="http", breakdown=WIN, total=2.0)
    play(trainer, world, client="websocket", breakdown=LOSS, total=0.0)
    play(other, world, client="http", breakdown=WIN, total=2.0)
    play(campaign_token, world, client="campaign", breakdown=WIN, total=2.0, campaign={"id": 3})
    by_client = service.world_episodes(world, service.Filters(group="client"))
    assert {g.label: len(g.rows) for g in by_client.groups} == {
        "HTTP": 2,
        "WebSocket": 1,
        "campaign": 1,
    }
    by_token = service.world_episodes(world, service.Filters(group="token"))
    assert {g.label: len(g.rows) for g in by_token.groups} == {
        "grpo run 7": 2,  # a training run: one token, whatever client it used
        "<b>eval</b> token": 1,
        "campaign 3: five tasks": 1,
    }
    narrowed = service.world_episodes(world, service.Filters(token=trainer.pk, client="http"))
    assert len(narrowed.rows) == 1 and narrowed.counts["episodes"] == 1


@pytest.mark.django_db
def test_filters_by_task_and_state(desk):
    world, trainer, _ = desk
    play(trainer, world, task_id="count", breakdown=WIN, total=2.0)
    chat = play(trainer, world, task_id="chat", total=None)
    running = play(trainer, world, status="running")
    assert [r.pk for r in service.world_episodes(world, service.Filters(task_id="chat")).rows] == [
        chat.pk
    ]
    assert [r.pk for r in service.world_episodes(world, service.Filters(state="running")).rows] == [
        running.pk
    ]
    choices = service.choices_of(world)
    assert ("count", "count") in choices["tasks"] and ("chat", "chat") in choices["tasks"]
    assert (str(trainer.pk), "grpo run 7") in choices["tokens"]


@pytest.mark.django_db
def test_figures_plot_each_ended_episode_once_with_its_page_and_escaped_labels(desk):
    world, trainer, other = desk
    a = play(trainer, world, breakdown=WIN, total=2.0)
    b = play(trainer, world, breakdown=LOSS, total=0.0)
    c = play(other, world, status="cancelled", total=None, steps=1)
    play(other, world, status="running")
    data = service.world_episodes(world, service.Filters(group="token", average=2))
    figs = figures(data, lambda pk: f"/trajectories/{pk}/")
    assert set(figs) == {"signature", "reward", "success", "steps"}

    def episode_traces(chart):
        return [t for t in figs[chart]["data"] if t["meta"]["kind"] == "episodes"]

    # steps: every ended episode; reward: those with one; success: the scored ones
    steps = {cd[1] for t in episode_traces("steps") for cd in t["customdata"]}
    assert steps == {a.pk, b.pk, c.pk}
    reward = {
        cd[1]: y
        for t in episode_traces("reward")
        for cd, y in zip(t["customdata"], t["y"], strict=True)
    }
    assert reward == {a.pk: 2.0, b.pk: 0.0}
    rates = [y for t in episode_traces("success") for y in t["y"]]
    assert rates == [1.0, 0.5]  # over the last 2 scored
    average = [t for t in figs["reward"]["data"] if t["meta"]["kind"] == "average"]
    assert average[0]["y"] == [2.0, 1.0]
    urls = {cd[0] for t in episode_traces("steps") for cd in t["customdata"]}
    assert f"/trajectories/{a.pk}/" in urls
    names = {t["name"] for t in episode_traces("steps")}
    assert "&lt;b&gt;eval&lt;/b&gt; token" in names and "<b>eval</b> token" not in names
    cancelled = next(
        t for t in episode_traces("steps") if c.pk in [cd[1] for cd in t["customdata"]]
    )
    assert cancelled["marker"]["symbol"] == ["x"]
    timed = figures(service.world_episodes(world, service.Filters(x="time")), lambda pk: "/t/")
    assert timed["steps"]["layout"]["xaxis"]["type"] == "date"
    started = a.created_at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")
    assert any(x.startswith(started) for t in timed["steps"]["data"] for x in t["x"])
    # the signature changes when an episode comes in, and only then
    again = figures(service.world_episodes(world, data.filters), lambda pk: f"/t/{pk}/")
    assert again["signature"] == figs["signature"]
    play(trainer, world, breakdown=WIN, total=2.0)
    later = figures(service.world_episodes(world, data.filters), lambda pk: f"/t/{pk}/")
    assert later["signature"] != figs["signature"]


# ---- the selection service ----------------------------------------------------------------


def _non_episode(project):
    return Trajectory.objects.create(
        project=project, domain="mcp", title="imported", source_format="openai", source_key="x1"
    )


@pytest.mark.django_db
def test_episode_ids_in_keeps_the_project_episodes_and_refuses_the_rest(project, desk):
    world, trainer, _ = desk
    a = play(trainer, world, breakdown=WIN, total=2.0)
    b = play(trainer, world, breakdown=LOSS, total=0.0)
    assert episode_selection.episode_ids_in(project, [b.pk, str(a.pk), b.pk]) == [b.pk, a.pk]
    imported = _non_episode(project)
    with pytest.raises(SelectionError, match=f"trajectory {imported.pk} is not an episode"):
        episode_selection.episode_ids_in(project, [a.pk, imported.pk])
    other_world = save_world(project.other, parse_world(OTHER)).world
    other_token, _ = create_token(project.other, "theirs")
    theirs = play(other_token, other_world, task_id="")
    with pytest.raises(SelectionError, match=f"trajectory {theirs.pk} is not one of this project"):
        episode_selection.episode_ids_in(project, [a.pk, theirs.pk])
    with pytest.raises(SelectionError, match="no episode selected"):
        episode_selection.episode_ids_in(project, [])
    with pytest.raises(SelectionError, match="'x' is not a whole number"):
        episode_selection.episode_ids_in(project, ["x"])


@pytest.mark.django_db
def test_a_queue_of_episodes_holds_their_root_branches_steps(project, desk):
    world, trainer, _ = desk
    user = project.users["researcher"]
    a = play(trainer, world, steps=3, breakdown=LOSS, total=0.0)
    b = play(trainer, world, steps=2, breakdown=WIN, total=2.0)
    # a future simulated later from a's step 1 is not the episode
    future = Branch.objects.create(
        trajectory=a,
        parent=a.root_branch,
        fork_index=1,
        name="future",
        origin=BranchOrigin.SIMULATED,
    )
    Step.objects.create(branch=future, index=1, action="x", observation="y")
    queue = episode_selection.queue_from_episodes(
        project, user, [b.pk, a.pk], "  Failed relays  ", origin="from a test"
    )
    assert queue.name == "Failed relays"
    items = list(
        queue.items.order_by("position").values_list("step__branch__trajectory_id", "step__index")
    )
    assert items == [(a.pk, 0), (a.pk, 1), (a.pk, 2), (b.pk, 0), (b.pk, 1)]
    assert AnnotationQueue.objects.get(pk=queue.pk).description == (
        "the steps of 2 episodes from a test (5 steps)"
    )
    with pytest.raises(SelectionError, match="give the queue a name"):
        episode_selection.queue_from_episodes(project, user, [a.pk], " ")
    with pytest.raises(SelectionError, match="is not an episode"):
        episode_selection.queue_from_episodes(project, user, [a.pk, _non_episode(project).pk], "q")
    empty = play(trainer, world, steps=0, status="running")
    with pytest.raises(SelectionError, match="no step yet"):
        episode_selection.queue_from_episodes(project, user, [empty.pk], "q")


@pytest.mark.django_db
def test_a_dataset_of_episodes_takes_agent_or_world_model_turns(project, desk):
    world, trainer, _ = desk
    user = project.users["researcher"]
    a = play(trainer, world, steps=3, breakdown=WIN, total=2.0)  # its last step: a submit
    b = play(trainer, world, steps=2, status="cancelled")  # no submit step
    agent = episode_selection.dataset_from_episodes(
        project, user, [a.pk, b.pk], "relay sft", turns="agent", origin="from a test"
    )
    assert agent.number == 1 and agent.item_count == 5  # every step with an action
    assert agent.source.startswith("agent turns of 2 episodes from a test: ")
    wm = episode_selection.dataset_from_episodes(
        project, user, [a.pk, b.pk], "relay wm", turns="wm"
    )
    steps = list(
        wm.items.order_by("position").values_list("step__branch__trajectory_id", "step__index")
    )
    # the submit step had no world-model answer: no world-model turn
    assert steps == [(a.pk, 0), (a.pk, 1), (b.pk, 0), (b.pk, 1)]
    assert wm.source.startswith("world-model turns of 2 episodes: ")
    # the same name again: a new version of that dataset
    again = episode_selection.dataset_from_episodes(
        project, user, [a.pk], "relay sft", turns="agent"
    )
    assert again.number == 2 and again.dataset_id == agent.dataset_id
    assert Dataset.objects.filter(project=project, name="relay sft").count() == 1
    with pytest.raises(SelectionError, match="turns must be one of: agent, wm"):
        episode_selection.dataset_from_episodes(project, user, [a.pk], "d", turns="both")
    with pytest.raises(SelectionError, match="give the dataset a name"):
        episode_selection.dataset_from_episodes(project, user, [a.pk], "", turns="wm")


# ---- views --------------------------------------------------------------------------------


def _url(world, **query) -> str:
    url = reverse("world_page", args=[world.pk])
    if query:
        url += "?" + "&".join(f"{k}={v}" for k, v in query.items())
    return url


def _figures_of(response) -> dict:
    text = response.content.decode()
    found = re.search(
        r'<script id="world-figures-data" type="application/json">(.*?)</script>', text, re.S
    )
    assert found, text[:2000]
    return json.loads(found.group(1))


def researcher_library_shows(client, url: str, pk: int) -> bool:
    response = client.get(url)
    return response.status_code == 200 and f'id="traj-row-{pk}"' in response.content.decode()


@pytest.mark.django_db
def test_every_member_sees_the_page_and_only_editors_the_selection_forms(client, project, desk):
    world, trainer, _ = desk
    a = play(trainer, world, breakdown=WIN, total=2.0)
    client.force_login(project.users["annotator"])
    response = client.get(_url(world))
    assert response.status_code == 200
    text = response.content.decode()
    assert 'id="chart-reward"' in text and 'id="count-episodes">1<' in text
    assert "world-selection" not in text and "episode-pick" not in text
    assert reverse("world_edit", args=[world.pk]) in text
    library = reverse("library", args=[project.pk]) + f"?world={world.pk}&amp;source=episode"
    assert library in text  # the library, filtered by this world's episodes
    assert researcher_library_shows(client, library.replace("&amp;", "&"), a.pk)
    # the worlds list and the editor link here
    page = reverse("world_page", args=[world.pk])
    assert page in client.get(reverse("world_list", args=[project.pk])).content.decode()
    assert page in client.get(reverse("world_edit", args=[world.pk])).content.decode()
    assert _figures_of(response)["reward"]["data"][0]["customdata"][0][1] == a.pk
    for name in ("world_episode_queue", "world_episode_dataset"):
        denied = client.post(
            reverse(name, args=[world.pk]), {"episodes": str(a.pk), "name": "q", "turns": "agent"}
        )
        assert denied.status_code == 403
    client.force_login(project.users["researcher"])
    text = client.get(_url(world)).content.decode()
    assert 'id="selection-queue-form"' in text and f'value="{a.pk}"' in text
    campaign = reverse("campaign_new", kwargs={"project_id": project.pk})
    assert f'href="{campaign}?world={world.pk}"' in text


@pytest.mark.django_db
def test_another_projects_member_gets_404(outsider_client, desk):
    world, trainer, _ = desk
    a = play(trainer, world)
    assert outsider_client.get(_url(world)).status_code == 404
    assert outsider_client.get(_url(world, part="live")).status_code == 404
    posted = outsider_client.post(
        reverse("world_episode_queue", args=[world.pk]), {"episodes": str(a.pk), "name": "q"}
    )
    assert posted.status_code == 404
    assert outsider_client.get(reverse("world_page", args=[999999])).status_code == 404


@pytest.mark.django_db
def test_the_live_part_brings_new_figures_and_204_when_nothing_changed(researcher_client, desk):
    world, trainer, other = desk
    play(trainer, world, breakdown=WIN, total=2.0)
    first = researcher_client.get(_url(world, part="live", group="token"))
    assert first.status_code == 200
    figs = _figures_of(first)
    assert sum(len(t["y"]) for t in figs["steps"]["data"]) == 1
    same = researcher_client.get(_url(world, part="live", group="token", since=figs["signature"]))
    assert same.status_code == 204
    play(trainer, world, breakdown=LOSS, total=0.0)
    newer = researcher_client.get(_url(world, part="live", group="token", since=figs["signature"]))
    assert newer.status_code == 200
    assert sum(len(t["y"]) for t in _figures_of(newer)["steps"]["data"]) == 2
    assert 'id="count-episodes">2<' in newer.content.decode()
    assert researcher_client.get(_url(world, part="nope")).status_code == 404
    # the page's filters travel with the poll
    mine = researcher_client.get(_url(world, part="live", token=trainer.pk, state="done"))
    assert sum(len(t["y"]) for t in _figures_of(mine)["steps"]["data"]) == 2
    play(other, world, breakdown=WIN, total=2.0)
    theirs = researcher_client.get(_url(world, part="live", token=other.pk))
    assert sum(len(t["y"]) for t in _figures_of(theirs)["steps"]["data"]) == 1


@pytest.mark.django_db
def test_bad_filters_are_said_and_the_page_still_shows(researcher_client, desk):
    world, trainer, _ = desk
    play(trainer, world)
    response = researcher_client.get(_url(world, window="0", group="everything"))
    assert response.status_code == 200
    text = response.content.decode()
    assert 'id="world-filter-errors"' in text
    assert "Latest episodes: Ensure this value is greater than or equal to 1." in text


@pytest.mark.django_db
def test_a_selection_becomes_a_queue_or_a_dataset(researcher_client, project, desk):
    world, trainer, _ = desk
    a = play(trainer, world, steps=2, breakdown=LOSS, total=0.0)
    b = play(trainer, world, steps=3, breakdown=WIN, total=2.0)
    response = researcher_client.post(
        reverse("world_episode_queue", args=[world.pk]),
        {"episodes": f"{a.pk},{b.pk}", "name": "Chart picks"},
    )
    queue = AnnotationQueue.objects.get(project=project, name="Chart picks")
    assert response.status_code == 302 and response["Location"] == reverse(
        "queue_detail", args=[queue.pk]
    )
    assert queue.items.count() == 5
    assert queue.description == (
        "the steps of 2 episodes from a selection on the page of world 'Relay desk' (5 steps)"
    )
    # the table's checkboxes post the same ids
    response = researcher_client.post(
        reverse("world_episode_dataset", args=[world.pk]),
        {"episode": [str(b.pk)], "name": "Wins", "turns": "agent"},
        follow=True,
    )
    dataset = Dataset.objects.get(project=project, name="Wins")
    assert response.redirect_chain[-1][0] == reverse("dataset_detail", args=[dataset.pk])
    assert dataset.versions.get().item_count == 3
    assert dataset.versions.get().source.startswith(
        "agent turns of 1 episode from a selection on the page of world 'Relay desk': "
    )
    assert (
        "Dataset &#x27;Wins&#x27; v1: 3 steps (agent turns of 1 episode)"
        in response.content.decode()
    )
    # not an episode of the project: nothing made, the reason said
    imported = _non_episode(project)
    response = researcher_client.post(
        reverse("world_episode_queue", args=[world.pk]),
        {"episodes": f"{a.pk} {imported.pk}", "name": "Mixed"},
        follow=True,
    )
    assert not AnnotationQueue.objects.filter(name="Mixed").exists()
    assert f"No queue made: trajectory {imported.pk} is not an episode" in response.content.decode()
    response = researcher_client.post(
        reverse("world_episode_queue", args=[world.pk]),
        {"episodes": "", "name": "None"},
        follow=True,
    )
    assert "no episode selected" in response.content.decode()


@pytest.mark.django_db
def test_the_page_groups_by_token_by_default(researcher_client, desk):
    world, trainer, other = desk
    play(trainer, world, client="http", breakdown=WIN, total=2.0)
    play(trainer, world, client="websocket", breakdown=LOSS, total=0.0)
    play(other, world, client="websocket", breakdown=WIN, total=2.0)
    assert service.Filters().group == "token" and service.Filters().query() == {}
    response = researcher_client.get(_url(world))
    text = response.content.decode()
    assert '<input type="radio" name="group" value="token" checked>' in text
    names = {t["name"] for t in _figures_of(response)["steps"]["data"]}
    assert names == {"grpo run 7", "&lt;b&gt;eval&lt;/b&gt; token"}  # one series a token
    assert "<td>grpo run 7</td>" in text  # the table's Group column too
    by_client = researcher_client.get(_url(world, group="client"))
    assert {t["name"] for t in _figures_of(by_client)["steps"]["data"]} == {"HTTP", "WebSocket"}
    assert "group=client" in by_client.content.decode()  # the poll keeps the grouping


def _tokens_of(response) -> list[list[str]]:
    found = re.search(
        r'<script id="world-tokens-data" type="application/json">(.*?)</script>',
        response.content.decode(),
        re.S,
    )
    assert found, response.content.decode()[:2000]
    return json.loads(found.group(1))


@pytest.mark.django_db
def test_the_token_filter_lists_the_tokens_that_played_here_and_the_active_ones(
    researcher_client, project, desk
):
    from studio.models import ApiToken, Campaign
    from studio.services.tokens import revoke

    world, trainer, other = desk
    shell = save_world(project, parse_world(OTHER)).world
    gone, _ = create_token(project, "deleted run")
    old, _ = create_token(project, "old run")
    play(trainer, world, breakdown=WIN, total=2.0)
    play(gone, world, breakdown=WIN, total=2.0)
    play(old, world, breakdown=WIN, total=2.0)
    ApiToken.objects.filter(pk=gone.pk).delete()
    revoke(old)
    unused_revoked, _ = create_token(project, "revoked, never here")
    revoke(unused_revoked)
    here, _ = create_token(project, "campaign 1: here")
    there, _ = create_token(project, "campaign 2: elsewhere")
    Campaign.objects.create(project=project, name="here", world=world, token=here)
    Campaign.objects.create(project=project, name="elsewhere", world=shell, token=there)
    theirs, _ = create_token(project.other, "another project's")
    assert service.token_choices(world) == [  # by name
        (str(other.pk), "<b>eval</b> token"),  # active, no episode yet: it may play next
        (str(here.pk), "campaign 1: here"),  # its campaign plays this world
        (str(gone.pk), "deleted run (deleted)"),
        (str(trainer.pk), "grpo run 7"),
        (str(old.pk), "old run (revoked)"),
    ]
    response = researcher_client.get(_url(world))
    text = response.content.decode()
    assert f'<option value="{other.pk}">&lt;b&gt;eval&lt;/b&gt; token</option>' in text
    assert "campaign 2: elsewhere" not in text and "never here" not in text
    assert "another project" not in text
    assert _tokens_of(response) == [list(t) for t in service.token_choices(world)]
    # a token made while the page is open: the next poll lists it, though nothing was played
    live = researcher_client.get(_url(world, part="live"))
    since = _figures_of(live)["signature"]
    assert researcher_client.get(_url(world, part="live", since=since)).status_code == 204
    fresh, _ = create_token(project, "fresh run")
    newer = researcher_client.get(_url(world, part="live", since=since))
    assert newer.status_code == 200
    assert [str(fresh.pk), "fresh run"] in _tokens_of(newer)
    # a filter by a token the page offered holds, listed or not
    mine = researcher_client.get(_url(world, part="live", token=gone.pk))
    assert sum(len(t["y"]) for t in _figures_of(mine)["steps"]["data"]) == 1


def _table_of(response) -> str:
    text = response.content.decode()
    found = re.search(r'<div id="world-table" hx-swap-oob="innerHTML">(.*?)</div>\s*$', text, re.S)
    assert found, text[-3000:]
    return found.group(1)


@pytest.mark.django_db
def test_the_live_part_brings_the_latest_episodes_table(researcher_client, desk):
    world, trainer, other = desk
    page = researcher_client.get(_url(world)).content.decode()
    assert "No episode played in this world yet" in page
    assert "hx-swap-oob" not in page  # the page's own table is in place
    live = researcher_client.get(_url(world, part="live"))
    since = _figures_of(live)["signature"]
    assert "No episode played in this world yet" in _table_of(live)
    a = play(trainer, world, breakdown=WIN, total=2.0)
    b = play(other, world, status="running", steps=1)
    newer = researcher_client.get(_url(world, part="live", since=since))
    assert newer.status_code == 200
    table = _table_of(newer)
    assert "No episode played" not in table
    assert table.index(f'id="episode-row-{b.pk}"') < table.index(f'id="episode-row-{a.pk}"')
    assert f'class="episode-pick" value="{a.pk}"' in table  # a researcher ticks episodes
    assert 'id="count-episodes">2<' in newer.content.decode()
    # the table shows more than a small window: a step of an older running episode is news
    window = researcher_client.get(_url(world, part="live", window=1))
    since = _figures_of(window)["signature"]
    assert f'id="episode-row-{a.pk}"' in _table_of(window)
    play(trainer, world, breakdown=WIN, total=2.0)  # the window's one episode now
    since = _figures_of(researcher_client.get(_url(world, part="live", window=1)))["signature"]
    Step.objects.create(branch=b.root_branch, index=1, action="look", observation="more")
    Trajectory.objects.filter(pk=b.pk).update(step_count=2)
    moved = researcher_client.get(_url(world, part="live", window=1, since=since))
    assert moved.status_code == 200
    assert re.search(rf'id="episode-row-{b.pk}">.*?<td>2</td>', _table_of(moved), re.S)
    # an annotator's table: links, no checkboxes
    researcher_client.force_login(world.project.users["annotator"])
    theirs = _table_of(researcher_client.get(_url(world, part="live")))
    assert "episode-pick" not in theirs and reverse("trajectory", args=[a.pk]) in theirs


@pytest.mark.django_db
def test_success_says_not_a_success_and_error_only_for_errors(researcher_client, desk):
    world, trainer, _ = desk
    won = play(trainer, world, breakdown=WIN, total=2.0)
    lost = play(trainer, world, breakdown=HALF, total=0.75)
    broke = play(trainer, world, breakdown={}, total=None, cause="error", steps=1)
    unscored = play(trainer, world, task_id="chat", breakdown={}, total=None)
    text = researcher_client.get(_url(world)).content.decode()

    def success_cell(pk: int) -> str:
        row = re.search(rf'<tr id="episode-row-{pk}">(.*?)</tr>', text, re.S)
        assert row, text
        cell = re.findall(r"<td>(.*?)</td>", row.group(1), re.S)[-1]
        return re.sub(r"<[^>]+>", "", cell).strip()  # the words shown

    assert success_cell(won.pk) == "success"
    assert success_cell(lost.pk) == "not a success"
    assert success_cell(broke.pk) == "error"
    assert success_cell(unscored.pk) == "not scored"
    hovers = " ".join(
        h
        for t in _figures_of(researcher_client.get(_url(world)))["steps"]["data"]
        for h in t["text"]
    )
    assert "· not a success" in hovers and "· error" in hovers and "failed" not in hovers


@pytest.mark.django_db
def test_only_editors_are_told_a_selection_makes_a_queue(client, project, desk):
    world, trainer, _ = desk
    play(trainer, world, breakdown=WIN, total=2.0)
    client.force_login(project.users["annotator"])
    lede = re.search(
        r'<p class="muted lib-sub">(.*?)</p>', client.get(_url(world)).content.decode(), re.S
    )
    assert lede and "a click on it opens that episode" in lede.group(1)
    assert "queue" not in lede.group(1) and "dataset" not in lede.group(1)
    client.force_login(project.users["researcher"])
    lede = re.search(
        r'<p class="muted lib-sub">(.*?)</p>', client.get(_url(world)).content.decode(), re.S
    )
    assert lede and "to make a queue or a dataset of them" in lede.group(1)


# ---- a running episode's trajectory page ----------------------------------------------------


def _step_indices(html: str) -> list[int]:
    return [int(i) for i in re.findall(r'<article class="step[^"]*" id="step-(\d+)"', html)]


@pytest.mark.django_db
def test_a_running_episodes_page_polls_for_its_steps_and_an_ended_one_does_not(
    researcher_client, desk, settings
):
    world, trainer, _ = desk
    settings.STUDIO_STEPS_PER_WINDOW = 4
    running = play(trainer, world, status="running", steps=6)
    page = researcher_client.get(reverse("trajectory", args=[running.pk])).content.decode()
    assert 'id="episode-live"' in page and reverse("trajectory_live", args=[running.pk]) in page
    done = play(trainer, world, breakdown=WIN, total=2.0)
    assert (
        'id="episode-live"'
        not in researcher_client.get(reverse("trajectory", args=[done.pk])).content.decode()
    )
    future = Branch.objects.create(
        trajectory=running,
        parent=running.root_branch,
        fork_index=1,
        name="f",
        origin=BranchOrigin.SIMULATED,
    )
    on_future = researcher_client.get(
        reverse("trajectory", args=[running.pk]) + f"?branch={future.pk}"
    )
    assert (
        'id="episode-live"' not in on_future.content.decode()
    )  # only the episode's own branch grows

    live = reverse("trajectory_live", args=[running.pk])
    # steps from 5 on, in their aligned window (4..7): the page merges them into it
    response = researcher_client.get(live, {"after": 5})
    assert response.status_code == 200
    html = response.content.decode()
    assert _step_indices(html) == [5]
    assert 'class="step-window" data-start="4" data-end="5"' in html
    assert (
        'id="episode-status" title="The episode\'s state" hx-swap-oob="true">episode running'
        in html
    )
    assert "6 steps on this branch" in html
    # without `after` (the page does not show the end): the header only
    assert _step_indices(researcher_client.get(live).content.decode()) == []
    # two windows' worth come one window at a time, each step in its window
    many = researcher_client.get(live, {"after": 0}).content.decode()
    assert _step_indices(many) == [0, 1, 2, 3]
    assert many.count('class="step-window"') == 1


@pytest.mark.django_db
def test_the_live_part_stops_polling_once_the_episode_ended_and_its_steps_are_sent(
    researcher_client, project, desk, settings
):
    world, trainer, _ = desk
    settings.STUDIO_STEPS_PER_WINDOW = 4
    episode = play(trainer, world, breakdown=WIN, total=2.0, steps=6)
    live = reverse("trajectory_live", args=[episode.pk])
    first = researcher_client.get(live, {"after": 0})
    assert first.status_code == 200  # ended, but steps 4 and 5 are still to send
    last = researcher_client.get(live, {"after": 4})
    assert last.status_code == 286  # htmx stops polling
    html = last.content.decode()
    assert _step_indices(html) == [4, 5]
    assert "episode done" in html and 'id="end-episode" hx-swap-oob="delete"' in html
    assert 'id="episode-reward"' in html  # the summary with its final reward
    outsider = Client()
    outsider.force_login(project.outsider)
    assert outsider.get(live, {"after": 0}).status_code == 404


@pytest.mark.django_db(transaction=True)
def test_success_read_from_episodes_played_through_the_step_path(project):
    """Episodes played as agents play them (the episode service, the step job, a fake world
    model on 127.0.0.1): the page reads their end as the rewards path wrote it."""
    from studio.jobs import episode_steps, replies
    from studio.services.endpoints import EndpointData, make_default, save_endpoint
    from tests.support.fake_openai import fake_openai_server

    shell = {
        "name": "Scored shell",
        "domain": "terminal",
        "description": "A box.",
        "rubric": {
            "step": [{"name": "says-ok", "kind": "contains", "pattern": "ok"}],
            "episode": [{"name": "ends-on-1", "kind": "regex", "pattern": "ok 1$"}],
        },
        "termination": {"terminal": [{"name": "one", "kind": "contains", "pattern": "ok 1"}]},
    }
    with fake_openai_server() as srv, pytest.MonkeyPatch.context() as patch:
        patch.setattr(replies, "publish", lambda to, answer: None)
        endpoint = save_endpoint(
            project,
            EndpointData(
                name="fake", role="world", kind="openai", base_url=srv.base_url, model="m"
            ),
        ).endpoint
        make_default(endpoint)
        world = save_world(project, parse_world(shell)).world
        token, _ = create_token(project, "trainer")
        # answers "ok 0" then "ok 1": the terminal check ends it, the episode check passes
        won, _ = episodes.reset(token, world, task="look", seed=1, max_steps=5)
        for action in ("ls", "cat /a"):
            job = episodes.start_step(token, won.pk, {"action": action})
            episode_steps.run_episode_step(job.pk, f"w-{action}")
        # one step allowed: it ends on max steps at "ok 2", and the episode check fails
        lost, _ = episodes.reset(token, world, task="look", seed=2, max_steps=1)
        job = episodes.start_step(token, lost.pk, {"action": "ls"})
        episode_steps.run_episode_step(job.pk, "l-ls")
    data = service.world_episodes(world)
    rows = {r.pk: r for r in data.rows}
    assert rows[won.pk].success is True and rows[won.pk].reward == 3.0  # 1 + (1 + 1)
    assert rows[won.pk].cause == "terminal" and rows[won.pk].steps == 2
    assert rows[lost.pk].success is False and rows[lost.pk].cause == "max_steps"
    assert data.window["success_rate"] == 0.5 and data.counts["done"] == 2


@pytest.mark.django_db
def test_a_task_recorded_at_reset_scores_with_its_own_rubric(desk):
    world, trainer, _ = desk
    own = {
        "id": "count",  # the same id as a world task: its own rubric still applies
        "instruction": "How many? Submit the number.",
        "expected": "7",
        "rubric": {"episode": [{"name": "own", "kind": "exact", "target": "final_answer"}]},
    }

    def with_spec(breakdown):
        trajectory = play(trainer, world, breakdown=breakdown, total=1.0)
        meta = dict(trajectory.metadata)
        meta["episode"] = {**meta["episode"], "task_spec": own}
        return meta

    outcomes = service.Outcomes()
    assert outcomes.success(with_spec({"own": 1.0})) is True
    assert outcomes.success(with_spec({"own": 0.0})) is False
    assert outcomes.success(with_spec(WIN)) is None  # the world task's checks are not its
