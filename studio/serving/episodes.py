"""The episode API, in OpenEnv's convention, as an ASGI app (Starlette) beside Django:

    POST {base}/reset   {"task_id"?, "task"?, "seed"?, "max_steps"?}  -> {"observation", "reward", "done"}
    POST {base}/step    {"episode_id", "action": {...}}              -> {"observation", "reward", "done"}
    GET  {base}/state?episode_id=ID                                  -> {"episode_id", "step_count", ...}
    GET  {base}/health | /metadata | /schema | /openapi.json          (`openenv validate --url {base}`)
    POST {base}/mcp     OpenEnv's MCP JSON-RPC (`studio.serving.jsonrpc`)
    WS   {base}/ws      messages {"type": "reset"|"step"|"state"|"close", "data": {...}},
                        answers {"type": "observation"|"state"|"error", "data": {...}}

`base` is `/env/t/<token>/worlds/<world id>` (the token in the path: OpenEnv's WebSocket
client sends no headers) or `/env/worlds/<world id>` with `Authorization: Bearer <token>`.
A WebSocket connection is one episode at a time (reset starts a new one); over HTTP the
agent names the episode. Actions: free-form, a tool call, or openenv-core's `call_tool` /
`list_tools` (`studio.serving.openenv_actions`). Every step goes through
`studio.serving.steps.run_step`.

Errors, on every route: a JSON body `{"detail", "code"}` with the status of the
`EpisodeError` subclass (422 VALIDATION_ERROR / INVALID_JSON, 404 NOT_FOUND, 409 CONFLICT,
413 TOO_LARGE, 429 RATE_LIMITED and 503 UNAVAILABLE with Retry-After), 401 for a token that
is not a valid one; over the WebSocket `{"type": "error", "data": {"message", "code"}}`.

The WebSocket keeps reading while a step runs (a reader task), so pings and pongs flow and
a step of any length never drops the connection: a message that arrives meanwhile is
queued and answered in order after the step (answers stay paired with requests, as
OpenEnv's clients expect); past `WS_MAX_WAITING` waiting messages, one is refused at once
(RATE_LIMITED)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
from typing import Any

from django.db import DatabaseError
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Mount, Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from studio.services import episode_limits, episodes
from studio.services.episode_inputs import check_tool_call, clean_text
from studio.services.tokens import authenticate, still_active
from studio.serving import log_redaction, openenv_actions, openenv_schema, token_cache, tool_calls
from studio.serving.jsonrpc import endpoint as jsonrpc_endpoint  # OpenEnv's POST /mcp
from studio.serving.steps import answer_of, db, run_step

log = logging.getLogger(__name__)
log_redaction.install()  # no token from a URL path in uvicorn's log lines

# (the names this module's code and tests know them by)
_db, _run_step, _answer_of = db, run_step, answer_of

WS_MAX_WAITING = 16  # messages queued behind a running step, per connection


class Unauthorized(episodes.EpisodeError):
    """No valid API token (HTTP 401; a WebSocket is closed with 4401)."""

    status = 401
    code = "UNAUTHORIZED"


class InvalidJson(episodes.EpisodeInvalid):
    """A body or message that is not UTF-8 JSON (422, INVALID_JSON)."""

    code = "INVALID_JSON"


class UnknownType(episodes.EpisodeInvalid):
    code = "UNKNOWN_TYPE"


NO_TOKEN = "a valid API token of this world's project is required"
INTERNAL = "the studio failed to answer (an internal error, logged on the server)"


# ---- errors ---------------------------------------------------------------------------------


def _headers_of(exc: episodes.EpisodeError) -> dict[str, str]:
    if exc.retry_after is None:
        return {}
    return {"Retry-After": str(max(1, math.ceil(exc.retry_after)))}


def error_response(exc: episodes.EpisodeError) -> JSONResponse:
    return JSONResponse(
        {"detail": str(exc), "code": exc.code}, status_code=exc.status, headers=_headers_of(exc)
    )


def error_data(exc: episodes.EpisodeError) -> dict[str, Any]:
    data: dict[str, Any] = {"message": str(exc), "code": exc.code}
    if exc.retry_after is not None:
        data["retry_after"] = exc.retry_after
    return data


async def _http_exception(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, HTTPException)
    codes = {404: "NOT_FOUND", 405: "METHOD_NOT_ALLOWED"}
    detail = {
        404: f"no route {request.url.path} in the episode API",
        405: f"{request.method} is not allowed on {request.url.path}",
    }.get(exc.status_code, str(exc.detail))
    return JSONResponse(
        {"detail": detail, "code": codes.get(exc.status_code, "HTTP_ERROR")},
        status_code=exc.status_code,
        headers=exc.headers,
    )


async def _server_error(request: Request, exc: Exception) -> JSONResponse:
    # Starlette raises it again after this answer: uvicorn logs it, its token redacted
    return JSONResponse(
        {"detail": INTERNAL, "code": "INTERNAL"},
        status_code=500,
    )


# ---- auth and input -------------------------------------------------------------------------


def _token_of(scope_token: str | None, headers) -> str:
    if scope_token:
        return scope_token
    auth = headers.get("authorization", "")
    return auth[7:].strip() if auth.lower().startswith("bearer ") else ""


async def _token(conn, *, touch: bool = True):
    token = await _db(authenticate)(
        _token_of(conn.path_params.get("token"), conn.headers), touch=touch
    )
    if token is None:
        raise Unauthorized(NO_TOKEN)
    return token


async def _authorise(conn, *, touch: bool = True) -> tuple[Any, Any]:
    """The token and the world of the URL: Unauthorized (401) for a token that is not a
    valid one, EpisodeNotFound (404) for a world that is not one of its project's."""
    token = await _token(conn, touch=touch)
    return token, await _world(token, int(conn.path_params["world_id"]))


async def _world(token, world_id: int):
    world = await _db(episodes.world_of)(token, world_id)
    if world is None:
        raise episodes.EpisodeNotFound(f"world {world_id} is not a world of this token's project")
    return world


def decode_object(raw: bytes | str, where: str) -> dict[str, Any]:
    """A JSON object from the wire: InvalidJson when it is not UTF-8 JSON, EpisodeInvalid
    when its text cannot be stored (NUL, unpaired surrogates) or it is not an object."""
    if isinstance(raw, bytes):
        try:
            raw = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidJson(
                f"{where} is not UTF-8 (invalid byte at offset {exc.start})"
            ) from None
    if not raw.strip():
        return {}
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise InvalidJson(
            f"{where} is not JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})"
        ) from None
    except RecursionError:
        raise InvalidJson(f"{where}: the JSON is nested too deeply") from None
    if not isinstance(data, dict):
        raise episodes.EpisodeInvalid(f"{where} must be a JSON object, got {type(data).__name__}")
    return clean_text(data, where)


async def _body(request: Request) -> dict[str, Any]:
    """The request's JSON object, its size checked before it is read (Content-Length) and
    as it arrives (a chunked body)."""
    length = request.headers.get("content-length")
    if length is not None:
        if not length.strip().isdigit():
            raise episodes.EpisodeInvalid(f"Content-Length {length!r} is not a number")
        episode_limits.check_body(int(length))
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        episode_limits.check_body(size)
        chunks.append(chunk)
    return decode_object(b"".join(chunks), "the body")


def _payload(result: episodes.StepResult) -> dict[str, Any]:
    return {"observation": result.observation, "reward": result.reward, "done": result.done}


def _reset_kwargs(data: dict[str, Any]) -> dict[str, Any]:
    """OpenEnv's reset fields this world takes (others, e.g. episode_id, are ignored)."""
    return {k: data[k] for k in ("task", "task_id", "seed", "max_steps") if data.get(k) is not None}


def _routed(handler):
    """An HTTP handler whose EpisodeErrors become their JSON answers."""

    async def answer(request: Request) -> JSONResponse:
        try:
            return await handler(request)
        except episodes.EpisodeError as exc:
            return error_response(exc)

    answer.__name__ = handler.__name__
    return answer


# ---- steps, shared by HTTP and the WebSocket ----------------------------------------------


async def _step(token, episode_id: Any, action: Any, world_id: int, *, check_token: bool):
    # run_step refuses an episode of another world than the URL's (EpisodeNotFound)
    return await _run_step(token, episode_id, action, world_id=world_id, check_token=check_token)


def _episode_in_world(token, episode_id: Any, world_id: int):
    trajectory = episodes.episode_of(token, episode_id)
    world = (trajectory.metadata or {}).get("world") or {}
    if world.get("id") != world_id:
        raise episodes.EpisodeNotFound(
            f"episode {trajectory.pk} is not an episode of world {world_id}: it plays in "
            f"world {world.get('id')}"
        )
    return trajectory


def _state(token, episode_id: Any, world_id: int) -> dict[str, Any]:
    """The episode's state as OpenEnv's State (the contract's keys), read afresh: its
    status, end and return change as it is played."""
    trajectory = _episode_in_world(token, episode_id, world_id)
    found = episodes.state(trajectory)
    episode = (trajectory.metadata or {}).get("episode") or {}
    for key in ("task_id", "seed", "max_steps", "status", "end", "return"):
        found.setdefault(key, episode.get(key))
    found.setdefault("done", found.get("status") in ("done", "cancelled"))
    return found


# (world id, version number) -> its tools, as the MCP servers list them (a version never
# changes): the world's tools and its declared submit tool
_TOOLS: dict[tuple[int, int], list[dict[str, Any]]] = {}


def _version_tools(world_id: int, number: int) -> list[dict[str, Any]]:
    from studio.models import WorldVersion

    key = (world_id, number)
    if key not in _TOOLS:
        version = WorldVersion.objects.filter(world_id=world_id, number=number).first()
        if version is None:
            raise episodes.EpisodeNotFound(
                f"version {number} of world {world_id}, which this episode plays in, was deleted"
            )
        if len(_TOOLS) > 1024:
            _TOOLS.clear()
        _TOOLS[key] = tool_calls.tools_of_version(version)
    return _TOOLS[key]


def _episode_tools(token, episode_id: Any, world_id: int):
    """The tools of the world version an episode plays in."""
    trajectory = _episode_in_world(token, episode_id, world_id)
    return _version_tools(world_id, trajectory.metadata["world"]["version"])


def _latest_tools(world) -> list[dict[str, Any]]:
    version = world.latest
    if version is None:
        raise episodes.EpisodeConflict(f"world {world.name!r} has no version yet")
    return _version_tools(world.pk, version.number)


async def _tool_call(token, episode_id: Any, action: Any, tools, world_id: int, *, check_token):
    """An openenv-core `call_tool`: checked against the tool's schema before any model sees
    it (a refused call is answered, not recorded), then one step."""
    name, arguments = openenv_actions.call_of(action)
    try:
        arguments = check_tool_call(tools, name, arguments)
    except episodes.EpisodeInvalid as exc:
        return openenv_actions.refused_call_payload(name, tools, exc)
    step_action = {"name": name, "arguments": arguments}
    result = await _step(token, episode_id, step_action, world_id, check_token=check_token)
    return openenv_actions.call_payload(name, result)


def _check_plain_call(action: Any, tools) -> None:
    """A tool call in any shape but OpenEnv's call_tool (`openenv_actions.is_tool_call`):
    refused (EpisodeInvalid, 422 / a WebSocket error, naming the tool and the argument)
    unless it calls one of the episode's tools as its schema says, before any model sees it
    or anything is written; a valid one is a step as it was sent."""
    name, arguments = openenv_actions.plain_call_of(action)
    check_tool_call(tools, name, arguments)


# ---- HTTP -----------------------------------------------------------------------------------


async def health(request: Request) -> JSONResponse:
    """The bare /env/health: the process is up (a liveness probe)."""
    return JSONResponse({"status": "healthy"})


@_routed
async def world_health(request: Request) -> JSONResponse:
    """{base}/health: this world answers for this token (401, 404 otherwise)."""
    try:
        await _authorise(request, touch=False)
    except DatabaseError as exc:
        raise episodes.EpisodeUnavailable(f"the database does not answer: {exc}") from None
    return JSONResponse({"status": "healthy"})


@_routed
async def reset(request: Request) -> JSONResponse:
    token, world = await _authorise(request)
    data = await _body(request)
    _, result = await _db(episodes.reset)(token, world, **_reset_kwargs(data), client="http")
    return JSONResponse(_payload(result))


@_routed
async def step(request: Request) -> JSONResponse:
    # trusted for a second (token_cache): a step's write checks the token itself, so a
    # revoked one records nothing even then, and the hot path makes no query for it
    text = _token_of(request.path_params.get("token"), request.headers)
    token = await token_cache.authenticate(text)
    if token is None:
        raise Unauthorized(NO_TOKEN)
    data = await _body(request)
    world_id = int(request.path_params["world_id"])
    episode_id, action = data.get("episode_id"), openenv_actions.unwrapped(data.get("action"))
    kind = openenv_actions.kind_of(action)
    if kind == openenv_actions.LIST_TOOLS:  # answered, never a step
        if episode_id not in (None, ""):
            tools = await _db(_episode_tools)(token, episode_id, world_id)
        else:
            tools = await _db(_latest_tools)(await _world(token, world_id))
        return JSONResponse(openenv_actions.list_tools_payload(tools))
    if kind == openenv_actions.CALL_TOOL:
        tools = await _db(_episode_tools)(token, episode_id, world_id)
        answer = await _tool_call(token, episode_id, action, tools, world_id, check_token=False)
        return JSONResponse(answer)
    if kind == openenv_actions.TOOL_CALL:
        _check_plain_call(action, await _db(_episode_tools)(token, episode_id, world_id))
    result = await _step(token, episode_id, action, world_id, check_token=False)
    return JSONResponse(_payload(result))


@_routed
async def state(request: Request) -> JSONResponse:
    token, world = await _authorise(request, touch=False)  # a read: nothing is written
    episode_id = request.query_params.get("episode_id")
    return JSONResponse(await _db(_state)(token, episode_id, world.pk))


async def _described(request: Request):
    _, world = await _authorise(request, touch=False)

    def read():
        version = world.latest
        if version is None:
            raise episodes.EpisodeConflict(f"world {world.name!r} has no version yet")
        return version.number, version.spec(), tool_calls.tools_of_version(version)

    number, spec, tools = await _db(read)()
    return world, number, spec, tools


@_routed
async def metadata(request: Request) -> JSONResponse:
    world, number, spec, tools = await _described(request)
    return JSONResponse(openenv_schema.metadata(world, number, spec, tools))


@_routed
async def schema(request: Request) -> JSONResponse:
    _, _, spec, tools = await _described(request)
    return JSONResponse(openenv_schema.schema(spec, tools))


@_routed
async def openapi(request: Request) -> JSONResponse:
    world, number, spec, tools = await _described(request)
    base = request.url.path.removesuffix("/openapi.json")
    return JSONResponse(openenv_schema.openapi(world, number, spec, tools, base))


# ---- WebSocket ------------------------------------------------------------------------------


class _TooLarge:
    """A frame over the body limit, kept as its size only."""

    def __init__(self, size: int):
        self.size = size


_CLOSED = object()  # the client went away


class _Connection:
    """One WebSocket: a reader task that never stops receiving (so the protocol layer
    answers pings while a step runs) and this loop answering messages in order."""

    def __init__(self, websocket: WebSocket, token, world):
        self.websocket, self.token, self.world = websocket, token, world
        self.trajectory = None
        self.tools: Any = None  # the episode's tools (OpenAI form)
        self.inbox: asyncio.Queue = asyncio.Queue()
        self.sending = asyncio.Lock()

    async def send(self, kind: str, data: dict) -> None:
        async with self.sending:
            await self.websocket.send_text(json.dumps({"type": kind, "data": data}))

    async def read(self) -> None:
        try:
            while True:
                message = await self.websocket.receive()
                if message["type"] == "websocket.disconnect":
                    break
                raw = message.get("text")
                if raw is None:
                    raw = message.get("bytes") or b""
                size = len(raw) if isinstance(raw, bytes) else len(raw.encode("utf-8"))
                try:
                    episode_limits.check_body(size)
                except episodes.EpisodeTooLarge:
                    raw = _TooLarge(size)  # not kept while it waits
                if self.inbox.qsize() >= WS_MAX_WAITING:
                    await self.send(
                        "error",
                        error_data(
                            episodes.EpisodeBusy(
                                f"{WS_MAX_WAITING} messages are already waiting for the "
                                "running step on this connection: this one was dropped",
                                retry_after=1,
                            )
                        ),
                    )
                    continue
                self.inbox.put_nowait(raw)
        except (WebSocketDisconnect, RuntimeError):
            pass
        finally:
            self.inbox.put_nowait(_CLOSED)

    async def run(self) -> None:
        reader = asyncio.create_task(self.read())
        try:
            while True:
                raw = await self.inbox.get()
                if raw is _CLOSED:
                    return
                try:
                    answer = await self.answer(raw)
                except episodes.TokenRevoked:
                    await self.websocket.close(code=4401, reason="the API token was revoked")
                    return
                except episodes.EpisodeError as exc:
                    answer = ("error", error_data(exc))
                except Exception:  # a fault of the studio's: said, logged, the connection kept
                    log.exception("episode WebSocket: a message failed")
                    answer = ("error", {"message": INTERNAL, "code": "EXECUTION_ERROR"})
                if answer is None:  # close
                    return
                await self.send(*answer)
        except (WebSocketDisconnect, RuntimeError):
            pass  # the client went away while its answer was on the way
        finally:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await reader
            with contextlib.suppress(RuntimeError, Exception):
                await self.websocket.close()

    async def answer(self, raw) -> tuple[str, dict] | None:
        if isinstance(raw, _TooLarge):
            episode_limits.check_body(raw.size)  # raises EpisodeTooLarge naming the setting
        message = decode_object(raw, "the message")
        kind = message.get("type")
        data = message.get("data")
        data = {} if data is None else data
        if not isinstance(data, dict):
            raise episodes.EpisodeInvalid("a message's data must be a JSON object")
        if kind == "step":
            return "observation", await self.step(data)
        # a message that acts counts as a use; every message stops at a revoked token
        if not await _db(still_active)(self.token, touch=kind == "reset"):
            raise episodes.TokenRevoked
        if kind == "reset":
            self.trajectory, result = await _db(episodes.reset)(
                self.token, self.world, **_reset_kwargs(data), client="websocket"
            )
            self.tools = None  # the new episode's, read at its first tool call
            return "observation", _payload(result)
        if kind == "state":
            if self.trajectory is None:
                raise episodes.EpisodeConflict("reset first: no episode on this connection")
            return "state", await _db(_state)(self.token, self.trajectory.pk, self.world.pk)
        if kind == "close":
            return None
        raise UnknownType(
            f"unknown message type {kind!r}: this world takes reset, step, state and close"
        )

    async def step(self, action: dict) -> dict[str, Any]:
        action = openenv_actions.unwrapped(action)
        kind = openenv_actions.kind_of(action)
        if kind == openenv_actions.LIST_TOOLS:  # answered, never a step
            if not await _db(still_active)(self.token):
                raise episodes.TokenRevoked
            return openenv_actions.list_tools_payload(await self.episode_tools())
        if self.trajectory is None:
            if not await _db(still_active)(self.token):
                raise episodes.TokenRevoked
            raise episodes.EpisodeConflict("reset first: no episode on this connection")
        if kind == openenv_actions.CALL_TOOL:
            return await _tool_call(
                self.token, self.trajectory.pk, action, await self.episode_tools(),
                self.world.pk, check_token=True,
            )  # fmt: skip
        if kind == openenv_actions.TOOL_CALL:
            _check_plain_call(action, await self.episode_tools())
        result = await _step(
            self.token, self.trajectory.pk, action, self.world.pk, check_token=True
        )
        return _payload(result)

    async def episode_tools(self):
        if self.tools is None:
            if self.trajectory is not None:
                self.tools = await _db(_episode_tools)(
                    self.token, self.trajectory.pk, self.world.pk
                )
            else:
                return await _db(_latest_tools)(self.world)
        return self.tools


async def ws(websocket: WebSocket) -> None:
    try:
        token, world = await _authorise(websocket, touch=False)
    except Unauthorized:
        await websocket.close(code=4401, reason="a valid API token is required")
        return
    except episodes.EpisodeNotFound as exc:
        await websocket.close(code=4404, reason=str(exc)[:120])
        return
    await websocket.accept()
    await _Connection(websocket, token, world).run()


# ---- routes ---------------------------------------------------------------------------------


def _routes(prefix: str) -> list:
    return [
        Route(f"{prefix}/health", world_health, methods=["GET"]),
        Route(f"{prefix}/reset", reset, methods=["POST"]),
        Route(f"{prefix}/step", step, methods=["POST"]),
        Route(f"{prefix}/state", state, methods=["GET"]),
        Route(f"{prefix}/metadata", metadata, methods=["GET"]),
        Route(f"{prefix}/schema", schema, methods=["GET"]),
        Route(f"{prefix}/openapi.json", openapi, methods=["GET"]),
        Route(f"{prefix}/mcp", jsonrpc_endpoint, methods=["POST"]),
        WebSocketRoute(f"{prefix}/ws", ws),
    ]


@contextlib.asynccontextmanager
async def lifespan(app):
    from studio.serving import mcp

    async with mcp.running():  # the MCP SDK's session manager lives with the server
        yield


def _mcp_routes() -> list:
    from studio.serving import mcp

    return [Mount("/mcp/t/{token}/worlds/{world_id:int}", app=mcp.asgi_app)]


app = Starlette(
    routes=[
        Route("/env/health", health, methods=["GET"]),
        *_routes("/env/t/{token}/worlds/{world_id:int}"),
        *_routes("/env/worlds/{world_id:int}"),
        *_mcp_routes(),
    ],
    exception_handlers={HTTPException: _http_exception, Exception: _server_error},
    lifespan=lifespan,
)
