"""Helpers for tests of the episode API's transports: raw HTTP (bodies as bytes, headers
kept), a project's fake world model, a world served under a real uvicorn server."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from inference.worlds import parse_world
from studio.services.tokens import create_token
from studio.services.worlds import save_world
from tests.support.asgi import asgi_server
from tests.support.fake_openai import fake_openai_server

WEATHER = {
    "name": "Weather desk",
    "domain": "mcp",
    "description": "A weather service for the cities of Norway.",
    "initial_state": "The desk is open.",
    "tools": [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "The weather in a city",
                "parameters": {
                    "type": "object",
                    "properties": {"city": {"type": "string"}},
                    "required": ["city"],
                    "additionalProperties": False,
                },
            },
        }
    ],
}

ANSWER = '<predicted_observation>{"temp_c": 9}</predicted_observation>'


def request(
    method: str,
    url: str,
    body: Any = None,
    *,
    token: str = "",
    headers: dict[str, str] | None = None,
) -> tuple[int, Any, Any]:
    """(status, JSON body or text, headers (case-insensitive)). `body`: a dict (sent as
    JSON), bytes or an iterable of bytes (sent chunked)."""
    data = json.dumps(body).encode() if isinstance(body, dict) else body
    req = urllib.request.Request(url, data=data, method=method)
    req.add_header("Content-Type", "application/json")
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    for key, value in (headers or {}).items():
        req.add_header(key, value)
    try:
        with urllib.request.urlopen(req, timeout=60) as response:
            status, raw, got = response.status, response.read(), response.headers
    except urllib.error.HTTPError as exc:
        status, raw, got = exc.code, exc.read(), exc.headers
    try:
        return status, json.loads(raw), got
    except ValueError:
        return status, raw.decode(errors="replace"), got


def world_model(project, base_url: str) -> None:
    """The project's default world model: a fake OpenAI-compatible server."""
    from studio.services.endpoints import EndpointData, make_default, save_endpoint

    endpoint = save_endpoint(
        project,
        EndpointData(name="fake", role="world", kind="openai", base_url=base_url, model="m"),
    ).endpoint
    make_default(endpoint)


@contextmanager
def served_world(project, world: dict | None = None, **fake) -> Iterator[dict[str, Any]]:
    """A world of `project` under uvicorn, answered by a fake model (`fake`: its options,
    e.g. delay_s). Yields base (the server), url (the world's base URL), token, world, srv."""
    saved = save_world(project, parse_world(world or WEATHER))
    _, token = create_token(project, "agent")
    fake.setdefault("responder", lambda request, index: ANSWER)
    with fake_openai_server(**fake) as srv, asgi_server() as base:
        world_model(project, srv.base_url)
        yield {
            "base": base,
            "url": f"{base}/env/t/{token}/worlds/{saved.world.pk}",
            "ws": base.replace("http://", "ws://") + f"/env/t/{token}/worlds/{saved.world.pk}/ws",
            "token": token,
            "world": saved.world,
            "srv": srv,
        }
