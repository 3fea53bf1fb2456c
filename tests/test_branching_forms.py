"""The simulate-from-here form: it parses what the browser sends and shows the request's
errors on the fields they name (the rules themselves: tests/test_simulation_request.py)."""

import json

from inference.simulation.request import Defaults, ForkFacts
from studio.forms.branching import ACTION_SNIPPETS, SimulateForm
from studio.models import Domain

VALID = {
    "action": "ls -la",
    "action_format": "auto",
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


PLAIN = Defaults()


def form(domain="terminal", steps=5, index=1, defaults=PLAIN, **changes):
    fork = ForkFacts(
        step_count=steps, recorded_action="ls" if index < steps else None, domain=domain
    )
    return SimulateForm({**VALID, **changes}, fork_index=index, fork=fork, defaults=defaults)


def errors(f):
    return {k: " ".join(v) for k, v in f.errors.items()}


def test_valid_input_becomes_the_request():
    f = form(action="grep -n 'x' file.txt   \r\n", seed="7", temperature="0")
    assert f.is_valid(), f.errors
    req = f.cleaned_data["request"]
    assert (req.fork_index, req.action, req.n) == (1, "grep -n 'x' file.txt", 3)
    assert req.sampling.as_dict() == {
        "temperature": 0.0,
        "top_p": 0.95,
        "max_tokens": 64,
        "seed": 7,
    }
    assert req.edited


def test_request_errors_land_on_their_fields():
    f = form(n="65", top_p="1.5", action="", max_tokens="0")
    assert not f.is_valid()
    assert errors(f) == {
        "n": "n (the number of futures) must be 1 to 64, got 65.",
        "top_p": "top_p must be in (0, 1], got 1.5.",
        "action": "the action is empty: write what the agent does at this step.",
        "max_tokens": "max_tokens must be 1 to 32768, got 0.",
    }


def test_parse_errors_come_first_and_the_rest_is_still_checked():
    f = form(n="three", temperature="5")
    assert "Enter a whole number." in errors(f)["n"]
    assert errors(f)["temperature"] == "temperature must be in [0, 2], got 5.0."


def test_mode_rules_show_on_the_mode_field():
    assert "needs recorded steps after step 4" in errors(form(mode="replay", index=4))["mode"]
    f = form(mode="rollout", max_steps="3")
    assert "needs an agent model" in errors(f)["mode"]
    assert form(mode="rollout", max_steps="3", defaults=Defaults(agent_available=True)).is_valid()
    assert "is required" in errors(form(mode="rollout"))["max_steps"]


def test_backend_defaults_show_as_placeholders_and_fill_blanks():
    served = Defaults(backend="openai", openai_model="served-model", base_url="http://h:9/v1")
    f = form(defaults=served, backend="openai")
    assert f.fields["backend"].initial == "openai"
    assert f.fields["model"].widget.attrs["placeholder"] == "served-model"
    assert f.fields["base_url"].widget.attrs["placeholder"] == "http://h:9/v1"
    assert f.is_valid(), f.errors
    assert f.cleaned_data["request"].world_model.model == "served-model"
    assert "needs the base URL" in errors(form(backend="openai"))["base_url"]
    assert "Select a valid choice" in errors(form(backend="vllm"))["backend"]


def test_every_domain_has_snippets_and_json_ones_parse():
    for domain in Domain:
        assert ACTION_SNIPPETS[domain], domain
    for domain in (Domain.MCP, Domain.ANDROID):
        for _, text in ACTION_SNIPPETS[domain]:
            json.loads(text)
            assert form(domain=domain, action=text).is_valid()
