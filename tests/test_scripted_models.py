"""The scripted demo models (`studio.demo_data.scripted_models`, `manage.py demo_models`): a
real HTTP server on 127.0.0.1 answering an agent and a world model that are rules, not
models; `load_demo` adding their endpoints; and episodes of the demo calendar played through
the studio's episode API (a real uvicorn) by the scripted agent against the scripted world,
scored by the world's rubric: some succeed, some fail."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from io import StringIO

import jsonschema
import pytest
from django.core.management import call_command

from inference.parsing import parse_prediction
from inference.prompts import build_messages
from inference.rubrics import step_seed, terminal_check
from inference.types import Turn
from inference.worlds import compose, parse_world
from studio.demo_data import scripted_models as S
from studio.demo_data.worlds_text import BACKUP_WORLD, CALENDAR_WORLD
from studio.models import ModelEndpoint, Project, Step, Trajectory, World
from studio.services import episodes
from studio.services.tokens import create_token


def post(url: str, body: dict) -> tuple[int, dict]:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), method="POST",
        headers={"Content-Type": "application/json"},
    )  # fmt: skip
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def openai_tools(spec) -> list[dict]:
    return [dict(t) for t in spec.tools]


def agent_chat(instruction: str, history: list[tuple[dict | str, str]], tools: bool) -> list:
    """The chat as the campaign's agent sends it (system, task, tool calls and results)."""
    messages: list[dict] = [
        {"role": "system", "content": "You are the agent. Call one tool at a time."},
        {"role": "user", "content": f"Task: {instruction}"},
    ]
    for i, (action, observation) in enumerate(history):
        if tools and isinstance(action, dict):
            messages.append({"role": "assistant", "content": None, "tool_calls": [
                {"id": f"call_{i}", "type": "function", "function": {
                    "name": action["name"], "arguments": json.dumps(action["arguments"])}}]})  # fmt: skip
            messages.append({"role": "tool", "tool_call_id": f"call_{i}", "content": observation})
        else:
            messages.append({"role": "assistant", "content": f"<action>{action}</action>"})
            messages.append({"role": "user", "content": f"Observation:\n{observation}"})
    return messages


def next_action(message: dict) -> dict | str:
    if message.get("tool_calls"):
        fn = message["tool_calls"][0]["function"]
        return {"name": fn["name"], "arguments": json.loads(fn["arguments"])}
    content = message["content"]
    assert "<action>" in content, content
    return content.split("<action>", 1)[1].split("</action>", 1)[0]


def play_in_process(world: dict, task_id: str, seed: int) -> list[tuple[dict | str, str, dict]]:
    """An episode of the scripted agent against the scripted world, with the world model's
    prompt the studio composes: [(action, observation, reported state)]; the last action
    is the submit."""
    spec = parse_world(world)
    task = spec.task(task_id)
    prompt = compose(spec).system_prompt
    tools = bool(spec.tools)
    played: list[tuple[dict | str, str, dict]] = []
    turns: list[Turn] = []
    for i in range(task.max_steps):
        body = {"model": S.AGENT_MODEL, "seed": step_seed(seed, i),
                "messages": agent_chat(task.instruction, [(a, o) for a, o, _ in played], tools)}  # fmt: skip
        if tools:
            body["tools"] = openai_tools(spec)
        action = next_action(S.completion(body)["choices"][0]["message"])
        text = json.dumps(action) if isinstance(action, dict) else action
        if (isinstance(action, dict) and action["name"] == "submit_answer") or str(
            action
        ).startswith("FINAL ANSWER:"):
            played.append((action, "", {}))
            break
        asked = build_messages(prompt, turns, Turn(action=text), task.instruction)
        answer = S.completion({"model": S.WORLD_MODEL, "messages": asked, "seed": i})
        parsed = parse_prediction(answer["choices"][0]["message"]["content"])
        played.append((action, parsed.observation, parsed.state or {}))
        turns.append(Turn(action=text, observation=parsed.observation))
        if terminal_check(spec.termination, observation=parsed.observation, state=parsed.state):
            break  # the world's terminal check ends the episode
    return played


# ---- the server ---------------------------------------------------------------------------


def test_the_server_lists_and_answers_its_roles_and_says_they_are_scripted():
    spec = parse_world(CALENDAR_WORLD)
    task = spec.task("count-thursday")
    with S.running() as url:
        with urllib.request.urlopen(f"{url}/models", timeout=10) as response:
            listed = json.loads(response.read())
        assert [m["id"] for m in listed["data"]] == [
            "scripted-agent",
            "scripted-world",
            "scripted-judge",
            "scripted-embedding",
        ]
        assert all("not a model" in m["owned_by"] for m in listed["data"])
        status, agent = post(f"{url}/chat/completions", {
            "model": "scripted-agent", "seed": 7, "tools": openai_tools(spec),
            "messages": agent_chat(task.instruction, [], tools=True)})  # fmt: skip
        assert status == 200, agent
        choice = agent["choices"][0]
        assert choice["finish_reason"] == "tool_calls"
        call = choice["message"]["tool_calls"][0]["function"]
        assert call["name"] == "list_events"
        assert json.loads(call["arguments"])["date"] == "2026-03-12"
        assert agent["model"] == "scripted-agent" and "not-a-model" in agent["system_fingerprint"]
        assert agent["usage"]["prompt_tokens"] > 0 and agent["usage"]["completion_tokens"] > 0
        asked = build_messages(
            compose(spec).system_prompt, [], Turn(action=json.dumps(
                {"name": "list_events", "arguments": {"date": "2026-03-12"}})), task.instruction,
        )  # fmt: skip
        status, world = post(
            f"{url}/chat/completions", {"model": "scripted-world", "messages": asked, "seed": 3}
        )
        assert status == 200, world
        text = world["choices"][0]["message"]["content"]
        parsed = parse_prediction(text)
        assert parsed.status == "well_formed" and "Scripted demo world" in parsed.thinking
        events = json.loads(parsed.observation)["events"]
        assert [e["id"] for e in events] == ["evt_7Qk2", "evt_93fA", "evt_1b0c"]
        assert parsed.state == {"sync_moved": False, "attendees_told": False}
        usage = world["usage"]
        assert usage["completion_tokens"] == len(text.split())
        assert usage["prompt_tokens"] == sum(len(m["content"].split()) for m in asked)
        # streamed as OpenAI streams, usage last
        status, _ = post(f"{url}/chat/completions", {"model": "nope", "messages": asked})
        assert status == 404
        request = urllib.request.Request(f"{url}/chat/completions", method="POST", data=json.dumps(
            {"model": "scripted-world", "messages": asked, "seed": 3, "stream": True,
             "stream_options": {"include_usage": True}}).encode())  # fmt: skip
        with urllib.request.urlopen(request, timeout=10) as response:
            lines = [ln for ln in response.read().decode().splitlines() if ln.startswith("data: ")]
        assert lines[-1] == "data: [DONE]"
        chunks = [json.loads(ln[6:]) for ln in lines[:-1]]
        streamed = "".join(
            c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"]
        )
        assert streamed == text and chunks[-1]["usage"] == usage


def test_the_studios_openai_backend_reads_the_scripted_world():
    """The studio's own client (streamed, as a simulation streams) gets the same answer."""
    from inference.backends import make_backend
    from inference.types import GenerationRequest, SamplingParams

    spec = parse_world(BACKUP_WORLD)
    asked = build_messages(compose(spec).system_prompt, [], Turn(action="df -h"), "why")
    with S.running() as url:
        backend = make_backend("openai", base_url=url, model="scripted-world")
        params = SamplingParams(n=2, max_tokens=512, seed=4)
        samples = backend.generate(
            GenerationRequest(messages=asked, params=params), lambda e: False
        )
    assert len(samples) == 2
    parsed = parse_prediction(samples[0].text)
    assert "/dev/sdb1        98G   93G     0 100% /var/backups" in parsed.observation
    assert parsed.state == {"space_freed": False, "recent_dumps_kept": True}


# ---- the agent ----------------------------------------------------------------------------


@pytest.mark.parametrize("task_id", [t["id"] for t in CALENDAR_WORLD["tasks"]])
def test_the_agents_tool_calls_satisfy_the_tools_schemas(task_id):
    schemas = {t["name"]: t["inputSchema"] for t in CALENDAR_WORLD["tools"]}
    for seed in range(12):
        played = play_in_process(CALENDAR_WORLD, task_id, seed)
        assert played and played[-1][0]["name"] == "submit_answer", played
        for action, observation, _ in played:
            jsonschema.validate(action["arguments"], schemas[action["name"]])
            assert "error" not in observation


def test_generic_arguments_satisfy_any_schema():
    schema = {"type": "object", "required": ["n", "kind", "tags", "when", "flag"], "properties": {
        "n": {"type": "integer", "minimum": 3, "maximum": 5},
        "kind": {"type": "string", "enum": ["a", "b"]},
        "tags": {"type": "array", "items": {"type": "string", "minLength": 4}, "minItems": 2},
        "when": {"type": "string", "format": "date"},
        "flag": {"type": "boolean"},
        "nested": {"type": "object", "properties": {"x": {"type": "number"}}, "required": ["x"]},
    }}  # fmt: skip
    tools = [{"type": "function", "function": {"name": "probe", "parameters": schema}}]
    seen = set()
    for seed in range(15):
        answer = S.completion({
            "model": S.AGENT_MODEL, "seed": seed, "tools": tools,
            "messages": [{"role": "user", "content": "Task: probe the thing on 2026-04-01"}]})  # fmt: skip
        call = answer["choices"][0]["message"]["tool_calls"][0]["function"]
        arguments = json.loads(call["arguments"])
        jsonschema.validate(arguments, schema)
        seen.add(json.dumps(arguments, sort_keys=True))
    assert len(seen) > 5  # the seed chooses


def test_the_same_seed_gives_the_same_answer_and_seeds_change_the_choices():
    answers = [play_in_process(CALENDAR_WORLD, "move-sync", seed)[-1][0] for seed in range(20)]
    again = [play_in_process(CALENDAR_WORLD, "move-sync", seed)[-1][0] for seed in range(20)]
    assert answers == again
    assert {a["arguments"]["answer"] for a in answers} >= {"11:30", "14:00"}


def test_the_terminal_world_ends_on_a_final_answer_line_and_its_state_follows_the_commands():
    outcomes = set()
    for seed in range(20):
        played = play_in_process(BACKUP_WORLD, "free-space", seed)
        states = [s for _, _, s in played if s]
        if played[-1][0].startswith("FINAL ANSWER:"):
            outcomes.add(("answered", states[-1]["space_freed"]))
        else:
            assert states[-1]["recent_dumps_kept"] is False  # the terminal check's end
            outcomes.add(("wiped", False))
    assert outcomes == {("answered", True), ("answered", False), ("wiped", False)}


# ---- load_demo ----------------------------------------------------------------------------


@pytest.mark.django_db
def test_load_demo_adds_the_scripted_endpoints_once_and_episodes_take_the_scripted_world(
    monkeypatch,
):
    monkeypatch.setenv("STUDIO_DEMO_MODELS_URL", "http://127.0.0.1:8199/v1/")
    out = StringIO()
    call_command("load_demo", stdout=out)
    assert "scripted, not a model" in out.getvalue()
    call_command("load_demo", stdout=StringIO())
    project = Project.objects.get(name="Demo")
    scripted = {
        e.name: e
        for e in ModelEndpoint.objects.filter(project=project, name__startswith="Scripted")
    }
    assert set(scripted) == {
        "Scripted demo agent",
        "Scripted demo world",
        "Scripted demo judge",
        "Scripted demo embeddings",
    }
    agent, world = scripted["Scripted demo agent"], scripted["Scripted demo world"]
    judge = scripted["Scripted demo judge"]
    assert (judge.role, judge.kind, judge.model) == ("judge", "openai", "scripted-judge")
    assert judge.is_default  # the only judge: evaluations of the demo can run at once
    embeddings = scripted["Scripted demo embeddings"]
    assert (embeddings.role, embeddings.model) == ("embedding", "scripted-embedding")
    assert embeddings.is_default  # behaviour search ranks and clusters by meaning with it
    assert (agent.role, agent.kind, agent.model, agent.base_url) == (
        "agent",
        "openai",
        "scripted-agent",
        "http://127.0.0.1:8199/v1",
    )
    assert (world.role, world.kind, world.model) == ("world", "openai", "scripted-world")
    assert agent.is_default  # the only agent model
    baseline = project.endpoints.get(kind="retrieval")
    assert baseline.is_default and not world.is_default  # simulations keep their default
    # an episode in a demo world is never answered by the baseline: the scripted world
    token, _ = create_token(project, "demo")
    calendar = World.objects.get(project=project, name="Northwind calendar")
    trajectory, _ = episodes.reset(token, calendar, task_id="count-thursday", seed=1)
    job = episodes.start_step(
        token, trajectory.pk, {"name": "list_events", "arguments": {"date": "2026-03-12"}}
    )
    assert job.world_endpoint_id == world.pk and job.base_url == world.base_url
    # another port next time: the endpoints follow it, nothing is added
    monkeypatch.setenv("STUDIO_DEMO_MODELS_URL", "http://127.0.0.1:8300/v1")
    call_command("load_demo", stdout=StringIO())
    rows = ModelEndpoint.objects.filter(project=project, name__startswith="Scripted")
    assert rows.count() == 4 and {e.base_url for e in rows} == {"http://127.0.0.1:8300/v1"}


@pytest.mark.django_db
def test_load_demo_without_the_variable_adds_no_scripted_endpoint(monkeypatch):
    monkeypatch.delenv("STUDIO_DEMO_MODELS_URL", raising=False)
    call_command("load_demo", stdout=StringIO())
    assert not ModelEndpoint.objects.filter(name__startswith="Scripted").exists()
    assert len(World.objects.get(name="Northwind calendar").latest.spec().tasks) == 5


# ---- episodes through the studio ------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_twenty_seeded_episodes_through_the_episode_api_some_succeed_some_fail(monkeypatch):
    from tests.support.asgi import asgi_server
    from tests.test_direct_steps import http

    with S.running() as models, asgi_server() as base:
        monkeypatch.setenv("STUDIO_DEMO_MODELS_URL", models)
        call_command("load_demo", stdout=StringIO())
        project = Project.objects.get(name="Demo")
        calendar = World.objects.get(project=project, name="Northwind calendar")
        _, secret = create_token(project, "scripted agent")
        url = f"{base}/env/t/{secret}/worlds/{calendar.pk}"
        rewards = []
        for seed in range(20):
            status, reset, _ = http("POST", f"{url}/reset", {"task_id": "move-sync", "seed": seed})
            assert status == 200, reset
            observation = reset["observation"]
            tools = [{"type": "function", "function": {"name": t["name"],
                      "description": t["description"], "parameters": t["input_schema"]}}
                     for t in observation["tools"]]  # fmt: skip
            history: list[tuple[dict | str, str]] = []
            done, reward = False, None
            while not done:
                status, answer = post(f"{models}/chat/completions", {
                    "model": "scripted-agent", "tools": tools, "seed": step_seed(seed, len(history)),
                    "messages": agent_chat(observation["task"], history, tools=True)})  # fmt: skip
                assert status == 200, answer
                action = next_action(answer["choices"][0]["message"])
                status, step, _ = http(
                    "POST",
                    f"{url}/step",
                    {"episode_id": observation["episode_id"], "action": action},
                )
                assert status == 200, step  # the arguments pass the tool's schema
                history.append((action, step["observation"]["text"]))
                done, reward = step["done"], step["reward"]
            rewards.append(reward)
            trajectory = Trajectory.objects.get(pk=int(observation["episode_id"]))
            end = trajectory.metadata["episode"]["end"]
            assert end["cause"] == "submit" and end["reward"] == reward
    successes = sum(1 for r in rewards if r == 1.0)
    assert 0 < successes < 20, rewards
    assert all(r is not None and 0 <= r <= 1 for r in rewards)
    steps = Step.objects.filter(
        branch__trajectory__project=project, branch__trajectory__source_format="episode"
    )
    asked = [s for s in steps if not s.meta.get("submit")]
    assert asked and {s.meta.get("endpoint") for s in asked} == {"Scripted demo world"}


def test_a_prompted_perturbation_fails_the_call_and_a_failed_call_changes_nothing():
    from inference.prompts import perturbation_note

    spec = parse_world(CALENDAR_WORLD)
    prompt, task = compose(spec).system_prompt, spec.task("move-sync")
    move = json.dumps({"name": "update_event", "arguments": {
        "event_id": "evt_93fA", "start": "2026-03-13T11:30:00+01:00"}})  # fmt: skip
    perturbed = Turn(action=move)
    asked = build_messages(prompt, [], perturbed, task.instruction)
    asked[-1]["content"] += perturbation_note("the calendar server answers 503 Service Unavailable")
    parsed = parse_prediction(S.world_answer(asked, seed=1))
    assert json.loads(parsed.observation)["error"]["message"].startswith("the calendar server")
    assert parsed.state == {"sync_moved": False, "attendees_told": False}
    # the failed call is history now: it moved nothing, the next one does
    failed = Turn(action=move, observation=parsed.observation)
    again = build_messages(prompt, [failed], Turn(action=move), task.instruction)
    parsed = parse_prediction(S.world_answer(again, seed=1))
    assert json.loads(parsed.observation)["sequence"] == 2  # one move, not two
    assert parsed.state == {"sync_moved": True, "attendees_told": True}  # notified by default
    # the agent tries a failed call again
    history = [({"name": "list_events", "arguments": {"date": "2026-03-12"}},
                json.dumps({"error": {"code": 503, "message": "unavailable"}}))]  # fmt: skip
    answer = S.completion({"model": S.AGENT_MODEL, "seed": 2, "tools": openai_tools(spec),
                           "messages": agent_chat(task.instruction, history, tools=True)})  # fmt: skip
    call = answer["choices"][0]["message"]["tool_calls"][0]["function"]
    assert call["name"] == "list_events"


def _judge_row(prediction: str, **extra) -> dict:
    return {
        "prompt": ["$ ls /srv", "$ cat /srv/notes.txt"],
        "response": ["notes.txt\nbackup.sh", "remember the backup at 02:00\n## not a heading"],
        "turn_idx": 2,
        "predicted_observation": prediction,
        "gen": prediction,
        **extra,
    }


def test_the_scripted_judge_scores_a_faithful_prediction_above_an_unrelated_one():
    from inference.judge import DIMENSIONS, build_judge_messages, parse_judgement
    from studio.demo_data.scripted_judge import judge_answer

    def total(prediction: str, **extra) -> dict:
        answer = judge_answer(build_judge_messages(_judge_row(prediction, **extra)))
        assert "not a model" in answer
        dims = ("consistency", "realism") if extra.get("no_reference") else DIMENSIONS
        return parse_judgement(answer, dims).scores

    same = total("remember the backup at 02:00\n## not a heading")
    other = total('{"error": "permission denied"}')
    assert same["factuality"] == 5 and same["format"] == 5  # the heading inside is not cut
    assert other["factuality"] < same["factuality"] and other["format"] < same["format"]
    assert sum(other.values()) < sum(same.values())
    # without a reference: only the two dimensions that need none
    assert set(total("notes.txt", no_reference=True)) == {"consistency", "realism"}
    assert total("", no_reference=False)["format"] == 1  # no output


def test_the_scripted_judge_prefers_the_prediction_closer_to_the_reference_in_pairs():
    from inference.judge import build_pairwise_messages, parse_pair_verdict
    from studio.demo_data.scripted_judge import judge_answer

    row = _judge_row("")
    close, far = "remember the backup at 02:00", "kernel panic"
    assert parse_pair_verdict(judge_answer(build_pairwise_messages(row, close, far))).winner == "A"
    assert parse_pair_verdict(judge_answer(build_pairwise_messages(row, far, close))).winner == "B"
    assert parse_pair_verdict(judge_answer(build_pairwise_messages(row, far, far))).winner == "tie"
