"""Episodes served to outside agents: throughput and the studio's own overhead per step.

Agents play a world at once over the episode API's WebSocket (OpenEnv's message protocol)
against the fake OpenAI-compatible server on 127.0.0.1 (a real HTTP server answering after a
fixed model time, in a process of its own). The studio runs as in production: uvicorn with
the ASGI app, the database and the broker. A served world model's step is answered in the web
process itself (`studio.serving.direct`: no job row, no worker); `--episode-workers N` starts
episodes workers too (idle for a served model; their CPU is counted).

Each scenario (`--agents 32 1`: 32 agents, then 1) prints the steps per second, the studio's
overhead per step (the latency the agent saw minus the fake model's fixed time: everything the
studio adds, the HTTP client's trip to the model included) at p50 and p95, and the CPU that
every process spent per step, with the sum over the studio's own processes (web, workers,
database, broker) against the goal of issue 23 (at most 6 ms; p50 under 50 ms and p95 under
150 ms at 32 agents in lock-step against a 50 ms model; 1 agent under 10 ms).

By default every agent sends its next action the moment it has an observation, all of them
in lock-step, as a batch of environments that an RL trainer steps together: the harshest
arrival, where all steps come at once. `--stagger` spreads the agents over one step's time,
`--think-ms` gives each agent a policy's time between steps.

    python scripts/bench_episodes.py                      # SQLite + filesystem broker, temp dir
    DATABASE_URL=postgres://... REDIS_URL=redis://... python scripts/bench_episodes.py
    python scripts/bench_episodes.py --agents 32 1 --steps 20 --model-ms 50
    python scripts/bench_episodes.py --model-ms 1000 --stagger
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--agents", type=int, nargs="+", default=[32, 1],
        help="agents of each scenario, run one after the other",
    )  # fmt: skip
    parser.add_argument("--steps", type=int, default=20, help="steps of each agent")
    parser.add_argument(
        "--steps-alone", type=int, default=100,
        help="steps of a lone agent (a scenario of 1 agent: enough steps to time its CPU)",
    )  # fmt: skip
    parser.add_argument("--model-ms", type=float, default=50.0, help="the fake model's time")
    parser.add_argument(
        "--threads", type=int, default=32, help="threads of each episodes worker (as in dev.sh)"
    )
    parser.add_argument(
        "--episode-workers", type=int, default=0,
        help="episodes workers to start (a served model's steps need none)",
    )  # fmt: skip
    parser.add_argument(
        "--web-workers", type=int, default=min(8, len(os.sched_getaffinity(0))),
        help="uvicorn worker processes of the web server (default: one per core, as the README "
        "sizes them; a lock-step burst of steps is worked off on every core)",
    )  # fmt: skip
    parser.add_argument(
        "--transport", choices=("ws", "http"), default="ws",
        help="the agents' transport: OpenEnv's WebSocket, or its plain HTTP routes",
    )  # fmt: skip
    parser.add_argument(
        "--profile", metavar="DIR",
        help="record the web process with py-spy (if installed) into DIR/web-N.svg",
    )  # fmt: skip
    parser.add_argument(
        "--think-ms", type=float, default=0.0,
        help="the agent's own time between an observation and its next action (its policy)",
    )  # fmt: skip
    parser.add_argument(
        "--stagger", action="store_true",
        help="agents start one after the other over one step's time, instead of all at once "
        "(as a batch of environments an RL trainer steps together)",
    )  # fmt: skip
    return parser.parse_args()


def setup_environment(tmp: Path) -> None:
    # production settings: with DEBUG on, Django keeps every query it runs
    os.environ.setdefault("DEBUG", "0")
    os.environ.setdefault("SECRET_KEY", "bench-episodes-only")
    os.environ.setdefault("ALLOWED_HOSTS", "127.0.0.1")
    os.environ["STUDIO_DATA_DIR"] = str(tmp)
    os.environ.setdefault("DATABASE_URL", f"sqlite:///{tmp / 'bench.sqlite3'}")
    if not os.environ.get("REDIS_URL"):
        os.environ["STUDIO_BROKER"] = "filesystem"
    os.environ["STUDIO_QUEUE_PREFIX"] = f"benchep{os.getpid()}-"
    # the bench measures the path, not the token's rate limit (its count still runs per step)
    os.environ.setdefault("STUDIO_EPISODE_STEPS_PER_MINUTE", str(10**9))
    os.environ.setdefault("STUDIO_EPISODE_RESETS_PER_MINUTE", str(10**6))
    os.environ["DJANGO_SETTINGS_MODULE"] = "studio.settings"
    for name in ("WORLD_MODEL_BASE_URL", "WORLD_MODEL_API_KEY", "AGENT_MODEL_BASE_URL"):
        os.environ.pop(name, None)
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def start_worker(log: Path, concurrency: int) -> subprocess.Popen:
    """The episodes queue's worker, as scripts/dev.sh and docker-compose run it."""
    from django.conf import settings

    out = open(log, "wb")  # noqa: SIM115 - the worker writes it until stopped
    proc = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "studio", "worker",
         "-Q", f"{settings.STUDIO_QUEUE_PREFIX}episodes", "-P", "threads",
         "-c", str(concurrency), "-l", "INFO",
         "--without-gossip", "--without-mingle", "-n", f"benchep-{time.monotonic_ns()}@%h"],
        cwd=ROOT, env=dict(os.environ), stdout=out, stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while b"ready." not in log.read_bytes():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"the worker did not start:\n{log.read_text()[-3000:]}")
        time.sleep(0.2)
    return proc


def _database_name() -> str:
    from django.db import connection

    return str(connection.settings_dict["NAME"])


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_line(
    proc: subprocess.Popen, log: Path, marker: bytes, what: str, *, count: int = 1
) -> None:
    deadline = time.monotonic() + 60
    while log.read_bytes().count(marker) < count:
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"{what} did not start:\n{log.read_text()[-3000:]}")
        time.sleep(0.1)


def start_model(log: Path, delay_s: float) -> tuple[subprocess.Popen, str]:
    """The fake OpenAI-compatible server (tests/support/fake_openai.py) in its own process."""
    code = (
        f"import sys, threading; sys.path.insert(0, {str(ROOT)!r})\n"
        "from tests.support import fake_openai\n"
        # 32 agents connect at once: socketserver's listen backlog of 5 would reset some
        "fake_openai._Server.request_queue_size = 1024\n"
        "from tests.support.fake_openai import fake_openai_server\n"
        f"with fake_openai_server(delay_s={delay_s!r}) as srv:\n"
        "    print('URL', srv.base_url, flush=True); threading.Event().wait()\n"
    )
    out = open(log, "wb")  # noqa: SIM115 - the server writes it until stopped
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdout=out, stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip
    _wait_line(proc, log, b"URL ", "the model server")
    url = log.read_text().split("URL ", 1)[1].split()[0]
    return proc, url


def start_web(log: Path, workers: int = 1) -> tuple[subprocess.Popen, str]:
    """uvicorn as scripts/dev.sh runs it (its log at warning: no access log line per step)."""
    port = _free_port()
    out = open(log, "wb")  # noqa: SIM115 - the server writes it until stopped
    proc = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "studio.asgi:application", "--host", "127.0.0.1",
         "--port", str(port), "--log-level", "info", "--no-access-log",
         *(["--workers", str(workers)] if workers > 1 else [])],
        cwd=ROOT, env=dict(os.environ), stdout=out, stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip
    _wait_line(proc, log, b"Application startup complete", "the web server", count=workers)
    return proc, f"http://127.0.0.1:{port}"


def stop(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    except ProcessLookupError:
        pass


def prepare(model_url: str):
    """A project whose default world model is the fake server, a world, and a token."""
    from inference.worlds import parse_world
    from studio.services.endpoints import EndpointData, make_default, save_endpoint
    from studio.services.projects import do_create_project
    from studio.services.tokens import create_token
    from studio.services.worlds import save_world

    project = do_create_project(name=f"bench-{os.getpid()}")
    endpoint = save_endpoint(
        project,
        EndpointData(name="fake", role="world", kind="openai", base_url=model_url, model="m",
                     max_tokens=64),
    ).endpoint  # fmt: skip
    make_default(endpoint)
    world = save_world(
        project,
        parse_world({"name": "Bench shell", "domain": "terminal", "description": "A container.",
                     "files": {"/srv/a.txt": "hello"}}),
    ).world  # fmt: skip
    _, token = create_token(project, "bench")
    return world, token


async def agent(
    url: str,
    steps: int,
    latencies: list[tuple[int, int, float]],
    ready: asyncio.Barrier,
    go,
    *,
    delay_s: float = 0.0,
    think_s: float = 0.0,
) -> None:
    """One agent: a WebSocket (`ws://...`), or plain HTTP with a kept-alive connection."""
    if url.startswith("http"):
        await http_agent(url, steps, latencies, ready, go, delay_s=delay_s, think_s=think_s)
        return
    from websockets.asyncio.client import connect

    async with connect(url, max_size=2**24) as ws:
        await ws.send(json.dumps({"type": "reset", "data": {"task": "look around"}}))
        reply = json.loads(await ws.recv())
        episode = int(reply["data"]["observation"]["episode_id"])
        await ready.wait()  # every episode has started: the steps are what is measured
        await go.wait()
        await asyncio.sleep(delay_s)  # staggered: this agent's place in the step period
        for k in range(steps):
            if k and think_s:
                await asyncio.sleep(think_s)  # the agent's policy choosing its next action
            started = time.perf_counter()
            await ws.send(json.dumps({"type": "step", "data": {"action": f"cat /srv/a.txt # {k}"}}))
            reply = json.loads(await ws.recv())
            if reply["type"] != "observation":
                raise SystemExit(f"step failed: {reply}")
            latencies.append((episode, k, time.perf_counter() - started))
        await ws.send(json.dumps({"type": "close"}))


async def http_agent(url, steps, latencies, ready, go, *, delay_s, think_s) -> None:
    """The same agent over OpenEnv's HTTP routes (POST reset, POST step), on the studio's
    own lean HTTP client (httpx's pool would cost the agents more than the studio)."""
    from studio.serving.model_http import Client

    client = Client()

    async def post(path: str, body: dict) -> dict:
        answer = await client.request(
            "POST", f"{url}/{path}", body=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"}, timeout=120,
        )  # fmt: skip
        if answer.status != 200:
            raise SystemExit(f"{path} failed: HTTP {answer.status} {answer.text[:300]}")
        return json.loads(answer.content)

    episode = (await post("reset", {"task": "look around"}))["observation"]["episode_id"]
    await ready.wait()
    await go.wait()
    await asyncio.sleep(delay_s)
    for k in range(steps):
        if k and think_s:
            await asyncio.sleep(think_s)
        started = time.perf_counter()
        await post("step", {"episode_id": episode, "action": {"action": f"cat /srv/a.txt # {k}"}})
        latencies.append((int(episode), k, time.perf_counter() - started))
    await client.close()


def _cpu_s(pid: int) -> float:
    """CPU seconds (user + system) of a process and its threads, from /proc (Linux)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _processes() -> list[tuple[int, str, int]]:
    """(pid, command name, process group) of every process."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                comm = (entry / "comm").read_text().strip()
                pgrp = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[2])
            except (OSError, ValueError, IndexError):
                continue
            found.append((int(entry.name), comm, pgrp))
    return found


def _pids_named(*names: str) -> list[int]:
    return [pid for pid, comm, _ in _processes() if comm in names]


SHARED_POSTGRES = ("checkpointer", "background writer", "walwriter")


def _postgres_pids(database: str) -> list[int]:
    """PostgreSQL's processes that work for this bench: the backends connected to its
    database, and the writers every database shares (other databases' backends, such as a
    test run's, are not counted)."""
    found = []
    for pid in _pids_named("postgres"):
        try:
            title = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        parts = title.split(": ", 2)
        what = parts[-1] if len(parts) == 3 else title
        if what.strip() in SHARED_POSTGRES:
            found.append(pid)
        elif len(what.split()) > 1 and what.split()[1] == database:
            found.append(pid)
    return found


def _pids_in_group(pgrp: int) -> list[int]:
    """A process and the children it started (uvicorn's workers): one process group."""
    return [pid for pid, _, group in _processes() if group == pgrp]


def cpu_snapshot(roles: dict[str, Any]) -> dict[str, dict[int, float]]:
    """CPU seconds of each process by role so far (a role's processes are listed anew each
    time: database connections open during the run)."""
    return {role: {pid: _cpu_s(pid) for pid in pids()} for role, pids in roles.items()}


def cpu_spent(before: dict, after: dict) -> dict[str, float]:
    return {
        role: sum(s - before[role].get(pid, 0.0) for pid, s in after[role].items())
        for role in after
    }


STUDIO_ROLES = ("web (uvicorn)", "workers", "database", "broker")
GOAL_CPU_S = 0.006
GOAL_P50_S, GOAL_P95_S, GOAL_ONE_S = 0.050, 0.150, 0.010


def main() -> None:
    args = parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-episodes-") as tmpdir:
        tmp = Path(tmpdir)
        setup_environment(tmp)
        # The model server, the web server and the workers are processes of their own, as
        # in production: in one process they would share one interpreter lock.
        procs = []
        results = []
        try:
            model_proc, model_url = start_model(tmp / "model.log", args.model_ms / 1000)
            procs.append(model_proc)
            world, token = prepare(model_url)
            workers = [
                start_worker(tmp / f"worker-{i}.log", args.threads)
                for i in range(args.episode_workers)
            ]
            procs.extend(workers)
            web_proc, base = start_web(tmp / "web.log", args.web_workers)
            procs.append(web_proc)
            url = f"{base}/env/t/{token}/worlds/{world.pk}"
            if args.transport == "ws":
                url = url.replace("http://", "ws://") + "/ws"
            roles = {
                "web (uvicorn)": lambda: _pids_in_group(web_proc.pid),
                "workers": lambda: [p for w in workers for p in _pids_in_group(w.pid)],
                "database": lambda: _postgres_pids(_database_name()),
                "broker": lambda: _pids_named("redis-server"),
                "model server (fake)": lambda: [model_proc.pid],
                "agents (this script)": lambda: [os.getpid()],
            }
            warm(url, max(args.agents))
            for n, agents in enumerate(args.agents):
                profiler = start_profile(args, web_proc, tmp, n)
                results.append(run_scenario(args, agents, url, roles))
                stop_profile(profiler, args, n)
        finally:
            for proc in reversed(procs):
                stop(proc)
        for agents, latencies, wall, spent in results:
            report(args, agents, latencies, wall, spent)


def warm(url: str, agents: int) -> None:
    """Steps of `agents` agents at once before anything is measured: the web process's
    first steps pay its imports, its connections to the database, the broker and the model
    server are opened (what a process does once, not per step)."""

    async def play(k: int) -> None:
        if url.startswith("http"):
            ready = asyncio.Barrier(1)
            go = asyncio.Event()
            go.set()
            await http_agent(url, 3, [], ready, go, delay_s=0.0, think_s=0.0)
            return
        from websockets.asyncio.client import connect

        async with connect(url, max_size=2**24) as ws:
            await ws.send(json.dumps({"type": "reset", "data": {"task": "warm up"}}))
            await ws.recv()
            for step in range(3):
                await ws.send(json.dumps({"type": "step", "data": {"action": f"ls {k} {step}"}}))
                reply = json.loads(await ws.recv())
                if reply["type"] != "observation":
                    raise SystemExit(f"the warm-up step failed: {reply}")

    async def all_of() -> None:
        await asyncio.gather(*(play(k) for k in range(agents)))

    asyncio.run(all_of())


def start_profile(args, web_proc: subprocess.Popen, tmp: Path, n: int):
    if not args.profile:
        return None
    import shutil

    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    Path(args.profile).mkdir(parents=True, exist_ok=True)
    return subprocess.Popen(
        [spy, "record", "--pid", str(web_proc.pid), "--rate", "500", "--format", "speedscope",
         "--output", str(Path(args.profile) / f"web-{n}.json"), "--nonblocking"],
        stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
    )  # fmt: skip


def stop_profile(profiler, args, n: int) -> None:
    if profiler is not None:
        profiler.send_signal(signal.SIGINT)
        profiler.wait(timeout=60)


def _steps(args, agents: int) -> int:
    return args.steps_alone if agents == 1 else args.steps


def run_scenario(args, agents: int, url: str, roles: dict[str, Any]):
    latencies: list[tuple[int, int, float]] = []
    timing: dict[str, Any] = {}

    async def run_all() -> None:
        ready, go = asyncio.Barrier(agents + 1), asyncio.Event()
        period_s = (args.model_ms + args.think_ms) / 1000
        tasks = [
            asyncio.create_task(
                agent(
                    url, _steps(args, agents), latencies, ready, go,
                    delay_s=period_s * i / agents if args.stagger else 0.0,
                    think_s=args.think_ms / 1000,
                )
            )
            for i in range(agents)
        ]  # fmt: skip
        await ready.wait()  # every agent has reset its episode
        timing["before"] = cpu_snapshot(roles)
        timing["started"] = time.perf_counter()
        go.set()
        await asyncio.gather(*tasks)
        timing["wall"] = time.perf_counter() - timing["started"]
        timing["after"] = cpu_snapshot(roles)

    asyncio.run(run_all())
    return agents, latencies, timing["wall"], cpu_spent(timing["before"], timing["after"])


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * (len(ordered) - 1) + 0.5))]


def report(args, agents: int, latencies, wall: float, spent: dict[str, float]) -> None:
    n = max(1, len(latencies))
    model_s = args.model_ms / 1000
    overheads = [max(0.0, latency - model_s) for _, _, latency in latencies]
    p50 = statistics.median(overheads)
    p95 = _percentile(overheads, 0.95)
    studio = sum(spent.get(role, 0.0) for role in STUDIO_ROLES) / n
    db = "PostgreSQL" if "postgres" in os.environ.get("DATABASE_URL", "") else "SQLite"
    broker = "Redis" if os.environ.get("REDIS_URL") else "filesystem broker"
    arrival = "staggered over a step" if args.stagger else "in lock-step"
    think = f", agents think {args.think_ms:.0f} ms" if args.think_ms else ""
    workers = (
        f", {args.episode_workers} episodes worker(s) of {args.threads} threads"
        if args.episode_workers
        else ""
    )
    print(f"\n== {agents} agent{'s' if agents != 1 else ''} x {_steps(args, agents)} steps over {'WebSocket' if args.transport == 'ws' else 'HTTP'} "
          f"({arrival}{think}), {db}, {broker}, {args.web_workers} web process(es){workers}, "
          f"model time {args.model_ms:.0f} ms per request")  # fmt: skip
    print(f"steps: {len(latencies)} in {wall:.2f} s = {len(latencies) / wall:.1f} steps/s")
    if agents == 1:
        goal, met = f"goal: under {GOAL_ONE_S * 1000:.0f} ms", p50 < GOAL_ONE_S
    else:
        goal = f"goal: p50 under {GOAL_P50_S * 1000:.0f} ms, p95 under {GOAL_P95_S * 1000:.0f} ms"
        met = p50 < GOAL_P50_S and p95 < GOAL_P95_S
    print(f"studio overhead per step (latency minus the model's {args.model_ms:.0f} ms): "
          f"p50 {p50 * 1000:.1f} ms, p95 {p95 * 1000:.1f} ms ({goal}) -> "
          f"{'met' if met else 'not met'}")  # fmt: skip
    first = [max(0.0, lat - model_s) for _, k, lat in latencies if k == 0]
    later = [max(0.0, lat - model_s) for _, k, lat in latencies if k > 0]
    if first and later:
        print(f"  the episodes' first steps (the process reads each episode's world, task and "
              f"history once): p50 {statistics.median(first) * 1000:.1f} ms; the later steps: "
              f"p50 {statistics.median(later) * 1000:.1f} ms, p95 "
              f"{_percentile(later, 0.95) * 1000:.1f} ms")  # fmt: skip
    print(f"CPU per step over the studio's processes: {studio * 1000:.2f} ms (goal: at most "
          f"{GOAL_CPU_S * 1000:.0f} ms) -> {'met' if studio <= GOAL_CPU_S else 'not met'}")  # fmt: skip
    print(f"CPU per step by process ({os.cpu_count()} cores; "
          f"{sum(spent.values()) / wall:.2f} cores busy): "
          + ", ".join(f"{role} {s / n * 1000:.2f} ms" for role, s in spent.items()))  # fmt: skip
    where_it_goes(args, latencies)
    for line in capacity(args, agents, studio, os.cpu_count() or 1):
        print(line)


def where_it_goes(args, latencies) -> None:
    """The medians of what the web process timed of each step (Step.meta["latency_s"], a
    served model's step): its read of the episode, the model's request beyond the model's
    own time, the rest of the step until its write, and what the agent saw beyond that (the
    write, the WebSocket both ways, waiting for the event loop)."""
    from studio.models import Step

    episodes = {episode for episode, _, _ in latencies}
    timed = {
        (traj, index): (meta or {}).get("latency_s")
        for traj, index, meta in Step.objects.filter(
            branch__trajectory_id__in=episodes
        ).values_list("branch__trajectory_id", "index", "meta")
    }
    parts: dict[str, list[float]] = {"read": [], "model": [], "rest": [], "outside": []}
    model_s = args.model_ms / 1000
    for episode, k, latency in latencies:
        got = timed.get((episode, k))
        if not isinstance(got, dict):
            continue
        parts["read"].append(got["read"])
        parts["model"].append(max(0.0, got["model"] - model_s))
        parts["rest"].append(max(0.0, got["step"] - got["read"] - got["model"]))
        parts["outside"].append(max(0.0, latency - got["step"]))
    if parts["read"]:
        print("where it goes (medians, web process): "
              + ", ".join(f"{name} {statistics.median(v) * 1000:.1f} ms"
                          for name, v in parts.items()))  # fmt: skip


def capacity(args, agents: int, cpu_per_step_s: float, cores: int) -> list[str]:
    """What the studio's CPU per step means on this many cores: the steps per second the
    machine can carry, the rate the agents ask for with a 50 ms overhead, and how long the
    steps of all agents arriving at once (lock-step) take to work off."""
    carry = cores / max(cpu_per_step_s, 1e-6)
    period = (args.model_ms + args.think_ms) / 1000 + GOAL_P50_S
    need = agents / period
    burst = agents * cpu_per_step_s / cores
    lines = [
        f"capacity: {cores} cores / {cpu_per_step_s * 1000:.2f} ms of studio CPU per step = "
        f"{carry:.0f} steps/s; {agents} agent(s) at {args.model_ms:.0f} ms model"
        + (f" + {args.think_ms:.0f} ms thinking" if args.think_ms else "")
        + f" and a 50 ms overhead ask {need:.0f} steps/s"
        + (" (more than the machine carries)" if need > carry else ""),
    ]
    if not args.stagger and agents > 1:
        lines.append(
            f"lock-step: {agents} steps arriving at once take {burst * 1000:.0f} ms of these "
            f"{cores} cores to work off (the median step waits about half of it)"
        )
    return lines


if __name__ == "__main__":
    main()
