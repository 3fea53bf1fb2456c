"""A fine-tune through a real Celery worker on the gpu queue, with the tiny qwen3_5_moe model on
CPU: Cancel stops it at a step with its checkpoint kept, Resume goes on from that checkpoint to
the end, the loss curve is recorded (the last loss below the first), and the model it registers
loads and generates in the hf backend."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.urls import reverse

from inference.backends.hf import HFBackend
from inference.finetune import last_checkpoint
from inference.types import GenerationRequest, SamplingParams
from studio.models import FineTuneRun, JobStatus, ModelEndpoint
from studio.services import finetunes as service
from studio.tasks import enqueue_finetune
from tests.support.tiny_model import tiny_model_path  # noqa: F401
from tests.support.worker import running_worker, wait_for
from tests.test_finetune_views import make_version

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.worker,
    pytest.mark.torch,
    pytest.mark.usefixtures("isolated_queues"),
]

STEPS = 5


def _row(pk: int) -> FineTuneRun:
    return FineTuneRun.objects.get(pk=pk)


def test_a_fine_tune_is_cancelled_resumed_from_its_checkpoint_and_registers_a_model(
    client,
    project,
    tiny_model_path,  # noqa: F811
    tmp_path,
):
    version, _ = make_version(project, trained=2, extra=3)
    data = service.FineTuneData(
        name="tiny run",
        dataset_version=version,
        base=tiny_model_path,
        learning_rate=1e-2,
        max_steps=STEPS,
        heldout=2,
        seed=1,
    )
    run = service.start_finetune(project, project.users["researcher"], data)
    enqueue_finetune(run)  # autocommit: sent at once
    client.force_login(project.users["researcher"])
    with running_worker(("gpu",), log_path=tmp_path / "worker.log"):
        # Cancel once a worker has it (its model still loading): it stops after its first step,
        # whose checkpoint it keeps, however fast its steps are
        wait_for(lambda: _row(run.pk).status == JobStatus.RUNNING, timeout=60, interval=0.05)
        client.post(reverse("finetune_cancel", args=[run.pk]))
        wait_for(lambda: _row(run.pk).is_finished, timeout=120)
        stopped = _row(run.pk)
        assert stopped.status == JobStatus.CANCELLED, stopped.error
        assert stopped.step == 1, stopped.step
        assert last_checkpoint(stopped.output_dir)[1] == stopped.step
        assert stopped.endpoint_id is None and stopped.loss_history
        page = client.get(reverse("finetune_page", args=[run.pk])).content.decode()
        assert "finetune-resume" in page and f"Stopped at step {stopped.step}" in page

        client.post(reverse("finetune_resume", args=[run.pk]))
        wait_for(lambda: _row(run.pk).is_finished, timeout=180)
    done = _row(run.pk)
    assert done.status == JobStatus.SUCCEEDED, done.error
    assert (done.phase, done.progress, done.step, done.total_steps) == ("done", 1.0, STEPS, STEPS)
    assert done.resumed_from_step == stopped.step and done.attempts == 2
    # the lineage keeps every resume, and how the rows fitted max_length (all of them here)
    assert done.settings[service.RESUMES_KEY] == [stopped.step]
    assert done.settings[service.FIT_KEY] == {"rows_trimmed": 0, "rows_dropped": 0, "dropped": []}
    assert done.queue.endswith("gpu") and done.worker
    # the curve: every step once, from before the stop and after it
    assert [int(s) for s, *_ in done.loss_history] == list(range(1, STEPS + 1))
    assert (
        done.first_loss == done.loss_history[0][1] and done.final_loss == done.loss_history[-1][1]
    )
    assert done.final_loss < done.first_loss, done.loss_history
    assert done.tokens_seen > 0 and done.train_s > 0 and done.examples == 6
    # the model it registered: an in-process world model whose folder is the PEFT adapter
    endpoint = ModelEndpoint.objects.get(pk=done.endpoint_id)
    assert (endpoint.role, endpoint.kind, endpoint.name) == ("world", "hf", "tiny run")
    assert endpoint.model == done.result_dir
    assert Path(done.result_dir, "adapter_config.json").is_file()
    [completion] = HFBackend(model=endpoint.model, device="cpu").generate(
        GenerationRequest(
            messages=[{"role": "user", "content": "ls"}],
            params=SamplingParams(temperature=0, max_tokens=4),
        )
    )
    assert completion.tokens_out > 0
