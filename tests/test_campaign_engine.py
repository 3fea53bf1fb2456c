"""Rollout campaigns played in this process (`studio.jobs.campaigns.run_campaign` inline, as
`manage.py campaign run` plays them): a scripted agent and a world model on fake
OpenAI-compatible servers, the Northwind calendar world's rewarded tasks, a perturbation arm,
cancel and resume, failures named, and the input checks."""

from __future__ import annotations

import threading

import pytest

from inference.campaign_agent import CampaignAgent, build_messages, openai_tools
from studio.jobs.campaigns import run_campaign
from studio.models import (
    ApiToken,
    Campaign,
    CampaignEpisode,
    JobStatus,
    ModelEndpoint,
    Perturbation,
    SimulationJob,
    SlotStatus,
    Step,
)
from studio.services.campaigns import (
    CampaignError,
    campaign_trajectories,
    cancel_campaign,
    cost_of,
    parse_tasks_jsonl,
    results,
    resumable,
    resume_campaign,
    slot_seed,
    slot_trajectory_ids,
    world_tasks,
)
from tests.support.campaigns import (
    WORLD_ANSWER,
    ScriptedAgent,
    calendar_world,
    endpoints,
    make_campaign,
    tool_call,
)
from tests.support.fake_openai import fake_openai_server
from tests.support.worker import wait_for

transactional = pytest.mark.django_db(transaction=True)


def test_tasks_jsonl_errors_name_the_line_and_the_field():
    tasks = parse_tasks_jsonl(
        '{"instruction": "Count the events", "expected": "3"}\n\n'
        '{"id": "own", "instruction": "Move it", "max_steps": 4}\n'
    )
    assert [t["id"] for t in tasks] == ["task-1", "own"]
    assert tasks[0]["expected"] == "3" and tasks[1]["max_steps"] == 4
    cases = {
        '{"instruction": "a"}\n{"expected": "3"}': "tasks.jsonl line 2: field 'instruction'",
        '{"instruction": "a"}\nnot json': "tasks.jsonl line 2: not valid JSON",
        '{"instruction": "a", "max_steps": 0}': "line 1: field 'max_steps'",
        '{"instruction": "a", "colour": "red"}': "line 1: unknown field 'colour'",
        '{"instruction": "a", "id": "x"}\n{"instruction": "b", "id": "x"}': "line 2: field 'id'",
        '{"instruction": "a", "rubric": {"episode": [{"name": "c", "kind": "nope"}]}}': "line 1:",
        "": "holds no task",
    }
    for text, message in cases.items():
        with pytest.raises(CampaignError, match=message.replace("(", r"\(")):
            parse_tasks_jsonl(text)


def test_the_agent_turns_a_tool_call_into_the_action_and_counts_its_tokens():
    def answer(body, index):
        assert body["tools"][0]["function"]["name"] == "list_events"
        return tool_call("list_events", {"date": "2026-03-12"})

    tools = [{"type": "function", "function": {"name": "list_events", "parameters": {}}}]
    with fake_openai_server(answer) as srv:
        agent = CampaignAgent(base_url=srv, model="agent-m")
        proposal = agent.propose(build_messages("mcp", "count", [], tools=tools), tools=tools)
    assert proposal.action == {"name": "list_events", "arguments": {"date": "2026-03-12"}}
    assert not proposal.final and proposal.tokens_in > 0 and proposal.tokens_out > 0
    # text replies as inference.agent reads them; errors name the model and the URL
    with fake_openai_server(lambda b, i: "<final_answer>3</final_answer>") as srv:
        proposal = CampaignAgent(base_url=srv, model="agent-m").propose([], tools=None)
    assert proposal.final and proposal.final_answer == "3"
    with fake_openai_server(lambda b, i: (500, "boom")) as srv:
        agent = CampaignAgent(base_url=srv, model="agent-m", max_retries=0)
        with pytest.raises(Exception, match=f"agent model 'agent-m' at {srv}"):
            agent.propose([], tools=None)
    assert (
        openai_tools([{"name": "bare", "parameters": {"type": "object"}}])[0]["function"]["name"]
        == "bare"
    )
    # a tool call in the history is the assistant's call and the tool's result
    history = [({"name": "list_events", "arguments": {}}, "[]")]
    messages = build_messages("mcp", "count", history, tools=tools)
    assert messages[2]["tool_calls"][0]["function"]["name"] == "list_events"
    assert messages[3] == {"role": "tool", "tool_call_id": "call_0", "content": "[]"}


@transactional
def test_a_campaign_plays_every_slot_with_rewards_tags_and_a_perturbation_arm(project):
    world = calendar_world(project)
    researcher = project.users["researcher"]
    error = Perturbation.objects.create(
        project=project,
        name="Tool error",
        kind="tool_error",
        params={"message": "upstream service unavailable", "code": -32000},
    )
    with (
        fake_openai_server(ScriptedAgent()) as agent_srv,
        fake_openai_server(lambda b, i: WORLD_ANSWER) as world_srv,
    ):
        agent, world_model = endpoints(project, agent_srv, world_srv)
        campaign = make_campaign(
            project, researcher, world, agent, world_model, perturbations=(error,)
        )
        assert campaign.episodes_total == 2 * 2 * 2 and campaign.token.name.startswith(
            f"campaign {campaign.pk}: "
        )
        run_campaign(campaign.pk, "")
    campaign.refresh_from_db()
    assert campaign.status == JobStatus.SUCCEEDED, campaign.error
    assert (campaign.progress, campaign.episodes_done, campaign.episodes_failed) == (1.0, 8, 0)
    slots = list(campaign.episodes.all())
    assert all(s.status == SlotStatus.DONE and s.end_cause == "submit" for s in slots)
    assert all(s.steps == 2 for s in slots)
    # paired seeds: the same (task, repeat) has one seed in every arm
    for s in slots:
        assert s.seed == slot_seed(7, s.task_index, s.repeat)
    by_task = {s.task_id: s for s in slots if s.arm == 0}
    count, sync = by_task["count-thursday"], by_task["move-sync"]
    assert count.success is True and count.reward == 1.0
    assert sync.success is False and 0 < sync.reward < 1  # the answer right, the state not
    # every episode is a tagged trajectory of the library, recording its slot
    trajectories = campaign_trajectories(campaign)
    assert trajectories.count() == 8
    for t in trajectories:
        meta = t.metadata["campaign"]
        slot = CampaignEpisode.objects.get(pk=meta["slot"])
        assert slot.trajectory_id == t.pk and meta["arm_name"] == slot.arm_name
        episode = t.metadata["episode"]
        assert episode["client"] == "campaign" and episode["seed"] == slot.seed
        assert episode["token_id"] == campaign.token_id and episode["end"]["cause"] == "submit"
    # the arm's steps were perturbed (the world model's answer replaced), arm 0's not
    for s in slots:
        first = Step.objects.get(branch__trajectory_id=s.trajectory_id, index=0)
        perturbed = (first.meta or {}).get("perturbation")
        assert (perturbed is not None) == (s.arm == 1)
        if s.arm == 1:
            assert "upstream service unavailable" in first.observation
    # tokens of both models, per slot and in all; outside agents' rate limit untouched
    assert campaign.agent_tokens_in > 0 and campaign.world_tokens_out > 0
    assert sum(s.agent_tokens_out for s in slots) == campaign.agent_tokens_out
    figures = results(campaign)
    assert figures.overall["scored"] == 8 and figures.overall["successes"] == 4
    assert figures.overall["success_rate"] == 0.5
    assert [a["arm_name"] for a in figures.by_arm] == ["none", "Tool error"]
    assert {c["cause"] for c in figures.causes} == {"submit"}
    assert len(figures.rewards) == 8 and len(figures.by_task_arm) == 4
    assert figures.models[0]["cost"] is None  # no price on the Models page
    assert set(slot_trajectory_ids(campaign, "success")) == {
        s.trajectory_id for s in slots if s.success
    }
    assert len(slot_trajectory_ids(campaign, "failed")) == 4
    assert cost_of(1_000_000, 500_000, 2, 4) == 4.0 and cost_of(1, 1, None, 4) is None


@transactional
def test_a_campaign_whose_every_episode_failed_fails_naming_the_first_error(project):
    """Every slot failed (the agent model is down): the campaign ends FAILED saying so and
    why; Resume, once the model answers, plays them again and the campaign succeeds."""
    world = calendar_world(project)
    down = threading.Event()
    down.set()
    scripted = ScriptedAgent()

    def agent_reply(body, index):
        return (400, "model not loaded") if down.is_set() else scripted(body, index)

    with (
        fake_openai_server(agent_reply) as agent_srv,
        fake_openai_server(lambda b, i: WORLD_ANSWER) as world_srv,
    ):
        agent, world_model = endpoints(project, agent_srv, world_srv)
        campaign = make_campaign(
            project,
            project.users["researcher"],
            world,
            agent,
            world_model,
            tasks=tuple(world_tasks(world, ["count-thursday"])),
            episodes_per_task=2,
        )
        run_campaign(campaign.pk, "")
        campaign.refresh_from_db()
        assert campaign.status == JobStatus.FAILED and campaign.episodes_failed == 2
        slots = list(campaign.episodes.all())
        assert all(s.status == SlotStatus.FAILED for s in slots)
        slot = slots[0]
        assert "agent model 'agent-m'" in slot.error and "model not loaded" in slot.error
        assert campaign.error.startswith("every episode failed; the first error: ")
        assert campaign.error.removeprefix("every episode failed; the first error: ") in {
            s.error for s in slots
        }
        end = slot.trajectory.metadata["episode"]["end"]
        assert end["cause"] == "error" and "model not loaded" in end["errors"]["error"]
        figures = results(campaign)
        assert (figures.overall["failed"], figures.overall["ended"]) == (2, 0)
        assert figures.causes == [{"cause": "error", "count": 2, "arm_name": "none"}]
        assert figures.errors == [{"error": slot.error, "count": 2}]
        assert set(slot_trajectory_ids(campaign, "failed")) == {s.trajectory_id for s in slots}

        down.clear()  # the model is back: Resume plays the failed slots again
        assert resume_campaign(campaign)
        run_campaign(campaign.pk, "again")
    campaign.refresh_from_db()
    assert (campaign.status, campaign.error) == (JobStatus.SUCCEEDED, "")
    figures = results(campaign)
    assert (figures.overall["ended"], figures.overall["failed"]) == (2, 0)
    assert figures.overall["replaced"] == 2 and figures.errors == []  # the failed ones stay


@transactional
def test_a_campaign_with_one_episode_ended_succeeds_and_counts_its_failed_ones(project):
    world = calendar_world(project)
    scripted = ScriptedAgent()

    def agent_reply(body, index):
        if "Search relevance sync" in body["messages"][1]["content"]:
            return (400, "the sync task is too long for this model")
        return scripted(body, index)

    with (
        fake_openai_server(agent_reply) as agent_srv,
        fake_openai_server(lambda b, i: WORLD_ANSWER) as world_srv,
    ):
        agent, world_model = endpoints(project, agent_srv, world_srv)
        campaign = make_campaign(
            project, project.users["researcher"], world, agent, world_model, episodes_per_task=1
        )
        run_campaign(campaign.pk, "")
    campaign.refresh_from_db()
    assert (campaign.status, campaign.error) == (JobStatus.SUCCEEDED, "")
    assert (campaign.episodes_done, campaign.episodes_failed) == (2, 1)
    figures = results(campaign)
    overall = figures.overall
    assert (overall["ended"], overall["failed"], overall["successes"]) == (1, 1, 1)
    assert (overall["pending"], overall["running"], overall["cancelled"]) == (0, 0, 0)
    by_task = {r["task_id"]: r for r in figures.by_task}
    assert by_task["move-sync"]["failed"] == 1 and by_task["count-thursday"]["successes"] == 1
    assert figures.causes == [{"cause": "error", "count": 1, "arm_name": "none"}]
    (error,) = figures.errors
    assert error["count"] == 1 and "too long for this model" in error["error"]

    # Resume plays the failed episode again (once its model takes it); the ended one stays
    assert resumable(campaign)
    assert resume_campaign(campaign)
    campaign.refresh_from_db()
    assert campaign.status == JobStatus.QUEUED
    with (
        fake_openai_server(scripted) as agent_srv,
        fake_openai_server(lambda b, i: WORLD_ANSWER) as world_srv,
    ):
        # the campaign plays with the agent as it was when made (its URL kept on the row)
        Campaign.objects.filter(pk=campaign.pk).update(agent_base_url=agent_srv.base_url)
        ModelEndpoint.objects.filter(pk=world_model.pk).update(base_url=world_srv.base_url)
        run_campaign(campaign.pk, "again")
    campaign.refresh_from_db()
    assert (campaign.status, campaign.episodes_failed) == (JobStatus.SUCCEEDED, 0)
    assert results(campaign).overall["replaced"] == 1
    assert not resumable(campaign) and not resume_campaign(campaign)


@pytest.mark.django_db
def test_the_world_model_is_never_a_silent_pick_among_several(project):
    """No world model chosen: the project's default when it reads a world's prompt, else its
    only one that does; several and none the default: an error naming them."""
    from studio.services.campaigns import choose_world_model, world_model_candidates
    from studio.services.endpoints import EndpointData, make_default, save_endpoint

    world = calendar_world(project)
    user = project.users["researcher"]
    retrieval = project.endpoints.get(role="world", kind="retrieval")
    assert retrieval.is_default  # a new project's default world model: the baseline
    assert world_model_candidates(project) == (None, [])
    with pytest.raises(CampaignError, match="has no world model that reads a world's prompt"):
        choose_world_model(project)

    def world_model(name):
        data = EndpointData(
            name=name, role="world", kind="openai", base_url="http://127.0.0.1:9/v1", model="m"
        )
        return save_endpoint(project, data).endpoint

    scripted = world_model("Scripted demo world")
    agent = save_endpoint(
        project,
        EndpointData(
            name="agent", role="agent", kind="openai", base_url="http://127.0.0.1:9/v1", model="a"
        ),
    ).endpoint
    assert choose_world_model(project) == scripted  # the only one
    assert make_campaign(project, user, world, agent, None).world_endpoint == scripted
    dead = world_model("Dead world")  # alphabetically first: never picked for that
    assert world_model_candidates(project) == (None, [dead, scripted])
    message = (
        "world model: the project has 2 world models that read a world's prompt (Dead world, "
        "Scripted demo world) and none is the default: choose one"
    )
    with pytest.raises(CampaignError) as caught:
        make_campaign(project, user, world, agent, None)
    assert str(caught.value) == message
    make_default(scripted)
    assert world_model_candidates(project) == (scripted, [dead, scripted])
    assert make_campaign(project, user, world, agent, None).world_endpoint == scripted
    make_default(retrieval)  # the baseline as the default again: no pick among the two
    with pytest.raises(CampaignError, match="none is the default"):
        choose_world_model(project)


@transactional
def test_unscored_episodes_are_no_failure_and_not_in_the_causes(project):
    """A typed task with an expected answer but no rubric that applies (the calendar world's
    checks are in its tasks' own rubrics) is played and "not scored": never a cause of a
    failure, nor in the failed episodes."""
    world = calendar_world(project)
    tasks = parse_tasks_jsonl(
        '{"id": "plain", "instruction": "Find the sync and submit its time.", '
        '"expected": "11:30"}\n'
        '{"id": "ruled", "instruction": "Find the sync and submit its time.", "expected": "11:45",'
        ' "rubric": {"episode": [{"name": "answer", "kind": "exact", "target": "final_answer"}]}}\n'
    )
    with (
        fake_openai_server(ScriptedAgent()) as agent_srv,
        fake_openai_server(lambda b, i: WORLD_ANSWER) as world_srv,
    ):
        agent, world_model = endpoints(project, agent_srv, world_srv)
        campaign = make_campaign(
            project,
            project.users["researcher"],
            world,
            agent,
            world_model,
            source="file",
            tasks=tuple(tasks),
            episodes_per_task=2,
        )
        run_campaign(campaign.pk, "")
    campaign.refresh_from_db()
    assert campaign.status == JobStatus.SUCCEEDED, campaign.error
    plain = list(campaign.episodes.filter(task_id="plain"))
    assert all(s.status == SlotStatus.DONE and s.success is None for s in plain)
    assert all(s.end_cause == "submit" for s in plain)
    figures = results(campaign)
    by_task = {r["task_id"]: r for r in figures.by_task}
    assert (by_task["plain"]["scored_by"], by_task["ruled"]["scored_by"]) == ("", "task")
    assert (by_task["plain"]["unscored"], by_task["plain"]["scored"]) == (2, 0)
    assert (by_task["ruled"]["scored"], by_task["ruled"]["successes"]) == (2, 0)  # 11:30 given
    assert (figures.overall["unscored"], figures.overall["scored"]) == (2, 2)
    # only the two scored episodes that were not a success are causes
    assert figures.causes == [{"cause": "submit", "count": 2, "arm_name": "none"}]
    assert set(slot_trajectory_ids(campaign, "failed")).isdisjoint(
        slot_trajectory_ids(campaign, "unscored")
    )
    assert len(slot_trajectory_ids(campaign, "unscored")) == 2
    assert by_task["plain"]["success_rate"] is None


@transactional
def test_a_failing_world_model_fails_the_slot_saying_so(project):
    world = calendar_world(project)
    with (
        fake_openai_server(ScriptedAgent()) as agent_srv,
        fake_openai_server(lambda b, i: (400, "context too long")) as world_srv,
    ):
        agent, world_model = endpoints(project, agent_srv, world_srv)
        campaign = make_campaign(
            project,
            project.users["researcher"],
            world,
            agent,
            world_model,
            tasks=tuple(world_tasks(world, ["count-thursday"])),
            episodes_per_task=1,
        )
        run_campaign(campaign.pk, "")
    slot = CampaignEpisode.objects.get(campaign=campaign)
    assert slot.status == SlotStatus.FAILED
    assert "world model 'fake world'" in slot.error and "context too long" in slot.error
    assert slot.trajectory.metadata["episode"]["end"]["cause"] == "error"


@transactional
def test_a_typed_task_with_its_own_rubric_and_a_final_answer_without_submit(project):
    """A typed task's own expected answer and rubric score its episodes; a world without a
    submit action ends an episode on the agent's final answer (cause final_answer)."""
    from inference.worlds import parse_world
    from studio.services.worlds import save_world

    world = save_world(
        project,
        parse_world(
            {
                "name": "Quiet desk",
                "domain": "mcp",
                "description": "A desk with one tool.",
                "tools": [
                    {
                        "type": "function",
                        "function": {"name": "look", "parameters": {"type": "object"}},
                    }
                ],
            }
        ),
    ).world
    tasks = parse_tasks_jsonl(
        '{"id": "answer", "instruction": "Say 42", "expected": "42", "rubric": {"episode": '
        '[{"name": "right", "kind": "exact", "target": "final_answer"}]}}\n'
    )

    def agent_reply(body, index):
        if not any(m["role"] == "tool" for m in body["messages"]):
            return tool_call("look", {})
        return "<final_answer>42</final_answer>"

    with (
        fake_openai_server(agent_reply) as agent_srv,
        fake_openai_server(lambda b, i: WORLD_ANSWER) as world_srv,
    ):
        agent, world_model = endpoints(project, agent_srv, world_srv)
        campaign = make_campaign(
            project,
            project.users["researcher"],
            world,
            agent,
            world_model,
            source="typed",
            tasks=tuple(tasks),
            episodes_per_task=1,
        )
        run_campaign(campaign.pk, "")
    slot = CampaignEpisode.objects.get(campaign=campaign)
    assert slot.status == SlotStatus.DONE, slot.error
    assert (slot.end_cause, slot.success, slot.reward, slot.steps) == ("final_answer", True, 1.0, 1)
    episode = slot.trajectory.metadata["episode"]
    assert episode["task_spec"]["expected"] == "42" and episode["task_id"] == "answer"


@transactional
def test_cancel_keeps_the_ended_slots_and_resume_plays_the_rest(project):
    world = calendar_world(project)
    agent_script = ScriptedAgent(hold_at=2)  # the second episode's first request waits
    with (
        fake_openai_server(agent_script) as agent_srv,
        fake_openai_server(lambda b, i: WORLD_ANSWER) as world_srv,
    ):
        agent, world_model = endpoints(project, agent_srv, world_srv)
        campaign = make_campaign(
            project,
            project.users["researcher"],
            world,
            agent,
            world_model,
            tasks=tuple(world_tasks(world, ["count-thursday"])),
            episodes_per_task=3,
            concurrency=1,
        )
        runner = threading.Thread(target=_closing(run_campaign), args=(campaign.pk, "first"))
        runner.start()
        assert agent_script.arrived.wait(timeout=30)
        cancel_campaign(campaign)
        wait_for(lambda: Campaign.objects.filter(pk=campaign.pk, phase="cancelling").exists())
        agent_script.release.set()
        runner.join(timeout=60)
        campaign.refresh_from_db()
        assert campaign.status == JobStatus.CANCELLED and campaign.phase == "cancelled"
        statuses = list(campaign.episodes.values_list("status", flat=True))
        assert statuses == [SlotStatus.DONE, SlotStatus.CANCELLED, SlotStatus.PENDING]
        cancelled = campaign.episodes.get(status=SlotStatus.CANCELLED)
        old = cancelled.trajectory
        assert old.metadata["episode"]["end"]["cause"] == "cancelled"
        assert campaign.episodes_done == 1 and campaign.progress == pytest.approx(1 / 3, abs=1e-3)
        done_first = campaign.episodes.get(status=SlotStatus.DONE).trajectory_id
        overall = results(campaign).overall
        states = ("ended", "failed", "cancelled", "pending", "running", "replaced")
        assert tuple(overall[k] for k in states) == (1, 0, 1, 1, 0, 0)
        shown = _show(campaign)
        assert "3 episodes: ended 1, failed 0, cancelled 1, not played 1" in shown
        assert "campaign" in shown and "was cancelled" in shown.splitlines()[0]

        agent_script.hold_at = None
        assert resume_campaign(campaign)
        run_campaign(campaign.pk, "second")
    campaign.refresh_from_db()
    assert campaign.status == JobStatus.SUCCEEDED and campaign.episodes_done == 3
    slots = list(campaign.episodes.all())
    assert all(s.status == SlotStatus.DONE and s.success for s in slots)
    assert slots[0].trajectory_id == done_first  # kept, not played again
    replayed = CampaignEpisode.objects.get(pk=cancelled.pk)
    assert replayed.trajectory_id != old.pk and replayed.attempts == 2
    # the cancelled episode stays in the library, tagged, as what it was
    assert campaign_trajectories(campaign).count() == 4
    overall = results(campaign).overall
    assert (overall["ended"], overall["cancelled"], overall["replaced"]) == (3, 0, 1)
    assert "1 earlier episode (cancelled or failed, then played again) stays in the library" in (
        _show(campaign)
    )
    assert not resume_campaign(campaign)  # every slot done: nothing to resume
    assert not SimulationJob.objects.filter(status__in=["queued", "running"]).exists()


class HoldingAgent(ScriptedAgent):
    """The scripted agent whose first `held` requests (each slot's first step, all of them
    in flight at once) wait for `release`; `arrived` is set once they all wait."""

    def __init__(self, held: int):
        super().__init__()
        self.held = held
        self.waiting = 0
        self.count_lock = threading.Lock()

    def __call__(self, body: dict, index: int):
        if index < self.held:
            with self.count_lock:
                self.waiting += 1
                if self.waiting == self.held:
                    self.arrived.set()
            self.release.wait(timeout=60)
        return super().__call__(body, index)


@transactional
def test_cancel_takes_effect_at_the_next_step_without_the_monitor(project, monkeypatch):
    """The player reads the campaign's cancel_requested itself, before each step and each
    slot: with the monitor blind (it looks once an hour here), the two episodes in flight end
    cancelled at their next step and no other slot starts."""
    import functools

    from studio.jobs import campaigns as engine
    from studio.jobs.runtime import JobMonitor

    monkeypatch.setattr(engine, "JobMonitor", functools.partial(JobMonitor, interval=3600))
    world = calendar_world(project)
    agent_script = HoldingAgent(held=2)
    with (
        fake_openai_server(agent_script) as agent_srv,
        fake_openai_server(lambda b, i: WORLD_ANSWER) as world_srv,
    ):
        agent, world_model = endpoints(project, agent_srv, world_srv)
        campaign = make_campaign(
            project,
            project.users["researcher"],
            world,
            agent,
            world_model,
            tasks=tuple(world_tasks(world, ["count-thursday"])),
            episodes_per_task=6,
            concurrency=2,
        )
        runner = threading.Thread(target=_closing(run_campaign), args=(campaign.pk, "first"))
        runner.start()
        assert agent_script.arrived.wait(timeout=30)  # both slots wait on their first step
        cancel_campaign(campaign)
        agent_script.release.set()
        runner.join(timeout=60)
        assert not runner.is_alive()
        asked = len(agent_srv.requests)
    campaign.refresh_from_db()
    assert campaign.status == JobStatus.CANCELLED and campaign.phase == "cancelled"
    statuses = sorted(campaign.episodes.values_list("status", flat=True))
    assert statuses == sorted([SlotStatus.CANCELLED] * 2 + [SlotStatus.PENDING] * 4)
    assert asked == 2  # the agent was asked for no step after the cancel
    for slot in campaign.episodes.filter(status=SlotStatus.CANCELLED):
        assert slot.end_cause == "cancelled" and slot.steps == 1
        assert slot.trajectory.metadata["episode"]["end"]["cause"] == "cancelled"
    assert not campaign.episodes.filter(status=SlotStatus.PENDING, attempts__gt=0).exists()


@pytest.mark.django_db
def test_create_checks_its_input(project, settings):
    world = calendar_world(project)
    agent, world_model = endpoints(project, "http://127.0.0.1:9/v1", "http://127.0.0.1:9/v1")
    user = project.users["researcher"]
    settings.STUDIO_CAMPAIGN_MAX_EPISODES = 10
    with pytest.raises(CampaignError, match="STUDIO_CAMPAIGN_MAX_EPISODES"):
        make_campaign(project, user, world, agent, world_model, episodes_per_task=6)
    with pytest.raises(CampaignError, match="STUDIO_CAMPAIGN_MAX_CONCURRENCY"):
        make_campaign(project, user, world, agent, world_model, concurrency=99)
    with pytest.raises(CampaignError, match="agent model"):
        make_campaign(project, user, world, world_model, world_model)
    with pytest.raises(CampaignError, match="has no task 'nope'"):
        world_tasks(world, ["nope"])
    bad = parse_tasks_jsonl(
        '{"instruction": "x", "rubric": {"episode": [{"name": "s", "kind": "state", '
        '"key": "no_such_key"}]}}'
    )
    with pytest.raises(CampaignError, match="tasks\\[0\\]"):
        make_campaign(project, user, world, agent, world_model, source="file", tasks=tuple(bad))
    assert (
        not Campaign.objects.exists()
        and not ApiToken.objects.filter(name__startswith="campaign ").exists()
    )


def _show(campaign) -> str:
    import io

    from django.core.management import call_command

    out = io.StringIO()
    call_command("campaign", "show", str(campaign.pk), stdout=out)
    return out.getvalue()


def _closing(fn):
    def run(*args):
        from django.db import connection

        try:
            fn(*args)
        finally:
            connection.close()

    return run


@transactional
def test_a_campaign_over_recorded_starts_plays_from_their_prompt_and_task(project):
    """Recorded trajectories' starting states: each episode starts from the trajectory's
    system prompt, tools and task, in no world; unscored (reward None, success None)."""
    from studio.models import Trajectory
    from studio.services.campaigns import CampaignData, create_campaign, trajectory_tasks
    from tests.support.branching import make_trajectory

    source, _ = make_trajectory(project)
    Trajectory.objects.filter(pk=source.pk).update(system_prompt="You simulate a Debian box.")

    def agent_reply(body, index):
        assert body["messages"][1]["content"] == "Task: Check the project."
        if len(body["messages"]) == 2:
            return "<action>ls -la</action>"
        return "<final_answer>checked</final_answer>"

    with (
        fake_openai_server(agent_reply) as agent_srv,
        fake_openai_server(
            lambda b, i: "<predicted_observation>total 0</predicted_observation>"
        ) as world_srv,
    ):
        agent, world_model = endpoints(project, agent_srv, world_srv)
        campaign = create_campaign(
            project,
            project.users["researcher"],
            CampaignData(
                name="from recorded",
                world=None,
                source="trajectories",
                tasks=tuple(trajectory_tasks(project, [source.pk])),
                agent=agent,
                world_model=world_model,
                episodes_per_task=2,
                max_steps=3,
                seed=1,
            ),
        )
        run_campaign(campaign.pk, "")
        assert world_srv.requests[0]["messages"][0]["content"] == "You simulate a Debian box."
    campaign.refresh_from_db()
    assert campaign.status == JobStatus.SUCCEEDED, campaign.error
    for slot in campaign.episodes.all():
        assert (slot.status, slot.end_cause, slot.steps) == (SlotStatus.DONE, "final_answer", 1)
        assert slot.reward is None and slot.success is None
        episode = slot.trajectory
        assert episode.metadata["started_from"]["trajectory"] == source.pk
        assert episode.system_prompt == "You simulate a Debian box."
        assert Step.objects.get(branch__trajectory=episode).observation == "total 0"
    figures = results(campaign)
    assert figures.overall["scored"] == 0 and figures.overall["success_rate"] is None
    assert figures.overall["unscored"] == 2 and figures.causes == []  # never "not a success"
    assert figures.by_task[0]["scored_by"] == ""
    with pytest.raises(CampaignError, match="no trajectory 999999"):
        trajectory_tasks(project, [999999])


@transactional
def test_campaign_resets_are_not_rate_limited_but_outside_agents_still_are(project, settings):
    from studio.services import episodes
    from studio.services.tokens import create_token

    settings.STUDIO_EPISODE_RESETS_PER_MINUTE = 1
    world = calendar_world(project)
    with (
        fake_openai_server(ScriptedAgent()) as agent_srv,
        fake_openai_server(lambda b, i: WORLD_ANSWER) as world_srv,
    ):
        agent, world_model = endpoints(project, agent_srv, world_srv)
        campaign = make_campaign(project, project.users["researcher"], world, agent, world_model)
        run_campaign(campaign.pk, "")
    assert campaign.episodes.filter(status=SlotStatus.DONE).count() == 4
    outside, _ = create_token(project, "outside agent")
    episodes.reset(outside, world, task_id="count-thursday")
    with pytest.raises(episodes.EpisodeBusy, match="STUDIO_EPISODE_RESETS_PER_MINUTE"):
        episodes.reset(outside, world, task_id="count-thursday")


@transactional
@pytest.mark.usefixtures("isolated_queues")  # no worker takes the message sent again
def test_a_campaign_out_of_task_time_hands_the_rest_to_a_new_message(project, monkeypatch):
    from studio.jobs import evaluations

    world = calendar_world(project)
    with (
        fake_openai_server(ScriptedAgent()) as agent_srv,
        fake_openai_server(lambda b, i: WORLD_ANSWER) as world_srv,
    ):
        agent, world_model = endpoints(project, agent_srv, world_srv)
        campaign = make_campaign(project, project.users["researcher"], world, agent, world_model)
        Campaign.objects.filter(pk=campaign.pk).update(message_id="m1")
        monkeypatch.setattr(evaluations, "task_budget_s", lambda: -1.0)  # no time left at all
        run_campaign(campaign.pk, "m1")
        campaign.refresh_from_db()
        assert (campaign.status, campaign.phase) == (JobStatus.QUEUED, "queued")
        assert campaign.message_id not in ("", "m1")  # sent again, with a new message id
        assert not campaign.episodes.exclude(status=SlotStatus.PENDING).exists()
        monkeypatch.undo()
        run_campaign(campaign.pk, campaign.message_id)  # the new message's run plays them
    campaign.refresh_from_db()
    assert campaign.status == JobStatus.SUCCEEDED and campaign.episodes_done == 4
    assert campaign.attempts == 2


@transactional
def test_a_campaign_whose_worker_died_is_failed_and_resume_settles_its_leftovers(project):
    """The sweeper fails a campaign whose worker stopped beating ("use Resume"); Resume ends
    the episode its dead worker left running (cancelled) and plays that slot again."""
    from datetime import timedelta

    from django.utils import timezone

    from studio.jobs.runtime import fail_lost
    from studio.services import episodes

    world = calendar_world(project)
    with (
        fake_openai_server(ScriptedAgent()) as agent_srv,
        fake_openai_server(lambda b, i: WORLD_ANSWER) as world_srv,
    ):
        agent, world_model = endpoints(project, agent_srv, world_srv)
        campaign = make_campaign(
            project,
            project.users["researcher"],
            world,
            agent,
            world_model,
            tasks=tuple(world_tasks(world, ["count-thursday"])),
            episodes_per_task=1,
        )
        # as a worker that died mid-episode leaves it
        left, _ = episodes.reset(campaign.token, world, task_id="count-thursday")
        slot = campaign.episodes.get()
        CampaignEpisode.objects.filter(pk=slot.pk).update(
            status=SlotStatus.RUNNING, trajectory=left
        )
        long_ago = timezone.now() - timedelta(hours=1)
        Campaign.objects.filter(pk=campaign.pk).update(
            status=JobStatus.RUNNING, heartbeat_at=long_ago, started_at=long_ago
        )
        assert fail_lost(Campaign, Campaign.objects.get(pk=campaign.pk), timezone.now())
        campaign.refresh_from_db()
        assert campaign.status == JobStatus.FAILED and "use Resume" in campaign.error
        assert resume_campaign(campaign)
        run_campaign(campaign.pk, "again")
    campaign.refresh_from_db()
    assert campaign.status == JobStatus.SUCCEEDED
    left.refresh_from_db()
    assert left.metadata["episode"]["end"]["cause"] == "cancelled"
    slot.refresh_from_db()
    assert slot.status == SlotStatus.DONE and slot.trajectory_id != left.pk and slot.success
