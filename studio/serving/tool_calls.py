"""A tool call of an MCP client as an episode's step, shared by the MCP SDK server
(`studio.serving.mcp`) and OpenEnv's plain JSON-RPC endpoint (`studio.serving.jsonrpc`).

The call is checked against the world's JSON Schemas before anything else: an unknown tool
or arguments that break the schema raise EpisodeInvalid, and then no episode is reset, no
model is asked and no step is written. Which episode a call belongs to:

1. the one the call names in its `_meta` ("agentworld/episode": id, sent back with every
   answer), else
2. its MCP session's (McpSession, in the database: any web worker finds it), reset at the
   session's first valid call, else
3. a new episode for this call alone (its id comes back in the answer's `_meta`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from studio.models import McpSession, Trajectory, WorldVersion
from studio.services import episodes, mcp_sessions
from studio.services.episode_inputs import check_tool_call
from studio.serving.steps import db, run_step

# `_meta` keys of the vendor extension (answers carry the episode back under the first)
EPISODE_META = "agentworld/episode"
# read at a call that starts an episode: which task, seed and step limit its reset takes
RESET_META = {
    "agentworld/task": "task",
    "agentworld/task_id": "task_id",
    "agentworld/seed": "seed",
    "agentworld/max_steps": "max_steps",
}


@dataclass
class ToolCallOutcome:
    episode_id: int
    result: episodes.StepResult
    started: bool  # this call reset a new episode
    task: str  # the episode's task, said at the call that started it


# world version id -> its tools as OpenAI tools (a version never changes)
_TOOLS: dict[int, list[dict[str, Any]]] = {}


def tools_of_version(version: WorldVersion) -> list[dict[str, Any]]:
    """The version's tools (OpenAI tools); a world's submit tool is one of them (the world
    file's check says so)."""
    found = _TOOLS.get(version.pk)
    if found is None:
        found = [dict(t) for t in version.spec().tools]
        if len(_TOOLS) > 1024:
            _TOOLS.clear()
        _TOOLS[version.pk] = found
    return found


def tools_of_version_id(version_id: int) -> list[dict[str, Any]] | None:
    found = _TOOLS.get(version_id)
    if found is not None:
        return found
    version = WorldVersion.objects.filter(pk=version_id).first()
    return tools_of_version(version) if version is not None else None


def latest_tools(world) -> list[dict[str, Any]]:
    version = world.latest
    if version is None:
        raise episodes.EpisodeError(f"world {world.name!r} has no version yet")
    return tools_of_version(version)


def mcp_tool(tool: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI tool as MCP lists it (`inputSchema`)."""
    function = tool["function"]
    return {
        "name": function["name"],
        "description": function.get("description") or "",
        "inputSchema": dict(function.get("parameters") or {"type": "object"}),
    }


def reset_options(meta: Any) -> dict[str, Any]:
    """What a call's `_meta` asks of the reset it may start (task, task id, seed, steps)."""
    if not isinstance(meta, dict):
        return {}
    return {arg: meta[key] for key, arg in RESET_META.items() if meta.get(key) is not None}


def _prepare(
    token, world, name: Any, arguments: Any, session: McpSession | None, hint: str
) -> tuple[int | None, dict[str, Any]]:
    """(the episode the call continues, or None for a new one; the checked arguments)."""
    trajectory = None
    if hint:
        trajectory = episodes.episode_of(token, hint)
    elif session is not None and session.trajectory_id is not None:
        # as read with this request (a session without one binds its first, race-safe)
        trajectory = episodes.episode_of(token, session.trajectory_id)
    if trajectory is None:
        episode_id, tools = None, latest_tools(world)
    else:  # checked against the tools of the version the episode plays in
        episode_id = trajectory.pk
        found = episodes.world_version_of(trajectory)
        played = tools_of_version_id(found[0]) if found else None
        # its version deleted: the step says so; the check uses the latest version's tools
        tools = played if played is not None else latest_tools(world)
    return episode_id, check_tool_call(tools, name, arguments)


def _start(token, world, session: McpSession | None, client: str, options: dict[str, Any]):
    trajectory, _ = episodes.reset(token, world, client=client, **options)
    episode_id = trajectory.pk
    if session is not None:
        episode_id = mcp_sessions.bind_episode(session, trajectory)
    return episode_id, trajectory.task_instruction


async def call(
    token,
    world,
    name: Any,
    arguments: Any,
    *,
    client: str,
    session: McpSession | None = None,
    hint: str = "",
    options: dict[str, Any] | None = None,
) -> ToolCallOutcome:
    """One tool call as one step. Raises EpisodeError subclasses (and TokenRevoked)."""
    episode_id, arguments = await db(_prepare)(token, world, name, arguments, session, hint)
    started, task = False, ""
    if episode_id is None:
        episode_id, task = await db(_start)(token, world, session, client, options or {})
        started = True
    action = {"name": name, "arguments": arguments}
    try:
        result = await run_step(token, episode_id, action, world_id=world.pk, check_token=True)
    except episodes.EpisodeConflict as exc:
        status = await db(_status_of)(episode_id) if session is not None and not hint else None
        if status in ("done", "cancelled"):  # one episode per session: say how to go on
            raise episodes.EpisodeConflict(
                f"{exc} (this session's episode is {status}: open a new session for a new episode)"
            ) from None
        raise
    return ToolCallOutcome(episode_id=episode_id, result=result, started=started, task=task)


def _status_of(episode_id: int) -> str | None:
    metadata = Trajectory.objects.filter(pk=episode_id).values_list("metadata", flat=True).first()
    return ((metadata or {}).get("episode") or {}).get("status")


def answer_meta(outcome: ToolCallOutcome) -> dict[str, Any]:
    """The `_meta` an answer carries: the episode to name in the next call, the step's
    reward and whether the episode is done (and its task, at the call that started it)."""
    observation = outcome.result.observation
    meta: dict[str, Any] = {
        EPISODE_META: str(outcome.episode_id),
        "agentworld/step": observation.get("step"),
        "agentworld/reward": outcome.result.reward,
        "agentworld/done": outcome.result.done,
    }
    if isinstance(observation.get("metadata"), dict):
        meta["agentworld/metadata"] = observation["metadata"]
    if outcome.started:
        meta["agentworld/task"] = outcome.task
    return meta
