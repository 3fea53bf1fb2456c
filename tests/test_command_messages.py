"""Management commands name the cause when they fail, in one line, and print nothing twice:
an archive imported into a database that is not migrated says so (not "a newer studio"),
`agentworldbench judge` against a server that is not there names the URL and why, and
`simulate` sends its job without kombu's warning about a missing broker hostname.

The commands run as an operator runs them, in processes of their own on SQLite databases of
their own (DATABASE_URL), except where the test database is the one meant."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import socket
import subprocess
import sys
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from studio.archive import codec

ROOT = Path(__file__).resolve().parents[1]


def manage(args: list[str], database: Path, data_dir: Path, **extra: str):
    env = {
        **os.environ,
        "DATABASE_URL": f"sqlite:///{database}",
        "STUDIO_DATA_DIR": str(data_dir),
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "DEBUG": "1",
        **extra,
    }
    return subprocess.run(
        [sys.executable, "manage.py", args[0], "--skip-checks", *args[1:]],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def header_only_archive(path: Path, migrations: list[str]) -> Path:
    """An archive's first line: what is read before anything is written."""
    header = {
        "archive": codec.FORMAT,
        "format_version": codec.FORMAT_VERSION,
        "migrations": migrations,
        "models": [],
        "project": {"name": "From elsewhere", "id": 1},
    }
    with gzip.open(path, "wb") as out:
        out.write(json.dumps(header).encode() + b"\n")
    return path


def studio_migrations() -> list[str]:
    return sorted(p.stem for p in (ROOT / "studio" / "migrations").glob("0*.py"))


@pytest.fixture(scope="module")
def migrated(tmp_path_factory) -> dict[str, Path]:
    """A migrated SQLite database with the demo data, made once for the module."""
    folder = tmp_path_factory.mktemp("messages")
    database, data = folder / "demo.sqlite3", folder / "data"
    for args in (["migrate", "-v", "0"], ["load_demo"]):
        done = manage(args, database, data)
        assert done.returncode == 0, done.stderr[-3000:]
    return {"database": database, "data": data, "folder": folder}


# ---- project_archive import: not migrated, or written by a newer studio ---------------------


def test_an_empty_database_is_named_not_migrated(tmp_path):
    archive = header_only_archive(tmp_path / "a.jsonl.gz", studio_migrations())
    done = manage(["project_archive", "import", str(archive)], tmp_path / "empty.sqlite3", tmp_path)
    assert done.returncode == 1
    err = done.stderr.strip()
    assert len(err.splitlines()) == 1, err
    assert "this database is not migrated: it lacks the migration(s) " in err
    assert "run `python manage.py migrate`" in err and "nothing was written" in err
    assert "newer studio" not in err


def test_a_database_one_migration_behind_names_it(migrated, tmp_path):
    database = tmp_path / "behind.sqlite3"
    shutil.copy(migrated["database"], database)
    names = studio_migrations()
    done = manage(["migrate", "studio", names[-2], "-v", "0"], database, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    archive = header_only_archive(tmp_path / "a.jsonl.gz", names[:-1])  # an older archive
    done = manage(["project_archive", "import", str(archive)], database, tmp_path)
    assert done.returncode == 1
    assert f"it lacks the migration(s) studio.{names[-1]} (run `python manage.py migrate`" in (
        done.stderr
    )
    assert "newer studio" not in done.stderr


@pytest.mark.django_db
def test_an_archive_from_a_newer_studio_names_the_unknown_migration(tmp_path):
    archive = header_only_archive(
        tmp_path / "a.jsonl.gz", [*studio_migrations(), "0099_from_the_future"]
    )
    with pytest.raises(CommandError) as raised:
        call_command("project_archive", "import", str(archive), "--no-progress")
    message = str(raised.value)
    assert "was written by a newer studio: this database lacks the migrations " in message
    assert "0099_from_the_future, which this installation does not know" in message
    assert "not migrated" not in message


# ---- agentworldbench judge: a server that is not there ---------------------------------------


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # closed again: nothing listens there


def predictions(path: Path) -> Path:
    row = json.loads((ROOT / "tests/fixtures/awb/terminal_test.jsonl").read_text().splitlines()[0])
    row.update(gen="x", predicted_observation="x")
    path.write_text(json.dumps(row) + "\n")
    return path


def test_judge_against_a_closed_port_names_the_url_and_the_cause(tmp_path):
    url = f"http://127.0.0.1:{closed_port()}/v1"
    done = manage(
        [
            "agentworldbench", "judge", "--predictions", str(predictions(tmp_path / "p.jsonl")),
            "--out", str(tmp_path / "j.jsonl"), "--base-url", url, "--model", "judge",
        ],
        tmp_path / "db.sqlite3",
        tmp_path,
    )  # fmt: skip
    assert done.returncode == 1
    assert done.stdout == ""
    err = done.stderr.strip()
    assert err.splitlines() == [err], err  # one line: no progress bar, no per-row lines
    assert f"the judge server at {url} cannot be reached: connection refused" in err
    assert "Judge scoring failed" not in err
    assert not (tmp_path / "j.jsonl").exists() or not (tmp_path / "j.jsonl").read_text()


def test_judge_names_a_host_name_that_does_not_resolve(tmp_path):
    with pytest.raises(CommandError, match=r"'no-such-judge\.invalid' does not resolve \(DNS"):
        call_command(
            "agentworldbench", "judge", "--predictions", str(predictions(tmp_path / "p.jsonl")),
            "--out", str(tmp_path / "j.jsonl"), "--base-url", "http://no-such-judge.invalid/v1",
            "--model", "judge",
        )  # fmt: skip


def test_judge_rows_that_fail_say_why(tmp_path):
    """A server that answers, but not as a judge (every request 404): each failed row's line
    carries the last attempt's error, not only "Judge scoring failed"."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    from threading import Thread

    class NotFound(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 - the name http.server calls
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), NotFound)
    Thread(target=server.serve_forever, daemon=True).start()
    err = StringIO()
    try:
        with pytest.raises(CommandError, match="every one of the 1 row"):
            call_command(
                "agentworldbench", "judge", "--predictions",
                str(predictions(tmp_path / "p.jsonl")), "--out", str(tmp_path / "j.jsonl"),
                "--base-url", f"http://127.0.0.1:{server.server_port}/v1", "--model", "judge",
                "--attempts", "1", verbosity=0, stdout=StringIO(), stderr=err,
            )  # fmt: skip
    finally:
        server.shutdown()
        server.server_close()
    assert "Judge scoring failed (attempt 1: NotFoundError: Error code: 404)" in err.getvalue()


# ---- simulate: no warning about the broker's hostname -----------------------------------------


@pytest.mark.parametrize("broker", ["filesystem", "sqlite"])
def test_simulate_sends_its_job_without_a_hostname_warning(migrated, broker):
    common = (migrated["database"], migrated["data"])
    helped = manage(["simulate", "--help"], *common, STUDIO_BROKER=broker)
    assert helped.returncode == 0 and helped.stderr == "", helped.stderr
    done = manage(
        ["simulate", "--trajectory", "1", "--step", "1", "--n", "1", "--backend", "retrieval"],
        *common,
        STUDIO_BROKER=broker,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "queued on default" in done.stdout
    assert "hostname" not in done.stderr.lower(), done.stderr
    assert done.stderr == "", done.stderr


def test_sweep_files_prints_its_summary_once(migrated):
    done = manage(["sweep_files"], migrated["database"], migrated["data"])
    assert done.returncode == 0, done.stderr[-3000:]
    lines = (done.stdout + done.stderr).strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("removed "), lines
