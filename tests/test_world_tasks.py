"""Rewarded worlds in the studio: tasks, state keys, rubric and termination in the world
builder (rows and JSON, with errors that name the field), import and export of all of it
(browser and shell), reset's task choice (by id, drawn with the seed, typed) with the seed
and the episode's record, and the end of an episode scored by a judge model on the Models
page (a real OpenAI-compatible server)."""

from __future__ import annotations

import json
import re
from io import StringIO

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import call_command
from django.urls import reverse

from inference import rubrics as R
from inference import worlds as W
from studio.models import Step, Trajectory, World
from studio.services import episodes, rewards
from studio.services.endpoints import EndpointData, make_default, save_endpoint
from studio.services.tokens import create_token
from studio.services.worlds import save_world
from tests.support.browser import shot
from tests.support.fake_openai import fake_openai_server
from tests.test_rubrics import WORLD
from tests.test_worlds import editor_form


@pytest.fixture(autouse=True)
def _many_resets(settings):
    """Rates are counted per token id and minute, in Redis when it is the broker: a test
    database hands out the same token ids again, so these tests count apart."""
    import uuid

    settings.STUDIO_QUEUE_PREFIX = f"{settings.STUDIO_QUEUE_PREFIX}h1-{uuid.uuid4().hex[:8]}:"


# ---- the builder ----------------------------------------------------------------------------

RUBRIC = {
    "step": [{"name": "shown", "kind": "contains", "pattern": "refunded"}],
    "episode": [{"name": "answer", "kind": "exact", "target": "final_answer", "weight": 2}],
}
TERMINATION = {"submit": {"tool": "submit_answer", "argument": "answer"}}
SUBMIT_PARAMS = {"type": "object", "properties": {"answer": {"type": "string"}}}


def task_form(**changes) -> dict:
    data = editor_form(
        **{
            "tools-TOTAL_FORMS": "2",
            "tools-1-name": "submit_answer",
            "tools-1-description": "hand in",
            "tools-1-parameters": json.dumps(SUBMIT_PARAMS),
            "tasks-TOTAL_FORMS": "2",
            "tasks-INITIAL_FORMS": "0",
            "tasks-0-id": "refund-order",
            "tasks-0-instruction": "Refund order 1042",
            "tasks-0-success_criteria": "The order shows refunded.",
            "tasks-0-expected": "refunded",
            "tasks-0-max_steps": "7",
            "tasks-0-rubric": "",
            "tasks-1-id": "",
            "tasks-1-instruction": "",  # a blank row: left out
            "state_keys-TOTAL_FORMS": "1",
            "state_keys-INITIAL_FORMS": "0",
            "state_keys-0-name": "order_refunded",
            "state_keys-0-description": "true once refunded",
            "rewards-rubric": json.dumps(RUBRIC),
            "rewards-termination": json.dumps(TERMINATION),
        }
    )
    data.update(changes)
    return data


@pytest.mark.django_db
def test_the_builder_saves_tasks_state_keys_rubric_and_termination(researcher_client, project):
    url = reverse("world_create", args=[project.pk])
    response = researcher_client.post(url, task_form())
    assert response.status_code == 302, response.content.decode()[:3000]
    world = World.objects.get()
    data = world.latest.data
    assert data["tasks"] == [
        {"id": "refund-order", "instruction": "Refund order 1042",
         "success_criteria": "The order shows refunded.", "expected": "refunded", "max_steps": 7},
    ]  # fmt: skip
    assert data["state_keys"] == [{"name": "order_refunded", "description": "true once refunded"}]
    assert data["rubric"]["episode"][0]["weight"] == 2.0
    assert data["termination"] == {"terminal": [], **TERMINATION}
    # the editor shows them again, and saving what it shows writes no new version
    page = researcher_client.get(reverse("world_edit", args=[world.pk])).content.decode()
    assert 'value="refund-order"' in page and "order_refunded" in page
    assert "&quot;shown&quot;" in page  # the rubric's JSON in its textarea
    assert "<state>" not in page or "&lt;state&gt;" in page
    edit_url = reverse("world_edit", args=[world.pk])
    again = researcher_client.post(edit_url, task_form(world_id=str(world.pk)), follow=True)
    assert "Nothing changed" in again.content.decode() and world.versions.count() == 1


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"rewards-rubric": '{"step": ['}, "Rubric: not valid JSON at line 1, column 11"),
        ({"tasks-0-rubric": "{oops"}, "Rubric: not valid JSON at line 1, column 2"),
        (
            {
                "rewards-rubric": json.dumps(
                    {"step": [{"name": "r", "kind": "regex", "pattern": "("}]}
                )
            },
            "Rubric.step[0].pattern is not a valid regular expression: missing ), unterminated "
            "subpattern at position 0",
        ),
        (
            {
                "tasks-0-rubric": json.dumps({"episode": [{"name": "j", "kind": "judge"}]}),
                "tasks-0-success_criteria": "",
            },  # fmt: skip
            "Tasks, row 1: rubric.episode[0] (j) has no criteria",
        ),
        ({"tasks-0-instruction": ""}, "Tasks, row 1 (refund-order): instruction is required"),
        ({"tasks-0-max_steps": "0"}, "Ensure this value is greater than or equal to 1."),
        (
            {"rewards-termination": json.dumps({"submit": {"tool": "finish"}})},
            "Termination.submit.tool &#x27;finish&#x27; is not one of the world&#x27;s tools",
        ),
    ],
)
def test_the_builder_refuses_bad_tasks_and_rubrics_naming_the_field(
    researcher_client, project, changes, message
):
    response = researcher_client.post(
        reverse("world_create", args=[project.pk]), task_form(**changes)
    )
    assert response.status_code == 400
    assert message in response.content.decode()
    assert not World.objects.exists()


# ---- import and export ----------------------------------------------------------------------


@pytest.mark.django_db
def test_a_rewarded_world_imports_and_exports_unchanged_in_the_browser(researcher_client, project):
    text = W.dumps(W.parse_world(WORLD))
    upload = SimpleUploadedFile("shop.json", text.encode(), content_type="application/json")
    researcher_client.post(reverse("world_import", args=[project.pk]), {"file": upload})
    world = World.objects.get()
    assert [t["id"] for t in world.latest.data["tasks"]] == ["refund-order", "find-total"]
    export = researcher_client.get(reverse("world_export", args=[world.pk]))
    assert export.content.decode() == text  # byte for byte
    # the editor shows the imported parts, and saving them unchanged keeps the version
    spec = world.latest.spec()
    from studio.forms.worlds import WorldEditor

    editor = WorldEditor.for_spec(spec, project=project, world=world)
    assert editor.formsets["tasks"].initial[1]["rubric"].startswith("{")
    assert json.loads(editor.rewards.initial["termination"]) == spec.termination.to_file()


@pytest.mark.django_db
def test_the_worlds_command_round_trips_tasks_and_refuses_a_bad_regex(tmp_path):
    src = tmp_path / "shop.json"
    src.write_text(json.dumps(WORLD))
    call_command("worlds", "import", str(src), "--project", "Shop", stdout=StringIO())
    out = tmp_path / "out.json"
    call_command("worlds", "export", "Shop desk", "--project", "Shop", "--out", str(out))
    again = StringIO()
    call_command("worlds", "import", str(out), "--project", "Shop", stdout=again)
    assert "(unchanged)" in again.getvalue()
    assert json.loads(out.read_text())["termination"]["submit"]["tool"] == "submit_answer"
    bad = {**WORLD, "rubric": {"step": [{"name": "r", "kind": "regex", "pattern": "[z-a]"}]}}
    src.write_text(json.dumps(bad))
    from django.core.management import CommandError

    with pytest.raises(CommandError, match=r"rubric\.step\[0\]\.pattern is not a valid regular"):
        call_command("worlds", "import", str(src), "--project", "Shop")


@pytest.mark.django_db
def test_the_demo_worlds_are_rewarded_and_load_with_the_demo():
    call_command("load_demo", stdout=StringIO())
    worlds = {w.name: w.latest.spec() for w in World.objects.all()}
    assert {"Northwind calendar", "ops-box backups"} <= set(worlds)
    for spec in worlds.values():
        assert spec.tasks and all(t.success_criteria for t in spec.tasks)
        assert spec.termination.submit
        # every check is its task's own: the world's rubric holds none that a typed task
        # would be scored by against another task's answer or state
        assert all(t.rubric is not None and t.rubric.episode for t in spec.tasks)
        assert not spec.rubric
    calendar = worlds["Northwind calendar"]
    plan = rewards.plan_of(calendar, {"task_id": "move-sync", "seed": 3})
    call = {"name": "submit_answer", "arguments": {"answer": "11:30"}}
    assert rewards.submitted_answer(plan, call) == "11:30"
    backups = worlds["ops-box backups"]
    plan = rewards.plan_of(backups, {"task_id": "why-failed", "seed": 3})
    assert (
        rewards.submitted_answer(plan, {"action": "FINAL ANSWER: /var/backups"}) == "/var/backups"
    )
    again = StringIO()
    call_command("load_demo", stdout=again)
    assert "world 'Northwind calendar' v1: unchanged" in again.getvalue()


# ---- reset ----------------------------------------------------------------------------------


@pytest.fixture
def shop(project):
    world = save_world(project, W.parse_world(WORLD)).world
    token, _ = create_token(project, "trainer")
    return token, world


@pytest.mark.django_db
def test_reset_by_task_id_records_the_task_and_seed_and_gives_tool_objects(shop):
    token, world = shop
    trajectory, result = episodes.reset(
        token, world, task_id="refund-order", seed=42, client="http"
    )
    obs = result.observation
    assert obs["task"] == "Refund order 1042" and obs["task_id"] == "refund-order"
    assert obs["metadata"] == {"seed": 42, "task_id": "refund-order", "max_steps": 5}
    assert obs["step"] == 0 and result.reward is None and result.done is False
    assert obs["tools"][1] == {
        "name": "submit_answer", "description": "Give the final answer",
        "input_schema": SUBMIT_PARAMS | {"required": ["answer"]},
    }  # fmt: skip
    episode = Trajectory.objects.get(pk=trajectory.pk).metadata["episode"]
    assert episode == {
        "token": "trainer", "token_id": token.pk, "client": "http", "max_steps": 5,
        "branch": episode["branch"], "seed": 42, "task_id": "refund-order", "status": "running",
        "return": None,
    }  # fmt: skip
    # the reset's explicit limit wins over the task's own (a trainer asking for 3 gets 3),
    # lower or higher; the task's limit is the default when the reset gives none (above)
    for asked in (3, 50):
        played, limited = episodes.reset(token, world, task_id="refund-order", max_steps=asked)
        assert limited.observation["metadata"]["max_steps"] == asked
        assert Trajectory.objects.get(pk=played.pk).metadata["episode"]["max_steps"] == asked
        assert rewards.plan_of(world.latest.spec(), played.metadata["episode"]).max_steps == asked
    _, other = episodes.reset(token, world, task_id="find-total", max_steps=9)
    assert other.observation["metadata"]["max_steps"] == 9


@pytest.mark.django_db
def test_reset_draws_the_task_with_the_seed_and_records_a_drawn_seed(shop):
    token, world = shop
    picks = {seed: episodes.reset(token, world, seed=seed)[1].observation for seed in range(12)}
    for seed, obs in picks.items():
        again = episodes.reset(token, world, seed=seed)[1].observation
        assert (
            again["task_id"] == obs["task_id"] == R.choose_task(world.latest.spec().tasks, seed).id
        )
    assert {obs["task_id"] for obs in picks.values()} == {"refund-order", "find-total"}
    trajectory, drawn = episodes.reset(token, world)
    seed = drawn.observation["metadata"]["seed"]
    assert isinstance(seed, int) and trajectory.metadata["episode"]["seed"] == seed


@pytest.mark.django_db
def test_reset_takes_a_typed_task_and_refuses_what_it_cannot_take(shop):
    token, world = shop
    trajectory, typed = episodes.reset(token, world, task="Look around.", seed=1)
    assert typed.observation["task"] == "Look around." and typed.observation["task_id"] == ""
    assert (
        trajectory.metadata["episode"]["task_id"] == ""
        and trajectory.task_instruction == "Look around."
    )
    before = Trajectory.objects.count()
    with pytest.raises(
        episodes.EpisodeNotFound,
        match=r"has no task 'nope' \(its tasks: refund-order, find-total\)",
    ):
        episodes.reset(token, world, task_id="nope")
    with pytest.raises(episodes.EpisodeInvalid, match="not both"):
        episodes.reset(token, world, task_id="refund-order", task="Other.")
    for bad in ("7", True, -3, 1.5):
        with pytest.raises(episodes.EpisodeInvalid, match="seed must be"):
            episodes.reset(token, world, seed=bad)
    with pytest.raises(episodes.EpisodeInvalid, match="task_id must be text"):
        episodes.reset(token, world, task_id=5)
    with pytest.raises(episodes.EpisodeInvalid, match="task contains an unpaired surrogate"):
        episodes.reset(token, world, task="bad \udcff")
    with pytest.raises(episodes.EpisodeInvalid, match="max_steps must be"):
        episodes.reset(token, world, max_steps=0)
    assert Trajectory.objects.count() == before  # nothing written


@pytest.mark.django_db
def test_resets_are_counted_and_sizes_checked(shop, settings):
    token, world = shop
    settings.STUDIO_EPISODE_RESETS_PER_MINUTE = 2
    settings.STUDIO_EPISODE_MAX_TASK_KB = 1
    with pytest.raises(episodes.EpisodeTooLarge, match="STUDIO_EPISODE_MAX_TASK_KB"):
        episodes.reset(token, world, task="x" * 2000)
    episodes.reset(token, world, seed=1)
    episodes.reset(token, world, seed=2)
    with pytest.raises(episodes.EpisodeBusy, match="STUDIO_EPISODE_RESETS_PER_MINUTE") as busy:
        episodes.reset(token, world, seed=3)
    assert busy.value.retry_after and busy.value.status == 429


# ---- the end of an episode ------------------------------------------------------------------

JUDGED = {
    **WORLD,
    "tasks": [
        {
            "id": "refund-order",
            "instruction": "Refund order 1042",
            "success_criteria": "Order 1042 shows status refunded and the customer was told.",
            "expected": "refunded",
        }
    ],
    "rubric": {
        "step": [{"name": "shown", "kind": "contains", "pattern": "refunded"}],
        "episode": [
            {"name": "answer", "kind": "exact", "target": "final_answer"},
            {"name": "refunded", "kind": "state", "key": "order_refunded"},
            {"name": "judge", "kind": "judge", "weight": 2},
        ],
    },
}


def judge_endpoint(project, srv, name="grader"):
    endpoint = save_endpoint(
        project,
        EndpointData(name=name, role="judge", kind="openai", base_url=srv.base_url, model="jm"),
    ).endpoint
    make_default(endpoint)
    return endpoint


def play(trajectory, plan, steps):
    """Record steps as the step path would, scoring each with the rubric."""
    branch = trajectory.metadata["episode"]["branch"]
    for index, (action, observation, state) in enumerate(steps):
        verdict = rewards.verdict_of(plan, index, observation, state)
        assert not verdict.done
        if verdict.reward is not None:
            rewards.add_return(trajectory.pk, verdict.reward)
        Step.objects.create(branch_id=branch, index=index, action=action, observation=observation,
                            meta=verdict.step_meta)  # fmt: skip


@pytest.mark.django_db
def test_a_submit_ends_the_episode_scored_by_the_judge_at_done(project):
    world = save_world(project, W.parse_world(JUDGED)).world
    token, _ = create_token(project, "trainer")
    judged = '<final_score>\n```json\n{"score": 0.5, "reason": "not told"}\n```\n</final_score>'
    with fake_openai_server(lambda request, index: judged) as srv:
        judge_endpoint(project, srv)
        trajectory, _ = episodes.reset(token, world, task_id="refund-order", seed=7)
        plan = rewards.plan_of(world.latest.spec(), trajectory.metadata["episode"])
        play(trajectory, plan, [
            ('{"name": "get_order", "arguments": {"id": 1042}}', '{"status": "paid"}', {"order_refunded": False}),
            ('{"name": "refund", "arguments": {"id": 1042}}', '{"status": "refunded"}', {"order_refunded": True}),
        ])  # fmt: skip
        action = {"name": "submit_answer", "arguments": {"answer": "refunded"}}
        answer = rewards.submitted_answer(plan, action)
        verdict = rewards.verdict_of(plan, 2, "", None, final_answer=answer)
        assert (verdict.done, verdict.cause, verdict.reward) == (True, "submit", None)
        done = rewards.finish(project.pk, trajectory.pk, plan, verdict, final_answer=answer)
    # answer 1 (weight 1), refunded 1 (weight 1, the last state reported), judge 0.5 (weight 2)
    assert done.reward == pytest.approx(0.75)
    assert done.breakdown == {"answer": 1.0, "refunded": 1.0, "judge": 0.5}
    assert done.observation_metadata["reward_parts"] == {"episode": pytest.approx(0.75)}
    assert done.step_meta["submit"] is True and done.step_meta["seed"] == R.step_seed(7, 2)
    episode = Trajectory.objects.get(pk=trajectory.pk).metadata["episode"]
    assert episode["status"] == "done" and episode["seed"] == 7
    # the return: the two step rewards (0, 1) and the final 0.75
    assert episode["return"] == pytest.approx(1.75)
    assert episode["end"] == {
        "cause": "submit", "step": 2, "reward": pytest.approx(0.75), "total": pytest.approx(1.75),
        "breakdown": {"answer": 1.0, "refunded": 1.0, "judge": 0.5},
    }  # fmt: skip
    # the judge read the task, its success criteria, the episode and the answer
    (request,) = srv.requests
    assert request["model"] == "jm" and request["temperature"] == 0.0
    prompt = request["messages"][1]["content"]
    assert "Refund order 1042" in prompt and "the customer was told" in prompt
    assert '{"status": "refunded"}' in prompt and "## Final answer\nrefunded" in prompt
    # finishing again changes nothing: the end is written once
    again = rewards.finish(project.pk, trajectory.pk, plan, verdict, final_answer=answer)
    assert again.end == episode["end"]
    assert Trajectory.objects.get(pk=trajectory.pk).metadata["episode"]["return"] == pytest.approx(
        1.75
    )


@pytest.mark.django_db
def test_a_judge_that_does_not_answer_is_left_out_and_named(project):
    world = save_world(project, W.parse_world(JUDGED)).world
    token, _ = create_token(project, "trainer")
    with fake_openai_server(lambda request, index: (500, "judge down")) as srv:
        judge_endpoint(project, srv)
        trajectory, _ = episodes.reset(token, world, task_id="refund-order", seed=1, max_steps=1)
        plan = rewards.plan_of(world.latest.spec(), trajectory.metadata["episode"])
        assert plan.max_steps == 1
        verdict = rewards.verdict_of(plan, 0, '{"status": "refunded"}', {"order_refunded": True})
        assert (verdict.done, verdict.cause, verdict.reward) == (True, "max_steps", 1.0)
        done = rewards.finish(project.pk, trajectory.pk, plan, verdict, last_action="refund 1042")
    # no final answer (0), refunded (1); the judge is left out of the mean
    assert done.breakdown == {"shown": 1.0, "answer": 0.0, "refunded": 1.0, "judge": None}
    assert done.reward == pytest.approx(1.0 + 0.5)  # the step's 1 + the episode's 0.5
    end = Trajectory.objects.get(pk=trajectory.pk).metadata["episode"]["end"]
    assert end["cause"] == "max_steps" and "judge down" in end["errors"]["judge"]
    assert "grader" in end["errors"]["judge"] and done.step_meta["rubric_errors"] == end["errors"]
    assert len(srv.requests) == rewards.JUDGE_ATTEMPTS


@pytest.mark.django_db
def test_a_task_typed_in_the_demo_calendar_gets_no_reward_rather_than_a_false_zero():
    call_command("load_demo", stdout=StringIO())
    world = World.objects.get(name="Northwind calendar")
    token, _ = create_token(world.project, "trainer")
    trajectory, reset = episodes.reset(token, world, task="Find the offsite's start time.", seed=4)
    assert reset.observation["task_id"] == ""
    plan = rewards.plan_of(world.latest.spec(), trajectory.metadata["episode"])
    assert not plan.rubric  # move-sync's answer and state checks are not this task's
    action = {"name": "submit_answer", "arguments": {"answer": "09:00"}}
    answer = rewards.submitted_answer(plan, action)
    verdict = rewards.verdict_of(plan, 0, "", None, final_answer=answer)
    done = rewards.finish(world.project_id, trajectory.pk, plan, verdict, final_answer=answer)
    assert (done.reward, done.breakdown) == (None, {})
    assert done.observation_metadata["rubric"] == {} and done.step_meta["reward"] is None
    episode = Trajectory.objects.get(pk=trajectory.pk).metadata["episode"]
    assert episode["end"] == {"cause": "submit", "step": 0, "reward": None, "total": None,
                              "breakdown": {}}  # fmt: skip
    # the library's reward of the episode: none (not 0)
    from studio.services.episode_library import reward_expression

    shown = Trajectory.objects.annotate(r=reward_expression()).get(pk=trajectory.pk)
    assert shown.r is None
    # move-sync itself is still scored by its own checks
    played, _ = episodes.reset(token, world, task_id="move-sync", seed=4)
    sync = rewards.plan_of(world.latest.spec(), played.metadata["episode"])
    ended = rewards.finish(
        world.project_id, played.pk, sync,
        rewards.verdict_of(sync, 0, "", None, final_answer="11:30"), final_answer="11:30",
    )  # fmt: skip
    assert ended.breakdown == {"answer": 1.0, "moved": 0.0, "told": 0.0}
    assert ended.reward == pytest.approx(0.5)


@pytest.mark.django_db
def test_a_world_check_that_applies_to_any_task_still_scores_a_typed_task(shop, project):
    token, world = shop
    trajectory, _ = episodes.reset(token, world, task="Check order 1042 is refunded.", seed=2)
    plan = rewards.plan_of(world.latest.spec(), trajectory.metadata["episode"])
    # the world's "refunded" state check applies to any task; "said" (contains with no
    # pattern) compares with an expected answer this task does not have: left out
    play(trajectory, plan, [
        ('{"name": "get_order", "arguments": {"id": 1042}}', '{"status": "refunded"}', {"order_refunded": True}),
    ])  # fmt: skip
    action = {"name": "submit_answer", "arguments": {"answer": "yes"}}
    answer = rewards.submitted_answer(plan, action)
    verdict = rewards.verdict_of(plan, 1, "", None, final_answer=answer)
    done = rewards.finish(project.pk, trajectory.pk, plan, verdict, final_answer=answer)
    assert done.breakdown == {"refunded": 1.0} and done.reward == 1.0
    end = Trajectory.objects.get(pk=trajectory.pk).metadata["episode"]["end"]
    assert end["breakdown"] == {"refunded": 1.0} and end["total"] == pytest.approx(2.0)


@pytest.mark.django_db
def test_a_judge_check_names_a_missing_judge_model(project):
    world = save_world(project, W.parse_world(JUDGED)).world
    token, _ = create_token(project, "trainer")
    trajectory, _ = episodes.reset(token, world, task_id="refund-order", seed=1)
    plan = rewards.plan_of(world.latest.spec(), trajectory.metadata["episode"])
    verdict = rewards.verdict_of(plan, 0, "", None, final_answer="refunded")
    done = rewards.finish(project.pk, trajectory.pk, plan, verdict)
    assert (
        "no judge model" in done.end["errors"]["judge"]
        and "Models page" in done.end["errors"]["judge"]
    )
    # the answer is right (1), no state was reported (0), the judge is left out
    assert done.breakdown["judge"] is None and done.reward == pytest.approx(0.5)


# ---- in the browser -------------------------------------------------------------------------


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_a_new_user_builds_a_rewarded_world_in_the_browser(page, live_server, login, project):
    """Tools imported, two tasks as rows (the second added with its button), the rubric as
    JSON: a regex that does not compile is refused naming the field, and the fix saves."""
    login(page, "researcher")
    page.goto(f"{live_server.url}/projects/{project.pk}/worlds/new/?domain=mcp")
    page.fill("#id_world-name", "Shop desk")
    page.fill("#tools-import", json.dumps({"tools": [
        {"name": "get_order", "inputSchema": {"type": "object"}},
        {"name": "submit_answer", "inputSchema": SUBMIT_PARAMS},
    ]}))  # fmt: skip
    page.fill("#id_tasks-0-id", "refund-order")
    page.fill("#id_tasks-0-instruction", "Refund order 1042")
    page.fill("#id_tasks-0-success_criteria", "The order shows refunded.")
    page.fill("#id_tasks-0-expected", "refunded")
    page.locator("#part-tasks .add-row").click()
    page.fill("#id_tasks-1-id", "find-total")
    page.fill("#id_tasks-1-instruction", "What is the total of order 7?")
    page.fill("#id_tasks-1-expected", "12.50")
    page.fill("#id_tasks-1-max_steps", "4")
    page.locator("#part-rewards > summary").click()
    bad = {"step": [{"name": "shown", "kind": "regex", "pattern": "refund(ed"}]}
    page.fill("#id_rewards-rubric", json.dumps(bad))
    page.fill("#id_rewards-termination", json.dumps(TERMINATION))
    shot(page, "world-tasks")
    page.click("#world-save")
    errors = page.inner_text("#world-errors")
    assert "Rubric.step[0].pattern is not a valid regular expression" in errors
    assert not World.objects.exists()
    # the page kept what was typed: fix the pattern and save
    assert page.input_value("#id_tasks-1-id") == "find-total"
    page.fill("#id_rewards-rubric", json.dumps(RUBRIC))
    page.click("#world-save")
    page.wait_for_url(re.compile(r"/worlds/\d+/edit/$"))
    spec = World.objects.get().latest.spec()
    assert [t.id for t in spec.tasks] == ["refund-order", "find-total"]
    assert (
        spec.task("find-total").max_steps == 4 and spec.termination.submit.tool == "submit_answer"
    )
    assert page.input_value("#id_tasks-0-id") == "refund-order"


@pytest.mark.django_db
def test_the_worlds_list_counts_tasks_and_starts_a_trajectory_on_one(researcher_client, project):
    world = save_world(project, W.parse_world(WORLD)).world
    listing = researcher_client.get(reverse("world_list", args=[project.pk])).content.decode()
    assert "2 tasks, rewarded" in listing and '<option value="find-total">' in listing
    start = reverse("world_start", args=[world.pk])
    response = researcher_client.post(
        start, {"task": "", "task_id": "find-total", "then": "playground"}
    )
    assert response.status_code == 302
    trajectory = Trajectory.objects.get(source_format="world")
    assert trajectory.task_instruction == "What is the total of order 7?"
    missing = researcher_client.post(start, {"task": "", "task_id": "nope"}, follow=True)
    assert "has no task &#x27;nope&#x27;" in missing.content.decode()
    empty = researcher_client.post(start, {"task": ""}, follow=True)
    assert "Write the task the agent is given" in empty.content.decode()
    assert Trajectory.objects.filter(source_format="world").count() == 1


# ---- an agent plays a rewarded task (the episode API, end to end) -----------------------------

REFUND = {
    "type": "function",
    "function": {"name": "refund_order", "description": "Refund", "parameters": {"type": "object"}},
}
PLAYED = {
    **WORLD,
    "tools": [*WORLD["tools"], REFUND],
    "tasks": [WORLD["tasks"][0]],
    "rubric": {
        "step": [{"name": "shown", "kind": "contains", "pattern": "refunded"}],
        "episode": [
            {"name": "answer", "kind": "exact", "target": "final_answer"},
            {"name": "refunded", "kind": "state", "key": "order_refunded"},
        ],
    },
}


def shop_model(request: dict, index: int) -> str:
    """The world model: the order refunded once the agent asked for it; the state reported."""
    last = request["messages"][-1]["content"]
    refunded = "refund" in last.split("**Action:**")[-1]
    status = "refunded" if refunded else "paid"
    state = json.dumps({"order_refunded": refunded})
    return (
        f'<predicted_observation>{{"id": 1042, "status": "{status}"}}</predicted_observation>'
        f"\n<state>{state}</state>"
    )


@pytest.mark.django_db(transaction=True)
def test_an_openenv_client_plays_a_rewarded_task_to_done_and_replays_it(project):
    from openenv.core.generic_client import GenericEnvClient

    from tests.support.episode_api import served_world

    with served_world(project, PLAYED, responder=shop_model) as served:
        runs = []
        for _ in range(2):
            with GenericEnvClient(base_url=served["url"]).sync() as env:
                first = env.reset(task_id="refund-order", seed=11)
                looked = env.step({"name": "get_order", "arguments": {"id": 1042}})
                refunded = env.step({"name": "refund_order", "arguments": {"id": 1042}})
                done = env.step({"name": "submit_answer", "arguments": {"answer": "refunded"}})
            runs.append((first, looked, refunded, done))
        seeds = [r.get("seed") for r in served["srv"].requests]
    first, looked, refunded, done = runs[0]
    assert first.observation["metadata"]["seed"] == 11
    assert first.observation["task_id"] == "refund-order"
    assert (looked.reward, looked.done) == (0.0, False)
    assert (refunded.reward, refunded.done) == (1.0, False)
    assert "state" not in refunded.observation["metadata"]  # the grader's, never the agent's
    assert done.done is True and done.reward == pytest.approx(1.0)
    assert done.observation["metadata"]["end_cause"] == "submit"
    # the same seed and actions: the same observations, and the same per-step seeds sent
    assert [r.observation["text"] for r in runs[1][1:3]] == [
        r.observation["text"] for r in runs[0][1:3]
    ]
    assert seeds == [R.step_seed(11, 0), R.step_seed(11, 1)] * 2
    episode = Trajectory.objects.get(pk=int(first.observation["episode_id"])).metadata["episode"]
    assert episode["end"]["cause"] == "submit" and episode["return"] == pytest.approx(2.0)
