"""Benchmark: server time and query count of the trajectory page for a long trajectory.

Creates a trajectory of --steps steps (default 2,000) whose observations are --obs-kb KB each
(default 100) on the configured database (DATABASE_URL), then requests, with Django's test
client, the page (first window of steps), a window of steps from the middle (the lazy
loading partial) and one full observation, --runs times each, and prints the median server
time, the response size and the number of SQL queries. A 20-step trajectory is measured the
same way for comparison. Everything created is deleted at the end (unless --keep).

    DEBUG=1 DATABASE_URL=postgres://... python scripts/bench_trajectory_page.py
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "studio.settings")

import django  # noqa: E402

django.setup()

from django.contrib.auth import get_user_model  # noqa: E402
from django.db import connection, transaction  # noqa: E402
from django.test import Client  # noqa: E402
from django.test.utils import CaptureQueriesContext  # noqa: E402
from django.urls import reverse  # noqa: E402

from studio.models import Branch, Membership, Project, Role, Step, Trajectory  # noqa: E402
from studio.views.trajectories import STEPS_PER_PAGE  # noqa: E402


def observation(i: int, size: int) -> str:
    line = f"[{i:05d}] \x1b[32mINFO\x1b[0m worker processed item <{i}> in 12 ms & queued next\n"
    return (line * (size // len(line) + 1))[:size]


def create_trajectory(project: Project, n_steps: int, obs_bytes: int) -> Trajectory:
    with transaction.atomic():
        traj = Trajectory.objects.create(
            project=project,
            domain="terminal",
            title=f"bench {n_steps} steps x {obs_bytes // 1024} KB",
            task_instruction="Benchmark trajectory",
            source_format="bench",
            source_key=uuid.uuid4().hex,
            step_count=n_steps,
        )
        root = Branch.objects.create(trajectory=traj, name="recorded")
        batch = []
        for i in range(n_steps):
            batch.append(
                Step(
                    branch=root,
                    index=i,
                    action=f"tail -n 2000 /var/log/app-{i}.log",
                    observation=observation(i, obs_bytes),
                    thinking="Look at the log." if i % 5 == 0 else "",
                )
            )
            if len(batch) == 100:
                Step.objects.bulk_create(batch)
                batch = []
        Step.objects.bulk_create(batch)
    return traj


def measure(client: Client, url: str, runs: int) -> dict:
    times, queries, size = [], 0, 0
    for _ in range(runs):
        with CaptureQueriesContext(connection) as ctx:
            start = time.perf_counter()
            response = client.get(url)
            times.append(time.perf_counter() - start)
        assert response.status_code == 200, (url, response.status_code)
        queries, size = len(ctx.captured_queries), len(response.content)
    return {"median_ms": statistics.median(times) * 1000, "queries": queries, "bytes": size}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--obs-kb", type=int, default=100)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--keep", action="store_true", help="keep the benchmark project")
    args = parser.parse_args()

    vendor = connection.vendor
    project = Project.objects.create(name=f"bench-ui-{uuid.uuid4().hex[:8]}")
    user = get_user_model().objects.create_user(f"bench-{uuid.uuid4().hex[:8]}")
    Membership.objects.create(project=project, user=user, role=Role.RESEARCHER)
    try:
        t0 = time.perf_counter()
        big = create_trajectory(project, args.steps, args.obs_kb * 1024)
        created_s = time.perf_counter() - t0
        small = create_trajectory(project, 20, args.obs_kb * 1024)
        client = Client()
        client.force_login(user)
        middle = (args.steps // 2) - (args.steps // 2) % STEPS_PER_PAGE
        step = Step.objects.get(branch__trajectory=big, index=middle)
        rows = {
            "page (first window)": reverse("trajectory", args=[big.pk]),
            f"steps window at {middle}": reverse("trajectory_steps", args=[big.pk])
            + f"?start={middle}",
            "page jump ?step=N": reverse("trajectory", args=[big.pk]) + f"?step={args.steps - 1}",
            "one full observation": reverse("step_observation", args=[step.pk]),
            "page, 20-step trajectory": reverse("trajectory", args=[small.pk]),
        }
        client.get(rows["page (first window)"])  # warm up templates and the session
        results = {name: measure(client, url, args.runs) for name, url in rows.items()}
    finally:
        if not args.keep:
            project.delete()
            user.delete()

    total_mb = args.steps * args.obs_kb / 1024
    print(
        f"database: {vendor}; trajectory: {args.steps} steps x {args.obs_kb} KB observations "
        f"({total_mb:.0f} MB of observations, created in {created_s:.1f} s); "
        f"{STEPS_PER_PAGE} steps per window; median of {args.runs} runs"
    )
    print(f"{'request':<28} {'median ms':>10} {'queries':>8} {'response KB':>12}")
    for name, r in results.items():
        print(f"{name:<28} {r['median_ms']:>10.1f} {r['queries']:>8} {r['bytes'] / 1024:>12.1f}")
    big_page, small_page = results["page (first window)"], results["page, 20-step trajectory"]
    print(
        f"ratio {args.steps}-step page / 20-step page: time x{big_page['median_ms'] / small_page['median_ms']:.2f}, "
        f"queries {big_page['queries']} vs {small_page['queries']}"
    )
    print(
        f"first response carries {STEPS_PER_PAGE} of {args.steps} steps; "
        f"{big_page['bytes'] / 1024:.0f} KB vs {total_mb * 1024:.0f} KB of observations"
    )


if __name__ == "__main__":
    main()
