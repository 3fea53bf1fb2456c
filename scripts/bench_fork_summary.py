"""Benchmark: the outcome summary of one fork (the compare page's `?fork=`) for 64 futures.

Creates a trajectory whose recorded step 1 has a --obs-kb KB observation (default 20) and 64
simulated futures at step 1 in one of three shapes, then times `summarise_fork` (--runs
times, median) against the naive grouping it replaced (every group's representative compared
with `meaning_similarity` to every outcome so far, no bounds, no budget):

- near: every future the same log with one number changed (all near-duplicates: 1 outcome)
- distinct: 64 unrelated texts of the same length (64 outcomes, the worst case for pairs)
- mixed: 8 families of 8 near-duplicates each

Prints the median seconds of each, the ratio, the full comparisons made and the outcomes
found (the naive count is the reference: the two must agree unless the budget ran out, which
the page then says). Everything created is deleted at the end.

    DEBUG=1 python scripts/bench_fork_summary.py [--obs-kb 20] [--runs 3]
"""

from __future__ import annotations

import argparse
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

from django.db import transaction  # noqa: E402

from studio.models import Branch, Project, Step, Trajectory  # noqa: E402
from studio.services import futures  # noqa: E402
from studio.services.diffs import meaning_key, meaning_similarity  # noqa: E402

WORDS = "alpha beta gamma delta error warn info queue worker commit branch file line".split()


def log_text(seed: int, size: int, *, family: int = 0) -> str:
    rng = random.Random(family)
    lines, total = [], 0
    while total < size:
        line = f"[{len(lines):05d}] " + " ".join(rng.choice(WORDS) for _ in range(9))
        lines.append(line)
        total += len(line) + 1
    lines[len(lines) // 2] += f" took {seed} ms"  # the one difference within a family
    return "\n".join(lines)


def observations(shape: str, size: int) -> list[str]:
    if shape == "near":
        return [log_text(i, size) for i in range(64)]
    if shape == "distinct":
        return [log_text(0, size, family=1000 + i) for i in range(64)]
    return [log_text(i, size, family=i // 8) for i in range(64)]


def naive_outcomes(texts: list[str]) -> int:
    groups: dict[str, str] = {}
    for text in texts:
        groups.setdefault(meaning_key(text), text)
    merged: list[str] = []
    for text in groups.values():
        if not any(meaning_similarity(rep, text) >= futures.NEAR_DUPLICATE for rep in merged):
            merged.append(text)
    return len(merged)


def build(project: Project, texts: list[str]) -> Branch:
    with transaction.atomic():
        trajectory = Trajectory.objects.create(
            project=project,
            domain="terminal",
            title="bench fork summary",
            source_format="bench",
            source_key=uuid.uuid4().hex,
            step_count=2,
        )
        root = Branch.objects.create(trajectory=trajectory, name="recorded")
        Step.objects.bulk_create(
            [
                Step(branch=root, index=0, action="ls", observation="app.py"),
                Step(branch=root, index=1, action="cat app.log", observation=texts[0]),
            ]
        )
        for i, text in enumerate(texts):
            child = Branch.objects.create(
                trajectory=trajectory,
                parent=root,
                fork_index=1,
                name=f"f{i}",
                origin="simulated",
                status="succeeded",
                sample_index=i,
            )
            Step.objects.create(branch=child, index=1, action="cat app.log", observation=text)
    return root


def median_time(fn, runs: int) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def count_full_comparisons(root: Branch) -> tuple[futures.FutureSummary, int]:
    original = futures._near
    full = [0]

    def counting(a, b):
        near, was_full = original(a, b)
        full[0] += was_full
        return near, was_full

    futures._near = counting
    try:
        return futures.summarise_fork(root, 1), full[0]
    finally:
        futures._near = original


def measure(project: Project, shape: str, obs_kb: int, runs: int) -> None:
    texts = observations(shape, obs_kb * 1024)
    root = build(project, texts)
    summary, full = count_full_comparisons(root)
    new_s = median_time(lambda: futures.summarise_fork(root, 1), runs)
    old_s = median_time(lambda: naive_outcomes(texts), max(1, runs // 2))
    print(
        f"{shape:9s} summary {new_s:7.3f} s  naive grouping {old_s:7.3f} s  "
        f"speedup {old_s / new_s:5.1f}x  full comparisons {full:4d}  "
        f"outcomes {len(summary.outcomes)} (naive {naive_outcomes(texts)})"
        + ("  budget ran out" if summary.near_incomplete else "")
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--obs-kb", type=int, default=20)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    project = Project.objects.create(name=f"bench-{uuid.uuid4().hex[:8]}")
    try:
        for shape in ("near", "mixed", "distinct"):
            measure(project, shape, args.obs_kb, args.runs)
    finally:
        project.delete()


if __name__ == "__main__":
    main()
