"""Benchmark: the outcomes view (compare with `?fork=&at=`) for 64 futures of two models.

Creates an MCP trajectory of 10 recorded steps whose observations are JSON flight searches of
about --obs-kb KB (default 4), forked at step 3 by three jobs of two world models (model A:
two jobs of 16 futures at T 0.7; model B: one job of 32 at T 1.0), each future a rollout of
two steps (3 and 4) whose observations fall into a few families of near-duplicates, a few
malformed, one failed at step 4. Then requests the page with Django's test client --runs
times (meaning and word diffs), and prints the median server time, the number
of SQL queries and the response size. Everything created is deleted at the end (unless
--keep). The issue asks for under 1 s on 2 cores: run it pinned to two,

    DEBUG=1 taskset -c 0,1 python scripts/bench_outcomes.py [--obs-kb 4] [--runs 7]
"""

from __future__ import annotations

import argparse
import json
import os
import random
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

from studio.models import (  # noqa: E402
    Branch,
    Membership,
    Project,
    Role,
    SimulationJob,
    Step,
    Trajectory,
)

CITIES = ["LYS", "CDG", "AMS", "FRA", "MAD", "LIS", "FCO", "VIE", "ZRH", "CPH"]


def flights(seed: int, size: int, *, family: int = 0) -> str:
    """A JSON search result of about `size` bytes: a family's flights, one price by seed."""
    rng = random.Random(family)
    results = []
    while len(json.dumps(results)) < size:
        results.append(
            {
                "flight": f"{rng.choice(['AF', 'KL', 'LH', 'IB'])}{rng.randint(100, 9999)}",
                "from": rng.choice(CITIES),
                "to": rng.choice(CITIES),
                "departs": f"2026-12-{rng.randint(1, 28):02d}T{rng.randint(0, 23):02d}:05",
                "seats": rng.randint(0, 9),
                "price_eur": rng.randint(40, 900),
                "fare": rng.choice(["basic", "standard", "flex"]),
            }
        )
    results[len(results) // 2]["price_eur"] = 100 + seed  # near-duplicates within a family
    return json.dumps({"results": results, "count": len(results)}, indent=2)


def build(project: Project, size: int) -> tuple[Trajectory, Branch]:
    with transaction.atomic():
        trajectory = Trajectory.objects.create(
            project=project,
            domain="mcp",
            title="bench outcomes",
            source_format="bench",
            source_key=uuid.uuid4().hex,
            step_count=10,
        )
        root = Branch.objects.create(trajectory=trajectory, name="recorded")
        Step.objects.bulk_create(
            Step(
                branch=root,
                index=i,
                action=json.dumps({"name": "search_flights", "arguments": {"page": i}}),
                observation=flights(i, size, family=i),
            )
            for i in range(10)
        )
        action = root.all_steps().get(index=3).action
        plans = [("alpha", "m-a", 0.7, 16), ("alpha", "m-a", 0.7, 16), ("beta", "m-b", 1.0, 32)]
        sample = 0
        for name, model, temperature, n in plans:
            job = SimulationJob.objects.create(
                trajectory=trajectory,
                branch=root,
                fork_index=3,
                action=action,
                n=n,
                status="succeeded",
                backend="openai",
                model=model,
                world_name=name,
                mode="rollout",
                max_steps=2,
                params={"temperature": temperature, "top_p": 0.95, "max_tokens": 2048},
            )
            for k in range(n):
                failed_later = k == n - 1
                child = Branch.objects.create(
                    trajectory=trajectory,
                    parent=root,
                    fork_index=3,
                    name=f"{name}-{sample}",
                    origin="simulated",
                    status="failed" if failed_later else "succeeded",
                    job=job,
                    sample_index=k,
                )
                malformed = k % 13 == 5
                steps = [
                    Step(
                        branch=child,
                        index=3,
                        action=action,
                        observation=flights(
                            k, size, family=3 + (k % 4) + (10 if model == "m-b" else 0)
                        ),
                        provenance="replayed",
                        observation_source="simulated",
                        parse_status="no_tag" if malformed else "well_formed",
                        meta={"job": job.pk},
                    )
                ]
                if not failed_later:
                    steps.append(
                        Step(
                            branch=child,
                            index=4,
                            action=root.all_steps().get(index=4).action,
                            observation=flights(k, size, family=4 + (k % 3)),
                            provenance="agent",
                            observation_source="simulated",
                            parse_status="well_formed",
                            meta={"job": job.pk},
                        )
                    )
                Step.objects.bulk_create(steps)
                sample += 1
    return trajectory, root


def measure(client: Client, url: str, runs: int) -> dict:
    times, cpu, queries, size = [], [], 0, 0
    for _ in range(runs):
        with CaptureQueriesContext(connection) as ctx:
            start, start_cpu = time.perf_counter(), time.process_time()
            response = client.get(url)
            times.append(time.perf_counter() - start)
            cpu.append(time.process_time() - start_cpu)
        assert response.status_code == 200, (url, response.status_code)
        queries, size = len(ctx.captured_queries), len(response.content)
    return {
        "median_ms": statistics.median(times) * 1000,
        "max_ms": max(times) * 1000,
        # CPU time of this process: what the page costs whatever else the machine runs
        "cpu_ms": statistics.median(cpu) * 1000,
        "queries": queries,
        "bytes": size,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--obs-kb", type=int, default=4)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--keep", action="store_true", help="keep the benchmark project")
    args = parser.parse_args()
    project = Project.objects.create(name=f"bench-outcomes-{uuid.uuid4().hex[:8]}")
    user = get_user_model().objects.create_user(f"bench-{uuid.uuid4().hex[:8]}")
    Membership.objects.create(project=project, user=user, role=Role.RESEARCHER)
    try:
        trajectory, root = build(project, args.obs_kb * 1024)
        client = Client()
        client.force_login(user)
        base = reverse("branch_compare", args=[trajectory.pk]) + f"?fork={root.pk}"
        rows = {
            "outcomes at the fork (step 3)": base + "&at=3",
            "at the fork, words diff": base + "&at=3&diff=words",
        }
        client.get(rows["outcomes at the fork (step 3)"])  # warm up templates and session
        results = {name: measure(client, url, args.runs) for name, url in rows.items()}
    finally:
        if not args.keep:
            project.delete()
            user.delete()
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(
        f"database: {connection.vendor}; 64 futures of 2 models (3 jobs) at step 3, "
        f"~{args.obs_kb} KB JSON observations; {cpus} CPUs; median of {args.runs} runs"
    )
    print(
        f"{'request':<32} {'median ms':>10} {'max ms':>8} {'cpu ms':>8} {'queries':>8} "
        f"{'response KB':>12}"
    )
    for name, r in results.items():
        print(
            f"{name:<32} {r['median_ms']:>10.0f} {r['max_ms']:>8.0f} {r['cpu_ms']:>8.0f} "
            f"{r['queries']:>8} "
            f"{r['bytes'] / 1024:>12.0f}"
        )


if __name__ == "__main__":
    main()
