"""The size of a request body, bounded before it is buffered: an ASGI middleware in front of
the whole studio (`studio.asgi`). Django's ASGI handler writes a body out in full before any
view or form sees it (and the episode API would read it into memory), so a limit checked
there comes after the bytes arrived; here a body is refused as it arrives.

Each request gets the limit of its route (`limit_for`):

- an upload (a multipart POST to a view in UPLOAD_URL_NAMES, or marked with
  `accepts_upload`) from a signed-in account: STUDIO_MAX_UPLOAD_MB plus the form's allowance
  (`studio.upload_handlers.FORM_ALLOWANCE_BYTES`); from a visitor, the form limit below;
- the episode API (/env/) and MCP (/mcp/): STUDIO_EPISODE_MAX_BODY_KB;
- every other request (a page's form, /login/, htmx): STUDIO_MAX_FORM_BODY_KB.

A Content-Length over the limit is answered 413 before a byte of the body is read, and the
app is not called. A body without one (chunked) is counted as it streams: at the chunk that
passes the limit the middleware answers 413 itself and the app gets `http.disconnect`, so
it drops what it had (Django's handler closes its spool and runs no view). The 413 names the
limit and its setting: JSON `{"detail", "code"}` on /env/ (the API's error shape, JSON-RPC's
error body beside it on the JSON-RPC routes), a short page otherwise (a fragment for htmx,
shown above the form it was sent from)."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.template.defaultfilters import filesizeformat
from django.urls import Resolver404, resolve
from django.utils.html import escape

from studio.upload_handlers import FORM_ALLOWANCE_BYTES

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

# The views that take a file: the trajectory import, a world file, a campaign's tasks file.
# A new upload view: add its URL name here, or decorate the view with `accepts_upload`.
UPLOAD_URL_NAMES = frozenset({"import_upload", "world_import", "campaign_new"})

_UPLOAD_METHODS = frozenset({"POST", "PUT", "PATCH"})

# JSON-RPC's "invalid request" (the code studio.serving.mcp answers a body over its limit with)
_JSONRPC_INVALID_REQUEST = -32600


def accepts_upload(view):
    """Mark a view as an upload route: its requests get STUDIO_MAX_UPLOAD_MB, not the form
    limit (functools.wraps copies the mark through the decorators above it)."""
    view.accepts_upload = True
    return view


@dataclass(frozen=True)
class Limit:
    bytes: int
    setting: str
    what: str  # what the body is, for the message: "an upload", "a form", ...
    answer: str  # "page", "json" (the episode API) or "jsonrpc" (/mcp/, {base}/mcp)


def _is_upload_route(path: str) -> bool:
    try:
        match = resolve(path)
    except Resolver404:
        return False
    return match.url_name in UPLOAD_URL_NAMES or getattr(match.func, "accepts_upload", False)


def limit_for(scope: Scope) -> Limit:
    path = scope.get("path", "")
    root = scope.get("root_path", "")
    if root and path.startswith(root):
        path = path[len(root) :] or "/"
    if path.startswith(("/env/", "/mcp/")):
        jsonrpc = path.startswith("/mcp/") or path.rstrip("/").endswith("/mcp")
        return Limit(
            settings.STUDIO_EPISODE_MAX_BODY_KB * 1024,
            "STUDIO_EPISODE_MAX_BODY_KB",
            "an episode API request" if not jsonrpc else "an MCP request",
            "jsonrpc" if jsonrpc else "json",
        )
    # an upload is a multipart POST: another body to an upload route is a form (Django's
    # DATA_UPLOAD_MAX_MEMORY_SIZE would refuse it past the form limit, but only once read),
    # and resolving the path of every page's GET would cost for nothing
    content_type = (_header(scope, b"content-type") or b"").lower()
    if (
        scope.get("method") in _UPLOAD_METHODS
        and content_type.startswith(b"multipart/form-data")
        and _is_upload_route(path)
    ):
        return Limit(
            settings.STUDIO_MAX_UPLOAD_BYTES + FORM_ALLOWANCE_BYTES,
            "STUDIO_MAX_UPLOAD_MB",
            "an upload",
            "page",
        )
    return form_limit()


def form_limit() -> Limit:
    return Limit(settings.STUDIO_MAX_FORM_BODY_BYTES, "STUDIO_MAX_FORM_BODY_KB", "a form", "page")


def _session_key(scope: Scope) -> str | None:
    from http.cookies import CookieError, SimpleCookie

    raw = _header(scope, b"cookie")
    if not raw:
        return None
    try:
        cookie = SimpleCookie(raw.decode("latin-1"))
    except CookieError:
        return None
    morsel = cookie.get(settings.SESSION_COOKIE_NAME)
    return morsel.value if morsel is not None else None


def _session_has_user(key: str) -> bool:
    from importlib import import_module

    store = import_module(settings.SESSION_ENGINE).SessionStore(session_key=key)
    return store.get("_auth_user_id") is not None


async def _signed_in(scope: Scope) -> bool:
    """Whether the request carries the session of a signed-in account (one session read,
    for upload routes only)."""
    from asgiref.sync import sync_to_async

    key = _session_key(scope)
    if not key:
        return False
    return await sync_to_async(_session_has_user, thread_sensitive=True)(key)


def _header(scope: Scope, name: bytes) -> bytes | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return value
    return None


def _declared_length(scope: Scope) -> int | None:
    """Content-Length, when it is a number (the server refuses a malformed one itself;
    otherwise the body is counted as it arrives)."""
    raw = _header(scope, b"content-length")
    if raw is None or not raw.strip().isdigit():
        return None
    return int(raw)


def refusal_text(limit: Limit, size: int, *, declared: bool) -> str:
    if limit.setting == "STUDIO_MAX_UPLOAD_MB":
        shown = (
            f"the upload limit of {filesizeformat(settings.STUDIO_MAX_UPLOAD_BYTES)} "
            f"a file (STUDIO_MAX_UPLOAD_MB), with {filesizeformat(FORM_ALLOWANCE_BYTES)} "
            "for the rest of the form"
        )
    else:
        shown = f"the limit of {limit.bytes:,} bytes for {limit.what} ({limit.setting})"
    measured = f"it declares {size:,} bytes" if declared else f"refused at {size:,} bytes"
    return (
        f"The request body is larger than {shown}: {measured}. "
        "Nothing of it was read into the studio or stored."
    )


def _refusal_response(scope: Scope, limit: Limit, text: str) -> tuple[bytes, list, bytes]:
    """(content type, extra headers, body) of the 413."""
    if limit.answer == "json":
        body: dict[str, Any] = {"detail": text, "code": "TOO_LARGE"}
        return b"application/json", [], json.dumps(body).encode()
    if limit.answer == "jsonrpc":
        # a JSON-RPC client reads `error`; the API's {"detail", "code"} beside it
        body = {
            "jsonrpc": "2.0",
            "id": None,
            "error": {
                "code": _JSONRPC_INVALID_REQUEST,
                "message": text,
                "data": {"code": "TOO_LARGE"},
            },
            "detail": text,
            "code": "TOO_LARGE",
        }
        return b"application/json", [], json.dumps(body).encode()
    message = escape(text)
    if _header(scope, b"hx-request") == b"true":
        # studio.js lets a 413 swap: shown at the top of the request's target, the form kept
        html = f'<ul class="messages"><li class="msg-error" role="alert">{message}</li></ul>'
        return b"text/html; charset=utf-8", [(b"hx-reswap", b"afterbegin")], html.encode()
    page = (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        "<title>Request too large</title></head><body><h1>Request too large</h1>"
        f"<p>{message}</p><p>Go back to change what you sent.</p></body></html>"
    )
    return b"text/html; charset=utf-8", [], page.encode()


async def send_refusal(scope: Scope, send: Send, limit: Limit, size: int, *, declared: bool):
    content_type, extra, body = _refusal_response(
        scope, limit, refusal_text(limit, size, declared=declared)
    )
    headers = [
        (b"content-type", content_type),
        (b"content-length", str(len(body)).encode()),
        # the rest of the body is not read: the connection cannot carry another request
        (b"connection", b"close"),
        *extra,
    ]
    await send({"type": "http.response.start", "status": 413, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class BodyLimit:
    """Wraps an ASGI app; HTTP requests only (WebSocket frames have their own limits)."""

    def __init__(self, app: ASGIApp, choose: Callable[[Scope], Limit] = limit_for):
        self.app = app
        self.choose = choose

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        limit = self.choose(scope)
        if limit.setting == "STUDIO_MAX_UPLOAD_MB" and not await _signed_in(scope):
            # the upload views want a signed-in member: a visitor's body (which Django would
            # spool to disk before any view refused it) gets no more than a form's
            limit = form_limit()
        declared = _declared_length(scope)
        if declared is not None and declared > limit.bytes:
            return await send_refusal(scope, send, limit, declared, declared=True)

        received = 0
        refused = False
        response_started = False

        async def limited_receive() -> Message:
            nonlocal received, refused
            if refused:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit.bytes:
                    refused = True
                    if not response_started:
                        await send_refusal(scope, send, limit, received, declared=False)
                    # the app drops what it had read: nothing of the body is processed
                    return {"type": "http.disconnect"}
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal response_started
            if refused:
                return  # the 413 was the answer; the app's own (an error, likely) is dropped
            if message["type"] == "http.response.start":
                response_started = True
            await send(message)

        try:
            await self.app(scope, limited_receive, guarded_send)
        except Exception:
            if not refused:
                raise
            # the app failed on the disconnect it was given (Starlette's ClientDisconnect):
            # the request was answered, nothing of it ran
