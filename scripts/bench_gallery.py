#!/usr/bin/env python
"""Gallery benchmark (not a test): how long the demo gallery page takes, on 2 cores.

Makes a throwaway SQLite database in a temporary data directory (never the developer's),
loads the demo project (`load_demo`), runs every scenario --runs times on the project's
default world model (the retrieval baseline: the jobs run in this process, no worker), then
loads the gallery page with Django's test client --loads times, pinned to two CPU cores, and
prints the median and worst time and the number of queries of one load (goal: well under 1 s).

    DEBUG=1 .venv/bin/python scripts/bench_gallery.py
    DEBUG=1 .venv/bin/python scripts/bench_gallery.py --runs 5 --loads 20
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from io import StringIO
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GOAL_S = 1.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="runs of each scenario")
    parser.add_argument("--loads", type=int, default=10, help="loads of the page timed")
    parser.add_argument("--cores", type=int, default=2, help="CPU cores to run on")
    parser.add_argument(
        "--other-jobs",
        type=int,
        default=5000,
        help="other simulation jobs of the project (a long session's forks), not the gallery's",
    )
    args = parser.parse_args()

    if hasattr(os, "sched_setaffinity"):
        cores = sorted(os.sched_getaffinity(0))[: args.cores]
        os.sched_setaffinity(0, cores)
        print(f"pinned to cores {cores}")
    data_dir = tempfile.mkdtemp(prefix="bench-gallery-")
    # A database of its own: the environment's must not redirect the bench (or be written).
    os.environ["STUDIO_DATA_DIR"] = data_dir
    for name in ("DATABASE_URL", "WORLD_MODEL_BACKEND", "WORLD_MODEL_BASE_URL"):
        os.environ.pop(name, None)
    os.environ.setdefault("DEBUG", "1")
    os.environ["DJANGO_SETTINGS_MODULE"] = "tests.settings"
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext
    from django.urls import reverse

    from studio.demo_data.scenarios import SCENARIOS
    from studio.jobs.simulation import run_simulation_job
    from studio.models import Membership, Project, Role
    from studio.services.gallery import run_scenario

    call_command("migrate", verbosity=0)
    t0 = time.perf_counter()
    call_command("load_demo", stdout=StringIO())
    project = Project.objects.get(name="Demo")
    from django.contrib.auth import get_user_model

    user = get_user_model().objects.create_user("bench-gallery", password="bench-gallery-pw")
    Membership.objects.create(project=project, user=user, role=Role.RESEARCHER)
    jobs = 0
    for _ in range(args.runs):
        for s in SCENARIOS:
            for job in run_scenario(project, s, user=user):
                run_simulation_job(job.pk)
                jobs += 1
    print(f"demo loaded and {jobs} gallery jobs run in {time.perf_counter() - t0:.1f} s")
    add_other_jobs(project, user, args.other_jobs)

    client = Client()
    client.force_login(user)
    url = reverse("gallery", args=[project.pk])
    response = client.get(url)  # warm: templates compiled, caches filled
    assert response.status_code == 200, response.status_code
    times = []
    for _ in range(args.loads):
        t = time.perf_counter()
        response = client.get(url)
        times.append(time.perf_counter() - t)
        assert response.status_code == 200
    with CaptureQueriesContext(connection) as queries:
        client.get(url)
    median, worst = statistics.median(times), max(times)
    verdict = "PASS" if median < GOAL_S / 2 and worst < GOAL_S else "FAIL"
    print(
        f"gallery: median {median * 1000:.0f} ms, worst {worst * 1000:.0f} ms over "
        f"{args.loads} loads, {len(queries)} queries, {len(response.content) // 1024} KB "
        f"(goal: well under {GOAL_S:.0f} s) {verdict}"
    )
    sys.exit(0 if verdict == "PASS" else 1)


def add_other_jobs(project, user, count: int) -> None:
    """Jobs as a long session leaves them (forks of every demo trajectory, finished, their
    params and live text kept): what the gallery's lookups must not scan one by one."""
    from studio.models import SimulationJob, Trajectory

    t0 = time.perf_counter()
    trajectories = list(Trajectory.objects.filter(project=project).select_related(None))
    roots = {t.pk: t.root_branch for t in trajectories}
    params = {"temperature": 0.7, "top_p": 0.95, "max_tokens": 512, "seed": 1}
    batch = [
        SimulationJob(
            requester=user,
            trajectory=t,
            branch=roots[t.pk],
            fork_index=1,
            action="ls -la " + "x" * 200,
            n=4,
            status="succeeded",
            backend="retrieval",
            params={**params, "seed": i},
            live={},
            error="",
        )
        for i in range(count)
        for t in [trajectories[i % len(trajectories)]]
    ]
    SimulationJob.objects.bulk_create(batch, batch_size=500)
    print(f"{count} other jobs added in {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
