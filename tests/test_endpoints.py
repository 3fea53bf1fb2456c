"""Model endpoints: seeded from the environment, managed by admins on the Models page, keys
stored encrypted and never shown, "Test" against a real HTTP server on 127.0.0.1."""

from __future__ import annotations

import json

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
from tests.support.ui import audit_markup

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
    # Test is for endpoint editors too (STUDIO_ENDPOINT_EDITORS, default: the admins)
    assert client.post(reverse("endpoint_test", args=[endpoint.pk])).status_code == 403
    client.force_login(project.users["annotator"])
    page = client.get(reverse("endpoint_list", args=[project.pk])).content.decode()
    assert "Retrieval baseline" in page and "endpoint-test-button" not in page
    assert client.post(reverse("endpoint_test", args=[endpoint.pk])).status_code == 403
    client.force_login(project.outsider)
    assert client.get(reverse("endpoint_list", args=[project.pk])).status_code == 404
    assert client.get(reverse("endpoint_edit", args=[endpoint.pk])).status_code == 404


def test_test_button_shows_latency_or_that_it_did_not_answer(
    client, project, monkeypatch, settings
):
    settings.STUDIO_ENDPOINT_KEY_ENVS = [("NO_SUCH_KEY_VAR", "http://127.0.0.1:9/v1")]
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
        assert "answered as a model: world-model" in html and " ms" in html
        assert seen[-1]["max_tokens"] == 1 and seen[-1]["model"] == "world-model"
        endpoint.refresh_from_db()
        assert endpoint.test_ok and endpoint.test_latency_ms > 0
    with fake_openai_server(lambda b, i: (401, "invalid API key")) as srv:
        ModelEndpoint.objects.filter(pk=endpoint.pk).update(base_url=srv.base_url)
        html = client.post(reverse("endpoint_test", args=[endpoint.pk]), headers=hx).content
        # never the host's status or text: only that no model answered (in what the row says, its
        # base URL left out: a random port such as 54017 holds "401" and says nothing)
        said = "".join(audit_markup(html.decode()).text).replace(srv.base_url, "")
        assert srv.base_url in html.decode()
        assert "failed" in said and "did not answer as a model" in said
        assert "401" not in said and "invalid API key" not in said
    ModelEndpoint.objects.filter(pk=endpoint.pk).update(base_url="http://127.0.0.1:9/v1")
    html = client.post(reverse("endpoint_test", args=[endpoint.pk]), headers=hx).content.decode()
    assert "did not answer as a model" in html and "APIConnectionError" not in html
    # a key read from a variable the web process lacks is reported, not sent empty
    monkeypatch.delenv("NO_SUCH_KEY_VAR", raising=False)
    ModelEndpoint.objects.filter(pk=endpoint.pk).update(
        api_key_encrypted="", api_key_env="NO_SUCH_KEY_VAR"
    )
    html = client.post(reverse("endpoint_test", args=[endpoint.pk]), headers=hx).content.decode()
    assert "reads its API key from $NO_SUCH_KEY_VAR, which is not set" in html
    # and a variable is only sent to the URL it is bound to
    ModelEndpoint.objects.filter(pk=endpoint.pk).update(base_url="http://127.0.0.1:10/v1")
    html = client.post(reverse("endpoint_test", args=[endpoint.pk]), headers=hx).content.decode()
    assert "$NO_SUCH_KEY_VAR may only be sent to http://127.0.0.1:9/v1" in html


def judge_block(scores: dict) -> str:
    block = {"scores": scores, "strengths": ["same files"], "weaknesses": []}
    return (
        f"Same listing.\n<final_evaluation>\n```json\n{json.dumps(block)}\n```\n</final_evaluation>"
    )


def test_testing_a_judge_asks_the_judge_prompt_and_checks_the_answer_shape(client, project):
    """Test on a judge sends the real judge prompt on a built-in sample and reads the answer
    as an evaluation would: a good answer says so, a bad one names what is wrong."""
    from inference.judge import JUDGE_SYSTEM_PROMPT

    client.force_login(project.users["admin"])
    hx = {"HX-Request": "true"}
    dims = ("format", "factuality", "consistency", "realism", "quality")
    answer = {"text": judge_block(dict.fromkeys(dims, 5))}
    with fake_openai_server(lambda body, index: answer["text"]) as srv:
        add(client, project, name="grader", role="judge", base_url=srv.base_url, model="jm")
        endpoint = ModelEndpoint.objects.get(name="grader")

        def test() -> str:
            r = client.post(reverse("endpoint_test", args=[endpoint.pk]), headers=hx)
            assert r.status_code == 200
            endpoint.refresh_from_db()
            return r.content.decode()

        html = test()
        assert "answers in the judge shape" in html and "judge shape</span>" in html
        assert endpoint.test_ok and endpoint.test_latency_ms > 0
        sent = srv.requests[-1]
        assert sent["messages"][0] == {"role": "system", "content": JUDGE_SYSTEM_PROMPT}
        user = sent["messages"][1]["content"]
        assert "## Reference observation" in user and "notes.txt" in user
        assert sent["max_tokens"] > 1  # room for the judge's reasoning and its block

        answer["text"] = judge_block({d: 4 for d in dims if d != "realism"})
        html = test()
        assert not endpoint.test_ok and "not the judge shape" in html
        assert "missing dimensions: realism" in endpoint.test_detail
        answer["text"] = judge_block({**dict.fromkeys(dims, 4), "quality": "great"})
        test()
        assert not endpoint.test_ok and "not a score 1-5: quality ('great')" in endpoint.test_detail
        answer["text"] = "The prediction looks right to me."
        test()
        assert not endpoint.test_ok and "no JSON object" in endpoint.test_detail
        assert "looks right to me" in endpoint.test_detail  # what it said instead
    # a world model is still tested with one token
    with fake_openai_server(lambda body, index: "ready") as srv:
        add(client, project, name="plain", base_url=srv.base_url)
        plain = ModelEndpoint.objects.get(name="plain")
        client.post(reverse("endpoint_test", args=[plain.pk]), headers=hx)
        assert srv.requests[-1]["max_tokens"] == 1


def test_an_embeddings_model_is_added_tested_with_two_texts_and_found_by_embedder_for(
    client, project
):
    """The role "Embedding model": an OpenAI-compatible server only; its Test posts two texts
    to /v1/embeddings (the scripted demo server answers them); `embedder_for` gives a client
    of the project's default one, None when it has none."""
    from studio.demo_data import scripted_models as S
    from studio.services.embeddings import embedder_for

    client.force_login(project.users["admin"])
    assert embedder_for(project) is None
    refused = add(client, project, name="emb", role="embedding", kind="retrieval")
    assert "Embedding models are OpenAI-compatible embeddings servers" in refused.content.decode()
    listing = client.get(reverse("endpoint_list", args=[project.pk])).content.decode()
    assert 'id="endpoints-embedding"' in listing and "Add an embedding model" in listing
    with S.running() as url:
        add(client, project, name="emb", role="embedding", base_url=url, model="scripted-embedding")
        endpoint = ModelEndpoint.objects.get(name="emb")
        assert endpoint.role == "embedding" and endpoint.is_default
        html = client.post(
            reverse("endpoint_test", args=[endpoint.pk]), headers={"HX-Request": "true"}
        ).content.decode()
        endpoint.refresh_from_db()
        assert endpoint.test_ok and "embeds</span>" in html
        assert (
            endpoint.test_detail == "answered as a model: scripted-embedding; 256 numbers per text"
        )
        embedder = embedder_for(project)
        assert embedder is not None and embedder.model == "scripted-embedding"
        assert len(embedder.embed(["the agent deletes a file"])[0]) == 256
        # a chat model behind the role answers no embeddings: the test says it did not answer
        ModelEndpoint.objects.filter(pk=endpoint.pk).update(model="scripted-judge")
        client.post(reverse("endpoint_test", args=[endpoint.pk]), headers={"HX-Request": "true"})
        endpoint.refresh_from_db()
        assert not endpoint.test_ok and endpoint.test_detail.startswith("did not answer as a model")


def test_url_within_respects_hosts_ports_and_path_segments():
    from studio.services.endpoints import url_within

    assert url_within("http://models.lab:8000/v1", "http://models.lab:8000/v1/")
    assert url_within("http://Models.Lab:8000/v1/extra", "http://models.lab:8000/v1")
    assert url_within("http://models.lab:8000/anything", "http://models.lab:8000")
    for url in (
        "http://models.lab:8000/v10",  # not a path segment
        "http://models.lab:8001/v1",  # another port
        "https://models.lab:8000/v1",  # another scheme
        "http://models.lab.evil.example:8000/v1",  # another host with the same start
        "http://evil.example/?http://models.lab:8000/v1",
        "",
    ):
        assert not url_within(url, "http://models.lab:8000/v1"), url


def test_key_variables_go_only_to_the_urls_they_are_bound_to(
    client, project, settings, monkeypatch
):
    """A project admin cannot point an endpoint at a server of theirs and have the workers
    send it the operator's WORLD_MODEL_API_KEY (or any other variable of the worker)."""
    from studio.services.endpoints import key_bindings, key_for_job

    settings.WORLD_MODEL_BASE_URL = "http://models.lab:8000/v1"
    settings.AGENT_MODEL_BASE_URL = "http://agents.lab:9000/v1"
    settings.STUDIO_ENDPOINT_KEY_ENVS = [("LAB_KEY", "https://gateway.lab/v1")]
    monkeypatch.setenv("WORLD_MODEL_API_KEY", "operator-world-key")
    monkeypatch.setenv("LAB_KEY", "operator-lab-key")
    monkeypatch.delenv("AGENT_MODEL_API_KEY", raising=False)
    monkeypatch.setenv("HOME_SECRET", "x")
    # without AGENT_MODEL_API_KEY the agent uses the world's key, so it is bound there too
    assert key_bindings() == {
        "WORLD_MODEL_API_KEY": ("http://models.lab:8000/v1", "http://agents.lab:9000/v1"),
        "LAB_KEY": ("https://gateway.lab/v1",),
    }
    client.force_login(project.users["admin"])
    r = add(client, project, api_key_env="WORLD_MODEL_API_KEY", base_url="http://127.0.0.1:9/v1")
    assert r.status_code == 400
    assert (
        "$WORLD_MODEL_API_KEY may only be sent to http://models.lab:8000/v1" in r.content.decode()
    )
    r = add(client, project, api_key_env="HOME_SECRET")
    html = r.content.decode()
    assert "$HOME_SECRET is not a key variable endpoints may use" in html
    assert "LAB_KEY, WORLD_MODEL_API_KEY" in html and "STUDIO_ENDPOINT_KEY_ENVS" in html
    assert not ModelEndpoint.objects.filter(name="served").exists()
    r = add(client, project, api_key_env="LAB_KEY", base_url="https://gateway.lab/v1/")
    assert r.status_code == 302
    endpoint = ModelEndpoint.objects.get(name="served")
    assert api_key_of(endpoint) == "operator-lab-key"
    # a row changed behind the form's back is still refused when the key would be sent
    ModelEndpoint.objects.filter(pk=endpoint.pk).update(base_url="https://gateway.lab.evil/v1")
    endpoint.refresh_from_db()
    with pytest.raises(EndpointError, match="may only be sent to https://gateway.lab/v1"):
        api_key_of(endpoint)
    # a job sends its endpoint's key only while the endpoint points where the job does
    with pytest.raises(EndpointError, match="now points at https://gateway.lab.evil/v1"):
        key_for_job(endpoint, "https://gateway.lab/v1", env="WORLD_MODEL_API_KEY")
    # a job without an endpoint (command line, or its endpoint deleted): the environment's
    # key, to its own URL only
    world = "WORLD_MODEL_API_KEY"
    assert key_for_job(None, "http://models.lab:8000/v1", env=world) == "operator-world-key"
    assert key_for_job(None, "http://127.0.0.1:9/v1", env=world) == "EMPTY"
    assert key_for_job(None, "http://agents.lab:9000/v1", env="AGENT_MODEL_API_KEY") == (
        "operator-world-key"
    )


def test_key_bindings_in_the_environment_fail_loudly_when_malformed(monkeypatch):
    from studio.env import ConfigError, env_key_bindings

    monkeypatch.setenv("KEYS", "A_KEY=http://a.lab/v1/, B=https://b.lab")
    assert env_key_bindings("KEYS") == [("A_KEY", "http://a.lab/v1"), ("B", "https://b.lab")]
    for bad, why in (
        ("A_KEY", "is not NAME=URL"),
        ("not a name=http://a", "is not NAME=URL"),
        ("A=ftp://a.lab", r"must be http\(s\)://"),
        ("A=http://", r"must be http\(s\)://"),
    ):
        monkeypatch.setenv("KEYS", bad)
        with pytest.raises(ConfigError, match=why):
            env_key_bindings("KEYS")


def test_editing_the_url_or_kind_drops_a_stored_key_unless_a_new_one_is_typed(client, project):
    client.force_login(project.users["admin"])
    add(client, project, api_key=SECRET)
    endpoint = ModelEndpoint.objects.get(name="served")
    url = reverse("endpoint_edit", args=[endpoint.pk])
    base = {"name": "served", "role": "world", "kind": "openai", "model": "world-model"}
    r = client.post(url, {**base, "base_url": "http://127.0.0.1:10/v1"}, follow=True)
    endpoint.refresh_from_db()
    assert endpoint.api_key_encrypted == "" and endpoint.key_status == "none"
    assert "The API key stored for &#x27;served&#x27; was removed" in r.content.decode()
    # a new key typed with the new URL is kept; typed together with "remove", it wins
    client.post(url, {**base, "base_url": "http://127.0.0.1:11/v1", "api_key": "sk-new"})
    endpoint.refresh_from_db()
    assert api_key_of(endpoint) == "sk-new"
    r = client.post(
        url,
        {
            **base,
            "base_url": "http://127.0.0.1:11/v1",
            "api_key": "sk-newer",
            "clear_api_key": "on",
        },
        follow=True,
    )
    endpoint.refresh_from_db()
    assert api_key_of(endpoint) == "sk-newer" and "was removed" not in r.content.decode()


def test_a_variable_named_replaces_a_stored_key(client, project, settings, monkeypatch):
    settings.STUDIO_ENDPOINT_KEY_ENVS = [("LAB_KEY", "http://127.0.0.1:9/v1")]
    monkeypatch.setenv("LAB_KEY", "from-the-variable")
    client.force_login(project.users["admin"])
    add(client, project, api_key=SECRET)
    endpoint = ModelEndpoint.objects.get(name="served")
    data = {
        "name": "served",
        "role": "world",
        "kind": "openai",
        "model": "world-model",
        "base_url": "http://127.0.0.1:9/v1",
        "api_key_env": "LAB_KEY",
    }
    assert client.post(reverse("endpoint_edit", args=[endpoint.pk]), data).status_code == 302
    endpoint.refresh_from_db()
    assert endpoint.api_key_encrypted == "" and api_key_of(endpoint) == "from-the-variable"


def test_moving_the_default_to_another_role_promotes_a_successor(client, project):
    client.force_login(project.users["admin"])
    add(client, project, name="agent A", role="agent")
    add(client, project, name="agent B", role="agent")
    a = ModelEndpoint.objects.get(name="agent A")
    assert a.is_default and not ModelEndpoint.objects.get(name="agent B").is_default
    data = {
        "name": "agent A",
        "role": "judge",
        "kind": "openai",
        "base_url": "http://127.0.0.1:9/v1",
        "model": "judge-model",
    }
    assert client.post(reverse("endpoint_edit", args=[a.pk]), data).status_code == 302
    a.refresh_from_db()
    assert a.role == "judge" and a.is_default  # the only judge: the judges' default
    assert ModelEndpoint.objects.get(name="agent B").is_default  # the agents keep one


def test_retrieval_test_counts_what_it_answers_from(client, project):
    client.force_login(project.users["admin"])
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


def test_a_test_no_gpu_worker_answers_stops_polling_and_says_so(client, project):
    from datetime import timedelta

    from django.utils import timezone

    from studio.models.endpoints import PROBE_WAIT_S

    client.force_login(project.users["admin"])
    add(client, project, kind="hf", base_url="", model="/models/tiny")
    endpoint = ModelEndpoint.objects.get(name="served")
    asked = timezone.now() - timedelta(seconds=PROBE_WAIT_S + 5)
    ModelEndpoint.objects.filter(pk=endpoint.pk).update(test_pending=True, tested_at=asked)
    r = client.get(reverse("endpoint_row", args=[endpoint.pk]), headers={"HX-Request": "true"})
    html = r.content.decode()
    assert r.status_code == 286 and "every 1s" not in html
    assert "no gpu worker answered in 2" in html and "-Q gpu" in html
    endpoint.refresh_from_db()
    assert endpoint.test_pending  # reading never writes: a worker may still answer


def test_a_probe_that_breaks_unexpectedly_still_ends_the_test(project, monkeypatch):
    import inference.backends
    from studio.jobs.endpoint_probe import probe_in_process_endpoint

    endpoint = ModelEndpoint.objects.create(
        project=project, name="gpu", role="world", kind="hf", model="/m", test_pending=True
    )

    def broken(*args, **kwargs):
        raise RuntimeError("CUDA error: device-side assert triggered")

    monkeypatch.setattr(inference.backends, "make_backend", broken)
    with pytest.raises(RuntimeError):
        probe_in_process_endpoint(endpoint.pk)
    endpoint.refresh_from_db()
    assert not endpoint.test_pending and endpoint.test_ok is False
    assert endpoint.test_detail == "RuntimeError: CUDA error: device-side assert triggered"


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
