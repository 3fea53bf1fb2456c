"""Every importer against broken files: a clear error or a clean import, never a traceback,
never a partial write. Plus the import limits (depth, file size, line length, kept fields),
a forced format that does not match, the command's one line and a failed upload's message.

The fuzz starts from a real file of each format (../shared/data, read from there; the repo's
own fixtures for the two formats it has none of), mutates it in ways real files break
(truncation, wrong types, binary bytes, deep nesting, a huge line, empty, other encodings)
with a seeded random, and imports each mutant in-process, forced to the importer's format
and detected, into the test database.
"""

from __future__ import annotations

import codecs
import json
import os
import random
import subprocess
import sys
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.urls import reverse

from studio.importers.limits import MB
from studio.importers.registry import IMPORTERS
from studio.models import Branch, ImportJob, JobStatus, Project, Step, Tag, Trajectory
from studio.services.imports import ImportFailure, LimitExceeded, do_import_file

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).parent / "fixtures" / "importers"
SHARED = ROOT.parent / "shared" / "data"
DEEP = 100_000


def _json(rel: str) -> Any:
    return json.loads((SHARED / rel).read_text())


def _jsonl(records: list) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in records).encode()


# One real sample per importer: (file name, bytes). Big files are cut to a few records, so
# the hundreds of imports stay fast.
SAMPLES: dict[str, Callable[[], tuple[str, bytes]]] = {
    "agentworld-studio/v1": lambda: ("native.json", (FIXTURES / "native_sample.json").read_bytes()),
    "inspect": lambda: (
        "browser.json",
        (SHARED / "web/inspect-ai-browser/2025-05-12T20-27-36-04-00_browser.json").read_bytes(),
    ),
    "toolbench": lambda: (
        "G1_answer__10.json",
        (SHARED / "mcp/toolbench/G1_answer__10_ChatGPT_DFS_woFilter_w2.json").read_bytes(),
    ),
    "androidworld": lambda: (
        "markor.json",
        (
            SHARED / "android/android-world-agents/"
            "results_gpt_o3_mini__MarkorCreateFolder_base_o3-mini_trial1.json"
        ).read_bytes(),
    ),
    "fireact": lambda: (
        "hotpotqa.json",
        json.dumps(
            dict(
                list(
                    _json("search/fireact/hotpotqa_dev_ft-gpt-3.5-turbo-0613_serpapi.json").items()
                )[:3]
            )
        ).encode(),
    ),
    "swe-agent": lambda: (
        "networking.traj",
        (SHARED / "terminal/swe-agent-ctf/misc__networking_1.traj").read_bytes(),
    ),
    "openhands": lambda: (
        "runtime.json",
        (SHARED / "swe/openhands/runtime_trajs_wrong_initial_state.json").read_bytes(),
    ),
    "agentworldbench": lambda: ("awb.jsonl", (FIXTURES / "awb_mixed.jsonl").read_bytes()),
    "mini-swe-agent": lambda: (
        "github_issue.traj.json",
        (SHARED / "swe/mini-swe-agent/github_issue.traj.json").read_bytes(),
    ),
    "webvoyager": lambda: (
        "bbc.json",
        (SHARED / "web/webvoyager/taskBBC_News--9__interact_messages.json").read_bytes(),
    ),
    "openai-chat": lambda: (
        "tau.jsonl",
        _jsonl(_json("mcp/tau-bench/gpt-4o-airline.json")[:3]),
    ),
}

WRONG_TYPES: list[Any] = [None, True, 0, -1.5, "", "text", [], [1, "a"], {}, {"k": "v"}]
# The fuzz runs with small limits, so that a huge line or file is quick to make.
LINE_LIMIT_MB, FILE_LIMIT_MB, FIELD_LIMIT_MB = 1, 3, 1


def _records(content: bytes) -> tuple[list[Any], bool]:
    """The file's JSON values: the one document, or its lines (JSONL)."""
    try:
        return [json.loads(content)], False
    except json.JSONDecodeError:
        return [json.loads(line) for line in content.splitlines() if line.strip()], True


def _dump(values: list[Any], jsonl: bool) -> bytes:
    return _jsonl(values) if jsonl else json.dumps(values[0]).encode()


def _container_paths(value: Any, path: tuple = ()) -> Iterator[tuple]:
    """Every path to a value inside `value` (keys and indexes), the top one excluded."""
    if isinstance(value, dict | list):
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for key, child in items:
            yield (*path, key)
            yield from _container_paths(child, (*path, key))


def _replaced(doc: Any, path: tuple, new: Any) -> Any:
    doc = json.loads(json.dumps(doc))
    target = doc
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = new
    return doc


def _deep(kind: str) -> str:
    if kind == "list":
        return "[" * DEEP + "]" * DEEP
    return '{"a":' * DEEP + "1" + "}" * DEEP


def mutants(content: bytes, rng: random.Random) -> Iterator[tuple[str, bytes]]:
    """(what was done, the bytes) for every mutation of one sample."""
    values, jsonl = _records(content)
    size = len(content)
    # truncation at several points
    for fraction in (0.0005, 0.1, 0.5, 0.9):
        yield f"truncated at {fraction:.2%}", content[: max(1, int(size * fraction))]
    yield "truncated by one byte", content[:-1]
    yield "truncated mid-line", content[: rng.randrange(1, size)]
    # wrong types for each top-level field (of the document, its first record, the first line)
    first = values[0]
    holder: tuple = ()
    if isinstance(first, list) and first and isinstance(first[0], dict):
        holder = (0,)
    top = first[0] if holder else first
    if isinstance(top, dict):
        for key in list(top):
            for wrong in rng.sample(WRONG_TYPES, 3):  # all ten for each field: twice as slow
                changed = _replaced(first, (*holder, key), wrong)
                yield f"field {key!r} = {wrong!r}", _dump([changed, *values[1:]], jsonl)
    for wrong in WRONG_TYPES:
        yield f"the whole value = {wrong!r}", _dump([wrong, *values[1:]], jsonl)
    # wrong types deeper in, at random places
    paths = list(_container_paths(first))
    for path in rng.sample(paths, min(12, len(paths))):
        wrong = rng.choice(WRONG_TYPES)
        yield f"{path} = {wrong!r}", _dump([_replaced(first, path, wrong), *values[1:]], jsonl)
    # random binary
    yield "random bytes", rng.randbytes(2048)
    at = rng.randrange(size)
    yield "random bytes inside", content[:at] + rng.randbytes(64) + content[at:]
    flipped = bytearray(content)
    for _ in range(16):
        flipped[rng.randrange(size)] = rng.randrange(256)
    yield "16 random bytes changed", bytes(flipped)
    yield "NUL bytes", content.replace(b'"', b'"\x00', 3)
    # deep nesting (100,000 levels) in several places
    yield "the whole file nested 100,000 deep", _deep("list").encode()
    yield "100,000 opening brackets only", b"[" * DEEP
    for kind in ("list", "object"):
        for path in rng.sample(paths, min(3, len(paths))):
            marked = _replaced(first, path, "\u0000DEEP")
            text = _dump([marked, *values[1:]], jsonl).decode()
            yield (
                f"{path} nested 100,000 deep ({kind})",
                text.replace('"\\u0000DEEP"', _deep(kind), 1).encode(),
            )
    # 900 levels where fields are kept (the depth that overflowed the service's walks)
    for path in rng.sample(paths, min(3, len(paths))):
        nested: Any = 1
        for _ in range(900):
            nested = {"x": nested}
        text = _dump([_replaced(first, path, "\u0000D"), *values[1:]], jsonl).decode()
        yield f"{path} nested 900 deep", text.replace('"\\u0000D"', json.dumps(nested), 1).encode()
    # a huge line: a string over the line limit inside the data, and a line of garbage
    path = rng.choice(paths)
    big = "x" * (LINE_LIMIT_MB * MB + 1000)
    yield (
        f"{path} = a {len(big):,}-character string",
        _dump([_replaced(first, path, big), *values[1:]], jsonl),
    )
    yield "a huge line of garbage", content + b"a" * (LINE_LIMIT_MB * MB + 10) + b"\n"
    yield "over the file size limit", content + b" " * (FILE_LIMIT_MB * MB)
    # empty, blank and other encodings
    yield "empty", b""
    yield "blank lines only", b"\n \n\t\n"
    yield "UTF-16 with a BOM", codecs.BOM_UTF16_LE + content.decode().encode("utf-16-le")
    yield "UTF-16 big-endian, no BOM", content.decode().encode("utf-16-be")
    yield "UTF-8 BOM", codecs.BOM_UTF8 + content
    yield "invalid UTF-8 in a string", content.replace(b'"', b'"\xff\xfe\xc3', 2)
    yield (
        "Latin-1 text",
        content.decode().replace('"', '"caf\u00e9 ', 2).encode("latin-1", "replace"),
    )


def _counts() -> dict[str, int]:
    return {
        "projects": Project.objects.count(),
        "trajectories": Trajectory.objects.count(),
        "branches": Branch.objects.count(),
        "steps": Step.objects.count(),
        "tags": Tag.objects.count(),
        "trajectory tags": Trajectory.tags.through.objects.count(),
    }


@pytest.fixture
def small_limits(settings):
    settings.STUDIO_IMPORT_MAX_LINE_BYTES = LINE_LIMIT_MB * MB
    settings.STUDIO_IMPORT_MAX_FILE_BYTES = FILE_LIMIT_MB * MB
    settings.STUDIO_IMPORT_MAX_FIELD_BYTES = FIELD_LIMIT_MB * MB


def test_every_importer_has_a_sample():
    assert set(SAMPLES) == {module.NAME for module in IMPORTERS}


@pytest.mark.parametrize("fmt", [module.NAME for module in IMPORTERS])
def test_fuzz_gives_a_clear_error_or_a_clean_import(db, small_limits, tmp_path, fmt):
    if not SHARED.is_dir():
        pytest.fail(f"shared data not found at {SHARED} (expected ../shared/data)")
    name, content = SAMPLES[fmt]()
    bare = Project.objects.create(name=f"Fuzz {fmt}")
    # the sample itself imports, forced and detected
    sample = tmp_path / name
    sample.write_bytes(content)
    assert do_import_file(project=bare, path=sample, fmt=fmt).trajectories_created >= 1
    assert do_import_file(project=bare, path=sample).detected_format == fmt

    rng = random.Random(zlib.crc32(fmt.encode()))
    problems: list[str] = []
    outcomes = {"imported": 0, "refused": 0}
    for number, (what, data) in enumerate(mutants(content, rng)):
        stem, dot, suffix = name.partition(".")
        path = tmp_path / f"{stem}-m{number}{dot}{suffix}"
        path.write_bytes(data)
        for forced in (fmt, None):
            before = _counts()
            label = f"{what} ({'as ' + forced if forced else 'detected'})"
            try:
                result = do_import_file(project=bare, path=path, fmt=forced)
            except ImportFailure as exc:
                outcomes["refused"] += 1
                message = str(exc)
                if not message.startswith(path.name) or "\n" in message or len(message) > 600:
                    problems.append(f"{label}: unclear error {message[:300]!r}")
                if _counts() != before:
                    problems.append(f"{label}: wrote rows before failing: {_counts()} {before}")
            except Exception as exc:  # noqa: BLE001 - every other exception is the bug
                problems.append(f"{label}: {type(exc).__name__}: {str(exc)[:300]}")
            else:
                outcomes["imported"] += 1
                after = _counts()
                added = after["trajectories"] - before["trajectories"]
                steps = after["steps"] - before["steps"]
                if (added, steps) != (result.trajectories_created, result.steps_created):
                    problems.append(f"{label}: said {result}, wrote {added} and {steps} steps")
        path.unlink()
    assert not problems, "\n".join(problems)
    assert outcomes["refused"] > 50 and outcomes["imported"] > 0, outcomes


# ---- the limits, one by one ---------------------------------------------------------------


def _native(metadata: Any = None, meta: Any = None, tools: Any = None) -> dict:
    trajectory: dict[str, Any] = {
        "title": "Disk check",
        "domain": "terminal",
        "steps": [
            {"action": "df -h", "observation": "/dev/sda1 40G 31G 9G 78% /"},
            {"action": "du -sh /var", "observation": "12G /var", "meta": meta or {}},
        ],
    }
    if metadata is not None:
        trajectory["metadata"] = metadata
    if tools is not None:
        trajectory["tools"] = tools
    return {"format": "agentworld-studio/v1", "trajectories": [trajectory]}


def _nested(levels: int, kind: str = "object") -> Any:
    value: Any = 1
    for _ in range(levels):
        value = {"a": value} if kind == "object" else [value]
    return value


@pytest.fixture
def bare(db):
    # A project without members: nothing to hash passwords for.
    return Project.objects.create(name="Limits")


def test_json_nested_100000_deep_names_file_line_and_limit(bare, tmp_path):
    deep = "[" * DEEP + "]" * DEEP
    path = tmp_path / "deep.json"
    path.write_text(deep)
    for fmt in [None, *(module.NAME for module in IMPORTERS)]:
        with pytest.raises(LimitExceeded) as err:
            do_import_file(project=bare, path=path, fmt=fmt)
        assert str(err.value) == (
            "deep.json line 1: JSON nested deeper than 128 levels at column 129 "
            "(limit STUDIO_IMPORT_MAX_DEPTH=128)"
        )
    rows = [{"task": "search", "prompt": ["a"], "response": ["b"]}] * 2
    lines = [json.dumps(r) for r in rows]
    lines.insert(1, json.dumps({"task": "search", "prompt": ["a"], "response": [_nested(200)]}))
    path = tmp_path / "trajectories.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(LimitExceeded) as err:
        do_import_file(project=bare, path=path)
    assert str(err.value).startswith(
        "trajectories.jsonl line 2: JSON nested deeper than 128 levels at column "
    )
    assert str(err.value).endswith("(limit STUDIO_IMPORT_MAX_DEPTH=128)")
    # a pretty-printed document names the line the limit is passed on
    path = tmp_path / "pretty.json"
    path.write_text(json.dumps(_native(metadata=_nested(200)), indent=1))
    with pytest.raises(LimitExceeded, match=r"^pretty.json line 1\d\d: JSON nested deeper"):
        do_import_file(project=bare, path=path)
    assert not Trajectory.objects.exists()


@pytest.mark.parametrize("levels", [600, 900])
def test_deep_kept_fields_are_refused_not_crashed_on(bare, tmp_path, levels):
    for doc in (
        _native(metadata=_nested(levels)),
        _native(meta=_nested(levels)),
        _native(tools=[_nested(levels)]),
    ):
        path = tmp_path / "kept.json"
        path.write_text(json.dumps(doc))
        with pytest.raises(LimitExceeded, match=r"^kept.json line 1: JSON nested deeper than 128"):
            do_import_file(project=bare, path=path)
    assert not Trajectory.objects.exists()


def test_the_highest_depth_setting_imports_what_it_allows(bare, tmp_path, settings):
    """At STUDIO_IMPORT_MAX_DEPTH=256 (the most settings accept) kept fields nested nearly
    that deep go through every walk after parsing and into the database."""
    settings.STUDIO_IMPORT_MAX_DEPTH = 256
    path = tmp_path / "deep-ok.json"
    path.write_text(
        json.dumps(_native(metadata=_nested(250), meta=_nested(248), tools=[_nested(249, "list")]))
    )
    result = do_import_file(project=bare, path=path)
    assert (result.trajectories_created, result.steps_created) == (1, 2)
    t = Trajectory.objects.get()
    assert t.metadata == _nested(250) and t.tools == [_nested(249, "list")]
    assert Step.objects.get(index=1).meta == _nested(248)


def test_kept_field_over_the_size_limit_names_record_step_and_field(bare, tmp_path, settings):
    settings.STUDIO_IMPORT_MAX_FIELD_BYTES = 1 * MB
    big = {"log": "x" * (MB + 10)}
    cases = [
        (
            _native(metadata=big),
            'field "metadata" as JSON is 1,048,597 bytes, more than 1,048,576 bytes',
        ),
        (_native(tools=[big]), 'field "tools" as JSON is 1,048,599 bytes'),
        (_native(meta=big), 'step 2: field "meta" as JSON is 1,048,597 bytes'),
    ]
    for doc, expected in cases:
        path = tmp_path / "big.json"
        path.write_text(json.dumps(doc))
        with pytest.raises(LimitExceeded) as err:
            do_import_file(project=bare, path=path)
        message = str(err.value)
        assert message.startswith("big.json at trajectories[0]: ") and expected in message
        assert message.endswith("(limit STUDIO_IMPORT_MAX_FIELD_MB=1)")
    # the record of a JSONL file is its line
    rows = [json.loads(line) for line in (FIXTURES / "chat_tools.jsonl").read_text().splitlines()]
    rows[1]["id"] = {"padding": "y" * (MB + 10)}
    path = tmp_path / "chat.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(LimitExceeded, match=r'^chat.jsonl line 2: field "metadata" as JSON is 1,'):
        do_import_file(project=bare, path=path)
    assert not Trajectory.objects.exists()


def test_nan_in_a_kept_field_is_refused(bare, tmp_path):
    path = tmp_path / "nan.json"
    path.write_text(json.dumps(_native(metadata={"score": float("nan")})))
    with pytest.raises(ImportFailure, match=r'field "metadata" holds a number JSON cannot store'):
        do_import_file(project=bare, path=path)
    path.write_text(json.dumps(_native(metadata={"n": 1})).replace('"n": 1', '"n": 1e999'))
    with pytest.raises(ImportFailure, match="NaN or infinity"):
        do_import_file(project=bare, path=path)
    path.write_text(json.dumps(_native(metadata={"n": 1})).replace('"n": 1', '"n": ' + "9" * 5000))
    with pytest.raises(ImportFailure, match=r"^nan.json line 1: invalid JSON \(a number: Exceeds"):
        do_import_file(project=bare, path=path)
    assert not Trajectory.objects.exists()


def test_file_and_line_limits(bare, tmp_path, settings):
    settings.STUDIO_IMPORT_MAX_FILE_BYTES = 1 * MB
    settings.STUDIO_IMPORT_MAX_LINE_BYTES = 1 * MB
    path = tmp_path / "huge.json"
    path.write_text(json.dumps(_native()) + " " * MB)
    with pytest.raises(LimitExceeded) as err:
        do_import_file(project=bare, path=path)
    assert str(err.value) == (
        f"huge.json: the file is {path.stat().st_size:,} bytes, more than 1,048,576 bytes "
        "(limit STUDIO_IMPORT_MAX_FILE_MB=1)"
    )
    path.write_text(json.dumps(_native()) + " " * 2 * MB)
    with pytest.raises(LimitExceeded, match=r"^huge.json: the file is 2.0 MB, more than 1.0 MB"):
        do_import_file(project=bare, path=path)
    settings.STUDIO_IMPORT_MAX_FILE_BYTES = 8 * MB
    rows = (FIXTURES / "awb_mixed.jsonl").read_text().splitlines()
    long_row = json.loads(rows[0])
    long_row["system_str"] = "z" * MB
    for at in (0, 2):  # the first line (read for detection) and a later one
        lines = list(rows)
        lines.insert(at, json.dumps(long_row))
        path = tmp_path / "long.jsonl"
        path.write_text("\n".join(lines) + "\n")
        with pytest.raises(LimitExceeded) as err:
            do_import_file(project=bare, path=path)
        assert str(err.value) == (
            f"long.jsonl line {at + 1}: longer than 1.0 MB (limit STUDIO_IMPORT_MAX_LINE_MB=1)"
        )
    # one JSON document on one long line is a document, not a line: the file limit bounds it
    path = tmp_path / "one-line.json"
    path.write_text(json.dumps(_native(metadata={"notes": "n" * (MB // 2)})))
    settings.STUDIO_IMPORT_MAX_LINE_BYTES = MB // 4
    assert do_import_file(project=bare, path=path).trajectories_created == 1


# ---- a forced format that does not match ---------------------------------------------------


@pytest.mark.parametrize("fmt", [module.NAME for module in IMPORTERS])
def test_a_forced_format_that_does_not_match_is_an_error(bare, tmp_path, fmt):
    path = tmp_path / "hello.json"
    path.write_text('{"hello": "world"}')
    with pytest.raises(ImportFailure) as err:
        do_import_file(project=bare, path=path, fmt=fmt)
    message = str(err.value)
    assert message.startswith("hello.json") and fmt in message
    assert not Trajectory.objects.exists()


def test_forced_swe_agent_on_another_file_says_what_is_missing(bare, tmp_path):
    path = tmp_path / "hello.json"
    path.write_text('{"hello": "world"}')
    with pytest.raises(ImportFailure) as err:
        do_import_file(project=bare, path=path, fmt="swe-agent")
    assert str(err.value) == (
        'hello.json: has neither a "trajectory" nor a "history" list: no steps to read '
        "(read as swe-agent, the format chosen)"
    )
    # other formats' real files, forced to a format they are not
    wrong = [
        ("mcp/tau-bench/gpt-4o-airline.json", "swe-agent", 'record 0: has neither a "trajectory"'),
        ("swe/mini-swe-agent/github_issue.traj.json", "openai-chat", 'no assistant "tool_calls"'),
        ("web/webvoyager/taskBBC_News--9__interact_messages.json", "openhands", "not an OpenHands"),
    ]
    for rel, fmt, expected in wrong:
        with pytest.raises(ImportFailure) as err:
            do_import_file(project=bare, path=SHARED / rel, fmt=fmt)
        assert expected in str(err.value) and f"(read as {fmt}, the format chosen)" in str(
            err.value
        )
    for fmt in ("openhands", "webvoyager", "mini-swe-agent"):
        path.write_text("[]")
        with pytest.raises(ImportFailure, match=r"^hello.json: (is an empty list|holds no chat)"):
            do_import_file(project=bare, path=path, fmt=fmt)
    assert not Trajectory.objects.exists()


# ---- the command and an upload -------------------------------------------------------------


def test_command_prints_one_line_and_exits_non_zero(transactional_db, tmp_path):
    from tests.support.worker import test_database_url

    path = tmp_path / "deep.json"
    path.write_text("[" * DEEP + "]" * DEEP)
    env = {**os.environ, "DATABASE_URL": test_database_url(), "DEBUG": "1"}
    done = subprocess.run(
        [sys.executable, "manage.py", "import_trajectories", str(path), "--project", "Deep"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr.splitlines() == [
        "CommandError: deep.json line 1: JSON nested deeper than 128 levels at column 129 "
        "(limit STUDIO_IMPORT_MAX_DEPTH=128)"
    ]
    assert not Project.objects.filter(name="Deep").exists()


@pytest.mark.django_db(transaction=True)
@pytest.mark.worker
def test_failed_upload_names_the_place_and_the_limit(researcher_client, project, default_worker):
    from tests.support.imports import HX, upload
    from tests.support.jobs import wait_job

    content = json.dumps(_native(metadata=_nested(900))).encode()
    upload(researcher_client, project, content, name="nested.json")
    job = wait_job(ImportJob.objects.get())
    assert job.status == JobStatus.FAILED
    assert job.error.startswith("nested.json line 1: JSON nested deeper than 128 levels at column")
    assert job.error.endswith(
        "(limit STUDIO_IMPORT_MAX_DEPTH=128) (nothing from this file was imported)"
    )
    assert not Trajectory.objects.exists()
    polled = researcher_client.get(reverse("import_job", kwargs={"job_id": job.pk}), **HX)
    html = polled.content.decode()
    assert "nested.json line 1: JSON nested deeper than 128 levels" in html
    assert "STUDIO_IMPORT_MAX_DEPTH=128" in html and "RecursionError" not in html


@pytest.mark.django_db(transaction=True)
@pytest.mark.browser
@pytest.mark.worker
def test_failed_upload_in_the_browser_shows_the_place(
    page, login, live_server, project, tmp_path, default_worker
):
    path = tmp_path / "nested.json"
    path.write_text("[" * DEEP + "]" * DEEP)
    login(page, "researcher")
    page.goto(f"{live_server.url}/projects/{project.pk}/import/")
    page.set_input_files("input[name=file]", str(path))
    page.click("#import-form button[type=submit]")
    shown = " ".join(page.wait_for_selector(".import-error", timeout=90_000).inner_text().split())
    assert (
        "nested.json line 1: JSON nested deeper than 128 levels at column 129 "
        "(limit STUDIO_IMPORT_MAX_DEPTH=128) (nothing from this file was imported)"
    ) in shown
    assert not Trajectory.objects.exists()


def test_kept_field_check_measures_any_depth_without_recursion():
    from studio.importers.limits import Limits, kept_field_problem

    limits = Limits(max_depth=128)
    assert kept_field_problem(_nested(128), limits) is None
    assert kept_field_problem(_nested(DEEP), limits) == (
        "is nested deeper than 128 levels (limit STUDIO_IMPORT_MAX_DEPTH=128)"
    )
    assert kept_field_problem({"big": "b" * (MB + MB // 10)}, Limits(max_field_bytes=MB)) == (
        "as JSON is 1.1 MB, more than 1.0 MB (limit STUDIO_IMPORT_MAX_FIELD_MB=1)"
    )
