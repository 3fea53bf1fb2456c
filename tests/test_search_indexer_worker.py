"""With a real worker, an import's steps become searchable without anyone asking: the import
commits with its steps unindexed and the indexer's message, sent on commit, indexes them
(`studio.search.indexer`); a message that never went out is made good by the worker's
sweeper."""

from __future__ import annotations

import pytest

from studio.models import ImportJob, JobStatus
from studio.search import indexer
from studio.search.indexer import unindexed_count
from studio.search.service import search_steps
from studio.services.imports import do_import_file
from tests.support.imports import native_file, upload
from tests.support.jobs import wait_job
from tests.support.worker import running_worker, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]


def searchable(project, query: str, expected: int):
    def check() -> bool:
        return len(search_steps([project.pk], query, per_page=100).hits) == expected

    return check


def test_an_uploaded_file_is_searchable_without_anyone_asking(
    researcher_client, project, default_worker
):
    upload(researcher_client, project, native_file(n_trajectories=3), name="orchard.json")
    job = wait_job(ImportJob.objects.get())
    assert job.status == JobStatus.SUCCEEDED, job.error
    assert job.steps_created == 9
    wait_for(searchable(project, "crates", 9), timeout=60)
    assert unindexed_count([project.pk]) == 0


STALE_ENV = {"STUDIO_JOB_STALE_S": "4"}  # a sweep every second


@pytest.mark.usefixtures("isolated_queues")
def test_the_sweeper_indexes_steps_whose_message_was_lost(project, tmp_path, monkeypatch):
    monkeypatch.setattr(indexer, "SEND_ON_COMMIT", False)  # the message never goes out
    path = tmp_path / "orchard.json"
    path.write_bytes(native_file(n_trajectories=2, steps=4))
    assert do_import_file(project=project, path=path).steps_created == 8
    assert unindexed_count([project.pk]) == 8
    assert searchable(project, "crates", 0)()
    with running_worker(("default",), extra_env=STALE_ENV):
        wait_for(searchable(project, "crates", 8), timeout=60)
    assert unindexed_count([project.pk]) == 0
