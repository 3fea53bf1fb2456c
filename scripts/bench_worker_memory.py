"""Worker memory of a simulation with many futures over a long history.

A real Celery worker (solo pool: the job runs in the process we measure) simulates 64 futures
at steps 10, 400 and 1,000 of a 2,000-step trajectory whose observations are 100 KB each
(200 MB of text), with the retrieval baseline, one job per fresh worker. For each point it
prints the worker's peak resident memory (VmHWM), what it keeps once the job is done (VmRSS),
the history the prompt carries and the time taken. Goal (issue 7): under 512 MB at every
point.

    python scripts/bench_worker_memory.py                  # SQLite + filesystem broker in a temp dir
    DATABASE_URL=postgres://... REDIS_URL=redis://... python scripts/bench_worker_memory.py
    python scripts/bench_worker_memory.py --forks 10,400,1000 --futures 64 --obs-kb 100
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--obs-kb", type=int, default=100)
    parser.add_argument("--futures", type=int, default=64)
    parser.add_argument("--forks", default="10,400,1000")
    parser.add_argument("--goal-mb", type=float, default=512)
    return parser.parse_args()


def setup_environment(tmp: Path) -> None:
    os.environ.setdefault("DEBUG", "1")  # as scripts/dev.sh runs it
    os.environ["STUDIO_DATA_DIR"] = str(tmp)
    os.environ.setdefault("DATABASE_URL", f"sqlite:///{tmp / 'bench.sqlite3'}")
    if not os.environ.get("REDIS_URL"):
        os.environ["STUDIO_BROKER"] = "filesystem"
    os.environ["STUDIO_QUEUE_PREFIX"] = f"bench{os.getpid()}-"
    os.environ["DJANGO_SETTINGS_MODULE"] = "studio.settings"
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def observation(i: int, size: int) -> str:
    """A distinct, realistic-looking terminal output of `size` characters."""
    line = f"{i:05d} drwxr-xr-x 2 deploy deploy 4096 Mar  3 10:{i % 60:02d} build-{i}-part-"
    body = []
    n = 0
    while n < size:
        text = f"{line}{n // len(line)}\n"
        body.append(text)
        n += len(text)
    return "".join(body)[:size]


def make_trajectory(steps: int, obs_chars: int):
    from studio.models import Branch, Project, Step, Trajectory

    project = Project.objects.create(name=f"memory bench {os.getpid()}")
    trajectory = Trajectory.objects.create(
        project=project,
        domain="terminal",
        title="A long build session",
        task_instruction="Find why the build directory keeps growing.",
        source_format="bench",
        source_key="bench",
        step_count=steps,
    )
    root = Branch.objects.create(trajectory=trajectory, name="recorded")
    batch = []
    for i in range(steps):
        batch.append(
            Step(
                branch=root,
                index=i,
                action=f"ls -la /srv/build/{i}",
                observation=observation(i, obs_chars),
            )
        )
        if len(batch) == 50:
            Step.objects.bulk_create(batch)
            batch = []
    Step.objects.bulk_create(batch)
    return root


def memory_kb(pid: int) -> dict[str, int]:
    found = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmHWM", "VmRSS"):
            found[key] = int(value.split()[0])
    return found


def start_worker(log: Path) -> subprocess.Popen:
    from django.conf import settings

    queue = f"{settings.STUDIO_QUEUE_PREFIX}default"
    out = open(log, "wb")  # noqa: SIM115 - the worker writes it until stopped
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "studio",
            "worker",
            "-Q",
            queue,
            "--pool",
            "solo",
            "-l",
            "INFO",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
            "-n",
            f"bench-{time.monotonic_ns()}@%h",
        ],  # fmt: skip
        cwd=ROOT,
        env=dict(os.environ),
        stdout=out,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    deadline = time.monotonic() + 120
    while b"ready." not in log.read_bytes():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"the worker did not start:\n{log.read_text()[-3000:]}")
        time.sleep(0.2)
    return proc


def stop_worker(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def main() -> None:
    args = parse_args()
    with tempfile.TemporaryDirectory(prefix="studio-membench-") as tmp_name:
        tmp = Path(tmp_name)
        setup_environment(tmp)
        obs_chars = args.obs_kb * 1000
        started = time.monotonic()
        root = make_trajectory(args.steps, obs_chars)
        try:
            run_points(args, root, tmp, obs_chars, started)
        finally:
            root.trajectory.project.delete()  # a PostgreSQL database keeps nothing of it


def run_points(args, root, tmp: Path, obs_chars: int, started: float) -> None:
    from studio.models import SimulationJob
    from studio.services.simulation import build_request, start_simulation
    from studio.tasks import enqueue_simulation

    print(
        f"trajectory: {args.steps} steps x {args.obs_kb} KB observations "
        f"({args.steps * obs_chars / 1e6:.0f} MB of text), written in "
        f"{time.monotonic() - started:.1f} s"
    )
    print(f"{args.futures} futures per job (next observation), retrieval baseline, solo pool")
    print(f"{'fork step':>9}  {'history':>9}  {'idle worker':>11}  {'peak':>9}  "
          f"{'after job':>9}  {'job':>9}  {'time':>7}  goal")  # fmt: skip
    worst = 0.0
    for fork in [int(f) for f in args.forks.split(",")]:
        log = tmp / f"worker-{fork}.log"
        proc = start_worker(log)
        try:
            idle = memory_kb(proc.pid)["VmRSS"]
            data = {"fork_index": fork, "n": args.futures}
            job = start_simulation(user=None, branch=root, request=build_request(root, data))
            t0 = time.monotonic()
            enqueue_simulation(job)
            while True:
                job.refresh_from_db()
                if job.is_finished:
                    break
                time.sleep(0.2)
            elapsed = time.monotonic() - t0
            time.sleep(0.5)  # let the worker return to idle before reading VmRSS
            mem = memory_kb(proc.pid)
        finally:
            stop_worker(proc)
        peak_mb = mem["VmHWM"] / 1024
        worst = max(worst, peak_mb)
        history_mb = data["fork_index"] * obs_chars / 1e6
        verdict = "ok" if peak_mb < args.goal_mb else "OVER"
        print(
            f"{data['fork_index']:>9}  {history_mb:>6.0f} MB  {idle / 1024:>8.0f} MB  "
            f"{peak_mb:>6.0f} MB  {mem['VmRSS'] / 1024:>6.0f} MB  {job.status:>9}  "
            f"{elapsed:>5.1f} s  {verdict}"
        )
        if job.status != "succeeded":
            print(f"  job error: {job.error}")
        SimulationJob.objects.filter(pk=job.pk).delete()
    print(
        f"worst peak {worst:.0f} MB against a goal of {args.goal_mb:.0f} MB: "
        f"{worst / args.goal_mb:.2f}x the goal ({'PASS' if worst < args.goal_mb else 'FAIL'})"
    )


if __name__ == "__main__":
    main()
