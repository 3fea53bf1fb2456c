"""A project archive is read with a bound on what it uncompresses to (STUDIO_ARCHIVE_MAX_MB in
all, STUDIO_ARCHIVE_MAX_LINE_MB a line, a carried file no longer than its line declares): a
gzip bomb (a few MB that expand to a gigabyte) is refused naming the line, the part of the
archive and the setting, and leaves no row and no file; an archive within the limits still
imports whole.

The bombs are built as gzip members written again and again (a gzip file may hold many, and
reads as their concatenation): a 64 MB member is compressed once, so a gigabyte costs a
fraction of a second and a few MB on disk."""

from __future__ import annotations

import base64
import gzip
import json
import zlib
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from studio.models import Project
from tests import test_project_archive
from tests.test_project_archive import NAME, rewrite, table_counts

# The project with a row of every archived model, built and exported once for the module.
source = test_project_archive.source

pytestmark = pytest.mark.django_db(transaction=True)

GB = 1 << 30
MEMBER = 64 << 20  # uncompressed bytes of one repeated member


def archive_lines(archive: Path) -> list:
    with gzip.open(archive, "rb") as src:
        return [json.loads(line) for line in src]


def member(data: bytes) -> bytes:
    return gzip.compress(data, compresslevel=9, mtime=0)


def write_bomb(out: Path, head: list, repeated: bytes, total: int, tail: list = ()) -> Path:
    """`head` lines, then `repeated` (uncompressed) again and again up to `total` bytes,
    then `tail` lines: each part its own gzip member."""
    once = member(repeated)
    with out.open("wb") as dst:
        dst.write(member(b"".join(json.dumps(line).encode() + b"\n" for line in head)))
        for _ in range(total // len(repeated)):
            dst.write(once)
        if tail:
            dst.write(member(b"".join(json.dumps(line).encode() + b"\n" for line in tail)))
    return out


def uncompressed_size(path: Path) -> int:
    size = 0
    with gzip.open(path, "rb") as src:
        while chunk := src.read(1 << 20):
            size += len(chunk)
    return size


def left_files(root: Path) -> list[str]:
    return sorted(p.name for p in root.rglob("*") if p.is_file() and p.suffix != ".gz")


@pytest.fixture
def target(settings, tmp_path):
    settings.DATA_DIR = tmp_path
    settings.MEDIA_ROOT = tmp_path / "uploads"
    return tmp_path


def refused(archive: Path, match: str) -> str:
    counts = table_counts()
    with pytest.raises(CommandError, match=match) as raised:
        call_command("project_archive", "import", str(archive), "--no-progress")
    message = str(raised.value)
    assert message.endswith("nothing was written")
    assert table_counts() == counts
    assert not Project.objects.filter(name=NAME).exists()
    return message


def test_one_endless_line_stops_at_the_line_limit(source, project, settings, target):
    """A gigabyte of zeros with no newline, where the studio.step rows begin: the rows read
    before it go back, and the line is never read into memory whole."""
    settings.STUDIO_ARCHIVE_MAX_LINE_BYTES = 1 << 20
    lines = archive_lines(source["archive"])
    at = next(
        i for i, v in enumerate(lines) if isinstance(v, dict) and v.get("model") == "studio.step"
    )
    bomb = write_bomb(target / "bomb.jsonl.gz", lines[: at + 1], b"\0" * MEMBER, GB)
    assert bomb.stat().st_size < 4 << 20  # a few MB on disk
    message = refused(
        bomb,
        rf"line {at + 2}: the line is longer than 1\.0 MB uncompressed "
        r"\(limit STUDIO_ARCHIVE_MAX_LINE_MB=1\), in the studio\.step rows",
    )
    assert "raise the limit" in message
    assert left_files(target) == []


def test_a_carried_file_that_expands_stops_at_the_archive_limit(source, project, settings, target):
    """A carried file declared as a gigabyte, its chunks zeros: the import stops when the
    archive reaches STUDIO_ARCHIVE_MAX_MB, and the part of the file written is removed."""
    limit = uncompressed_size(source["archive"]) + (8 << 20)
    settings.STUDIO_ARCHIVE_MAX_BYTES = limit
    lines = archive_lines(source["archive"])
    at = next(i for i, v in enumerate(lines) if isinstance(v, dict) and "file" in v)
    declared = {**lines[at], "size": GB}
    chunk = json.dumps(["chunk", base64.b64encode(b"\0" * (1 << 20)).decode()]).encode() + b"\n"
    repeated = chunk * (MEMBER // len(chunk))
    bomb = write_bomb(target / "bomb.jsonl.gz", [*lines[:at], declared], repeated, GB)
    assert bomb.stat().st_size < 8 << 20
    mb = f"{limit / (1 << 20):g}"
    refused(
        bomb,
        rf"the archive uncompresses to more than [\d.]+ MB \(limit STUDIO_ARCHIVE_MAX_MB={mb}\), "
        rf"in the carried file {lines[at]['name']!r} of {lines[at]['file']} {lines[at]['id']}",
    )
    # neither the part of the file written nor the folder made for it
    assert left_files(target) == []
    assert not list((target / "uploads").glob("imports/*/*"))


def test_a_carried_file_longer_than_declared_stops_there(source, project, target):
    def longer(lines):
        at = next(i for i, v in enumerate(lines) if isinstance(v, dict) and "file" in v)
        extra = ["chunk", base64.b64encode(b"x" * 100).decode()]
        return [
            *lines[:at],
            {**lines[at], "size": 1},
            *lines[at + 1 : at + 2],
            extra,
            *lines[at + 2 :],
        ]

    bad = rewrite(source["archive"], target / "longer.jsonl.gz", longer)
    refused(bad, r"is longer than the 1 bytes its line declares: the archive is damaged")
    assert left_files(target) == []


def test_not_gzip_at_all_is_named(project, target):
    bad = target / "plain.jsonl.gz"
    bad.write_bytes(zlib.compress(b"{}\n"))
    refused(bad, "truncated or not a project archive")


def test_an_archive_within_the_limits_imports_whole(source, project, settings, target):
    """Exactly at the limits: the archive's own size in all, its longest line."""
    with gzip.open(source["archive"], "rb") as src:
        longest = max(len(line) for line in src)
    size = uncompressed_size(source["archive"])
    settings.STUDIO_ARCHIVE_MAX_BYTES = size
    settings.STUDIO_ARCHIVE_MAX_LINE_BYTES = longest
    out = StringIO()
    call_command("project_archive", "import", str(source["archive"]), "--no-progress", stdout=out)
    assert out.getvalue().startswith(f"imported project {NAME!r}") and "2 files" in out.getvalue()
    imported = Project.objects.get(name=NAME)
    assert imported.trajectories.count() == len(source["rows"]["studio.trajectory"])
    # a byte less of either, and the same archive is refused
    settings.STUDIO_ARCHIVE_MAX_BYTES = size - 1
    with pytest.raises(CommandError, match=r"limit STUDIO_ARCHIVE_MAX_MB="):
        call_command(
            "project_archive", "import", str(source["archive"]), "--name",
            "Again", "--no-progress",
        )  # fmt: skip
    settings.STUDIO_ARCHIVE_MAX_BYTES = size
    settings.STUDIO_ARCHIVE_MAX_LINE_BYTES = longest - 1
    with pytest.raises(CommandError, match=r"limit STUDIO_ARCHIVE_MAX_LINE_MB="):
        call_command(
            "project_archive", "import", str(source["archive"]), "--name",
            "Again", "--no-progress",
        )  # fmt: skip
    assert not Project.objects.filter(name="Again").exists()
