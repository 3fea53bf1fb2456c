"""`python manage.py queue_labels QUEUE --project P --format jsonl|csv|parquet --out PATH`: a
queue's annotations themselves as data, one row per annotation (annotators as pseudonyms;
`studio.services.labels`). QUEUE is the queue's name or id. The file is written beside PATH
and moved there once complete, so a failed export leaves no half file."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from studio.models import AnnotationQueue, Project
from studio.services import labels as service


class Command(BaseCommand):
    help = "Export a queue's annotations (one row per annotation) as JSONL, CSV or Parquet."

    def add_arguments(self, parser):
        parser.add_argument("queue", metavar="QUEUE", help="the queue's name or id")
        parser.add_argument("--project", required=True, help="the project's name or id")
        parser.add_argument("--format", dest="fmt", required=True, choices=list(service.FORMATS))
        parser.add_argument("--out", required=True, help="the file to write")

    def handle(self, *args, **o) -> None:
        out = Path(o["out"])
        if not out.parent.is_dir():
            raise CommandError(f"--out {out}: the folder {out.parent} does not exist")
        project = Project.objects.filter(name=o["project"]).first()
        if project is None and o["project"].isdigit():
            project = Project.objects.filter(pk=int(o["project"])).first()
        if project is None:
            raise CommandError(f"no project named {o['project']!r}")
        queues = AnnotationQueue.objects.filter(project=project)
        found = list(queues.filter(name=o["queue"]))
        if not found and o["queue"].isdigit():
            found = list(queues.filter(pk=int(o["queue"])))
        if not found:
            raise CommandError(f"project {project.name!r} has no queue {o['queue']!r}")
        if len(found) > 1:
            ids = ", ".join(str(q.pk) for q in found)
            raise CommandError(f"{len(found)} queues are named {o['queue']!r}: give an id ({ids})")
        fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".part")
        try:
            with os.fdopen(fd, "wb") as handle:
                rows = service.write_labels(found[0], o["fmt"], handle)
            os.chmod(tmp, 0o666 & ~_umask())  # as an ordinary file would be
            os.replace(tmp, out)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        self.stdout.write(
            f"{rows} annotation{'s' if rows != 1 else ''} of queue {found[0].name!r} -> {out}"
        )


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
