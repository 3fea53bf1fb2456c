"""AgentWorldBench grouping, bad input, re-import, forced format/domain and the command."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from studio.models import Branch, Project, Step, Tag, Trajectory
from studio.services import imports
from studio.services.imports import ImportFailure, do_import_file, list_formats

FIXTURES = Path(__file__).parent / "fixtures" / "importers"
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def project(db):
    return Project.objects.create(name="Imports")


def rows_of(name: str) -> list[dict]:
    return [json.loads(line) for line in (FIXTURES / name).read_text().splitlines() if line]


def steps_of(trajectory: Trajectory) -> list[Step]:
    return list(trajectory.root_branch.all_steps())


def test_agentworldbench_rows_become_one_trajectory_each(project):
    result = do_import_file(project=project, path=FIXTURES / "awb_mixed.jsonl")
    assert result == imports.ImportResult(3, 6, 0, "agentworldbench")
    by_domain = {t.domain: t for t in Trajectory.objects.filter(project=project)}
    assert set(by_domain) == {"terminal", "mcp", "search"}

    term = by_domain["terminal"]
    # three rows in shuffled order with unrelated ids: one trajectory, turns in order
    assert term.metadata["agentworldbench"] == {
        "ids": ["term-7f3a-t1", "q-118", "term-7f3a-t3"],
        "task": "agentworld/terminal",
    }
    steps = steps_of(term)
    assert [s.index for s in steps] == [0, 1, 2]
    assert steps[0].action == "```bash\nss -ltnp | grep ':8080'\n```"
    assert steps[2].action == "```bash\nkill 48211 && sleep 1 && ss -ltnp | grep -c ':8080'\n```"
    assert steps[0].observation.startswith("LISTEN 0      2048         0.0.0.0:8080")
    assert steps[2].observation == "0"
    assert steps[1].observation.startswith("    PID USER     CMD\n  48211 deploy")
    for s in steps:
        assert "### Turn" not in s.action and "**Action:**" not in s.action
        assert "**Environment Observation:**" not in s.observation
        assert s.state == "host=build-02 cwd=/srv/app user=deploy"
    assert "historical_context" not in steps[0].meta
    assert steps[1].meta["historical_context"].startswith("`ss` showed python3 (pid 48211)")
    assert term.task_instruction.startswith("Find which process listens on port 8080")
    assert term.system_prompt.startswith("You are a Linux terminal world model.")
    assert term.step_count == 3

    # rows holding growing prefixes of the lists join too
    mcp = by_domain["mcp"]
    assert mcp.metadata["agentworldbench"]["ids"] == ["mcp-0042-a", "mcp-0042-b"]
    assert [json.loads(s.action)["name"] for s in steps_of(mcp)] == [
        "search_flights",
        "book_flight",
    ]
    assert json.loads(steps_of(mcp)[1].observation)["booking_ref"] == "QX7L2M"
    assert by_domain["search"].step_count == 1


def test_agentworldbench_raw_prompts_rebuild_byte_identical(project):
    do_import_file(project=project, path=FIXTURES / "awb_mixed.jsonl")
    by_id = {
        row_id: t
        for t in Trajectory.objects.filter(project=project)
        for row_id in t.metadata["agentworldbench"]["ids"]
    }
    for row in rows_of("awb_mixed.jsonl"):
        t = by_id[row["id"]]
        steps = steps_of(t)
        k = row["turn_idx"]
        # the reference request: system, then earlier turns, then the current prompt
        expected = [{"role": "system", "content": row["system_str"]}]
        for i in range(k - 1):
            expected += [
                {"role": "user", "content": row["prompt"][i]},
                {"role": "assistant", "content": row["response"][i]},
            ]
        expected.append({"role": "user", "content": row["prompt"][k - 1]})
        rebuilt = [{"role": "system", "content": t.system_prompt}]
        for s in steps[: k - 1]:
            rebuilt += [
                {"role": "user", "content": s.raw_prompt},
                {"role": "assistant", "content": s.meta["raw_response"]},
            ]
        rebuilt.append({"role": "user", "content": steps[k - 1].raw_prompt})
        assert json.dumps(rebuilt) == json.dumps(expected)
        assert steps[k - 1].meta["raw_response"] == row["response"][k - 1]


def test_malformed_line_names_line_and_field_and_writes_nothing(project):
    with pytest.raises(ImportFailure) as err:
        do_import_file(project=project, path=FIXTURES / "awb_bad_prompt.jsonl")
    assert str(err.value) == (
        'awb_bad_prompt.jsonl line 3: field "prompt" must be a list of strings'
    )
    with pytest.raises(ImportFailure, match=r"^awb_bad_json.jsonl line 2: invalid JSON"):
        do_import_file(project=project, path=FIXTURES / "awb_bad_json.jsonl")
    with pytest.raises(
        ImportFailure,
        match=r"^native_missing_observation.json at trajectories\[1\].steps\[0\]: "
        r'field "observation" is missing$',
    ):
        do_import_file(project=project, path=FIXTURES / "native_missing_observation.json")
    assert not Trajectory.objects.exists() and not Step.objects.exists()


def test_failure_while_writing_rolls_back_the_whole_file(project, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(imports, "_write_tags", broken)  # fails after trajectories are created
    with pytest.raises(RuntimeError):
        do_import_file(project=project, path=FIXTURES / "native_sample.json")
    assert not Trajectory.objects.exists()
    assert not Branch.objects.exists() and not Step.objects.exists()


def test_reimport_adds_nothing(project):
    first = do_import_file(project=project, path=FIXTURES / "awb_mixed.jsonl")
    again = do_import_file(project=project, path=FIXTURES / "awb_mixed.jsonl")
    assert (first.trajectories_created, again.trajectories_created) == (3, 0)
    assert (again.steps_created, again.trajectories_skipped) == (0, 3)
    do_import_file(project=project, path=FIXTURES / "native_sample.json")
    do_import_file(project=project, path=FIXTURES / "native_sample.json")
    assert Trajectory.objects.count() == 5
    assert Step.objects.count() == 6 + 3
    assert Tag.objects.filter(project=project).count() == 2
    # another project gets its own copy
    other = Project.objects.create(name="Elsewhere")
    assert (
        do_import_file(project=other, path=FIXTURES / "awb_mixed.jsonl").trajectories_created == 3
    )


def test_native_format_with_tags_state_and_thinking(project):
    result = do_import_file(project=project, path=FIXTURES / "native_sample.json")
    assert result == imports.ImportResult(2, 3, 0, "agentworld-studio/v1")
    t = Trajectory.objects.get(project=project, title="Rename the staging bucket")
    assert t.domain == "os" and t.metadata == {"author": "importer tests"}
    assert sorted(t.tags.values_list("name", flat=True)) == ["demo", "filesystem"]
    step = steps_of(t)[1]
    assert (step.action, step.observation) == ("ls -d ~/staging*", "/home/ana/staging-old")
    assert (step.state, step.thinking, step.meta) == (
        "cwd=/home/ana",
        "Check the rename happened.",
        {"exit_code": 0},
    )
    weather = Trajectory.objects.get(project=project, title="Weather lookup")
    assert weather.tools[0]["name"] == "get_weather"
    assert list(weather.tags.values_list("name", flat=True)) == ["demo"]


def test_openai_chat_jsonl_with_tool_schemas(project):
    result = do_import_file(project=project, path=FIXTURES / "chat_tools.jsonl")
    assert result == imports.ImportResult(2, 3, 0, "openai-chat")
    t = Trajectory.objects.get(project=project, task_instruction__startswith="Move my 3pm")
    assert [tool["function"]["name"] for tool in t.tools] == ["find_events", "update_event"]
    first, second = steps_of(t)
    assert json.loads(first.action) == {
        "name": "find_events",
        "arguments": {"day": "2025-05-09", "query": "dentist"},
    }
    assert first.thinking == "Let me find the appointment first."
    assert first.meta == {"tool_name": "find_events", "call_id": "c1"}
    assert json.loads(second.observation) == {"ok": True, "start": "16:00"}
    assert t.metadata["agent_system_prompt"] == "You help people manage their calendar."
    assert t.domain == "mcp"


def test_forced_format_and_domain(project):
    result = do_import_file(
        project=project, path=FIXTURES / "chat_tools.jsonl", fmt="openai-chat", domain="os"
    )
    assert result.detected_format == "openai-chat"
    assert set(Trajectory.objects.values_list("domain", flat=True)) == {"os"}
    # forcing the wrong format gives that format's error, naming the line and the format
    with pytest.raises(
        ImportFailure,
        match=r'^awb_mixed.jsonl line 1: field "messages" is missing '
        r"\(read as openai-chat, the format chosen\)$",
    ):
        do_import_file(project=project, path=FIXTURES / "awb_mixed.jsonl", fmt="openai-chat")
    with pytest.raises(ImportFailure, match="unknown format"):
        do_import_file(project=project, path=FIXTURES / "awb_mixed.jsonl", fmt="csv")
    with pytest.raises(ImportFailure, match="unknown domain"):
        do_import_file(project=project, path=FIXTURES / "awb_mixed.jsonl", domain="games")
    with pytest.raises(ImportFailure, match=r"^unknown_format.json: format not recognised"):
        do_import_file(project=project, path=FIXTURES / "unknown_format.json")
    assert Trajectory.objects.count() == 2


def test_detection_goes_by_content_not_name(project, tmp_path):
    disguised = tmp_path / "notes.txt"
    shutil.copy(FIXTURES / "awb_mixed.jsonl", disguised)
    result = do_import_file(project=project, path=disguised, display_name="upload.bin")
    assert result.detected_format == "agentworldbench"
    assert Trajectory.objects.filter(source_file="upload.bin").count() == 3
    assert "agentworld-studio/v1" in list_formats() and "agentworldbench" in list_formats()


def test_progress_is_reported_up_to_one(project):
    seen: list[float] = []
    do_import_file(project=project, path=FIXTURES / "awb_mixed.jsonl", progress=seen.append)
    assert seen == sorted(seen) and seen[-1] == 1.0 and 0.5 in seen


def test_command_imports_files_and_directories(db, tmp_path):
    folder = tmp_path / "batch" / "nested"
    folder.mkdir(parents=True)
    shutil.copy(FIXTURES / "awb_mixed.jsonl", folder / "a.jsonl")
    shutil.copy(FIXTURES / "native_sample.json", tmp_path / "batch" / "b.json")
    (tmp_path / "batch" / "README.md").write_text("not a trajectory")
    out = StringIO()
    call_command("import_trajectories", str(tmp_path / "batch"), project="Fresh", stdout=out)
    assert out.getvalue().strip() == "imported 5 trajectories, 9 steps"
    assert Project.objects.get(name="Fresh").trajectories.count() == 5
    out = StringIO()
    call_command("import_trajectories", str(folder / "a.jsonl"), project="Fresh", stdout=out)
    assert out.getvalue().strip() == "imported 0 trajectories, 0 steps (skipped 3 already present)"
    out = StringIO()
    call_command(
        "import_trajectories",
        str(FIXTURES / "chat_tools.jsonl"),
        project="Fresh",
        format="openai-chat",
        domain="web",
        stdout=out,
    )
    assert out.getvalue().strip() == "imported 2 trajectories, 3 steps"
    assert Trajectory.objects.filter(domain="web").count() == 2


def test_command_reports_bad_file(db, tmp_path):
    with pytest.raises(CommandError, match=r'^awb_bad_prompt.jsonl line 3: field "prompt"'):
        call_command(
            "import_trajectories",
            str(FIXTURES / "awb_bad_prompt.jsonl"),
            project="P",
            stdout=StringIO(),
        )
    assert not Trajectory.objects.exists()
    assert not Project.objects.filter(name="P").exists()  # no empty project left behind
    # in a batch, the good files are imported and each bad one is reported
    shutil.copy(FIXTURES / "awb_bad_json.jsonl", tmp_path / "bad.jsonl")
    shutil.copy(FIXTURES / "native_sample.json", tmp_path / "good.json")
    out, err = StringIO(), StringIO()
    with pytest.raises(CommandError, match=r"^1 of 2 files not imported"):
        call_command("import_trajectories", str(tmp_path), project="P", stdout=out, stderr=err)
    assert err.getvalue().strip() == (
        "error: bad.jsonl line 2: invalid JSON (Expecting property name enclosed in double "
        "quotes, column 61)"
    )
    assert out.getvalue().strip() == "imported 2 trajectories, 3 steps"
    assert Trajectory.objects.count() == 2
    # a project that existed before stays, even when its only file fails
    with pytest.raises(CommandError):
        call_command("import_trajectories", str(tmp_path / "bad.jsonl"), project="P")
    assert Project.objects.get(name="P").trajectories.count() == 2


def test_command_exit_code_in_a_real_process(transactional_db):
    from tests.support.worker import test_database_url

    env = {**os.environ, "DATABASE_URL": test_database_url(), "DEBUG": "1"}
    bad = subprocess.run(
        [
            sys.executable,
            "manage.py",
            "import_trajectories",
            str(FIXTURES / "awb_bad_prompt.jsonl"),
            "--project",
            "Subprocess",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode != 0
    assert 'awb_bad_prompt.jsonl line 3: field "prompt" must be a list of strings' in bad.stderr
    assert not Trajectory.objects.exists()
    good = subprocess.run(
        [
            sys.executable,
            "manage.py",
            "import_trajectories",
            str(FIXTURES / "awb_mixed.jsonl"),
            "--project",
            "Subprocess",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert good.returncode == 0, good.stderr
    assert good.stdout.strip() == "imported 3 trajectories, 6 steps"
    assert Trajectory.objects.filter(project__name="Subprocess").count() == 3


def test_agentworldbench_grouping_in_any_order(project, tmp_path):
    """Short prefix rows before or after the long ones; two trajectories that share their
    first turn but diverge stay apart."""
    base = rows_of("awb_mixed.jsonl")
    term = next(r for r in base if r["id"] == "term-7f3a-t3")
    fork = dict(
        term,
        id="fork-3",
        prompt=term["prompt"][:2] + ["### Turn 3\n\n**Action:**\n```bash\nreboot\n```"],
        response=term["response"][:2] + ["**Environment Observation:**\nConnection closed."],
    )
    prefix1 = dict(
        term, id="p1", prompt=term["prompt"][:1], response=term["response"][:1], turn_idx=1
    )
    prefix2 = dict(
        term, id="p2", prompt=term["prompt"][:2], response=term["response"][:2], turn_idx=2
    )
    path = tmp_path / "order.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in [prefix1, fork, prefix2, term]) + "\n")
    result = do_import_file(project=project, path=path)
    assert (result.trajectories_created, result.steps_created) == (2, 6)
    ids = sorted(sorted(t.metadata["agentworldbench"]["ids"]) for t in Trajectory.objects.all())
    # the prefixes join the first trajectory that holds them (here the fork, read first)
    assert ids == [["fork-3", "p1", "p2"], ["term-7f3a-t3"]]
    fork_t = next(
        t for t in Trajectory.objects.all() if "fork-3" in t.metadata["agentworldbench"]["ids"]
    )
    assert steps_of(fork_t)[2].observation == "Connection closed."


def test_domain_from_folder_only_for_generic_formats(project, tmp_path, shared_data):
    (tmp_path / "web").mkdir()
    shutil.copy(FIXTURES / "chat_tools.jsonl", tmp_path / "web" / "chats.jsonl")
    do_import_file(project=project, path=tmp_path / "web" / "chats.jsonl")
    assert set(Trajectory.objects.values_list("domain", flat=True)) == {"web"}
    toolbench = shared_data / "mcp/toolbench/G1_answer__10_ChatGPT_DFS_woFilter_w2.json"
    shutil.copy(toolbench, tmp_path / "web" / "answer.json")
    do_import_file(project=project, path=tmp_path / "web" / "answer.json")
    assert Trajectory.objects.get(source_format="toolbench").domain == "mcp"


def test_concurrent_import_of_the_same_file_adds_nothing(project, monkeypatch):
    do_import_file(project=project, path=FIXTURES / "awb_mixed.jsonl")
    real = imports._existing_keys
    calls = []

    def raced(project, keys):
        # the first look finds nothing, as if another import committed right after it
        calls.append(len(keys))
        return set() if len(calls) == 1 else real(project, keys)

    monkeypatch.setattr(imports, "_existing_keys", raced)
    result = do_import_file(project=project, path=FIXTURES / "awb_mixed.jsonl")
    assert (result.trajectories_created, result.trajectories_skipped) == (0, 3)
    assert len(calls) == 2 and Trajectory.objects.count() == 3 and Step.objects.count() == 6


def test_bad_record_in_json_names_record_path_and_field(project, tmp_path):
    record = {
        "task_id": 7,
        "traj": [
            {"role": "user", "content": "Cancel order 42"},
            {"role": "assistant", "tool_calls": [{"id": "a", "function": {"name": "cancel"}}]},
            {"role": "tool", "tool_call_id": "a", "content": "ok"},
        ],
    }
    broken = json.loads(json.dumps(record))
    del broken["traj"][1]["tool_calls"][0]["function"]["name"]
    path = tmp_path / "runs.json"
    path.write_text(json.dumps([record, broken], indent=1))
    with pytest.raises(ImportFailure) as err:
        do_import_file(project=project, path=path)
    assert str(err.value) == (
        'runs.json record 1 at traj[1].tool_calls[0].function: field "name" is missing'
    )
    assert not Trajectory.objects.exists()
    path.write_text("[1, 2")
    with pytest.raises(ImportFailure, match=r"^runs.json line 1: invalid JSON"):
        do_import_file(project=project, path=path)


def test_jsonl_with_one_message_per_line_is_one_conversation(project, tmp_path):
    messages = json.loads((FIXTURES / "chat_tools.jsonl").read_text().splitlines()[0])["messages"]
    path = tmp_path / "conversation.jsonl"
    path.write_text("\n".join(json.dumps(m) for m in messages) + "\n")
    result = do_import_file(project=project, path=path)
    assert (result.detected_format, result.trajectories_created, result.steps_created) == (
        "openai-chat",
        1,
        2,
    )
    assert json.loads(steps_of(Trajectory.objects.get())[1].action)["name"] == "update_event"


def awb_row(row_id, response: str, task: str = "terminal") -> dict:
    return {
        "task": task,
        "id": row_id,
        "prompt": ["### Turn 1\n\n**Action:**\n```bash\nhead -c 8 /bin/true\n```"],
        "response": [response],
        "system_str": "sys",
        "turn_idx": 1,
        "total_turns": 1,
    }


def test_nul_and_lone_surrogates_are_stored_not_crashed_on(project, tmp_path):
    """Terminal output of a binary file holds NUL characters, and a JSON escape can leave half
    a surrogate pair: PostgreSQL text/jsonb and UTF-8 refuse both, so they are replaced."""
    path = tmp_path / "binary.jsonl"
    nul = awb_row("nul", "**Environment Observation:**\n\x7fELF\x02\x01\x01\x00\x00 end")
    half = json.dumps(awb_row("half", "**Environment Observation:**\nbad XX half"))
    path.write_text(json.dumps(nul) + "\n" + half.replace("XX", "\\ud800") + "\n")
    result = do_import_file(project=project, path=path)
    assert (result.trajectories_created, result.steps_created) == (2, 2)
    by_id = {t.metadata["agentworldbench"]["ids"][0]: t for t in Trajectory.objects.all()}
    step = steps_of(by_id["nul"])[0]
    assert step.observation == "\x7fELF\x02\x01\x01\u2400\u2400 end"
    assert step.meta["raw_response"].endswith("\u2400\u2400 end")
    assert steps_of(by_id["half"])[0].observation == "bad \ufffd half"
    again = do_import_file(project=project, path=path)
    assert (again.trajectories_created, again.trajectories_skipped) == (0, 2)


def test_forced_domain_wins_over_an_unknown_agentworldbench_task(project, tmp_path):
    path = tmp_path / "desktop.jsonl"
    rows = [awb_row(i, "**Environment Observation:**\nok", task="bench/desktop") for i in (1, 2)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(ImportFailure) as err:
        do_import_file(project=project, path=path)
    assert str(err.value).startswith(
        'desktop.jsonl line 1: field "task" names no known domain ("desktop")'
    )
    assert not Trajectory.objects.exists()
    result = do_import_file(project=project, path=path, domain="os")
    assert result.trajectories_created == 1
    assert Trajectory.objects.get().domain == "os"


def test_chat_jsonl_is_decoded_once(project, monkeypatch):
    """A JSONL of conversations is read in one pass (plus its first line for detection), not
    held whole in memory and then decoded a second time."""
    from studio.importers.base import Source

    decoded = []
    real_lines = Source.lines

    def counted(self):
        for number, record in real_lines(self):
            decoded.append(number)
            yield number, record

    monkeypatch.setattr(Source, "lines", counted)
    lines = (FIXTURES / "chat_tools.jsonl").read_text().splitlines()
    result = do_import_file(project=project, path=FIXTURES / "chat_tools.jsonl")
    assert result.trajectories_created == len(lines) > 1
    assert len(decoded) <= len(lines) + 1


def test_jsonl_of_messages_names_the_line_of_a_bad_message(project, tmp_path):
    path = tmp_path / "perline.jsonl"
    path.write_text(
        '{"role": "user", "content": "hi"}\n\n'
        '{"role": "assistant", "tool_calls": [{"id": "a", "function": {"arguments": "{}"}}]}\n'
        '{"role": "tool", "tool_call_id": "a", "content": "x"}\n'
    )
    with pytest.raises(ImportFailure) as err:
        do_import_file(project=project, path=path)
    assert str(err.value) == (
        'perline.jsonl line 3 at tool_calls[0].function: field "name" is missing'
    )


def test_agentworldbench_labels_inside_a_code_block_stay_in_the_action(project, tmp_path):
    """A command that writes markdown holds lines like `**Current State:**`: inside the
    fenced block they are the action's text, not a new section of the prompt."""
    action = (
        "```bash\ncat > NOTES.md <<'EOF'\n**Current State:** draft\n**Action:** none yet\nEOF\n```"
    )
    row = awb_row("notes", "**Environment Observation:**\n")
    row["prompt"] = [f"### Turn 1\n\n**Current State:** cwd=/srv\n\n**Action:**\n{action}"]
    path = tmp_path / "notes.jsonl"
    path.write_text(json.dumps(row) + "\n")
    do_import_file(project=project, path=path)
    step = steps_of(Trajectory.objects.get())[0]
    assert (step.state, step.action, step.observation) == ("cwd=/srv", action, "")


def test_root_lineage_is_set_without_a_case_per_branch(project, tmp_path):
    """Many small trajectories (a FireAct or tau-bench dump): the roots' lineage is filled by
    set-based UPDATEs; `bulk_update` wrote one CASE WHEN per branch, which PostgreSQL
    evaluates for every row (20,000 trajectories took over half a minute)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    conversation = json.loads((FIXTURES / "chat_tools.jsonl").read_text().splitlines()[0])
    path = tmp_path / "many.jsonl"
    with path.open("w") as fh:
        for i in range(300):
            conversation["messages"][1]["content"] = f"Request {i}"
            fh.write(json.dumps(conversation) + "\n")
    with CaptureQueriesContext(connection) as queries:
        assert do_import_file(project=project, path=path).trajectories_created == 300
    assert not [q["sql"][:80] for q in queries if "CASE WHEN" in q["sql"]]
    roots = Branch.objects.filter(trajectory__project=project)
    assert roots.count() == 300
    assert all(b.lineage == [[b.pk, 0]] for b in roots)
