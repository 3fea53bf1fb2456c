"""Registering models on the Models page and running a rollout with them, in headless
Chromium, through a real worker; the models are a real OpenAI-compatible HTTP server on
127.0.0.1 (a remote model API cannot run here)."""

from __future__ import annotations

import re

import pytest

from studio.models import Branch, JobStatus, ModelEndpoint, SimulationJob, Step
from tests.support.branching import make_trajectory
from tests.support.fake_openai import fake_openai_server

pytestmark = [pytest.mark.browser, pytest.mark.worker, pytest.mark.django_db(transaction=True)]


def responder(request: dict, index: int) -> str:
    messages = request["messages"]
    if request.get("max_tokens") == 1:  # the Models page's "Test"
        return "ready"
    if messages[0]["content"].startswith("You are the agent"):
        acted = sum(1 for m in messages if m["role"] == "assistant")
        if acted >= 4:
            return "<final_answer>done</final_answer>"
        return f"<think>try</think><action>echo agent-{acted}</action>"
    return "<predicted_observation>ok</predicted_observation>"


def add_model(page, live_server, project, *, name, role, url, key):
    page.goto(f"{live_server.url}/projects/{project.pk}/models/")
    page.click("#endpoint-add")
    page.fill("[name=name]", name)
    page.select_option("[name=role]", role)
    page.select_option("[name=kind]", "openai")
    page.fill("[name=base_url]", url)
    page.fill("[name=model]", f"{role}-model")
    page.fill("[name=api_key]", key)
    page.click("#endpoint-save")
    page.wait_for_url(re.compile(r"/models/$"))
    return ModelEndpoint.objects.get(project=project, name=name)


def test_register_models_then_roll_out_with_them(page, live_server, login, project, default_worker):
    trajectory, root = make_trajectory(project, key="endpoints")
    with fake_openai_server(responder) as srv:
        login(page, "admin")
        # before any agent model exists, the editor says so, with a link to add one
        page.goto(f"{live_server.url}/branches/{root.pk}/steps/1/fork/")
        note = page.locator("#no-agent-model")
        assert "No agent model is registered" in note.inner_text()
        assert note.locator("a").get_attribute("href").endswith("/models/new/?role=agent")

        world = add_model(
            page, live_server, project, name="lab world", role="world", url=srv, key="wk-1"
        )
        row = page.locator(f"#endpoint-{world.pk}")
        assert "stored encrypted" in row.inner_text()
        assert "wk-1" not in page.content()  # never shown again
        row.locator(".endpoint-test-button").click()
        page.wait_for_selector(f"#endpoint-{world.pk} .test-ok")
        assert re.search(r"answered\s+in \d+ ms", page.inner_text(f"#endpoint-{world.pk}"))
        add_model(page, live_server, project, name="lab agent", role="agent", url=srv, key="ak-1")

        page.goto(f"{live_server.url}/branches/{root.pk}/steps/1/fork/")
        assert page.locator("#no-agent-model").count() == 0
        page.select_option("[name=world_endpoint]", label="lab world")
        page.select_option("[name=agent_endpoint]", label="lab agent")
        page.select_option("[name=mode]", "rollout")
        page.fill("[name=max_steps]", "4")
        page.fill("[name=n]", "1")
        page.click("#simulate-submit")
        page.wait_for_url(re.compile(r"/jobs/\d+/$"))
        page.wait_for_selector(".job-summary[data-done='1']", timeout=60_000)
        job = SimulationJob.objects.get(pk=int(re.search(r"/jobs/(\d+)/$", page.url).group(1)))
        assert job.status == JobStatus.SUCCEEDED, job.error
        assert (job.world_endpoint.name, job.agent_endpoint.name) == ("lab world", "lab agent")
        branch = Branch.objects.get(job=job)
        own = list(Step.objects.filter(branch=branch).order_by("index"))
        assert [s.provenance for s in own] == ["replayed", "agent", "agent", "agent"]
        assert own[-1].meta.get("final_answer") and own[-1].observation_source == "none"
        # each model got its own key
        pairs = list(zip(srv.requests, srv.authorizations, strict=True))
        assert {a for b, a in pairs if b["model"] == "world-model"} == {"Bearer wk-1"}
        assert {a for b, a in pairs if b["model"] == "agent-model"} == {"Bearer ak-1"}
        text = page.inner_text(".job-branches")
        assert "echo agent-3" in text and "agent" in text
