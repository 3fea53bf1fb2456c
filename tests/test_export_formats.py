"""Export formats: exact rows for a few hand-built examples, then every format written to
JSONL and read back the way trainers read it (datasets, a chat template, LLaMA-Factory's
dataset_info columns). No database."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from inference.prompts import build_messages, build_system_prompt, reference_messages
from inference.types import Turn
from studio.exports.examples import Example, ExportTurn
from studio.exports.formats import (
    EMPTY_THINK,
    FORMATS,
    SHAREGPT_TAGS,
    ExportOptions,
    UnknownFormat,
    agent_system_prompt,
    dataset_info_entry,
    row_for,
)
from studio.importers.base import tool_call_action
from studio.services.model_identity import world_model_dict

WM = ExportOptions()
AGENT = ExportOptions(turns="agent")
ALPACA_WM = ExportOptions(llamafactory_style="alpaca")
ALPACA_AGENT = ExportOptions(turns="agent", llamafactory_style="alpaca")

TERMINAL_TASK = "Find out why main.py fails."
# agent turns start from the task and the state the agent started in (step 0's)
TERMINAL_START = TERMINAL_TASK + "\n\n**Current State:**\n/home/user"


def examples_of(steps: list[ExportTurn], **fields) -> list[Example]:
    base = {
        "trajectory_id": 7,
        "branch_id": 70,
        "domain": "terminal",
        "title": "main.py fails",
        "task_instruction": TERMINAL_TASK,
        "system_prompt": build_system_prompt("terminal"),
        "tools": [],
    }
    base.update(fields)
    return [Example(steps=steps, position=i, **base) for i in range(len(steps))]


def terminal_steps() -> list[ExportTurn]:
    return [
        ExportTurn(index=0, action="ls", observation="main.py\nREADME.md", state="/home/user"),
        ExportTurn(
            index=1,
            action="python main.py",
            observation="ImportError: no module named yaml",
            thinking="main.py imports yaml, which is not installed.",
            thinking_is_world_model=True,
        ),
        ExportTurn(
            index=2,
            action="pip install pyyaml",
            observation="Successfully installed pyyaml-6.0",
            thinking="The agent wants pip to install it.",  # the agent's, not the world model's
        ),
        ExportTurn(
            index=3, action="pyyaml was missing; it is installed now.", observation="", final=True
        ),
    ]


MCP_TOOLS = [
    {
        "name": "get_order",
        "description": "Look an order up.",
        "inputSchema": {"type": "object", "properties": {"order_id": {"type": "string"}}},
    },
    {
        "type": "function",
        "function": {
            "name": "cancel_order",
            "description": "Cancel an order.",
            "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}},
        },
    },
]


def mcp_steps() -> list[ExportTurn]:
    return [
        ExportTurn(
            index=0,
            action=tool_call_action("get_order", {"order_id": "#W1"}),
            observation='{"order_id": "#W1", "status": "pending"}',
            tool_name="get_order",
            call_id="call_abc",
        ),
        ExportTurn(
            index=1,
            action=tool_call_action("cancel_order", '{"order_id": "#W1"}'),
            observation='{"order_id": "#W1", "status": "cancelled"}',
            tool_name="cancel_order",
            corrected=True,
        ),
    ]


def mcp_examples() -> list[Example]:
    return examples_of(
        mcp_steps(),
        trajectory_id=8,
        branch_id=80,
        domain="mcp",
        title="Cancel order #W1",
        task_instruction="Cancel my pending order #W1.",
        system_prompt=build_system_prompt("mcp", tools=MCP_TOOLS),
        tools=MCP_TOOLS,
    )


AWB_PROMPTS = [
    "### Turn 1\n\n**Task Instruction:**\nList the files.\n\n**Action:**\nls",
    "### Turn 2\n\n**Action:**\ncat notes.txt",
    "### Turn 3\n\n**Action:**\nwc -l notes.txt",
]
AWB_RESPONSES = [
    "**Environment Observation:**\nnotes.txt",
    "**Environment Observation:**\nhello\nworld",
    "**Environment Observation:**\n2 notes.txt",
]


def awb_examples() -> list[Example]:
    """An imported benchmark trajectory: the file had rows for turns 1 and 3 (the last one
    holding all three turns, the first one only its own); turn 2's observation was corrected."""
    steps = []
    for i, (prompt, response) in enumerate(zip(AWB_PROMPTS, AWB_RESPONSES, strict=True)):
        observation = response.split("\n", 1)[1]
        corrected = i == 1
        steps.append(
            ExportTurn(
                index=i,
                action=prompt.rsplit("\n", 1)[1],
                observation="hello\nthere" if corrected else observation,
                corrected=corrected,
                raw_prompt=prompt,
                raw_response="" if corrected else response,
                meta={"awb_source": True, "raw_response": response, "turn": i + 1},
            )
        )
    examples = examples_of(
        steps,
        trajectory_id=9,
        branch_id=90,
        title="row-1: List the files.",
        task_instruction="List the files.",
        system_prompt="You are the world model of a shell.",
    )
    rows = {
        0: {"task": "terminal", "id": "row-1", "row_turns": 1, "total_turns": 3},
        2: {"task": "terminal", "id": "row-3", "row_turns": 3, "total_turns": 3},
    }
    return [replace(e, awb_row=rows.get(e.position)) for e in examples]


def predicted(observation: str) -> str:
    return f"<predicted_observation>\n{observation}\n</predicted_observation>"


def unmarked(messages: list[dict]) -> list[dict]:
    """The messages without their training marks (OpenAI's weight, ms-swift's loss)."""
    return [{k: v for k, v in m.items() if k not in ("weight", "loss")} for m in messages]


def in_trained_shape(messages: list[dict], history: list[ExportTurn]) -> list[dict]:
    """The studio's messages with each earlier assistant turn in the answer shape the model
    is trained in (what the chat exports write)."""
    answers = iter(history)
    return [
        {"role": "assistant", "content": predicted(next(answers).observation)}
        if m["role"] == "assistant"
        else m
        for m in messages
    ]


def turn_of(step: ExportTurn) -> Turn:
    return Turn(
        action=step.action,
        observation=step.observation,
        state=step.state,
        raw_prompt=step.raw_prompt,
        raw_response=step.raw_response,
    )


# -- world-model turns --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "make", [lambda: examples_of(terminal_steps()), mcp_examples], ids=["terminal", "mcp"]
)
def test_wm_prompts_are_the_prompts_the_studio_sends(make):
    """The turn prompts are the studio's; every assistant turn, earlier ones and the target,
    answers in the shape the model is trained in; only the target is marked as trained."""
    for example in make():
        if example.turn.final:
            continue
        expected = in_trained_shape(
            build_messages(
                example.system_prompt,
                [turn_of(s) for s in example.history],
                turn_of(example.turn),
                example.task_instruction,
            ),
            example.history,
        )
        messages = row_for("openai", example, WM)["messages"]
        assert unmarked(messages[:-1]) == expected
        target = {"role": "assistant", "content": predicted(example.turn.observation)}
        assert messages[-1] == {**target, "weight": 1}
        assert [m.get("weight") for m in messages if m["role"] == "assistant"] == [0] * len(
            example.history
        ) + [1]
        swift = row_for("ms-swift", example, WM)["messages"]
        assert unmarked(swift) == unmarked(messages)
        assert [m.get("loss") for m in swift if m["role"] == "assistant"] == [False] * len(
            example.history
        ) + [True]
        turns = row_for("wm-turns", example, WM)
        assert turns["prompt"] == expected and turns["completion"] == [target]


def test_wm_prompt_of_an_imported_benchmark_turn_is_the_reference_one():
    example = awb_examples()[2]
    row = row_for("agentworldbench", example, WM)
    messages = unmarked(row_for("openai", example, WM)["messages"])
    # the turn prompts verbatim; the earlier answers in the trained shape (turn 2 corrected)
    assert messages[:-1] == in_trained_shape(reference_messages(row), example.history)
    assert messages[4]["content"] == predicted("hello\nthere")
    assert messages[1]["content"] == AWB_PROMPTS[0]
    # the benchmark row itself is the file's, answers and all
    assert row["response"][:2] == [AWB_RESPONSES[0], "**Environment Observation:**\nhello\nthere"]


def test_thinking_only_with_the_option_and_only_the_world_models():
    examples = examples_of(terminal_steps())
    plain = row_for("openai", examples[1], WM)["messages"][-1]["content"]
    assert plain.startswith("<predicted_observation>\n") and "<think>" not in plain
    thinking = ExportOptions(thinking=True)
    with_thinking = row_for("openai", examples[1], thinking)["messages"][-1]["content"]
    assert with_thinking == (
        "<think>\nmain.py imports yaml, which is not installed.\n</think>\n\n" + plain
    )
    # step 3's thinking is the agent's: never in a world-model target, which (like every
    # target of a thinking export) opens with a think block: an empty one
    agent_thought = row_for("openai", examples[2], thinking)["messages"][-1]["content"]
    assert agent_thought == EMPTY_THINK + predicted("Successfully installed pyyaml-6.0")
    assert "agent wants" not in agent_thought
    # earlier turns show observations only, never thinking
    history = row_for("openai", examples[2], thinking)["messages"][:-1]
    assert not any("<think>" in m["content"] for m in history)
    # without the option, no think block at all
    assert not row_for("openai", examples[2], WM)["messages"][-1]["content"].startswith("<think>")
    assert "<think>" in row_for("wm-turns", examples[1], thinking)["completion"][0]["content"]


def test_a_final_answer_gives_no_world_model_row_but_an_agent_row():
    final = examples_of(terminal_steps())[3]
    for fmt in ("openai", "sharegpt", "llamafactory", "ms-swift"):
        assert row_for(fmt, final, WM) is None
        assert row_for(fmt, final, AGENT) is not None
    assert row_for("wm-turns", final, WM) is None
    assert row_for("agentworldbench", final, WM) is None
    target = row_for("agent-turns", final, WM)["completion"]
    assert target == [{"role": "assistant", "content": "pyyaml was missing; it is installed now."}]


def test_an_empty_system_prompt_is_left_out():
    example = examples_of(terminal_steps(), system_prompt="")[0]
    messages = row_for("openai", example, WM)["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant"]
    assert row_for("sharegpt", example, WM)["system"] == ""


def test_sharegpt_and_alpaca_hold_the_same_world_model_turns():
    example = examples_of(terminal_steps())[2]
    messages = row_for("openai", example, WM)["messages"]
    sharegpt = row_for("sharegpt", example, WM)
    assert sharegpt == row_for("llamafactory", example, WM)
    assert sharegpt["system"] == messages[0]["content"]
    assert [(c["from"], c["value"]) for c in sharegpt["conversations"]] == [
        ({"user": "human", "assistant": "gpt"}[m["role"]], m["content"]) for m in messages[1:]
    ]
    alpaca = row_for("llamafactory", example, ALPACA_WM)
    assert list(alpaca) == ["instruction", "input", "output", "system", "history"]
    assert alpaca["instruction"] == messages[-2]["content"]
    assert alpaca["input"] == ""
    assert alpaca["output"] == messages[-1]["content"]
    assert alpaca["system"] == messages[0]["content"]
    assert alpaca["history"] == [
        [messages[1]["content"], messages[2]["content"]],
        [messages[3]["content"], messages[4]["content"]],
    ]
    assert row_for("llamafactory", examples_of(terminal_steps())[0], ALPACA_WM)["history"] == []


# -- agent turns --------------------------------------------------------------------------------


def test_openai_agent_turns_hold_tool_calls_and_tool_results():
    first, second = mcp_examples()
    row = row_for("openai", second, AGENT)
    assert list(row) == ["messages", "tools"]
    assert row["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_order",
                "description": "Look an order up.",
                "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}},
            },
        },
        MCP_TOOLS[1],
    ]
    system, user, call, result, target = row["messages"]
    assert system == {"role": "system", "content": agent_system_prompt("mcp")}
    assert user == {"role": "user", "content": "Cancel my pending order #W1."}
    assert call == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_abc",
                "type": "function",
                "function": {"name": "get_order", "arguments": '{"order_id": "#W1"}'},
            }
        ],
        "weight": 0,  # an earlier action: not trained
    }
    assert target["weight"] == 1
    assert json.loads(call["tool_calls"][0]["function"]["arguments"]) == {"order_id": "#W1"}
    assert result == {
        "role": "tool",
        "tool_call_id": "call_abc",
        "content": '{"order_id": "#W1", "status": "pending"}',
    }
    # no call id recorded: one made from the step's index
    assert target["tool_calls"][0]["id"] == "call_1"
    assert target["tool_calls"][0]["function"]["name"] == "cancel_order"
    assert row_for("openai", first, AGENT)["messages"][2:] == [{**call, "weight": 1}]


def test_agent_turns_without_tool_calls_are_plain_messages():
    example = examples_of(terminal_steps())[2]
    row = row_for("openai", example, AGENT)
    assert list(row) == ["messages"]  # no tools, no tools key
    assert row["messages"] == [
        {"role": "system", "content": agent_system_prompt("terminal")},
        {"role": "user", "content": TERMINAL_START},
        {"role": "assistant", "content": "ls", "weight": 0},
        {"role": "user", "content": "main.py\nREADME.md"},
        {"role": "assistant", "content": "python main.py", "weight": 0},
        {"role": "user", "content": "ImportError: no module named yaml"},
        {"role": "assistant", "content": "pip install pyyaml", "weight": 1},
    ]
    steps = terminal_steps()
    steps[0] = replace(steps[0], state="")
    untitled = examples_of(steps, task_instruction="")[0]
    assert row_for("openai", untitled, AGENT)["messages"][1]["content"] == "main.py fails"


def test_agent_turns_carry_the_trajectorys_own_system_prompt_and_initial_state():
    own = "You are a careful shell agent. One command per reply."
    example = examples_of(terminal_steps(), agent_system_prompt=own)[1]
    for fmt in ("openai", "ms-swift", "agent-turns"):
        row = row_for(fmt, example, AGENT)
        messages = row["messages"] if "messages" in row else row["prompt"]
        assert messages[0] == {"role": "system", "content": own}
        assert messages[1]["content"] == TERMINAL_START
    for options in (AGENT, ALPACA_AGENT):
        row = row_for("llamafactory", example, options)
        assert row["system"] == own
    assert row_for("sharegpt", example, AGENT)["conversations"][0]["value"] == TERMINAL_START
    # world-model turns keep the world model's system prompt
    assert row_for("openai", example, WM)["messages"][0]["content"] == example.system_prompt


def test_an_empty_action_gives_no_agent_row():
    steps = terminal_steps()
    steps[1] = replace(steps[1], action="  ")
    example = examples_of(steps)[1]
    for fmt in ("openai", "sharegpt", "llamafactory", "ms-swift"):
        assert row_for(fmt, example, AGENT) is None
    assert row_for("llamafactory", example, ALPACA_AGENT) is None
    assert row_for("agent-turns", example, AGENT) is None
    assert row_for("openai", example, WM) is not None


def test_sharegpt_agent_turns_use_function_call_and_observation():
    row = row_for("sharegpt", mcp_examples()[1], AGENT)
    assert row == row_for("llamafactory", mcp_examples()[1], AGENT)
    assert list(row) == ["conversations", "system", "tools"]
    assert [c["from"] for c in row["conversations"]] == [
        "human",
        "function_call",
        "observation",
        "function_call",
    ]
    assert json.loads(row["conversations"][1]["value"]) == {
        "name": "get_order",
        "arguments": {"order_id": "#W1"},
    }
    assert json.loads(row["conversations"][3]["value"]) == {
        "name": "cancel_order",
        "arguments": {"order_id": "#W1"},
    }
    assert row["system"] == agent_system_prompt("mcp")
    assert [t["name"] for t in json.loads(row["tools"])] == ["get_order", "cancel_order"]
    terminal = row_for("sharegpt", examples_of(terminal_steps())[1], AGENT)
    assert [c["from"] for c in terminal["conversations"]] == ["human", "gpt", "human", "gpt"]
    assert terminal["tools"] == ""


def test_alpaca_agent_turns():
    examples = examples_of(terminal_steps())
    first = row_for("llamafactory", examples[0], ALPACA_AGENT)
    assert first["instruction"] == TERMINAL_START and first["history"] == []
    assert first["output"] == "ls"
    third = row_for("llamafactory", examples[2], ALPACA_AGENT)
    assert third["instruction"] == "ImportError: no module named yaml"
    assert third["output"] == "pip install pyyaml"
    assert third["history"] == [
        [TERMINAL_START, "ls"],
        ["main.py\nREADME.md", "python main.py"],
    ]
    assert third["system"] == agent_system_prompt("terminal")


def test_ms_swift_agent_turns_use_tool_call_and_tool_response():
    row = row_for("ms-swift", mcp_examples()[1], AGENT)
    assert list(row) == ["messages", "tools"]
    assert [m["role"] for m in row["messages"]] == [
        "system",
        "user",
        "tool_call",
        "tool_response",
        "tool_call",
    ]
    assert all(isinstance(m["content"], str) for m in row["messages"])
    # ms-swift's per-message loss: the earlier tool call is not trained, the target is
    assert [m.get("loss") for m in row["messages"]] == [None, None, False, None, True]
    assert json.loads(row["messages"][2]["content"]) == {
        "name": "get_order",
        "arguments": {"order_id": "#W1"},
    }
    assert isinstance(row["tools"], str)
    assert json.loads(row["tools"]) == row_for("openai", mcp_examples()[1], AGENT)["tools"]
    plain = row_for("ms-swift", examples_of(terminal_steps())[1], AGENT)
    assert "tools" not in plain
    assert [m["role"] for m in plain["messages"]] == [
        "system",
        "user",
        "assistant",
        "user",
        "assistant",
    ]


def test_turn_rows_carry_meta():
    example = mcp_examples()[1]
    expected_meta = {"trajectory": 8, "branch": 80, "step": 1, "domain": "mcp", "corrected": True}
    # a turn no model wrote (these are recorded) says so, with the keys of a model's
    expected_meta["world_model"] = world_model_dict(None)
    assert expected_meta["world_model"]["label"] == "recorded"
    wm = row_for("wm-turns", example, WM)
    assert list(wm) == ["prompt", "completion", "meta"]
    assert wm["meta"] == expected_meta
    agent = row_for("agent-turns", example, WM)  # the options' turns do not matter here
    assert list(agent) == ["prompt", "completion", "tools", "meta"]
    assert agent["meta"] == expected_meta
    messages = unmarked(row_for("openai", example, AGENT)["messages"])
    assert agent["prompt"] == messages[:-1] and agent["completion"] == messages[-1:]
    assert row_for("wm-turns", examples_of(terminal_steps())[0], WM)["meta"]["corrected"] is False


# -- AgentWorldBench rows -----------------------------------------------------------------------


def test_agentworldbench_rows_of_a_studio_trajectory():
    examples = examples_of(terminal_steps())
    row = row_for("agentworldbench", examples[1], WM)
    assert list(row) == [
        "task",
        "id",
        "prompt",
        "response",
        "current_prompt",
        "system_str",
        "turn_idx",
        "total_turns",
    ]
    turns = [turn_of(s) for s in terminal_steps()]
    prompts = [m["content"] for m in build_messages("", turns[:3], turns[3], TERMINAL_TASK)[::2]]
    assert row["task"] == "terminal"
    assert row["id"] == "7:70"
    assert row["prompt"] == prompts  # every step, the final answer included
    assert row["response"] == [
        "**Environment Observation:**\nmain.py\nREADME.md",
        "**Environment Observation:**\nImportError: no module named yaml",
        "**Environment Observation:**\nSuccessfully installed pyyaml-6.0",
        "**Environment Observation:**\n",
    ]
    assert row["current_prompt"] == prompts[1]
    assert row["system_str"] == build_system_prompt("terminal")
    assert (row["turn_idx"], row["total_turns"]) == (2, 4)
    assert prompts[0].startswith("### Turn 1\n\n**Task Instruction:**\n" + TERMINAL_TASK)
    assert "**Current State:**\n/home/user" in prompts[0]


def test_agentworldbench_rows_of_an_imported_trajectory_are_the_files_rows():
    first, second, third = awb_examples()
    assert row_for("agentworldbench", second, WM) is None  # the file had no row for turn 2
    row = row_for("agentworldbench", first, WM)
    assert row == {
        "task": "terminal",
        "id": "row-1",
        "prompt": AWB_PROMPTS[:1],
        "response": AWB_RESPONSES[:1],
        "current_prompt": AWB_PROMPTS[0],
        "system_str": "You are the world model of a shell.",
        "turn_idx": 1,
        "total_turns": 3,
    }
    row = row_for("agentworldbench", third, WM)
    assert row["id"] == "row-3" and row["turn_idx"] == 3 and row["total_turns"] == 3
    assert row["prompt"] == AWB_PROMPTS
    # the corrected observation is re-formatted; the others stay verbatim
    assert row["response"] == [
        AWB_RESPONSES[0],
        "**Environment Observation:**\nhello\nthere",
        AWB_RESPONSES[2],
    ]
    # other formats still give the turn without a row in the file
    assert row_for("wm-turns", second, WM) is not None


# -- options, names, memo -----------------------------------------------------------------------


def test_unknown_format_names_the_valid_ones():
    with pytest.raises(UnknownFormat) as err:
        row_for("alpaca", examples_of(terminal_steps())[0], WM)
    message = str(err.value)
    assert "'alpaca'" in message
    for name in FORMATS:
        assert name in message
    assert isinstance(err.value, ValueError)


def test_bad_options_are_refused():
    example = examples_of(terminal_steps())[0]
    with pytest.raises(ValueError, match="turns"):
        row_for("openai", example, ExportOptions(turns="both"))
    with pytest.raises(ValueError, match="style"):
        row_for("llamafactory", example, ExportOptions(llamafactory_style="csv"))


def test_format_specs():
    assert list(FORMATS) == [
        "agentworldbench",
        "openai",
        "sharegpt",
        "llamafactory",
        "ms-swift",
        "wm-turns",
        "agent-turns",
    ]
    for name, spec in FORMATS.items():
        assert spec.name == name and spec.extension == "jsonl"
        assert spec.label and spec.description.endswith(".")
    turns = {n for n, s in FORMATS.items() if s.has_turns_option}
    assert turns == {"openai", "sharegpt", "llamafactory", "ms-swift"}


def test_branches_of_equal_length_do_not_share_their_memo():
    terminal = examples_of(terminal_steps())
    other_steps = terminal_steps()
    other_steps[0] = replace(other_steps[0], action="pwd", observation="/home/user")
    other = examples_of(other_steps)
    for _ in range(2):  # alternate between the two branches
        assert row_for("openai", terminal[2], WM)["messages"][2]["content"] == (
            predicted("main.py\nREADME.md")
        )
        assert row_for("openai", other[2], WM)["messages"][2]["content"] == predicted("/home/user")


def test_dataset_info_entries():
    entry = dataset_info_entry("awb_wm", WM, "awb_wm.jsonl")
    assert entry == {
        "awb_wm": {
            "file_name": "awb_wm.jsonl",
            "formatting": "sharegpt",
            "tags": SHAREGPT_TAGS,
            "columns": {"messages": "conversations", "system": "system"},
            # only the last turn (the target) trains with LLaMA-Factory's mask_history
            "mask_history": True,
        }
    }
    assert SHAREGPT_TAGS == {
        "role_tag": "from",
        "content_tag": "value",
        "user_tag": "human",
        "assistant_tag": "gpt",
        "observation_tag": "observation",
        "function_tag": "function_call",
        "system_tag": "system",
    }
    agent = dataset_info_entry("x", AGENT, "x.jsonl")["x"]
    assert agent["columns"]["tools"] == "tools"
    alpaca = dataset_info_entry("y", ALPACA_AGENT, "y.jsonl")["y"]
    assert alpaca["formatting"] == "alpaca" and "tags" not in alpaca
    assert alpaca["columns"] == {
        "prompt": "instruction",
        "query": "input",
        "response": "output",
        "system": "system",
        "history": "history",
        "tools": "tools",
    }


# -- written and read back ----------------------------------------------------------------------

CASES = [
    ("agentworldbench", WM),
    ("openai", WM),
    ("openai", AGENT),
    ("sharegpt", WM),
    ("sharegpt", AGENT),
    ("llamafactory", WM),
    ("llamafactory", AGENT),
    ("llamafactory", ALPACA_WM),
    ("llamafactory", ALPACA_AGENT),
    ("ms-swift", WM),
    ("ms-swift", AGENT),
    ("wm-turns", ExportOptions(thinking=True)),
    ("agent-turns", AGENT),
]


def all_examples() -> list[Example]:
    return examples_of(terminal_steps()) + mcp_examples() + awb_examples()


def case_id(case) -> str:
    fmt, options = case
    return f"{fmt}-{options.turns}-{options.llamafactory_style}"


def write_rows(path, fmt: str, options: ExportOptions) -> list[dict]:
    rows = [r for r in (row_for(fmt, e, options) for e in all_examples()) if r is not None]
    with path.open("w", encoding="utf-8") as out:
        for row in rows:
            out.write(json.dumps(row, ensure_ascii=False) + "\n")
    return rows


# rows per format: 9 steps; wm drops the final answer; agentworldbench also turn 2 of the
# imported trajectory; agent turns keep every step (all have an action)
EXPECTED_ROWS = {"wm": 8, "agent": 9}


@pytest.fixture(scope="module")
def tokenizer():
    from inference.tiny import _build_tokenizer

    return _build_tokenizer()


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_every_format_loads_with_datasets(case, tmp_path):
    from datasets import load_dataset

    fmt, options = case
    path = tmp_path / f"{fmt}.jsonl"
    rows = write_rows(path, fmt, options)
    turns = "agent" if fmt == "agent-turns" else options.turns
    expected = 7 if fmt == "agentworldbench" else EXPECTED_ROWS[turns]
    assert len(rows) == expected
    ds = load_dataset("json", data_files=str(path), split="train")
    assert ds.num_rows == expected
    first = ds[0]
    if fmt == "agentworldbench":
        assert ds["turn_idx"] == [1, 2, 3, 1, 2, 1, 3]
        assert first["prompt"] == rows[0]["prompt"]
    elif "messages" in rows[0]:
        assert first["messages"][-1]["content"] == rows[0]["messages"][-1]["content"]
    elif "conversations" in rows[0]:
        assert first["conversations"][-1]["value"] == rows[0]["conversations"][-1]["value"]
    elif "instruction" in rows[0]:
        assert first["output"] == rows[0]["output"]
    else:
        assert first["completion"][0]["content"] == rows[0]["completion"][0]["content"]
        assert ds["meta"][-1] == rows[-1]["meta"]


def as_chat(row: dict) -> list[dict]:
    """A row's messages in role/content form, tool calls written into the content the way a
    tool-calling chat template renders them (the tiny template shows role and content only)."""
    if "conversations" in row:
        roles = {"human": "user", "gpt": "assistant", "function_call": "assistant"}
        messages = [{"role": "system", "content": row["system"]}] if row["system"] else []
        for turn in row["conversations"]:
            role = roles.get(turn["from"], "tool")
            content = turn["value"]
            if turn["from"] == "function_call":
                content = f"<tool_call>\n{content}\n</tool_call>"
            messages.append({"role": role, "content": content})
        return messages
    messages = row["messages"] if "messages" in row else row["prompt"] + row["completion"]
    chat = []
    for m in messages:
        role, content = m["role"], m["content"]
        if m.get("tool_calls"):
            call = m["tool_calls"][0]["function"]
            content = f'<tool_call>\n{{"name": "{call["name"]}", "arguments": {call["arguments"]}}}\n</tool_call>'
            role = "assistant"
        elif role == "tool_call":
            role, content = "assistant", f"<tool_call>\n{content}\n</tool_call>"
        elif role == "tool_response":
            role = "tool"
        chat.append({"role": role, "content": content})
    return chat


CHAT_CASES = [c for c in CASES if c[0] != "agentworldbench" and c[1].llamafactory_style != "alpaca"]


@pytest.mark.parametrize("case", CHAT_CASES, ids=case_id)
def test_chat_rows_render_with_a_chat_template(case, tmp_path, tokenizer):
    from datasets import load_dataset

    fmt, options = case
    path = tmp_path / f"{fmt}.jsonl"
    rows = write_rows(path, fmt, options)
    loaded = load_dataset("json", data_files=str(path), split="train")
    for row, back in zip(rows, loaded, strict=True):
        chat = as_chat(back)
        assert chat == as_chat(row)  # the file read back holds the same conversation
        assert chat[-1]["role"] == "assistant"
        prompt = tokenizer.apply_chat_template(
            chat[:-1], tokenize=False, add_generation_prompt=True
        )
        full = tokenizer.apply_chat_template(chat, tokenize=False)
        # the target is what the model learns to write after the prompt
        assert full == prompt + chat[-1]["content"] + "<|im_end|>\n"
        assert tokenizer(full)["input_ids"]


@pytest.mark.parametrize(
    "options",
    [WM, AGENT, ALPACA_WM, ALPACA_AGENT],
    ids=["sharegpt-wm", "sharegpt-agent", "alpaca-wm", "alpaca-agent"],
)
def test_llamafactory_rows_match_their_dataset_info(options, tmp_path):
    from datasets import load_dataset

    path = tmp_path / "awb.jsonl"
    rows = write_rows(path, "llamafactory", options)
    entry = dataset_info_entry("awb", options, path.name)["awb"]
    assert entry["file_name"] == path.name
    ds = load_dataset("json", data_files=str(tmp_path / entry["file_name"]), split="train")
    columns = entry["columns"]
    assert set(columns.values()) == set(ds.column_names)
    assert entry["formatting"] == options.llamafactory_style
    if entry["formatting"] == "alpaca":
        for row in ds:
            assert isinstance(row[columns["prompt"]], str) and row[columns["response"]]
            assert all(len(pair) == 2 for pair in row[columns["history"]])
        return
    tags = entry["tags"]
    odd = {tags["user_tag"], tags["observation_tag"]}
    even = {tags["assistant_tag"], tags["function_tag"]}
    for row in ds:
        turns = row[columns["messages"]]
        assert len(turns) % 2 == 0
        for i, turn in enumerate(turns):
            # LLaMA-Factory's rule: human/observation at odd positions, gpt/function at even
            assert turn[tags["role_tag"]] in (odd if i % 2 == 0 else even)
            assert isinstance(turn[tags["content_tag"]], str)
    assert len(ds) == len(rows)
