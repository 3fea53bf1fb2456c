"""The embedded broker that scripts/dev.sh falls back to when no Redis answers (kombu's
SQLAlchemy transport over SQLite, `studio.jobs.sqlite_broker`), chosen on request
(STUDIO_BROKER=sqlite) or when no Redis answers; what dev.sh chose, recorded in the data dir
for a shell in another terminal; and real workers running many jobs through it."""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from studio import env as studio_env
from studio.env import ConfigError, choose_broker, read_dev_runtime, write_dev_runtime
from studio.models import ImportJob, JobStatus, SimulationJob, Trajectory
from tests.support.jobs import make_trajectory
from tests.support.worker import ROOT, running_worker, wait_for, worker_env

# ---- choosing the broker -------------------------------------------------------------------


def test_studio_broker_sqlite_wins_over_redis(tmp_path, monkeypatch):
    monkeypatch.setenv("STUDIO_BROKER", "sqlite")
    url, options, description = choose_broker("redis://127.0.0.1:6379/5", str(tmp_path))
    assert url == f"sqlite:///{tmp_path / 'broker.sqlite3'}"
    assert options["polling_interval"] <= 0.2  # an idle worker looks often, not every second
    assert "embedded SQLite broker" in description and "STUDIO_BROKER=sqlite" in description


def test_without_redis_the_embedded_default_is_sqlite(tmp_path, monkeypatch):
    monkeypatch.delenv("STUDIO_BROKER", raising=False)
    monkeypatch.setattr(studio_env, "redis_answers", lambda *a, **k: False)
    url, _options, description = choose_broker(None, str(tmp_path))
    assert url.startswith("sqlite:///") and "no Redis found" in description


def test_the_filesystem_transport_is_still_there_on_request(tmp_path, monkeypatch):
    monkeypatch.setenv("STUDIO_BROKER", "filesystem")
    url, options, description = choose_broker(None, str(tmp_path))
    assert url == "filesystem://localhost/"  # a host: kombu warns on every connection without one
    assert options["data_folder_in"] == str(tmp_path / "broker" / "in")
    assert "filesystem" in description and "STUDIO_BROKER" in description


def test_studio_broker_rejects_unknown_values(tmp_path, monkeypatch):
    monkeypatch.setenv("STUDIO_BROKER", "rabbit")
    with pytest.raises(ConfigError, match="STUDIO_BROKER='rabbit' must be one of auto, sqlite"):
        choose_broker(None, str(tmp_path))


def test_redis_url_is_used_when_no_override(tmp_path, monkeypatch):
    monkeypatch.delenv("STUDIO_BROKER", raising=False)
    url, _options, description = choose_broker("redis://127.0.0.1:6379/5", str(tmp_path))
    assert url == "redis://127.0.0.1:6379/5" and "REDIS_URL" in description


# ---- what dev.sh chose, for another terminal ------------------------------------------------

CLEAN_ENV = {"DJANGO_SETTINGS_MODULE": "studio.settings"}


def _record(tmp_path: Path, *, pid: int | None = None, broker_url: str = "sqlite:///x") -> None:
    write_dev_runtime(
        str(tmp_path),
        pid=os.getpid() if pid is None else pid,
        database_url=f"sqlite:///{tmp_path / 'dev.sqlite3'}",
        broker_url=broker_url,
        description="embedded SQLite broker in x (no Redis found)",
    )


def test_the_record_of_a_running_dev_sh_is_read(tmp_path):
    _record(tmp_path)
    recorded = read_dev_runtime(str(tmp_path), CLEAN_ENV)
    assert recorded is not None
    assert recorded["broker"] == "sqlite"
    assert recorded["database_url"] == f"sqlite:///{tmp_path / 'dev.sqlite3'}"
    assert oct((tmp_path / "dev-runtime.json").stat().st_mode & 0o777) == "0o600"


def test_a_redis_choice_is_recorded_with_its_url(tmp_path):
    _record(tmp_path, broker_url="redis://127.0.0.1:6379/3")
    recorded = read_dev_runtime(str(tmp_path), CLEAN_ENV)
    assert recorded["broker"] == "redis" and recorded["redis_url"] == "redis://127.0.0.1:6379/3"


@pytest.mark.parametrize("name", ["DATABASE_URL", "REDIS_URL", "STUDIO_BROKER"])
def test_the_environment_always_wins_over_the_record(tmp_path, name):
    _record(tmp_path)
    assert read_dev_runtime(str(tmp_path), {**CLEAN_ENV, name: "x"}) is None


def test_the_test_settings_never_follow_a_dev_server(tmp_path):
    _record(tmp_path)
    assert read_dev_runtime(str(tmp_path), {"DJANGO_SETTINGS_MODULE": "tests.settings"}) is None


def test_a_record_of_another_data_dir_or_a_stopped_dev_sh_is_ignored(tmp_path):
    _record(tmp_path)
    elsewhere = tmp_path / "copy"
    elsewhere.mkdir()
    (elsewhere / "dev-runtime.json").write_text((tmp_path / "dev-runtime.json").read_text())
    assert read_dev_runtime(str(elsewhere), CLEAN_ENV) is None  # a copied var/
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    _record(tmp_path, pid=int(done.stdout))  # that process has exited
    assert read_dev_runtime(str(tmp_path), CLEAN_ENV) is None
    (tmp_path / "dev-runtime.json").write_text("{half a fi")
    assert read_dev_runtime(str(tmp_path), CLEAN_ENV) is None


SHOW_BROKER = (
    "import json; from django.conf import settings; print(json.dumps({"
    "'broker': settings.CELERY_BROKER_URL, 'description': settings.BROKER_DESCRIPTION, "
    "'database': settings.DATABASES['default']['NAME']}))"
)


def _settings_in(tmp_path: Path, **extra: str) -> dict:
    keep = ("PATH", "HOME", "LANG", "TMPDIR")
    clean = {k: v for k, v in os.environ.items() if k in keep}
    clean.update(
        {
            "DJANGO_SETTINGS_MODULE": "studio.settings",
            "STUDIO_DATA_DIR": str(tmp_path),
            "DEBUG": "1",
            "PYTHONPATH": str(ROOT),
        }
    )
    clean.update(extra)
    done = subprocess.run(
        [sys.executable, "-c", SHOW_BROKER],
        cwd=ROOT,
        env=clean,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_manage_py_in_another_terminal_uses_what_dev_sh_chose(tmp_path):
    _record(tmp_path)  # this test process plays the running dev.sh
    seen = _settings_in(tmp_path)
    assert seen["broker"] == f"sqlite:///{tmp_path / 'broker.sqlite3'}"
    assert seen["database"] == str(tmp_path / "dev.sqlite3")
    assert "as scripts/dev.sh" in seen["description"] and str(os.getpid()) in seen["description"]
    # an explicit broker in the environment wins, and the description says which
    told = _settings_in(tmp_path, REDIS_URL="redis://127.0.0.1:6379/7")
    assert told["broker"] == "redis://127.0.0.1:6379/7"
    assert "dev.sh" not in told["description"]
    assert told["database"] == str(tmp_path / "studio.sqlite3")


# ---- real workers on the embedded broker ----------------------------------------------------


def _send_from_another_process(env: dict[str, str], model: str, pks: list[int]) -> None:
    """Send the jobs' messages from a process configured like dev.sh's web server."""
    subprocess.run(
        [
            sys.executable,
            "-c",
            "import django; django.setup(); "
            f"from studio.models import {model}; from studio.tasks import _send; "
            f"[_send({model}, pk, None) for pk in {pks!r}]",
        ],
        cwd=ROOT,
        env=worker_env(env),
        check=True,
        timeout=120,
    )


@pytest.mark.worker
def test_worker_on_the_sqlite_broker_runs_an_import(transactional_db, project, tmp_path):
    env = {"STUDIO_BROKER": "sqlite", "STUDIO_DATA_DIR": str(tmp_path / "data")}
    upload = tmp_path / "two-steps.json"
    upload.write_text(
        json.dumps(
            {
                "format": "agentworld-studio/v1",
                "trajectories": [
                    {
                        "title": "through the embedded broker",
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
        _send_from_another_process(env, "ImportJob", [job.pk])
        wait_for(
            lambda: (
                ImportJob.objects.get(pk=job.pk).status in (JobStatus.SUCCEEDED, JobStatus.FAILED)
            ),
            timeout=60,
        )
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED, job.error
    assert (job.trajectories_created, job.steps_created) == (1, 2)
    assert job.worker.startswith("test-")  # the claim names the worker that ran it
    assert Trajectory.objects.filter(project=project, title="through the embedded broker").exists()
    assert "sqlite:///" in log.read_text()


SIMULATIONS = 100


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("isolated_queues")
def test_a_hundred_simulations_through_the_embedded_broker_lose_no_worker(
    project, tmp_path, settings
):
    """What killed dev.sh's worker after about 15 simulations on the filesystem transport:
    messages sent while workers take others. Here a prefork worker and a threads-pool one
    (as dev.sh's two) share a queue of 100 retrieval-baseline simulations sent by another
    process; every job succeeds, once, and neither worker dies."""
    from studio.services.simulation import build_request, start_simulation

    settings.STUDIO_MAX_ACTIVE_JOBS = SIMULATIONS  # all queued at once, as a long session's
    data = tmp_path / "data"
    env = {"STUDIO_BROKER": "sqlite", "STUDIO_DATA_DIR": str(data)}
    root = make_trajectory(project).root_branch
    pks = [
        start_simulation(
            user=None, branch=root, request=build_request(root, {"fork_index": 1 + i % 3})
        ).pk
        for i in range(SIMULATIONS)
    ]
    assert set(SimulationJob.objects.filter(pk__in=pks).values_list("backend", flat=True)) == {
        "retrieval"
    }
    logs = [tmp_path / "prefork.log", tmp_path / "threads.log"]
    with (
        running_worker(("default",), extra_env=env, log_path=logs[0], concurrency=2) as prefork,
        running_worker(
            ("default",), extra_env=env, log_path=logs[1], pool="threads", concurrency=4
        ) as threads,
    ):
        pids = (prefork.pid, threads.pid)
        # sent in two halves: the second while the workers are busy with the first
        _send_from_another_process(env, "SimulationJob", pks[: SIMULATIONS // 2])
        _send_from_another_process(env, "SimulationJob", pks[SIMULATIONS // 2 :])

        def finished() -> bool:
            left = SimulationJob.objects.filter(pk__in=pks).exclude(
                status__in=[JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED]
            )
            assert prefork.poll() is None and threads.poll() is None, "a worker died"
            return not left.exists()

        wait_for(finished, timeout=300, interval=0.5)

        def broker_rows() -> int:
            with sqlite3.connect(data / "broker.sqlite3", timeout=30) as db:
                return db.execute("SELECT count(*) FROM kombu_message").fetchone()[0]

        # every message is acknowledged (just after its job's row says it ended) and its row
        # deleted then: the broker is left holding nothing
        wait_for(lambda: broker_rows() == 0, timeout=30)
        assert (prefork.pid, threads.pid) == pids and prefork.poll() is None
        assert threads.poll() is None
    rows = SimulationJob.objects.filter(pk__in=pks)
    failed = {r.pk: r.error for r in rows if r.status != JobStatus.SUCCEEDED}
    assert not failed, failed
    assert set(rows.values_list("attempts", flat=True)) == {1}  # each ran once
    workers = set(rows.values_list("worker", flat=True))
    assert len(workers) == 2, workers  # both workers took jobs
    text = "".join(log.read_text() for log in logs)
    assert "is already running" not in text  # no message was delivered twice
    assert not re.search(r"Traceback|ERROR/MainProcess", text), text[-4000:]
