"""Helpers for the jobs tests: trajectories built straight from rows, workers shared by a
module, and waiting for jobs to finish."""

from __future__ import annotations

import json
from pathlib import Path

from studio.models import Branch, JobStatus, SimulationJob, Step, Trajectory
from tests.support.worker import wait_for

AWB_DIR = Path(__file__).resolve().parents[1] / "fixtures" / "awb"

TERMINAL_STEPS = [
    ("ls /srv/app", "app.py\nrequirements.txt\nstatic"),
    ("cat /srv/app/requirements.txt", "flask==3.0.2\ngunicorn==22.0.0"),
    ("python -c 'import flask; print(flask.__version__)'", "3.0.2"),
    ("pip list | grep -i gunicorn", "gunicorn 22.0.0"),
]


def make_trajectory(
    project,
    *,
    domain: str = "terminal",
    steps=TERMINAL_STEPS,
    title: str = "Check the web app's dependencies",
    task_instruction: str = "Find the Flask version the app uses.",
    system_prompt: str = "",
    key: str | None = None,
) -> Trajectory:
    trajectory = Trajectory.objects.create(
        project=project,
        domain=domain,
        title=title,
        task_instruction=task_instruction,
        system_prompt=system_prompt,
        source_format="test",
        source_key=key or f"{title}-{domain}-{len(steps)}",
        step_count=len(steps),
    )
    root = Branch.objects.create(trajectory=trajectory, name="recorded")
    Step.objects.bulk_create(
        Step(branch=root, index=i, action=a, observation=o) for i, (a, o) in enumerate(steps)
    )
    return trajectory


def start_job(branch: Branch, *, user=None, params: dict | None = None, **data) -> SimulationJob:
    """Validate, create and enqueue a simulation as the web does: `data` is the request's
    input (fork_index, action, n, mode, backend, ...), `params` its sampling fields."""
    from studio.services.simulation import build_request, start_simulation
    from studio.tasks import enqueue_simulation

    request = build_request(branch, {**data, **(params or {})})
    job = start_simulation(user=user, branch=branch, request=request)
    enqueue_simulation(job)
    return job


def live_texts(job: SimulationJob) -> list[str]:
    """The streamed text of each future of a running job, as the job row holds it."""
    live = SimulationJob.objects.get(pk=job.pk).live or {}
    return [state.get("text", "") for state in live.values()]


def wait_job(job: SimulationJob | object, timeout: float = 90.0):
    """Wait until the job row reaches a final status; return the fresh row."""
    model = type(job)

    def finished():
        row = model.objects.get(pk=job.pk)
        return (
            row
            if row.status in (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED)
            else None
        )

    return wait_for(finished, timeout=timeout)


def read_awb_rows(name: str) -> list[dict]:
    return [json.loads(line) for line in (AWB_DIR / name).read_text().splitlines() if line]


def judge_command(predictions: Path, out: Path, base_url: str, model: str) -> tuple[str, str]:
    """`agentworldbench judge` over `predictions`; its stdout and stderr."""
    from io import StringIO

    from django.core.management import call_command

    stdout, stderr = StringIO(), StringIO()
    call_command(
        "agentworldbench", "judge", "--predictions", str(predictions), "--out", str(out),
        "--base-url", base_url, "--model", model, stdout=stdout, stderr=stderr, verbosity=0,
    )  # fmt: skip
    return stdout.getvalue(), stderr.getvalue()


def drain_jobs(timeout: float = 60.0) -> None:
    """Cancel the jobs still queued and wait until none runs (or its worker is gone)."""
    from datetime import timedelta

    from django.utils import timezone

    from studio.jobs.runtime import lost_after_s, pulse_is_fresh
    from studio.models import ImportJob
    from studio.services.simulation import cancel_simulation

    for job in SimulationJob.objects.filter(status__in=[JobStatus.QUEUED, JobStatus.RUNNING]):
        cancel_simulation(job)
    ImportJob.objects.filter(status=JobStatus.QUEUED).update(
        status=JobStatus.CANCELLED, finished_at=timezone.now()
    )

    def settled():
        alive_after = timezone.now() - timedelta(seconds=lost_after_s())
        # rows a test wrote as RUNNING were claimed by no task: no worker writes them
        running = [
            f"{model.__name__} {j.pk}"
            for model in (SimulationJob, ImportJob)
            for j in model.objects.filter(status=JobStatus.RUNNING).exclude(claimed_by="")
            if j.heartbeat_at >= alive_after or pulse_is_fresh(model, j.pk)
        ]
        return not running or None

    wait_for(settled, timeout=timeout)
