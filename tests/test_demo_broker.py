"""The embedded broker that scripts/dev.sh falls back to when no Redis answers: chosen on
request (STUDIO_BROKER=filesystem), and a real worker runs an import job through it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from studio.env import ConfigError, choose_broker
from studio.models import ImportJob, JobStatus, Trajectory
from tests.support.worker import ROOT, running_worker, wait_for, worker_env


def test_studio_broker_filesystem_wins_over_redis(tmp_path, monkeypatch):
    monkeypatch.setenv("STUDIO_BROKER", "filesystem")
    url, options, description = choose_broker("redis://127.0.0.1:6379/5", str(tmp_path))
    assert url == "filesystem://"
    assert options["data_folder_in"] == str(tmp_path / "broker" / "in")
    assert (tmp_path / "broker" / "processed").is_dir()
    assert "filesystem" in description and "STUDIO_BROKER" in description


def test_studio_broker_rejects_unknown_values(tmp_path, monkeypatch):
    monkeypatch.setenv("STUDIO_BROKER", "rabbit")
    with pytest.raises(ConfigError, match="STUDIO_BROKER='rabbit'"):
        choose_broker(None, str(tmp_path))


def test_redis_url_is_used_when_no_override(tmp_path, monkeypatch):
    monkeypatch.delenv("STUDIO_BROKER", raising=False)
    url, _options, description = choose_broker("redis://127.0.0.1:6379/5", str(tmp_path))
    assert url == "redis://127.0.0.1:6379/5" and "REDIS_URL" in description


@pytest.mark.worker
def test_worker_on_the_filesystem_broker_runs_an_import(transactional_db, project, tmp_path):
    env = {"STUDIO_BROKER": "filesystem", "STUDIO_DATA_DIR": str(tmp_path / "data")}
    upload = tmp_path / "two-steps.json"
    upload.write_text(
        json.dumps(
            {
                "format": "agentworld-studio/v1",
                "trajectories": [
                    {
                        "title": "through the filesystem broker",
                        "domain": "terminal",
                        "steps": [
                            {"action": "uname -s", "observation": "Linux"},
                            {"action": "whoami", "observation": "demo"},
                        ],
                    }
                ],
            }
        )
    )
    job = ImportJob.objects.create(
        project=project,
        original_name=upload.name,
        stored_path=str(upload),
        size_bytes=upload.stat().st_size,
    )
    log = tmp_path / "worker.log"
    with running_worker(("default",), extra_env=env, log_path=log):
        # Enqueue from another process configured like the web server of dev.sh.
        subprocess.run(
            [
                sys.executable,
                "-c",
                "import django; django.setup(); "
                "from studio.models import ImportJob; from studio.tasks import enqueue_import; "
                f"enqueue_import(ImportJob.objects.get(pk={job.pk}))",
            ],
            cwd=ROOT,
            env=worker_env(env),
            check=True,
            timeout=60,
        )
        wait_for(
            lambda: (
                ImportJob.objects.get(pk=job.pk).status in (JobStatus.SUCCEEDED, JobStatus.FAILED)
            ),
            timeout=60,
        )
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED, job.error
    assert (job.trajectories_created, job.steps_created) == (1, 2)
    assert Trajectory.objects.filter(
        project=project, title="through the filesystem broker"
    ).exists()
    assert "filesystem://" in log.read_text()
