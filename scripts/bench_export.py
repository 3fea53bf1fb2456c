#!/usr/bin/env python
"""Dataset export benchmark (not a test): rows per second and peak memory of exporting a
dataset version of N steps, on the configured database.

Makes a throwaway project of synthetic recorded trajectories (default 10,000 x 10 steps =
100,000 steps, 400-byte observations, a correction on every tenth step), one dataset version
holding every step, then exports it in each chosen format to a temporary file with the same
code as `manage.py export_dataset` (after one untimed read of every step, so no format pays
for the cold cache after the bulk load), and prints rows/s and the peak of Python's
allocations (tracemalloc) during the export. Memory flat means the peak at N steps is about the peak at
N/10: the script runs both sizes and prints their ratio. Run it against PostgreSQL:

    DEBUG=1 DATABASE_URL=postgres://postgres@127.0.0.1:5432/test python scripts/bench_export.py
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
    parser.add_argument("--trajectories", type=int, default=10_000)
    parser.add_argument("--steps", type=int, default=10, help="steps per trajectory")
    parser.add_argument("--obs-bytes", type=int, default=400)
    parser.add_argument(
        "--formats", default="wm-turns,agentworldbench,openai,agent-turns",
        help="comma-separated format names",
    )  # fmt: skip
    parser.add_argument(
        "--profile", choices=["read", "export"],
        help="instead: profile reading every step into examples, or a whole export (the "
        "first format), and print the top",
    )  # fmt: skip
    args = parser.parse_args()

    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "studio.settings")
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection

    call_command("migrate", verbosity=0)
    from studio.exports.formats import ExportOptions
    from studio.models import (
        Branch,
        Dataset,
        DatasetItem,
        DatasetVersion,
        Project,
        Step,
        Trajectory,
    )  # fmt: skip
    from studio.services import datasets as service

    print(f"database: {connection.vendor}")
    project = Project.objects.create(name=f"bench-export-{time.time_ns()}")
    try:
        made = time.perf_counter()
        filler = ("lorem ipsum dolor sit amet " * (args.obs_bytes // 27 + 1))[: args.obs_bytes]
        step_ids: list[int] = []
        batch = 500
        for start in range(0, args.trajectories, batch):
            count = min(batch, args.trajectories - start)
            trajectories = Trajectory.objects.bulk_create(
                Trajectory(
                    project=project,
                    domain="terminal",
                    title=f"run {start + i}",
                    task_instruction="Find the failing service and restart it.",
                    source_format="bench",
                    source_key=f"k{start + i}",
                    step_count=args.steps,
                )  # fmt: skip
                for i in range(count)
            )
            branches = Branch.objects.bulk_create(
                Branch(trajectory=t, name="recorded", lineage=[]) for t in trajectories
            )
            for b in branches:  # bulk_create skips save(): the lineage is written here
                b.lineage = [[b.pk, 0]]
            Branch.objects.bulk_update(branches, ["lineage"])
            steps = Step.objects.bulk_create(
                Step(
                    branch=b,
                    index=s,
                    action=f"systemctl status svc-{s} --no-pager",
                    observation=f"step {s}\n{filler}",
                    state=f"cwd=/srv/{b.pk}",
                )  # fmt: skip
                for b in branches
                for s in range(args.steps)
            )
            step_ids += [s.pk for s in steps]
        n = len(step_ids)
        dataset = Dataset.objects.create(project=project, name="bench")

        def version_of(ids: list[int], number: int) -> DatasetVersion:
            version = DatasetVersion.objects.create(
                dataset=dataset, number=number, source="bench", item_count=len(ids)
            )
            DatasetItem.objects.bulk_create(
                (
                    DatasetItem(
                        version=version,
                        position=i,
                        step_id=pk,
                        corrected=i % 10 == 0,
                        observation=f"corrected {i}" if i % 10 == 0 else "",
                    )  # fmt: skip
                    for i, pk in enumerate(ids)
                ),
                batch_size=5000,
            )
            return version

        small = version_of(step_ids[: n // 10], 1)
        large = version_of(step_ids, 2)
        if connection.vendor == "postgresql":  # as autovacuum would, after a bulk load
            with connection.cursor() as cursor:
                cursor.execute("ANALYZE studio_step, studio_branch, studio_datasetitem")
        print(
            f"made {args.trajectories} trajectories x {args.steps} steps = {n} steps in "
            f"{time.perf_counter() - made:.1f} s"
        )
        if args.profile:
            import cProfile
            import pstats

            counts = service.ExportCounts()
            connection.queries_log.clear()
            with tempfile.NamedTemporaryFile("wb") as out, cProfile.Profile() as profile:
                examples = service.version_examples(large, counts)
                if args.profile == "read":
                    for _ in examples:
                        pass
                else:
                    fmt = args.formats.split(",")[0]
                    lines = service.rows_of(examples, fmt, ExportOptions(), counts)
                    service.write_rows(lines, out)
            pstats.Stats(profile).sort_stats("tottime").print_stats(25)
            slowest = sorted(connection.queries, key=lambda q: -float(q["time"]))[:8]
            for query in slowest:  # with DEBUG=1 Django keeps every query
                print(query["time"], query["sql"][:300])
            return
        # one untimed read first: the first export after the bulk load finds a cold database
        # cache, which would count against whichever format comes first
        for _ in service.version_examples(large, service.ExportCounts()):
            pass
        print(f"{'format':<16}{'steps':>9}{'rows':>9}{'rows/s':>10}{'MB out':>9}{'peak MB':>9}")
        for fmt in args.formats.split(","):
            peaks = []
            for version in (small, large):
                # timed without tracemalloc (it slows every allocation), then measured with it
                counts = service.ExportCounts()
                os.sync()  # the writes of the run before are not this one's to wait for
                with tempfile.NamedTemporaryFile("wb") as out:
                    started = time.perf_counter()
                    lines = service.rows_of(
                        service.version_examples(version, counts), fmt, ExportOptions(), counts
                    )
                    service.write_rows(lines, out)
                    out.flush()
                    took = time.perf_counter() - started
                    size = os.path.getsize(out.name)
                with tempfile.NamedTemporaryFile("wb") as out:
                    tracemalloc.start()
                    again = service.ExportCounts()
                    service.write_rows(
                        service.rows_of(
                            service.version_examples(version, again), fmt, ExportOptions(), again
                        ),
                        out,
                    )
                    _, peak = tracemalloc.get_traced_memory()
                    tracemalloc.stop()
                peaks.append(peak)
                print(
                    f"{fmt:<16}{version.item_count:>9}{counts.rows:>9}"
                    f"{counts.rows / took:>10.0f}{size / 1e6:>9.1f}{peak / 1e6:>9.1f}"
                )
            print(f"{'':<16}peak memory at {n} steps / at {n // 10}: {peaks[1] / peaks[0]:.2f}")
        # where the time goes: reading the steps into examples, without making rows
        counts = service.ExportCounts()
        started = time.perf_counter()
        for _ in service.version_examples(large, counts):
            pass
        took = time.perf_counter() - started
        print(
            f"reading {counts.items} steps into examples alone: {counts.items / took:.0f} steps/s"
        )
        print("goal: at least 20,000 rows/s, memory flat (ratio near 1)")
    finally:
        project.delete()


if __name__ == "__main__":
    main()
