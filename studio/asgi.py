"""The studio under an ASGI server (uvicorn): Django for the pages, and beside it the
episode API (`studio.serving.episodes`, WebSocket included) under /env/."""

from __future__ import annotations

import multiprocessing
import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "studio.settings")

from django.core.asgi import get_asgi_application  # noqa: E402

from studio.env import config_errors_exit  # noqa: E402

# A missing or malformed variable: one line naming it, exit status 1. In a worker process of
# `uvicorn --workers N` (the Dockerfile's), exit with uvicorn's "failed to start" status (3)
# instead: its supervisor restarts a worker that died otherwise, and this one would fail the
# same way forever.
_EXIT_STATUS = 1 if multiprocessing.parent_process() is None else 3
with config_errors_exit(_EXIT_STATUS):
    django_app = get_asgi_application()

from studio.serving.episodes import app as episode_app  # noqa: E402


async def application(scope, receive, send):
    if scope["type"] == "lifespan":
        return await episode_app(scope, receive, send)
    if scope["type"] == "websocket" or scope.get("path", "").startswith(("/env/", "/mcp/")):
        return await episode_app(scope, receive, send)
    return await django_app(scope, receive, send)
