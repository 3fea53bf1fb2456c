"""Episodes served to outside agents: throughput and the studio's own overhead per step.

32 agents play a world at once over the episode API's WebSocket (OpenEnv's message
protocol), 10 steps each, against the fake OpenAI-compatible server on 127.0.0.1 (a real
HTTP server answering after a fixed model time). The studio runs as it does in production:
uvicorn with the ASGI app, the episodes queue's Celery worker (a threads pool), the database
and the broker. For each step it takes the latency the agent saw, minus the model time the
step recorded (the world model's request, as the worker timed it): the studio's own
overhead, queueing in the workers included. Prints steps per second and the overhead's p50
and p95 (goal: p50 under 50 ms), the CPU every process spent per step, and what that CPU
means on this machine's cores (`capacity`).

By default every agent sends its next action the moment it has an observation, all of them
in lock-step, as a batch of environments that an RL trainer steps together: the harshest
arrival, where 32 steps come at once. `--stagger` spreads the agents over one step's time,
`--think-ms` gives each agent a policy's time between steps.

    python scripts/bench_episodes.py                      # SQLite + filesystem broker, temp dir
    DATABASE_URL=postgres://... REDIS_URL=redis://... python scripts/bench_episodes.py
    python scripts/bench_episodes.py --agents 32 --steps 10 --model-ms 50 --threads 32
    python scripts/bench_episodes.py --model-ms 1000 --stagger
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
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
    parser.add_argument("--agents", type=int, default=32)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--model-ms", type=float, default=50.0, help="the fake model's time")
    parser.add_argument(
        "--threads", type=int, default=32, help="threads of each episodes worker (as in dev.sh)"
    )
    parser.add_argument("--episode-workers", type=int, default=1, help="episodes workers")
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


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_line(proc: subprocess.Popen, log: Path, marker: bytes, what: str) -> None:
    deadline = time.monotonic() + 60
    while marker not in log.read_bytes():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"{what} did not start:\n{log.read_text()[-3000:]}")
        time.sleep(0.1)


def start_model(log: Path, delay_s: float) -> tuple[subprocess.Popen, str]:
    """The fake OpenAI-compatible server (tests/support/fake_openai.py) in its own process."""
    code = (
        f"import sys, threading; sys.path.insert(0, {str(ROOT)!r})\n"
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


def start_web(log: Path) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    out = open(log, "wb")  # noqa: SIM115 - the server writes it until stopped
    proc = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "studio.asgi:application", "--host", "127.0.0.1",
         "--port", str(port)],
        cwd=ROOT, env=dict(os.environ), stdout=out, stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip
    _wait_line(proc, log, b"Uvicorn running", "the web server")
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
    latencies: list[tuple[int, float]],
    ready: asyncio.Barrier,
    go,
    *,
    delay_s: float = 0.0,
    think_s: float = 0.0,
) -> None:
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
            latencies.append((episode, time.perf_counter() - started))
        await ws.send(json.dumps({"type": "close"}))


def _cpu_s(pid: int) -> float:
    """CPU seconds (user + system) of a process and its threads, from /proc (Linux)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _pids_named(*names: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                comm = (entry / "comm").read_text().strip()
            except OSError:
                continue
            if comm in names:
                found.append(int(entry.name))
    return found


def cpu_snapshot(roles: dict[str, Any]) -> dict[str, dict[int, float]]:
    """CPU seconds of each process by role so far (a role's processes are listed anew each
    time: database connections open during the run)."""
    return {role: {pid: _cpu_s(pid) for pid in pids()} for role, pids in roles.items()}


def cpu_spent(before: dict, after: dict) -> dict[str, float]:
    return {
        role: sum(s - before[role].get(pid, 0.0) for pid, s in after[role].items())
        for role in after
    }


def main() -> None:
    args = parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-episodes-") as tmpdir:
        tmp = Path(tmpdir)
        setup_environment(tmp)
        # The model server, the web server and the workers are processes of their own, as
        # in production: in one process they would share one interpreter lock.
        procs = []
        try:
            model_proc, model_url = start_model(tmp / "model.log", args.model_ms / 1000)
            procs.append(model_proc)
            world, token = prepare(model_url)
            workers = [
                start_worker(tmp / f"worker-{i}.log", args.threads)
                for i in range(args.episode_workers)
            ]
            procs.extend(workers)
            web_proc, base = start_web(tmp / "web.log")
            procs.append(web_proc)
            url = base.replace("http://", "ws://") + f"/env/t/{token}/worlds/{world.pk}/ws"
            latencies: list[tuple[int, float]] = []

            roles = {
                "web (uvicorn)": lambda: [web_proc.pid],
                "workers": lambda: [w.pid for w in workers],
                "model server (fake)": lambda: [model_proc.pid],
                "database": lambda: _pids_named("postgres"),
                "broker": lambda: _pids_named("redis-server"),
                "agents (this script)": lambda: [os.getpid()],
            }
            timing: dict[str, Any] = {}

            async def run_all() -> None:
                ready, go = asyncio.Barrier(args.agents + 1), asyncio.Event()
                period_s = (args.model_ms + args.think_ms) / 1000
                agents = [
                    asyncio.create_task(
                        agent(
                            url, args.steps, latencies, ready, go,
                            delay_s=period_s * i / args.agents if args.stagger else 0.0,
                            think_s=args.think_ms / 1000,
                        )
                    )
                    for i in range(args.agents)
                ]  # fmt: skip
                await ready.wait()  # every agent has reset its episode
                timing["before"] = cpu_snapshot(roles)
                timing["started"] = time.perf_counter()
                go.set()
                await asyncio.gather(*agents)
                timing["wall"] = time.perf_counter() - timing["started"]
                timing["after"] = cpu_snapshot(roles)

            asyncio.run(run_all())
            wall, before, after = timing["wall"], timing["before"], timing["after"]
        finally:
            for proc in reversed(procs):
                stop(proc)
        report(args, latencies, wall, world.project_id)
        n = max(1, len(latencies))
        spent = cpu_spent(before, after)
        print(f"CPU per step ({os.cpu_count()} cores; {sum(spent.values()) / wall:.2f} cores busy): "
              + ", ".join(f"{role} {s / n * 1000:.1f} ms" for role, s in spent.items()))  # fmt: skip
        for line in capacity(args, sum(spent.values()) / n, os.cpu_count() or 1):
            print(line)


GOAL_S = 0.050


def capacity(args, cpu_per_step_s: float, cores: int) -> list[str]:
    """What the CPU per step means for the goal on this many cores: the steps per second
    the machine can carry, the rate the agents ask for with a 50 ms overhead, and how long
    the steps of all agents arriving at once (lock-step) take to work off. A step's CPU is
    every process's: the agents' and the fake model's are in it too (under 1 ms)."""
    carry = cores / cpu_per_step_s
    period = (args.model_ms + args.think_ms) / 1000 + GOAL_S
    need = args.agents / period
    burst = args.agents * cpu_per_step_s / cores
    lines = [
        f"capacity: {cores} cores / {cpu_per_step_s * 1000:.1f} ms of CPU per step = "
        f"{carry:.0f} steps/s; {args.agents} agents at {args.model_ms:.0f} ms model"
        + (f" + {args.think_ms:.0f} ms thinking" if args.think_ms else "")
        + f" and a 50 ms overhead ask {need:.0f} steps/s"
        + (" (more than the machine carries)" if need > carry else ""),
    ]
    if not args.stagger and args.agents > 1:
        lines.append(
            f"lock-step: {args.agents} steps arriving at once take {burst * 1000:.0f} ms of "
            f"these {cores} cores to work off (the median step waits about half of it); a "
            f"p50 under 50 ms needs at most {2 * GOAL_S * cores / args.agents * 1000:.1f} ms "
            f"of CPU per step on {cores} cores, or {math.ceil(args.agents * cpu_per_step_s / (2 * GOAL_S))}"
            " cores at this cost"
        )  # fmt: skip
    return lines


def report(args, latencies, wall: float, project_id: int) -> None:
    from studio.models import Step

    model_s = {}
    for traj_id, index, timings in Step.objects.filter(
        branch__trajectory__source_format="episode", branch__trajectory__project_id=project_id
    ).values_list("branch__trajectory_id", "index", "timings"):
        model_s.setdefault(traj_id, []).append((index, float((timings or {}).get("duration_s", 0))))
    model_total = sum(s for steps in model_s.values() for _, s in steps)
    n = len(latencies)
    overheads = []
    by_episode: dict[int, list[float]] = {}
    for episode, latency in latencies:
        by_episode.setdefault(episode, []).append(latency)
    for episode, lats in by_episode.items():
        models = [s for _, s in sorted(model_s.get(episode, []))]
        for latency, model in zip(lats, models, strict=False):
            overheads.append(max(0.0, latency - model))
    overheads.sort()
    p50 = statistics.median(overheads) * 1000
    p95 = overheads[int(0.95 * (len(overheads) - 1))] * 1000
    db = "PostgreSQL" if "postgres" in os.environ.get("DATABASE_URL", "") else "SQLite"
    broker = "Redis" if os.environ.get("REDIS_URL") else "filesystem broker"
    arrival = "staggered over a step" if args.stagger else "in lock-step"
    think = f", agents think {args.think_ms:.0f} ms" if args.think_ms else ""
    print(f"episodes: {args.agents} agents x {args.steps} steps over WebSocket ({arrival}{think}), {db}, {broker}, "
          f"{args.episode_workers} episodes worker(s) of {args.threads} threads, model time {args.model_ms:.0f} ms per request")  # fmt: skip
    print(f"steps: {n} in {wall:.2f} s = {n / wall:.1f} steps/s")
    print(f"model time recorded: {model_total / max(1, n) * 1000:.1f} ms per step on average")
    from studio.models import SimulationJob

    jobs = list(SimulationJob.objects.filter(appends=True, trajectory__project_id=project_id))
    waits = sorted((j.started_at - j.created_at).total_seconds() for j in jobs if j.started_at)
    runs = sorted(j.ran_s or 0.0 for j in jobs)
    # the web side's part: the agent's latency less the row's life (created to finished)
    lived = {
        (j.trajectory_id, j.fork_index): (j.finished_at - j.created_at).total_seconds()
        for j in jobs
        if j.finished_at
    }
    web_side = sorted(
        max(0.0, lat - lived[(episode, k)])
        for episode, lats in by_episode.items()
        for k, lat in enumerate(lats)
        if (episode, k) in lived
    )
    if jobs:
        print(f"where it goes (medians): queued {statistics.median(waits) * 1000:.1f} ms "
              f"(created to claimed), in the worker {statistics.median(runs) * 1000:.1f} ms "
              f"(claimed to finished, model time included), in the web process "
              f"{statistics.median(web_side or [0.0]) * 1000:.1f} ms (before the row and after "
              f"the answer; p95 {web_side[int(0.95 * (len(web_side) - 1))] * 1000 if web_side else 0:.1f} ms)")  # fmt: skip
    print(f"studio overhead per step (latency minus model time, queueing included): "
          f"p50 {p50:.1f} ms, p95 {p95:.1f} ms (goal: p50 under 50 ms) -> "
          f"{'met' if p50 < 50 else 'not met'}")  # fmt: skip


if __name__ == "__main__":
    main()
