"""The studio under an ASGI server (uvicorn): Django for the pages, and beside it the
episode API (`studio.serving.episodes`, WebSocket included) under /env/. Every request body
is bounded before it is buffered (`studio.body_limits`, in front of both)."""

from __future__ import annotations

import multiprocessing
import os
import tempfile

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "studio.settings")

import django  # noqa: E402
from django.conf import settings  # noqa: E402
from django.core.exceptions import RequestAborted  # noqa: E402
from django.core.handlers.asgi import ASGIHandler  # noqa: E402

from studio.env import config_errors_exit  # noqa: E402


class StudioASGIHandler(ASGIHandler):
    """Django's handler, its request body spooled in FILE_UPLOAD_TEMP_DIR (the data dir,
    beside MEDIA_ROOT) instead of /tmp: the whole body is written out before a view runs,
    and that belongs on the data volume, not the container's /tmp."""

    async def read_body(self, receive):
        # Django's own read_body, but for the spool's folder (`dir`)
        body_file = tempfile.SpooledTemporaryFile(
            max_size=settings.FILE_UPLOAD_MAX_MEMORY_SIZE,
            mode="w+b",
            dir=settings.FILE_UPLOAD_TEMP_DIR,
        )
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                body_file.close()  # an early disconnect, or studio.body_limits refused it
                raise RequestAborted()
            if "body" in message:
                body_file.write(message["body"])
            if not message.get("more_body", False):
                break
        body_file.seek(0)
        return body_file


# A missing or malformed variable: one line naming it, exit status 1. In a worker process of
# `uvicorn --workers N` (the Dockerfile's), exit with uvicorn's "failed to start" status (3)
# instead: its supervisor restarts a worker that died otherwise, and this one would fail the
# same way forever.
_EXIT_STATUS = 1 if multiprocessing.parent_process() is None else 3
with config_errors_exit(_EXIT_STATUS):
    django.setup(set_prefix=False)  # as django.core.asgi.get_asgi_application does
    django_app = StudioASGIHandler()

from studio.body_limits import BodyLimit  # noqa: E402
from studio.serving.episodes import app as episode_app  # noqa: E402


async def studio_app(scope, receive, send):
    if scope["type"] == "lifespan":
        return await episode_app(scope, receive, send)
    if scope["type"] == "websocket" or scope.get("path", "").startswith(("/env/", "/mcp/")):
        return await episode_app(scope, receive, send)
    return await django_app(scope, receive, send)


application = BodyLimit(studio_app)
