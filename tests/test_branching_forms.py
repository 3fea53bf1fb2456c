"""The simulate-from-here form: it parses what the browser sends, picks the project's models
and shows the request's errors on the fields they name (the rules themselves:
tests/test_simulation_request.py)."""

import json

import pytest

from inference.simulation.request import ForkFacts
from studio.forms.branching import ACTION_SNIPPETS, SimulateForm
from studio.models import Domain, ModelEndpoint

pytestmark = pytest.mark.django_db

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
}


def agent_endpoint(project, **fields) -> ModelEndpoint:
    return ModelEndpoint.objects.create(
        project=project,
        name=fields.pop("name", "agent"),
        role="agent",
        kind="openai",
        base_url="http://127.0.0.1:9/v1",
        model="agent-model",
        **fields,
    )


def form(project, domain="terminal", steps=5, index=1, **changes):
    fork = ForkFacts(
        step_count=steps, recorded_action="ls" if index < steps else None, domain=domain
    )
    world = project.endpoints.get(kind="retrieval")
    data = {**VALID, "world_endpoint": str(world.pk), **changes}
    return SimulateForm(data, fork_index=index, fork=fork, project=project)


def errors(f):
    return {k: " ".join(v) for k, v in f.errors.items()}


def test_valid_input_becomes_the_request(project):
    f = form(project, action="grep -n 'x' file.txt   \r\n", seed="7", temperature="0")
    assert f.is_valid(), f.errors
    req = f.cleaned_data["request"]
    assert (req.fork_index, req.action, req.n) == (1, "grep -n 'x' file.txt", 3)
    assert req.sampling.as_dict() == {
        "temperature": 0.0,
        "top_p": 0.95,
        "max_tokens": 64,
        "seed": 7,
    }
    assert req.edited and req.world_model.backend == "retrieval"
    assert f.cleaned_data["world_endpoint"].name == "Retrieval baseline"


def test_request_errors_land_on_their_fields(project):
    f = form(project, n="65", top_p="1.5", action="", max_tokens="0")
    assert not f.is_valid()
    assert errors(f) == {
        "n": "n (the number of futures) must be 1 to 64, got 65.",
        "top_p": "top_p must be in (0, 1], got 1.5.",
        "action": "the action is empty: write what the agent does at this step.",
        "max_tokens": "max_tokens must be 1 to 32768, got 0.",
    }


def test_parse_errors_come_first_and_the_rest_is_still_checked(project):
    f = form(project, n="three", temperature="5")
    assert "Enter a whole number." in errors(f)["n"]
    assert errors(f)["temperature"] == "temperature must be in [0, 2], got 5.0."


def test_models_are_the_projects_own(project):
    other = ModelEndpoint.objects.create(
        project=project.other, name="theirs", role="world", kind="retrieval"
    )
    assert (
        "Select a valid choice"
        in errors(form(project, world_endpoint=str(other.pk)))["world_endpoint"]
    )
    agent = agent_endpoint(project)
    assert (
        "Select a valid choice"
        in errors(form(project, world_endpoint=str(agent.pk)))["world_endpoint"]
    )


def test_rollout_needs_an_agent_model_and_takes_it_from_the_form(project):
    f = form(project, mode="rollout", max_steps="3")
    assert "needs an agent model" in errors(f)["agent_endpoint"]
    assert not f.has_agents
    assert form(project, mode="rollout", max_steps="1").is_valid()  # one step: no agent
    agent = agent_endpoint(project)
    f = form(project, mode="rollout", max_steps="3", agent_endpoint=str(agent.pk))
    assert f.is_valid(), f.errors
    assert f.cleaned_data["request"].agent.model == "agent-model"
    assert "is required" in errors(form(project, mode="rollout"))["max_steps"]
    assert (
        "needs recorded steps after step 4" in errors(form(project, mode="replay", index=4))["mode"]
    )


def test_the_default_world_models_sampling_is_the_initial_one(project):
    served = ModelEndpoint.objects.create(
        project=project,
        name="served",
        role="world",
        kind="openai",
        base_url="http://h:9/v1",
        model="m",
        temperature=0.2,
        max_tokens=300,
    )
    project.endpoints.filter(role="world").update(is_default=False)
    ModelEndpoint.objects.filter(pk=served.pk).update(is_default=True)
    fork = ForkFacts(step_count=3, recorded_action="ls")
    f = SimulateForm(fork_index=1, fork=fork, project=project)
    assert f.fields["world_endpoint"].initial == served.pk
    assert (f.fields["temperature"].initial, f.fields["max_tokens"].initial) == (0.2, 300)
    html = str(f["world_endpoint"])
    assert 'data-kind="openai"' in html and 'data-temperature="0.2"' in html
    assert 'data-max-tokens="300"' in html


def test_every_domain_has_snippets_and_json_ones_parse(project):
    for domain in Domain:
        assert ACTION_SNIPPETS[domain], domain
    for domain in (Domain.MCP, Domain.ANDROID):
        for _, text in ACTION_SNIPPETS[domain]:
            json.loads(text)
            assert form(project, domain=domain, action=text).is_valid()
