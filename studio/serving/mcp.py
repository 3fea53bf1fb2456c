"""A world as an MCP server (the official MCP Python SDK, streamable HTTP transport):

    {base}/mcp      base = /mcp/t/<token>/worlds/<world id>

`tools/list` answers the world's tool schemas; each valid `tools/call` is one step of an
episode (`studio.serving.tool_calls`), recorded live like any episode.

Sessions: the SDK's session manager runs stateless (it keeps no session in this process, so
several web workers and machines serve one client); the sessions are ours, in the database
(`studio.services.mcp_sessions`). `initialize` opens one and its id goes back in the
`Mcp-Session-Id` header, as the protocol's session management says; the client sends it
with every later request, whichever process answers it. A client without the vendor `_meta`
key plays ONE episode per session, reset at the session's first valid tool call; with
`_meta` {"agentworld/episode": id} a call continues that episode. DELETE ends a session.
The 2026-07-28 protocol revision has no sessions: a request of it is answered -32022 naming
the handshake-era versions, so the SDK's client (mode "auto") falls back to `initialize`.

Errors: a call to an unknown tool or with arguments that break its JSON Schema, and text
that cannot be stored (an unpaired surrogate, NUL), get an `isError` result naming the
problem: no episode is reset, no model is asked, no step is written. The token is checked
on every request; a session stays with the token that opened it."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import mcp.types as types
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from studio.services import episode_limits, episodes, mcp_sessions
from studio.services.episode_inputs import clean_text
from studio.serving import tool_calls
from studio.serving.steps import db

SESSION_HEADER = "mcp-session-id"
VERSION_HEADER = "mcp-protocol-version"
EPISODE_META = tool_calls.EPISODE_META
UNSUPPORTED_PROTOCOL_VERSION = -32022
INVALID_PARAMS = -32602
AUTH_SCOPE_KEY = "agentworld.auth"  # (token, world, session or None), put there by `asgi_app`


class _Refused(Exception):
    pass


def _auth(ctx) -> tuple[Any, Any, Any]:
    """The token, world and session `asgi_app` checked for this request (every MCP request
    passes there first)."""
    request = ctx.request
    auth = request.scope.get(AUTH_SCOPE_KEY) if request is not None else None
    if auth is None:
        raise _Refused("a valid API token of this world's project is required")
    return auth


async def list_tools(ctx, params) -> types.ListToolsResult:
    _, world, _ = _auth(ctx)
    listed = await db(tool_calls.latest_tools)(world)
    return types.ListToolsResult(
        tools=[
            types.Tool(
                name=tool["name"],
                description=tool["description"] or None,
                input_schema=tool["inputSchema"],
            )
            for tool in map(tool_calls.mcp_tool, listed)
        ]
    )


def _refusal(message: str, meta: dict[str, Any] | None = None) -> types.CallToolResult:
    answer = types.CallToolResult(
        content=[types.TextContent(type="text", text=message)], is_error=True
    )
    if meta:
        answer.meta = meta
    return answer


async def call_tool(ctx, params: types.CallToolRequestParams) -> types.CallToolResult:
    token, world, session = _auth(ctx)
    meta = _meta_of(params, ctx)
    hint = str(meta.get(EPISODE_META) or "")
    try:
        outcome = await tool_calls.call(
            token, world, params.name, params.arguments,
            client="mcp", session=session, hint=hint, options=tool_calls.reset_options(meta),
        )  # fmt: skip
    except episodes.TokenRevoked:
        return _refusal("the API token was revoked")
    except episodes.EpisodeError as exc:
        extra: dict[str, Any] = {"agentworld/code": exc.code}
        if exc.retry_after is not None:
            extra["agentworld/retry_after"] = exc.retry_after
        return _refusal(str(exc), extra)
    text = outcome.result.observation.get("text", "")
    is_error = False
    with contextlib.suppress(ValueError, TypeError):
        parsed = json.loads(text)
        is_error = isinstance(parsed, dict) and bool(parsed.get("isError"))
    answer = types.CallToolResult(
        content=[types.TextContent(type="text", text=text)], is_error=is_error
    )
    answer.meta = tool_calls.answer_meta(outcome)
    return answer


def _meta_of(params, ctx) -> dict[str, Any]:
    for meta in (getattr(params, "meta", None), getattr(ctx, "meta", None)):
        if isinstance(meta, dict) and meta:
            return meta
        if meta is not None and hasattr(meta, "model_dump"):
            dumped = meta.model_dump(by_alias=True, exclude_none=True)
            if dumped:
                return dumped
    return {}


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("agentworld-studio")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "0+unknown"


server: Server = Server(
    "agentworld-studio", version=_version(), on_list_tools=list_tools, on_call_tool=call_tool
)


class _State:
    # The SDK's session manager runs once: each server start (lifespan) makes its own.
    app: StreamableHTTPASGIApp | None = None


state = _State()


@contextlib.asynccontextmanager
async def running():
    # stateless: the SDK keeps nothing of a session in this process (the database does)
    manager = StreamableHTTPSessionManager(app=server, json_response=True, stateless=True)
    async with manager.run():
        state.app = StreamableHTTPASGIApp(manager)
        try:
            yield
        finally:
            state.app = None


def _rpc_error(status: int, code: int, message: str, request_id=None, data=None) -> Response:
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return JSONResponse({"jsonrpc": "2.0", "id": request_id, "error": error}, status_code=status)


async def _read_body(receive) -> bytes:
    """The request's body, refused (EpisodeTooLarge) once over STUDIO_EPISODE_MAX_BODY_KB."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        episode_limits.check_body(size)
        chunks.append(chunk)
        if not message.get("more_body"):
            break
    return b"".join(chunks)


def _bad_text_answer(message: Any) -> Response | None:
    """An answer to a JSON-RPC request whose text cannot be stored (the SDK's JSON parser
    would refuse an unpaired surrogate with a bare parse error): a tool call gets an
    `isError` result naming the argument, another request an invalid-params error."""
    if not isinstance(message, dict) or "id" not in message:
        return None
    params = message.get("params")
    if not isinstance(params, dict):
        return None
    try:
        if message.get("method") == "tools/call":
            name = params.get("name")
            clean_text(name, "the tool's name")
            clean_text(params.get("arguments"), f"the arguments of tool {name!r}")
        clean_text(params, "the request's params")
    except episodes.EpisodeInvalid as exc:
        if message.get("method") == "tools/call":
            result = _refusal(str(exc)).model_dump(mode="json", by_alias=True, exclude_none=True)
            return JSONResponse({"jsonrpc": "2.0", "id": message["id"], "result": result})
        return _rpc_error(400, INVALID_PARAMS, str(exc), message["id"])
    return None


async def asgi_app(scope, receive, send) -> None:
    """The SDK's app behind the token check and the database's sessions: a request without
    a valid token of the world's project is answered 401 before any MCP message is read
    (nothing is recorded)."""
    from studio.services.tokens import authenticate

    request = Request(scope, receive)
    token = await db(authenticate)(request.path_params.get("token", ""), touch=False)
    world = None
    if token is not None:
        world = await db(episodes.world_of)(token, int(request.path_params["world_id"]))
    if token is None or world is None:
        response: Response = JSONResponse(
            {"detail": "a valid API token of this world's project is required"}, status_code=401
        )
        return await response(scope, receive, send)
    if state.app is None:
        response = JSONResponse({"detail": "the MCP server is not running"}, status_code=503)
        return await response(scope, receive, send)
    version = request.headers.get(VERSION_HEADER)
    if version is not None and version not in HANDSHAKE_PROTOCOL_VERSIONS:
        # this server keeps sessions (an episode each): the revision without them is refused
        response = _rpc_error(
            400,
            UNSUPPORTED_PROTOCOL_VERSION,
            f"protocol version {version} has no sessions, and this server plays one episode "
            f"per MCP session: use one of {', '.join(HANDSHAKE_PROTOCOL_VERSIONS)} "
            "(the initialize handshake)",
            data={"supported": list(HANDSHAKE_PROTOCOL_VERSIONS), "requested": version},
        )
        return await response(scope, receive, send)
    session_id = request.headers.get(SESSION_HEADER)
    method = scope.get("method", "")
    if method == "DELETE":  # the client ends its session
        closed = session_id and await db(mcp_sessions.close_session)(token, session_id)
        response = Response(status_code=200 if closed else 404)
        return await response(scope, receive, send)
    if method != "POST":  # no stream of server-sent messages: a stateless server sends none
        response = Response(status_code=405, headers={"Allow": "POST, DELETE"})
        return await response(scope, receive, send)
    try:
        body = await _read_body(receive)
    except episodes.EpisodeTooLarge as exc:
        return await _rpc_error(413, -32600, str(exc))(scope, receive, send)
    try:
        message: Any = json.loads(body)
    except (ValueError, RecursionError):
        message = None  # the SDK answers it (a parse error)
    is_initialize = isinstance(message, dict) and message.get("method") == "initialize"
    session = None
    if session_id and not is_initialize:
        session = await db(mcp_sessions.find_session)(token, session_id)
        if session is None:  # unknown, ended, or another token's: the client starts anew
            response = _rpc_error(
                404, -32600, "Session not found: send initialize to open a new MCP session"
            )
            return await response(scope, receive, send)
    refused = _bad_text_answer(message)
    if refused is not None:
        return await refused(scope, receive, send)
    new_session = await db(mcp_sessions.open_session)(token) if is_initialize else None

    pending = [body]  # the body, read above, given once to the SDK

    async def replay():
        if not pending:
            return await receive()
        return {"type": "http.request", "body": pending.pop(), "more_body": False}

    async def send_with_session(event):
        if new_session and event["type"] == "http.response.start":
            headers = list(event.get("headers", []))
            headers.append((SESSION_HEADER.encode(), new_session.encode()))
            event = {**event, "headers": headers}
        await send(event)

    # the SDK hands its handlers a request made from this scope: they read the checks' result
    inner = {**scope, AUTH_SCOPE_KEY: (token, world, session)}
    await state.app(inner, replay, send_with_session)
