"""Benchmark: the find bar's answer time on a long trajectory, with and without a terminal's
colour codes.

The find bar (studio.services.step_find) searches the text as the pages show it, escapes
left out, so every step holding an escape is read and matched in Python, whatever the query;
steps without one are narrowed by the database first. This creates two trajectories of
--steps steps (default 100,000) whose observations are about --obs-bytes long (default
1,000): one of coloured log lines (`\\x1b[32mINFO\\x1b[0m ...`), one of the same lines without
colours. It then asks the find endpoint, with Django's test client, for:

- a common word (in every line of every step): the first window, the window at the middle
  step, and the last window (`back=1`);
- a rare word (in 5 steps): the first window;

and prints the median time of --runs requests each (Django's test client, in this process:
the view and its queries, no HTTP server), the hits counted and the steps read (a window back
reads the steps of its hits twice: once counted, once built). Everything created is deleted
at the end (unless --keep). The `coloured / plain` lines compare the two trajectories; to
compare two versions of the find, run it on each.

    DEBUG=1 DATABASE_URL=postgres://... python scripts/bench_find.py [--steps 100000]
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
from django.urls import reverse  # noqa: E402

from studio.models import Branch, Membership, Project, Role, Step, Trajectory  # noqa: E402
from studio.services import step_find  # noqa: E402

RARE = "zanzibar"
RARE_EVERY = 20_000  # one step in this many holds the rare word (5 in 100,000)


def observation(i: int, size: int, coloured: bool) -> str:
    ok = "\x1b[32mINFO\x1b[0m" if coloured else "INFO"
    lines, total, n = [], 0, 0
    while total < size:
        line = f"[{i:06d}.{n:02d}] {ok} worker processed item <{i}-{n}> in {n + 3} ms\n"
        lines.append(line)
        total += len(line)
        n += 1
    if i % RARE_EVERY == RARE_EVERY // 2:
        lines.insert(len(lines) // 2, f"[{i:06d}] warn: {RARE} checksum mismatch\n")
    return "".join(lines)


def create_trajectory(project: Project, steps: int, size: int, coloured: bool) -> Trajectory:
    with transaction.atomic():
        trajectory = Trajectory.objects.create(
            project=project,
            domain="terminal",
            title=f"bench find {steps} steps {'coloured' if coloured else 'plain'}",
            source_format="bench",
            source_key=uuid.uuid4().hex,
            step_count=steps,
        )
        root = Branch.objects.create(trajectory=trajectory, name="recorded")
        batch: list[Step] = []
        for i in range(steps):
            batch.append(
                Step(
                    branch=root,
                    index=i,
                    action=f"tail -n 20 /var/log/worker-{i}.log",
                    observation=observation(i, size, coloured),
                )
            )
            if len(batch) == 1000:
                Step.objects.bulk_create(batch)
                batch = []
        Step.objects.bulk_create(batch)
    return trajectory


class Counting:
    """Counts the steps the find reads: it takes each field of each step it reads out of its
    terminal escapes (`without_ansi`), three fields a step on the trajectory page."""

    def __init__(self) -> None:
        self.fields = 0
        self.inner = step_find.without_ansi

    def __call__(self, text):
        self.fields += 1
        return self.inner(text)

    @property
    def steps(self) -> int:
        return self.fields // len(step_find.BRANCH_FIELDS)


def measure(client: Client, url: str, runs: int, counting: Counting) -> dict:
    times = []
    answer: dict = {}
    for _ in range(runs):
        counting.fields = 0
        start = time.perf_counter()
        response = client.get(url)
        times.append(time.perf_counter() - start)
        assert response.status_code == 200, (url, response.status_code)
        answer = response.json()
    return {
        "median_ms": statistics.median(times) * 1000,
        "hits": len(answer["hits"]),
        "before": answer["before"],
        "total": f"{answer['total']:,}{'+' if answer['more'] else ''}",
        "read": counting.steps,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--obs-bytes", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--keep", action="store_true", help="keep the benchmark project")
    args = parser.parse_args()

    counting = Counting()
    step_find.without_ansi = counting  # type: ignore[assignment]
    project = Project.objects.create(name=f"bench-find-{uuid.uuid4().hex[:8]}")
    user = get_user_model().objects.create_user(f"bench-{uuid.uuid4().hex[:8]}")
    Membership.objects.create(project=project, user=user, role=Role.RESEARCHER)
    results: dict[str, dict] = {}
    try:
        t0 = time.perf_counter()
        made = {
            kind: create_trajectory(project, args.steps, args.obs_bytes, kind == "coloured")
            for kind in ("coloured", "plain")
        }
        created_s = time.perf_counter() - t0
        client = Client()
        client.force_login(user)
        middle = args.steps // 2
        for kind, trajectory in made.items():
            find = reverse("trajectory_find", args=[trajectory.pk])
            asks = {
                "common word, first window": f"{find}?q=info",
                f"common word, window at step {middle:,}": f"{find}?q=info&step={middle}",
                "common word, last window": f"{find}?q=info&back=1",
                "rare word, first window": f"{find}?q={RARE}",
            }
            client.get(asks["rare word, first window"])  # warm up
            for name, url in asks.items():
                results[f"{kind}: {name}"] = measure(client, url, args.runs, counting)
    finally:
        if not args.keep:
            project.delete()
            user.delete()

    print(
        f"database: {connection.vendor}; two trajectories of {args.steps:,} steps, "
        f"observations of about {args.obs_bytes:,} characters, created in {created_s:.0f} s; "
        f"median of {args.runs} runs; windows of {step_find.HIT_LIMIT:,} hits, counted up to "
        f"{step_find.COUNT_LIMIT:,} past the window"
    )
    print(f"{'find':<48} {'median ms':>10} {'hits':>6} {'before':>10} {'total':>10} {'read':>8}")
    for name, r in results.items():
        print(
            f"{name:<48} {r['median_ms']:>10.0f} {r['hits']:>6} {r['before']:>10,} "
            f"{r['total']:>10} {r['read']:>8,}"
        )
    for name in ("rare word, first window", "common word, last window"):
        ratio = results[f"coloured: {name}"]["median_ms"] / results[f"plain: {name}"]["median_ms"]
        print(f"coloured / plain, {name}: x{ratio:.1f}")


if __name__ == "__main__":
    main()
