"""The episode API, in OpenEnv's convention, as an ASGI app (Starlette) beside Django:

    GET  {base}/health                    {"status": "healthy"}
    POST {base}/reset   {"task"?, "max_steps"?}          -> {"observation", "reward", "done"}
    POST {base}/step    {"action": {...}, "episode_id"}  -> {"observation", "reward", "done"}
    GET  {base}/state?episode_id=ID                      -> {"episode_id", "step_count", ...}
    WS   {base}/ws      messages {"type": "reset"|"step"|"state"|"close", "data": {...}},
                        answers {"type": "observation"|"state"|"error", "data": {...}}

`base` is `/env/t/<token>/worlds/<world id>` (the token in the path: OpenEnv's WebSocket
client sends no headers) or `/env/worlds/<world id>` with `Authorization: Bearer <token>`.
A WebSocket connection is one episode at a time (reset starts a new one); over HTTP the
agent names the episode. The model runs in workers: each step is a job, and this app waits
for its row (no model, no torch in the web process)."""

from __future__ import annotations

import contextlib
import json
import logging
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Mount, Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from studio.models import SimulationJob
from studio.services import episodes
from studio.services.tokens import authenticate, still_active
from studio.serving.steps import answer_of, db, run_step

log = logging.getLogger(__name__)

# (the names this module's code and tests know them by)
_db, _run_step, _answer_of = db, run_step, answer_of


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"detail": message}, status_code=status)


def _token_of(scope_token: str | None, headers) -> str:
    if scope_token:
        return scope_token
    auth = headers.get("authorization", "")
    return auth[7:].strip() if auth.lower().startswith("bearer ") else ""


async def _authorise(request_or_ws, *, touch: bool = True) -> tuple[Any, Any] | None:
    text = _token_of(request_or_ws.path_params.get("token"), request_or_ws.headers)
    token = await _db(authenticate)(text, touch=touch)
    if token is None:
        return None
    world = await _db(episodes.world_of)(token, int(request_or_ws.path_params["world_id"]))
    if world is None:
        return None
    return token, world


def _payload(result: episodes.StepResult) -> dict[str, Any]:
    return {"observation": result.observation, "reward": result.reward, "done": result.done}


async def _json_body(request: Request) -> dict:
    raw = await request.body()
    if not raw:
        return {}
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise episodes.EpisodeError(f"the body is not JSON: {exc.msg}") from None
    except UnicodeDecodeError:
        raise episodes.EpisodeError("the body is not UTF-8 JSON") from None
    except RecursionError:
        raise episodes.EpisodeError("the body's JSON is nested too deeply") from None
    if not isinstance(data, dict):
        raise episodes.EpisodeError("the body must be a JSON object")
    return data


async def health(request: Request) -> JSONResponse:
    return JSONResponse({"status": "healthy"})


async def reset(request: Request) -> JSONResponse:
    auth = await _authorise(request)
    if auth is None:
        return _error(401, "a valid API token of this world's project is required")
    token, world = auth
    try:
        data = await _json_body(request)
        _, result = await _db(episodes.reset)(
            token, world, task=data.get("task", ""), max_steps=data.get("max_steps"),
            client="http",
        )  # fmt: skip
    except episodes.EpisodeError as exc:
        return _error(400, str(exc))
    return JSONResponse(_payload(result))


async def step(request: Request) -> JSONResponse:
    try:
        data = await _json_body(request)
    except episodes.EpisodeError as exc:
        if await _authorise(request, touch=False) is None:
            return _error(401, "a valid API token of this world's project is required")
        return _error(400, str(exc))
    text = _token_of(request.path_params.get("token"), request.headers)
    world_id = int(request.path_params["world_id"])

    def start() -> SimulationJob | None:
        from studio.tasks import enqueue_episode_step

        token = authenticate(text)
        if token is None or episodes.world_of(token, world_id) is None:
            return None
        job = episodes.start_step(token, data.get("episode_id"), data.get("action"))
        enqueue_episode_step(job)  # the row is committed: its message goes now
        return job

    try:
        job = await _db(start)()
        if job is None:
            return _error(401, "a valid API token of this world's project is required")
        result = await _answer_of(job)
    except episodes.EpisodeError as exc:
        # 429 for a limit that passes (episodes.EpisodeBusy): the agent sends it again later
        return _error(getattr(exc, "status", 400), str(exc))
    return JSONResponse(_payload(result))


async def state(request: Request) -> JSONResponse:
    auth = await _authorise(request, touch=False)  # a read: nothing is written
    if auth is None:
        return _error(401, "a valid API token of this world's project is required")
    token, _ = auth
    try:
        trajectory = await _db(episodes.episode_of)(token, request.query_params.get("episode_id"))
    except episodes.EpisodeError as exc:
        return _error(400, str(exc))
    return JSONResponse(await _db(episodes.state)(trajectory))


async def ws(websocket: WebSocket) -> None:
    auth = await _authorise(websocket, touch=False)
    if auth is None:
        await websocket.close(code=4401, reason="a valid API token is required")
        return
    await websocket.accept()
    token, world = auth
    trajectory = None

    async def send(kind: str, data: dict) -> None:
        await websocket.send_text(json.dumps({"type": kind, "data": data}))

    async def revoked() -> None:
        await websocket.close(code=4401, reason="the API token was revoked")

    try:
        while True:
            raw = await websocket.receive_text()
            try:
                message = json.loads(raw)
                kind = message.get("type") if isinstance(message, dict) else None
                data = (message.get("data") or {}) if isinstance(message, dict) else {}
                if kind == "step":
                    # the token's check rides with the step's own trip to the database
                    if not isinstance(data, dict):
                        raise episodes.EpisodeError("a message's data must be a JSON object")
                    if trajectory is None:
                        if not await _db(still_active)(token):
                            return await revoked()
                        raise episodes.EpisodeError("reset first: no episode on this connection")
                    try:
                        result = await _run_step(token, trajectory.pk, data, check_token=True)
                    except episodes.TokenRevoked:
                        return await revoked()
                    await send("observation", _payload(result))
                    continue
                # a message that acts counts as a use; every message stops at a revoked token
                if not await _db(still_active)(token, touch=kind == "reset"):
                    return await revoked()
                if not isinstance(data, dict):
                    raise episodes.EpisodeError("a message's data must be a JSON object")
                if kind == "reset":
                    trajectory, result = await _db(episodes.reset)(
                        token, world, task=data.get("task", ""),
                        max_steps=data.get("max_steps"), client="websocket",
                    )  # fmt: skip
                    await send("observation", _payload(result))
                elif kind == "state":
                    if trajectory is None:
                        raise episodes.EpisodeError("reset first: no episode on this connection")
                    await send("state", await _db(episodes.state)(trajectory))
                elif kind == "close":
                    break
                else:
                    raise episodes.EpisodeError(f"unknown message type {kind!r}")
            except json.JSONDecodeError as exc:
                await send("error", {"message": f"Invalid JSON: {exc.msg}", "code": "INVALID_JSON"})
            except RecursionError:
                await send("error", {"message": "JSON nested too deeply", "code": "INVALID_JSON"})
            except episodes.EpisodeError as exc:
                await send("error", {"message": str(exc), "code": "EPISODE_ERROR"})
    except WebSocketDisconnect:
        pass
    finally:
        try:
            await websocket.close()
        except RuntimeError:
            pass  # already closed


def _routes(prefix: str) -> list:
    return [
        Route(f"{prefix}/health", health, methods=["GET"]),
        Route(f"{prefix}/reset", reset, methods=["POST"]),
        Route(f"{prefix}/step", step, methods=["POST"]),
        Route(f"{prefix}/state", state, methods=["GET"]),
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
    lifespan=lifespan,
)
