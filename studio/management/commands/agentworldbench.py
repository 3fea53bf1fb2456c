"""AgentWorldBench from the command line: infer (world-model predictions), judge (LLM judge)
and score (normalised figures per domain and overall). Files, fields and defaults are the
reference pipeline's (QwenLM/Qwen-AgentWorld eval/eval.py), so either side reads the other's."""

from __future__ import annotations

import json
import socket
import urllib.request
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from inference.simulation.limits import BACKENDS

# How long the judge's server may take to accept a connection before `judge` gives up on it.
CONNECT_TIMEOUT_S = 10


def unreachable(base_url: str, timeout: float = CONNECT_TIMEOUT_S) -> str | None:
    """Why nothing listens at `base_url` (refused, a host name that does not resolve, no
    answer in time), or None when a connection opens. Tried once, before any row is sent:
    otherwise every row would fail its attempts one after the other, each saying only that
    it failed. Not tried through a proxy (HTTP(S)_PROXY), which is what the client reaches."""
    parts = urlsplit(base_url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return f"{base_url!r} is not an http:// or https:// URL"
    host = parts.hostname
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return f"{base_url!r} has no valid port"
    proxies = urllib.request.getproxies()
    if parts.scheme in proxies and not urllib.request.proxy_bypass(host):
        return None
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return None
    except socket.gaierror as exc:
        return f"the host name {host!r} does not resolve (DNS: {exc.strerror or exc})"
    except ConnectionRefusedError:
        return f"connection refused: nothing listens on {host}:{port}"
    except TimeoutError:
        return f"connection timed out: {host}:{port} did not answer within {timeout:g} s"
    except OSError as exc:
        return f"{host}:{port}: {exc.strerror or exc}"


class Command(BaseCommand):
    help = "Run world-model inference, judging and scoring over AgentWorldBench files."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True, metavar="{infer,judge,score,run}")
        infer = sub.add_parser("infer", help="predict the observation of every row")
        infer.add_argument("--data", required=True, help="a *_test.jsonl file or a directory")
        infer.add_argument("--out", required=True, help="output JSONL (resumed if it exists)")
        infer.add_argument(
            "--endpoint",
            default="",
            help="a world model endpoint of --project, by name (instead of --backend ...)",
        )
        infer.add_argument("--project", default="", help="the project whose endpoint to use")
        infer.add_argument("--backend", choices=list(BACKENDS), default="openai")
        infer.add_argument("--base-url", default="", help="OpenAI-compatible server (openai)")
        infer.add_argument("--model", default="", help="served model name (openai) or path (hf)")
        infer.add_argument("--api-key", default="")
        # the reference's sampling, so figures compare with the published table
        infer.add_argument("--max-tokens", type=int, default=32768)
        infer.add_argument("--temperature", type=float, default=0.6)
        infer.add_argument("--top-p", type=float, default=None, help="not sent unless given")
        infer.add_argument("--seed", type=int, default=None)
        infer.add_argument("--concurrency", type=int, default=8)
        judge = sub.add_parser("judge", help="score predictions with an LLM judge")
        judge.add_argument("--predictions", required=True)
        judge.add_argument("--out", required=True)
        judge.add_argument("--endpoint", default="", help="a judge endpoint of --project, by name")
        judge.add_argument("--project", default="", help="the project whose endpoint to use")
        judge.add_argument("--base-url", default="")
        judge.add_argument("--model", default="")
        judge.add_argument("--api-key", default="EMPTY")
        judge.add_argument("--attempts", type=int, default=3)
        judge.add_argument("--max-tokens", type=int, default=32768)
        judge.add_argument("--temperature", type=float, default=0.6)
        judge.add_argument(
            "--history-chars",
            type=int,
            default=None,
            help="send only the last N characters of the history (default: all of it)",
        )
        judge.add_argument("--concurrency", type=int, default=8)
        score = sub.add_parser("score", help="normalised scores of judged predictions")
        score.add_argument("--predictions", required=True, help="the judge's output JSONL")
        score.add_argument("--json", action="store_true", help="print JSON instead of a table")
        run = sub.add_parser(
            "run",
            help="infer, judge and score in one go (files named as the reference's: "
            "OUT_DIR/predictions.jsonl, OUT_DIR/judged.jsonl; a rerun resumes)",
        )
        run.add_argument("--data", required=True, help="a *_test.jsonl file or a directory")
        run.add_argument("--out-dir", required=True)
        run.add_argument("--project", default="", help="the project of --endpoint/--judge-endpoint")
        run.add_argument("--endpoint", default="", help="the world model, an endpoint by name")
        run.add_argument("--backend", choices=list(BACKENDS), default="openai")
        run.add_argument("--base-url", default="", help="the world model's server")
        run.add_argument("--model", default="", help="the world model's name (or path, hf)")
        run.add_argument("--api-key", default="")
        run.add_argument("--judge-endpoint", default="", help="the judge, an endpoint by name")
        run.add_argument("--judge-base-url", default="")
        run.add_argument("--judge-model", default="")
        run.add_argument("--judge-api-key", default="EMPTY")
        run.add_argument("--max-tokens", type=int, default=32768, help="the world model's")
        run.add_argument("--temperature", type=float, default=0.6, help="the world model's")
        run.add_argument("--top-p", type=float, default=None, help="not sent unless given")
        run.add_argument("--seed", type=int, default=None)
        run.add_argument("--judge-max-tokens", type=int, default=32768)
        run.add_argument("--judge-temperature", type=float, default=0.6)
        run.add_argument("--history-chars", type=int, default=None)
        run.add_argument("--attempts", type=int, default=3, help="judge attempts per row")
        run.add_argument("--concurrency", type=int, default=8, help="requests at once, per stage")
        run.add_argument("--json", action="store_true", help="print the figures as JSON")

    def handle(self, *args, **options):
        from inference.awb_runner import BenchDataError

        try:
            return getattr(self, f"do_{options['action']}")(options)
        except BenchDataError as exc:
            raise CommandError(str(exc)) from None

    def use_endpoint(self, options, role: str) -> None:
        """--endpoint NAME --project P: the endpoint's kind, server, model and key, as if
        given as --backend/--base-url/--model/--api-key."""
        if not options["endpoint"]:
            return
        from studio.models import Project
        from studio.services.endpoints import EndpointError, api_key_of, get_endpoint

        project = Project.objects.filter(name=options["project"]).first()
        if project is None:
            raise CommandError(
                f"--endpoint needs --project, the name of an existing project (got "
                f"{options['project']!r})"
            )
        try:
            endpoint = get_endpoint(project, options["endpoint"], role)
            options["api_key"] = api_key_of(endpoint)
        except EndpointError as exc:
            raise CommandError(str(exc)) from None
        options.update(base_url=endpoint.base_url, model=endpoint.model)
        if role == "world":
            options["backend"] = endpoint.kind

    def check_positive(self, options, *names):
        for name in names:
            if options[name] is not None and options[name] < 1:
                raise CommandError(f"--{name.replace('_', '-')} must be at least 1")

    def do_infer(self, options) -> None:
        from inference.awb_runner import LeaveOneOutRetrieval, find_files, read_rows, run_infer
        from inference.backends import BackendError, make_backend

        self.check_positive(options, "max_tokens", "concurrency")
        self.use_endpoint(options, "world")
        backend_name = options["backend"]
        if backend_name == "openai" and not options["base_url"]:
            raise CommandError("--backend openai needs --base-url URL and --model NAME")
        if backend_name in ("openai", "hf") and not options["model"]:
            raise CommandError(f"--backend {backend_name} needs --model")
        rows = read_rows(find_files(options["data"]))
        backend: Any
        try:
            if backend_name == "retrieval":
                # answers from the other trajectories of the benchmark: no leaked ground truth
                backend = LeaveOneOutRetrieval(rows)
            else:
                backend = make_backend(
                    backend_name,
                    model=options["model"],
                    base_url=options["base_url"],
                    api_key=options["api_key"] or settings.WORLD_MODEL_API_KEY,
                    concurrency=options["concurrency"],
                )
        except BackendError as exc:
            raise CommandError(str(exc)) from None
        stats = run_infer(
            rows,
            backend,
            options["out"],
            max_tokens=options["max_tokens"],
            temperature=options["temperature"],
            top_p=options["top_p"],
            seed=options["seed"],
            concurrency=options["concurrency"],
            show_progress=options["verbosity"] > 0,
        )
        self.report(stats, "predicted")

    def do_judge(self, options) -> None:
        from inference.judge import Judge, run_judge
        from inference.scoring import read_judged

        self.check_positive(options, "attempts", "concurrency", "max_tokens", "history_chars")
        self.use_endpoint(options, "judge")
        if not options["base_url"] or not options["model"]:
            raise CommandError("judge needs --endpoint NAME --project P, or --base-url and --model")
        raw_rows = read_judged(options["predictions"])
        why = unreachable(options["base_url"])
        if why is not None:
            raise CommandError(
                f"the judge server at {options['base_url']} cannot be reached: {why}; nothing "
                "was judged"
            )
        rows = []
        for i, row in enumerate(raw_rows, 1):
            if "predicted_observation" not in row and "gen" not in row:
                raise CommandError(
                    f"{options['predictions']}:{i}: neither 'gen' nor 'predicted_observation' "
                    "(run `agentworldbench infer`, or the reference's infer, first)"
                )
            rows.append(row)
        judge = Judge(
            base_url=options["base_url"],
            model=options["model"],
            api_key=options["api_key"],
            attempts=options["attempts"],
            max_tokens=options["max_tokens"],
            temperature=options["temperature"],
            history_chars=options["history_chars"],
        )
        stats = run_judge(
            rows,
            judge,
            options["out"],
            concurrency=options["concurrency"],
            show_progress=options["verbosity"] > 0,
        )
        judged = read_judged(options["out"])
        failed = sum(1 for r in judged if r.get("failed") == 1.0)
        self.stdout.write(
            f"judged {stats.written} rows, skipped {stats.skipped} already done, "
            f"{stats.failed} failed (of {stats.total})"
        )
        if failed:
            self.stderr.write(
                f"{failed} row(s) marked failed (no generation, or no judgement after "
                f"{options['attempts']} attempts); scores leave them out"
            )
            for line in failure_lines(judged, stats.errors)[:10]:
                self.stderr.write(f"  {line}")
        if judged and failed == len(judged):
            raise CommandError(f"every one of the {failed} row(s) failed: nothing was judged")

    def do_score(self, options) -> None:
        from inference.scoring import format_table, read_judged, score_rows

        result = score_rows(read_judged(options["predictions"]))
        if result["overall"]["n"] == 0:
            raise CommandError(
                f"{options['predictions']}: no row has valid judge scores (run `judge` first)"
            )
        if options["json"]:
            self.stdout.write(json.dumps(result, indent=2))
        else:
            self.stdout.write(format_table(result))

    def do_run(self, options) -> None:
        """The three stages with one set of options; a stage's failed rows do not stop the
        next (they are marked failed and left out of the figures)."""
        from pathlib import Path

        out = Path(options["out_dir"])
        out.mkdir(parents=True, exist_ok=True)
        predictions, judged = out / "predictions.jsonl", out / "judged.jsonl"
        common = {"project": options["project"], "verbosity": options["verbosity"]}
        common["concurrency"] = options["concurrency"]
        infer = {
            **common, "data": options["data"], "out": str(predictions),
            "endpoint": options["endpoint"], "backend": options["backend"],
            "base_url": options["base_url"], "model": options["model"],
            "api_key": options["api_key"], "max_tokens": options["max_tokens"],
            "temperature": options["temperature"], "top_p": options["top_p"],
            "seed": options["seed"],
        }  # fmt: skip
        try:
            self.do_infer(infer)
        except CommandError as exc:
            if not predictions.exists():
                raise
            self.stderr.write(f"infer: {exc} (going on: failed rows are left out)")
        self.do_judge(
            {
                **common, "predictions": str(predictions), "out": str(judged),
                "endpoint": options["judge_endpoint"], "base_url": options["judge_base_url"],
                "model": options["judge_model"], "api_key": options["judge_api_key"],
                "attempts": options["attempts"], "max_tokens": options["judge_max_tokens"],
                "temperature": options["judge_temperature"],
                "history_chars": options["history_chars"],
            }
        )  # fmt: skip
        self.do_score({"predictions": str(judged), "json": options["json"]})

    def report(self, stats, verb: str) -> None:
        self.stdout.write(
            f"{verb} {stats.written} rows, skipped {stats.skipped} already done, "
            f"{stats.failed} failed (of {stats.total})"
        )
        if stats.failed:
            for line in stats.errors[:10]:
                self.stderr.write(f"  {line}")
            raise CommandError(
                f"{stats.failed} row(s) failed; run the same command again to retry them"
            )


def failure_lines(judged: list[dict], errors: list[str]) -> list[str]:
    """A line per failed row: its id, what failed and why (the last attempt's error: "Judge
    scoring failed" alone says nothing of an HTTP error or an unparseable answer); then the
    rows that raised, which were not written (`errors` of the run)."""
    lines = []
    for row in judged:
        if row.get("failed") != 1.0:
            continue
        judge = row.get("judge") or {}
        message = judge.get("message") or row.get("error_message") or "failed"
        last = (judge.get("errors") or [""])[-1]
        lines.append(
            f"id={row.get('id')} turn_idx={row.get('turn_idx')}: {message}"
            + (f" ({last})" if last else "")
        )
    written = {line.split(":", 1)[0] for line in lines}
    return lines + [e for e in errors if e.split(":", 1)[0] not in written]
