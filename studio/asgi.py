"""The studio under an ASGI server (uvicorn): Django for the pages, and beside it the
episode API (`studio.serving.episodes`, WebSocket included) under /env/."""

from __future__ import annotations

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "studio.settings")

from django.core.asgi import get_asgi_application  # noqa: E402

django_app = get_asgi_application()

from studio.serving.episodes import app as episode_app  # noqa: E402


async def application(scope, receive, send):
    if scope["type"] == "lifespan":
        return await episode_app(scope, receive, send)
    if scope["type"] == "websocket" or scope.get("path", "").startswith(("/env/", "/mcp/")):
        return await episode_app(scope, receive, send)
    return await django_app(scope, receive, send)
