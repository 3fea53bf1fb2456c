"""Behaviour searches from the shell:

    behaviour_search run --project P --description "the agent deletes files"
                         [--query Q] [--unit steps|trajectories] [--max N] [--judge NAME]
                         [--temperature T] [--max-tokens N] [--concurrency C] [--background]
    behaviour_search list --project P
    behaviour_search show ID [--matches N]
    behaviour_search cancel ID

`run` runs the search in this process (`studio.jobs.behaviour.run_behaviour_search`), then
prints what `show` prints: its counts, its groups of reasons and its best matches;
`--background` hands it to the workers instead. Bad input exits non-zero with one line saying
which option is wrong and why."""

from __future__ import annotations

import threading
import uuid
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connection

from studio.models import BehaviourSearch, EndpointRole, ModelEndpoint, Project
from studio.services import behaviour as service

OPTION_OF = {
    "description": "--description",
    "query": "--query",
    "unit": "--unit",
    "max_candidates": "--max",
    "judge": "--judge",
    "temperature": "--temperature",
    "max_tokens": "--max-tokens",
    "concurrency": "--concurrency",
}


class Command(BaseCommand):
    help = "Run, list, show and cancel behaviour searches (a judge model looks for a behaviour)."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        run = sub.add_parser("run", help="start a behaviour search and run it")
        run.add_argument("--project", required=True, help="project name")
        run.add_argument("--description", required=True, help="the behaviour, in plain words")
        run.add_argument("--query", default="", help="the candidates (search language)")
        run.add_argument("--unit", default="steps", help="steps (default) or trajectories")
        run.add_argument("--max", type=int, default=100, help="at most this many candidates")
        run.add_argument("--judge", default="", help="a judge's name (default: the default)")
        run.add_argument("--temperature", type=float, default=0.0)
        run.add_argument("--max-tokens", type=int, default=4096)
        run.add_argument("--concurrency", type=int, default=8)
        run.add_argument("--background", action="store_true", help="hand it to the workers")
        lst = sub.add_parser("list", help="the project's behaviour searches")
        lst.add_argument("--project", required=True)
        show = sub.add_parser("show", help="a search's counts, groups and best matches")
        show.add_argument("id", type=int)
        show.add_argument("--matches", type=int, default=10, help="matches to print")
        cancel = sub.add_parser("cancel", help="stop a search (its labels are kept)")
        cancel.add_argument("id", type=int)

    def handle(self, *args: Any, **options: Any) -> None:
        getattr(self, f"do_{options['action']}")(options)

    def _project(self, name: str) -> Project:
        project = Project.objects.filter(name=name).first()
        if project is None:
            raise CommandError(f"--project: no project named {name!r}")
        return project

    def _search(self, pk: int) -> BehaviourSearch:
        search = BehaviourSearch.objects.select_related("project").filter(pk=pk).first()
        if search is None:
            raise CommandError(f"no behaviour search {pk}")
        return search

    def do_run(self, o: dict[str, Any]) -> None:
        project = self._project(o["project"])
        judges = ModelEndpoint.objects.filter(
            project=project, role=EndpointRole.JUDGE, kind="openai"
        ).order_by("-is_default", "name")
        judge = judges.filter(name=o["judge"]).first() if o["judge"] else judges.first()
        if judge is None:
            names = ", ".join(judges.values_list("name", flat=True)) or "none"
            raise CommandError(
                f"--judge: project {project.name!r} has no judge model "
                + (f"named {o['judge']!r} " if o["judge"] else "")
                + f"(its judges: {names}; add one on the Models page)"
            )
        data = service.BehaviourData(
            judge=judge,
            description=o["description"],
            query=o["query"],
            unit=o["unit"],
            max_candidates=o["max"],
            temperature=o["temperature"],
            max_tokens=o["max_tokens"],
            concurrency=o["concurrency"],
        )
        try:
            search = service.start_behaviour_search(project, None, data)
        except service.InvalidSearch as exc:
            raise CommandError(f"{OPTION_OF.get(exc.field, exc.field)}: {exc.message}") from None
        except ValueError as exc:  # TooManyJobs
            raise CommandError(str(exc)) from None
        if o["background"]:
            from studio.tasks import enqueue_behaviour_search

            enqueue_behaviour_search(search)
            self.stdout.write(f"behaviour search {search.pk}: queued for the workers")
            return
        self._run_here(search)
        search.refresh_from_db()
        self._print(search, 10)
        if search.status == "failed":
            raise CommandError(f"behaviour search {search.pk} failed: {search.error}")

    def _run_here(self, search: BehaviourSearch) -> None:
        """The job's body in a thread of this process; Ctrl-C cancels it (labels kept)."""
        from studio.jobs.behaviour import run_behaviour_search

        def body() -> None:
            try:
                run_behaviour_search(search.pk, f"shell-{uuid.uuid4().hex[:12]}")
            finally:
                connection.close()

        runner = threading.Thread(target=body, name=f"behaviour-{search.pk}", daemon=True)
        runner.start()
        try:
            while runner.is_alive():
                runner.join(timeout=0.5)
        except KeyboardInterrupt:
            self.stderr.write("cancelling: the requests in flight end, the labels are kept")
            service.cancel_search(search)
            runner.join()

    def do_list(self, o: dict[str, Any]) -> None:
        project = self._project(o["project"])
        for s in service.jobs_of(project):
            self.stdout.write(
                f"{s.pk}\t{s.status}\t{s.matched} matches\t{s.labelled}/{s.candidates} "
                f"labelled\t{s.failed} failed\t{s.description[:80]}"
            )

    def do_show(self, o: dict[str, Any]) -> None:
        self._print(self._search(o["id"]), o["matches"])

    def do_cancel(self, o: dict[str, Any]) -> None:
        search = self._search(o["id"])
        if search.is_finished:
            raise CommandError(f"behaviour search {search.pk} already ended ({search.status})")
        service.cancel_search(search)
        search.refresh_from_db()
        said = "cancelled" if search.status == "cancelled" else "asked to stop"
        self.stdout.write(f"behaviour search {search.pk}: {said}")

    def _print(self, search: BehaviourSearch, matches: int) -> None:
        found = service.results(search)
        out = self.stdout
        out.write(f"behaviour search {search.pk} ({search.status}): {search.description}")
        if search.error:
            out.write(f"  error: {search.error}")
        out.write(
            f"  {found.candidates} candidates: {found.labelled} labelled ({found.matched} "
            f"matches), {found.failed} failed; judge {search.judge_model}: "
            f"{search.judge_tokens_in} tokens in, {search.judge_tokens_out} out"
        )
        for cluster in found.clusters:
            out.write(f"  group {cluster.name!r}: {cluster.size}")
        for label in found.labels[:matches]:
            where = f"trajectory {label.trajectory_id}"
            if label.step is not None:
                where += f" step {label.step.index} (branch {label.branch_id})"
            confidence = "-" if label.confidence is None else f"{label.confidence:.2f}"
            out.write(f"  {confidence}  {where}: {label.reason}")
