"""`python manage.py demo_models [--host 127.0.0.1] [--port 8099]`: serve the scripted demo
stand-ins for an agent model ("scripted-agent"), a world model ("scripted-world"), a judge
("scripted-judge") and an embeddings model ("scripted-embedding") over the OpenAI-compatible
API, on this machine only, until stopped (Ctrl-C or TERM). They are rules, not models
(`studio.demo_data.scripted_models`); scripts/dev.sh starts this and `load_demo` adds the
"Scripted demo agent", "... world", "... judge" and "... embeddings" endpoints that use it."""

from __future__ import annotations

import signal

from django.core.management.base import BaseCommand, CommandError

from studio.demo_data.scripted_models import (
    AGENT_MODEL,
    DEFAULT_PORT,
    EMBEDDING_MODEL,
    JUDGE_MODEL,
    WORLD_MODEL,
    make_server,
)


class Command(BaseCommand):
    help = (
        "Serve the scripted demo agent and world (stand-ins, not models) over the OpenAI-"
        "compatible API on 127.0.0.1, for the demo's campaigns and episodes without a GPU."
    )

    def add_arguments(self, parser):
        parser.add_argument("--host", default="127.0.0.1", help="127.0.0.1 (the default) only")
        parser.add_argument(
            "--port", type=int, default=DEFAULT_PORT, help=f"default {DEFAULT_PORT}"
        )

    def handle(self, *args, **options):
        port = options["port"]
        if not 0 <= port <= 65535:
            raise CommandError(f"--port must be from 0 to 65535, got {port}")
        try:
            server = make_server(options["host"], port)
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        except OSError as exc:
            raise CommandError(
                f"cannot listen on {options['host']}:{port}: {exc.strerror or exc}"
            ) from None

        def stop(signum, frame):  # TERM from the supervisor: stop serving, exit 0
            raise KeyboardInterrupt

        signal.signal(signal.SIGTERM, stop)
        self.stdout.write(
            f"Scripted demo models (rules, not models) at {server.base_url}: "
            f"{AGENT_MODEL!r} (agent), {WORLD_MODEL!r} (world), {JUDGE_MODEL!r} (judge) and "
            f"{EMBEDDING_MODEL!r} (embeddings). Stop with Ctrl-C."
        )
        self.stdout.flush()
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass
        finally:
            server.server_close()
        self.stdout.write("Scripted demo models stopped.")
