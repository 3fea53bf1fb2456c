"""The studio's ASGI app (Django plus the episode API) under a real uvicorn server on a free
port of 127.0.0.1, in a thread of the test process (so it sees the test database)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from tests.support.worker import wait_for


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def asgi_server() -> Iterator[str]:
    import uvicorn

    from studio.asgi import application

    port = _free_port()
    config = uvicorn.Config(application, host="127.0.0.1", port=port, log_level="warning")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="uvicorn", daemon=True)
    thread.start()
    wait_for(lambda: server.started, timeout=20)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        # The app's database connections lived in its requests' contexts, now gone; collect
        # them, so none is left open to keep the test database from being dropped.
        import gc

        gc.collect()
