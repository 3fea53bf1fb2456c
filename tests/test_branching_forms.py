"""The simulate-from-here form: every field validated server side with a clear message."""

import json

from django.test import override_settings

from studio.forms.branching import ACTION_SNIPPETS, SimulateForm
from studio.models import Domain

VALID = {
    "action": "ls -la",
    "action_kind": "auto",
    "mode": "next",
    "max_steps": "",
    "n": "3",
    "temperature": "0.7",
    "top_p": "0.95",
    "max_tokens": "64",
    "seed": "",
    "backend": "retrieval",
    "model": "",
    "base_url": "",
}


def form(domain="terminal", steps_after=3, **changes):
    return SimulateForm({**VALID, **changes}, domain=domain, steps_after=steps_after)


def errors(f):
    return {k: " ".join(v) for k, v in f.errors.items()}


def test_valid_text_action_kept_as_typed():
    f = form(action="grep -n 'x' file.txt   \n")
    assert f.is_valid(), f.errors
    assert f.cleaned_data["action"] == "grep -n 'x' file.txt"
    assert f.cleaned_data["max_steps"] == 1
    assert f.sampling_params() == {
        "temperature": 0.7,
        "top_p": 0.95,
        "max_tokens": 64,
        "seed": None,
    }


def test_json_action_pretty_printed():
    f = form(domain="mcp", action='{"name":"get_weather","arguments":{"city":"Lyon"}}')
    assert f.is_valid(), f.errors
    assert f.cleaned_data["action"] == json.dumps(
        {"name": "get_weather", "arguments": {"city": "Lyon"}}, indent=2
    )


def test_broken_json_names_line_and_column():
    f = form(domain="mcp", action='{"name": "x",\n "arguments": {oops}}')
    assert not f.is_valid()
    msg = errors(f)["action"]
    assert "not valid JSON at line 2, column" in msg
    assert "Free text" in msg  # auto mode tells how to send it as text


def test_shell_test_bracket_is_text_but_json_kind_is_enforced():
    assert form(action="[ -f setup.py ] && echo yes").is_valid()
    f = form(action="ls", action_kind="json")
    assert not f.is_valid() and "not valid JSON" in errors(f)["action"]
    assert form(action="ls {a,b}", action_kind="text").is_valid()


def test_empty_action_rejected():
    f = form(action="   \n")
    assert "The action is empty" in errors(f)["action"]


def test_number_of_futures_bounds():
    assert form(n="64").is_valid()
    assert "between 1 and 64 (got 65)" in errors(form(n="65"))["n"]
    assert "between 1 and 64 (got 0)" in errors(form(n="0"))["n"]
    assert "whole number" in errors(form(n="three"))["n"]


def test_sampling_bounds():
    assert "Temperature must be between 0 and 2" in errors(form(temperature="2.5"))["temperature"]
    assert "top_p must be above 0" in errors(form(top_p="0"))["top_p"]
    assert "max_tokens must be between 1 and 32768" in errors(form(max_tokens="0"))["max_tokens"]
    assert "Seed must be between" in errors(form(seed="-1"))["seed"]
    f = form(seed="7", temperature="0")
    assert f.is_valid() and f.sampling_params()["seed"] == 7


def test_replay_needs_later_steps():
    f = form(mode="replay", steps_after=0)
    assert "needs recorded steps after this one" in errors(f)["mode"]
    f = form(mode="replay", steps_after=3, max_steps="40")
    assert f.is_valid(), f.errors
    assert f.cleaned_data["max_steps"] == 1  # replay redoes every later step; no budget


@override_settings(AGENT_MODEL_BASE_URL="http://127.0.0.1:9/v1")
def test_rollout_needs_step_budget():
    assert "needs a number of steps" in errors(form(mode="rollout"))["max_steps"]
    assert "1 to 50 steps (got 51)" in errors(form(mode="rollout", max_steps="51"))["max_steps"]
    f = form(mode="rollout", max_steps="5")
    assert f.is_valid() and f.cleaned_data["max_steps"] == 5


@override_settings(AGENT_MODEL_BASE_URL="")
def test_rollout_without_agent_server_is_explained():
    assert "needs an agent model server" in errors(form(mode="rollout", max_steps="3"))["mode"]
    assert form(mode="rollout", max_steps="1").is_valid()  # one step needs no agent


@override_settings(WORLD_MODEL_BASE_URL="", WORLD_MODEL_NAME="served-model", WORLD_MODEL_PATH="")
def test_backend_requirements_and_defaults():
    f = form(backend="openai")
    assert "needs the base URL" in errors(f)["base_url"]
    f = form(backend="openai", base_url="ftp://x")
    assert "must start with http:// or https://" in errors(f)["base_url"]
    f = form(backend="openai", base_url="http://127.0.0.1:9/v1/")
    assert f.is_valid(), f.errors
    assert f.cleaned_data["base_url"] == "http://127.0.0.1:9/v1"
    assert f.cleaned_data["model"] == "served-model"  # the settings default
    f = form(backend="hf", model="/tmp/tiny", base_url="http://ignored")
    assert f.is_valid() and f.cleaned_data["base_url"] == ""
    f = form(backend="retrieval", model="whatever")
    assert f.is_valid() and f.cleaned_data["model"] == ""
    assert "Select a valid choice" in errors(form(backend="vllm"))["backend"]


@override_settings(WORLD_MODEL_NAME="", WORLD_MODEL_PATH="")
def test_hf_without_any_model_is_an_error():
    assert "needs a model path or hub id" in errors(form(backend="hf"))["model"]


def test_every_domain_has_snippets_and_json_ones_parse():
    for domain in Domain:
        assert ACTION_SNIPPETS[domain], domain
    for domain in (Domain.MCP, Domain.ANDROID):
        for _, text in ACTION_SNIPPETS[domain]:
            json.loads(text)
            assert form(domain=domain, action=text).is_valid()
