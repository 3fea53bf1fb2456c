"""Rewarded tasks, plain Python: the checks of every kind, their weighted composition, the
world file's task/rubric/termination/state parts and their errors, submit detection, the
per-step seeds and the seeded task choice, the step verdict, the judge's score parser and
the state report in the prompt and the parser."""

from __future__ import annotations

import json

import pytest

from inference import rubrics as R
from inference import worlds as W
from inference.parsing import parse_prediction
from studio.services.rewards import plan_of, submitted_answer, verdict_of

SUBMIT = {
    "type": "function",
    "function": {
        "name": "submit_answer",
        "description": "Give the final answer",
        "parameters": {
            "type": "object",
            "properties": {"answer": {"type": "string"}},
            "required": ["answer"],
        },
    },
}
LOOKUP = {
    "type": "function",
    "function": {"name": "get_order", "description": "An order", "parameters": {"type": "object"}},
}
WORLD = {
    "name": "Shop desk",
    "domain": "mcp",
    "description": "An order desk.",
    "tools": [LOOKUP, SUBMIT],
    "state_keys": [{"name": "order_refunded", "description": "true once refunded"}],
    "tasks": [
        {
            "id": "refund-order",
            "instruction": "Refund order 1042",
            "success_criteria": "Order 1042 shows status refunded.",
            "expected": "refunded",
            "max_steps": 5,
        },
        {
            "id": "find-total",
            "instruction": "What is the total of order 7?",
            "success_criteria": "The answer is 12.50.",
            "expected": "12.50",
            "rubric": {
                "step": [],
                "episode": [
                    {"name": "answer", "kind": "exact", "target": "final_answer", "weight": 3},
                    {"name": "looked", "kind": "contains", "pattern": "order 7"},
                ],
            },
        },
    ],
    "rubric": {
        "step": [{"name": "shown", "kind": "regex", "pattern": 'status": ?"refunded'}],
        "episode": [
            {"name": "refunded", "kind": "state", "key": "order_refunded", "weight": 2},
            {"name": "said", "kind": "contains", "target": "final_answer"},
        ],
    },
    "termination": {
        "terminal": [{"name": "closed", "kind": "contains", "pattern": "ACCOUNT CLOSED"}],
        "submit": {"tool": "submit_answer", "argument": "answer"},
    },
}


def world(**changes) -> dict:
    return json.loads(json.dumps({**WORLD, **changes}))


# ---- checks and composition -----------------------------------------------------------------


def check(**fields) -> R.Check:
    return R.read_check({"name": "c", **fields}, "c", state_keys=["done", "count"])


@pytest.mark.parametrize(
    ("fields", "facts", "score"),
    [
        ({"kind": "exact", "pattern": "ok"}, {"observation": "  ok\n"}, 1.0),
        ({"kind": "exact", "pattern": "ok"}, {"observation": "OK"}, 0.0),  # case counts
        ({"kind": "exact"}, {"observation": "refunded", "expected": "refunded"}, 1.0),
        ({"kind": "exact"}, {"observation": "refunded", "expected": ""}, 0.0),  # nothing to match
        ({"kind": "contains", "pattern": "42"}, {"observation": "total 42 EUR"}, 1.0),
        ({"kind": "contains", "pattern": "43"}, {"observation": "total 42 EUR"}, 0.0),
        ({"kind": "regex", "pattern": r"total \d+"}, {"observation": "the total 42"}, 1.0),
        ({"kind": "regex", "pattern": r"^total"}, {"observation": "the total 42"}, 0.0),
        ({"kind": "exact", "target": "final_answer"}, {"final_answer": "7", "expected": "7"}, 1.0),
        ({"kind": "exact", "target": "final_answer", "pattern": "7"}, {"final_answer": None}, 0.0),
        ({"kind": "state", "key": "done"}, {"state": {"done": True}}, 1.0),
        ({"kind": "state", "key": "done"}, {"state": {"done": False}}, 0.0),
        ({"kind": "state", "key": "done"}, {"state": {"done": None}}, 0.0),  # unreported
        ({"kind": "state", "key": "done"}, {"state": None}, 0.0),
        ({"kind": "state", "key": "done", "equals": False}, {"state": {"done": False}}, 1.0),
        ({"kind": "state", "key": "count", "equals": 1}, {"state": {"count": True}}, 0.0),
        ({"kind": "state", "key": "count", "equals": 2}, {"state": {"count": 2.0}}, 1.0),
    ],
)
def test_each_kind_of_check_scores_one_or_zero(fields, facts, score):
    assert R.score_check(check(**fields), **facts) == score


def test_a_judge_check_is_not_scored_without_a_model():
    with pytest.raises(ValueError, match="judge model"):
        R.score_check(check(kind="judge", criteria="x"))


def test_the_rubric_score_is_the_weighted_mean_and_its_breakdown_names_each_check():
    a = R.Check("a", "contains", 3.0, pattern="x")
    b = R.Check("b", "contains", 1.0, pattern="y")
    score, breakdown = R.score_checks([a, b], observation="x alone")
    assert score == pytest.approx(0.75) and breakdown == {"a": 1.0, "b": 0.0}
    # a check that could not be scored (a judge that did not answer) is left out of the mean
    assert R.weighted([(a, None), (b, 1.0)]) == (1.0, {"a": None, "b": 1.0})
    assert R.weighted([]) == (None, {})


def test_a_check_needing_what_the_task_lacks_is_left_out_not_scored_zero():
    blank = R.Check("answer", "exact", 2.0, target="final_answer")
    said = R.Check("said", "contains", 1.0, target="final_answer", pattern="12")
    judge = R.Check("judge", "judge")
    assert not R.applies(blank) and R.applies(blank, expected="12.50")
    assert not R.applies(judge) and R.applies(judge, success_criteria="The answer is 12.50.")
    assert R.applies(R.Check("j", "judge", criteria="Polite.")) and R.applies(said)
    assert R.applies(R.Check("s", "state", key="done"))
    # no invented 0: the blank check is neither in the mean nor in the breakdown
    assert R.score_checks([blank, said], final_answer="12") == (1.0, {"said": 1.0})
    assert R.score_checks([blank], final_answer="12") == (None, {})
    assert R.score_checks([blank, said], final_answer="9", expected="9") == (
        pytest.approx(2 / 3),
        {"answer": 1.0, "said": 0.0},
    )
    kept = R.applicable(R.Rubric((said,), (blank, judge, said)))
    assert kept == R.Rubric((said,), (said,))
    assert not R.applicable(R.Rubric((), (blank, judge)))


# ---- the world file -------------------------------------------------------------------------


def test_a_rewarded_world_file_round_trips_byte_for_byte():
    spec = W.parse_world(world())
    text = W.dumps(spec)
    assert W.dumps(W.parse_world(json.loads(text))) == text
    data = json.loads(text)
    assert [t["id"] for t in data["tasks"]] == ["refund-order", "find-total"]
    assert data["termination"]["submit"] == {"tool": "submit_answer", "argument": "answer"}
    assert data["rubric"]["episode"][0] == {
        "name": "refunded", "kind": "state", "weight": 2.0, "key": "order_refunded",
        "equals": True,
    }  # fmt: skip
    assert spec.task("find-total").rubric.episode[0].weight == 3.0
    assert spec.task("refund-order").rubric is None  # the world's rubric applies


def test_a_world_without_tasks_keeps_its_file():
    plain = {k: v for k, v in WORLD.items() if k not in ("tasks", "rubric", "termination",
                                                         "state_keys")}  # fmt: skip
    data = W.world_to_file(W.parse_world(plain))
    assert not {"tasks", "rubric", "termination", "state_keys"} & set(data)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {
                "tasks": [
                    {
                        **WORLD["tasks"][1],
                        "rubric": {"step": [{"name": "r", "kind": "regex", "pattern": "("}]},
                    }
                ]
            },
            r"tasks\[0\]\.rubric\.step\[0\]\.pattern is not a valid regular expression: ",
        ),
        (
            {"rubric": {"step": [{"name": "r", "kind": "regex", "pattern": "[a-"}]}},
            r"^rubric\.step\[0\]\.pattern is not a valid regular expression",
        ),
        (
            {"rubric": {"step": [{"name": "r", "kind": "regex"}]}},
            r"rubric\.step\[0\]\.pattern is required for a regex check",
        ),
        (
            {"rubric": {"step": [{"name": "j", "kind": "judge", "criteria": "x"}]}},
            r"rubric\.step\[0\] \(j\): a judge check scores the whole episode",
        ),
        (
            {"rubric": {"step": [{"name": "f", "kind": "exact", "target": "final_answer"}]}},
            r"rubric\.step\[0\] \(f\): a step has no final answer",
        ),
        (
            {"rubric": {"episode": [{"name": "x", "kind": "fuzzy"}]}},
            r"rubric\.episode\[0\]\.kind must be one of exact, contains, regex, state, judge",
        ),
        (
            {"rubric": {"episode": [{"name": "x", "kind": "exact", "key": "k"}]}},
            r"rubric\.episode\[0\] has an unknown field 'key'",
        ),
        (
            {"rubric": {"episode": [{"kind": "exact", "pattern": "a"}]}},
            r"rubric\.episode\[0\]\.name is required",
        ),
        (
            {
                "rubric": {
                    "step": [{"name": "x", "kind": "contains", "pattern": "a"}],
                    "episode": [{"name": "x", "kind": "contains", "pattern": "b"}],
                }
            },
            r"rubric\.episode\[0\]: two checks are named 'x'",
        ),
        (
            {
                "rubric": {
                    "episode": [{"name": "x", "kind": "contains", "pattern": "a", "weight": 0}]
                }
            },
            r"rubric\.episode\[0\]\.weight must be a number above 0",
        ),
        (
            {"rubric": {"episode": [{"name": "s", "kind": "state", "key": "paid"}]}},
            r"rubric\.episode\[0\]\.key 'paid' is not one of the world's state_keys "
            r"\(order_refunded\)",
        ),
        (
            {"termination": {"submit": {"tool": "finish", "argument": "a"}}},
            r"termination\.submit\.tool 'finish' is not one of the world's tools "
            r"\(get_order, submit_answer\)",
        ),
        ({"termination": {"submit": {}}}, r'termination\.submit needs a "tool"'),
        (
            {"termination": {"terminal": [{"name": "j", "kind": "judge"}]}},
            r"termination\.terminal\[0\] \(j\): a terminal check reads the observation",
        ),
        (
            {"tasks": [{"id": "Has space", "instruction": "x"}]},
            r"tasks\[0\]\.id must be a slug",
        ),
        (
            {
                "tasks": [
                    {"id": "a", "instruction": "x", "expected": "1"},
                    {"id": "a", "instruction": "y", "expected": "2"},
                ]
            },
            r"tasks\[1\]: two tasks have the id 'a'",
        ),
        ({"tasks": [{"id": "a"}]}, r"tasks\[0\] \(a\)\.instruction is required"),
        (
            {"tasks": [{"id": "a", "instruction": "x", "max_steps": 0}]},
            r"tasks\[0\] \(a\)\.max_steps must be a whole number from 1 to 1000",
        ),
        (
            {"tasks": [{"id": "no-answer", "instruction": "x"}]},
            r"rubric\.episode\[1\] \(said\) has no pattern, so it compares with the task's "
            r"expected answer, and task 'no-answer' \(tasks\[0\]\) has none",
        ),
        (
            {
                "tasks": [
                    {
                        "id": "a",
                        "instruction": "x",
                        "expected": "1",
                        "rubric": {"episode": [{"name": "j", "kind": "judge"}]},
                    }
                ]
            },
            r"tasks\[0\]\.rubric\.episode\[0\] \(j\) has no criteria",
        ),
        ({"state_keys": [{"name": "a"}, {"name": "a"}]}, r"state_keys\[1\]: two state keys"),
        (
            {
                "rubric": {
                    "episode": [
                        {"name": "s", "kind": "state", "key": "order_refunded", "equals": None}
                    ]
                }
            },
            r"rubric\.episode\[0\]\.equals must not be null",
        ),
    ],
)
def test_a_bad_task_rubric_or_termination_is_refused_naming_the_field(changes, message):
    with pytest.raises(W.WorldError, match=message):
        W.parse_world(world(**changes))


# ---- submit ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("action", "answer"),
    [
        ({"name": "submit_answer", "arguments": {"answer": "refunded"}}, "refunded"),
        ({"tool_name": "submit_answer", "arguments": {"answer": "x"}}, "x"),  # openenv-core
        ({"type": "call_tool", "tool_name": "submit_answer", "arguments": {"answer": 7}}, "7"),
        ({"name": "submit_answer", "arguments": '{"answer": "as text"}'}, "as text"),
        ('{"name": "submit_answer", "arguments": {"answer": "recorded"}}', "recorded"),
        ({"function": {"name": "submit_answer", "arguments": '{"answer": "oa"}'}}, "oa"),
        ({"name": "submit_answer", "arguments": {}}, ""),
        ({"name": "get_order", "arguments": {"id": 1}}, None),
        ({"action": "ls"}, None),
        ("FINAL ANSWER: 12.50", None),  # no prefix declared
    ],
)
def test_the_submit_tool_is_recognised_in_every_form_an_action_takes(action, answer):
    plan = plan_of(W.parse_world(world()), {"task_id": "refund-order", "seed": 1})
    assert submitted_answer(plan, action) == answer


def test_a_submit_prefix_takes_the_rest_of_a_text_action():
    submit = R.Submit(prefix="FINAL ANSWER:")
    assert R.submitted(submit, {"action": "  FINAL ANSWER:  12.50 \n"}) == "12.50"
    assert R.submitted(submit, "FINAL ANSWER: yes") == "yes"
    assert R.submitted(submit, {"action": "echo FINAL ANSWER: no"}) is None
    whole = R.Submit(tool="done")  # no argument named: all the arguments, as JSON
    assert R.submitted(whole, {"name": "done", "arguments": {"b": 1, "a": 2}}) == '{"a": 2, "b": 1}'


# ---- seeds ----------------------------------------------------------------------------------


def test_step_seeds_are_derived_from_the_episode_seed_and_stable():
    seeds = [R.step_seed(1234, i) for i in range(50)]
    assert seeds == [R.step_seed(1234, i) for i in range(50)]
    assert len(set(seeds)) == 50 and all(0 <= s < 2**31 for s in seeds)
    assert R.step_seed(1235, 0) != R.step_seed(1234, 0)
    # sha256 of "agentworld-step:1234:0": the same on every machine and Python
    assert R.step_seed(1234, 0) == R.step_seed(1234, 0) == seeds[0]
    assert 0 <= R.draw_seed() < 2**31


def test_the_same_seed_picks_the_same_task_and_seeds_spread_over_tasks():
    tasks = W.parse_world(world()).tasks
    assert {R.choose_task(tasks, 99).id for _ in range(5)} == {R.choose_task(tasks, 99).id}
    assert {R.choose_task(tasks, s).id for s in range(40)} == {"refund-order", "find-total"}


@pytest.mark.parametrize("bad", [True, "7", 1.5, -1, 2**63])
def test_a_seed_must_be_a_whole_number_in_range(bad):
    with pytest.raises(R.RubricError, match="seed must be"):
        R.check_seed(bad)


# ---- the step verdict -----------------------------------------------------------------------


def test_the_verdict_scores_the_step_and_says_when_and_why_the_episode_ends():
    spec = W.parse_world(world())
    plan = plan_of(spec, {"task_id": "refund-order", "seed": 5, "max_steps": 5})
    assert plan.max_steps == 5 and plan.expected == "refunded"
    going = verdict_of(plan, 0, '{"status": "pending"}', {"order_refunded": False})
    assert (going.reward, going.done, going.cause) == (0.0, False, None)
    assert going.breakdown == {"shown": 0.0}
    assert going.step_meta == {"seed": R.step_seed(5, 0), "reward": 0.0, "rubric": {"shown": 0.0},
                               "end_cause": None, "state": {"order_refunded": False}}  # fmt: skip
    assert going.observation_metadata["reward_parts"] == {"step": 0.0}
    shown = verdict_of(plan, 1, '{"status": "refunded"}', None)
    assert shown.reward == 1.0 and not shown.done and "state" not in shown.step_meta
    closed = verdict_of(plan, 2, "ACCOUNT CLOSED", None)
    assert (closed.done, closed.cause) == (True, "terminal")
    last = verdict_of(plan, 4, "nothing", None)
    assert (last.done, last.cause) == (True, "max_steps")
    submit = verdict_of(plan, 3, "", None, final_answer="refunded")
    assert (submit.done, submit.cause, submit.reward) == (True, "submit", None)
    assert submit.step_meta["submit"] is True and submit.step_meta["final_answer"] == "refunded"


def test_a_task_with_its_own_rubric_replaces_the_worlds():
    plan = plan_of(W.parse_world(world()), {"task_id": "find-total", "seed": 1})
    assert [c.name for c in plan.rubric.episode] == ["answer", "looked"]
    assert verdict_of(plan, 0, "anything", None).reward is None  # no step checks
    typed = plan_of(W.parse_world(world()), {"task_id": "", "seed": 1}, instruction="Look.")
    assert typed.task_id == "" and typed.instruction == "Look." and typed.expected == ""


def test_a_typed_task_is_scored_only_by_the_world_checks_that_apply_to_any_task():
    typed = plan_of(W.parse_world(world()), {"task_id": "", "seed": 1}, instruction="Look.")
    # "said" (contains, no pattern) needs the task's expected answer: left out; the step's
    # regex and the state check apply to any task
    assert [c.name for c in typed.rubric.step] == ["shown"]
    assert [c.name for c in typed.rubric.episode] == ["refunded"]
    assert verdict_of(typed, 0, '{"status": "refunded"}', None).breakdown == {"shown": 1.0}
    # a world's task keeps every check of its rubric
    task = plan_of(W.parse_world(world()), {"task_id": "refund-order", "seed": 1})
    assert [c.name for c in task.rubric.episode] == ["refunded", "said"]
    # nothing applies: no rubric, no reward (None, not 0)
    needs_a_task = [
        {"name": "said", "kind": "contains", "target": "final_answer"},
        {"name": "judge", "kind": "judge"},
    ]
    only_task_checks = world(rubric={"step": [], "episode": needs_a_task})
    bare = plan_of(W.parse_world(only_task_checks), {"task_id": "", "seed": 1}, instruction="x")
    assert not bare.rubric and not bare.rewarded
    submit = verdict_of(bare, 0, "", None, final_answer="anything")
    assert (submit.done, submit.reward, submit.breakdown) == (True, None, {})


# ---- the judge's answer ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "score"),
    [
        ('Fine.\n<final_score>\n```json\n{"score": 0.8, "reason": "ok"}\n```\n</final_score>', 0.8),
        ('<final_score>{"score": "7/10"}</final_score>', 0.7),
        ('<final_score>{"score": 9}</final_score>', 0.9),  # read on a 0-10 scale
        ('<final_score>{"score": 40}</final_score>', 1.0),  # clamped
        ("<final_score>0.25</final_score>", 0.25),
        ('{"score": 1, "reason": "done"}', 1.0),
        ('<final_score>{"score": -2}</final_score>', 0.0),
    ],
)
def test_the_judges_score_is_read_into_zero_to_one(answer, score):
    assert R.parse_judge_score(answer) == pytest.approx(score)


@pytest.mark.parametrize("answer", ["", "no idea", '{"verdict": "good"}', '{"score": "high"}'])
def test_an_answer_without_a_score_is_refused(answer):
    with pytest.raises(ValueError):
        R.parse_judge_score(answer)


def test_the_judges_prompt_holds_the_task_criteria_episode_and_answer():
    messages = R.judge_messages(
        task="Refund order 1042", criteria="It is refunded.",
        steps=[("get_order 1042", '{"status": "paid"}')], final_answer="refunded",
    )  # fmt: skip
    user = messages[1]["content"]
    assert "Refund order 1042" in user and "It is refunded." in user
    assert '{"status": "paid"}' in user and "## Final answer\nrefunded" in user


# ---- the state report -----------------------------------------------------------------------


def test_a_world_with_state_keys_asks_for_the_state_and_the_parser_takes_it_out():
    prompt = W.compose(W.parse_world(world())).system_prompt
    assert '<state>{"order_refunded": null}</state>' in prompt
    assert "- order_refunded: true once refunded" in prompt
    plain = W.compose(W.parse_world({**WORLD, "state_keys": [], "rubric": {}}))
    assert "<state>" not in plain.system_prompt
    parsed = parse_prediction(
        '<think>hm</think><predicted_observation>{"ok": 1}</predicted_observation>\n'
        '<state>{"order_refunded": true}</state>'
    )
    assert parsed.observation == '{"ok": 1}' and parsed.state == {"order_refunded": True}
    unclosed = parse_prediction('<predicted_observation>done <state>{"order_refunded": 1}')
    assert unclosed.observation == "done" and unclosed.state == {"order_refunded": 1}
    # a page that shows state tags inside its observation keeps them
    page = parse_prediction("<predicted_observation><state>on</state></predicted_observation>")
    assert page.observation == "<state>on</state>" and page.state is None
    assert parse_prediction("plain").state is None
