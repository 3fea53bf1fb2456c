"""`manage.py project_archive`: a project with a row of every archived model moves from SQLite
to this test database (PostgreSQL in CI) and back to a new SQLite database, and every row
matches field by field (ids through the import's id maps, timestamps, JSON, files); a bad
archive writes nothing."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from io import StringIO
from pathlib import Path

import pytest
from django.apps import apps
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from django.db import models

import studio
from studio.archive.schema import plans, unarchived_models
from studio.models import ApiToken, ModelEndpoint, Project
from tests.support import archive_project
from tests.support.archive_project import EXTRA_USER, SECRET

ROOT = Path(__file__).resolve().parents[1]
NAME = "Archived demo"

pytestmark = pytest.mark.django_db(transaction=True)


def manage(args: list[str], database: Path, data_dir: Path) -> str:
    """A command in a process of its own on an SQLite database: the studio as an operator
    runs it, with another DATABASE_URL than the tests'."""
    env = {
        **os.environ,
        "DATABASE_URL": f"sqlite:///{database}",
        "STUDIO_DATA_DIR": str(data_dir),
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "DEBUG": "1",
    }
    done = subprocess.run(
        [sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def manage_py(args: list[str], database: Path, data_dir: Path) -> str:
    return manage(["manage.py", *args], database, data_dir)


def read_dump(path: Path) -> dict[str, dict[int, dict]]:
    rows: dict[str, dict[int, dict]] = {}
    for line in path.read_text().splitlines():
        entry = json.loads(line)
        rows.setdefault(entry["model"], {})[entry["row"]["id"]] = entry["row"]
    return rows


def read_id_map(path: Path) -> dict[str, dict[int, int]]:
    found: dict[str, dict[int, int]] = {}
    for line in path.read_text().splitlines():
        entry = json.loads(line)
        found.setdefault(entry["model"], {}).update(zip(entry["old"], entry["new"], strict=True))
    return found


def composed(first: dict, second: dict) -> dict[str, dict[int, int]]:
    return {
        label: {old: second[label][mid] for old, mid in ids.items()} for label, ids in first.items()
    }


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """The project built in an SQLite database by another process, its archive and a dump
    of every row of that database."""
    folder = tmp_path_factory.mktemp("archive-source")
    database, data = folder / "source.sqlite3", folder / "data"
    manage_py(["migrate", "-v", "0"], database, data)
    manage(["-m", "tests.support.archive_project", "build", NAME], database, data)
    archive = folder / "project.jsonl.gz"
    out = manage_py(
        ["project_archive", "export", NAME, "--out", str(archive), "--no-progress"], database, data
    )
    assert out.startswith(f"exported project {NAME!r}") and "2 files" in out, out
    manage(
        ["-m", "tests.support.archive_project", "dump", str(folder / "rows.jsonl")], database, data
    )
    return {"archive": archive, "rows": read_dump(folder / "rows.jsonl"), "folder": folder}


# ---- what is compared and how ------------------------------------------------------------


def fk_targets(model) -> dict[str, str]:
    """attname -> the label of the model it points to ("user" for the user model)."""
    user = get_user_model()
    found = {}
    for f in model._meta.concrete_fields:
        if isinstance(f, models.ForeignKey):
            target = f.related_model
            found[f.attname] = "user" if target is user else target._meta.label_lower
    return found


def expected_embedded(label: str, attname: str, row: dict, ids) -> object:
    """The ids kept inside a value, rewritten as the test expects them (written here, apart
    from studio.archive.embedded)."""
    value = row[attname]

    def new(model: str, old):
        return ids.get(model, {}).get(old)

    def world(label_value):
        if isinstance(label_value, dict) and "id" in label_value:
            return {**label_value, "id": new("studio.world", label_value["id"])}
        return label_value

    if (label, attname) == ("studio.branch", "lineage"):
        return [[new("studio.branch", b), start] for b, start in value]
    if (label, attname) == ("studio.trajectory", "metadata"):
        if row["source_format"] not in ("world", "episode"):
            return value
        out = {**value, "world": world(value.get("world"))} if "world" in value else dict(value)
        if "episode" in value:
            out["episode"] = {
                **value["episode"],
                "branch": new("studio.branch", value["episode"]["branch"]),
            }
            if "token_id" in value["episode"]:
                out["episode"]["token_id"] = new("studio.apitoken", value["episode"]["token_id"])
        if "campaign" in value:
            out["campaign"] = {
                **value["campaign"],
                "id": new("studio.campaign", value["campaign"]["id"]),
                "slot": new("studio.campaignepisode", value["campaign"]["slot"]),
            }
        return out
    if (label, attname) == ("studio.step", "meta"):
        if row["provenance"] == "recorded" and row["observation_source"] == "recorded":
            return value
        out = dict(value)
        if "job" in out:
            out["job"] = new("studio.simulationjob", out["job"])
        if "world" in out:
            out["world"] = world(out["world"])
        return out
    if (label, attname) == ("studio.simulationjob", "params"):
        return {**value, "world": world(value["world"])} if "world" in value else value
    if (label, attname) == ("studio.campaign", "world_label"):
        return world(value)
    if (label, attname) == ("studio.campaign", "tasks"):
        return [
            {**t, "trajectory": new("studio.trajectory", t["trajectory"])}
            if "trajectory" in t
            else t
            for t in value
        ]
    if (label, attname) == ("studio.evaluationsample", "key"):
        head, rest = value.split(":", 1)
        mapped = new("studio.trajectory", int(head))
        return f"{mapped}:{rest}" if mapped is not None else f"deleted-{head}:{rest}"
    if label == "studio.finetunerun" and attname.endswith("_trajectory_ids"):
        return [new("studio.trajectory", t) for t in value]
    if (label, attname) == ("studio.behavioursearch", "candidate_ids"):
        return None if value is None else [new("studio.step", s) for s in value]
    raise AssertionError(f"no expectation for {label}.{attname}")


EMBEDDED_FIELDS = {
    ("studio.branch", "lineage"),
    ("studio.trajectory", "metadata"),
    ("studio.step", "meta"),
    ("studio.simulationjob", "params"),
    ("studio.evaluationsample", "key"),
    ("studio.campaign", "world_label"),
    ("studio.campaign", "tasks"),
    ("studio.finetunerun", "heldout_trajectory_ids"),
    ("studio.finetunerun", "train_trajectory_ids"),
    ("studio.behavioursearch", "candidate_ids"),
}


def assert_same_rows(source_rows, target_rows, ids, *, target_name: str) -> int:
    """Every studio row of the source is in the target under its new id, every field equal
    (through `ids`); returns how many rows were compared."""
    source_users = {pk: r["username"] for pk, r in source_rows["auth.user"].items()}
    target_users = {pk: r["username"] for pk, r in target_rows["auth.user"].items()}
    compared = 0
    for model in apps.get_app_config("studio").get_models(include_auto_created=True):
        label = model._meta.label_lower
        links = fk_targets(model)
        rows = source_rows.get(label, {})
        assert len(ids.get(label, {})) == len(rows), (label, target_name)
        for old, row in rows.items():
            new_pk = ids[label][old]
            got = target_rows[label][new_pk]
            for attname, value in row.items():
                where = f"{label} {old} -> {target_name} {new_pk}: {attname}"
                if attname == "id":
                    continue
                if attname in links:
                    if value is None:
                        assert got[attname] is None, where
                    elif links[attname] == "user":
                        assert target_users[got[attname]] == source_users[value], where
                    else:
                        assert got[attname] == ids[links[attname]][value], where
                elif (label, attname) in EMBEDDED_FIELDS:
                    assert got[attname] == expected_embedded(label, attname, row, ids), where
                elif attname == "stored_path":
                    carried = row.get("stored_sha256")
                    assert got.get("stored_sha256") == carried, where
                    assert bool(got[attname]) == bool(carried), where  # "" when not carried
                elif attname == "stored_sha256":
                    continue
                elif label == "studio.project" and attname == "name":
                    continue  # may be renamed
                else:
                    assert got[attname] == value, where
            compared += 1
    return compared


def test_every_studio_model_is_archived_and_the_source_has_each(source):
    assert unarchived_models() == []
    header = json.loads(gzip.open(source["archive"]).readline())
    counts = {entry["model"]: entry["count"] for entry in header["models"]}
    assert set(counts) == {plan.label for plan in plans()}
    assert all(counts.values()), [label for label, n in counts.items() if not n]
    # the archive names the migration this checkout is at (its newest)
    newest = max(p.stem for p in (Path(studio.__file__).parent / "migrations").glob("0*.py"))
    assert header["migrations"][-1] == newest
    out = StringIO()
    call_command("project_archive", "show", str(source["archive"]), stdout=out)
    assert out.getvalue().startswith(f"project {NAME!r} (id ") and "studio.step:" in out.getvalue()


def test_round_trip_sqlite_to_this_database_and_back(source, project, settings, tmp_path):
    settings.DATA_DIR = tmp_path / "data"
    settings.MEDIA_ROOT = tmp_path / "data" / "uploads"
    before = {
        m._meta.label_lower: m._default_manager.count()
        for m in apps.get_app_config("studio").get_models(include_auto_created=True)
    }
    out, err = StringIO(), StringIO()
    call_command(
        "project_archive", "import", str(source["archive"]), "--id-map", str(tmp_path / "m1"),
        "--no-progress", stdout=out, stderr=err,
    )  # fmt: skip
    text = out.getvalue()
    assert f"imported project {NAME!r}" in text and "2 files" in text
    assert f"1 created inactive ({EXTRA_USER})" in text, text
    # same SECRET_KEY: the endpoint's key is readable; the endpoints outside the allowlist
    # (loopback here) are kept, and said
    warned = err.getvalue().splitlines()
    assert sorted(line.split("'")[1] for line in warned) == ["judge", "served"], warned
    assert all("will not be used until its URL is allowed" in line for line in warned)
    first = read_id_map(tmp_path / "m1")
    archive_project.dump(tmp_path / "target.jsonl")
    here = read_dump(tmp_path / "target.jsonl")
    compared = assert_same_rows(source["rows"], here, first, target_name="here")
    assert compared > 200
    from studio.archive.schema import EXCLUDED

    for label, n in before.items():  # nothing written beyond the archive's rows
        if label in EXCLUDED:  # no import writes these; a test session's workers beat theirs
            continue
        assert len(here.get(label, {})) == n + len(first.get(label, {})), label

    imported = Project.objects.get(name=NAME)
    curator = get_user_model().objects.get(username=EXTRA_USER)
    assert not curator.is_active and not curator.has_usable_password()
    admin = project.users["admin"]  # the fixture's admin, matched by username
    assert imported.memberships.filter(user=admin, role="admin").exists()
    from studio.secrets import decrypt

    served = ModelEndpoint.objects.get(project=imported, name="served")
    assert decrypt(served.api_key_encrypted) == SECRET

    # and back: this database's copy into a new SQLite database
    back = tmp_path / "back.jsonl.gz"
    call_command("project_archive", "export", NAME, "--out", str(back), "--no-progress", stdout=out)
    database, data = tmp_path / "back.sqlite3", tmp_path / "back-data"
    manage_py(["migrate", "-v", "0"], database, data)
    manage(["-m", "tests.support.archive_project", "offset", "500000"], database, data)
    manage_py(
        ["project_archive", "import", str(back), "--id-map", str(tmp_path / "m2"), "--no-progress"],
        database,
        data,
    )
    manage(
        ["-m", "tests.support.archive_project", "dump", str(tmp_path / "back.jsonl")],
        database,
        data,
    )
    again = read_dump(tmp_path / "back.jsonl")
    ids = composed(first, read_id_map(tmp_path / "m2"))
    assert assert_same_rows(source["rows"], again, ids, target_name="back") == compared


def table_counts() -> dict[str, int]:
    """Rows of every table an archive import may write. The models no archive holds are
    left out: live processes write them meanwhile (a test session's workers beat their
    heartbeat rows whatever the import does)."""
    from studio.archive.schema import EXCLUDED

    return {
        m._meta.label_lower: m._default_manager.count()
        for m in [
            *apps.get_app_config("studio").get_models(include_auto_created=True),
            get_user_model(),
        ]
        if m._meta.label_lower not in EXCLUDED
    }


def test_a_second_import_needs_another_name_and_is_a_copy(source, project, settings, tmp_path):
    settings.DATA_DIR = tmp_path
    settings.MEDIA_ROOT = tmp_path / "uploads"
    call_command(
        "project_archive", "import", str(source["archive"]), "--no-progress", stdout=StringIO()
    )
    counts = table_counts()
    with pytest.raises(
        CommandError, match="already exists here; import the archive under another name"
    ):
        call_command("project_archive", "import", str(source["archive"]), "--no-progress")
    assert table_counts() == counts
    err = StringIO()
    call_command(
        "project_archive", "import", str(source["archive"]), "--name", "Copy", "--no-progress",
        stdout=StringIO(), stderr=err,
    )  # fmt: skip
    assert "1 studio.apitoken row(s) left out: the same token already exists" in err.getvalue()
    copy = Project.objects.get(name="Copy")
    assert copy.trajectories.count() == Project.objects.get(name=NAME).trajectories.count()
    assert not ApiToken.objects.filter(project=copy).exists()


def rewrite(archive: Path, out: Path, change) -> Path:
    with gzip.open(archive, "rb") as src:
        lines = [json.loads(line) for line in src]
    lines = change(lines)
    with gzip.open(out, "wb") as dst:
        for line in lines:
            dst.write(json.dumps(line).encode() + b"\n")
    return out


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda lines: lines[: len(lines) // 2], "truncated"),
        (lambda lines: lines[:-1], "truncated"),
        (
            lambda lines: [
                {**lines[0], "migrations": [*lines[0]["migrations"], "0099_from_the_future"]},
                *lines[1:],
            ],
            "written by a newer studio: this database lacks the migrations 0099_from_the_future",
        ),
        (lambda lines: [{**lines[0], "format_version": 9}, *lines[1:]], "archive format version 9"),
    ],
    ids=["half", "no-end-line", "newer-studio", "format-version"],
)
def test_a_bad_archive_writes_nothing(source, project, settings, tmp_path, change, message):
    settings.DATA_DIR = tmp_path
    settings.MEDIA_ROOT = tmp_path / "uploads"
    bad = rewrite(source["archive"], tmp_path / "bad.jsonl.gz", change)
    counts = table_counts()
    with pytest.raises(CommandError, match=message) as raised:
        call_command("project_archive", "import", str(bad), "--no-progress")
    assert str(raised.value).endswith("nothing was written")
    assert table_counts() == counts
    # no carried file written before the error is left, nor the folder made for it
    assert [p.name for p in tmp_path.rglob("*") if p.is_file()] == ["bad.jsonl.gz"]
    assert not (tmp_path / "uploads" / "imports").exists() or not any(
        (tmp_path / "uploads" / "imports").rglob("*/*")
    )


def test_a_row_pointing_outside_the_archive_is_named(source, project, settings, tmp_path):
    settings.DATA_DIR = tmp_path
    settings.MEDIA_ROOT = tmp_path / "uploads"

    def orphan_step(lines):
        at = next(
            i
            for i, line in enumerate(lines)
            if isinstance(line, dict) and line.get("model") == "studio.step"
        )
        fields = lines[at]["fields"]
        row = list(lines[at + 1])
        row[fields.index("branch_id")] = 99_999_999
        return [*lines[: at + 1], row, *lines[at + 2 :]]

    bad = rewrite(source["archive"], tmp_path / "orphan.jsonl.gz", orphan_step)
    counts = table_counts()
    with pytest.raises(
        CommandError,
        match=r"line \d+: studio.step \d+: branch_id 99999999 names a studio.branch row the archive does not hold",
    ):
        call_command("project_archive", "import", str(bad), "--no-progress")
    assert table_counts() == counts


def test_an_archive_from_an_older_studio_takes_the_new_fields_defaults(
    source, project, settings, tmp_path
):
    """Written before migration 0015 (no ImportJob.upload_removed_at, cancel_requested,
    phase): those fields take their defaults here."""
    settings.DATA_DIR = tmp_path
    settings.MEDIA_ROOT = tmp_path / "uploads"
    added = ["cancel_requested", "phase", "upload_removed_at"]

    def older(lines):
        header = dict(lines[0])
        header["migrations"] = [m for m in header["migrations"] if not m.startswith("0015_")]
        header["models"] = [
            {**e, "fields": [f for f in e["fields"] if f not in added]}
            if e["model"] == "studio.importjob"
            else e
            for e in header["models"]
        ]
        out, drop = [header], None
        for line in lines[1:]:
            if isinstance(line, dict) and "model" in line:
                drop = None
                if line["model"] == "studio.importjob":
                    drop = [line["fields"].index(f) for f in added]
                    line = {**line, "fields": [f for f in line["fields"] if f not in added]}
            elif isinstance(line, list) and drop is not None:
                line = [v for i, v in enumerate(line) if i not in drop]
            out.append(line)
        return out

    old = rewrite(source["archive"], tmp_path / "old.jsonl.gz", older)
    call_command("project_archive", "import", str(old), "--no-progress", stdout=StringIO())
    from studio.models import ImportJob

    jobs = ImportJob.objects.filter(project__name=NAME)
    assert jobs.count() == 2
    assert {(j.cancel_requested, j.phase, j.upload_removed_at) for j in jobs} == {
        (False, "queued", None)
    }
