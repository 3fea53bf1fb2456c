"""Datasets: versions made from a queue's accepted items (adjudicated, unanimous, fixed), from
a filter and from hand-picked steps, each keeping the corrections it was made with; exports
with `manage.py export_dataset` and as downloads, loaded back with `datasets`; an
AgentWorldBench file exported back to the same rows; roles and bad input."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse

from studio.exports.formats import FORMATS
from studio.models import Adjudication, Dataset, QueueClaim, StepAnnotation, Trajectory
from studio.services.datasets import (
    DatasetError,
    SelectionData,
    accepted_steps,
    create_version,
)
from studio.services.imports import do_import_file
from studio.services.queues import QueueData, create_queue
from tests.support.branching import make_child, make_trajectory

DEMO_AWB = (
    Path(__file__).resolve().parent.parent
    / "studio"
    / "demo_data"
    / "terminal_agentworldbench.jsonl"
)


@pytest.fixture
def queue_done(project):
    """A queue of the four simulated steps of two futures, each annotated by two people:
    step A both accept, B split (then adjudicated accept), C split (undecided), D both
    "needs fix", one with a correction."""
    traj, root = make_trajectory(project)
    one = make_child(root, 2, ["3 passed", "clean"], name="one")
    two = make_child(root, 3, ["nothing to commit", "done"], name="two")
    queue = create_queue(
        project,
        project.users["admin"],
        QueueData(name="q", origin="simulated", annotators_per_item=2),
    )
    items = list(queue.items.select_related("step").order_by("position"))
    assert len(items) == 4
    a, b, c, d = items
    people = [project.users["annotator"], project.users["researcher"]]
    plan = {
        a: ("accept", "accept"),
        b: ("accept", "reject"),
        c: ("accept", "needs_fix"),
        d: ("needs_fix", "needs_fix"),
    }
    for item, verdicts in plan.items():
        for person, verdict in zip(people, verdicts, strict=True):
            fix = "3 passed in 0.10s" if (item is d and person is people[1]) else ""
            StepAnnotation.objects.create(
                step=item.step,
                author=person,
                queue=queue,
                verdict=verdict,
                corrected_observation=fix,
            )
            QueueClaim.objects.create(
                item=item, user=person, expires_at="2030-01-01T00:00Z", done_at="2026-01-01T00:00Z"
            )
    Adjudication.objects.create(item=b, adjudicator=project.users["admin"], verdict="accept")
    return queue, [i.step for i in items], (traj, root, one, two)


@pytest.mark.django_db
def test_a_queues_accepted_items_make_a_version_with_their_corrections(project, queue_done):
    queue, (a, b, c, d), _ = queue_done
    # b was split accept/reject: the adjudicator's accept stands; a correction by the one who
    # rejected it is not what the final verdict accepted
    StepAnnotation.objects.filter(step=b, verdict="reject").update(corrected_observation="no")
    assert accepted_steps(queue) == [a.pk, b.pk, d.pk]
    assert accepted_steps(queue, with_fixed=False) == [a.pk, b.pk]
    version = create_version(
        project, project.users["researcher"], SelectionData(name="sft", queue=queue)
    )
    assert version.number == 1 and version.item_count == 3 and version.corrected_count == 1
    assert "accepted and fixed items of queue 'q'" in version.source
    fixed = version.items.get(step=d)
    assert fixed.corrected and fixed.observation == "3 passed in 0.10s"
    assert not version.items.get(step=b).corrected
    # a later correction does not change the version; a new version takes it
    StepAnnotation.objects.filter(step=d, corrected_observation__gt="").update(
        corrected_observation="changed"
    )
    assert version.items.get(step=d).observation == "3 passed in 0.10s"
    again = create_version(project, None, SelectionData(name="sft", queue=queue, with_fixed=False))
    assert again.number == 2 and again.item_count == 2 and Dataset.objects.count() == 1


@pytest.mark.django_db
def test_hand_picked_steps_add_to_the_latest_version_and_bad_input_is_named(project, queue_done):
    queue, (a, b, c, d), _ = queue_done
    first = create_version(project, None, SelectionData(name="picked", steps=(a.pk,)))
    second = create_version(project, None, SelectionData(name="picked", steps=(c.pk,)))
    assert second.number == 2 and second.source.startswith("v1 + 1 hand-picked step")
    assert list(second.items.order_by("position").values_list("step_id", flat=True)) == [a.pk, c.pk]
    assert first.items.count() == 1  # a version never changes
    _, other_root = make_trajectory(project.other, key="o")
    with pytest.raises(DatasetError, match="is not one of this project's"):
        create_version(
            project, None, SelectionData(name="picked", steps=(other_root.steps.first().pk,))
        )
    with pytest.raises(DatasetError, match="no step to put in the dataset"):
        create_version(
            project,
            None,
            SelectionData(name="none", filter=QueueData(name="none", domain="android")),
        )
    assert not Dataset.objects.filter(name="none").exists()  # nothing half-made


def _export(tmp_path, *args, fmt: str, **kw) -> list[dict]:
    out = tmp_path / f"{fmt}.jsonl"
    call_command(
        "export_dataset",
        *args,
        project="Test project",
        fmt=fmt,
        out=str(out),
        no_progress=True,
        stdout=io.StringIO(),
        **kw,
    )
    return [json.loads(line) for line in out.read_text().splitlines()]


@pytest.mark.django_db
def test_every_format_exports_from_the_command_and_loads_in_datasets(project, queue_done, tmp_path):
    import datasets

    queue, (a, b, c, d), _ = queue_done
    create_version(project, None, SelectionData(name="sft", queue=queue))
    for fmt in FORMATS:
        rows = _export(tmp_path, "sft", fmt=fmt)
        assert len(rows) == 3, fmt
        loaded = datasets.load_dataset(
            "json", data_files=str(tmp_path / f"{fmt}.jsonl"), split="train"
        )
        assert loaded.num_rows == 3, fmt
    # the corrected observation is the world-model target
    wm = _export(tmp_path, "sft", fmt="wm-turns")
    assert "3 passed in 0.10s" in wm[2]["completion"][0]["content"]
    assert wm[2]["meta"]["corrected"] is True and wm[0]["meta"]["corrected"] is False
    awb = _export(tmp_path, "sft", fmt="agentworldbench")
    assert awb[2]["response"][awb[2]["turn_idx"] - 1].endswith("3 passed in 0.10s")
    # with --thinking, the world model's thinking is kept, except on a corrected step: it
    # reasoned towards the observation that was replaced
    from studio.models import Step

    Step.objects.filter(pk__in=[a.pk, d.pk]).update(thinking="the tests ran")
    wm = _export(tmp_path, "sft", fmt="wm-turns", thinking=True)
    assert "the tests ran" in wm[0]["completion"][0]["content"]
    assert "the tests ran" not in wm[2]["completion"][0]["content"]
    # LLaMA-Factory: its dataset_info.json entry is written beside the file
    _export(tmp_path, "sft", fmt="llamafactory")
    info = json.loads((tmp_path / "dataset_info.json").read_text())
    assert info["sft-v1"]["file_name"] == "llamafactory.jsonl"


@pytest.mark.django_db
def test_the_command_names_what_is_wrong(project, tmp_path):
    def run(*args, **kw):
        call_command(
            "export_dataset",
            *args,
            stdout=io.StringIO(),
            **{"project": "Test project", "fmt": "openai", "out": str(tmp_path / "x.jsonl"), **kw},
        )

    with pytest.raises(CommandError, match="no dataset 'nope'"):
        run("nope")
    from studio.models import DatasetVersion

    dataset = Dataset.objects.create(project=project, name="d")
    with pytest.raises(CommandError, match="has no version yet"):
        run("d")
    DatasetVersion.objects.create(dataset=dataset, number=1, source="x")
    with pytest.raises(CommandError, match="has no version 9"):
        run("d", number=9)
    with pytest.raises(CommandError, match="is empty: nothing to export"):
        run("d")
    with pytest.raises(CommandError, match="no project named 'Nope'"):
        run("nope", project="Nope")
    with pytest.raises(CommandError, match="give a dataset NAME or --trajectory ID"):
        run()
    with pytest.raises(CommandError, match="has no trajectory 999"):
        run(trajectory=999)
    with pytest.raises(CommandError, match="does not exist"):
        run(trajectory=1, out=str(tmp_path / "missing" / "x.jsonl"))
    assert not (tmp_path / "x.jsonl").exists()


@pytest.mark.django_db
def test_an_agentworldbench_file_exports_back_to_the_same_rows(project, tmp_path):
    original = [json.loads(line) for line in DEMO_AWB.read_text().splitlines()]
    do_import_file(project=project, path=DEMO_AWB)
    exported = []
    for trajectory in Trajectory.objects.filter(project=project).order_by("pk"):
        exported += _export(tmp_path, fmt="agentworldbench", trajectory=trajectory.pk)
    assert exported == original

    # rows that hold prefixes of the lists (one turn longer per row) come back as prefixes
    prefix_rows = []
    full = original[0]
    for turn in range(1, 4):
        prefix_rows.append({**full, "prompt": full["prompt"][:turn], "response": full["response"][:turn],
                            "current_prompt": full["prompt"][turn - 1], "turn_idx": turn, "total_turns": 3})  # fmt: skip
    source = tmp_path / "prefix.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in prefix_rows))
    Trajectory.objects.all().delete()
    do_import_file(project=project, path=source)
    assert (
        _export(tmp_path, fmt="agentworldbench", trajectory=Trajectory.objects.get().pk)
        == prefix_rows
    )


@pytest.mark.django_db
def test_downloads_stream_each_format_and_roles_hold(client, project, queue_done):
    import datasets

    queue, steps, _ = queue_done
    version = create_version(project, None, SelectionData(name="sft", queue=queue))
    url = reverse("dataset_export", args=[version.pk])
    client.force_login(project.users["annotator"])
    # annotators download and see datasets, and make none
    response = client.get(url, {"format": "openai"})
    assert response.status_code == 200 and response.streaming
    assert response["Content-Disposition"] == 'attachment; filename="sft-v1-openai-wm.jsonl"'
    rows = [json.loads(x) for x in b"".join(response.streaming_content).decode().splitlines()]
    assert len(rows) == 3 and rows[0]["messages"][-1]["role"] == "assistant"
    assert client.get(reverse("dataset_new", args=[project.pk])).status_code == 403
    assert (
        client.post(reverse("step_add_to_dataset", args=[steps[0].pk]), {"name": "x"}).status_code
        == 403
    )
    zipped = client.get(url, {"format": "llamafactory", "style": "alpaca"})
    archive = zipfile.ZipFile(io.BytesIO(b"".join(zipped.streaming_content)))
    names = sorted(archive.namelist())
    # the names say the format, the turns and the style
    assert zipped["Content-Disposition"] == (
        'attachment; filename="sft-v1-llamafactory-wm-alpaca.zip"'
    )
    assert names == ["dataset_info.json", "sft-v1-llamafactory-wm-alpaca.jsonl"]
    info = json.loads(archive.read("dataset_info.json"))
    assert info["sft-v1"]["formatting"] == "alpaca" and info["sft-v1"]["mask_history"] is True
    data = archive.read("sft-v1-llamafactory-wm-alpaca.jsonl").decode().splitlines()
    assert len(data) == 3 and "instruction" in json.loads(data[0])
    assert client.get(url, {"format": "nope"}).status_code == 400
    client.force_login(project.outsider)
    assert client.get(url, {"format": "openai"}).status_code == 404
    assert client.get(reverse("dataset_detail", args=[version.dataset_id])).status_code == 404
    del datasets


@pytest.mark.django_db
def test_the_pages_make_versions_from_a_queue_and_a_hand_picked_step(client, project, queue_done):
    queue, (a, b, c, d), _ = queue_done
    client.force_login(project.users["researcher"])
    page = client.post(
        reverse("dataset_new", args=[project.pk]),
        {"name": "sft", "source": "queue", "with_fixed": "on", "limit": 1000},
    )
    assert page.status_code == 400 and "choose the queue" in page.content.decode()
    page = client.post(
        reverse("dataset_new", args=[project.pk]),
        {"name": "sft", "source": "queue", "queue": queue.pk, "with_fixed": "on", "limit": 1000},
    )
    dataset = Dataset.objects.get(name="sft")
    assert page.status_code == 302 and page["Location"] == reverse(
        "dataset_detail", args=[dataset.pk]
    )
    page = client.post(reverse("step_add_to_dataset", args=[c.pk]), {"name": "sft"}, follow=True)
    html = page.content.decode()
    assert "sft v2 holds 4 steps" in html
    html = client.get(reverse("dataset_detail", args=[dataset.pk])).content.decode()
    assert "v2" in html and "v1 + 1 hand-picked step" in html and ">corrected<" in html
    html = client.get(reverse("dataset_list", args=[project.pk])).content.decode()
    assert "sft" in html
    page = client.post(
        reverse("dataset_new", args=[project.pk]),
        {"name": "empty", "source": "filter", "domain": "android", "limit": 10},
    )
    assert page.status_code == 400 and "no step to put in the dataset" in page.content.decode()


@pytest.mark.django_db(transaction=True)
def test_under_asgi_the_download_streams_instead_of_being_read_whole_first(
    client, project, recwarn
):
    """uvicorn serves the studio: Django would read a synchronous iterator to its end (the
    whole export in memory) before sending a byte, and warns when it does."""
    import urllib.request

    from tests.support.asgi import asgi_server

    _, root = make_trajectory(project)
    version = create_version(
        project,
        None,
        SelectionData(name="all", steps=tuple(root.steps.values_list("pk", flat=True))),
    )
    client.force_login(project.users["annotator"])
    cookie = f"sessionid={client.cookies['sessionid'].value}"
    with asgi_server() as base:
        request = urllib.request.Request(
            f"{base}{reverse('dataset_export', args=[version.pk])}?format=wm-turns",
            headers={"Cookie": cookie},
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            body = response.read().decode()
        # a branch's native export streams the same way
        branch = urllib.request.Request(
            f"{base}{reverse('branch_export', args=[root.pk])}", headers={"Cookie": cookie}
        )
        with urllib.request.urlopen(branch, timeout=30) as response:
            native = json.loads(response.read())
    assert len(native["trajectories"][0]["steps"]) == 5
    assert len(body.splitlines()) == 5 and '"completion"' in body
    assert not [w for w in recwarn if "synchronous iterators" in str(w.message)]


@pytest.mark.django_db
def test_a_future_simulated_in_a_world_exports_with_the_worlds_prompt_and_tools(project, tmp_path):
    from inference import worlds as W
    from studio.services.worlds import save_world
    from tests.support.branching import make_job
    from tests.test_worlds import WORLD

    saved = save_world(project, W.parse_world(WORLD))
    _, root = make_trajectory(project, domain="mcp")
    job = make_job(root, 1, status="succeeded")
    job.world_version = saved.version
    job.save()
    future = make_child(root, 1, ["It rains in Lyon."], job=job)
    rows = _export(tmp_path, fmt="wm-turns", trajectory=root.trajectory_id, branch=future.pk)
    system = rows[1]["prompt"][0]["content"]
    assert "rained in Lyon for 40 days" in system and "get_weather" in system
    recorded = _export(tmp_path, fmt="wm-turns", trajectory=root.trajectory_id)
    assert "rained in Lyon" not in recorded[1]["prompt"][0]["content"]


@pytest.mark.django_db
def test_a_deleted_step_is_left_out_and_the_page_says_so(client, project, queue_done, tmp_path):
    queue, (a, b, c, d), (traj, root, one, two) = queue_done
    version = create_version(project, None, SelectionData(name="sft", queue=queue))
    two.delete()  # holds step d
    out = io.StringIO()
    call_command(
        "export_dataset",
        "sft",
        project="Test project",
        fmt="openai",
        out=str(tmp_path / "o.jsonl"),
        no_progress=True,
        stdout=out,
    )
    assert "wrote 2 rows" in out.getvalue() and "1 item whose step was deleted" in out.getvalue()
    client.force_login(project.users["annotator"])
    html = client.get(reverse("dataset_detail", args=[version.dataset_id])).content.decode()
    assert "1 of its 3 steps were deleted since" in html and "its step was deleted" in html


@pytest.mark.django_db(transaction=True)
@pytest.mark.worker
def test_an_export_with_progress_is_written_by_a_worker_and_downloads_once_complete(
    client, project, queue_done, default_worker
):
    from studio.models import ExportJob
    from tests.support.worker import wait_for

    queue, steps, _ = queue_done
    version = create_version(project, None, SelectionData(name="sft", queue=queue))
    client.force_login(project.users["annotator"])  # every member may export
    page = client.post(
        reverse("export_start", args=[version.pk]), {"format": "llamafactory", "style": "sharegpt"}
    )
    job = ExportJob.objects.get()
    assert page.status_code == 302 and page["Location"] == reverse("export_job", args=[job.pk])
    done = wait_for(
        lambda: ExportJob.objects.filter(pk=job.pk, status="succeeded").first(), timeout=60
    )
    assert done.items_done == 3 and done.rows == 3 and done.progress == 1.0
    html = client.get(reverse("export_job", args=[job.pk])).content.decode()
    assert (
        "3 of 3 steps read, 3 rows written" in html
        and "sft-v1-llamafactory-wm-sharegpt.zip" in html
    )
    response = client.get(reverse("export_download", args=[job.pk]))
    archive = zipfile.ZipFile(io.BytesIO(b"".join(response.streaming_content)))
    assert sorted(archive.namelist()) == [
        "dataset_info.json",
        "sft-v1-llamafactory-wm-sharegpt.jsonl",
    ]
    assert not [p for p in Path(done.stored_path).parent.iterdir() if p.name.startswith(".export-")]
    client.force_login(project.outsider)
    assert client.get(reverse("export_job", args=[job.pk])).status_code == 404
    assert client.get(reverse("export_download", args=[job.pk])).status_code == 404


@pytest.mark.django_db(transaction=True)
def test_an_export_not_yet_written_does_not_download(client, project, queue_done, isolated_queues):
    """Queued on this test's own queues, which no worker consumes: the job stays unwritten
    for as long as the test looks (with the shared worker, it could be done before the
    first request)."""
    from studio.models import ExportJob

    queue, _, _ = queue_done
    version = create_version(project, None, SelectionData(name="sft", queue=queue))
    client.force_login(project.users["annotator"])
    client.post(
        reverse("export_start", args=[version.pk]), {"format": "llamafactory", "style": "sharegpt"}
    )
    job = ExportJob.objects.get()
    assert job.status == "queued"
    assert client.get(reverse("export_download", args=[job.pk])).status_code == 404


@pytest.mark.django_db
def test_an_export_whose_worker_was_lost_says_what_to_do_instead_of_a_retry_it_lacks(
    project, queue_done
):
    from datetime import timedelta

    from django.utils import timezone

    from studio.jobs.runtime import fail_lost
    from studio.models import ExportJob

    queue, steps, _ = queue_done
    version = create_version(project, None, SelectionData(name="sft", queue=queue))
    old = timezone.now() - timedelta(hours=1)
    job = ExportJob.objects.create(
        version=version, format="openai", status="running", started_at=old, heartbeat_at=old
    )
    assert fail_lost(ExportJob, job, timezone.now())
    job.refresh_from_db()
    assert (
        job.status == "failed"
        and "export the version again" in job.error
        and "Retry" not in job.error
    )
