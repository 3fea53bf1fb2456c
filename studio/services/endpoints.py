"""Model endpoints, the models a project can run: seeding them from the environment, the
project's defaults, what a simulation request takes from one, their API keys, and testing
one with a one-token request."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

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

# Roles whose models speak the OpenAI chat API (the agent of a rollout, the judge).
CHAT_ONLY_ROLES = {EndpointRole.AGENT, EndpointRole.JUDGE}
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


def api_key_of(endpoint: ModelEndpoint | None, *, fallback: str = "EMPTY") -> str:
    """The key to send: decrypted, read from the named variable of this process, or (no
    endpoint, or an endpoint without a key) `fallback`."""
    if endpoint is None:
        return fallback
    if endpoint.api_key_encrypted:
        try:
            return decrypt(endpoint.api_key_encrypted)
        except SecretError as exc:
            raise EndpointError(f"endpoint {endpoint.name!r}: {exc}") from None
    if endpoint.api_key_env:
        value = os.environ.get(endpoint.api_key_env)
        if value is None:
            raise EndpointError(
                f"endpoint {endpoint.name!r} reads its API key from ${endpoint.api_key_env}, "
                "which is not set in this process"
            )
        return value
    return "EMPTY"


# ---- managing --------------------------------------------------------------------------------


@dataclass(frozen=True)
class EndpointData:
    """A validated endpoint form. `api_key`: None keeps the stored key, "" removes it."""

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


def save_endpoint(
    project: Project, data: EndpointData, *, endpoint: ModelEndpoint | None = None, user=None
) -> ModelEndpoint:
    with transaction.atomic():
        if endpoint is None:
            endpoint = ModelEndpoint(project=project, created_by=user)
            endpoint.is_default = not project.endpoints.filter(role=data.role).exists()
        elif endpoint.role != data.role:
            endpoint.is_default = False
        for field in (
            "name",
            "role",
            "kind",
            "base_url",
            "model",
            "api_key_env",
            "temperature",
            "top_p",
            "max_tokens",
            "context_length",
            "supports_n",
        ):
            setattr(endpoint, field, getattr(data, field))
        if data.api_key is not None:
            endpoint.api_key_encrypted = encrypt(data.api_key) if data.api_key else ""
        if endpoint.api_key_encrypted:
            endpoint.api_key_env = ""  # one source of truth for the key
        endpoint.tested_at = None  # what was tested is not what is saved
        endpoint.test_ok = None
        endpoint.test_latency_ms = None
        endpoint.test_detail = ""
        endpoint.save()
    return endpoint


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


def probe_chat(endpoint: ModelEndpoint) -> tuple[bool, float | None, str]:
    """A one-token chat request: (answered, milliseconds, what it said or the exact error)."""
    import openai

    try:
        key = api_key_of(endpoint)
    except EndpointError as exc:
        return False, None, str(exc)
    client = openai.OpenAI(
        base_url=endpoint.base_url, api_key=key or "EMPTY", timeout=TEST_TIMEOUT_S, max_retries=0
    )
    started = time.perf_counter()
    try:
        response = client.chat.completions.create(
            model=endpoint.model,
            messages=[{"role": "user", "content": "Reply with one word: ready"}],
            max_tokens=1,
            temperature=0,
        )
    except openai.APIStatusError as exc:
        return False, None, f"HTTP {exc.status_code} from {endpoint.base_url}: {exc.message}"
    except openai.OpenAIError as exc:
        cause = f" ({exc.__cause__})" if exc.__cause__ else ""
        return False, None, f"{type(exc).__name__} at {endpoint.base_url}: {exc}{cause}"
    latency = (time.perf_counter() - started) * 1000
    choices = response.choices or []
    text = (choices[0].message.content or "") if choices else ""
    served = response.model or endpoint.model
    return True, latency, f"{served} answered {text!r}"


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
