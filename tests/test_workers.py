"""Workers as their heartbeat rows tell (`studio.services.workers`): a job page says within
seconds that no worker consumes its queue, or that the worker running it stopped answering;
the sweeper and Cancel settle such a job; `simulate --wait` says what to run instead of
waiting in silence. Rows written here stand for workers (tests/test_jobs_worker_loss.py has
real ones)."""

from __future__ import annotations

import io
import time
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse
from django.utils import timezone

from studio.jobs import runtime
from studio.jobs.sweeper import reap_stale_jobs
from studio.models import ImportJob, JobStatus, SimulationJob, WorkerHeartbeat
from studio.queues import queue_name
from studio.services import workers
from studio.services.simulation import cancel_simulation
from tests.support.branching import make_job, make_trajectory


def beat(name: str, queues: list[str], *, age_s: float = 0.0, started_age_s: float = 600.0):
    now = timezone.now()
    return WorkerHeartbeat.objects.update_or_create(
        name=name,
        defaults={
            "queues": queues,
            "pid": 4242,
            "pool": "prefork",
            "concurrency": 2,
            "started_at": now - timedelta(seconds=started_age_s),
            "seen_at": now - timedelta(seconds=age_s),
            "stopped_at": None,
        },
    )[0]


def running_job(project, *, worker: str, beat_age_s: float = 0.0, claimed_age_s: float = 60.0):
    _, root = make_trajectory(project, key=f"k-{SimulationJob.objects.count()}")
    job = make_job(root, 1, n=1, status="running")
    now = timezone.now()
    SimulationJob.objects.filter(pk=job.pk).update(
        worker=worker,
        started_at=now - timedelta(seconds=claimed_age_s),
        heartbeat_at=now - timedelta(seconds=beat_age_s),
        queue=queue_name("default"),
    )
    job.refresh_from_db()
    return job


@pytest.fixture(autouse=True)
def _queues_of_this_test(isolated_queues):
    """Queue names of each test alone: a real worker of this test run (a session fixture
    started by an earlier file) beats its row every few seconds with the run's queues, and
    must not count as a consumer of the queues these rows stand for."""
    yield


@pytest.fixture(autouse=True)
def _no_pulses(monkeypatch):
    # the rows alone decide here (the SQLite pulse files are tested with real workers)
    monkeypatch.setattr(workers, "_uses_pulse", lambda: False)
    monkeypatch.setattr(runtime, "single_writer_db", lambda: False)


def test_only_live_workers_consume_a_queue(db, settings):
    settings.STUDIO_WORKER_GONE_S = 15
    default = queue_name("default")
    beat("jobs@a", [default, queue_name("gpu")])
    beat("jobs@b", [default], age_s=20)  # silent: gone
    stopped = beat("jobs@c", [default])
    WorkerHeartbeat.objects.filter(pk=stopped.pk).update(stopped_at=timezone.now())
    beat("episodes@a", [queue_name("episodes")])
    assert [w.name for w in workers.queue_consumers(default)] == ["jobs@a"]
    assert [w.name for w in workers.queue_consumers(queue_name("episodes"))] == ["episodes@a"]
    assert workers.queue_consumers(queue_name("nothing")) == []


def test_the_worker_state_of_a_running_job(project, settings):
    settings.STUDIO_WORKER_GONE_S = 15
    beat("jobs@alive", [])
    assert workers.worker_state(running_job(project, worker="jobs@alive")).alive
    beat("jobs@silent", [], age_s=40)
    state = workers.worker_state(running_job(project, worker="jobs@silent"))
    assert not state.alive and not state.restarted and 39 <= state.silent_s < 60
    # a new process under the same name since the claim: the job's process is gone
    beat("jobs@again", [], started_age_s=5)
    state = workers.worker_state(running_job(project, worker="jobs@again", claimed_age_s=60))
    assert not state.alive and state.restarted
    # no worker recorded, or one that writes no row: nothing to say
    assert workers.worker_state(running_job(project, worker="")) is None
    assert workers.worker_state(running_job(project, worker="celery@old")) is None


def test_a_queued_job_with_no_consumer_says_so_and_how_to_start_one(researcher_client, project):
    _, root = make_trajectory(project)
    job = make_job(root, 1, n=1, status="queued")
    SimulationJob.objects.filter(pk=job.pk).update(queue=queue_name("default"))
    page = researcher_client.get(reverse("simulation_job", args=[job.pk])).content.decode()
    assert 'data-worker-status="no-consumer"' in page
    assert f"No worker is consuming queue <code>{queue_name('default')}</code>" in page
    assert "-m celery -A studio worker -Q" in page
    # a live worker on that queue: the line goes
    beat("jobs@here", [queue_name("default")])
    page = researcher_client.get(reverse("simulation_job", args=[job.pk])).content.decode()
    assert "data-worker-status" not in page


def test_an_import_page_says_no_worker_too(researcher_client, project):
    job = ImportJob.objects.create(project=project, original_name="a.json", stored_path="/x")
    page = researcher_client.get(reverse("import_job", args=[job.pk])).content.decode()
    assert f"No worker is consuming queue <code>{queue_name('default')}</code>" in page


def test_a_running_job_whose_worker_is_gone_says_so_and_cancel_settles_it(
    researcher_client, project, settings
):
    settings.STUDIO_WORKER_GONE_S = 15
    settings.STUDIO_JOB_STALE_S = 600  # the old rule (no heartbeat for 450 s) is far off
    beat("jobs@dead", [queue_name("default")], age_s=20)
    job = running_job(project, worker="jobs@dead", beat_age_s=18)
    url = reverse("simulation_job", args=[job.pk])
    page = researcher_client.get(url, HTTP_HX_REQUEST="true").content.decode()
    assert 'data-worker-status="gone"' in page
    assert "The worker running this job (<code>jobs@dead</code>) stopped answering 20 s ago" in page
    assert 'id="job-cancel"' in page  # Cancel stays
    job = cancel_simulation(job)
    assert job.status == JobStatus.CANCELLED and "Cancelled" in job.error


def test_a_live_worker_job_page_says_nothing(researcher_client, project):
    beat("jobs@fine", [queue_name("default")])
    job = running_job(project, worker="jobs@fine", beat_age_s=30)
    page = researcher_client.get(reverse("simulation_job", args=[job.pk])).content.decode()
    assert "data-worker-status" not in page


def test_the_sweeper_fails_an_orphaned_job_sooner(project, settings):
    settings.STUDIO_WORKER_GONE_S = 15
    settings.STUDIO_JOB_STALE_S = 600
    beat("jobs@dead", [], age_s=20)
    orphan = running_job(project, worker="jobs@dead", beat_age_s=18)
    fresh_beat = running_job(project, worker="jobs@dead", beat_age_s=1)  # its monitor beats
    beat("jobs@fine", [])
    alive = running_job(project, worker="jobs@fine", beat_age_s=30)
    unknown = running_job(project, worker="", beat_age_s=30)
    assert reap_stale_jobs() == 1
    statuses = dict(SimulationJob.objects.values_list("pk", "status"))
    assert statuses[orphan.pk] == JobStatus.FAILED
    assert {statuses[j.pk] for j in (fresh_beat, alive, unknown)} == {JobStatus.RUNNING}
    orphan.refresh_from_db()
    assert "stopped without finishing" in orphan.error and "Retry" in orphan.error


def test_a_restarted_worker_orphans_the_jobs_of_its_old_process(project, settings):
    settings.STUDIO_WORKER_GONE_S = 15
    settings.STUDIO_JOB_STALE_S = 600
    job = running_job(project, worker="jobs@dev", beat_age_s=8, claimed_age_s=60)
    beat("jobs@dev", [], started_age_s=3)  # dev.sh started it again 3 s ago
    assert reap_stale_jobs() == 1
    assert SimulationJob.objects.get(pk=job.pk).status == JobStatus.FAILED


class Recorder(io.StringIO):
    """Stderr of a command: when each line came, and a hook on each."""

    def __init__(self, on_write=None):
        super().__init__()
        self.lines: list[tuple[float, str]] = []
        self.on_write = on_write

    def write(self, text: str) -> int:
        self.lines.append((time.monotonic(), text))
        if self.on_write:
            self.on_write(text)
        return super().write(text)


def test_simulate_wait_says_at_once_that_no_worker_consumes_its_queue(project):
    trajectory, _ = make_trajectory(project)
    queue = queue_name("default")

    def a_worker_appears(text: str) -> None:
        if "no worker is consuming queue" in text:
            beat("jobs@later", [queue])

    err = Recorder(a_worker_appears)
    started = time.monotonic()
    with pytest.raises(CommandError) as caught:
        call_command(
            "simulate",
            trajectory=trajectory.pk,
            step=1,
            wait=True,
            timeout=3,
            stdout=io.StringIO(),
            stderr=err,
        )
    said = [(at, text) for at, text in err.lines if "no worker is consuming queue" in text]
    assert said, err.getvalue()
    at, text = said[0]
    assert at - started < 2.0  # within seconds, not after the timeout
    assert f"queue {queue}" in text and "-m celery -A studio worker" in text
    # a worker that starts later is said too, and the command went on waiting for it
    assert f"worker jobs@later now consumes queue {queue}" in err.getvalue()
    assert f"waits in queue {queue} for a free worker" in str(caught.value)


def test_on_sqlite_a_fresh_pulse_keeps_a_worker_alive_whose_row_is_held_up(
    db, settings, monkeypatch, tmp_path
):
    """An import's long write transaction keeps the worker from writing its row: the pulse
    file, written first, still says it is alive."""
    settings.DATA_DIR = tmp_path
    settings.STUDIO_WORKER_GONE_S = 15
    monkeypatch.setattr(workers, "_uses_pulse", lambda: True)
    queue = queue_name("default")
    started = timezone.now()
    workers.record_beat(
        "jobs@busy", queues=[queue], pid=7, pool="prefork", concurrency=2, started_at=started
    )
    assert (tmp_path / "pulse" / "worker-jobs@busy.json").exists()
    WorkerHeartbeat.objects.filter(name="jobs@busy").update(
        seen_at=timezone.now() - timedelta(seconds=60)
    )
    assert [w.name for w in workers.queue_consumers(queue)] == ["jobs@busy"]
    # a clean stop removes the pulse and marks the row stopped
    workers.record_stop("jobs@busy", 7)
    assert not (tmp_path / "pulse" / "worker-jobs@busy.json").exists()
    assert workers.queue_consumers(queue) == []
