"""The project's embeddings model (an endpoint of role "Embedding model", an OpenAI-compatible
`/v1/embeddings` server): `embedder_for(project)` gives a client for its default one, or
None when it has none. Behaviour search ranks capped candidates by meaning and clusters
reasons with it; search pages may rank by meaning with it."""

from __future__ import annotations

from typing import Any

from inference.embeddings import Embedder
from studio.models import EndpointRole, ModelEndpoint, Project
from studio.services.endpoints import api_key_of, default_endpoint, key_for_job

REQUEST_TIMEOUT_S = 60.0


def embedding_endpoint(project: Project) -> ModelEndpoint | None:
    """The project's default embeddings model (an OpenAI-compatible one), or None."""
    endpoint = default_endpoint(project, EndpointRole.EMBEDDING)
    if endpoint is None or endpoint.kind != "openai" or not endpoint.base_url:
        return None
    return endpoint


def embedder_for(project: Project, *, timeout: float = REQUEST_TIMEOUT_S) -> Embedder | None:
    """A client of the project's default embeddings model, None when it has none.
    `EndpointError` when its key may not be sent or its host may not be reached."""
    endpoint = embedding_endpoint(project)
    if endpoint is None:
        return None
    return Embedder(endpoint.base_url, endpoint.model, api_key_of(endpoint), timeout=timeout)


def embedder_for_job(endpoint: Any, base_url: str, model: str) -> Embedder | None:
    """The embeddings model a job recorded (None: it recorded none), with the key the
    endpoint still may send there (`key_for_job`)."""
    if not base_url or not model:
        return None
    key = key_for_job(endpoint, base_url, env="EMBEDDING_MODEL_API_KEY")
    return Embedder(base_url, model, key, timeout=REQUEST_TIMEOUT_S)
