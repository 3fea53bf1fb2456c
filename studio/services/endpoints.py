"""Model endpoints, the models a project can run: seeding them from the environment, the
project's defaults, what a simulation request takes from one, their API keys, and testing
one with a one-token request (a judge: with a judge request whose answer must parse into the
judge answer shape; an embeddings model: with two texts to embed)."""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from typing import Any, cast
from urllib.parse import urlsplit

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from inference.simulation.request import AgentChoice, Defaults
from studio.models import (
    EndpointRole,
    JobStatus,
    ModelEndpoint,
    Project,
    Provenance,
    SimulationJob,
    Step,
)
from studio.secrets import SecretError, decrypt, encrypt
from studio.services import endpoint_hosts

log = logging.getLogger(__name__)

# Roles whose models speak the OpenAI chat API (the agent of a rollout, the judge).
CHAT_ONLY_ROLES = {EndpointRole.AGENT, EndpointRole.JUDGE}
# Roles served only by an OpenAI-compatible server: those, and embeddings (/v1/embeddings).
OPENAI_ONLY_ROLES = {*CHAT_ONLY_ROLES, EndpointRole.EMBEDDING}
TEST_TIMEOUT_S = 15.0


class EndpointError(Exception):
    """An endpoint cannot be used as asked; the message says why and what to do."""


# ---- seeding from the environment -------------------------------------------------------


def environment_endpoints() -> list[dict[str, Any]]:
    """The endpoints the environment describes (WORLD_MODEL_*, AGENT_MODEL_*): a project
    starts with these. API keys are referenced by the variable's name, never copied."""
    backend = settings.WORLD_MODEL_BACKEND
    specs: list[dict[str, Any]] = [
        {
            "name": "Retrieval baseline",
            "role": EndpointRole.WORLD,
            "kind": "retrieval",
            "is_default": backend == "retrieval",
        }
    ]
    if settings.WORLD_MODEL_BASE_URL:
        specs.append(
            {
                "name": "World model (from the environment)",
                "role": EndpointRole.WORLD,
                "kind": "openai",
                "base_url": settings.WORLD_MODEL_BASE_URL.rstrip("/"),
                "model": settings.WORLD_MODEL_NAME,
                "api_key_env": "WORLD_MODEL_API_KEY" if "WORLD_MODEL_API_KEY" in os.environ else "",
                "is_default": backend == "openai",
            }
        )
    if settings.WORLD_MODEL_PATH or backend == "hf":
        specs.append(
            {
                "name": "World model in the GPU worker",
                "role": EndpointRole.WORLD,
                "kind": "hf",
                "model": settings.WORLD_MODEL_PATH or settings.WORLD_MODEL_NAME,
                "is_default": backend == "hf",
            }
        )
    if settings.AGENT_MODEL_BASE_URL:
        key_env = next(
            (n for n in ("AGENT_MODEL_API_KEY", "WORLD_MODEL_API_KEY") if n in os.environ), ""
        )
        specs.append(
            {
                "name": "Agent model (from the environment)",
                "role": EndpointRole.AGENT,
                "kind": "openai",
                "base_url": settings.AGENT_MODEL_BASE_URL.rstrip("/"),
                "model": settings.AGENT_MODEL_NAME,
                "api_key_env": key_env,
                "is_default": True,
            }
        )
    return specs


def seed_endpoints(project: Project) -> list[ModelEndpoint]:
    """Add the environment's endpoints the project lacks (by name); called when a project
    is created and by `load_demo`. A role that already has a default keeps it."""
    have = set(project.endpoints.values_list("name", flat=True))
    defaults = set(project.endpoints.filter(is_default=True).values_list("role", flat=True))
    created = []
    for spec in environment_endpoints():
        if spec["name"] in have:
            continue
        spec = {**spec, "is_default": spec["is_default"] and spec["role"] not in defaults}
        if spec["is_default"]:
            defaults.add(spec["role"])
        created.append(ModelEndpoint.objects.create(project=project, seeded_from_env=True, **spec))
    return created


# ---- choosing -------------------------------------------------------------------------------


def endpoints_for(project: Project, role: str):
    return project.endpoints.filter(role=role).order_by("-is_default", "name")


def default_endpoint(project: Project, role: str) -> ModelEndpoint | None:
    return endpoints_for(project, role).first()


def get_endpoint(project: Project, name: str, role: str) -> ModelEndpoint:
    endpoint = project.endpoints.filter(name=name).first()
    if endpoint is None:
        names = ", ".join(endpoints_for(project, role).values_list("name", flat=True)) or "none"
        raise EndpointError(
            f"project {project.name!r} has no model endpoint named {name!r} "
            f"({EndpointRole(role).label.lower()}s: {names})"
        )
    if endpoint.role != role:
        raise EndpointError(
            f"endpoint {name!r} is a {endpoint.get_role_display().lower()}, not a "
            f"{EndpointRole(role).label.lower()}"
        )
    return endpoint


def world_input(endpoint: ModelEndpoint) -> dict[str, Any]:
    """The request input that runs `endpoint` as the world model."""
    return {
        "backend": endpoint.kind,
        "model": endpoint.model,
        "base_url": endpoint.base_url,
        "supports_n": endpoint.supports_n,
    }


def agent_input(endpoint: ModelEndpoint) -> dict[str, Any]:
    return {"agent_model": endpoint.model, "agent_base_url": endpoint.base_url}


def sampling_defaults(endpoint: ModelEndpoint | None) -> dict[str, Any]:
    """The endpoint's default sampling, only what it sets."""
    if endpoint is None:
        return {}
    values = {
        "temperature": endpoint.temperature,
        "top_p": endpoint.top_p,
        "max_tokens": endpoint.max_tokens,
    }
    return {k: v for k, v in values.items() if v is not None}


def simulation_defaults(project: Project) -> Defaults:
    """What fills a request's blanks: the project's default world and agent models."""
    world = default_endpoint(project, EndpointRole.WORLD)
    agent = default_endpoint(project, EndpointRole.AGENT)
    if world is None:
        base = Defaults()
    elif world.kind == "openai":
        base = Defaults(backend="openai", openai_model=world.model, base_url=world.base_url)
    elif world.kind == "hf":
        base = Defaults(backend="hf", hf_model=world.model)
    else:
        base = Defaults(backend="retrieval")
    return Defaults(
        backend=base.backend,
        openai_model=base.openai_model,
        hf_model=base.hf_model,
        base_url=base.base_url,
        agent=AgentChoice(agent.model, agent.base_url) if agent is not None else None,
    )


# ---- API keys --------------------------------------------------------------------------------
# A key is stored encrypted (typed on the Models page, sent only to that endpoint's base URL:
# changing the URL or the kind drops it), or read from an environment variable of the worker.
# Variables are bound to base URLs by the operator, so no project member can point an
# endpoint at a server of theirs and collect the operator's key.

KEYLESS = "EMPTY"  # what OpenAI clients send to servers that want no key


def key_bindings() -> dict[str, tuple[str, ...]]:
    """Environment variables endpoints may name, each with the base URLs it may be sent to:
    WORLD_MODEL_API_KEY to WORLD_MODEL_BASE_URL (and to AGENT_MODEL_BASE_URL when
    AGENT_MODEL_API_KEY is unset, as the agent then uses it), AGENT_MODEL_API_KEY to
    AGENT_MODEL_BASE_URL, and whatever STUDIO_ENDPOINT_KEY_ENVS lists."""
    bound: dict[str, list[str]] = {}

    def bind(name: str, url: str) -> None:
        if url and url.rstrip("/") not in bound.setdefault(name, []):
            bound[name].append(url.rstrip("/"))

    bind("WORLD_MODEL_API_KEY", settings.WORLD_MODEL_BASE_URL)
    if os.environ.get("AGENT_MODEL_API_KEY"):
        bind("AGENT_MODEL_API_KEY", settings.AGENT_MODEL_BASE_URL)
    else:
        bind("WORLD_MODEL_API_KEY", settings.AGENT_MODEL_BASE_URL)
    for name, url in settings.STUDIO_ENDPOINT_KEY_ENVS:
        bind(name, url)
    return {name: tuple(urls) for name, urls in bound.items() if urls}


def url_within(url: str, prefix: str) -> bool:
    """`url` is on the server of `prefix` (same scheme, host and port) under its path, at a
    path-segment boundary: http://h/v1 covers http://h/v1/x, not http://h/v10 or http://h.evil."""
    a, b = urlsplit(url.strip()), urlsplit(prefix.strip())
    if (a.scheme.lower(), a.netloc.lower()) != (b.scheme.lower(), b.netloc.lower()):
        return False
    path, root = a.path.rstrip("/"), b.path.rstrip("/")
    return path == root or path.startswith(root + "/")


def env_key_allowed(name: str, url: str) -> bool:
    return bool(url) and any(url_within(url, p) for p in key_bindings().get(name, ()))


def env_key_refusal(name: str, url: str) -> str | None:
    """Why an endpoint at `url` may not read its key from $name, or None if it may."""
    bindings = key_bindings()
    if name not in bindings:
        allowed = ", ".join(sorted(bindings)) or "none"
        return (
            f"${name} is not a key variable endpoints may use (this studio allows: {allowed}; "
            "the operator binds more to their URLs with STUDIO_ENDPOINT_KEY_ENVS)"
        )
    if not env_key_allowed(name, url):
        return (
            f"${name} may only be sent to {', '.join(bindings[name])}, and "
            f"{url or 'this endpoint'} is not under it"
        )
    return None


def require_allowed_host(url: str, what: str) -> None:
    """EndpointError unless `url`'s host is one endpoints may reach (STUDIO_ENDPOINT_ALLOWED_HOSTS):
    called before a process sends a request to an endpoint's base URL."""
    try:
        endpoint_hosts.check_url(url)
    except endpoint_hosts.HostNotAllowed as exc:
        raise EndpointError(f"{what}: {exc}") from None


def api_key_of(endpoint: ModelEndpoint) -> str:
    """The key to send to `endpoint.base_url`: decrypted, read from the named (and bound)
    variable of this process, or KEYLESS for an endpoint without a key. Every caller then
    sends a request there, so its host is checked here too (a row written behind the
    form's back, or an allowlist narrowed since)."""
    key = _key_of(endpoint)
    if endpoint.base_url:
        require_allowed_host(endpoint.base_url, f"endpoint {endpoint.name!r}")
    return key


def _key_of(endpoint: ModelEndpoint) -> str:
    if endpoint.api_key_encrypted:
        try:
            return decrypt(endpoint.api_key_encrypted)
        except SecretError as exc:
            raise EndpointError(f"endpoint {endpoint.name!r}: {exc}") from None
    if endpoint.api_key_env:
        refusal = env_key_refusal(endpoint.api_key_env, endpoint.base_url)
        if refusal:
            raise EndpointError(f"endpoint {endpoint.name!r}: {refusal}")
        value = os.environ.get(endpoint.api_key_env)
        if value is None:
            raise EndpointError(
                f"endpoint {endpoint.name!r} reads its API key from ${endpoint.api_key_env}, "
                "which is not set in this process"
            )
        return value
    return KEYLESS


def key_for_job(endpoint: ModelEndpoint | None, base_url: str, *, env: str) -> str:
    """The key a job sends to `base_url`. With its endpoint: the endpoint's key, provided the
    endpoint still points there (it may have been edited since the job was queued). Without
    one (asked for on the command line, or its endpoint deleted): the environment's key $env
    when it is bound to `base_url`, else none. EndpointError when `base_url`'s host is not
    one endpoints may reach: every job asks for its key before it sends a request."""
    require_allowed_host(base_url, f"the model at {base_url}")
    if endpoint is not None:
        if endpoint.base_url.rstrip("/") != base_url.rstrip("/"):
            raise EndpointError(
                f"endpoint {endpoint.name!r} now points at {endpoint.base_url or 'no URL'}, "
                f"not at {base_url} as when this job was queued; run the job again"
            )
        return api_key_of(endpoint)
    name = env if os.environ.get(env) else "WORLD_MODEL_API_KEY"
    value = os.environ.get(name)
    if value and env_key_allowed(name, base_url):
        return value
    return KEYLESS


# ---- managing --------------------------------------------------------------------------------


@dataclass(frozen=True)
class EndpointData:
    """A validated endpoint form. `api_key`: None keeps the stored key (unless the URL or
    kind changes), "" removes it, text replaces it; `api_key_env` names a variable instead."""

    name: str
    role: str
    kind: str
    base_url: str = ""
    model: str = ""
    api_key: str | None = None
    api_key_env: str = ""
    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    context_length: int | None = None
    supports_n: bool = True
    # what the provider charges, US dollars per million tokens (None: not known)
    price_in_per_mtok: float | None = None
    price_out_per_mtok: float | None = None


@dataclass(frozen=True)
class SavedEndpoint:
    endpoint: ModelEndpoint
    key_dropped: bool  # a stored key was removed because the URL or kind changed


def save_endpoint(
    project: Project, data: EndpointData, *, endpoint: ModelEndpoint | None = None, user=None
) -> SavedEndpoint:
    """Create or change an endpoint; EndpointError for a base URL whose host is not allowed
    (the form says so first; this holds for every other caller)."""
    if data.base_url:
        refusal = endpoint_hosts.refusal(data.base_url)
        if refusal:
            raise EndpointError(refusal)
    key_dropped = False
    with transaction.atomic():
        old_role = None
        if endpoint is None:
            endpoint = ModelEndpoint(project=project, created_by=user)
            endpoint.is_default = not project.endpoints.filter(role=data.role).exists()
        else:
            moved = (endpoint.base_url, endpoint.kind) != (data.base_url, data.kind)
            if endpoint.role != data.role:
                old_role = endpoint.role if endpoint.is_default else None
                endpoint.is_default = (
                    not project.endpoints.filter(role=data.role).exclude(pk=endpoint.pk).exists()
                )
            if moved and data.api_key is None and endpoint.api_key_encrypted:
                # a key typed for one server is never sent to another
                endpoint.api_key_encrypted = ""
                key_dropped = True
        for field in (
            "name",
            "role",
            "kind",
            "base_url",
            "model",
            "temperature",
            "top_p",
            "max_tokens",
            "context_length",
            "supports_n",
            "price_in_per_mtok",
            "price_out_per_mtok",
        ):
            setattr(endpoint, field, getattr(data, field))
        # one source of truth for the key: a typed key, else the variable, else what is stored
        if data.api_key:
            endpoint.api_key_encrypted, endpoint.api_key_env = encrypt(data.api_key), ""
        elif data.api_key == "" or data.api_key_env:
            endpoint.api_key_encrypted, endpoint.api_key_env = "", data.api_key_env
        else:
            endpoint.api_key_env = ""
        endpoint.tested_at = None  # what was tested is not what is saved
        endpoint.test_ok = None
        endpoint.test_latency_ms = None
        endpoint.test_detail = ""
        endpoint.test_pending = False
        endpoint.save()
        if old_role is not None:
            successor = endpoints_for(project, old_role).first()
            if successor is not None:
                make_default(successor)
    return SavedEndpoint(endpoint, key_dropped)


def make_default(endpoint: ModelEndpoint) -> None:
    with transaction.atomic():
        endpoint.project.endpoints.filter(role=endpoint.role).update(is_default=False)
        ModelEndpoint.objects.filter(pk=endpoint.pk).update(is_default=True)


def delete_endpoint(endpoint: ModelEndpoint) -> None:
    count = (
        SimulationJob.objects.filter(status__in=[JobStatus.QUEUED, JobStatus.RUNNING])
        .filter(Q(world_endpoint=endpoint) | Q(agent_endpoint=endpoint))
        .count()
    )
    if count:
        raise EndpointError(
            f"{count} job(s) that use {endpoint.name!r} are still queued or running; cancel "
            "them or wait before deleting it"
        )
    with transaction.atomic():
        was_default, project, role = endpoint.is_default, endpoint.project, endpoint.role
        endpoint.delete()
        if was_default:
            successor = endpoints_for(project, role).first()
            if successor is not None:
                make_default(successor)


# ---- testing ("Test" on the Models page) -----------------------------------------------------


def record_test(endpoint: ModelEndpoint, ok: bool, latency_ms: float | None, detail: str) -> None:
    ModelEndpoint.objects.filter(pk=endpoint.pk).update(
        tested_at=timezone.now(),
        test_ok=ok,
        test_latency_ms=latency_ms,
        test_detail=detail[:4000],
        test_pending=False,
    )


# The judge's Test: the real judge prompt on this built-in sample, one terminal turn whose
# prediction matches the reference (so any judge scores it, and quickly).
JUDGE_TEST_ROW = {
    "task": "terminal",
    "id": "studio-judge-test",
    "turn_idx": 1,
    "total_turns": 1,
    "prompt": ["### Turn 1\n\n**Action:**\n```bash\nls\n```"],
    "response": ["**Environment Observation:**\nnotes.txt  src"],
    "predicted_observation": "notes.txt  src",
}
# A judge thinks before it answers: more time and tokens than the one-token test.
JUDGE_TEST_TIMEOUT_S = 60.0
JUDGE_TEST_MAX_TOKENS = 2048


# What Test says. Only whether a model answered, never what else did: an HTTP status, a
# refused connection or a timeout of the host would tell an endpoint editor which ports of
# an allowed host are open (the jobs that use the endpoint report the server's own error).
ANSWERED = "answered as a model: {served}"
NOT_ANSWERED = (
    "did not answer as a model (check the base URL, the model's name and the API key; a job "
    "that uses it names the server's error)"
)


def probe_chat(endpoint: ModelEndpoint) -> tuple[bool, float | None, str]:
    """A one-token chat request: (answered, milliseconds, ANSWERED with the model's id or
    NOT_ANSWERED); for a judge, a judge request whose answer must be in the judge answer
    shape. A host that is not allowed, or a key that may not be sent, is never asked."""
    import openai

    try:
        key = api_key_of(endpoint)
    except EndpointError as exc:
        return False, None, f"not tested: {exc}"
    judge = endpoint.role == EndpointRole.JUDGE
    timeout = JUDGE_TEST_TIMEOUT_S if judge else TEST_TIMEOUT_S
    client = openai.OpenAI(
        base_url=endpoint.base_url,
        api_key=key or "EMPTY",
        timeout=timeout,
        max_retries=0,
        # a redirect would lead the request to a host nobody checked
        http_client=openai.DefaultHttpxClient(timeout=timeout, follow_redirects=False),
    )
    started = time.perf_counter()
    max_tokens = endpoint.max_tokens or JUDGE_TEST_MAX_TOKENS
    try:
        with client:
            if judge:
                from inference.judge import build_judge_messages

                response = client.chat.completions.create(
                    model=endpoint.model,
                    messages=cast(Any, build_judge_messages(JUDGE_TEST_ROW)),
                    max_tokens=max_tokens,
                    temperature=0.6 if endpoint.temperature is None else endpoint.temperature,
                )
            else:
                response = client.chat.completions.create(
                    model=endpoint.model,
                    messages=[{"role": "user", "content": "Reply with one word: ready"}],
                    max_tokens=1,
                    temperature=0,
                )
            answer = _chat_answer(response)
    except Exception as exc:  # noqa: BLE001 - whatever it was, the page says only that
        # the operator's log keeps what happened; the page never shows it
        log.info("Test of endpoint %s did not answer: %s: %s", endpoint.pk, type(exc).__name__, exc)
        return False, None, NOT_ANSWERED
    if answer is None:
        return False, None, NOT_ANSWERED
    latency = (time.perf_counter() - started) * 1000
    served, text, cut = answer
    served = served or endpoint.model
    if judge:
        return _judge_answer_verdict(served, text, cut, latency, max_tokens)
    return True, latency, ANSWERED.format(served=served)


# The embeddings model's Test: two texts, each must come back as a vector of one length.
EMBEDDING_TEST_TEXTS = ("the agent deletes a file", "rm -rf /tmp/cache")


def probe_embedding(endpoint: ModelEndpoint) -> tuple[bool, float | None, str]:
    """`POST /v1/embeddings` with two short texts: (answered, milliseconds, what it said):
    ANSWERED with the vectors' length, or NOT_ANSWERED (never what else answered, as
    `probe_chat`). A host that is not allowed, or a key that may not be sent, is never asked."""
    from inference.embeddings import Embedder

    try:
        key = api_key_of(endpoint)
    except EndpointError as exc:
        return False, None, f"not tested: {exc}"
    started = time.perf_counter()
    try:
        embedder = Embedder(
            endpoint.base_url, endpoint.model, key, timeout=TEST_TIMEOUT_S, max_retries=0
        )
        with embedder.client:
            vectors = embedder.embed(list(EMBEDDING_TEST_TEXTS))
    except Exception as exc:  # noqa: BLE001 - the page says only that
        log.info("Test of endpoint %s did not answer: %s: %s", endpoint.pk, type(exc).__name__, exc)
        return False, None, NOT_ANSWERED
    latency = (time.perf_counter() - started) * 1000
    sizes = {len(v) for v in vectors}
    if len(vectors) != 2 or len(sizes) != 1:
        return False, latency, "answered, but not one vector of one length per text"
    served = ANSWERED.format(served=endpoint.model)
    return True, latency, f"{served}; {sizes.pop()} numbers per text"


def _chat_answer(response: Any) -> tuple[str, str, bool] | None:
    """(model id, text, cut at the token limit) of a chat completion, or None for anything
    else a server sent with a 200 (the SDK does not validate what it parses)."""
    choices = getattr(response, "choices", None)
    if not isinstance(choices, list) or not choices:
        return None
    message = getattr(choices[0], "message", None)
    text = getattr(message, "content", None) if message is not None else None
    if message is None or not isinstance(text, str | None):
        return None
    served = getattr(response, "model", None)
    served = served.strip()[:200] if isinstance(served, str) else ""
    return served, text or "", getattr(choices[0], "finish_reason", None) == "length"


def _judge_answer_verdict(
    served: str, text: str, cut: bool, latency: float, max_tokens: int
) -> tuple[bool, float | None, str]:
    from inference.judge import judge_shape_problem, parse_judgement

    head = ANSWERED.format(served=served)
    problem = judge_shape_problem(text)
    if problem is None:
        scores = parse_judgement(text).scores
        shown = ", ".join(f"{d} {v}" for d, v in scores.items())
        return (
            True,
            latency,
            f"{head}; it answers in the judge shape ({shown} on a built-in sample)",
        )
    why = f" (the answer was cut at {max_tokens} tokens)" if cut else ""
    tail = text.strip()[-300:]
    return (
        False,
        latency,
        f"{head}, not in the judge shape: {problem}{why}. The end of its answer: {tail!r}",
    )


def probe_retrieval(endpoint: ModelEndpoint) -> tuple[bool, float | None, str]:
    recorded = (
        Step.objects.filter(
            branch__trajectory__project_id=endpoint.project_id,
            branch__parent__isnull=True,
            provenance=Provenance.RECORDED,
        )
        .exclude(observation="")
        .count()
    )
    if not recorded:
        return False, None, "no recorded steps in this project to answer from: import some"
    return True, None, f"non-neural baseline: answers from {recorded} recorded steps"
