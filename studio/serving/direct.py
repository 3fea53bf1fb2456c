"""A step of an episode whose world model is served (an OpenAI-compatible server), answered in
the web process itself: no job row, no Celery hop, no worker thread. The model is I/O, so the
event loop waits on many models at once; what a step costs is its few trips
(`studio.serving.episode_rows`, on the event loop with PostgreSQL):

1. where the episode stands: one round trip to Redis counts the token's rate and reads the
   step count the episode's last writer noted; when it is the count this process left the
   episode at (and the token was seen active within TOKEN_TTL_S), no database read is
   needed, else one query reads the step count, the status and the token;
2. the model's answer, over kept-alive HTTP/1.1 connections (`studio.serving.model_http`,
   bounded by STUDIO_EPISODE_STEP_TIMEOUT_S; a server down is a retryable 503 and nothing
   is written);
3. the write: on PostgreSQL ONE statement (a CTE that advances the trajectory's step count
   where it still equals the step's index, the episode is running and the token is active,
   and inserts the step), on SQLite a short transaction. A step another process took
   meanwhile loses: EpisodeConflict, nothing duplicated. At the episode's end its end is
   scored and written (`rewards.finish`).

The messages are the runner's (`inference.prompts`: the world's composed system prompt, the
history as turn pairs, the turn asked for), the answer is parsed as the runner parses it
(`inference.parsing`), and the step row carries the labels the job path writes
(`studio.jobs.world_model.step_row`): an agent's action, a simulated observation. Rewards and
ends are the world's (`studio.services.rewards`). What never changes in an episode (its
world's prompt, tools, task, plan, the world model's endpoint) is read once per process and
kept for STATIC_TTL_S; the history's messages are kept by (episode, step count) and read
again when another process took a step."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import orjson
from django.conf import settings

from inference.parsing import parse_prediction
from inference.prompts import current_message, history_messages, turn_pair
from inference.simulation.sink import NO_OBSERVATION, SIMULATED_OBSERVATION
from inference.types import Turn
from studio.services import episodes
from studio.services.episodes import (
    EpisodeConflict,
    EpisodeError,
    EpisodeInvalid,
    EpisodeNotFound,
    EpisodeUnavailable,
    StepResult,
)
from studio.serving import episode_rows as rows

log = logging.getLogger(__name__)

# What never changes in an episode is read again after this long: an endpoint's edit (its
# model, URL or key) or a deleted world takes effect within it.
STATIC_TTL_S = 30.0
STATIC_MAX = 4096  # episodes whose static part a process keeps
HISTORY_MAX_CHARS = 64_000_000  # the histories' text a process keeps, all episodes together
MODEL_RETRY_PAUSE_S = 0.5  # a 429 or 5xx from the model server is asked once more after this


class ModelRefused(EpisodeError):
    """The world model's server answered, but not with an answer (a 4xx other than 429, or
    a body that is no chat completion): the studio's model is misconfigured, not the agent's
    request; the same request will not do better. Nothing of the step was recorded."""

    status = 502
    code = "MODEL_ERROR"


@dataclass(frozen=True)
class JobPath:
    """An episode whose world model runs in a worker's process (or that lacks one, which the
    job path says): its steps go the job path (`studio.serving.steps`)."""

    project_id: int
    world_id: int | None


# ---- the episode's static part --------------------------------------------------------------


@dataclass
class Served:
    """What a step needs of its episode that does not change while it is played."""

    trajectory_id: int
    project_id: int
    branch_id: int
    world: dict[str, Any] | None  # its label {"id", "name", "version"}
    domain: str
    task: str
    system_prompt: str
    tools: tuple[dict[str, Any], ...]
    max_steps: int
    seed: int | None
    plan: Any  # rewards.plan_of(...)
    endpoint_name: str
    model: str
    base_url: str
    api_key: str
    temperature: float
    top_p: float | None
    max_tokens: int


_static: OrderedDict[int, Served | JobPath] = OrderedDict()
_static_at: dict[int, float] = {}


def _remember(pk: int, entry: Served | JobPath) -> None:
    _static[pk] = entry
    _static_at[pk] = time.monotonic()
    _static.move_to_end(pk)
    while len(_static) > STATIC_MAX:
        old, _ = _static.popitem(last=False)
        _static_at.pop(old, None)
        _history.pop(old, None)


def forget(pk: int | None = None) -> None:
    """Drop what this process keeps of episode `pk` (all episodes when None)."""
    if pk is None:
        _static.clear()
        _static_at.clear()
        _history.clear()
        _worlds.clear()
        _world_models.clear()
        _known.clear()
        return
    _static.pop(pk, None)
    _static_at.pop(pk, None)
    _history.pop(pk, None)
    _known.pop(pk, None)


def _cached(pk: int) -> Served | JobPath | None:
    at = _static_at.get(pk)
    if at is None or time.monotonic() - at > STATIC_TTL_S:
        return None
    return _static.get(pk)


@dataclass(frozen=True)
class WorldModel:
    """A project's world model as a served step calls it (the endpoint, as the job path picks
    it: the default, never the baseline for an episode in a world)."""

    name: str
    model: str
    base_url: str
    api_key: str
    temperature: float
    top_p: float | None
    max_tokens: int


# project -> (when read, its world model, or None: the job path's), kept STATIC_TTL_S
_world_models: dict[int, tuple[float, WorldModel | None]] = {}
# (world id, version number) -> (when checked, its spec, its composed system prompt): a
# version never changes, and its episodes share one copy of the prompt; that it still
# exists is checked again after STATIC_TTL_S
_worlds: dict[tuple[Any, Any], tuple[float, Any, str]] = {}
WORLDS_MAX = 256


def _world_model_of(project_id: int, domain: str) -> WorldModel | None:
    from inference.simulation.request import Defaults, ForkFacts, InvalidRequest, SimulationRequest
    from studio.models import EndpointRole, ModelEndpoint
    from studio.services.endpoints import EndpointError, api_key_of, sampling_defaults, world_input

    found = _world_models.get(project_id)
    if found is not None and time.monotonic() - found[0] < STATIC_TTL_S:
        return found[1]
    # an episode plays in its world: never answered by the baseline, which reads no world's
    # prompt (the job path says the same)
    endpoint = (
        ModelEndpoint.objects.filter(project_id=project_id, role=EndpointRole.WORLD)
        .exclude(kind="retrieval")
        .order_by("-is_default", "name")
        .first()
    )
    chosen = None
    if endpoint is not None and endpoint.kind == "openai":
        try:
            request = SimulationRequest.build(
                {"fork_index": 0, "action": "look", "mode": "next", "n": 1,
                 **sampling_defaults(endpoint), **world_input(endpoint)},
                fork=ForkFacts(step_count=0, recorded_action=None, domain=domain),
                defaults=Defaults(),
            )  # fmt: skip
        except InvalidRequest as exc:
            raise EpisodeError(exc.summary()) from None
        try:
            api_key = api_key_of(endpoint)
        except EndpointError as exc:
            raise ModelRefused(str(exc)) from None
        chosen = WorldModel(
            name=endpoint.name,
            model=request.world_model.model,
            base_url=request.world_model.base_url.rstrip("/"),
            api_key=api_key or "EMPTY",
            temperature=request.sampling.temperature,
            top_p=request.sampling.top_p,
            max_tokens=request.sampling.max_tokens,
        )
    if len(_world_models) > 10_000:
        _world_models.clear()
    _world_models[project_id] = (time.monotonic(), chosen)
    return chosen


def _world_of(world: dict[str, Any]) -> tuple[Any, str]:
    from inference.worlds import compose
    from studio.models import WorldVersion

    key: tuple[Any, Any] = (world.get("id"), world.get("version"))
    versions = WorldVersion.objects.filter(world_id=key[0], number=key[1])
    found = _worlds.get(key)
    now = time.monotonic()
    if found is not None and (now - found[0] < STATIC_TTL_S or versions.exists()):
        if now - found[0] >= STATIC_TTL_S:
            _worlds[key] = (now, found[1], found[2])
        return found[1], found[2]
    version = versions.only("data").first()
    if version is None:
        _worlds.pop(key, None)
        raise EpisodeConflict(
            f"version {world.get('version')} of world {world.get('name')!r}, which this episode "
            "plays in, was deleted: reset to start an episode in a world that exists"
        )
    spec = version.spec()
    prompt = compose(spec).system_prompt
    if len(_worlds) >= WORLDS_MAX:
        _worlds.pop(next(iter(_worlds)))
    _worlds[key] = (now, spec, prompt)
    return spec, prompt


def _episode_parts(pk: int, world_id: int | None, row: tuple | None):
    """The parts of episode `pk`'s row (project, domain, task, metadata, step count, ...):
    EpisodeNotFound for none (another project's) or one of another world than `world_id`."""
    if row is None:
        raise EpisodeNotFound(f"episode_id {pk!r} is not an episode of this project")
    project_id, domain, task, metadata = row[:4]
    metadata = metadata or {}
    episode = metadata.get("episode") or {}
    world = metadata.get("world") if isinstance(metadata.get("world"), dict) else None
    if world_id is not None and (world is None or world.get("id") != world_id):
        raise EpisodeNotFound(
            f"episode {pk} is not an episode of world {world_id}: it plays in "
            + (f"world {world.get('id')} ({world.get('name')!r})" if world else "no world")
        )
    return project_id, domain, task or "", episode, world


def _served(pk, project_id, domain, task, episode, world, chosen, spec, prompt, branch_id):
    from studio.services import rewards

    plan = rewards.plan_of(spec, episode, instruction=task)
    return Served(
        trajectory_id=pk,
        project_id=project_id,
        branch_id=branch_id,
        world={"id": world.get("id"), "name": world.get("name"), "version": world.get("version")},
        domain=domain,
        task=task,
        system_prompt=prompt,
        tools=tuple(spec.tools),
        max_steps=plan.max_steps,
        seed=episode.get("seed") if isinstance(episode.get("seed"), int) else None,
        plan=plan,
        endpoint_name=chosen.name,
        model=chosen.model,
        base_url=chosen.base_url,
        api_key=chosen.api_key,
        temperature=chosen.temperature,
        top_p=chosen.top_p,
        max_tokens=chosen.max_tokens,
    )


def _history_of(served: Served, step_count: int, rows_: list[tuple]) -> History:
    turns = [
        Turn(action=a, observation=o, state=st, raw_prompt=rp, raw_response=rr or "")
        for a, o, st, rp, rr in rows_
    ]
    messages = history_messages(served.system_prompt, turns, served.task)
    return History(
        step_count,
        messages,
        sum(len(m["content"]) for m in messages),
        sum(1 for m in messages if m["role"] == "user"),
    )


def load_cold(token, pk: int, world_id: int | None):
    """An episode this process has not seen (or not lately), in one database thread trip
    (SQLite; `load_cold_async` on PostgreSQL): its static part (JobPath when its world model
    runs in a worker), where it stands, and its history up to there."""
    from studio.models import ApiToken, Trajectory

    row = (
        Trajectory.objects.filter(pk=pk, project_id=token.project_id, source_format="episode")
        .values_list("project_id", "domain", "task_instruction", "metadata", "step_count")
        .first()
    )
    project_id, domain, task, episode, world = _episode_parts(pk, world_id, row)
    chosen = _world_model_of(project_id, domain) if world is not None else None
    if chosen is None or world is None:
        # the job path says what is missing, or runs the in-process model
        return JobPath(project_id, world.get("id") if world is not None else None), None, None
    spec, prompt = _world_of(world)
    branch_id = int(episode.get("branch") or _root_branch(pk))
    served = _served(pk, project_id, domain, task, episode, world, chosen, spec, prompt, branch_id)
    assert row is not None
    standing = rows.Standing(
        step_count=int(row[4]),
        status=str(episode.get("status") or "running"),
        token_active=ApiToken.objects.filter(pk=token.pk, revoked_at__isnull=True).exists(),
    )
    history = None
    if standing.status == "running" and standing.token_active:
        history = load_history(served, standing.step_count)
    return served, standing, history


async def load_cold_async(token, pk: int, world_id: int | None):
    """`load_cold` on the event loop (PostgreSQL): two queries at most (the episode with
    the token, its history when it has steps), what a project's world model and a world
    version are read in a database thread only when this process has not read them lately
    (a burst of new episodes would otherwise queue behind each other for the threads and
    the interpreter lock)."""
    row = await rows.episode_row(token.pk, token.project_id, pk)
    project_id, domain, task, episode, world = _episode_parts(pk, world_id, row)
    if world is None:
        return JobPath(project_id, None), None, None
    found = _world_models.get(project_id)
    if found is not None and time.monotonic() - found[0] < STATIC_TTL_S:
        chosen = found[1]
    else:
        chosen = await rows.in_db(_world_model_of, project_id, domain)
    if chosen is None:
        return JobPath(project_id, world.get("id")), None, None
    cached = _worlds.get((world.get("id"), world.get("version")))
    if cached is not None and time.monotonic() - cached[0] < STATIC_TTL_S:
        spec, prompt = cached[1], cached[2]
    else:
        spec, prompt = await rows.in_db(_world_of, world)
    branch_id = episode.get("branch") or await rows.in_db(_root_branch, pk)
    served = _served(
        pk, project_id, domain, task, episode, world, chosen, spec, prompt, int(branch_id)
    )
    assert row is not None
    standing = rows.Standing(
        step_count=int(row[4]),
        status=str(episode.get("status") or "running"),
        token_active=bool(row[5]),
    )
    history = None
    if standing.status == "running" and standing.token_active:
        found_rows = (
            await rows.history_rows(served.branch_id, standing.step_count)
            if standing.step_count
            else []
        )
        history = _history_of(served, standing.step_count, found_rows)
    return served, standing, history


def _root_branch(pk: int) -> int:
    from studio.models import Branch

    return Branch.objects.filter(trajectory_id=pk, parent__isnull=True).values_list(
        "pk", flat=True
    )[0]


# ---- the history's messages -----------------------------------------------------------------


@dataclass
class History:
    step_count: int
    messages: list[dict[str, str]]
    chars: int
    turns: int  # the user messages among them (earlier turns)


_history: OrderedDict[int, History] = OrderedDict()
_history_chars = [0]


def _keep_history(pk: int, history: History) -> None:
    old = _history.pop(pk, None)
    if old is not None:
        _history_chars[0] -= old.chars
    _history[pk] = history
    _history_chars[0] += history.chars
    while _history_chars[0] > HISTORY_MAX_CHARS and len(_history) > 1:
        _, dropped = _history.popitem(last=False)
        _history_chars[0] -= dropped.chars


async def _history_at(served: Served, step_count: int) -> History:
    if rows.native():
        found = await rows.history_rows(served.branch_id, step_count) if step_count else []
        return _history_of(served, step_count, found)
    return await rows.in_db(load_history, served, step_count)


def load_history(served: Served, step_count: int) -> History:
    """The messages before step `step_count`, from the episode's steps (in a database
    thread): the runner's prefix (`inference.prompts.history_messages`)."""
    from studio.models import Step

    found = (
        [
            (a, o, st, rp, (meta or {}).get("raw_response", "") or "")
            for a, o, st, rp, meta in Step.objects.filter(
                branch_id=served.branch_id, index__lt=step_count
            )
            .order_by("index")
            .values_list("action", "observation", "state", "raw_prompt", "meta")
        ]
        if step_count
        else []  # a new episode's first step: nothing to read
    )
    return _history_of(served, step_count, found)


# ---- the model ------------------------------------------------------------------------------

_models: dict[str, str] = {}  # base URL -> the served model's name, when no endpoint names one


@dataclass
class Answer:
    text: str
    tokens_in: int
    tokens_out: int
    finish_reason: str
    wall_s: float


def _timeout_message(served: Served) -> str:
    return (
        f"the world model at {served.base_url} did not answer within "
        f"{settings.STUDIO_EPISODE_STEP_TIMEOUT_S} s (STUDIO_EPISODE_STEP_TIMEOUT_S): nothing "
        "of the step was recorded; send it again, or raise STUDIO_EPISODE_STEP_TIMEOUT_S"
    )


async def _post(served: Served, path: str, body: bytes | None) -> Any:
    """One request to the model server (`model_http`: kept-alive connections), asked once
    more on a dropped connection and on a 429 or 5xx; EpisodeUnavailable when it cannot
    answer, ModelRefused when it refuses."""
    from studio.serving.model_http import ModelHTTPError, client

    url = served.base_url + path
    headers = {"Authorization": f"Bearer {served.api_key}"}
    if body is not None:
        headers["Content-Type"] = "application/json"
    timeout = float(settings.STUDIO_EPISODE_STEP_TIMEOUT_S)
    for attempt in (1, 2):
        try:
            response = await client().request(
                "POST" if body is not None else "GET", url, body=body, headers=headers,
                timeout=timeout,
            )  # fmt: skip
        except ModelHTTPError as exc:
            if exc.timed_out:
                raise EpisodeUnavailable(_timeout_message(served)) from None
            if attempt == 1:
                continue
            raise EpisodeUnavailable(
                f"the world model's server at {served.base_url} cannot be reached ({exc}): "
                "nothing of the step was recorded; send it again once it is up"
            ) from None
        status = response.status
        if status == 429 or status >= 500:
            if attempt == 1:
                await asyncio.sleep(MODEL_RETRY_PAUSE_S)
                continue
            wait = response.headers.get("retry-after") or ""
            raise EpisodeUnavailable(
                f"the world model's server at {served.base_url} answered HTTP {status} twice "
                f"({_error_text(response)}): nothing of the step was recorded; send it again",
                retry_after=float(wait) if wait.isdigit() else None,
            )
        if status >= 400:
            raise ModelRefused(
                f"the world model's server at {served.base_url} refused the request with HTTP "
                f"{status}: {_error_text(response)} (check the world model on the project's "
                "Models page)"
            )
        try:
            return orjson.loads(response.content)
        except orjson.JSONDecodeError:
            raise ModelRefused(
                f"the world model's server at {served.base_url} answered no JSON "
                f"({response.content[:200]!r})"
            ) from None
    raise AssertionError("unreachable")


def _error_text(response) -> str:
    try:
        data = orjson.loads(response.content)
        message = (data.get("error") or {}).get("message") if isinstance(data, dict) else None
        if message:
            return str(message)[:500]
    except (orjson.JSONDecodeError, AttributeError):
        pass
    return response.text[:500] or "no body"


async def _model_name(served: Served) -> str:
    if served.model:
        return served.model
    name = _models.get(served.base_url)
    if name is None:
        listed = await _post(served, "/models", None)
        data = listed.get("data") if isinstance(listed, dict) else None
        if not data:
            raise ModelRefused(
                f"{served.base_url}/models lists no model; name one on the Models page"
            )
        name = _models[served.base_url] = str(data[0].get("id"))
    return name


async def ask_model(served: Served, messages: list[dict[str, str]], seed: int | None) -> Answer:
    """The world model's answer to `messages`: the body the OpenAI backend sends for one
    sample (`inference.backends.openai_compat`), asked whole (nobody watches tokens)."""
    from inference.backends.openai_compat import _FINISH, _with_thinking

    body: dict[str, Any] = {
        "model": await _model_name(served),
        "messages": messages,
        "temperature": served.temperature,
        "max_tokens": served.max_tokens,
    }
    if served.top_p is not None:
        body["top_p"] = served.top_p
    if seed is not None:
        body["seed"] = seed
    started = time.perf_counter()
    data = await _post(served, "/chat/completions", orjson.dumps(body))
    wall = time.perf_counter() - started
    try:
        choice = data["choices"][0]
        message = choice.get("message") or {}
        content = message.get("content") or ""
        reasoning = next(
            (message[k] for k in ("reasoning_content", "reasoning")
             if isinstance(message.get(k), str) and message[k]),
            "",
        )  # fmt: skip
        usage = data.get("usage") or {}
        return Answer(
            text=_with_thinking(reasoning, str(content)),
            tokens_in=int(usage.get("prompt_tokens") or 0),
            tokens_out=int(usage.get("completion_tokens") or 0),
            finish_reason=_FINISH.get(choice.get("finish_reason") or "stop", "stop"),
            wall_s=wall,
        )
    except (KeyError, IndexError, TypeError, AttributeError, ValueError):
        raise ModelRefused(
            f"the world model's server at {served.base_url} answered no chat completion "
            f"({str(data)[:200]})"
        ) from None


# ---- the step -------------------------------------------------------------------------------

_in_flight: set[int] = set()  # episodes with a step being answered in this process
_project_flights: dict[int, int] = {}
_lock = threading.Lock()  # the sets above are the event loops' (tests run several)


@contextlib.contextmanager
def _flight(served: Served):
    """One step of the episode at a time in this process, and at most
    STUDIO_MAX_ACTIVE_EPISODE_STEPS of the project's steps waiting on models at once."""
    limit = int(settings.STUDIO_MAX_ACTIVE_EPISODE_STEPS)
    with _lock:
        if served.trajectory_id in _in_flight:
            raise EpisodeConflict("the previous step is still being answered: wait for it")
        flights = _project_flights.get(served.project_id, 0)
        if flights >= limit:
            raise episodes.EpisodeBusy(
                f"the project's episodes have {flights} steps waiting for the world model: the "
                f"limit is {limit} at once (STUDIO_MAX_ACTIVE_EPISODE_STEPS); send the step "
                "again shortly",
                retry_after=1.0,
            )
        _in_flight.add(served.trajectory_id)
        _project_flights[served.project_id] = flights + 1
    try:
        yield
    finally:
        with _lock:
            _in_flight.discard(served.trajectory_id)
            left = _project_flights.get(served.project_id, 1) - 1
            if left > 0:
                _project_flights[served.project_id] = left
            else:
                _project_flights.pop(served.project_id, None)


async def served_of(token, pk: int, world_id: int | None) -> Served | JobPath:
    """The episode's static part (this process's copy while fresh), or JobPath."""
    entry = _cached(pk)
    if entry is None or entry.project_id != token.project_id:
        if rows.native():
            entry, standing, history = await load_cold_async(token, pk, world_id)
        else:
            entry, standing, history = await rows.in_db(load_cold, token, pk, world_id)
        _remember(pk, entry)
        if standing is not None:
            _preloaded[pk] = (time.monotonic(), standing)
        if history is not None:
            _keep_history(pk, history)
    found = entry.world.get("id") if isinstance(entry, Served) and entry.world else None
    if isinstance(entry, JobPath):
        found = entry.world_id
    if world_id is not None and found != world_id:
        raise EpisodeNotFound(
            f"episode {pk} is not an episode of world {world_id}: it plays in "
            + (f"world {found}" if found is not None else "no world")
        )
    return entry


# episode -> (when, where it stood) read with its static part: its step need not read again
_preloaded: dict[int, tuple[float, rows.Standing]] = {}
PRELOADED_S = 0.5


async def take_step(
    token, served: Served, action: Any, text: str, *, check_token: bool
) -> StepResult:
    """The step of `served` for `action` (its text `text`): where the episode stands, the
    submit action's end or the model's answer, the verdict, the write."""
    from inference.rubrics import step_seed
    from studio.services import rewards

    started = time.perf_counter()
    with _flight(served):
        index = await _where(token, served, check_token=check_token)
        read_s = time.perf_counter() - started
        if index >= served.max_steps:
            raise EpisodeConflict(f"the episode is done: it took its {served.max_steps} steps")
        if index > settings.STUDIO_MAX_HISTORY_STEPS:
            raise EpisodeConflict(
                f"step {index} would send {index} steps of history to the world model: the "
                f"limit is {settings.STUDIO_MAX_HISTORY_STEPS} (STUDIO_MAX_HISTORY_STEPS); reset "
                "to start a new episode"
            )
        seed = step_seed(served.seed, index) if served.seed is not None else None
        final_answer = rewards.submitted_answer(served.plan, action)
        if final_answer is not None:
            return await _submit(token, served, index, text, final_answer, check_token=check_token)
        action_text = _normalised(text, served.domain)
        history = _history.get(served.trajectory_id)
        if history is None or history.step_count != index:
            # another process took a step (or this one never saw the episode): from the rows
            history = await _history_at(served, index)
        number = history.turns + 1
        asked = current_message(number, Turn(action=action_text), served.task)
        before_model = time.perf_counter()
        answer = await ask_model(served, [*history.messages, asked], seed)
        after_model = time.perf_counter()
        parsed = parse_prediction(answer.text)
        verdict = rewards.verdict_of(served.plan, index, parsed.observation, parsed.state)
        meta: dict[str, Any] = {
            **_model_meta(served),
            "world": served.world,
            # the step's time in the web process until its write (the model's included),
            # and its read of the episode and the model's request (the server's answer)
            "latency_s": {
                "step": round(time.perf_counter() - started, 4),
                "read": round(read_s, 4),
                "model": round(after_model - before_model, 4),
            },
            **verdict.step_meta,
            "seed": seed,  # the one the model was sent (None: an episode without a seed)
        }
        if answer.finish_reason == "length":
            meta["truncated"] = True
        row = rows.StepRow(
            token_id=token.pk,
            trajectory_id=served.trajectory_id,
            branch_id=served.branch_id,
            index=index,
            action=action_text,
            observation=parsed.observation,
            thinking=parsed.thinking,
            raw_output=answer.text,
            observation_source=SIMULATED_OBSERVATION,
            parse_status=str(parsed.status),
            meta=meta,
            timings={
                "duration_s": round(answer.wall_s, 4),
                "prefill_s": 0.0,
                "decode_s": round(answer.wall_s, 4),
                "tokens_in": answer.tokens_in,
                "tokens_out": answer.tokens_out,
            },
        )
        final = await _settle(
            token, served, row, verdict, None, action_text, check_token=check_token
        )
        if final.done:
            _history.pop(served.trajectory_id, None)
        else:
            turn = Turn(action=action_text, observation=parsed.observation)
            added = turn_pair(number, turn, served.task)
            _keep_history(
                served.trajectory_id,
                History(
                    index + 1,
                    [*history.messages, *added],
                    history.chars + sum(len(m["content"]) for m in added),
                    history.turns + 1,
                ),
            )
        return _result(served, index, parsed.observation, str(parsed.status), final)


async def _settle(
    token,
    served: Served,
    row: rows.StepRow,
    verdict: Any,
    final_answer: str | None,
    last_action: str,
    *,
    check_token: bool,
) -> Any:
    """Write the step (one statement), and at the episode's end score and write its end;
    EpisodeConflict when another step took its place (TokenRevoked, or a conflict, when the
    token was revoked meanwhile). The verdict as finished."""
    pk = served.trajectory_id
    if not await rows.write_step(row, done=bool(verdict.done), reward=verdict.reward):
        _known.pop(pk, None)
        standing = await rows.read_standing(token, pk, check_token=False, counted=True)
        if not standing.token_active:
            _token_seen.pop(token.pk, None)
            if check_token:
                raise episodes.TokenRevoked
            raise EpisodeConflict("the API token was revoked meanwhile: this step is not recorded")
        raise await rows.in_db(rows.why_not_written, row.trajectory_id, row.index)
    if not verdict.done:
        _known[pk] = row.index + 1
        await rows.note_written(pk, row.index + 1)
        return verdict
    _known.pop(pk, None)
    return await rows.in_db(
        rows.finish, served.project_id, row, served.plan, verdict, final_answer, last_action
    )


TOKEN_TTL_S = 1.0  # a revoked token's steps stop within this (the write refuses it at once)
_known: dict[int, int] = {}  # episode -> its step count as this process last wrote or read it
_token_seen: dict[int, float] = {}  # token -> when a read last found it active (monotonic)


async def _where(token, served: Served, *, check_token: bool) -> int:
    """The index of the step to take: the step count this process left the episode at, when
    Redis says no other process moved it since (and the token was seen active within
    TOKEN_TTL_S); else read from the database, with the token and the status. The step is
    counted against the token's rate on the way (one round trip with the first)."""
    pk = served.trajectory_id
    counted = False
    preloaded = _preloaded.pop(pk, None)
    if preloaded is not None and time.monotonic() - preloaded[0] < PRELOADED_S:
        if check_token:
            await rows.touch_if_due(token)
        await rows.count_step(token.pk)
        return _standing_checked(token, pk, preloaded[1], check_token=check_token)
    if rows.redis_ready() is not None:
        noted = await rows.begin_step(token.pk, pk)
        counted = True
        known = _known.get(pk)
        history = _history.get(pk)
        seen = _token_seen.get(token.pk)
        if (
            known is not None
            and noted == known
            and history is not None
            and history.step_count == known
            and (not check_token or (seen is not None and time.monotonic() - seen < TOKEN_TTL_S))
        ):
            return known
    standing = await rows.read_standing(token, pk, check_token=check_token, counted=counted)
    return _standing_checked(token, pk, standing, check_token=check_token)


def _standing_checked(token, pk: int, standing: rows.Standing, *, check_token: bool) -> int:
    """The step index `standing` gives, once the token and the status allow a step."""
    if not standing.token_active:
        _token_seen.pop(token.pk, None)
        if check_token:
            raise episodes.TokenRevoked
    else:
        _token_seen[token.pk] = time.monotonic()
        if len(_token_seen) > 100_000:
            _token_seen.clear()
    if standing.status != "running":
        raise EpisodeConflict(
            f"the episode is {standing.status}: it took {standing.step_count} steps (start a "
            "new episode to go on)"
        )
    _known[pk] = standing.step_count
    if len(_known) > 100_000:
        _known.clear()
    return standing.step_count


async def _submit(
    token, served: Served, index: int, text: str, final_answer: str, *, check_token: bool
) -> StepResult:
    """The agent's submit action: a step with its final answer and no observation, no
    model asked; the episode ends ("submit") and its end is scored."""
    from studio.services import rewards

    verdict = rewards.verdict_of(served.plan, index, "", None, final_answer=final_answer)
    meta: dict[str, Any] = {
        "model_call": False,  # no world model said anything here: none is named
        "world": served.world,
        **verdict.step_meta,
    }
    row = rows.StepRow(
        token_id=token.pk,
        trajectory_id=served.trajectory_id,
        branch_id=served.branch_id,
        index=index,
        action=text,
        observation="",
        thinking="",
        raw_output="",
        observation_source=NO_OBSERVATION,
        parse_status="",
        meta=meta,
        timings={},
    )
    final = await _settle(token, served, row, verdict, final_answer, text, check_token=check_token)
    _history.pop(served.trajectory_id, None)
    return _result(served, index, "", "", final)


def _model_meta(served: Served) -> dict[str, Any]:
    """What names a step's world model where no job row does: read back by
    `studio.services.model_identity.identity_of_step_meta` (its sampling as a job's params)."""
    from studio.services.model_identity import SERVED

    return {
        SERVED: True,
        "backend": "openai",
        "model": served.model or _models.get(served.base_url, ""),
        "endpoint": served.endpoint_name,
        "sampling": {
            "temperature": served.temperature,
            "top_p": served.top_p,
            "max_tokens": served.max_tokens,
        },
    }


def _normalised(text: str, domain: str) -> str:
    """The action as the runner sends and records it (`SimulationRequest.build`'s rules):
    line endings as \\n, no trailing whitespace, JSON that must parse when it looks like
    JSON in a JSON domain."""
    import json

    from inference.simulation.request import looks_like_json, normalise_action

    action = normalise_action(text)
    if not action.strip():
        raise EpisodeInvalid("the action is empty: write what the agent does at this step")
    if looks_like_json(action, domain):
        try:
            json.loads(action)
        except RecursionError:
            raise EpisodeInvalid("the action's JSON is nested too deeply to read") from None
        except json.JSONDecodeError as exc:
            raise EpisodeInvalid(
                f"the action is not valid JSON at line {exc.lineno}, column {exc.colno}: "
                f"{exc.msg} (send free text if this action is not JSON)"
            ) from None
    return action


def _result(served: Served, index: int, text: str, parse_status: str, verdict: Any) -> StepResult:
    """What the agent gets (the contract's step observation)."""
    return StepResult(
        observation={
            "episode_id": str(served.trajectory_id),
            "text": text,
            "step": index + 1,
            "parse_status": parse_status,
            "metadata": dict(verdict.observation_metadata),
        },
        done=bool(verdict.done),
        reward=verdict.reward,
    )
