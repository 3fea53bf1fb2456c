"""The reference parser's rules, case by case."""

from __future__ import annotations

import pytest

from inference.parsing import NO_TAG, UNCLOSED, WELL_FORMED, parse_prediction

CASES = [
    # (raw output, observation, status, thinking)
    (
        "<think>plan</think><predicted_observation>ok</predicted_observation>",
        "ok",
        WELL_FORMED,
        "plan",
    ),
    (
        "<think>\nlong\nplan\n</think>\n\n<predicted_observation>\n  total 12\n  a.txt\n"
        "</predicted_observation>\n",
        "total 12\n  a.txt",
        WELL_FORMED,
        "long\nplan",
    ),
    # no tag: the whole cleaned text
    ("  just text  ", "just text", NO_TAG, ""),
    ("<think>x</think>  answer without tags ", "answer without tags", NO_TAG, "x"),
    # unclosed block: to the end
    ("<predicted_observation> partial output", "partial output", UNCLOSED, ""),
    # the LAST block wins
    (
        "<predicted_observation>first</predicted_observation> then "
        "<predicted_observation>second</predicted_observation>",
        "second",
        WELL_FORMED,
        "",
    ),
    # last block unclosed even though an earlier one is closed
    (
        "<predicted_observation>first</predicted_observation><predicted_observation>tail",
        "tail",
        UNCLOSED,
        "",
    ),
    # orphan </think> drops everything before it (thinking started in the prompt)
    (
        "reasoning <predicted_observation>draft</predicted_observation> more</think>"
        "<predicted_observation>final</predicted_observation>",
        "final",
        WELL_FORMED,
        "reasoning <predicted_observation>draft</predicted_observation> more",
    ),
    # two orphan closes: everything before the last one goes
    ("a</think>b</think> c", "c", NO_TAG, "a</think>b"),
    # orphan <think> drops up to the next <predicted_observation>
    (
        "intro <think>never closed <predicted_observation>obs</predicted_observation>",
        "obs",
        WELL_FORMED,
        "never closed",
    ),
    # orphan <think> with no tag after it: dropped to the end
    ("answer <think>cut off here", "answer", NO_TAG, "cut off here"),
    # a complete block inside is removed before the orphan rules
    (
        "<think>a</think>x<think>b</think><predicted_observation>y</predicted_observation>",
        "y",
        WELL_FORMED,
        "a\n\nb",
    ),
    # tags inside the thinking do not count
    (
        "<think><predicted_observation>fake</predicted_observation></think>real",
        "real",
        NO_TAG,
        "<predicted_observation>fake</predicted_observation>",
    ),
    # an empty block is still well formed
    ("<predicted_observation></predicted_observation>", "", WELL_FORMED, ""),
    # a closing tag without an opening one: no tag, text kept as is
    ("done</predicted_observation>", "done</predicted_observation>", NO_TAG, ""),
    # HTML / JSON inside are kept verbatim
    (
        '<predicted_observation>\n<div class="a">&amp;</div>\n{"k": [1, 2]}\n'
        "</predicted_observation>",
        '<div class="a">&amp;</div>\n{"k": [1, 2]}',
        WELL_FORMED,
        "",
    ),
    ("", "", NO_TAG, ""),
    # orphan <think> followed by an unclosed block
    ("<think>plan <predicted_observation>out", "out", UNCLOSED, "plan"),
]


@pytest.mark.parametrize("raw, observation, status, thinking", CASES)
def test_reference_parser_cases(raw, observation, status, thinking):
    parsed = parse_prediction(raw)
    assert parsed.observation == observation
    assert parsed.status == status
    assert parsed.thinking == thinking
    assert parsed.raw == raw


def test_statuses_equal_the_studio_parse_status_values():
    from studio.models.trajectories import ParseStatus

    assert {WELL_FORMED, NO_TAG, UNCLOSED} <= {c.value for c in ParseStatus}


def test_none_is_rejected_with_a_clear_error():
    with pytest.raises(TypeError, match="got None"):
        parse_prediction(None)  # type: ignore[arg-type]
