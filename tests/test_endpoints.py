"""Model endpoints: seeded from the environment, managed by admins on the Models page, keys
stored encrypted and never shown, "Test" against a real HTTP server on 127.0.0.1."""

from __future__ import annotations

import pytest
from django.urls import reverse

from studio.models import JobStatus, ModelEndpoint
from studio.secrets import SecretError, decrypt, encrypt
from studio.services.endpoints import (
    EndpointError,
    api_key_of,
    delete_endpoint,
    seed_endpoints,
    simulation_defaults,
)
from studio.services.projects import do_create_project
from tests.support.branching import make_job, make_trajectory
from tests.support.fake_openai import fake_openai_server

pytestmark = pytest.mark.django_db

SECRET = "sk-test-0123456789abcdef"


def add(client, project, **fields):
    data = {
        "name": "served",
        "role": "world",
        "kind": "openai",
        "base_url": "http://127.0.0.1:9/v1/",
        "model": "world-model",
        "api_key": "",
        "api_key_env": "",
        "supports_n": "on",
        **fields,
    }
    return client.post(reverse("endpoint_create", args=[project.pk]), data)


def test_a_new_project_starts_with_the_environments_models(settings, monkeypatch):
    settings.WORLD_MODEL_BACKEND = "openai"
    settings.WORLD_MODEL_BASE_URL = "http://10.0.0.5:8000/v1"
    settings.WORLD_MODEL_NAME = "Qwen/Qwen-AgentWorld-35B-A3B"
    settings.AGENT_MODEL_BASE_URL = "http://10.0.0.6:8000/v1"
    settings.AGENT_MODEL_NAME = "agent-llm"
    monkeypatch.setenv("WORLD_MODEL_API_KEY", "from-env")
    monkeypatch.delenv("AGENT_MODEL_API_KEY", raising=False)
    project = do_create_project(name="fresh")
    rows = {e.name: e for e in project.endpoints.all()}
    assert set(rows) == {
        "Retrieval baseline",
        "World model (from the environment)",
        "Agent model (from the environment)",
    }
    world = rows["World model (from the environment)"]
    assert (world.kind, world.base_url, world.model) == (
        "openai",
        "http://10.0.0.5:8000/v1",
        "Qwen/Qwen-AgentWorld-35B-A3B",
    )
    assert world.is_default and not rows["Retrieval baseline"].is_default
    # keys are referenced by their variable, never copied into the database
    assert world.api_key_env == "WORLD_MODEL_API_KEY" and world.api_key_encrypted == ""
    assert rows["Agent model (from the environment)"].api_key_env == "WORLD_MODEL_API_KEY"
    defaults = simulation_defaults(project)
    assert (defaults.backend, defaults.base_url) == ("openai", "http://10.0.0.5:8000/v1")
    assert defaults.agent is not None and defaults.agent.model == "agent-llm"
    assert seed_endpoints(project) == []  # seeding again adds nothing


def test_admin_adds_an_endpoint_whose_key_is_encrypted_and_never_shown(client, project):
    client.force_login(project.users["admin"])
    r = add(client, project, api_key=SECRET)
    assert r.status_code == 302
    endpoint = ModelEndpoint.objects.get(name="served")
    assert endpoint.base_url == "http://127.0.0.1:9/v1"  # trailing slash dropped
    assert (
        SECRET not in endpoint.api_key_encrypted and decrypt(endpoint.api_key_encrypted) == SECRET
    )
    assert api_key_of(endpoint) == SECRET and endpoint.key_status == "stored encrypted"
    page = client.get(reverse("endpoint_list", args=[project.pk])).content.decode()
    edit = client.get(reverse("endpoint_edit", args=[endpoint.pk])).content.decode()
    assert SECRET not in page and SECRET not in edit
    assert "stored encrypted" in page and "A key is stored" in edit
    # saving with the key left blank keeps it; "remove" removes it
    url = reverse("endpoint_edit", args=[endpoint.pk])
    base = {
        "name": "served",
        "role": "world",
        "kind": "openai",
        "base_url": "http://127.0.0.1:9/v1",
        "model": "world-model-2",
    }
    assert client.post(url, {**base, "api_key": ""}).status_code == 302
    endpoint.refresh_from_db()
    assert endpoint.model == "world-model-2" and api_key_of(endpoint) == SECRET
    assert client.post(url, {**base, "clear_api_key": "on"}).status_code == 302
    endpoint.refresh_from_db()
    assert endpoint.api_key_encrypted == "" and api_key_of(endpoint) == "EMPTY"


def test_endpoint_form_names_what_is_wrong(client, project):
    client.force_login(project.users["admin"])
    r = add(client, project, base_url="", model="")
    html = r.content.decode()
    assert r.status_code == 400
    assert "needs its base URL" in html and "Name the model" in html
    r = add(client, project, role="agent", kind="retrieval")
    assert "Agent models are OpenAI-compatible chat servers" in r.content.decode()
    r = add(client, project, api_key="x", api_key_env="MY_KEY")
    assert "not both" in r.content.decode()
    r = add(client, project, api_key_env="not a name")
    assert "is not an environment variable name" in r.content.decode()
    r = add(client, project, name="Retrieval baseline")
    assert "already has an endpoint named" in r.content.decode()
    r = add(client, project, temperature="3", top_p="0")
    assert "temperature must be in [0, 2]" in r.content.decode()
    assert "top_p must be in (0, 1]" in r.content.decode()
    assert ModelEndpoint.objects.filter(name="served").count() == 0


def test_who_may_do_what(client, project):
    endpoint = project.endpoints.get(kind="retrieval")
    client.force_login(project.users["researcher"])
    assert client.get(reverse("endpoint_list", args=[project.pk])).status_code == 200
    assert add(client, project).status_code == 403
    assert client.post(reverse("endpoint_delete", args=[endpoint.pk])).status_code == 403
    assert client.post(reverse("endpoint_test", args=[endpoint.pk])).status_code == 302
    client.force_login(project.users["annotator"])
    page = client.get(reverse("endpoint_list", args=[project.pk])).content.decode()
    assert "Retrieval baseline" in page and "endpoint-test-button" not in page
    assert client.post(reverse("endpoint_test", args=[endpoint.pk])).status_code == 403
    client.force_login(project.outsider)
    assert client.get(reverse("endpoint_list", args=[project.pk])).status_code == 404
    assert client.get(reverse("endpoint_edit", args=[endpoint.pk])).status_code == 404


def test_test_button_shows_latency_or_the_exact_error(client, project, monkeypatch):
    client.force_login(project.users["admin"])
    hx = {"HX-Request": "true"}
    seen = []

    def respond(body, index):
        seen.append(body)
        return "ready"

    with fake_openai_server(respond) as srv:
        add(client, project, base_url=srv.base_url, api_key=SECRET)
        endpoint = ModelEndpoint.objects.get(name="served")
        r = client.post(reverse("endpoint_test", args=[endpoint.pk]), headers=hx)
        html = r.content.decode()
        assert r.status_code == 200 and html.lstrip().startswith("<tr")
        assert "answered" in html and " ms" in html
        assert seen[-1]["max_tokens"] == 1 and seen[-1]["model"] == "world-model"
        endpoint.refresh_from_db()
        assert endpoint.test_ok and endpoint.test_latency_ms > 0
    with fake_openai_server(lambda b, i: (401, "invalid API key")) as srv:
        ModelEndpoint.objects.filter(pk=endpoint.pk).update(base_url=srv.base_url)
        html = client.post(reverse("endpoint_test", args=[endpoint.pk]), headers=hx).content
        assert b"failed" in html and b"HTTP 401" in html and b"invalid API key" in html
    ModelEndpoint.objects.filter(pk=endpoint.pk).update(base_url="http://127.0.0.1:9/v1")
    html = client.post(reverse("endpoint_test", args=[endpoint.pk]), headers=hx).content.decode()
    assert "APIConnectionError at http://127.0.0.1:9/v1" in html
    # a key read from a variable the web process lacks is reported, not sent empty
    monkeypatch.delenv("NO_SUCH_KEY_VAR", raising=False)
    ModelEndpoint.objects.filter(pk=endpoint.pk).update(
        api_key_encrypted="", api_key_env="NO_SUCH_KEY_VAR"
    )
    html = client.post(reverse("endpoint_test", args=[endpoint.pk]), headers=hx).content.decode()
    assert "reads its API key from $NO_SUCH_KEY_VAR, which is not set" in html


def test_retrieval_test_counts_what_it_answers_from(client, project):
    client.force_login(project.users["researcher"])
    endpoint = project.endpoints.get(kind="retrieval")
    hx = {"HX-Request": "true"}
    html = client.post(reverse("endpoint_test", args=[endpoint.pk]), headers=hx).content.decode()
    assert "no recorded steps in this project" in html
    make_trajectory(project)
    html = client.post(reverse("endpoint_test", args=[endpoint.pk]), headers=hx).content.decode()
    assert "answers from 5 recorded steps" in html


def test_an_in_process_model_is_tested_by_a_gpu_worker_and_the_row_polls(
    client, project, django_capture_on_commit_callbacks
):
    client.force_login(project.users["admin"])
    add(client, project, kind="hf", base_url="", model="/models/tiny")
    endpoint = ModelEndpoint.objects.get(name="served")
    with django_capture_on_commit_callbacks() as callbacks:
        html = client.post(
            reverse("endpoint_test", args=[endpoint.pk]), headers={"HX-Request": "true"}
        ).content.decode()
    assert len(callbacks) == 1  # the probe task, sent once the request commits
    assert "testing in a gpu worker" in html and 'hx-trigger="every 1s"' in html
    row = reverse("endpoint_row", args=[endpoint.pk])
    assert client.get(row, headers={"HX-Request": "true"}).status_code == 200
    ModelEndpoint.objects.filter(pk=endpoint.pk).update(
        test_pending=False, test_ok=True, test_detail="loaded"
    )
    done = client.get(row, headers={"HX-Request": "true"})
    assert done.status_code == 286 and "every 1s" not in done.content.decode()


def test_defaults_and_deleting(client, project):
    client.force_login(project.users["admin"])
    add(client, project)
    served = ModelEndpoint.objects.get(name="served")
    baseline = project.endpoints.get(kind="retrieval")
    assert baseline.is_default and not served.is_default
    client.post(reverse("endpoint_make_default", args=[served.pk]))
    served.refresh_from_db()
    baseline.refresh_from_db()
    assert served.is_default and not baseline.is_default
    _, root = make_trajectory(project)
    job = make_job(root, 1, status=JobStatus.RUNNING)
    type(job).objects.filter(pk=job.pk).update(world_endpoint=served)
    with pytest.raises(EndpointError, match="still queued or running"):
        delete_endpoint(served)
    type(job).objects.filter(pk=job.pk).update(status=JobStatus.SUCCEEDED)
    r = client.post(reverse("endpoint_delete", args=[served.pk]), follow=True)
    assert "Deleted" in r.content.decode()
    baseline.refresh_from_db()
    assert baseline.is_default  # the role keeps a default
    job.refresh_from_db()
    assert job.world_endpoint is None and job.backend == "retrieval"


def test_keys_rotate_and_a_lost_key_is_reported(settings):
    from cryptography.fernet import Fernet

    old, new = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    settings.STUDIO_ENCRYPTION_KEYS = [old]
    token = encrypt("k")
    settings.STUDIO_ENCRYPTION_KEYS = [new, old]  # rotation: the new key first
    assert decrypt(token) == "k"
    assert Fernet(new.encode()).decrypt(encrypt("k2").encode()) == b"k2"
    settings.STUDIO_ENCRYPTION_KEYS = [new]  # the old key gone
    with pytest.raises(SecretError, match="cannot be decrypted"):
        decrypt(token)
