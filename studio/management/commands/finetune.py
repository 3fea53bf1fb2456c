"""Fine-tune a world model on a dataset version from the shell:

    finetune --dataset NAME --version V --base PATH|tiny --out DIR [--project P]
             [--method lora|full] [--rank R] [--alpha A] [--targets q_proj,v_proj]
             [--epochs E] [--lr LR] [--max-length N] [--max-steps N] [--seed S]
             [--name NAME] [--heldout N]

It makes the same run a page's form makes (its split, base endpoint and lineage; its output
under DIR), trains it in this process (`studio.jobs.finetunes.run_finetune`) with a progress
bar on stderr (the loss in its postfix), registers the model on the project's Models page and
prints where it is. `--base tiny` builds the tiny random model (into the data dir) first.
Ctrl-C stops the training at its next step, keeping its checkpoint. Bad input exits non-zero
with one line saying what."""

from __future__ import annotations

import dataclasses
import math
import re
import sys
import threading
import uuid
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connection

from studio.models import Dataset, DatasetVersion, EndpointRole, FineTuneRun, ModelEndpoint, Project
from studio.services.finetunes import FineTuneData

# the defaults a page's form starts from (`FineTuneData`), shown in --help
DEFAULTS = {f.name: f.default for f in dataclasses.fields(FineTuneData)}


def _number(kind: type, flag: str):
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            what = "a whole number" if kind is int else "a number"
            raise CommandError(f"{flag}: {text!r} is not {what}") from None
        if not math.isfinite(value):
            raise CommandError(f"{flag}: {text!r} is not a finite number")
        return value

    return parse


class Command(BaseCommand):
    help = "Fine-tune a world model on a dataset version (LoRA or full), in this process."

    def create_parser(self, prog_name: str, subcommand: str, **kwargs: Any) -> CommandParser:
        # --version names the dataset's version here, not the studio's (Django's own flag)
        return super().create_parser(prog_name, subcommand, conflict_handler="resolve", **kwargs)

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--dataset", required=True, help="dataset name")
        parser.add_argument("--version", required=True, help="version number (or 'latest')")
        parser.add_argument(
            "--base",
            required=True,
            help="the base model: a model folder, a world model of the project's Models page "
            "(kind hf) by name, or 'tiny' (the tiny random model, built in code)",
        )
        parser.add_argument("--out", required=True, help="the folder for checkpoints and result")
        parser.add_argument("--project", help="project name (needed when several have the dataset)")
        d = DEFAULTS
        parser.add_argument(
            "--method", default=str(d["method"]), help=f"lora or full (default: {d['method']})"
        )
        parser.add_argument(
            "--rank", default=str(d["lora_rank"]), help=f"LoRA rank (default: {d['lora_rank']})"
        )
        parser.add_argument(
            "--alpha",
            default=str(d["lora_alpha"]),
            help=f"LoRA alpha (default: {d['lora_alpha']})",
        )
        parser.add_argument(
            "--targets", default="", help="LoRA modules, comma-separated (default: every linear)"
        )
        parser.add_argument(
            "--epochs", default=f"{d['epochs']:g}", help=f"epochs (default: {d['epochs']:g})"
        )
        parser.add_argument(
            "--lr",
            default=f"{d['learning_rate']:g}",
            help=f"learning rate (default: {d['learning_rate']:g})",
        )
        parser.add_argument(
            "--max-length",
            default=str(d["max_length"]),
            help="tokens per row at most; a longer row leaves out its earliest turns "
            f"(default: {d['max_length']})",
        )
        parser.add_argument(
            "--max-steps", default=None, help="stop after this many steps (default: the epochs)"
        )
        parser.add_argument(
            "--seed",
            default=str(d["seed"]),
            help=f"seed of the training and the split (default: {d['seed']})",
        )
        parser.add_argument("--name", default="", help="the run's name (default: from the dataset)")
        parser.add_argument(
            "--heldout",
            default=str(d["heldout"]),
            help=f"held-out trajectories (default: {d['heldout']})",
        )
        parser.add_argument("--no-progress", action="store_true", help="no progress bar")

    def _version(self, o: dict[str, Any]) -> DatasetVersion:
        datasets = Dataset.objects.filter(name=o["dataset"])
        if o["project"]:
            project = Project.objects.filter(name=o["project"]).first()
            if project is None:
                raise CommandError(f"--project: no project named {o['project']!r}")
            datasets = datasets.filter(project=project)
        found = list(datasets.select_related("project")[:3])
        if not found:
            where = f" in project {o['project']!r}" if o["project"] else ""
            raise CommandError(f"--dataset: no dataset named {o['dataset']!r}{where}")
        if len(found) > 1:
            names = ", ".join(repr(d.project.name) for d in found)
            raise CommandError(
                f"--dataset: several projects have a dataset {o['dataset']!r} ({names}): "
                "name one with --project"
            )
        dataset = found[0]
        versions = dataset.versions.order_by("-number")
        raw = str(o["version"]).strip().lower().removeprefix("v")
        if raw == "latest":
            version = versions.first()
        elif raw.isdigit():
            version = versions.filter(number=int(raw)).first()
        else:
            raise CommandError(f"--version: {o['version']!r} is not a version number")
        if version is None:
            listed = ", ".join(f"v{n}" for n in versions.values_list("number", flat=True)[:20])
            raise CommandError(
                f"--version: {dataset.name!r} has no version {o['version']} "
                f"(its versions: {listed or 'none'})"
            )
        return version

    def handle(self, *args: Any, **o: Any) -> None:
        from studio.services import finetunes as service

        version = self._version(o)
        project = version.dataset.project
        base, endpoint = str(o["base"]).strip(), None
        if base != service.TINY:
            endpoint = ModelEndpoint.objects.filter(
                project=project, role=EndpointRole.WORLD, kind="hf", name=base
            ).first()
            if endpoint is None:
                path = Path(base).expanduser()
                if not path.is_dir():
                    raise CommandError(
                        f"--base: {base!r} is neither a model folder nor an in-process world "
                        "model of the project (nor 'tiny')"
                    )
                base = str(path.resolve())
        targets = tuple(t.strip() for t in o["targets"].split(",") if t.strip())
        max_steps = o["max_steps"]
        data = service.FineTuneData(
            name=o["name"] or f"{version.dataset.name} v{version.number} fine-tune",
            dataset_version=version,
            base=base,
            base_endpoint=endpoint,
            method=o["method"],
            lora_rank=_number(int, "--rank")(o["rank"]),
            lora_alpha=_number(int, "--alpha")(o["alpha"]),
            lora_targets=targets,
            epochs=_number(float, "--epochs")(o["epochs"]),
            learning_rate=_number(float, "--lr")(o["lr"]),
            max_length=_number(int, "--max-length")(o["max_length"]),
            max_steps=None if max_steps is None else _number(int, "--max-steps")(max_steps),
            seed=_number(int, "--seed")(o["seed"]),
            heldout=_number(int, "--heldout")(o["heldout"]),
            output_dir=str(Path(o["out"]).expanduser().resolve()),
        )
        try:
            run = service.start_finetune(project, None, data)
        except service.FineTuneError as exc:
            flag = FLAG_OF.get(str(exc).split(":", 1)[0].strip().lower())
            raise CommandError(f"{flag}: {exc}" if flag else str(exc)) from None
        self.stdout.write(
            f"fine-tune {run.pk} {run.name!r}: {run.dataset_name} v{run.version_number} on "
            f"{run.base_model} ({run.method}); {len(run.train_trajectory_ids)} trajectories "
            f"trained on, {len(run.heldout_trajectory_ids)} held out; output in {run.output_dir}"
        )
        self._train(run, o["no_progress"])

    def _train(self, run: FineTuneRun, no_progress: bool) -> None:
        from tqdm import tqdm

        from studio.jobs.finetunes import run_finetune
        from studio.services.finetunes import cancel_finetune

        bar = tqdm(unit="step", desc=f"fine-tune {run.pk}", file=sys.stderr, disable=no_progress)
        lock = threading.Lock()

        def report(p: Any) -> None:
            with lock:
                if p.total_steps and bar.total != p.total_steps:
                    bar.total = int(p.total_steps)
                bar.n = int(p.step)
                if p.loss is not None:
                    bar.set_postfix(loss=f"{p.loss:.4f}", refresh=False)
                bar.refresh()

        errors: list[BaseException] = []

        def body() -> None:
            try:
                run_finetune(run.pk, f"shell-{uuid.uuid4().hex[:12]}", report=report)
            except BaseException as exc:  # noqa: BLE001 - raised again in the main thread
                errors.append(exc)
            finally:
                connection.close()

        runner = threading.Thread(target=body, name=f"finetune-{run.pk}", daemon=True)
        runner.start()
        try:
            while runner.is_alive():
                runner.join(timeout=0.5)
        except KeyboardInterrupt:
            self.stderr.write("stopping at the next step: its checkpoint is kept")
            cancel_finetune(run)
            runner.join()
        finally:
            bar.close()
        if errors:
            raise errors[0]
        run.refresh_from_db()
        if run.status == "failed":
            raise _failure(run)
        if run.status == "cancelled":
            raise CommandError(
                f"fine-tune {run.pk} was cancelled at step {run.step}: the same command with "
                f"--out {run.output_dir} goes on from its checkpoint"
            )
        first = "-" if run.first_loss is None else f"{run.first_loss:.4f}"
        final = "-" if run.final_loss is None else f"{run.final_loss:.4f}"
        endpoint = run.endpoint.name if run.endpoint else "-"
        self.stdout.write(
            f"fine-tune {run.pk} done: {run.step} steps, loss {first} -> {final}, "
            f"{run.tokens_seen} tokens, {run.train_s:.1f} s"
        )
        self.stdout.write(f"model: {run.result_dir} (registered as world model {endpoint!r})")


# the flag a service message is about ("LoRA rank: ...")
FLAG_OF = {
    "name": "--name",
    "dataset version": "--version",
    "base model": "--base",
    "method": "--method",
    "lora rank": "--rank",
    "lora alpha": "--alpha",
    "lora target modules": "--targets",
    "epochs": "--epochs",
    "learning rate": "--lr",
    "max length": "--max-length",
    "seed": "--seed",
    "max steps": "--max-steps",
    "held-out trajectories": "--heldout",
}

# the trainer's config fields (`inference.finetune.FineTuneInputError.field`) as flags
FLAG_OF_FIELD = {
    "base_model": "--base",
    "method": "--method",
    "lora_rank": "--rank",
    "lora_alpha": "--alpha",
    "lora_targets": "--targets",
    "epochs": "--epochs",
    "learning_rate": "--lr",
    "max_length": "--max-length",
    "seed": "--seed",
    "max_steps": "--max-steps",
}
_FIELD_IN_TEXT = re.compile(r"\b(" + "|".join(FLAG_OF_FIELD) + r"): ")
# a sentence of the job's message about the page's Resume (or about starting a new run there)
_PAGE_ADVICE = re.compile(r"\s*[^.]*\b(Resume|resume|new fine-tune)\b[^.]*\.?\s*$")


def _failure(run: FineTuneRun) -> CommandError:
    """The one line a failed run ends the command with: the cause and the flag to change when
    its settings or rows caused it (the job's message names the trainer's field); else the
    run's error, with how to go on in the shell (the page's Resume is not the shell's)."""
    text = _PAGE_ADVICE.sub("", run.error or "").strip() or "no message"
    found = _FIELD_IN_TEXT.search(text)
    if found:
        said = re.sub(r"^\w+:\s*", "", text[found.start() :])  # the flag names the field
        return CommandError(f"{FLAG_OF_FIELD[found.group(1)]}: {said}")
    if text.startswith("Not trained:"):
        return CommandError(f"fine-tune {run.pk} was not trained: {text[12:].strip()}")
    return CommandError(
        f"fine-tune {run.pk} failed: {text} (the same command with --out {run.output_dir} "
        "goes on from its last checkpoint, if it saved one)"
    )
