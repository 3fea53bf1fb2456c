"""`agentworldbench infer | judge | score` against a real OpenAI-compatible HTTP server on
127.0.0.1, on this project's own sample rows (tests/fixtures/awb)."""

from __future__ import annotations

import json
import shutil
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from inference.judge import JudgementError, parse_judgement
from inference.prompts import reference_messages
from tests.support.fake_openai import fake_openai_server
from tests.support.jobs import AWB_DIR, judge_command, read_awb_rows

ROWS = read_awb_rows("terminal_test.jsonl") + read_awb_rows("mcp_test.jsonl")

# raw model output per (id, turn_idx) and what the reference parser makes of it
ODD_OUTPUTS = {
    ("term-0007", 1): (
        "<think>ls of a log dir</think>\n<predicted_observation>\ntotal 8\n</predicted_observation>",
        "total 8",
    ),
    ("term-0007", 2): (
        "<think>grep -c counts</think><predicted_observation>\n29",
        "29",
    ),  # unclosed
    ("term-0007", 3): ("[warn] nothing odd\n", "[warn] nothing odd"),  # no tag at all
    ("mcp-0042", 1): (
        "draft <predicted_observation>{}</predicted_observation> rethinking</think>"
        '<predicted_observation>{"sailings": []}</predicted_observation>',
        '{"sailings": []}',
    ),  # an orphan </think> drops everything before it
    ("mcp-0042", 2): (
        "<think>unfinished reasoning <predicted_observation>A</predicted_observation>"
        "<predicted_observation>B</predicted_observation>",
        "B",
    ),  # an orphan <think> drops up to the next block; the LAST block wins
}


def key_of_messages(messages):
    return json.dumps(messages, sort_keys=True)


EXPECTED = {key_of_messages(reference_messages(r)): (r["id"], r["turn_idx"]) for r in ROWS}


def world_responder(body, index):
    return ODD_OUTPUTS[EXPECTED[key_of_messages(body["messages"])]][0]


def infer(out: Path, base_url: str, *extra: str, data: Path = AWB_DIR) -> str:
    stdout = StringIO()
    call_command(
        "agentworldbench", "infer", "--data", str(data), "--out", str(out),
        "--backend", "openai", "--base-url", base_url, "--model", "awm-test",
        "--max-tokens", "512", *extra, stdout=stdout, verbosity=0,
    )  # fmt: skip
    return stdout.getvalue()


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_infer_sends_reference_messages_and_parses_like_the_reference(tmp_path):
    out = tmp_path / "pred.jsonl"
    with fake_openai_server(world_responder, delay_s=0.3) as srv:
        summary = infer(out, srv.base_url, "--concurrency", "3", "--temperature", "0.2")
        assert "predicted 5 rows, skipped 0" in summary
        # exactly the reference messages, one request per row, nothing else
        assert sorted(key_of_messages(b["messages"]) for b in srv.requests) == sorted(EXPECTED)
        assert all(b["model"] == "awm-test" and b["max_tokens"] == 512 for b in srv.requests)
        assert all(b["temperature"] == 0.2 for b in srv.requests)
        assert 2 <= srv.max_in_flight <= 3  # concurrent, within the limit
        rows = read_jsonl(out)
        assert len(rows) == 5
        by_key = {(r["id"], r["turn_idx"]): r for r in rows}
        for row in ROWS:
            written = by_key[(row["id"], row["turn_idx"])]
            raw, parsed = ODD_OUTPUTS[(row["id"], row["turn_idx"])]
            assert {k: written[k] for k in row} == row  # the input row, unchanged
            assert written["gen"] == raw
            assert written["predicted_observation"] == parsed
        assert by_key[("term-0007", 2)]["parse_status"] == "unclosed"
        assert by_key[("term-0007", 3)]["parse_status"] == "no_tag"

        # resumable: a second run sends nothing; a lost row is redone alone
        srv.requests.clear()
        assert "predicted 0 rows, skipped 5" in infer(out, srv.base_url)
        assert srv.requests == []
        lines = out.read_text().splitlines(keepends=True)
        out.write_text("".join(lines[:3]) + lines[3][:40])  # a run killed mid-write
        assert "predicted 2 rows, skipped 3" in infer(out, srv.base_url)
        assert len(srv.requests) == 2
        assert sorted((r["id"], r["turn_idx"]) for r in read_jsonl(out)) == sorted(ODD_OUTPUTS)


def test_infer_failures_and_bad_data(tmp_path):
    bad = tmp_path / "data"
    bad.mkdir()
    shutil.copy(AWB_DIR / "mcp_test.jsonl", bad / "mcp_test.jsonl")
    broken = json.loads((AWB_DIR / "terminal_test.jsonl").read_text().splitlines()[1])
    del broken["system_str"]
    with open(bad / "terminal_test.jsonl", "w") as fh:
        fh.write((AWB_DIR / "terminal_test.jsonl").read_text().splitlines()[0] + "\n")
        fh.write(json.dumps(broken) + "\n")
    with pytest.raises(CommandError, match=r"terminal_test.jsonl:2: field 'system_str' is missing"):
        infer(tmp_path / "x.jsonl", "http://127.0.0.1:9/v1", data=bad)
    with pytest.raises(CommandError, match="no \\*_test.jsonl files"):
        infer(tmp_path / "x.jsonl", "http://127.0.0.1:9/v1", data=tmp_path)
    assert not (tmp_path / "x.jsonl").exists()

    # a server that rejects one row: every row is written, that one as a failed generation
    # (kept, as the reference keeps it), and the command exits non-zero
    rejected = {"on": True}

    def picky(body, index):
        if EXPECTED[key_of_messages(body["messages"])] == ("mcp-0042", 2) and rejected["on"]:
            return (400, "context length exceeded")
        return world_responder(body, index)

    out = tmp_path / "pred.jsonl"
    with fake_openai_server(picky) as srv:
        with pytest.raises(CommandError, match="1 row\\(s\\) failed"):
            infer(out, srv.base_url)
        rows = {(r["id"], r["turn_idx"]): r for r in read_jsonl(out)}
        assert len(rows) == 5
        failed = rows[("mcp-0042", 2)]
        assert failed["gen"] == "" and failed["failed"] == 1.0
        assert "context length exceeded" in failed["error_message"]
        # a rerun tries the failed one again, and only it; the file keeps one line per row
        rejected["on"] = False
        srv.requests.clear()
        assert "predicted 1 rows, skipped 4" in infer(out, srv.base_url)
        assert len(srv.requests) == 1
    rows = {(r["id"], r["turn_idx"]): r for r in read_jsonl(out)}
    assert len(rows) == len(read_jsonl(out)) == 5
    assert rows[("mcp-0042", 2)]["gen"] and "failed" not in rows[("mcp-0042", 2)]


def test_infer_samples_as_the_reference_by_default(tmp_path):
    out = tmp_path / "pred.jsonl"
    with fake_openai_server() as srv:
        call_command(
            "agentworldbench", "infer", "--data", str(AWB_DIR / "mcp_test.jsonl"),
            "--out", str(out), "--base-url", srv.base_url, "--model", "m", verbosity=0,
            stdout=StringIO(),
        )  # fmt: skip
        body = srv.requests[0]
    assert (body["temperature"], body["max_tokens"]) == (0.6, 32768)
    assert "top_p" not in body and "seed" not in body


def test_infer_with_the_retrieval_baseline_offline(tmp_path):
    out = tmp_path / "pred.jsonl"
    stdout = StringIO()
    call_command(
        "agentworldbench", "infer", "--data", str(AWB_DIR), "--out", str(out),
        "--backend", "retrieval", stdout=stdout, verbosity=0,
    )  # fmt: skip
    rows = read_jsonl(out)
    assert len(rows) == 5
    for row in rows:
        truth = row["response"][row["turn_idx"] - 1].split("**Environment Observation:**\n", 1)[1]
        assert row["predicted_observation"]
        # answered from OTHER trajectories: a turn's own answer is never looked up
        assert row["predicted_observation"] != truth
        own = {r.split("\n", 1)[1] for r in row["response"]}
        assert row["predicted_observation"] not in own
        assert "retrieval baseline (non-neural)" in row["gen"]


JUDGE_SCORES = {
    ("term-0007", 1): [5, 5, 5, 5, 5],
    ("term-0007", 2): [4, 3, 4, 5, 4],
    ("term-0007", 3): [3, 3, 3, 3, 3],  # answers garbage once, then this
    ("mcp-0042", 1): [2, 2, 2, 2, 2],
    ("mcp-0042", 2): None,  # never parseable: marked failed
}
DIMS = ("format", "factuality", "consistency", "realism", "quality")


def judge_answer(scores) -> str:
    block = json.dumps(dict(zip(DIMS, scores, strict=True)))
    return (
        f"The prediction matches.\n<final_evaluation>\n```json\n{block}\n```\n</final_evaluation>"
    )


def test_judge_and_score_give_the_normalised_figures(tmp_path, monkeypatch):
    import inference.judge as judge_module

    original = judge_module.Judge.__init__

    def fast_init(self, **kwargs):  # retry backoff without the wait
        original(self, **kwargs)
        self.backoff_s = 0.0

    monkeypatch.setattr(judge_module.Judge, "__init__", fast_init)
    predictions = tmp_path / "pred.jsonl"
    with fake_openai_server(world_responder) as srv:
        infer(predictions, srv.base_url)
    by_reference = {r["response"][r["turn_idx"] - 1]: (r["id"], r["turn_idx"]) for r in ROWS}
    seen: dict = {}

    def judge_responder(body, index):
        user = body["messages"][1]["content"]
        reference = user.split("## Reference observation (real environment)\n", 1)[1]
        reference = reference.split("\n\n## Predicted observation", 1)[0]
        key = by_reference[reference]
        seen[key] = seen.get(key, 0) + 1
        assert body["messages"][0]["content"].startswith("You grade a world model")
        parsed = ODD_OUTPUTS[key][1]
        assert user.endswith(f"## Predicted observation (world model)\n{parsed}")
        scores = JUDGE_SCORES[key]
        if scores is None:
            return "I think it is fine. Score: 5"
        if key == ("term-0007", 3) and seen[key] == 1:
            return '<final_evaluation>```json\n{"format": 9}\n```</final_evaluation>'
        return judge_answer(scores)

    judged = tmp_path / "judged.jsonl"
    with fake_openai_server(judge_responder) as srv:
        stdout, stderr = judge_command(predictions, judged, srv.base_url, "judge-model")
    assert "judged 4 rows, skipped 0 already done, 1 failed (of 5)" in stdout
    assert "1 row(s) marked failed" in stderr
    assert seen[("term-0007", 3)] == 2 and seen[("mcp-0042", 2)] == 3
    rows = {(r["id"], r["turn_idx"]): r for r in read_jsonl(judged)}
    assert rows[("term-0007", 2)]["total_score"] == 4.0
    assert rows[("term-0007", 2)]["scores"] == dict(zip(DIMS, [4, 3, 4, 5, 4], strict=True))
    assert rows[("mcp-0042", 2)]["judge"]["status"] == "failed"
    assert (rows[("mcp-0042", 2)]["total_score"], rows[("mcp-0042", 2)]["failed"]) == (0, 1.0)
    assert rows[("mcp-0042", 2)]["error_message"] == "Judge scoring failed"

    stdout = StringIO()
    call_command("agentworldbench", "score", "--predictions", str(judged), "--json", stdout=stdout)
    result = json.loads(stdout.getvalue())
    assert result["domains"]["terminal"] == {
        "n": 3, "failed": 0, "format": 75.0, "factuality": 66.67, "consistency": 75.0,
        "realism": 83.33, "quality": 75.0, "total": 75.0,
    }  # fmt: skip
    assert result["domains"]["mcp"] == {
        "n": 1, "failed": 1, **dict.fromkeys([*DIMS, "total"], 25.0),
    }  # fmt: skip
    # pooled over the 4 valid samples, not the mean of the domain figures (50.0)
    assert result["overall"] == {
        "n": 4, "failed": 1, "format": 62.5, "factuality": 56.25, "consistency": 62.5,
        "realism": 68.75, "quality": 62.5, "total": 62.5,
    }  # fmt: skip
    assert (result["invalid"], result["samples"]) == (1, 5)
    table = StringIO()
    call_command("agentworldbench", "score", "--predictions", str(judged), stdout=table)
    lines = table.getvalue().splitlines()
    assert any(line.startswith("terminal") and "83.33" in line for line in lines)
    assert any(line.startswith("overall") and line.rstrip().endswith("62.50") for line in lines)


def test_parse_judgement_rules():
    good = judge_answer([1, 2, 3, 4, 5])
    assert parse_judgement("draft ```json {}``` " + good).scores == dict(
        zip(DIMS, [1, 2, 3, 4, 5], strict=True)
    )
    for text, message in [
        ("no block", "no JSON object"),
        ("<final_evaluation>nothing here</final_evaluation>", "no JSON object"),
        ('<final_evaluation>```json\n["format", 3]\n```</final_evaluation>', "no JSON object"),
        ('<final_evaluation>```json\n{"format": 3}\n```</final_evaluation>', "'factuality'"),
        (judge_answer([1, 2, 3, 4, "great"]), "'quality' is not a number"),
    ]:
        with pytest.raises(JudgementError, match=message):
            parse_judgement(text)


def test_score_needs_judged_rows(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps(ROWS[0]) + "\n")
    with pytest.raises(CommandError, match="no row has valid judge scores"):
        call_command("agentworldbench", "score", "--predictions", str(path))


@pytest.mark.torch
def test_infer_with_the_tiny_model_in_process(tmp_path):
    from tests.support.tiny_model import tiny_model_dir

    out = tmp_path / "pred.jsonl"
    stdout = StringIO()
    call_command(
        "agentworldbench", "infer", "--data", str(AWB_DIR / "mcp_test.jsonl"), "--out", str(out),
        "--backend", "hf", "--model", tiny_model_dir(), "--max-tokens", "6", stdout=stdout,
        verbosity=0,
    )  # fmt: skip
    assert "predicted 2 rows" in stdout.getvalue()
    rows = read_jsonl(out)
    assert len(rows) == 2 and all(r["gen"] and "predicted_observation" in r for r in rows)


def awb_row(task: str, row_id: str, turn_idx: int = 1) -> dict:
    prompts = [f"### Turn {i}\n\n**Action:**\n{task} action {i}" for i in range(1, 3)]
    responses = [f"**Environment Observation:**\n{task} observation {i}" for i in range(1, 3)]
    return {
        "task": task, "id": row_id, "prompt": prompts, "response": responses,
        "system_str": f"world model of {task}", "turn_idx": turn_idx, "total_turns": 2,
    }  # fmt: skip


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_resume_does_not_skip_rows_of_another_domain_with_the_same_id(tmp_path):
    # ids are per domain file: mcp row "7" and terminal row "7" are different rows
    data = tmp_path / "data"
    data.mkdir()
    mcp = write_jsonl(data / "mcp_test.jsonl", [awb_row("mcp", "7")])
    write_jsonl(data / "terminal_test.jsonl", [awb_row("terminal", "7")])
    out = tmp_path / "pred.jsonl"
    with fake_openai_server() as srv:
        infer(out, srv.base_url, data=mcp)  # a first run over one file...
        assert "predicted 1 rows, skipped 1" in infer(out, srv.base_url, data=data)  # resumed
    assert sorted(r["task"] for r in read_jsonl(out)) == ["mcp", "terminal"]


def test_leave_one_out_retrieval_keeps_same_id_trajectories_of_other_domains(tmp_path):
    from inference.awb_runner import LeaveOneOutRetrieval, run_infer

    rows = [awb_row("mcp", "7"), awb_row("terminal", "7")]
    out = tmp_path / "pred.jsonl"
    stats = run_infer(rows, LeaveOneOutRetrieval(rows), out, show_progress=False)
    assert (stats.written, stats.failed) == (2, 0), stats.errors
    by_task = {r["task"]: r["predicted_observation"] for r in read_jsonl(out)}
    # each domain has one trajectory: it borrows from the other domain, never from itself
    assert by_task["mcp"].startswith("terminal observation")
    assert by_task["terminal"].startswith("mcp observation")


def test_interrupted_run_does_not_compute_the_remaining_rows(tmp_path):
    from inference.awb_runner import run_concurrently

    calls = []

    def work(row):
        calls.append(row["id"])
        if len(calls) == 1:
            raise KeyboardInterrupt  # Ctrl-C while the first row runs
        return row

    rows = [awb_row("mcp", str(i)) for i in range(8)]
    out = tmp_path / "out.jsonl"
    with pytest.raises(KeyboardInterrupt):
        run_concurrently(rows, work, out, concurrency=1, desc="t", show_progress=False)
    assert len(calls) <= 2  # the rows not started are dropped, not run and thrown away
    assert not out.read_text()


@pytest.mark.django_db
def test_infer_and_judge_take_a_projects_endpoint_by_name(tmp_path, project):
    from studio.services.endpoints import EndpointData, save_endpoint

    out = tmp_path / "pred.jsonl"
    with fake_openai_server(world_responder) as srv:
        save_endpoint(
            project,
            EndpointData(
                name="bench world", role="world", kind="openai", base_url=srv.base_url,
                model="awm-endpoint", api_key="bench-key",
            ),
        )  # fmt: skip
        call_command(
            "agentworldbench", "infer", "--data", str(AWB_DIR), "--out", str(out),
            "--endpoint", "bench world", "--project", project.name, verbosity=0,
            stdout=StringIO(),
        )  # fmt: skip
        assert {b["model"] for b in srv.requests} == {"awm-endpoint"}
        assert set(srv.authorizations) == {"Bearer bench-key"}
    assert len(read_jsonl(out)) == len(ROWS)
    with pytest.raises(CommandError, match="is a world model, not a judge model"):
        call_command(
            "agentworldbench", "judge", "--predictions", str(out), "--out",
            str(tmp_path / "j.jsonl"), "--endpoint", "bench world", "--project", project.name,
        )  # fmt: skip
    with pytest.raises(CommandError, match="needs --project"):
        call_command(
            "agentworldbench", "infer", "--data", str(AWB_DIR), "--out", str(out),
            "--endpoint", "bench world",
        )  # fmt: skip
