"""SimulationRequest: one place validates a simulation, with messages that name the field."""

from __future__ import annotations

import pytest

from inference.simulation import limits
from inference.simulation.request import (
    AgentChoice,
    Defaults,
    ForkFacts,
    InvalidRequest,
    SimulationRequest,
    action_is_edited,
)

FORK = ForkFacts(step_count=4, recorded_action="ls /srv", domain="terminal")
SERVED = Defaults(
    backend="openai",
    openai_model="served-model",
    base_url="http://127.0.0.1:9/v1",
    agent=AgentChoice("agent-model", "http://127.0.0.1:9/v1"),
)


PLAIN = Defaults()


def build(fork=FORK, defaults=PLAIN, **data) -> SimulationRequest:
    return SimulationRequest.build({"fork_index": 1, **data}, fork=fork, defaults=defaults)


def errors_of(**data) -> dict[str, list[str]]:
    defaults = data.pop("defaults", Defaults())
    fork = data.pop("fork", FORK)
    with pytest.raises(InvalidRequest) as info:
        build(fork=fork, defaults=defaults, **data)
    return info.value.errors


def test_defaults_fill_what_is_left_blank():
    req = build()
    assert (req.fork_index, req.action, req.mode, req.n, req.max_steps) == (
        1,
        "ls /srv",
        "next",
        1,
        1,
    )
    assert req.sampling.as_dict() == {
        "temperature": limits.DEFAULT_TEMPERATURE,
        "top_p": limits.DEFAULT_TOP_P,
        "max_tokens": limits.DEFAULT_MAX_TOKENS,
        "seed": None,
    }
    assert req.world_model.backend == "retrieval" and req.queue_kind == "default"
    assert not req.edited  # the recorded action
    served = build(defaults=SERVED, model="", base_url="")
    assert served.world_model.model == "served-model"
    assert served.world_model.base_url == "http://127.0.0.1:9/v1"


def test_every_bad_field_is_named_at_once():
    errors = errors_of(
        n=65,
        temperature=3,
        top_p=0,
        max_tokens="many",
        seed=-1,
        mode="dream",
        backend="gpt",
        action="",
    )
    assert errors == {
        "n": ["n (the number of futures) must be 1 to 64, got 65"],
        "temperature": ["temperature must be in [0, 2], got 3"],
        "top_p": ["top_p must be in (0, 1], got 0"],
        "max_tokens": ["max_tokens must be a whole number, got 'many'"],
        "seed": [f"seed must be 0 to {limits.MAX_SEED}, got -1"],
        "mode": ["mode must be one of next, replay, rollout, got 'dream'"],
        "backend": ["backend must be one of retrieval, openai, hf, got 'gpt'"],
        "action": ["the action is empty: write what the agent does at this step"],
    }


def test_types_are_checked_not_coerced():
    assert "whole number, got True" in errors_of(n=True)["n"][0]
    assert "whole number, got 2.5" in errors_of(n=2.5)["n"][0]
    assert build(n=2.0).n == 2  # a JSON number that is whole
    assert "must be a number, got '0.7'" in errors_of(temperature="0.7")["temperature"][0]
    assert "must be in [0, 2], got nan" in errors_of(temperature=float("nan"))["temperature"][0]
    assert errors_of(action=3)["action"] == ["the action must be text, got int"]


def test_fork_index_and_new_steps():
    assert errors_of(fork_index=9)["fork_index"] == [
        "fork_index 9 is outside the branch's steps (0 to 3, or 4 to add a step)"
    ]
    assert "whole number" in errors_of(fork_index=None)["fork_index"][0]
    new = ForkFacts(step_count=4, recorded_action=None)
    assert errors_of(fork=new, fork_index=4)["action"] == [
        "step 4 is a new step: write the action the agent takes"
    ]
    req = build(fork=new, fork_index=4, action="echo hi")
    assert req.edited and req.fork_index == 4


def test_modes_and_their_budgets():
    assert build(mode="replay", max_steps=40).max_steps == 1  # replay redoes every later step
    last = ForkFacts(step_count=2, recorded_action="x")
    assert "needs recorded steps after step 1" in errors_of(fork=last, mode="replay")["mode"][0]
    assert "is required" in errors_of(mode="rollout")["max_steps"][0]
    assert "must be 1 to 50, got 51" in errors_of(mode="rollout", max_steps=51)["max_steps"][0]
    assert "needs an agent model" in errors_of(mode="rollout", max_steps=3)["agent_model"][0]
    given = build(mode="rollout", max_steps=3, agent_model="a", agent_base_url="http://h/v1/")
    assert given.agent == AgentChoice("a", "http://h/v1")
    bad = errors_of(mode="rollout", max_steps=3, agent_base_url="ftp://h")
    assert "needs the base URL of an OpenAI-compatible server" in bad["agent_base_url"][0]
    assert bad["agent_model"] == ["the agent model needs a served model name"]
    assert build(mode="rollout", max_steps=1, agent_model="a").agent is None  # one step
    assert build(mode="rollout", max_steps=1).max_steps == 1  # one step needs no agent
    assert build(mode="rollout", max_steps=5, defaults=SERVED).max_steps == 5


def test_backends_need_what_they_need():
    bare = Defaults(openai_model="", hf_model="")
    errors = errors_of(backend="openai", defaults=bare)
    assert errors["model"] == ["the openai backend needs a served model name (none is configured)"]
    assert "needs the base URL of an OpenAI-compatible server" in errors["base_url"][0]
    assert (
        "must start with http:// or https://, got 'ftp://x'"
        in errors_of(backend="openai", base_url="ftp://x", model="m")["base_url"][0]
    )
    req = build(backend="openai", model=" m ", base_url="http://h:1/v1/")
    assert (req.world_model.model, req.world_model.base_url) == ("m", "http://h:1/v1")
    hf = build(backend="hf", model="/models/tiny", base_url="http://ignored")
    assert hf.world_model.base_url == "" and hf.queue_kind == "gpu"
    assert "needs a model path or hub id" in errors_of(backend="hf", defaults=bare)["model"][0]
    retrieval = build(backend="retrieval", model="whatever", base_url="http://x")
    assert (retrieval.world_model.model, retrieval.world_model.base_url) == ("", "")


def test_actions_keep_the_users_text_and_json_is_checked():
    req = build(action="grep -n 'x' file.txt   \r\n\r\n")
    assert req.action == "grep -n 'x' file.txt" and req.edited
    mcp = ForkFacts(step_count=2, recorded_action='{"name": "a", "arguments": {}}', domain="mcp")
    compact = '{"name":"a","arguments":{}}'
    req = build(fork=mcp, action=compact)
    assert not req.edited and req.action == mcp.recorded_action  # same value: no edit
    broken = errors_of(fork=mcp, action='{"name": "x",\n "arguments": {oops}}')["action"][0]
    assert broken.startswith("the action is not valid JSON at line 2, column")
    assert "choose free text" in broken
    assert build(action="[ -f setup.py ] && echo yes").action.startswith("[")  # shell, not JSON
    assert "not valid JSON" in errors_of(action="ls", action_format="json")["action"][0]
    assert build(action="ls {a,b}", action_format="text").action == "ls {a,b}"
    assert "not valid JSON" in errors_of(fork=mcp, action="[1,", action_format="auto")["action"][0]


def test_edits_are_semantic():
    assert not action_is_edited("ls -la", "ls -la\n  ")
    assert not action_is_edited("a\r\nb", "a\nb")
    assert action_is_edited("ls -la", "ls -l")
    assert not action_is_edited('{"a": [1, 2]}', '{\n  "a": [1, 2]\n}')
    assert action_is_edited('{"a": [1, 2]}', '{"a": [2, 1]}')
    assert action_is_edited("3", "3.0")  # text, not JSON: numbers compare as typed
    assert action_is_edited(None, "ls")
    # JSON values by type: true is not 1, 1.0 is 1
    assert action_is_edited('{"force": true}', '{"force": 1}')
    assert not action_is_edited('{"n": 1}', '{"n": 1.0}')
    assert not action_is_edited('{"a": 1, "b": 2}', '{"b": 2, "a": 1}')
    # indentation and spaces inside a line are meaning (code, heredocs)
    assert action_is_edited("if x:\n    y()", "if x:\n  y()")
    assert action_is_edited("echo 'a  b'", "echo 'a b'")
    assert not action_is_edited("\n\nls  \r\n", "ls")


def test_edited_and_the_diff_agree():
    """The "edited" label of a future and the diff the compare view shows use one
    definition of "the same": neither can say "same" where the other says "changed"."""
    from studio.services.diffs import meaning_diff

    pairs = [
        ("ls -la", "ls -la\n  "),
        ("if x:\n    y()", "if x:\n  y()"),
        ("echo 'a  b'", "echo 'a b'"),
        ('{"force": true}', '{"force": 1}'),
        ('{"n": 1}', '{"n": 1.0}'),
        ('{"a": [1, 2]}', '{\n  "a": [1, 2]\n}'),
        ("3", "3.0"),
    ]
    for a, b in pairs:
        assert action_is_edited(a, b) == (not meaning_diff(a, b).same), (a, b)


def test_odd_input_is_a_field_error_never_a_crash():
    errors = errors_of(
        mode=["next"],
        backend={"name": "openai"},
        action_format=3,
        temperature=10**400,
        top_p=-(10**400),
        beam=2,
    )
    assert errors["mode"] == ["mode must be one of next, replay, rollout, got ['next']"]
    assert errors["backend"][0].startswith("backend must be one of")
    assert errors["action_format"][0].startswith("action_format must be one of")
    assert errors["temperature"] == ["temperature must be in [0, 2], got 'a number too large'"]
    assert errors["top_p"][0].startswith("top_p must be in (0, 1], got")
    assert errors["beam"] == ["unknown field 'beam'"]  # reported with the others
    deep = errors_of(action="[" * 100_000, action_format="json")["action"]
    assert deep == ["the action's JSON is nested too deeply to read"]
    assert build(fork_index=1.0).fork_index == 1


def test_an_unedited_action_is_sent_as_recorded():
    mcp = ForkFacts(step_count=2, recorded_action='{"name":"a","arguments":{}}', domain="mcp")
    req = build(fork=mcp, action='{\n  "name": "a",\n  "arguments": {}\n}\n')
    assert not req.edited and req.action == '{"name":"a","arguments":{}}'
    spaced = ForkFacts(step_count=2, recorded_action="ls -la  ", domain="terminal")
    assert build(fork=spaced, action="ls -la").action == "ls -la  "  # byte for byte


def test_limits_are_the_ones_the_studio_shows():
    from studio.forms.endpoints import EndpointForm
    from studio.models import Provenance
    from studio.models.jobs import SimulationMode
    from studio.models.trajectories import ParseStatus

    assert dict(SimulationMode.choices) == limits.MODES
    assert dict(EndpointForm.base_fields["kind"].choices) == limits.BACKENDS
    from inference.simulation import sink
    from studio.models import ObservationSource

    assert {sink.REPLAYED, sink.EDITED, sink.AGENT} <= set(Provenance.values)
    assert {sink.SIMULATED_OBSERVATION, sink.PERTURBED_OBSERVATION, sink.NO_OBSERVATION} <= set(
        ObservationSource.values
    )
    assert {"well_formed", "no_tag", "unclosed"} <= set(ParseStatus.values)
