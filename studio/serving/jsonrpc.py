"""OpenEnv's plain JSON-RPC endpoint (what openenv-core's `MCPToolClient` uses in production
mode, and what `openenv validate` checks), at the episode API's base:

    POST {base}/mcp     base = /env/t/<token>/worlds/<world id>  or  /env/worlds/<world id>
                        (with Authorization: Bearer <token>)

Methods, as openenv-core's `mcp_handler` answers them:
    tools/list                  {"session_id"?}                      -> {"tools": [{"name", "description", "inputSchema"}]}
    tools/call                  {"name", "arguments", "session_id"?, "_meta"?} -> an MCP CallToolResult
                                (+ "data": the observation's text, "reward", "done", "_meta")
    openenv/session/create      {}                                   -> {"session_id"}
    openenv/session/close       {"session_id"}                       -> {"session_id", "closed": true}

A valid `tools/call` is one step (`studio.serving.tool_calls`): of the session's episode
(reset at the session's first valid call), of the episode its `_meta` names
("agentworld/episode"), else of a new episode of its own. Sessions live in the database, so
any web worker answers any of them.

Errors are JSON-RPC error bodies with HTTP 200 (a body that is not a request, `{}` included,
is -32600; bad JSON -32700; an unknown method -32601; an unknown tool, arguments that break
its schema, or text that cannot be stored -32602, and no step is taken), except what the
transport must say: 401 for a token, 413 for a body over its limit, 429 (a rate limit) and
503 (retryable) with Retry-After; these carry the JSON-RPC error body too."""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse

from studio.services import episode_limits, episodes, mcp_sessions
from studio.services.episode_inputs import clean_text
from studio.services.tokens import authenticate
from studio.serving import tool_calls
from studio.serving.steps import db

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
SERVER_ERROR = -32000
# which EpisodeError is an error of the call (HTTP 200) and which of the transport
HTTP_STATUSES = {401, 413, 429, 503}


class _RpcError(Exception):
    def __init__(self, code: int, message: str, *, status: int = 200, data=None, retry=None):
        super().__init__(message)
        self.code, self.message, self.status, self.data, self.retry = (
            code, message, status, data, retry,
        )  # fmt: skip


def _answer(request_id, *, result=None, error: _RpcError | None = None) -> JSONResponse:
    if error is None:
        return JSONResponse({"jsonrpc": "2.0", "id": request_id, "result": result})
    body: dict[str, Any] = {"code": error.code, "message": error.message}
    if error.data is not None:
        body["data"] = error.data
    headers = {"Retry-After": str(max(1, round(error.retry)))} if error.retry else None
    return JSONResponse(
        {"jsonrpc": "2.0", "id": request_id, "error": body},
        status_code=error.status,
        headers=headers,
    )


def _from_episode_error(exc: episodes.EpisodeError) -> _RpcError:
    data: dict[str, Any] = {"code": exc.code}
    if exc.retry_after is not None:
        data["retry_after"] = exc.retry_after
    if exc.status in HTTP_STATUSES:
        return _RpcError(
            SERVER_ERROR, str(exc), status=exc.status, data=data, retry=exc.retry_after
        )
    if exc.status in (400, 404, 422):  # what was sent is wrong (a tool, an argument, an id)
        return _RpcError(INVALID_PARAMS, str(exc), data=data)
    return _RpcError(SERVER_ERROR, str(exc), data=data)


def _token_text(request: Request) -> str:
    text = request.path_params.get("token")
    if text:
        return text
    auth = request.headers.get("authorization", "")
    return auth[7:].strip() if auth.lower().startswith("bearer ") else ""


async def _body(request: Request) -> bytes:
    declared = request.headers.get("content-length", "")
    if declared.isdigit():
        episode_limits.check_body(int(declared))
    size, chunks = 0, []
    async for chunk in request.stream():
        size += len(chunk)
        episode_limits.check_body(size)
        chunks.append(chunk)
    return b"".join(chunks)


def _parse(raw: bytes) -> tuple[Any, str, dict[str, Any]]:
    """(id, method, params) of a JSON-RPC 2.0 request, else _RpcError."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _RpcError(
            PARSE_ERROR, f"Parse error: the body is not UTF-8 (invalid byte at offset {exc.start})"
        ) from None
    try:
        message = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _RpcError(
            PARSE_ERROR, f"Parse error: {exc.msg} (line {exc.lineno}, column {exc.colno})"
        ) from None
    except RecursionError:
        raise _RpcError(PARSE_ERROR, "Parse error: the JSON is nested too deeply") from None
    if not isinstance(message, dict):
        raise _RpcError(
            INVALID_REQUEST, "Invalid Request: the body must be a JSON-RPC 2.0 request object"
        )
    request_id = message.get("id")
    if not isinstance(request_id, (str, int, type(None))) or isinstance(request_id, bool):
        raise _RpcError(INVALID_REQUEST, "Invalid Request: 'id' must be a string, a number or null")
    if message.get("jsonrpc") != "2.0":
        raise _RpcError(
            INVALID_REQUEST, "Invalid Request: 'jsonrpc' must be \"2.0\"", data={"id": request_id}
        )
    method = message.get("method")
    if not isinstance(method, str) or not method:
        raise _RpcError(
            INVALID_REQUEST,
            "Invalid Request: 'method' must be the method's name",
            data={"id": request_id},
        )
    params = message.get("params", {})
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise _RpcError(
            INVALID_PARAMS, "Invalid params: 'params' must be an object", data={"id": request_id}
        )
    return request_id, method, params


def _session(token, params: dict[str, Any]):
    session_id = params.get("session_id")
    if session_id in (None, ""):
        return None
    session = mcp_sessions.find_session(token, str(session_id))
    if session is None:
        raise _RpcError(INVALID_PARAMS, f"Unknown session_id: {session_id}")
    return session


async def _tools_call(token, world, params: dict[str, Any]) -> dict[str, Any]:
    name = params.get("name")
    if not name:
        raise _RpcError(INVALID_PARAMS, "Missing 'name' in params: the tool to call")
    try:
        clean_text(name, "the tool's name")
        clean_text(params.get("arguments"), f"the arguments of tool {name!r}")
        clean_text(params.get("_meta"), "the call's _meta")
    except episodes.EpisodeInvalid as exc:
        raise _from_episode_error(exc) from None
    given = params.get("_meta")
    meta: dict[str, Any] = given if isinstance(given, dict) else {}
    session = await db(_session)(token, params)
    try:
        outcome = await tool_calls.call(
            token, world, name, params.get("arguments"), client="openenv-mcp", session=session,
            hint=str(meta.get(tool_calls.EPISODE_META) or ""),
            options=tool_calls.reset_options(meta),
        )  # fmt: skip
    except episodes.TokenRevoked:
        raise _RpcError(SERVER_ERROR, "the API token was revoked", status=401) from None
    except episodes.EpisodeError as exc:
        raise _from_episode_error(exc) from None
    observation = outcome.result.observation
    text = observation.get("text", "")
    is_error = False
    try:
        parsed = json.loads(text)
        is_error = isinstance(parsed, dict) and bool(parsed.get("isError"))
    except (ValueError, TypeError):
        pass
    return {
        "content": [{"type": "text", "text": text}],
        "isError": is_error,
        "data": text,  # what MCPToolClient.call_tool returns
        "observation": observation,
        "reward": outcome.result.reward,
        "done": outcome.result.done,
        "_meta": tool_calls.answer_meta(outcome),
    }


async def _dispatch(token, world, method: str, params: dict[str, Any]) -> Any:
    if method == "tools/list":
        await db(_session)(token, params)  # a session named must exist
        try:
            listed = await db(tool_calls.latest_tools)(world)
        except episodes.EpisodeError as exc:
            raise _from_episode_error(exc) from None
        return {"tools": [tool_calls.mcp_tool(t) for t in listed]}
    if method == "tools/call":
        return await _tools_call(token, world, params)
    if method == "openenv/session/create":
        return {"session_id": await db(mcp_sessions.open_session)(token)}
    if method == "openenv/session/close":
        session_id = params.get("session_id")
        if not session_id:
            raise _RpcError(INVALID_PARAMS, "Invalid params - 'session_id' is required")
        if not await db(mcp_sessions.close_session)(token, str(session_id)):
            raise _RpcError(INVALID_PARAMS, f"Unknown session_id: {session_id}")
        return {"session_id": session_id, "closed": True}
    raise _RpcError(METHOD_NOT_FOUND, f"Method not found: {method}")


async def endpoint(request: Request) -> JSONResponse:
    token = await db(authenticate)(_token_text(request), touch=False)
    world = None
    if token is not None:
        world = await db(episodes.world_of)(token, int(request.path_params["world_id"]))
    if token is None or world is None:
        refusal = _RpcError(
            SERVER_ERROR, "a valid API token of this world's project is required", status=401
        )
        return _answer(None, error=refusal)
    request_id = None
    try:
        try:
            raw = await _body(request)
        except episodes.EpisodeTooLarge as exc:
            raise _from_episode_error(exc) from None
        request_id, method, params = _parse(raw)
        return _answer(request_id, result=await _dispatch(token, world, method, params))
    except _RpcError as error:
        if request_id is None and isinstance(error.data, dict) and "id" in error.data:
            request_id = error.data.pop("id")
            error.data = error.data or None
        return _answer(request_id, error=error)
