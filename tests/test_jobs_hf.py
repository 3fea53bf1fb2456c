"""The in-process transformers backend on the tiny random qwen3_5_moe model, through a worker
consuming the gpu queue (CPU here)."""

from __future__ import annotations

import pytest

from studio.models import JobStatus, Step
from tests.support.jobs import make_trajectory, start_job, wait_job
from tests.support.tiny_model import tiny_model_path  # noqa: F401

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker, pytest.mark.torch]


def test_hf_job_runs_on_the_gpu_queue(project, settings, tiny_model_path, default_worker):  # noqa: F811
    trajectory = make_trajectory(project)
    job = start_job(
        user=None,
        branch=trajectory.root_branch,
        fork_index=2,
        action="python -c 'import sys; print(sys.version)'",
        n=3,
        backend="hf",
        model=tiny_model_path,
        params={"max_tokens": 12, "temperature": 0.8, "seed": 7},
    )
    assert job.queue == f"{settings.STUDIO_QUEUE_PREFIX}gpu"
    job = wait_job(job, timeout=240)
    assert job.status == JobStatus.SUCCEEDED, job.error
    assert job.tokens_in > 0 and 0 < job.tokens_out <= 3 * 12
    assert job.prefill_s is not None and job.decode_s > 0 and job.tokens_per_s > 0
    steps = list(Step.objects.filter(branch__job=job).order_by("branch__sample_index"))
    assert len(steps) == 3
    for step in steps:
        assert step.raw_output  # random weights: gibberish, but real tokens
        assert step.parse_status in ("no_tag", "unclosed", "well_formed")
        assert 0 < step.timings["tokens_out"] <= 12
        assert step.meta["backend"] == "hf"
    assert set(job.branches.values_list("status", flat=True)) == {"succeeded"}
