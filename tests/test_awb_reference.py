"""Compatibility with the reference AgentWorldBench pipeline (QwenLM/Qwen-AgentWorld
eval/eval.py), both ways, on fixtures written for this project: the judge answers the reference
parser takes, prediction files that carry only `gen`, files judged by the reference, failed
generations, and the reference's sampling and message rules."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from inference.judge import NO_OUTPUT, JudgementError, parse_judgement, prediction_of
from inference.prompts import reference_messages
from tests.support.fake_openai import fake_openai_server
from tests.support.jobs import judge_command

DIMS = ("format", "factuality", "consistency", "realism", "quality")
FOUR = {"format": 4, "factuality": 3, "consistency": 5, "realism": 4, "quality": 4}
FENCED = "```json\n{body}\n```"


def reference_answer(body: str, *, open_tag="<final_evaluation>", close_tag="</final_evaluation>"):
    return f"The listing matches, one count is off.\n{open_tag}\n{body}\n{close_tag}"


NESTED = json.dumps({"scores": FOUR, "strengths": ["same JSON shape"], "weaknesses": ["count"]})


@pytest.mark.parametrize(
    ("answer", "scores"),
    [
        # the reference's own shape: scores nested, strengths and weaknesses beside them
        (reference_answer(FENCED.format(body=NESTED)), FOUR),
        # a flat object
        (reference_answer(FENCED.format(body=json.dumps(FOUR))), FOUR),
        # the closing tag never came (the answer ran out of tokens after the fence)
        (reference_answer(FENCED.format(body=NESTED), close_tag=""), FOUR),
        # no tag at all, only the fenced object; or not even a fence
        (FENCED.format(body=NESTED), FOUR),
        (f"My scores: {NESTED} (that is all)", FOUR),
        # tags and keys in another case
        (
            reference_answer(
                FENCED.format(body=json.dumps({"Scores": {k.title(): v for k, v in FOUR.items()}})),
                open_tag="<FINAL_EVALUATION>",
                close_tag="</Final_Evaluation>",
            ),
            FOUR,
        ),
        # near-JSON: single quotes, a bare key, a trailing comma
        (
            reference_answer(
                "{'format': 4, factuality: 3, 'consistency': 5, 'realism': 4, 'quality': 4,}"
            ),
            FOUR,
        ),
        # cut off mid-object
        (
            reference_answer('{"scores": ' + json.dumps(FOUR) + ', "strengths": ["a', close_tag=""),
            FOUR,
        ),
        # "4/5"-style values are read by their numerator, as the reference reads them: "6/10"
        # is 6, clamped to 5 (not rescaled to 3); a float is rounded (3.5 to 4, 2.5 to 2:
        # Python's round, as the reference's)
        (
            reference_answer(
                json.dumps(
                    {
                        "scores": {
                            "format": "4/5",
                            "factuality": "6/10",
                            "consistency": "5",
                            "realism": 4.0,
                            "quality": 3.5,
                        }
                    }
                )  # fmt: skip
            ),
            {"format": 4, "factuality": 5, "consistency": 5, "realism": 4, "quality": 4},
        ),
        (
            reference_answer(
                json.dumps(
                    {"scores": dict(zip(DIMS, ["8/10", "3/10", 2.5, " 2 ", "1/5"], strict=True))}
                )
            ),
            dict(zip(DIMS, [5, 3, 2, 2, 1], strict=True)),
        ),
        # out of range: clamped to 1-5
        (
            reference_answer(json.dumps({"scores": dict(zip(DIMS, [7, 9, 2, 5, 1], strict=True))})),
            dict(zip(DIMS, [5, 5, 2, 5, 1], strict=True)),
        ),
    ],
)
def test_the_judge_parser_takes_what_the_reference_parser_takes(answer, scores):
    judgement = parse_judgement(answer)
    assert judgement.scores == scores and judgement.missing == []
    assert judgement.total == sum(scores.values()) / 5


def test_strengths_and_weaknesses_are_kept_and_the_last_block_wins():
    draft = reference_answer(FENCED.format(body=json.dumps(dict.fromkeys(DIMS, 1))))
    judgement = parse_judgement(draft + "\nOn reflection:\n" + reference_answer(NESTED))
    assert judgement.scores == FOUR
    assert (judgement.strengths, judgement.weaknesses) == (["same JSON shape"], ["count"])
    # a flat object (which the reference refuses) is taken only whole
    with pytest.raises(JudgementError, match="missing dimensions in the JSON object: 'realism'"):
        parse_judgement(reference_answer(json.dumps({k: 3 for k in DIMS if k != "realism"})))


def test_a_partial_answer_is_scored_on_the_dimensions_present_as_the_reference_does():
    """The reference takes a "scores" object that lacks dimensions (or holds values it cannot
    read, or 0): the row counts, its total is the mean of the dimensions present, and the
    others are written 0, which no figure counts."""
    from inference.judge import judged_row
    from inference.scoring import score_rows

    partial = {"format": 4, "factuality": 2, "consistency": 3}
    answer = reference_answer(FENCED.format(body=json.dumps({"scores": partial})))
    judgement = parse_judgement(answer)
    assert judgement.scores == partial and judgement.missing == ["realism", "quality"]
    assert judgement.total == 3.0
    unreadable = {**FOUR, "realism": 0, "quality": "excellent"}
    judgement = parse_judgement(reference_answer(json.dumps({"scores": unreadable})))
    assert judgement.missing == ["realism", "quality"] and judgement.total == 4.0
    # nothing scored at all: the judgement fails (and is asked again)
    with pytest.raises(JudgementError, match='missing dimensions under "scores"'):
        parse_judgement(reference_answer(json.dumps({"scores": {"format": "n/a"}})))

    row = bench_row("t-1", "<predicted_observation>hi</predicted_observation>")
    partly = judged_row(row, parse_judgement(answer), "hi", answer, 1)
    assert (partly["realism"], partly["quality"], partly["total_score"]) == (0, 0, 3.0)
    assert partly["failed"] == 0.0 and partly["scores"] == partial
    whole = judged_row(row, parse_judgement(reference_answer(NESTED)), "hi", "", 1)
    result = score_rows([partly, whole])
    terminal = result["domains"]["terminal"]
    assert (terminal["n"], terminal["failed"]) == (2, 0)  # the partial row counts
    assert terminal["realism"] == 75.0  # only the whole row's 4: the partial one's 0 is out
    assert terminal["format"] == 75.0  # (4 + 4) / 2
    assert terminal["total"] == round(((3.0 + 4.0) / 2 - 1) / 4 * 100, 2)


@pytest.mark.parametrize(
    ("gen", "expected"),
    [
        ("<think>ls</think><predicted_observation>a.txt</predicted_observation>", "a.txt"),
        ("<THINK>ls</THINK><Predicted_Observation>a.txt</PREDICTED_OBSERVATION>", "a.txt"),
        ("<think>outer <think>inner</think> still</think><predicted_observation>x", "x"),
        ("<think>only thinking, never answered</think>", NO_OUTPUT),
        ("<think>cut off mid-thought", NO_OUTPUT),
        ("   ", NO_OUTPUT),
        ("", None),  # the generation failed: nothing to judge
    ],
)
def test_a_gen_only_row_is_parsed_as_the_reference_parses_it(gen, expected):
    assert prediction_of({"gen": gen}) == expected


def bench_row(row_id: str, gen: str, **extra) -> dict:
    return {
        "task": "awb/terminal", "id": row_id, "turn_idx": 2, "total_turns": 2,
        "system_str": "You simulate a shell.",
        "prompt": ["### Turn 1\n\n**Action:**\nls", "### Turn 2\n\n**Action:**\ncat a.txt"],
        "response": ["**Environment Observation:**\na.txt", "**Environment Observation:**\nhi"],
        "gen": gen, **extra,
    }  # fmt: skip


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_a_reference_prediction_file_is_judged_and_written_with_the_reference_fields(tmp_path):
    predictions = write_jsonl(
        tmp_path / "predictions.jsonl",
        [
            bench_row("t-1", "<think>cat prints it</think><predicted_observation>hi"),
            bench_row("t-2", "<think>I am not sure what cat does</think>"),
            bench_row("t-3", ""),  # a failed generation, kept as the reference's infer keeps it
        ],
    )
    out = tmp_path / "judged.jsonl"
    with fake_openai_server(lambda body, i: reference_answer(FENCED.format(body=NESTED))) as srv:
        _, stderr = judge_command(predictions, out, srv.base_url, "judge")
        sent = [body["messages"][1]["content"] for body in srv.requests]
        bodies = list(srv.requests)
    assert len(sent) == 2  # the failed generation is not sent to the judge
    predicted = sorted(
        text.rsplit("## Predicted observation (world model)\n", 1)[1] for text in sent
    )
    assert predicted == sorted(["hi", NO_OUTPUT])
    # the whole history goes to the judge, and the reference's sampling
    history = "### Turn 1\n\n**Action:**\nls\n\n**Environment Observation:**\na.txt"
    assert all(history in text for text in sent)
    assert all((b["temperature"], b["max_tokens"]) == (0.6, 32768) for b in bodies)
    rows = {r["id"]: r for r in read_jsonl(out)}
    judged = rows["t-1"]
    assert {d: judged[d] for d in DIMS} == FOUR and judged["total_score"] == 4.0
    assert (judged["failed"], judged["strengths"], judged["weaknesses"]) == (
        0.0, ["same JSON shape"], ["count"],
    )  # fmt: skip
    assert judged["extracted_output"] == "hi" and judged["judge_raw_output"].startswith("The")
    assert rows["t-2"]["extracted_output"] == NO_OUTPUT and rows["t-2"]["failed"] == 0.0
    failed = rows["t-3"]
    assert (failed["failed"], failed["total_score"], failed["error_message"]) == (
        1.0, 0, "No model generation",
    )  # fmt: skip
    assert "1 row(s) marked failed" in stderr

    # every row failed: the command says so and exits non-zero
    empty = write_jsonl(tmp_path / "empty.jsonl", [bench_row("e-1", ""), bench_row("e-2", "")])
    with fake_openai_server() as srv:
        with pytest.raises(CommandError, match="every one of the 2 row\\(s\\) failed"):
            call_command(
                "agentworldbench", "judge", "--predictions", str(empty),
                "--out", str(tmp_path / "empty-judged.jsonl"), "--base-url", srv.base_url,
                "--model", "judge", stdout=StringIO(), stderr=StringIO(), verbosity=0,
            )  # fmt: skip
        assert srv.requests == []


def reference_judged(task: str, row_id: str, scores: list[int] | None, total=None) -> dict:
    """A row as the reference's judge writes it (flat dimensions, total_score, failed)."""
    row = {"task": task, "id": row_id, "turn_idx": 1, "gen": "x"}
    if scores is None:
        return {**row, "total_score": 0, "failed": 1.0, "error_message": "Judge scoring failed"}
    return {
        **row, **dict(zip(DIMS, scores, strict=True)),
        "total_score": sum(scores) / 5 if total is None else total, "failed": 0.0,
        "strengths": [], "weaknesses": [], "extracted_output": "x",
    }  # fmt: skip


def test_a_file_judged_by_the_reference_scores_with_the_reference_figures(tmp_path):
    judged = write_jsonl(
        tmp_path / "judged.jsonl",
        [
            reference_judged("awb/mcp", "m-1", [5, 5, 5, 5, 5]),
            reference_judged("awb/mcp", "m-2", [3, 0, 3, 3, 3], total=3.0),  # 0: an invalid value
            reference_judged("awb/mcp", "m-3", None),  # failed: left out of everything
            reference_judged("awb/search", "s-1", [2, 2, 2, 2, 2]),
        ],
    )
    out = StringIO()
    call_command("agentworldbench", "score", "--predictions", str(judged), "--json", stdout=out)
    result = json.loads(out.getvalue())
    # what the reference's `score` prints: (mean - 1) / 4 * 100 over the valid rows, a value
    # of 0 left out of its dimension, the overall pooled over every valid total
    mcp = result["domains"]["mcp"]
    assert (mcp["n"], mcp["failed"]) == (2, 1)
    assert (mcp["format"], mcp["factuality"], mcp["total"]) == (75.0, 100.0, 75.0)
    assert result["domains"]["search"]["total"] == 25.0
    assert result["overall"]["total"] == round(((5 + 3 + 2) / 3 - 1) / 4 * 100, 2) == 58.33
    assert (result["samples"], result["invalid"]) == (4, 1)
    table = StringIO()
    call_command("agentworldbench", "score", "--predictions", str(judged), stdout=table)
    assert "Total samples: 4, Valid: 3, Failed: 1" in table.getvalue()


def test_failed_generations_are_kept_and_the_thinking_apart(tmp_path):
    from tests.test_inference_openai import ReasoningServer

    data = write_jsonl(tmp_path / "terminal_test.jsonl", [{**bench_row("t-1", ""), "gen": None}])
    out = tmp_path / "pred.jsonl"
    with ReasoningServer() as srv:
        call_command(
            "agentworldbench", "infer", "--data", str(data), "--out", str(out),
            "--base-url", srv.base_url, "--model", "m", stdout=StringIO(), verbosity=0,
        )  # fmt: skip
    (row,) = read_jsonl(out)
    # the answer alone is `gen`, as the reference writes it; the thinking is kept beside it
    assert row["gen"] == "<predicted_observation>hello</predicted_observation>"
    assert row["reasoning_content"] == "".join(ReasoningServer.THINKING)
    assert row["predicted_observation"] == "hello"


def test_no_system_message_for_an_empty_system_str():
    row = bench_row("t-1", "")
    assert reference_messages(row)[0]["role"] == "system"
    messages = reference_messages({**row, "system_str": ""})
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]


def test_run_does_the_three_stages_and_resumes(tmp_path):
    """`agentworldbench run`: infer, judge and score in one command, files named as the
    reference's; a second run sends nothing and prints the same table."""
    from tests.support.jobs import AWB_DIR

    def both(body, index):
        if body["messages"][0]["content"].startswith("You grade a world model"):
            return reference_answer(FENCED.format(body=NESTED))  # the judge
        return "<think>easy</think><predicted_observation>ok</predicted_observation>"

    out_dir = tmp_path / "results"
    with fake_openai_server(both) as srv:

        def run() -> str:
            stdout = StringIO()
            call_command(
                "agentworldbench", "run", "--data", str(AWB_DIR), "--out-dir", str(out_dir),
                "--base-url", srv.base_url, "--model", "world", "--judge-base-url",
                srv.base_url, "--judge-model", "judge", "--concurrency", "2",
                stdout=stdout, stderr=StringIO(), verbosity=0,
            )  # fmt: skip
            return stdout.getvalue()

        first = run()
        asked = len(srv.requests)
        again = run()
        assert len(srv.requests) == asked == 10  # 5 rows: 5 predictions, 5 judgements
    assert "predicted 5 rows" in first and "judged 5 rows" in first
    assert "predicted 0 rows, skipped 5" in again and "judged 0 rows, skipped 5" in again
    table = [line for line in first.splitlines() if line.startswith("overall")]
    assert table and table[0].rstrip().endswith("75.00")  # mean 4 -> (4 - 1) / 4 * 100
    assert "Total samples: 5, Valid: 5, Failed: 0" in first
    assert (out_dir / "predictions.jsonl").exists() and (out_dir / "judged.jsonl").exists()
