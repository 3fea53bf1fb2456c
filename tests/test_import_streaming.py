"""Imports stream: trajectories are written in bounded batches while the file is still being
read, a bad record anywhere leaves nothing written, non-finite numbers and over-long titles
are refused with a message naming file, record and field (never stored or cut).

Memory and time are measured by scripts/bench_import_memory.py, not here."""

from __future__ import annotations

import hashlib
import json

import pytest
from django.db import connection

from studio.importers.base import ImportFailure, ParsedStep, ParsedTrajectory
from studio.models import Project, Step, Tag, Trajectory
from studio.services import imports
from studio.services.imports import do_import_file, source_key


@pytest.fixture
def bare(db):
    return Project.objects.create(name="Streaming")


@pytest.fixture
def small_batches(monkeypatch):
    # batches of 10 steps, so a small file is written in many
    monkeypatch.setattr(imports, "STEP_BATCH", 10)


def chat_record(n: int, steps: int = 3, **extra) -> dict:
    messages: list[dict] = [{"role": "user", "content": f"Task {n}: cancel order {n}"}]
    for s in range(steps):
        call = {"id": f"c{s}", "type": "function"}
        call["function"] = {"name": "lookup", "arguments": json.dumps({"order": n, "s": s})}
        messages.append({"role": "assistant", "content": "", "tool_calls": [call]})
        messages.append({"role": "tool", "tool_call_id": f"c{s}", "content": f"order {n}.{s}"})
    return {"messages": messages, **extra}


def awb_row(n: int, turns: int = 4, task: str = "terminal", **extra) -> dict:
    prompts = [
        f"### Turn {t + 1}\n\n**Task Instruction:** Fix host {n}.\n\n**Action:**\nls /srv/{n}/{t}"
        for t in range(turns)
    ]
    responses = [f"**Environment Observation:**\nfile-{n}-{t}" for t in range(turns)]
    row = {
        "task": task,
        "id": f"s{n}",
        "prompt": prompts,
        "response": responses,
        "system_str": f"You simulate host {n}.",
        "turn_idx": turns,
        "total_turns": turns,
    }
    return {**row, **extra}


def write_jsonl(path, records) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


class Watch:
    """A progress callback that also counts the steps written so far (the import's own
    connection, inside its transaction), at every report."""

    def __init__(self):
        self.seen: list[tuple[float, int]] = []

    def __call__(self, fraction: float) -> None:
        self.seen.append((fraction, Step.objects.count()))

    def first_write(self) -> float:
        return next(fraction for fraction, steps in self.seen if steps > 0)


def test_jsonl_is_written_in_batches_while_it_is_read(bare, tmp_path, small_batches):
    path = tmp_path / "chats.jsonl"
    write_jsonl(path, [chat_record(n) for n in range(1000)])  # 200 lines a progress report
    watch = Watch()
    result = do_import_file(project=bare, path=path, progress=watch)
    assert (result.trajectories_created, result.steps_created) == (1000, 3000)
    # the first steps went in when a fifth of the file was read, not after all of it
    assert watch.first_write() <= 0.2
    counts = [steps for _fraction, steps in watch.seen]
    assert counts == sorted(counts) and counts[-1] == 3000
    # each batch written reports: never more than a batch (and a trajectory) between two
    assert max(b - a for a, b in zip(counts, counts[1:], strict=False)) <= 10 + 3


@pytest.mark.parametrize("kind", ["jsonl", "json"])
def test_one_long_trajectory_moves_the_progress_as_its_steps_are_written(
    bare, tmp_path, small_batches, kind
):
    # One record holds the whole file: it is read (and the reading reported) only after it is
    # handed over, so the progress moves with its steps written, batch by batch, never back.
    path = tmp_path / f"long.{kind}"
    record = chat_record(0, steps=95)
    path.write_text(json.dumps(record) + "\n" if kind == "jsonl" else json.dumps([record]))
    watch = Watch()
    result = do_import_file(project=bare, path=path, progress=watch)
    assert result.steps_created == 95
    fractions = [fraction for fraction, _steps in watch.seen]
    assert fractions == sorted(fractions) and fractions[-1] == 1.0
    during = [(f, steps) for f, steps in watch.seen if 0 < steps < 95]
    assert len(during) == 9  # a report for each batch of 10 steps before the last
    for fraction, steps in during:
        assert fraction == pytest.approx(steps / 95)


@pytest.mark.parametrize("order", [(0, 1, 0), (0, 0), (0, 1, 1, 1)])
def test_a_file_ending_with_a_repeated_trajectory_writes_all_the_others(
    bare, tmp_path, small_batches, order
):
    path = tmp_path / "repeats.jsonl"
    write_jsonl(path, [chat_record(n) for n in order])
    result = do_import_file(project=bare, path=path)
    distinct = len(set(order))
    assert (result.trajectories_created, result.trajectories_skipped) == (
        distinct,
        len(order) - distinct,
    )
    assert Trajectory.objects.filter(project=bare).count() == distinct
    assert Step.objects.filter(branch__trajectory__project=bare).count() == 3 * distinct


def test_agentworldbench_writes_each_trajectory_on_its_second_pass(bare, tmp_path, small_batches):
    rows = [awb_row(n) for n in range(60)]
    # shorter rows of sample 0 late in the file still join it (grouping reads all rows first)
    rows += [awb_row(0, turns=2, id="s0-t2"), awb_row(0, turns=1, id="s0-t1")]
    path = tmp_path / "terminal_test.jsonl"
    write_jsonl(path, rows)
    watch = Watch()
    result = do_import_file(project=bare, path=path, progress=watch)
    assert (result.trajectories_created, result.steps_created) == (60, 240)
    # grouping is the first half; the trajectories are written as the second pass reads them
    assert 0.5 <= watch.first_write() < 0.9
    first = Trajectory.objects.get(system_prompt="You simulate host 0.")
    assert first.title == "s0-t1: Fix host 0."  # named after its first turn's row
    assert first.metadata["agentworldbench"]["ids"] == ["s0-t1", "s0-t2", "s0"]
    assert first.system_prompt == "You simulate host 0."
    steps = list(first.root_branch.all_steps())
    assert [s.meta.get("row_id") for s in steps] == ["s0-t1", "s0-t2", None, "s0"]
    assert steps[3].raw_prompt == rows[0]["prompt"][3]


def test_a_bad_record_late_in_the_file_leaves_nothing_written(bare, tmp_path, small_batches):
    path = tmp_path / "chats.jsonl"
    bad = chat_record(999)
    del bad["messages"][1]["tool_calls"][0]["function"]["name"]
    write_jsonl(path, [*(chat_record(n) for n in range(400)), bad])
    watch = Watch()
    with pytest.raises(ImportFailure) as err:
        do_import_file(project=bare, path=path, progress=watch)
    assert str(err.value) == (
        'chats.jsonl line 401 at messages[1].tool_calls[0].function: field "name" is missing'
    )
    assert max(steps for _f, steps in watch.seen) >= 1000  # batches had gone in
    assert not Trajectory.objects.exists() and not Step.objects.exists()


def test_a_refused_trajectory_in_the_second_pass_rolls_back_the_batches(
    bare, tmp_path, small_batches
):
    path = tmp_path / "mixed_test.jsonl"
    write_jsonl(path, [*(awb_row(n) for n in range(50)), awb_row(50, task="bench/chess")])
    watch = Watch()
    with pytest.raises(ImportFailure, match=r'^mixed_test.jsonl line 51: field "task" names no'):
        do_import_file(project=bare, path=path, progress=watch)
    assert max(steps for _f, steps in watch.seen) >= 190  # all but the last batch had gone in
    assert not Trajectory.objects.exists() and not Step.objects.exists()


@pytest.mark.parametrize("word", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_non_finite_numbers_are_refused_naming_file_line_and_field(bare, tmp_path, word):
    path = tmp_path / "runs.jsonl"
    lines = [json.dumps(awb_row(n)) for n in range(3)]
    lines[2] = lines[2].replace('"total_turns": 4', f'"total_turns": {word}')
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ImportFailure) as err:
        do_import_file(project=bare, path=path)
    assert str(err.value) == (
        f'runs.jsonl line 3: field "total_turns" holds a number JSON cannot store (NaN or '
        f"infinity): {word}"
    )
    assert not Trajectory.objects.exists()


def test_non_finite_numbers_deep_in_a_document_name_record_and_path(bare, tmp_path):
    records = [chat_record(0), chat_record(1)]
    records[1]["messages"][2]["scores"] = {"f1": 0.5, "em": "NaN-as-text-is-fine"}
    path = tmp_path / "runs.json"
    text = json.dumps(records, indent=1)
    path.write_text(text)
    assert do_import_file(project=bare, path=path).trajectories_created == 2
    path.write_text(text.replace('"f1": 0.5', '"f1": NaN'))
    Trajectory.objects.all().delete()
    with pytest.raises(ImportFailure) as err:
        do_import_file(project=bare, path=path)
    assert str(err.value) == (
        'runs.json record 1 at messages[2]: field "scores" holds a number JSON cannot store '
        "(NaN or infinity): NaN at f1"
    )
    assert not Trajectory.objects.exists()


def test_nan_in_a_tool_calls_arguments_string_is_kept_as_text(bare, tmp_path):
    record = chat_record(0, steps=1)
    record["messages"][1]["tool_calls"][0]["function"]["arguments"] = '{"x": NaN}'
    path = tmp_path / "chat.jsonl"
    write_jsonl(path, [record, chat_record(1)])
    do_import_file(project=bare, path=path)
    step = Step.objects.get(branch__trajectory__title__contains="Task 0")
    # not JSON, so not decoded: the action holds the arguments as the file wrote them
    assert json.loads(step.action) == {"name": "lookup", "arguments": '{"x": NaN}'}


def native(*trajectories: dict) -> str:
    return json.dumps({"format": "agentworld-studio/v1", "trajectories": list(trajectories)})


def native_trajectory(title: str, **extra) -> dict:
    steps = [{"action": f"a{i}", "observation": f"o{i}"} for i in range(12)]
    return {"title": title, "domain": "web", "steps": steps, **extra}


def test_a_million_character_title_is_refused_not_cut(bare, tmp_path, small_batches):
    path = tmp_path / "big.json"
    path.write_text(native(native_trajectory("fine"), native_trajectory("x" * 1_000_000)))
    with pytest.raises(ImportFailure) as err:
        do_import_file(project=bare, path=path)
    assert str(err.value) == (
        'big.json at trajectories[1]: field "title" is 1,000,000 characters, more than '
        "the 500 a trajectory's title may hold (\"" + "x" * 39 + '…"; refused, not cut)'
    )
    assert not Trajectory.objects.exists() and not Step.objects.exists()
    path.write_text(native(native_trajectory("y" * 500)))  # at the limit: kept whole
    do_import_file(project=bare, path=path)
    assert Trajectory.objects.get().title == "y" * 500


def test_an_over_long_tag_is_refused(bare, tmp_path):
    path = tmp_path / "tags.json"
    path.write_text(native(native_trajectory("t", tags=["ok", "z" * 101])))
    with pytest.raises(ImportFailure, match=r'field "tags" is 101 characters, more than the 100'):
        do_import_file(project=bare, path=path)
    assert not Trajectory.objects.exists() and not Tag.objects.exists()


def test_an_over_long_title_from_an_agentworldbench_id_is_refused(bare, tmp_path):
    path = tmp_path / "web_test.jsonl"
    write_jsonl(path, [awb_row(0), awb_row(1, id="i" * 600)])
    with pytest.raises(ImportFailure, match=r'^web_test.jsonl line 2: field "title" is 6'):
        do_import_file(project=bare, path=path)
    assert not Trajectory.objects.exists()


def test_source_key_is_the_hash_of_the_canonical_json(bare):
    # computed in parts now; it must stay the key of files imported before
    item = ParsedTrajectory(
        title="t ü",
        task_instruction="do",
        system_prompt="sys",
        tools=[{"name": "f", "b": 1, "a": [1.5, None]}],
        metadata={"z": 1, "a": {"y": "é", "b": True}},
        tags=["b", "a"],
        steps=[ParsedStep("a", "o", meta={"k": "v"}), ParsedStep("b", "p", "s", "t", "r")],
    )
    canonical = {
        "title": item.title,
        "task_instruction": item.task_instruction,
        "system_prompt": item.system_prompt,
        "tools": item.tools,
        "metadata": item.metadata,
        "tags": sorted(item.tags),
        "steps": [
            [s.action, s.observation, s.state, s.thinking, s.raw_prompt, s.meta] for s in item.steps
        ],
    }
    text = json.dumps(canonical, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    assert source_key(item) == hashlib.sha256(text.encode()).hexdigest()
    assert (
        source_key(ParsedTrajectory(title=""))
        == hashlib.sha256(
            b'{"metadata":{},"steps":[],"system_prompt":"","tags":[],"task_instruction":"",'
            b'"title":"","tools":[]}'
        ).hexdigest()
    )


def test_debug_query_log_does_not_keep_the_batches(bare, tmp_path, settings, small_batches):
    settings.DEBUG = True  # as the dev worker runs: Django logs every query's SQL
    path = tmp_path / "chats.jsonl"
    write_jsonl(path, [chat_record(n) for n in range(100)])
    connection.queries_log.clear()
    do_import_file(project=bare, path=path)
    assert Step.objects.count() == 300
    logged = [q["sql"] for q in connection.queries_log]
    assert len(logged) < 10, logged  # cleared after each batch: only the last batch's are left
