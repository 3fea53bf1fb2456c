#!/usr/bin/env python
"""Import speed benchmark (not a test): steps per second on the configured database.

Generates a synthetic file (default 200 trajectories x 50 steps, 2 KB observations), imports
it into a throwaway project with the same code path as the command and the upload form, then
imports it again (everything skipped) and prints the figures. Uses DATABASE_URL, so run it
against PostgreSQL with e.g.

    DEBUG=1 DATABASE_URL=postgres://postgres@127.0.0.1:5432/studio python scripts/bench_import.py

--format agentworldbench writes one JSONL row per trajectory (its last turn, holding every
earlier turn) instead of the native JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import string
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def observation(rng: random.Random, size: int, t: int, s: int) -> str:
    words = ["".join(rng.choices(string.ascii_lowercase, k=rng.randint(2, 9))) for _ in range(64)]
    lines = [f"$ step {s} of run {t}"]
    while sum(len(x) + 1 for x in lines) < size:
        lines.append(" ".join(rng.choices(words, k=12)))
    return "\n".join(lines)[:size]


def write_native(path: Path, n_traj: int, n_steps: int, obs_bytes: int, rng) -> None:
    with path.open("w") as fh:
        fh.write('{"format": "agentworld-studio/v1", "trajectories": [\n')
        for t in range(n_traj):
            traj = {
                "title": f"synthetic run {t}",
                "domain": "terminal",
                "task_instruction": f"Find the failing service on host {t} and restart it.",
                "tags": ["bench"],
                "metadata": {"run": t},
                "steps": [
                    {
                        "action": f"journalctl -u svc-{s} --since -1h | tail -n 40",
                        "observation": observation(rng, obs_bytes, t, s),
                        "state": f"cwd=/srv/{t}",
                    }
                    for s in range(n_steps)
                ],
            }
            fh.write(("," if t else "") + json.dumps(traj) + "\n")
        fh.write("]}\n")


def write_agentworldbench(path: Path, n_traj: int, n_steps: int, obs_bytes: int, rng) -> None:
    with path.open("w") as fh:
        for t in range(n_traj):
            prompts = [
                f"### Turn {s + 1}\n\n**Task Instruction:** Restart the failing service on host {t}."
                f"\n\n**Current State:** cwd=/srv/{t}\n\n**Action:**\nsystemctl status svc-{s}"
                for s in range(n_steps)
            ]
            responses = [
                "**Environment Observation:**\n" + observation(rng, obs_bytes, t, s)
                for s in range(n_steps)
            ]
            row = {
                "task": "terminal",
                "id": f"bench-{t}",
                "prompt": prompts,
                "response": responses,
                "current_prompt": prompts[-1],
                "system_str": "You simulate a Linux terminal.",
                "turn_idx": n_steps,
                "total_turns": n_steps,
            }
            fh.write(json.dumps(row) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trajectories", type=int, default=200)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--obs-bytes", type=int, default=2048)
    parser.add_argument("--format", choices=["native", "agentworldbench"], default="native")
    parser.add_argument("--keep", action="store_true", help="keep the imported project")
    args = parser.parse_args()

    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "studio.settings")
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection

    call_command("migrate", verbosity=0)  # a fresh database works too

    from studio.importers.registry import detect, load_source
    from studio.models import Project
    from studio.services import imports
    from studio.services.imports import do_import_file

    rng = random.Random(1234)
    with tempfile.TemporaryDirectory() as tmp:
        suffix = ".json" if args.format == "native" else ".jsonl"
        path = Path(tmp) / f"bench{suffix}"
        writer = write_native if args.format == "native" else write_agentworldbench
        writer(path, args.trajectories, args.steps, args.obs_bytes, rng)
        size_mb = path.stat().st_size / 1e6

        started = time.perf_counter()
        source = load_source(path, path.name)
        parsed = list(detect(source).parse(source))
        parse_s = time.perf_counter() - started

        project = Project.objects.create(name=f"bench-import-{os.getpid()}-{int(time.time())}")
        try:
            last = [0.0]
            started = time.perf_counter()
            result = do_import_file(project=project, path=path, progress=lambda f: last.append(f))
            import_s = time.perf_counter() - started
            started = time.perf_counter()
            again = do_import_file(project=project, path=path)
            reimport_s = time.perf_counter() - started
            insert_s = None
            if connection.vendor == "postgresql":
                # the same import with multi-row INSERTs (bulk_create) instead of COPY
                project.trajectories.all().delete()
                imports.USE_POSTGRES_COPY = False
                started = time.perf_counter()
                do_import_file(project=project, path=path)
                insert_s = time.perf_counter() - started
                imports.USE_POSTGRES_COPY = True
        finally:
            if not args.keep:
                project.delete()

    steps = result.steps_created
    assert steps == args.trajectories * args.steps == sum(len(p.steps) for p in parsed)
    assert again.trajectories_skipped == args.trajectories and again.steps_created == 0
    print(f"database        {connection.vendor} ({connection.settings_dict['NAME']})")
    print(
        f"file            {args.format}, {size_mb:.1f} MB, {args.trajectories} trajectories "
        f"x {args.steps} steps, {args.obs_bytes} B observations"
    )
    print(f"parse only      {parse_s:.2f} s ({steps / parse_s:,.0f} steps/s)")
    print(
        f"import          {import_s:.2f} s -> {steps / import_s:,.0f} steps/s "
        f"({result.trajectories_created / import_s:,.1f} trajectories/s, "
        f"{size_mb / import_s:.1f} MB/s)"
    )
    print(f"write share     {max(import_s - parse_s, 0) / import_s:.0%} of the import time")
    print(f"re-import       {reimport_s:.2f} s (all {again.trajectories_skipped} skipped)")
    if insert_s is not None:
        print(
            f"with INSERTs    {insert_s:.2f} s -> {steps / insert_s:,.0f} steps/s "
            f"(COPY is {insert_s / import_s:.1f}x faster)"
        )
    print(f"progress calls  {len(last) - 1}, last {last[-1]:.2f}")


if __name__ == "__main__":
    main()
