"""Close what an event loop holds (connections to the database, the broker, model servers)
when the loop ends: uvicorn's loop at shutdown, a test server's loop when its thread stops.
Open database connections would otherwise outlive the server (and keep a test database from
being dropped).

The hook is an async generator started on the loop: `asyncio.run` (uvicorn runs its loop
with it) closes every such generator before it closes the loop, and the generator's
`finally` runs the closers."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import weakref
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)

_closers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, list] = weakref.WeakKeyDictionary()
_hooks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, object] = weakref.WeakKeyDictionary()


async def _at_end(closers: list[Callable[[], Awaitable[None]]]):
    try:
        yield
    finally:
        for close in reversed(closers):
            with contextlib.suppress(Exception):
                await close()


def at_loop_close(close: Callable[[], Awaitable[None]]) -> None:
    """Await `close()` when the running loop shuts down (call it from a coroutine)."""
    loop = asyncio.get_running_loop()
    closers = _closers.get(loop)
    if closers is None:
        closers = _closers[loop] = []
        hook = _at_end(closers)
        # started here, so the loop knows it (its async generator hooks) and closes it
        loop.create_task(hook.__anext__())
        _hooks[loop] = hook  # the loop keeps only a weak reference
    closers.append(close)
