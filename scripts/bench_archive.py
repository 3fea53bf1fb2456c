#!/usr/bin/env python
"""Project archive benchmark (not a test): time, rows per second, archive size and peak memory
of `project_archive export` and `import` on a generated project, on the configured database.

Makes a throwaway project of synthetic recorded trajectories (default 1,000 x 50 steps =
50,000 steps, 400-byte observations), each with a simulated branch of 5 steps, an
annotation on every 20th step and a dataset of every 10th step, at two sizes (the default and
a tenth of it). Exports each with the same code as the command, imports the archive back as a
new project, and prints each run's figures: timed without tracemalloc, then run again under
tracemalloc for the peak of Python's allocations. Memory is flat when the peak at the full
size is about the peak at a tenth (an import keeps a map of old to new ids, 16 bytes a
row). Run it against PostgreSQL:

    DEBUG=1 DATABASE_URL=postgres://postgres@127.0.0.1:5432/test python scripts/bench_archive.py
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trajectories", type=int, default=1_000)
    parser.add_argument("--steps", type=int, default=50, help="steps per trajectory")
    parser.add_argument("--obs-bytes", type=int, default=400)
    args = parser.parse_args()

    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "studio.settings")
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection

    call_command("migrate", verbosity=0)
    from studio.archive.reader import import_archive
    from studio.archive.writer import export_project
    from studio.models import Project

    print(f"database: {connection.vendor}")
    made: list[Project] = []
    sizes = [max(1, args.trajectories // 10), args.trajectories]
    print(f"{'steps':>8}{'rows':>9}{'phase':>8}{'s':>8}{'rows/s':>9}{'MB file':>9}{'peak MB':>9}")
    peaks: dict[str, list[float]] = {"export": [], "import": []}
    try:
        for n in sizes:
            project = make_project(n, args.steps, args.obs_bytes)
            made.append(project)
            with tempfile.TemporaryDirectory() as folder:
                archive = Path(folder) / "bench.jsonl.gz"
                started = time.perf_counter()
                result = export_project(project, archive)
                took = time.perf_counter() - started
                tracemalloc.start()
                export_project(project, archive)
                peak = tracemalloc.get_traced_memory()[1] / 1e6
                tracemalloc.stop()
                peaks["export"].append(peak)
                steps = n * (args.steps + 5)
                size = archive.stat().st_size / 1e6
                print(
                    f"{steps:>8}{result.rows:>9}{'export':>8}{took:>8.1f}"
                    f"{result.rows / took:>9.0f}{size:>9.1f}{peak:>9.1f}"
                )
                started = time.perf_counter()
                imported = import_archive(archive, name=f"{project.name} (timed copy)")
                took = time.perf_counter() - started
                made.append(imported.project)
                tracemalloc.start()
                again = import_archive(archive, name=f"{project.name} (measured copy)")
                peak = tracemalloc.get_traced_memory()[1] / 1e6
                tracemalloc.stop()
                made.append(again.project)
                peaks["import"].append(peak)
                print(
                    f"{steps:>8}{imported.rows:>9}{'import':>8}{took:>8.1f}"
                    f"{imported.rows / took:>9.0f}{size:>9.1f}{peak:>9.1f}"
                )
        for phase, (small, large) in peaks.items():
            print(f"{phase}: peak memory at full size / at a tenth: {large / small:.2f}")
    finally:
        for project in made:
            project.delete()


def make_project(n_trajectories: int, n_steps: int, obs_bytes: int):
    from django.contrib.auth import get_user_model

    from studio.models import (
        Branch,
        Dataset,
        DatasetItem,
        DatasetVersion,
        Membership,
        Project,
        SimulationJob,
        Step,
        StepAnnotation,
        Trajectory,
    )

    user, _ = get_user_model().objects.get_or_create(username="bench-archive")
    project = Project.objects.create(name=f"bench-archive-{time.time_ns()}")
    Membership.objects.create(project=project, user=user, role="admin")
    filler = ("lorem ipsum dolor sit amet " * (obs_bytes // 27 + 1))[:obs_bytes]
    step_ids: list[int] = []
    batch = 200
    for start in range(0, n_trajectories, batch):
        count = min(batch, n_trajectories - start)
        trajectories = Trajectory.objects.bulk_create(
            Trajectory(
                project=project,
                domain="terminal",
                title=f"run {start + i}",
                task_instruction="Find the failing service and restart it.",
                source_format="bench",
                source_key=f"k{start + i}",
                step_count=n_steps,
                metadata={"run": start + i},
                created_by=user,
            )  # fmt: skip
            for i in range(count)
        )
        roots = Branch.objects.bulk_create(
            Branch(trajectory=t, name="recorded", lineage=[]) for t in trajectories
        )
        for b in roots:
            b.lineage = [[b.pk, 0]]
        Branch.objects.bulk_update(roots, ["lineage"])
        jobs = SimulationJob.objects.bulk_create(
            SimulationJob(
                trajectory=b.trajectory,
                branch=b,
                fork_index=n_steps - 5,
                backend="retrieval",
                status="succeeded",
                requester=user,
            )  # fmt: skip
            for b in roots
        )
        children = Branch.objects.bulk_create(
            Branch(
                trajectory=b.trajectory,
                parent=b,
                fork_index=n_steps - 5,
                name="future",
                origin="simulated",
                job=j,
                lineage=[],
            )  # fmt: skip
            for b, j in zip(roots, jobs, strict=True)
        )
        for b, child in zip(roots, children, strict=True):
            child.lineage = [[b.pk, 0], [child.pk, n_steps - 5]]
        Branch.objects.bulk_update(children, ["lineage"])
        steps = Step.objects.bulk_create(
            [
                Step(
                    branch=b,
                    index=s,
                    action=f"systemctl status svc-{s} --no-pager",
                    observation=f"step {s}\n{filler}",
                    state=f"cwd=/srv/{b.pk}",
                    meta={"tool": "bash"},
                )  # fmt: skip
                for b in roots
                for s in range(n_steps)
            ]
            + [
                Step(
                    branch=c,
                    index=s,
                    action=f"systemctl restart svc-{s}",
                    observation=f"simulated {s}\n{filler}",
                    provenance="replayed",
                    observation_source="simulated",
                    meta={"job": j.pk},
                )  # fmt: skip
                for c, j in zip(children, jobs, strict=True)
                for s in range(n_steps - 5, n_steps)
            ],
            batch_size=2000,
        )
        step_ids += [s.pk for s in steps]
    StepAnnotation.objects.bulk_create(
        (
            StepAnnotation(step_id=pk, author=user, ratings={"quality": 4}, verdict="accept")
            for pk in step_ids[::20]
        ),
        batch_size=2000,
    )
    dataset = Dataset.objects.create(project=project, name="bench")
    picked = step_ids[::10]
    version = DatasetVersion.objects.create(
        dataset=dataset, number=1, source="bench", item_count=len(picked)
    )
    DatasetItem.objects.bulk_create(
        (DatasetItem(version=version, position=i, step_id=pk) for i, pk in enumerate(picked)),
        batch_size=5000,
    )
    return project


if __name__ == "__main__":
    main()
