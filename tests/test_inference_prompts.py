"""The prompt contract: composed turn prompts, AgentWorldBench rows reproduced byte for byte,
and the system-prompt templates of the seven domains."""

from __future__ import annotations

import json

import pytest

from inference.prompts import (
    DOMAINS,
    build_messages,
    build_system_prompt,
    reference_messages,
    turns_from_row,
)
from inference.types import Turn

# An AgentWorldBench-shaped row written for these tests: odd whitespace, trailing newlines,
# markdown and JSON inside, so that any re-formatting would show.
ROW = {
    "task": "agentworld/terminal",
    "id": "terminal-0007-3",
    "system_str": "You simulate a Linux shell.\n\nAnswer in <predicted_observation> tags.  ",
    "prompt": [
        "### Turn 1\n**Task Instruction:** Count the log files.\n\n**Action:** ls /var/log\n",
        "### Turn 2\n**Current State:** cwd=/var/log\n**Action:**  wc -l *.log  ",
        "### Turn 3\n**Historical Context:** two files\n**Action:** cat app.log | head -n 2",
        "### Turn 4\n**Action:** exit",
    ],
    "response": [
        "**Environment Observation:** app.log\nsys.log\n",
        '**Environment Observation:**\n  12 app.log\n   3 sys.log\n  15 total\n{"x": 1}',
        "**Environment Observation:** 2026-01-01 start\n2026-01-01 ready",
        "**Environment Observation:** logout",
    ],
    "current_prompt": "### Turn 3\n**Historical Context:** two files\n**Action:** cat app.log | head -n 2",
    "turn_idx": 3,
    "total_turns": 4,
}


def test_reference_messages_follow_the_reference_reconstruction():
    msgs = reference_messages(ROW)
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert msgs[0]["content"] == ROW["system_str"]
    assert msgs[1]["content"] == ROW["prompt"][0]
    assert msgs[2]["content"] == ROW["response"][0]
    assert msgs[4]["content"] == ROW["response"][1]
    assert msgs[-1]["content"] == ROW["prompt"][2]
    # the ground truth of the current turn is never sent
    assert all(m["content"] != ROW["response"][2] for m in msgs)


@pytest.mark.parametrize("turn_idx", [1, 2, 3, 4])
def test_build_messages_over_raw_turns_equals_reference_byte_for_byte(turn_idx):
    row = dict(ROW, turn_idx=turn_idx)
    history, current = turns_from_row(row)
    built = build_messages(row["system_str"], history, current, task_instruction="ignored")
    expected = reference_messages(row)
    assert built == expected
    assert (
        json.dumps(built, ensure_ascii=False).encode()
        == json.dumps(expected, ensure_ascii=False).encode()
    )


def test_raw_prompt_is_used_verbatim_even_with_fields_set():
    current = Turn(action="different", state="s", raw_prompt="### Turn 1\n**Action:** raw  ")
    msgs = build_messages("sys", [], current, task_instruction="task")
    assert msgs[-1]["content"] == "### Turn 1\n**Action:** raw  "


def test_composed_turn_prompts_have_the_documented_layout():
    history = [
        Turn(action="search[weather Paris]", observation="Paris: 18 C", state="home page"),
        Turn(action="click [3]", observation="Forecast page"),
    ]
    current = Turn(action="scroll down", state="forecast shown")
    msgs = build_messages("SYS", history, current, task_instruction="Find the weather.")
    assert msgs == [
        {"role": "system", "content": "SYS"},
        {
            "role": "user",
            "content": "### Turn 1\n\n**Task Instruction:**\nFind the weather.\n\n"
            "**Current State:**\nhome page\n\n**Action:**\nsearch[weather Paris]",
        },
        {"role": "assistant", "content": "**Environment Observation:**\nParis: 18 C"},
        {"role": "user", "content": "### Turn 2\n\n**Action:**\nclick [3]"},
        {"role": "assistant", "content": "**Environment Observation:**\nForecast page"},
        {
            "role": "user",
            "content": "### Turn 3\n\n**Current State:**\nforecast shown\n\n**Action:**\nscroll down",
        },
    ]


def test_task_instruction_goes_on_the_first_turn_only_and_current_can_be_first():
    msgs = build_messages("S", [], Turn(action="ls"), task_instruction="Count files")
    assert (
        msgs[-1]["content"] == "### Turn 1\n\n**Task Instruction:**\nCount files\n\n**Action:**\nls"
    )
    msgs = build_messages("S", [Turn(action="ls", observation="a")], Turn(action="pwd"), "Count")
    assert "Task Instruction" not in msgs[-1]["content"]
    assert msgs[1]["content"].count("**Task Instruction:**") == 1


def test_raw_response_is_used_verbatim_and_empty_observation_is_kept():
    history = [
        Turn(action="a", observation="ignored", raw_response="**Environment Observation:** X  \n"),
        Turn(action="b", observation=""),
    ]
    msgs = build_messages("", history, Turn(action="c"))
    assert msgs[0]["role"] == "user"  # no system message when none is given
    assert msgs[1]["content"] == "**Environment Observation:** X  \n"
    assert msgs[3]["content"] == "**Environment Observation:**\n"


def test_missing_history_observation_is_a_clear_error():
    with pytest.raises(ValueError, match="turn 2 of the history has no observation"):
        build_messages("S", [Turn("a", "o"), Turn("b")], Turn("c"))


@pytest.mark.parametrize(
    "change, message",
    [
        ({"turn_idx": 0}, "turn_idx must be an int >= 1"),
        ({"turn_idx": 9}, "'prompt' needs at least turn_idx=9"),
        ({"response": []}, "'response' needs at least 2"),
        ({"system_str": None, "_drop": "system_str"}, "missing field 'system_str'"),
    ],
)
def test_malformed_rows_name_the_field(change, message):
    row = dict(ROW)
    if "_drop" in change:
        del row[change["_drop"]]
    else:
        row.update(change)
    with pytest.raises(ValueError, match=message) as exc:
        reference_messages(row)
    assert "terminal-0007-3" in str(exc.value)


MCP_TOOLS = [
    {
        "name": "get_order_details",
        "description": "Look up an order.",
        "parameters": {
            "type": "object",
            "properties": {"order_id": {"type": "string"}},
            "required": ["order_id"],
        },
    }
]


@pytest.mark.parametrize("domain", DOMAINS)
def test_every_domain_has_a_system_prompt_that_asks_for_the_tagged_answer(domain):
    prompt = build_system_prompt(domain)
    assert "<predicted_observation>" in prompt and "</predicted_observation>" in prompt
    assert prompt.index("think") < prompt.rindex("<predicted_observation>")
    # the domain's own behaviour part is there and differs from the other domains'
    others = [build_system_prompt(d) for d in DOMAINS if d != domain]
    assert all(prompt != o for o in others)
    # hooks are omitted when empty
    assert "Perturbation" not in prompt
    assert "belongs to the following world" not in prompt


def test_seven_domains():
    assert set(DOMAINS) == {"mcp", "search", "terminal", "swe", "android", "web", "os"}


def test_tools_are_listed_as_json_schemas():
    prompt = build_system_prompt("mcp", tools=MCP_TOOLS)
    line = next(ln for ln in prompt.splitlines() if "get_order_details" in ln)
    assert json.loads(line) == MCP_TOOLS[0]
    assert "JSON schemas" not in build_system_prompt("mcp")  # no tools, no section
    search = build_system_prompt("search")
    assert '"name": "search"' in search  # the default search tools


def test_world_and_perturbation_sections_are_composed_in_order():
    prompt = build_system_prompt(
        "web", world="A city where shops close at noon.", perturbation="Every login fails once."
    )
    assert "A city where shops close at noon." in prompt
    assert "Every login fails once." in prompt
    assert (
        prompt.index("shops close at noon")
        < prompt.index("Every login fails")
        < prompt.rindex("<predicted_observation>")
    )


def test_unknown_domain_names_the_choices():
    with pytest.raises(ValueError, match=r"unknown domain 'robotics'.*mcp, search"):
        build_system_prompt("robotics")


def fireact_trajectories(shared_data, limit=25):
    """(question, [(action, observation)]) from the recorded FireAct HotpotQA runs."""
    path = shared_data / "search/fireact/hotpotqa_dev_ft-gpt-3.5-turbo-0613_serpapi.json"
    data = json.loads(path.read_text())
    out = []
    for item in data.values():
        traj = item["traj"]
        steps = []
        for msg, nxt in zip(traj, traj[1:], strict=False):
            if msg["role"] == "assistant" and "Action:" in msg["content"]:
                if nxt["role"] == "user" and nxt["content"].startswith("Observation:"):
                    action = msg["content"].split("Action:", 1)[1].strip()
                    steps.append((action, nxt["content"][len("Observation:") :].strip()))
        if len(steps) >= 2:
            out.append((traj[0]["content"], steps))
    return out[:limit]


def test_messages_for_recorded_search_trajectories(shared_data):
    trajectories = fireact_trajectories(shared_data)
    assert len(trajectories) >= 5
    system = build_system_prompt("search")
    for question, steps in trajectories:
        turns = [Turn(action=a, observation=o) for a, o in steps]
        for k in range(len(turns)):
            msgs = build_messages(system, turns[:k], Turn(action=turns[k].action), question)
            assert len(msgs) == 2 + 2 * k
            assert [m["role"] for m in msgs[1:]] == ["user", "assistant"] * k + ["user"]
            assert msgs[-1]["content"].startswith(f"### Turn {k + 1}\n\n")
            assert msgs[-1]["content"].endswith(f"**Action:**\n{steps[k][0]}")
            for i in range(k):
                assert msgs[2 + 2 * i]["content"] == f"**Environment Observation:**\n{steps[i][1]}"
            assert sum(question in m["content"] for m in msgs) == 1
