"""A world as an MCP server (the official MCP Python SDK, streamable HTTP transport):

    {base}/mcp      base = /mcp/t/<token>/worlds/<world id>

`tools/list` answers the world's tool schemas; each `tools/call` is one step of an episode,
answered by the world model in a worker and recorded live like any episode (one episode per
MCP session). The token is checked on every request; a session stays with the token that
opened it."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import mcp.types as types
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager

from studio.services import episodes

SESSION_HEADER = "mcp-session-id"
# `_meta` key of a tools/call naming the episode it continues (answers carry it back): the
# current protocol has no sessions, so the agent says which episode a call belongs to.
EPISODE_META = "agentworld/episode"
# MCP session id -> episode (trajectory id, token id), in this process: a session lives in
# the process that opened it (the SDK keeps its transport in memory).
_EPISODES: dict[str, tuple[int, int]] = {}


class _Refused(Exception):
    pass


AUTH_SCOPE_KEY = "agentworld.auth"  # (token, world), put in the scope by `asgi_app`


async def _auth(ctx) -> tuple[Any, Any]:
    """The token and world `asgi_app` checked for this request (every MCP request passes
    there first)."""
    request = ctx.request
    auth = request.scope.get(AUTH_SCOPE_KEY) if request is not None else None
    if auth is None:
        raise _Refused("a valid API token of this world's project is required")
    return auth


async def list_tools(ctx, params) -> types.ListToolsResult:
    from studio.serving.steps import db as _db

    _, world = await _auth(ctx)
    spec = await _db(lambda: world.latest.spec())()
    return types.ListToolsResult(
        tools=[
            types.Tool(
                name=t["function"]["name"],
                description=t["function"]["description"] or None,
                input_schema=dict(t["function"]["parameters"]),
            )
            for t in spec.tools
        ]
    )


async def call_tool(ctx, params: types.CallToolRequestParams) -> types.CallToolResult:
    from studio.serving.steps import db as _db
    from studio.serving.steps import run_step as _run_step

    token, world = await _auth(ctx)
    session = ctx.request.headers.get(SESSION_HEADER, "")  # older protocol versions only
    wanted = _episode_hint(params, ctx)
    try:
        if wanted:  # the agent names the episode it goes on with
            trajectory = await _db(episodes.episode_of)(token, wanted)
        elif session and _EPISODES.get(session, (0, None))[1] == token.pk:
            trajectory = await _db(episodes.episode_of)(token, _EPISODES[session][0])
        else:  # a new episode; its id comes back in the result's _meta
            trajectory, _ = await _db(episodes.reset)(
                token, world, task=f"MCP calls of {token.name}", client="mcp"
            )
            if session:
                _EPISODES[session] = (trajectory.pk, token.pk)
        action = {"name": params.name, "arguments": dict(params.arguments or {})}
        result = await _run_step(token, trajectory.pk, action, check_token=True)
    except episodes.TokenRevoked:
        raise _Refused("the API token was revoked") from None
    except episodes.EpisodeError as exc:
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=str(exc))], is_error=True
        )
    text = result.observation.get("text", "")
    is_error = False
    with contextlib.suppress(ValueError, TypeError):
        parsed = json.loads(text)
        is_error = isinstance(parsed, dict) and bool(parsed.get("isError"))
    answer = types.CallToolResult(
        content=[types.TextContent(type="text", text=text)], is_error=is_error
    )
    answer.meta = {EPISODE_META: str(trajectory.pk)}
    return answer


def _episode_hint(params, ctx) -> str:
    for meta in (getattr(params, "meta", None), getattr(ctx, "meta", None)):
        if isinstance(meta, dict) and meta.get(EPISODE_META):
            return str(meta[EPISODE_META])
    return ""


server: Server = Server("agentworld-studio", on_list_tools=list_tools, on_call_tool=call_tool)


class _State:
    # The SDK's session manager runs once: each server start (lifespan) makes its own.
    app: StreamableHTTPASGIApp | None = None


state = _State()


@contextlib.asynccontextmanager
async def running():
    manager = StreamableHTTPSessionManager(app=server, json_response=True)
    async with manager.run():
        state.app = StreamableHTTPASGIApp(manager)
        try:
            yield
        finally:
            state.app = None
            _EPISODES.clear()


async def asgi_app(scope, receive, send) -> None:
    """The SDK's app behind the token check: a request without a valid token of the world's
    project is answered 401 before any MCP message is read (nothing is recorded)."""
    from starlette.requests import Request
    from starlette.responses import JSONResponse

    from studio.services.tokens import authenticate
    from studio.serving.steps import db as _db

    request = Request(scope, receive)
    token = await _db(authenticate)(request.path_params.get("token", ""), touch=False)
    world = None
    if token is not None:
        world = await _db(episodes.world_of)(token, int(request.path_params["world_id"]))
    if token is None or world is None:
        response = JSONResponse(
            {"detail": "a valid API token of this world's project is required"}, status_code=401
        )
        await response(scope, receive, send)
        return
    if state.app is None:
        response = JSONResponse({"detail": "the MCP server is not running"}, status_code=503)
        await response(scope, receive, send)
        return
    # the SDK hands its handlers a request made from this scope: they read the check's result
    await state.app({**scope, AUTH_SCOPE_KEY: (token, world)}, receive, send)
