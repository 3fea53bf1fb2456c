"""Benchmark: the compare view and the trajectory page stay small on a long trajectory.

Builds (or reuses, see --rebuild) a trajectory of --steps steps (default 2,000) with --obs-kb
KB observations (default 100: coloured log lines, all different) and nine branches forked at
three steps (a quarter, half and three quarters of the way): at each fork two replays that
copy the recorded steps with a one-word change every 40th step, and one where every
observation differs (half its lines changed, the same length: no shortcut tells it apart).
Then it starts the app as in production (uvicorn, DEBUG off) and drives headless Debian
Chromium (Playwright, /usr/bin/chromium or CHROMIUM_PATH):

- the compare view of two sets of 6 branches (the six replays; one replay and the differing
  branch of each fork): bytes transferred until the network is idle (the page and the rows
  it loads for the first screen, static files included), elements in the page, and the time
  to DOMContentLoaded (goals: under 2 MB and under 1 s);
- the trajectory page scrolled from step 0 to the last step: elements in the page at the end
  and the most seen on the way, and the time it took (goal: under 20,000 elements).

Each figure is printed against its goal with PASS or FAIL (the exit status is 1 when one
fails). The data stays in the database (project "bench-pages") for the next run; --drop
removes it afterwards.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/studio python scripts/bench_pages.py
    python scripts/bench_pages.py --steps 600 --obs-kb 20      # smaller, quicker
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROJECT = "bench-pages"
USER = "bench-pages"
COMPARE_BYTES_GOAL = 2 * 1024 * 1024
COMPARE_DCL_GOAL_S = 1.0
TRAJECTORY_ELEMENTS_GOAL = 20_000
# the figures of issue 13, measured before the compare view and the timeline were bounded
BEFORE = "before: compare 52.5 MB, 291,078 elements, 19 s to DOMContentLoaded; trajectory 127,824"


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--obs-kb", type=int, default=100)
    parser.add_argument("--rebuild", action="store_true", help="build the data again")
    parser.add_argument("--drop", action="store_true", help="delete the data at the end")
    parser.add_argument(
        "--only", choices=["compare", "trajectory"], help="measure one of the pages only"
    )
    parser.add_argument("--screenshots", type=Path, help="save a screenshot of each page here")
    parser.add_argument(
        "--runs", type=int, default=5, help="loads of each compare page (the median is shown)"
    )
    return parser.parse_args()


def setup_django() -> None:
    # production settings over plain HTTP on 127.0.0.1 (no TLS in front of the bench)
    os.environ.setdefault("DEBUG", "0")
    os.environ.setdefault("SECRET_KEY", "bench-pages-only")
    os.environ.setdefault("ALLOWED_HOSTS", "127.0.0.1")
    os.environ.setdefault("STUDIO_SSL_REDIRECT", "0")
    os.environ.setdefault("SECURE_COOKIES", "0")
    os.environ["DJANGO_SETTINGS_MODULE"] = "studio.settings"
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    call_command("collectstatic", "--noinput", verbosity=0)  # DEBUG off: whitenoise serves these


# ---- data ----------------------------------------------------------------------------------


def recorded_observation(i: int, size: int) -> str:
    lines, total, k = [], 0, 0
    while total < size:
        line = f"[{i:05d}:{k:05d}] \x1b[32mINFO\x1b[0m worker processed item <{k}> in {k % 97} ms & queued next\n"
        lines.append(line)
        total += len(line)
        k += 1
    return "".join(lines)[:size]


def one_word_changed(text: str) -> str:
    middle = text.find("INFO", len(text) // 2)
    return text[:middle] + "WARN" + text[middle + 4 :]


def half_the_lines_changed(text: str) -> str:
    return "".join(
        line.replace("INFO", "WARN") if k % 2 else line
        for k, line in enumerate(text.splitlines(keepends=True))
    )


def build_data(steps: int, obs_bytes: int, rebuild: bool):
    """The project, user, trajectory and its nine branches: (trajectory, replays, differing)
    with the branches in fork order."""
    from django.contrib.auth import get_user_model
    from django.db import transaction

    from studio.models import Branch, Membership, Project, Role, Trajectory

    key = f"bench-pages-{steps}x{obs_bytes}"
    project, _ = Project.objects.get_or_create(name=PROJECT)
    user, _ = get_user_model().objects.get_or_create(username=USER)
    Membership.objects.get_or_create(project=project, user=user, defaults={"role": Role.RESEARCHER})
    traj = Trajectory.objects.filter(project=project, source_key=key).first()
    forks = [steps // 4, steps // 2, 3 * steps // 4]
    if traj is not None and not rebuild and traj.branches.count() == 1 + 3 * len(forks):
        print(f"reusing trajectory {traj.pk} ({key}); --rebuild builds it again")
    else:
        if traj is not None:
            traj.delete()
        t0 = time.perf_counter()
        with transaction.atomic():
            traj = Trajectory.objects.create(
                project=project,
                domain="terminal",
                title=f"bench {steps} steps x {obs_bytes // 1024} KB",
                task_instruction="Benchmark trajectory",
                source_format="bench",
                source_key=key,
                step_count=steps,
            )
            root = Branch.objects.create(trajectory=traj, name="recorded")
            _write(
                root, 0, steps, obs_bytes, lambda i: (f"tail -n 2000 /var/log/app-{i}.log", None)
            )
            for at in forks:
                for n in range(2):
                    replay = Branch.objects.create(
                        trajectory=traj, parent=root, fork_index=at, name=f"replay {n} @{at}",
                        origin="simulated", sample_index=n,
                    )  # fmt: skip
                    _write(
                        replay,
                        at,
                        steps,
                        obs_bytes,
                        lambda i, n=n: (
                            f"tail -n 2000 /var/log/app-{i}.log",
                            one_word_changed if i % 40 == (7 + 13 * n) % 40 else "copy",
                        ),
                    )
                differing = Branch.objects.create(
                    trajectory=traj, parent=root, fork_index=at, name=f"differs @{at}",
                    origin="simulated", sample_index=2,
                )  # fmt: skip
                _write(
                    differing,
                    at,
                    steps,
                    obs_bytes,
                    lambda i: (
                        f"tail -n 2000 /var/log/app-{i}.log # retried",
                        half_the_lines_changed,
                    ),
                )
        print(f"built trajectory {traj.pk} ({key}) in {time.perf_counter() - t0:.0f} s")
    branches = list(
        traj.branches.exclude(parent__isnull=True).order_by("fork_index", "sample_index")
    )
    replays = [b for b in branches if b.sample_index < 2]
    differing = [b for b in branches if b.sample_index == 2]
    return traj, user, replays, differing


def _write(branch, start: int, end: int, obs_bytes: int, plan) -> None:
    """Steps start..end-1 of `branch`; plan(i) -> (action, None | "copy" | transform): None
    writes the recorded observation of a recorded step, "copy" the recorded one as the
    branch's own step, a function the recorded one transformed."""
    from studio.models import Step

    batch = []
    for i in range(start, end):
        action, how = plan(i)
        text = recorded_observation(i, obs_bytes)
        if callable(how):
            text = how(text)
        own = how is not None
        batch.append(
            Step(
                branch=branch,
                index=i,
                action=action,
                observation=text,
                provenance="replayed" if own else "recorded",
                observation_source="simulated" if own else "recorded",
                parse_status="well_formed" if own else "",
            )
        )
        if len(batch) == 50:
            Step.objects.bulk_create(batch)
            batch = []
    Step.objects.bulk_create(batch)


# ---- the app -------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_web(log: Path) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    out = open(log, "wb")  # noqa: SIM115 - the server writes it until stopped
    proc = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "studio.asgi:application", "--host", "127.0.0.1",
         "--port", str(port), "--no-access-log"],
        cwd=ROOT, env=dict(os.environ), stdout=out, stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while b"Uvicorn running" not in log.read_bytes():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"the web server did not start:\n{log.read_text()[-3000:]}")
        time.sleep(0.1)
    return proc, f"http://127.0.0.1:{port}"


def stop(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    except ProcessLookupError:
        pass


def session_cookie(user, url: str) -> dict:
    from django.conf import settings
    from django.test import Client

    client = Client()
    client.force_login(user)
    return {"name": settings.SESSION_COOKIE_NAME, "value": client.cookies[settings.SESSION_COOKIE_NAME].value, "url": url}  # fmt: skip


# ---- measurements --------------------------------------------------------------------------

ELEMENTS = "() => document.getElementsByTagName('*').length"


def measure_compare(context, url: str, shot: Path | None = None) -> dict:
    """One load of a compare page in this browser context (its cache as earlier loads left
    it): bytes of every response until the network is idle, timings, elements."""
    page = context.new_page()
    page.set_default_timeout(120_000)
    finished: list = []
    page.on("requestfinished", lambda request: finished.append(request))
    page.goto(url, wait_until="domcontentloaded")
    page.wait_for_load_state("networkidle")
    timing = page.evaluate(
        """() => { const n = performance.getEntriesByType('navigation')[0];
                   return [n.requestStart, n.responseStart, n.responseEnd,
                           n.domContentLoadedEventEnd]; }"""
    )
    request_ms, first_byte_ms, last_byte_ms, dcl_ms = timing
    sent = 0
    for request in finished:
        sizes = request.sizes()
        sent += sizes["responseBodySize"] + sizes["responseHeadersSize"]
    status = page.evaluate("() => document.querySelector('h1') ? 200 : 0")
    figures = {
        "bytes": sent,
        "requests": len(finished),
        "dcl_s": dcl_ms / 1000,
        "server_s": (first_byte_ms - request_ms) / 1000,
        "received_s": last_byte_ms / 1000,
        "elements": page.evaluate(ELEMENTS),
        "rows": page.locator("#compare-rows tr.compare-row").count(),
        "runs": page.locator("#compare-rows tr.compare-run").count(),
        "ok": status == 200,
    }
    if shot is not None:
        page.screenshot(path=str(shot))
    page.close()
    return figures


def measure_trajectory(browser, cookie: dict, url: str, shot: Path | None = None) -> dict:
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    context.add_cookies([cookie])
    page = context.new_page()
    page.set_default_timeout(120_000)
    page.goto(url)
    last_step = "() => { const s = document.querySelectorAll('#steps .step'); return s.length ? +s[s.length - 1].dataset.index : -1; }"  # fmt: skip
    most, windows = page.evaluate(ELEMENTS), 1
    t0 = time.perf_counter()
    while page.locator("#steps .steps-next").count():
        last = page.evaluate(last_step)
        page.locator("#steps .step").last.scroll_into_view_if_needed()
        page.mouse.wheel(0, 4000)
        page.wait_for_function(
            "n => { const s = document.querySelectorAll('#steps .step'); return s.length && +s[s.length - 1].dataset.index > n; }",
            arg=last,
        )  # fmt: skip
        windows += 1
        most = max(most, page.evaluate(ELEMENTS))
    scrolled_s = time.perf_counter() - t0
    page.wait_for_load_state("networkidle")
    page.wait_for_timeout(300)  # let the last prune run (one animation frame)
    figures = {
        "elements": page.evaluate(ELEMENTS),
        "most": max(most, page.evaluate(ELEMENTS)),
        "windows": windows,
        "loaded": page.locator("#steps .step-window:not(.placeholder)").count(),
        "placeholders": page.locator("#steps .step-window.placeholder").count(),
        "last": page.evaluate(last_step),
        "seconds": scrolled_s,
    }
    if shot is not None:
        page.screenshot(path=str(shot))
    context.close()
    return figures


def report_trajectory(t: dict, steps: int) -> bool:
    ok = t["most"] < TRAJECTORY_ELEMENTS_GOAL and t["last"] == steps - 1
    print(f"trajectory page, scrolled from step 0 to step {t['last']}:")
    print(
        f"  {t['elements']:,} elements at the end, at most {t['most']:,} on the way "
        f"(goal < 20,000) {verdict(ok)}"
    )
    print(
        f"  {t['windows']} windows in {t['seconds']:.1f} s; at the end {t['loaded']} "
        f"loaded and {t['placeholders']} emptied"
    )
    return ok


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def main() -> None:
    args = parse_args()
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    setup_django()
    from django.db import connection
    from django.urls import reverse
    from playwright.sync_api import sync_playwright

    traj, user, replays, differing = build_data(args.steps, args.obs_kb * 1024, args.rebuild)
    chromium = os.environ.get("CHROMIUM_PATH") or "/usr/bin/chromium"
    log = Path(os.environ.get("TMPDIR", "/tmp")) / f"bench-pages-web-{os.getpid()}.log"
    web, base = start_web(log)
    failed = False
    shots: list = []
    if args.screenshots:
        args.screenshots.mkdir(parents=True, exist_ok=True)
    try:
        cookie = session_cookie(user, base)
        compare = reverse("branch_compare", args=[traj.pk])
        selections = {
            "the six replays (2 per fork)": replays,
            "a replay and the differing branch of each fork": [
                b for pair in zip(replays[::2], differing, strict=True) for b in pair
            ],
        }
        load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
        print(
            f"load average {load} on {os.cpu_count()} CPUs (timings grow with it); "
            f"database: {connection.vendor}; {args.steps} steps x {args.obs_kb} KB observations; "
            f"forks at {', '.join(str(b.fork_index) for b in differing)}; {BEFORE}"
        )
        with sync_playwright() as pw:
            browser = pw.chromium.launch(
                executable_path=chromium,
                args=["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"],
            )  # fmt: skip
            for name, branches in selections.items() if args.only != "trajectory" else ():
                url = base + compare + "?" + "&".join(f"b={b.pk}" for b in branches)
                # A first visit (nothing cached), then loads as a reader who has been on the
                # studio's pages gets them: static files from the browser's cache.
                context = browser.new_context(viewport={"width": 1400, "height": 900})
                context.add_cookies([cookie])
                shot = args.screenshots and args.screenshots / f"compare-{len(shots)}.png"
                shots.append(shot)
                cold = measure_compare(context, url, shot)
                runs = [measure_compare(context, url) for _ in range(args.runs)]
                context.close()
                r = dict(runs[0])
                for key in ("dcl_s", "server_s", "received_s"):
                    r[key] = statistics.median(run[key] for run in runs)
                r["dcl_max_s"] = max(run["dcl_s"] for run in runs)
                r["bytes"] = max(run["bytes"] for run in [cold, *runs])
                r["requests"] = cold["requests"]
                r["ok"] = all(run["ok"] for run in [cold, *runs])
                bytes_ok = r["bytes"] < COMPARE_BYTES_GOAL
                dcl_ok = r["dcl_s"] < COMPARE_DCL_GOAL_S
                failed |= not (bytes_ok and dcl_ok and r["ok"])
                print(f"compare, {name}:")
                print(
                    f"  transferred {r['bytes'] / 1024 / 1024:.2f} MB in {r['requests']} requests "
                    f"on a first visit, static files included (goal < 2 MB) {verdict(bytes_ok)}"
                )
                print(
                    f"  DOMContentLoaded {r['dcl_s']:.2f} s, median of {args.runs} loads "
                    f"(slowest {r['dcl_max_s']:.2f} s) (goal < 1 s) {verdict(dcl_ok)}; the "
                    f"server answered in {r['server_s']:.2f} s, the page was in at "
                    f"{r['received_s']:.2f} s; on the first visit (static files not cached "
                    f"yet) {cold['dcl_s']:.2f} s"
                )
                print(
                    f"  {r['elements']:,} elements; {r['rows']} rows where the branches differ "
                    f"and {r['runs']} folded runs on the first screen"
                )
            if args.only != "compare":
                failed |= not report_trajectory(
                    measure_trajectory(
                        browser, cookie, base + reverse("trajectory", args=[traj.pk])
                    ),
                    args.steps,
                )
            browser.close()
    finally:
        stop(web)
        if args.drop:
            traj.project.delete()
            user.delete()
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
