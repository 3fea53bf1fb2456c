"""`python manage.py worlds import|export|list`: world files from the shell.

    worlds import FILE --project P        (creates the project if missing; a world of the
                                           same name gets a new version)
    worlds export NAME --project P --out FILE [--version N]
    worlds list --project P               (id, name, domain, latest version, MCP URL path)

Bad files exit non-zero naming the field (and the tool); nothing is written then."""

from __future__ import annotations

import json
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError, CommandParser

from inference.worlds import WorldError
from inference.worlds import loads as parse_json
from studio.models import Project, World


class Command(BaseCommand):
    help = "Import, export and list the fictional worlds of a project."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True, metavar="{import,export,list}")
        imp = sub.add_parser("import", help="import a world file (JSON)")
        imp.add_argument("file")
        imp.add_argument("--project", required=True, help="project name (created if missing)")
        exp = sub.add_parser("export", help="write a world's file")
        exp.add_argument("name")
        exp.add_argument("--project", required=True)
        exp.add_argument("--out", required=True, help="the file to write ('-': standard output)")
        exp.add_argument("--version", type=int, default=None, help="default: the latest")
        lst = sub.add_parser("list", help="the project's worlds")
        lst.add_argument("--project", required=True)

    def handle(self, *args, **options):
        getattr(self, f"do_{options['action']}")(options)

    def project(self, name: str) -> Project:
        project = Project.objects.filter(name=name).first()
        if project is None:
            raise CommandError(f"no project named {name!r}")
        return project

    def do_import(self, options) -> None:
        from studio.services.projects import get_or_create_project
        from studio.services.worlds import import_world

        path = Path(options["file"])
        if not path.is_file():
            raise CommandError(f"{path}: no such file")
        try:
            # NaN / Infinity: refused by parse_world below, naming their path and the tool
            data = parse_json(path.read_text(encoding="utf-8"), check=False)
        except OSError as exc:
            raise CommandError(f"{path}: cannot be read ({exc.strerror})") from None
        except UnicodeDecodeError:
            raise CommandError(f"{path}: not UTF-8 text") from None
        except json.JSONDecodeError as exc:
            raise CommandError(
                f"{path}: not JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})"
            ) from None
        except RecursionError:
            raise CommandError(f"{path}: its JSON is nested too deeply") from None
        from inference.worlds import parse_world

        try:
            parse_world(data, incoming=True)  # checked before any project is created
        except WorldError as exc:
            raise CommandError(f"{path}: {exc}") from None
        project, _ = get_or_create_project(options["project"])
        try:
            saved = import_world(project, data)
        except WorldError as exc:  # the service checks again: its message, on one line too
            raise CommandError(f"{path}: {exc}") from None
        if not saved.created:
            state = "unchanged"
        else:
            state = "new world" if saved.version.number == 1 else "new version"
        self.stdout.write(
            f"world {saved.world.pk} {saved.world.name!r} v{saved.version.number} ({state}) "
            f"in project {project.name!r}"
        )

    def do_export(self, options) -> None:
        from studio.services.worlds import export_text

        project = self.project(options["project"])
        world = World.objects.filter(project=project, name=options["name"]).first()
        if world is None:
            names = ", ".join(World.objects.filter(project=project).values_list("name", flat=True))
            raise CommandError(
                f"project {project.name!r} has no world named {options['name']!r} "
                f"(worlds: {names or 'none'})"
            )
        version = world.latest
        if options["version"] is not None:
            version = world.versions.filter(number=options["version"]).first()
            if version is None:
                raise CommandError(f"{world.name!r} has no version {options['version']}")
        assert version is not None
        text = export_text(version)
        if options["out"] == "-":
            self.stdout.write(text, ending="")
            return
        Path(options["out"]).write_text(text, encoding="utf-8")
        self.stdout.write(f"wrote {world.name!r} v{version.number} to {options['out']}")

    def do_list(self, options) -> None:
        project = self.project(options["project"])
        self.stdout.write("id\tname\tdomain\tversion\tMCP URL path")
        for world in World.objects.filter(project=project):
            latest = world.latest
            self.stdout.write(
                f"{world.pk}\t{world.name}\t{world.domain}\tv{latest.number if latest else 0}"
                f"\t/mcp/t/<token>/worlds/{world.pk}/"
            )
