"""A search's regular expression that backtracks for ever, as the search runs it.

The pattern is compiled as a query's `re:/.../` is (`studio.search.query.RegexTerm`) and
matched as `studio.search.service` matches it: with a timeout, and with the GIL let go
(`concurrent=True`). Beside it a thread ticks every millisecond, standing for the web
process's other requests. Prints, with the GIL held and let go, how long the match ran
before it was stopped and how many times the other thread ran meanwhile.

    python scripts/bench_regex_timeout.py                 # a 1 s budget, 3,000 "a"
    python scripts/bench_regex_timeout.py --seconds 2 --chars 20000
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "studio.settings")
os.environ.setdefault("DEBUG", "1")

import django  # noqa: E402

django.setup()

from studio.search.query import parse  # noqa: E402


def run(pattern, text: str, seconds: float, concurrent: bool) -> tuple[float, int]:
    ticks = 0
    done = threading.Event()

    def tick() -> None:
        nonlocal ticks
        while not done.is_set():
            ticks += 1
            time.sleep(0.001)

    other = threading.Thread(target=tick)
    other.start()
    started = time.monotonic()
    try:
        pattern.search(text, concurrent=concurrent, timeout=seconds)
    except TimeoutError:
        pass
    took = time.monotonic() - started
    done.set()
    other.join()
    return took, ticks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=1.0, help="the match's time budget")
    parser.add_argument("--chars", type=int, default=3000, help='the text: this many "a"')
    parser.add_argument("--query", default="re:/((a|aa)+)+c/")
    args = parser.parse_args()
    pattern = parse(args.query).regexes[0].compiled()
    text = "a" * args.chars
    print(f"{args.query} on {args.chars:,} characters, a budget of {args.seconds:g} s")
    results = {}
    for concurrent in (False, True):
        took, ticks = run(pattern, text, args.seconds, concurrent)
        results[concurrent] = ticks
        gil = "let go" if concurrent else "held"
        print(f"  GIL {gil:6}: stopped after {took:.3f} s; the other thread ran {ticks:,} times")
    held = max(results[False], 1)
    print(f"  the other thread ran {results[True] / held:,.0f}x as often with the GIL let go")


if __name__ == "__main__":
    main()
