#!/usr/bin/env python
"""Import memory benchmark (not a test): peak memory of a worker importing a large
AgentWorldBench JSONL file, against the file's size.

Generates a synthetic AgentWorldBench file (default about 300 MB) in a temporary folder:
samples of the seven domains with 3 to 20 turns, observations of 0.5 to 24 KB (terminal
output, accessibility trees), a task instruction on the first turn, historical context and
current state on the later ones; each sample has one to three rows (turns to predict), each
holding the sample's whole `prompt` and `response` lists, as the benchmark's files do. It
then stores it as an upload, creates the ImportJob and runs it in a child process with the
function the Celery task calls (`studio.jobs.imports.run_import_job`), and prints that
process's peak resident memory (getrusage ru_maxrss), its memory before the import, the
time, and the peak's ratio to the file's size. The goal: a peak under 300 MB for the 300 MB
file, the same at any size (`--mb 30` for a tenth). Uses DATABASE_URL, e.g.

    DEBUG=1 DATABASE_URL=postgres://postgres@127.0.0.1:5432/studio python scripts/bench_import_memory.py
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import string
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MB = 1024 * 1024
GOAL_MB = 300
DOMAINS = ("mcp", "search", "terminal", "swe", "android", "web", "os")


def setup() -> None:
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "studio.settings")
    import django

    django.setup()


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KB on Linux


def rss_mb() -> float:
    """Resident memory now (Linux), not the high-water mark."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def child(job_id: int) -> None:
    """The worker's side: what a Celery worker process holds before the task, then the task."""
    setup()
    from studio.jobs.imports import run_import_job
    from studio.services import imports  # noqa: F401 - loaded by the worker before a task too

    before, before_peak = rss_mb(), peak_mb()
    started = time.perf_counter()
    run_import_job(job_id)
    seconds = time.perf_counter() - started
    figures = {"before_mb": before, "before_peak_mb": before_peak, "peak_mb": peak_mb()}
    print(json.dumps({**figures, "seconds": seconds}))


class Text:
    """Observation-like text: lines drawn from a fixed pool, each text made unique by a
    header, so that files compress and hash like real ones without costing minutes."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        words = [
            "".join(rng.choices(string.ascii_lowercase, k=rng.randint(2, 10))) for _ in range(2000)
        ]
        self.lines = [" ".join(rng.choices(words, k=rng.randint(4, 16))) for _ in range(5000)]

    def block(self, size: int, header: str) -> str:
        out, total = [header], len(header)
        while total < size:
            line = self.rng.choice(self.lines)
            out.append(line)
            total += len(line) + 1
        return "\n".join(out)


def write_file(path: Path, target_bytes: int, rng: random.Random) -> tuple[int, int, int]:
    """(samples, rows, turns) written; stops at the first sample past `target_bytes`."""
    text = Text(rng)
    samples = rows = turns = 0
    with path.open("w", encoding="utf-8") as fh:
        while fh.tell() < target_bytes:
            domain = DOMAINS[samples % len(DOMAINS)]
            n = rng.randint(3, 20)
            prompts, responses = [], []
            for t in range(1, n + 1):
                parts = [f"### Turn {t}"]
                if t == 1:
                    parts.append(
                        f"**Task Instruction:** Sample {samples}: find why the {domain} "
                        f"environment reports error {rng.randint(100, 999)} and fix it."
                    )
                else:
                    parts.append(
                        "**Historical Context:**\n" + text.block(rng.randint(200, 1500), "")
                    )
                parts.append("**Current State:**\n" + text.block(rng.randint(100, 800), ""))
                parts.append(f"**Action:**\n```bash\ncat /var/log/app-{samples}-{t}.log\n```")
                prompts.append("\n\n".join(parts))
                size = rng.choice((512, 2048, 6144, 12288, 24576))
                responses.append(
                    "**Environment Observation:**\n"
                    + text.block(rng.randint(size // 2, size), f"[{samples}:{t}]")
                )
            system = f"You simulate the {domain} environment of sample {samples}."
            picked = sorted(rng.sample(range(1, n + 1), rng.randint(1, 3)))
            for turn in picked:
                row = {
                    "task": f"agentworldbench/{domain}",
                    "id": f"{domain}-{samples}-t{turn}",
                    "prompt": prompts,
                    "response": responses,
                    "current_prompt": prompts[turn - 1],
                    "system_str": system,
                    "turn_idx": turn,
                    "total_turns": n,
                }
                fh.write(json.dumps(row, ensure_ascii=False) + "\n")
                rows += 1
            samples += 1
            turns += n
    return samples, rows, turns


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=300, help="size of the generated file")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--keep", action="store_true", help="keep the imported project")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)  # the worker's side
    args = parser.parse_args()
    if args.child is not None:
        child(args.child)
        return

    setup()
    from django.core.management import call_command
    from django.db import connection

    call_command("migrate", verbosity=0)  # a fresh database works too
    from studio.models import ImportJob, JobStatus, Project

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench_test.jsonl"
        started = time.perf_counter()
        samples, rows, turns = write_file(path, int(args.mb * MB), random.Random(args.seed))
        size = path.stat().st_size
        print(
            f"file            {size / MB:.1f} MB: {samples:,} samples, {rows:,} rows, "
            f"{turns:,} turns (written in {time.perf_counter() - started:.0f} s)"
        )
        project = Project.objects.create(
            name=f"bench-import-memory-{os.getpid()}-{time.time():.0f}"
        )
        try:
            job = ImportJob.objects.create(
                project=project,
                original_name=path.name,
                stored_path=str(path),
                size_bytes=size,
            )
            connection.close()  # the child opens its own
            done = subprocess.run(
                [sys.executable, __file__, "--child", str(job.pk)],
                capture_output=True,
                text=True,
                check=False,
            )
            children_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
            if done.returncode != 0:
                sys.exit(f"the import process failed:\n{done.stderr[-4000:]}")
            figures = json.loads(done.stdout.strip().splitlines()[-1])
            job.refresh_from_db()
            if job.status != JobStatus.SUCCEEDED:
                sys.exit(f"the import failed: {job.error}")
        finally:
            if not args.keep:
                project.delete()

    peak = figures["peak_mb"]
    print(f"database        {connection.vendor} ({connection.settings_dict['NAME']})")
    print(
        f"imported        {job.trajectories_created:,} trajectories, {job.steps_created:,} "
        f"steps in {figures['seconds']:.1f} s ({size / MB / figures['seconds']:.1f} MB/s)"
    )
    print(
        f"worker before   {figures['before_mb']:.0f} MB resident, {figures['before_peak_mb']:.0f} MB "
        "at most so far (Django and the studio loaded)"
    )
    print(
        f"worker peak     {peak:.0f} MB (ru_maxrss; {children_mb:.0f} MB seen by the parent), "
        f"{peak / (size / MB):.2f}x the file"
    )
    print(f"goal            under {GOAL_MB} MB at any size: {'PASS' if peak < GOAL_MB else 'FAIL'}")


if __name__ == "__main__":
    main()
