"""The rows a served step reads and writes (`studio.serving.direct`), with as few trips as the
database allows.

On PostgreSQL the two trips of every step run on the event loop itself, over psycopg's async
connections (a small pool per loop, statements prepared by the server after a few runs):

- the read: the episode's step count and status and whether the token is still active, in
  one query (the token's rate is counted in Redis meanwhile, when Redis is the broker);
- the write: ONE statement, a CTE that advances the trajectory's step count where it still
  equals the step's index and the episode is running, and inserts the step only then; at the
  episode's last step it also turns the episode "done", at a rewarded step it adds the reward
  to the episode's running return. A step another process took meanwhile makes it write
  nothing (the caller says so: EpisodeConflict).

No thread hop on that path: under 32 agents in lock-step a database thread waits its turn for
the interpreter lock behind the event loop, which cost tens of milliseconds per trip. What
is rare (an episode's first step in this process, its end, SQLite) goes through the ORM in a
database thread (`in_db`)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import weakref
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

import orjson
from django.db import DatabaseError, IntegrityError, connection, connections, transaction

from inference.simulation.sink import AGENT
from studio.services.episodes import (
    EpisodeBusy,
    EpisodeConflict,
    EpisodeError,
    EpisodeNotFound,
    EpisodeUnavailable,
)
from studio.serving.loop_close import at_loop_close

log = logging.getLogger(__name__)

T = TypeVar("T")

DB_THREADS = 8  # ORM trips in flight at once (each thread holds one connection)
PG_CONNECTIONS = 64  # async connections per event loop (a trip holds one for a query)
STORABLE = str.maketrans({"\x00": "\ufffd"})  # PostgreSQL's text takes no NUL (model output)


def native() -> bool:
    """Whether the hot trips run on the event loop (PostgreSQL), else in threads."""
    return connections["default"].vendor == "postgresql"


def unavailable(exc: BaseException) -> EpisodeUnavailable:
    return EpisodeUnavailable(
        f"the database did not answer ({type(exc).__name__}): nothing of the step was "
        "recorded; send it again"
    )


# ---- ORM trips in threads -------------------------------------------------------------------

_pool = ThreadPoolExecutor(max_workers=DB_THREADS, thread_name_prefix="episode-db")


_pool_loops: weakref.WeakSet[asyncio.AbstractEventLoop] = weakref.WeakSet()


async def in_db(fn: Callable[..., T], *args: Any) -> T:
    """`fn(*args)` in a database thread (the ORM blocks). A connection the database dropped
    is closed, so that thread's next trip opens a new one."""
    loop = asyncio.get_running_loop()
    if loop not in _pool_loops:
        _pool_loops.add(loop)
        at_loop_close(_close_thread_connections)
    return await loop.run_in_executor(_pool, _guarded, fn, args)


async def _close_thread_connections() -> None:
    """Each database thread closes its connection (the loop that used them ends): one job
    per thread, held at a barrier until every thread has taken one."""
    import threading

    threads = len(getattr(_pool, "_threads", ())) or 0
    if not threads:
        return
    barrier = threading.Barrier(threads)

    def close() -> None:
        with contextlib.suppress(Exception):
            connection.close()
        with contextlib.suppress(threading.BrokenBarrierError):
            barrier.wait(timeout=5)

    loop = asyncio.get_running_loop()
    await asyncio.gather(*(loop.run_in_executor(_pool, close) for _ in range(threads)))


def _guarded(fn: Callable[..., T], args: tuple) -> T:
    try:
        return fn(*args)
    except (EpisodeError, IntegrityError):
        raise
    except DatabaseError as exc:
        with contextlib.suppress(Exception):
            connection.close()
        raise unavailable(exc) from None


# ---- psycopg's async connections on the loop --------------------------------------------------


class _PgPool:
    """A loop's connections: at most PG_CONNECTIONS, autocommit (every statement commits
    itself), opened when first needed and dropped after an error."""

    def __init__(self) -> None:
        self._idle: list[Any] = []
        self._slots = asyncio.Semaphore(PG_CONNECTIONS)

    @contextlib.asynccontextmanager
    async def connection(self):
        import psycopg

        async with self._slots:
            conn = self._idle.pop() if self._idle else None
            if conn is None or conn.closed:
                database = connections["default"]
                params = dict(database.get_connection_params())
                for key in ("cursor_factory", "context", "prepare_threshold"):
                    params.pop(key, None)
                conn = await psycopg.AsyncConnection.connect(**params, autocommit=True)
                # the server prepares the step's statements after a few runs, unless the
                # database's OPTIONS say otherwise (a transaction-pooling PgBouncer: None)
                if "prepare_threshold" in (database.settings_dict.get("OPTIONS") or {}):
                    conn.prepare_threshold = database.settings_dict["OPTIONS"]["prepare_threshold"]
            try:
                yield conn
            except BaseException:
                with contextlib.suppress(Exception):
                    await conn.close()
                raise
            if (
                not conn.closed
                and conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
            ):
                self._idle.append(conn)
            else:
                with contextlib.suppress(Exception):
                    await conn.close()

    async def close(self) -> None:
        idle, self._idle = self._idle, []
        for conn in idle:
            with contextlib.suppress(Exception):
                await conn.close()


_pg_pools: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _PgPool] = (
    weakref.WeakKeyDictionary()
)


async def pg_one(sql: str, params: Any) -> tuple | None:
    """One statement on the loop's connections; its first row (or None)."""
    found = await pg_rows(sql, params, limit=1)
    return found[0] if found else None


async def pg_rows(sql: str, params: Any, *, limit: int | None = None) -> list[tuple]:
    """One statement on the loop's connections; its rows (at most `limit`)."""
    import psycopg

    loop = asyncio.get_running_loop()
    pool = _pg_pools.get(loop)
    if pool is None:
        pool = _pg_pools[loop] = _PgPool()
        at_loop_close(pool.close)
    try:
        async with pool.connection() as conn:
            cursor = await conn.execute(sql, params)
            if cursor.description is None:
                return []
            if limit == 1:
                row = await cursor.fetchone()
                return [row] if row is not None else []
            return await cursor.fetchall()
    except psycopg.IntegrityError:
        raise
    except psycopg.Error as exc:
        log.warning("an episode step's statement failed", exc_info=True)
        raise unavailable(exc) from None


async def episode_row(token_id: int, project_id: int, pk: int) -> tuple | None:
    """(project id, domain, task, metadata, step count, token active) of episode `pk` of
    the project, on the loop (PostgreSQL), or None."""
    trajectories, _, tokens = _tables()
    sql = _SQL.get("episode") or _SQL.setdefault(
        "episode",
        f"SELECT t.project_id, t.domain, t.task_instruction, t.metadata, t.step_count, "
        f"(SELECT COUNT(*) FROM {tokens} a WHERE a.id = %s AND a.revoked_at IS NULL) "
        f"FROM {trajectories} t WHERE t.id = %s AND t.project_id = %s "
        "AND t.source_format = 'episode'",
    )
    return await pg_one(sql, (token_id, pk, project_id))


async def history_rows(branch_id: int, before: int) -> list[tuple]:
    """(action, observation, state, raw prompt, raw response) of the branch's steps before
    `before`, in order, on the loop (PostgreSQL)."""
    _, steps, _ = _tables()
    sql = _SQL.get("history") or _SQL.setdefault(
        "history",
        f"SELECT action, observation, state, raw_prompt, COALESCE(meta ->> 'raw_response', '') "
        f'FROM {steps} WHERE branch_id = %s AND "index" < %s ORDER BY "index"',
    )
    return await pg_rows(sql, (branch_id, before))


# ---- the read -----------------------------------------------------------------------------


@dataclass
class Standing:
    step_count: int
    status: str
    token_active: bool


def _tables() -> tuple[str, str, str]:
    from studio.models import ApiToken, Step, Trajectory

    return Trajectory._meta.db_table, Step._meta.db_table, ApiToken._meta.db_table


def _standing_sql(vendor: str) -> str:
    trajectories, _, tokens = _tables()
    status = (
        "COALESCE(t.metadata -> 'episode' ->> 'status', 'running')"
        if vendor == "postgresql"
        else "COALESCE(json_extract(t.metadata, '$.episode.status'), 'running')"
    )
    return (
        f"SELECT t.step_count, {status}, "
        f"(SELECT COUNT(*) FROM {tokens} a WHERE a.id = %s AND a.revoked_at IS NULL) "
        f"FROM {trajectories} t WHERE t.id = %s"
    )


_SQL: dict[Any, str] = {}


def _standing_of(row: tuple | None, pk: int) -> Standing:
    if row is None:
        raise EpisodeNotFound(f"episode_id {pk!r} is not an episode of this project")
    return Standing(int(row[0]), str(row[1]), bool(row[2]))


def read_sync(token_id: int, pk: int) -> Standing:
    sql = _SQL.get("standing-sync") or _SQL.setdefault(
        "standing-sync", _standing_sql(connection.vendor)
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [token_id, pk])
        return _standing_of(cursor.fetchone(), pk)


async def read_standing(token, pk: int, *, check_token: bool, counted: bool) -> Standing:
    """Where episode `pk` stands now and whether the token is still active (one query);
    unless `counted` (by `begin_step`), the step is counted against the token's rate
    (EpisodeBusy past it) at the same time."""
    if check_token:
        await touch_if_due(token)
    if not native():
        return await in_db(_read_and_count, token.pk, pk, not counted)
    sql = _SQL.get("standing") or _SQL.setdefault("standing", _standing_sql("postgresql"))
    if counted:
        return _standing_of(await pg_one(sql, (token.pk, pk)), pk)
    standing, _ = await asyncio.gather(pg_one(sql, (token.pk, pk)), count_step(token.pk))
    return _standing_of(standing, pk)


async def touch_if_due(token) -> None:
    """The token's "last used", written every few seconds (`tokens.TOUCH_EVERY_S`)."""
    from studio.services import tokens

    if tokens.touch_due(token.pk):
        await in_db(_touch, token.pk)


def _read_and_count(token_id: int, pk: int, count: bool) -> Standing:
    from studio.services import episode_limits

    if count:
        episode_limits.count(token_id, "step")
    return read_sync(token_id, pk)


def _touch(token_id: int) -> None:
    from django.utils import timezone

    from studio.models import ApiToken

    ApiToken.objects.filter(pk=token_id, revoked_at__isnull=True).update(
        last_used_at=timezone.now()
    )


# ---- the token's rate in Redis, on the loop -------------------------------------------------

_redis: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Any] = weakref.WeakKeyDictionary()


async def count_step(token_id: int) -> None:
    """`episode_limits.count(token_id, "step")` without leaving the loop when Redis is the
    broker (the same key, the same INCR, the same refusal); else in a database thread."""
    from django.conf import settings

    from studio.jobs.replies import redis_url
    from studio.services import episode_limits

    url = redis_url()
    if url is None:
        await in_db(episode_limits.count, token_id, "step")
        return
    now = time.time()
    minute = int(now // 60)
    key = f"{settings.STUDIO_QUEUE_PREFIX}studio:rate:step:{token_id}:{minute}"
    try:
        client = _redis_client(url)
        pipe = client.pipeline(transaction=False)
        pipe.incr(key)
        pipe.expire(key, 120)
        used = int((await pipe.execute())[0])
    except Exception:  # noqa: BLE001 - Redis down: the database still counts (as episode_limits)
        await in_db(episode_limits.count, token_id, "step")
        return
    _refuse_past(used, now, minute)


def _redis_client(url: str):
    import redis.asyncio as aioredis

    loop = asyncio.get_running_loop()
    client = _redis.get(loop)
    if client is None:
        client = _redis[loop] = aioredis.Redis.from_url(url, socket_timeout=2)
        at_loop_close(client.aclose)
    return client


# ---- where an episode stands, as the last writer left it (Redis) ------------------------
# After a served step is written, its process notes the episode's new step count in Redis
# (only ever raised). The next step of the episode in a process that knows that count (it
# wrote it) finds it unchanged in the same round trip that counts the token's rate, and skips
# the database read: the write's statement still checks the step count, the status and the
# token, so a process that guessed wrong writes nothing. A count moved by another process (an
# agent whose steps go to several web processes) sends the step through the read.

COUNT_TTL_S = 3600
_RAISE = """
local old = tonumber(redis.call('GET', KEYS[1]) or '-1')
if tonumber(ARGV[1]) > old then redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2]) end
return 1
"""


def _count_key(pk: int) -> str:
    from django.conf import settings

    return f"{settings.STUDIO_QUEUE_PREFIX}studio:episode-count:{pk}"


def redis_ready() -> str | None:
    """Redis's URL when it is the broker (the episode counts and the rates live there)."""
    from studio.jobs.replies import redis_url

    return redis_url()


async def begin_step(token_id: int, pk: int) -> int | None:
    """Count the step against the token's rate (EpisodeBusy past it, as
    `episode_limits.count`) and read the episode's step count as its last writer noted it,
    in one round trip to Redis; None when Redis has no note (or did not answer: the rate is
    then counted in the database)."""
    from django.conf import settings

    from studio.services import episode_limits

    url = redis_ready()
    assert url is not None
    now = time.time()
    minute = int(now // 60)
    key = f"{settings.STUDIO_QUEUE_PREFIX}studio:rate:step:{token_id}:{minute}"
    try:
        pipe = _redis_client(url).pipeline(transaction=False)
        pipe.incr(key)
        pipe.expire(key, 120)
        pipe.get(_count_key(pk))
        used, _, noted = await pipe.execute()
    except Exception:  # noqa: BLE001 - Redis down: the database counts (as episode_limits)
        await in_db(episode_limits.count, token_id, "step")
        return None
    _refuse_past(int(used), now, minute)
    try:
        return int(noted) if noted is not None else None
    except ValueError:
        return None


def _refuse_past(used: int, now: float, minute: int) -> None:
    from django.conf import settings

    from studio.services import episode_limits

    setting = episode_limits.RATE_SETTINGS["step"]
    limit = int(getattr(settings, setting))
    if used > limit:
        retry = max(1.0, 60 - (now - minute * 60))
        raise EpisodeBusy(
            f"this token made {limit} steps this minute, its limit ({setting}): try again "
            f"in {retry:.0f} s",
            retry_after=retry,
        )


def note_written_sync(pk: int, step_count: int) -> None:
    """`note_written` for a writer outside the event loop (the job path's worker): every
    writer of an episode's steps notes its count, or a process that knew the old count would
    take its next step from a history without them (and its write would then refuse it)."""
    url = redis_ready()
    if url is None:
        return
    try:
        import redis

        global _sync_redis
        if _sync_redis is None:
            _sync_redis = redis.Redis.from_url(url, socket_timeout=2)
        _sync_redis.eval(_RAISE, 1, _count_key(pk), step_count, COUNT_TTL_S)
    except Exception:  # noqa: BLE001 - a lost note only sends the next step through the read
        log.debug("could not note episode %s's step count", pk, exc_info=True)


_sync_redis: Any = None


def forget_noted_sync(pk: int) -> None:
    """Drop the episode's noted step count (its status changed outside the step path: ended
    from the studio): the next step of it, in every process, reads the episode first and is
    refused before any model is asked."""
    url = redis_ready()
    if url is None:
        return
    try:
        import redis

        global _sync_redis
        if _sync_redis is None:
            _sync_redis = redis.Redis.from_url(url, socket_timeout=2)
        _sync_redis.delete(_count_key(pk))
    except Exception:  # noqa: BLE001 - the step's write still refuses it
        log.debug("could not drop episode %s's noted count", pk, exc_info=True)


async def note_written(pk: int, step_count: int) -> None:
    """Note the episode's new step count in Redis before the step's answer goes out: a
    process that took an earlier step of the episode must not take the next one from its own
    count once the agent has this answer (a note sent in the background could still be on its
    way then, under load, and that process's write would refuse the step). A lost note (Redis
    down) costs at most one refused step (409: the write checks the count), never a wrong
    record."""
    url = redis_ready()
    if url is None:
        return
    try:
        await _redis_client(url).eval(_RAISE, 1, _count_key(pk), step_count, COUNT_TTL_S)
    except Exception:  # noqa: BLE001 - see above
        log.debug("could not note episode %s's step count", pk, exc_info=True)


# ---- the write ------------------------------------------------------------------------------


@dataclass
class StepRow:
    token_id: int
    trajectory_id: int
    branch_id: int
    index: int
    action: str
    observation: str
    thinking: str
    raw_output: str
    observation_source: str
    parse_status: str
    meta: dict[str, Any]
    timings: dict[str, Any]


STEP_FIELDS = (
    "branch", "index", "action", "observation", "state", "thinking", "raw_output", "raw_prompt",
    "provenance", "observation_source", "parse_status", "meta", "timings", "created_at",
)  # fmt: skip


def _write_sql(done: bool, rewarded: bool) -> str:
    """The step's one statement on PostgreSQL (see the module's docstring)."""
    key = ("write", done, rewarded)
    found = _SQL.get(key)
    if found is not None:
        return found
    from studio.models import Step

    trajectories, steps, tokens = _tables()
    columns = ", ".join(
        f'"{Step._meta.get_field(name).column}"'  # type: ignore[union-attr]
        for name in STEP_FIELDS
    )
    metadata = "t.metadata"
    if rewarded:
        metadata = (
            f"jsonb_set({metadata}, '{{episode,return}}', to_jsonb(COALESCE((t.metadata #>> "
            "'{episode,return}')::float8, 0) + %(reward)s::float8), true)"
        )
    if done:
        metadata = f"jsonb_set({metadata}, '{{episode,status}}', '\"done\"', true)"
    sets = "step_count = %(next)s" + (
        f", metadata = {metadata}" if metadata != "t.metadata" else ""
    )
    sql = (
        f"WITH advanced AS (UPDATE {trajectories} t SET {sets} "
        "WHERE t.id = %(trajectory)s AND t.step_count = %(index)s "
        "AND COALESCE(t.metadata -> 'episode' ->> 'status', 'running') = 'running' "
        f"AND EXISTS (SELECT 1 FROM {tokens} a WHERE a.id = %(token)s AND a.revoked_at IS NULL) "
        f"RETURNING t.id) INSERT INTO {steps} ({columns}) "
        "SELECT %(branch)s, %(index)s, %(action)s, %(observation)s, '', %(thinking)s, "
        "%(raw_output)s, '', %(provenance)s, %(observation_source)s, %(parse_status)s, "
        "%(meta)s::jsonb, %(timings)s::jsonb, now() FROM advanced RETURNING 1"
    )
    _SQL[key] = sql
    return sql


def _values(row: StepRow) -> dict[str, Any]:
    return {
        "token": row.token_id,
        "trajectory": row.trajectory_id,
        "branch": row.branch_id,
        "index": row.index,
        "next": row.index + 1,
        "action": row.action.translate(STORABLE),
        "observation": row.observation.translate(STORABLE),
        "thinking": row.thinking.translate(STORABLE),
        "raw_output": row.raw_output.translate(STORABLE),
        "provenance": AGENT,
        "observation_source": row.observation_source,
        "parse_status": row.parse_status,
    }


async def write_step(row: StepRow, *, done: bool, reward: float | None) -> bool:
    """Write the step where the episode stands at its index, and what it changes in the
    episode (its status at the end, its running return at a rewarded step that is not the
    last: `rewards.finish` adds that one); False when the episode does not stand there any
    more (another step took the index, or the episode ended): nothing is written then."""
    rewarded = reward is not None and not done
    if not native():
        return await in_db(_write_orm, row, done, reward if rewarded else None)
    values = _values(row)
    values["meta"] = orjson.dumps(row.meta).decode().replace("\\u0000", "\\ufffd")
    values["timings"] = orjson.dumps(row.timings).decode()
    if rewarded:
        values["reward"] = float(reward)  # type: ignore[arg-type]
    import psycopg

    try:
        return await pg_one(_write_sql(done, rewarded), values) is not None
    except psycopg.errors.UniqueViolation:
        return False  # the index is the branch's already (a step written by another path)


def _write_orm(row: StepRow, done: bool, reward: float | None) -> bool:
    """The same write in a short transaction, for SQLite (one writer at a time: the step
    count's update orders two steps of one episode)."""
    from django.db.models import Q

    from studio.models import ApiToken, Step, Trajectory
    from studio.services import rewards

    with transaction.atomic():
        if not ApiToken.objects.filter(pk=row.token_id, revoked_at__isnull=True).exists():
            return False
        rows = Trajectory.objects.filter(pk=row.trajectory_id, step_count=row.index).exclude(
            Q(metadata__episode__status__in=["done", "cancelled"])
        )
        if not rows.update(step_count=row.index + 1):
            return False
        if done:
            trajectory = Trajectory.objects.only("metadata").get(pk=row.trajectory_id)
            metadata = dict(trajectory.metadata or {})
            metadata["episode"] = {**metadata.get("episode", {}), "status": "done"}
            Trajectory.objects.filter(pk=row.trajectory_id).update(metadata=metadata)
        values = _values(row)
        Step.objects.create(
            branch_id=row.branch_id,
            index=row.index,
            action=values["action"],
            observation=values["observation"],
            thinking=values["thinking"],
            raw_output=values["raw_output"],
            provenance=AGENT,
            observation_source=row.observation_source,
            parse_status=row.parse_status,
            meta=storable_json(row.meta),
            timings=row.timings,
        )
        if reward is not None:
            rewards.add_return(row.trajectory_id, reward)
    return True


def storable_json(value: Any) -> Any:
    if isinstance(value, str):
        return value.translate(STORABLE)
    if isinstance(value, dict):
        return {k: storable_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [storable_json(v) for v in value]
    return value


def why_not_written(trajectory_id: int, index: int) -> EpisodeConflict:
    """What happened to the episode meanwhile, said to the agent whose step lost (a thread)."""
    from studio.models import Trajectory

    row = Trajectory.objects.filter(pk=trajectory_id).values_list("metadata", flat=True).first()
    if row is None and not Trajectory.objects.filter(pk=trajectory_id).exists():
        return EpisodeConflict(f"episode {trajectory_id} was deleted meanwhile")
    status = ((row or {}).get("episode") or {}).get("status") or "running"
    if status != "running":
        return EpisodeConflict(
            f"the episode is {status}: this answer is not kept (start a new episode to go on)"
        )
    return EpisodeConflict(
        f"another step of this episode was taken at step {index} meanwhile: this answer is "
        "not kept; send the action again to take the next step"
    )


def finish(
    project_id: int, row: StepRow, plan: Any, verdict: Any, final_answer: str | None,
    last_action: str,
) -> Any:  # fmt: skip
    """The episode's end after its last step was written (a thread): `rewards.finish` (the
    episode rubric, a judge perhaps; the end in the episode's metadata), then the step's
    meta with the end's part of the reward. The step goes first: its statement turned the
    episode "done", so no step of another process follows it, and no end is written for a
    step that lost its race."""
    from studio.models import Step
    from studio.services import rewards

    final = rewards.finish(
        project_id, row.trajectory_id, plan, verdict,
        final_answer=final_answer, last_action=last_action,
    )  # fmt: skip
    meta = {**row.meta, **final.step_meta}
    if meta != row.meta:
        Step.objects.filter(branch_id=row.branch_id, index=row.index).update(
            meta=storable_json(meta)
        )
    return final
