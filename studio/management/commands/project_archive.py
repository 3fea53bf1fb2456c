"""`python manage.py project_archive export NAME --out FILE` and `project_archive import FILE`:
move a whole project between installations, or keep it as a backup (`studio.archive`).
`project_archive show FILE` prints an archive's header: where it comes from and what it holds."""

from __future__ import annotations

import sys
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError
from django.template.defaultfilters import filesizeformat

from studio.archive.codec import ArchiveError
from studio.archive.reader import import_archive, read_header
from studio.archive.writer import export_project
from studio.models import Project
from studio.search.indexer import index_pending


def plural(n: int, one: str, many: str | None = None) -> str:
    return f"{n:,} {one if n == 1 else (many or one + 's')}"


class Command(BaseCommand):
    help = "Export a project to an archive file, or import one as a new project."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        export = sub.add_parser("export", help="write a project to an archive file")
        export.add_argument("name", metavar="NAME", help="the project's name (or id)")
        export.add_argument("--out", required=True, help="the archive to write (.jsonl.gz)")
        export.add_argument(
            "--without-files",
            action="store_true",
            help="leave out the files rows point to (finished exports, uploads kept for "
            "Retry); their paths are then empty in the imported project",
        )
        export.add_argument("--no-progress", action="store_true", help="no progress bars")
        load = sub.add_parser("import", help="import an archive as a new project")
        load.add_argument("file", metavar="FILE")
        load.add_argument("--name", help="the new project's name (default: the archived one's)")
        load.add_argument(
            "--id-map",
            metavar="FILE",
            help="write each model's old and new ids there (JSON lines)",
        )
        load.add_argument("--no-progress", action="store_true", help="no progress bars")
        show = sub.add_parser("show", help="print an archive's header")
        show.add_argument("file", metavar="FILE")

    def handle(self, *args, **o) -> None:
        try:
            getattr(self, f"do_{o['action']}")(o)
        except ArchiveError as exc:
            raise CommandError(f"{exc}; nothing was written") from None

    def progress(self, o):
        if o.get("no_progress"):
            from studio.archive.writer import no_progress

            return no_progress
        from tqdm import tqdm

        from studio.archive.writer import no_progress

        def bar(label: str, total: int):
            if not total:
                return no_progress(label, total)
            return tqdm(total=total, desc=label, unit="rows", file=sys.stderr, leave=False)

        return bar

    def do_export(self, o) -> None:
        out = Path(o["out"])
        if out.is_dir():
            raise CommandError(f"--out {out} is a folder: name the archive file to write")
        if not out.parent.is_dir():
            raise CommandError(f"--out {out}: the folder {out.parent} does not exist")
        project = self._project(o["name"])
        result = export_project(
            project, out, with_files=not o["without_files"], progress=self.progress(o)
        )
        models = sum(1 for n in result.counts.values() if n)
        self.stdout.write(
            f"exported project {project.name!r} (id {project.pk}): "
            f"{plural(result.rows, 'row')} of {plural(models, 'model')}, "
            f"{plural(result.users, 'user')}, {plural(result.files, 'file')} "
            f"({filesizeformat(result.file_bytes)}) to {out} ({filesizeformat(result.size)})"
        )

    def do_import(self, o) -> None:
        path = Path(o["file"])
        if not path.is_file():
            raise CommandError(f"{path}: no such file")
        id_map = open(o["id_map"], "wb") if o.get("id_map") else None  # noqa: SIM115
        try:
            result = import_archive(
                path, name=o.get("name"), id_map=id_map, progress=self.progress(o)
            )
        finally:
            if id_map is not None:
                id_map.close()
        project = result.project
        # its steps were written unindexed for search (a worker indexes them after the
        # commit, if one runs): indexed here too, so that they are found when this returns
        index_pending()
        self.stdout.write(
            f"imported project {project.name!r} (id {project.pk}): "
            f"{plural(result.rows, 'row')}, {plural(result.files, 'file')}; users: "
            f"{len(result.users_matched)} matched by username"
            + (
                f", {len(result.users_created)} created inactive "
                f"({', '.join(result.users_created)}): activate them and set their passwords"
                if result.users_created
                else ""
            )
        )
        if result.unreadable_keys:
            self.stderr.write(
                "warning: the stored API keys of "
                f"{', '.join(repr(n) for n in result.unreadable_keys)} cannot be decrypted "
                "here (another SECRET_KEY or STUDIO_ENCRYPTION_KEYS): add the old key to "
                "STUDIO_ENCRYPTION_KEYS, or enter the API keys again on the Models page"
            )
        for warning in result.warnings:
            self.stderr.write(f"warning: {warning}")

    def do_show(self, o) -> None:
        header = read_header(Path(o["file"]))
        project = header.get("project") or {}
        self.stdout.write(
            f"project {project.get('name')!r} (id {project.get('id')}) from a "
            f"{header.get('database')} database, exported {header.get('exported_at')} by studio "
            f"{header.get('studio_version')} (migration {(header.get('migrations') or ['?'])[-1]})"
        )
        for entry in header.get("models") or []:
            if entry.get("count"):
                self.stdout.write(f"  {entry['model']}: {plural(entry['count'], 'row')}")
        self.stdout.write(f"  users: {header.get('users', 0)}")

    def _project(self, ref: str) -> Project:
        found = Project.objects.filter(name=ref).first()
        if found is None and ref.isdigit():
            found = Project.objects.filter(pk=int(ref)).first()
        if found is None:
            raise CommandError(f"no project named {ref!r}")
        return found
