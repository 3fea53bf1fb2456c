"""`python manage.py sweep_files`: apply the file retention policy now (the workers apply it
every few minutes): remove uploads whose import succeeded or stopped more than
STUDIO_UPLOAD_RETENTION_DAYS ago, and leftover files of killed exports and jobs
(`studio.jobs.file_retention`)."""

from __future__ import annotations

from django.core.management.base import BaseCommand
from django.template.defaultfilters import filesizeformat

from studio.jobs.file_retention import sweep_files


class Command(BaseCommand):
    help = (
        "Remove uploaded files that are no longer needed for Retry and leftover temporary "
        "files (the workers do this every few minutes)."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--include-unmarked",
            action="store_true",
            help="also remove upload folders that name no database (made before the studio "
            "marked them) when no import job points into them: only if this data folder "
            "belongs to this database alone",
        )

    def handle(self, *args, **options) -> None:
        counts = sweep_files(include_unmarked=options["include_unmarked"], log_summary=False)
        self.stdout.write(
            f"removed {counts.uploads} uploaded file(s) ({filesizeformat(counts.upload_bytes)}) "
            f"and {counts.temp_files} leftover file(s) ({filesizeformat(counts.temp_bytes)})"
        )
