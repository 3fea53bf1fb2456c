"""Long trajectories export whole, failures never look complete, files follow the umask.

A version holding every step of a 2,600-step trajectory reads its items 2,000 at a time, and
the second chunk's only branch is the one the first chunk already read (the case that once
queried an empty id list): the download, the progress job and `export_dataset` each write
all 2,600 rows. A download that fails midway ends broken (an unparseable last line, a zip
without its directory, a connection closed before the end of its chunked body). Export files
and project archives get the mode a plain `open()` would give them under the umask."""

from __future__ import annotations

import http.client
import io
import json
import os
import stat
import urllib.request
import zipfile
from pathlib import Path

import pytest
from django.core.management import call_command
from django.urls import reverse

from studio.exports.formats import ExportOptions
from studio.models import Dataset, DatasetItem, DatasetVersion, Step, Trajectory
from studio.services import datasets as service
from studio.services.datasets import BROKEN_TAIL, ExportCounts, export_file

LONG = 2_600


@pytest.fixture
def long_version(project):
    traj = Trajectory.objects.create(
        project=project,
        domain="terminal",
        title="A long session",
        task_instruction="Keep the server up.",
        source_format="agentworld-studio/v1",
        source_key="long",
        step_count=LONG,
    )
    root = traj.branches.create(name="recorded")
    Step.objects.bulk_create(
        (Step(branch=root, index=i, action=f"a{i}", observation="") for i in range(LONG)),
        batch_size=1000,
    )
    dataset = Dataset.objects.create(project=project, name="long")
    version = DatasetVersion.objects.create(
        dataset=dataset, number=1, source="every step", item_count=LONG
    )
    ids = root.steps.order_by("index").values_list("pk", flat=True)
    DatasetItem.objects.bulk_create(
        (DatasetItem(version=version, position=i, step_id=pk) for i, pk in enumerate(ids)),
        batch_size=1000,
    )
    return version


def count_rows(chunks) -> tuple[int, bytes]:
    """Lines in the streamed bytes, and the file's last bytes (the whole file is never held:
    its rows carry their history, hundreds of kilobytes each at the end)."""
    lines, tail = 0, b""
    for chunk in chunks:
        lines += chunk.count(b"\n")
        tail = (tail + chunk)[-500:]
    return lines, tail


@pytest.mark.django_db
def test_a_long_trajectory_downloads_whole(client, project, long_version):
    client.force_login(project.users["annotator"])
    response = client.get(
        reverse("dataset_export", args=[long_version.pk]), {"format": "agent-turns"}
    )
    lines, last = count_rows(response.streaming_content)
    assert lines == LONG
    # the last row's meta names where it came from and that no model wrote it (recorded)
    assert (
        b'"meta":{"trajectory":%d,"branch":%d,"step":%d,"domain":"terminal",'
        b'"corrected":false,"world_model":{"label":"recorded",'
        % (
            long_version.dataset.project.trajectories.get().pk,
            long_version.items.first().step.branch_id,
            LONG - 1,
        )
    ) in last
    assert last.endswith(b'"mode":null,"agent":null}}}\n')


@pytest.mark.django_db
def test_a_long_trajectory_exports_whole_from_the_command(project, long_version, tmp_path):
    out = io.StringIO()
    path = tmp_path / "long.jsonl"
    call_command(
        "export_dataset", "long", project="Test project", fmt="agent-turns", out=str(path),
        no_progress=True, stdout=out,
    )  # fmt: skip
    assert f"wrote {LONG} rows" in out.getvalue()
    with path.open("rb") as f:
        lines, last = count_rows(iter(lambda: f.read(1 << 20), b""))
    assert lines == LONG and b'"step":%d,' % (LONG - 1) in last


@pytest.mark.django_db(transaction=True)
@pytest.mark.worker
def test_a_long_trajectory_exports_whole_with_progress(
    client, project, long_version, default_worker
):
    from studio.models import ExportJob
    from tests.support.worker import wait_for

    client.force_login(project.users["annotator"])
    client.post(reverse("export_start", args=[long_version.pk]), {"format": "agent-turns"})
    job = ExportJob.objects.get()
    done = wait_for(
        lambda: (
            ExportJob.objects.filter(pk=job.pk).exclude(status__in=["queued", "running"]).first()
        ),
        timeout=240,
    )
    assert done.status == "succeeded", done.error
    assert done.items_done == LONG and done.rows == LONG
    # what the job has no column for is kept with its options, and read back as options
    assert done.options["left_out"] == {"rejected_context": 0, "empty_thinking": 0}
    assert ExportOptions.from_dict(done.options) == ExportOptions(turns="wm")
    assert done.file_name == "long-v1-agent-turns.jsonl"
    path = Path(done.stored_path)
    with path.open("rb") as f:
        lines, _ = count_rows(iter(lambda: f.read(1 << 20), b""))
    assert lines == LONG
    path.unlink()  # a large file: not left for the run's other tests


# -- a failure midway -------------------------------------------------------------------------


@pytest.fixture
def failing_rows(monkeypatch):
    """Rows fail from the fourth on (a database error midway, say)."""
    real = service.row_for
    made = {"n": 0}

    def row_for(fmt, example, options):
        made["n"] += 1
        if made["n"] > 3:
            raise RuntimeError("the database went away")
        return real(fmt, example, options)

    monkeypatch.setattr(service, "row_for", row_for)


def received_until_error(chunks) -> tuple[bytes, Exception | None]:
    got = []
    try:
        for chunk in chunks:
            got.append(chunk)
    except Exception as exc:  # noqa: BLE001 - the error is what is checked
        return b"".join(got), exc
    return b"".join(got), None


@pytest.mark.django_db
def test_a_download_that_fails_midway_ends_broken(client, project, long_version, failing_rows):
    client.force_login(project.users["annotator"])
    url = reverse("dataset_export", args=[long_version.pk])
    body, error = received_until_error(client.get(url, {"format": "openai"}).streaming_content)
    assert isinstance(error, RuntimeError)  # the stream raises: the server aborts it
    lines = body.decode().splitlines()
    assert len(lines) == 5 and body.endswith(BROKEN_TAIL)
    for line in lines[:3]:
        json.loads(line)
    with pytest.raises(json.JSONDecodeError):
        json.loads(lines[-1])  # never a file of whole rows
    zipped, error = received_until_error(
        client.get(url, {"format": "llamafactory"}).streaming_content
    )
    assert isinstance(error, RuntimeError)
    with pytest.raises(zipfile.BadZipFile):  # no central directory: not an archive
        zipfile.ZipFile(io.BytesIO(zipped))


@pytest.mark.django_db(transaction=True)
def test_under_asgi_a_download_that_fails_midway_is_cut_off(client, project, failing_rows):
    """Served by uvicorn, the client sees a body that ends before its last chunk."""
    from tests.support.asgi import asgi_server
    from tests.support.branching import make_trajectory

    _, root = make_trajectory(project)
    dataset = Dataset.objects.create(project=project, name="short")
    version = DatasetVersion.objects.create(dataset=dataset, number=1, source="x", item_count=5)
    DatasetItem.objects.bulk_create(
        DatasetItem(version=version, position=i, step=s) for i, s in enumerate(root.all_steps())
    )
    client.force_login(project.users["annotator"])
    cookie = f"sessionid={client.cookies['sessionid'].value}"
    with asgi_server() as base:
        request = urllib.request.Request(
            f"{base}{reverse('dataset_export', args=[version.pk])}?format=openai",
            headers={"Cookie": cookie},
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            assert response.status == 200
            with pytest.raises(http.client.IncompleteRead):
                response.read()


# -- the umask --------------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("umask", [0o027, 0o002])
def test_export_files_and_archives_follow_the_umask(project, tmp_path, umask):
    from studio.archive.writer import export_project
    from tests.support.branching import make_trajectory

    _, root = make_trajectory(project)
    dataset = Dataset.objects.create(project=project, name="short")
    version = DatasetVersion.objects.create(dataset=dataset, number=1, source="x", item_count=5)
    DatasetItem.objects.bulk_create(
        DatasetItem(version=version, position=i, step=s) for i, s in enumerate(root.all_steps())
    )
    previous = os.umask(umask)
    try:
        made = export_file(version, "openai", ExportOptions(), tmp_path, ExportCounts())
        archive = tmp_path / "project.jsonl.gz"
        export_project(project, archive, with_files=False)
    finally:
        os.umask(previous)
    expected = 0o666 & ~umask
    assert stat.S_IMODE(made.path.stat().st_mode) == expected
    assert stat.S_IMODE(archive.stat().st_mode) == expected


@pytest.mark.django_db
@pytest.mark.skipif(
    not os.environ.get("DATABASE_URL", "").startswith("postgres"),
    reason="server-side cursors are PostgreSQL's",
)
@pytest.mark.parametrize("how", ["stopped", "failed"])
def test_an_export_that_ends_early_closes_its_cursor_at_once(project, long_version, how):
    """A stopped or failed export closes the server-side cursor its items come from before
    the error leaves it; left to the garbage collector (the traceback keeps the generators
    alive), the cursor was closed later inside another transaction, which that aborted."""
    from django.db import connection

    from studio.services.datasets import ExportStopped

    read = 0

    def stop() -> bool:
        return how == "stopped" and read >= 3

    def tick(counts) -> None:
        nonlocal read
        read += 1
        if how == "failed" and read >= 3:
            raise RuntimeError("the disk is full")

    counts = ExportCounts()
    _, chunks = service.version_chunks(
        long_version, "openai", ExportOptions(), counts, tick=tick, stop=stop
    )
    with pytest.raises((ExportStopped, RuntimeError)) as caught:
        for _ in chunks:
            pass
    assert caught.value is not None  # the traceback (and its frames) are still alive here
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_cursors")
        assert cursor.fetchone()[0] == 0
