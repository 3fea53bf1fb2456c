from __future__ import annotations

import re
from collections.abc import AsyncIterator, Iterable
from typing import Any

from django.http import HttpRequest, StreamingHttpResponse
from django.utils.http import url_has_allowed_host_and_scheme
from django_htmx.middleware import HtmxDetails


class HtmxHttpRequest(HttpRequest):
    """A request after django-htmx's middleware: `request.htmx` is truthy for htmx requests."""

    htmx: HtmxDetails


# An id or a number as a URL or a form gives it: ASCII digits only (str.isdigit() takes "²",
# which int() refuses) and few enough for any integer column (a longer one would overflow
# the query, not just find nothing).
_WHOLE_NUMBER = re.compile(r"[0-9]{1,15}")


def whole_number(value: Any) -> int | None:
    """`value` (a query or form parameter) as a whole number, or None when it is not one."""
    text = value if isinstance(value, str) else str(value if value is not None else "")
    return int(text) if _WHOLE_NUMBER.fullmatch(text) else None


def back_url(request: HttpRequest, fallback: str) -> str:
    """Where a form sent from another page goes back to: its `next`, when that is a page of
    this site, else `fallback` (never an address elsewhere: no open redirect)."""
    target = request.POST.get("next") or request.GET.get("next") or ""
    if target and url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return target
    return fallback


def streaming_response(
    request: HttpRequest, chunks: Iterable[bytes | str], content_type: str
) -> StreamingHttpResponse:
    """A response streamed as `chunks` are made, under ASGI too: there Django reads a
    synchronous iterator to its end before sending a byte (a whole export in memory), so the
    iterator is pulled in batches from the request's thread instead."""
    from django.core.handlers.asgi import ASGIRequest

    if not isinstance(request, ASGIRequest):
        return StreamingHttpResponse(chunks, content_type=content_type)
    from asgiref.sync import sync_to_async

    pieces = iter(chunks)

    def take(limit: int = 1 << 16) -> bytes:
        out, size = [], 0
        for piece in pieces:
            data = piece.encode() if isinstance(piece, str) else piece
            out.append(data)
            size += len(data)
            if size >= limit:
                break
        return b"".join(out)

    async def pull() -> AsyncIterator[bytes]:
        while True:
            # thread_sensitive: a database cursor stays on the thread that opened it
            piece = await sync_to_async(take, thread_sensitive=True)()
            if not piece:
                return
            yield piece

    return StreamingHttpResponse(pull(), content_type=content_type)
