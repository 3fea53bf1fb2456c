"""`manage.py finetune`: the same run the page makes, trained in the shell's process with the
tiny model it builds (`--base tiny`), registered on the Models page; bad input is one line."""

from __future__ import annotations

import shutil
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from studio.models import FineTuneRun, JobStatus, ModelEndpoint
from studio.services import finetunes as service
from tests.test_finetune_views import make_version

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.torch]


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"dataset": "nope"}, "--dataset: no dataset named 'nope'"),
        ({"version": "9"}, "--version: 'steps' has no version 9 (its versions: v1)"),
        ({"version": "x"}, "--version: 'x' is not a version number"),
        ({"project": "Nowhere"}, "--project: no project named 'Nowhere'"),
        ({"rank": "many"}, "--rank: 'many' is not a whole number"),
        ({"lr": "inf"}, "--lr: 'inf' is not a finite number"),
        ({"rank": "999"}, "--rank: LoRA rank: must be from 1 to 256"),
        ({"epochs": "0"}, "--epochs: epochs: must be in (0, 100]"),
        ({"base": "/no/such/model"}, "--base: '/no/such/model' is neither a model folder"),
    ],
)
def test_bad_input_is_one_line_naming_the_flag(project, tmp_path, changes, message):
    make_version(project, extra=0)
    options = {"dataset": "steps", "version": "1", "base": "tiny", "out": str(tmp_path)}
    with pytest.raises(CommandError) as refused:
        call_command("finetune", **{**options, **changes})
    assert message in str(refused.value)
    assert not FineTuneRun.objects.exists()


def test_the_command_builds_the_tiny_model_trains_and_registers_it(project, tmp_path, settings):
    settings.DATA_DIR = tmp_path / "data"
    version, _ = make_version(project, trained=1, extra=2)
    out = StringIO()
    call_command(
        "finetune",
        dataset="steps",
        version="1",
        base="tiny",
        out=str(tmp_path / "run"),
        project=project.name,
        max_steps="2",
        lr="1e-2",
        heldout="1",
        name="from the shell",
        no_progress=True,
        stdout=out,
    )
    run = FineTuneRun.objects.get()
    assert run.status == JobStatus.SUCCEEDED, run.error
    assert run.output_dir == str((tmp_path / "run").resolve())
    assert run.base_model == str(service.tiny_model_path())
    assert Path(run.base_model, "config.json").is_file()  # built by the job, in the data dir
    assert (run.step, run.total_steps, len(run.loss_history)) == (2, 2, 2)
    assert len(run.heldout_trajectory_ids) == 1 and run.dataset_version == version
    endpoint = ModelEndpoint.objects.get(pk=run.endpoint_id)
    assert (endpoint.name, endpoint.kind, endpoint.model) == (
        "from the shell",
        "hf",
        run.result_dir,
    )
    assert Path(run.result_dir) == (tmp_path / "run" / "adapter").resolve()
    text = out.getvalue()
    assert f"fine-tune {run.pk} 'from the shell': steps v1 on {run.base_model} (lora)" in text
    assert f"model: {run.result_dir} (registered as world model 'from the shell')" in text
    shutil.rmtree(tmp_path, ignore_errors=True)


def test_help_shows_each_default():
    from studio.management.commands.finetune import Command

    text = " ".join(Command().create_parser("manage.py", "finetune").format_help().split())
    for flag, default in [
        ("--max-length", "2048"),
        ("--epochs", "1"),
        ("--lr", "0.0002"),
        ("--rank", "8"),
        ("--alpha", "16"),
        ("--heldout", "20"),
        ("--seed", "0"),
    ]:
        assert f"(default: {default})" in text.split(flag, 2)[2].split("--", 1)[0], flag


def test_rows_too_long_are_one_line_naming_the_flag_without_a_traceback(
    project, tmp_path, settings, caplog, capfd
):
    settings.DATA_DIR = tmp_path / "data"
    make_version(project, trained=1, extra=1)
    with pytest.raises(CommandError) as refused:
        call_command(
            "finetune",
            dataset="steps",
            version="1",
            base="tiny",
            out=str(tmp_path / "run"),
            max_length="16",
            no_progress=True,
            stdout=StringIO(),
        )
    message = str(refused.value)
    assert message.startswith("--max-length: no row fits in 16 tokens")
    assert "raise max length to at least" in message
    assert "Resume" not in message and "resume" not in message
    assert not any(record.exc_info for record in caplog.records)
    assert "Traceback" not in capfd.readouterr().err
    run = FineTuneRun.objects.get()
    assert run.status == JobStatus.FAILED and "no row fits in 16 tokens" in run.error
    shutil.rmtree(tmp_path, ignore_errors=True)
