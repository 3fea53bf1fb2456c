"""`python manage.py export_dataset (NAME | --trajectory ID [--branch ID]) --project P
--format F --out PATH`: a dataset (its latest version, or `--dataset-version N`) or a trajectory (every
step of its recorded branch, or of `--branch`) as training data. The file is written beside
PATH and moved there once complete, so a failed export leaves no half file. LLaMA-Factory's
format also writes (or updates) `dataset_info.json` in PATH's folder. `--drop-rejected-context`
leaves out rows whose earlier steps hold a rejected one (see `datasets.rejected_steps`)."""

from __future__ import annotations

import json
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from studio.exports.formats import FORMATS, ExportOptions
from studio.models import Branch, Dataset, Project, Trajectory
from studio.services import datasets as service


class Command(BaseCommand):
    help = "Export a dataset or a trajectory as training data (one JSON row per line)."

    def add_arguments(self, parser):
        parser.add_argument("name", nargs="?", metavar="NAME", help="the dataset's name")
        parser.add_argument("--trajectory", type=int, help="export this trajectory instead")
        parser.add_argument("--branch", type=int, help="with --trajectory: this branch")
        parser.add_argument(
            "--dataset-version", dest="number", type=int, help="the version (default: latest)"
        )
        parser.add_argument("--project", required=True, help="the project's name or id")
        parser.add_argument("--format", dest="fmt", required=True, choices=list(FORMATS))
        parser.add_argument("--out", required=True, help="the file to write")
        parser.add_argument(
            "--turns", choices=["wm", "agent"], default="wm",
            help="chat formats: world-model turns (default) or agent turns",
        )  # fmt: skip
        parser.add_argument(
            "--thinking", action="store_true", help="world-model targets keep the model's thinking"
        )
        parser.add_argument("--style", choices=["sharegpt", "alpaca"], default="sharegpt")
        parser.add_argument(
            "--drop-rejected-context", action="store_true",
            help="leave out rows whose context (the branch's earlier steps) holds a rejected step",
        )  # fmt: skip
        parser.add_argument("--no-progress", action="store_true", help="no progress bar")

    def handle(self, *args, **o) -> None:
        from tqdm import tqdm

        out = Path(o["out"])
        if not out.parent.is_dir():
            raise CommandError(f"--out {out}: the folder {out.parent} does not exist")
        project = self._project(o["project"])
        counts = service.ExportCounts()
        if (o["name"] is None) == (o["trajectory"] is None):
            raise CommandError("give a dataset NAME or --trajectory ID (one of them)")
        if o["branch"] is not None and o["trajectory"] is None:
            raise CommandError("--branch needs --trajectory")
        if o["trajectory"] is not None:
            trajectory = Trajectory.objects.filter(pk=o["trajectory"], project=project).first()
            if trajectory is None:
                raise CommandError(f"project {project.name!r} has no trajectory {o['trajectory']}")
            if o["branch"] is None:
                branch = trajectory.root_branch
            else:
                found = Branch.objects.filter(pk=o["branch"], trajectory=trajectory).first()
                if found is None:
                    raise CommandError(f"trajectory {trajectory.pk} has no branch {o['branch']}")
                branch = found
            total = branch.all_steps().count()
            examples = service.branch_examples(branch, counts, reviews=o["drop_rejected_context"])
            label = f"trajectory {trajectory.pk}, branch {branch.name!r}"
            info_name = f"trajectory-{trajectory.pk}"
        else:
            dataset = Dataset.objects.filter(project=project, name=o["name"]).first()
            if dataset is None:
                raise CommandError(f"project {project.name!r} has no dataset {o['name']!r}")
            versions = dataset.versions.all()
            version = (
                versions.filter(number=o["number"]).first()
                if o["number"]
                else versions.order_by("-number").first()
            )
            if version is None:
                raise CommandError(
                    f"dataset {dataset.name!r} has no version {o['number']}"
                    if o["number"]
                    else f"dataset {dataset.name!r} has no version yet"
                )
            if version.item_count == 0:
                raise CommandError(f"{dataset.name} v{version.number} is empty: nothing to export")
            total = version.item_count
            examples = service.version_examples(version, counts, reviews=o["drop_rejected_context"])
            label = f"{dataset.name} v{version.number}"
            info_name = f"{service.file_stem(dataset.name)}-v{version.number}"
        options = ExportOptions(
            turns=o["turns"], thinking=o["thinking"], llamafactory_style=o["style"],
            drop_rejected_context=o["drop_rejected_context"],
        )  # fmt: skip
        bar = tqdm(total=total, unit="step", disable=o["no_progress"], desc="export")
        with bar:  # one tick per step read
            examples = service.ticking(examples, counts, lambda _: bar.update(1))
            service.write_atomically(service.rows_of(examples, o["fmt"], options, counts), out)
            bar.update(max(0, total - bar.n))  # items whose step was deleted
        if o["fmt"] == "llamafactory":
            self._dataset_info(out, info_name, options)
        line = f"wrote {counts.rows} rows of {label} to {out} ({o['fmt']})"
        notes = []
        if counts.no_row:
            notes.append(
                f"{counts.no_row} step{'s' if counts.no_row != 1 else ''} with no row in this format"
            )
        if counts.deleted:
            notes.append(
                f"{counts.deleted} item{'s' if counts.deleted != 1 else ''} whose step was deleted"
            )
        if counts.rejected_context:
            n = counts.rejected_context
            notes.append(f"{n} row{'s' if n != 1 else ''} whose context holds a rejected step")
        if notes:
            line += "; left out: " + ", ".join(notes)
        if counts.empty_thinking:
            n = counts.empty_thinking
            line += (
                f"; {n} target{'s' if n != 1 else ''} without world-model thinking written with "
                "an empty think block"
            )
        self.stdout.write(line)

    def _project(self, ref: str) -> Project:
        found = Project.objects.filter(name=ref).first()
        if found is None and ref.isdigit():
            found = Project.objects.filter(pk=int(ref)).first()
        if found is None:
            raise CommandError(f"no project named {ref!r}")
        return found

    def _dataset_info(self, out: Path, name: str, options: ExportOptions) -> None:
        info_path = out.parent / "dataset_info.json"
        info: dict = {}
        if info_path.exists():
            try:
                info = json.loads(info_path.read_text(encoding="utf-8"))
            except json.JSONDecodeError as exc:
                raise CommandError(f"{info_path} is not valid JSON ({exc}); not changed") from exc
        info.update(json.loads(service.dataset_info(name, options, out.name)))
        info_path.write_text(
            json.dumps(info, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
        )
        self.stdout.write(f"dataset_info.json names it {name!r} ({info_path})")
