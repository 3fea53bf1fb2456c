"""`python manage.py import_trajectories PATH... --project NAME [--format F] [--domain D]`.

Directories are walked for .json/.jsonl/.traj files (the format is still detected from the
content). Each file is imported in its own transaction; a file that fails writes nothing,
its error is printed, the other files are still imported, and the command exits non-zero.
A project the command created is removed again when every file failed. A file past an
import limit (studio.importers.limits: nesting depth, file size, line length, kept-field
size) is an error like any other: one line naming the file, line or record and the limit.
The steps are indexed for search before the command returns (`studio.search.indexer`).
"""

from __future__ import annotations

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from studio.importers.registry import KNOWN_SUFFIXES
from studio.models import DOMAINS
from studio.search.indexer import index_pending
from studio.services.imports import ImportFailure, do_import_file, list_formats
from studio.services.projects import get_or_create_project


def expand(paths: list[str]) -> list[Path]:
    files: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            files += sorted(
                p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in KNOWN_SUFFIXES
            )
        elif path.is_file():
            files.append(path)
        else:
            raise CommandError(f"{raw}: no such file or directory")
    return files


class Command(BaseCommand):
    help = "Import trajectory files (formats detected by content) into a project."

    def add_arguments(self, parser):
        parser.add_argument("paths", nargs="+", metavar="PATH")
        parser.add_argument("--project", required=True, help="project name (created if missing)")
        parser.add_argument("--format", dest="fmt", choices=list_formats(), help="force a format")
        parser.add_argument("--domain", choices=DOMAINS, help="force the domain")

    def handle(self, *args, paths, project, fmt=None, domain=None, **options) -> None:
        files = expand(paths)
        if not files:
            raise CommandError("no trajectory files found (.json, .jsonl, .traj)")
        proj, new_project = get_or_create_project(project)
        created = steps = skipped = 0
        errors: list[str] = []
        for path in files:
            try:
                result = do_import_file(project=proj, path=path, fmt=fmt, domain=domain)
            except ImportFailure as exc:
                errors.append(str(exc))
                if len(files) > 1:
                    self.stderr.write(f"error: {exc}")
                continue
            created += result.trajectories_created
            steps += result.steps_created
            skipped += result.trajectories_skipped
            if len(files) > 1 and options.get("verbosity", 1) > 1:
                self.stdout.write(
                    f"{path}: {result.detected_format}, {result.trajectories_created} "
                    f"trajectories, {result.steps_created} steps"
                )
        if errors and new_project and not created and not skipped:
            proj.delete()  # nothing went in: a bad file leaves no empty project behind
        if errors and len(files) == 1:
            raise CommandError(errors[0])  # its one line says it all: nothing was imported
        line = (
            f"imported {created} {'trajectory' if created == 1 else 'trajectories'}, "
            f"{steps} {'step' if steps == 1 else 'steps'}"
        )
        if skipped:
            line += f" (skipped {skipped} already present)"
        self.stdout.write(line)
        if steps:
            # written unindexed for search (a worker indexes them after each commit, if one
            # runs): indexed here too, so that they are found when this returns
            indexed = index_pending()
            if options.get("verbosity", 1) > 1:
                self.stdout.write(
                    f"indexed {indexed.steps} {'step' if indexed.steps == 1 else 'steps'} for "
                    f"search in {indexed.seconds:.1f} s"
                )
        if errors:
            raise CommandError(f"{len(errors)} of {len(files)} files not imported (errors above)")
