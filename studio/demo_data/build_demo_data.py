"""Source of the demo trajectories in this folder (written for AgentWorld Studio).

The `.json` (native `agentworld-studio/v1`) and `.jsonl` (AgentWorldBench rows) files next to
this script are generated from it; edit here, then run

    python -m studio.demo_data.build_demo_data

`python manage.py load_demo` imports the generated files. Every world below is invented but
kept self-consistent (file sizes add up, diffs match the code shown, ids recur) so that a world
model's predictions can be compared against something plausible.
"""

from __future__ import annotations

import json
from pathlib import Path

from studio.demo_data.worlds_gui import ANDROID, OS_FILES_AWB, OS_SETTINGS, WEB
from studio.demo_data.worlds_text import (
    MCP,
    SEARCH_AWB,
    SEARCH_NATIVE,
    SWE,
    TERMINAL_AWB,
    TERMINAL_NATIVE,
)

HERE = Path(__file__).resolve().parent
NATIVE = "agentworld-studio/v1"


def awb_rows(sample: dict) -> list[dict]:
    """One AgentWorldBench row per turn; every row carries the full prompt/response lists."""
    prompts, responses = [], []
    for n, turn in enumerate(sample["turns"], 1):
        parts = [f"### Turn {n}"]
        if n == 1:
            parts.append(f"**Task Instruction:** {sample['task_instruction']}")
        if turn.get("state"):
            parts.append(f"**Current State:**\n{turn['state']}")
        parts.append(f"**Action:**\n{turn['action']}")
        prompts.append("\n\n".join(parts))
        responses.append(f"**Environment Observation:**\n{turn['observation']}")
    total = len(prompts)
    return [
        {
            "task": sample["task"],
            "id": sample["id"],
            "prompt": prompts,
            "response": responses,
            "current_prompt": prompts[n - 1],
            "system_str": sample["system_str"],
            "turn_idx": n,
            "total_turns": total,
        }
        for n in range(1, total + 1)
    ]


def write_native(out: Path, name: str, trajectories: list[dict]) -> None:
    doc = {"format": NATIVE, "trajectories": trajectories}
    (out / name).write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")


def write_awb(out: Path, name: str, samples: list[dict]) -> None:
    lines = [json.dumps(row, ensure_ascii=False) for s in samples for row in awb_rows(s)]
    (out / name).write_text("\n".join(lines) + "\n")


def main(out: Path = HERE) -> None:
    write_native(out, "mcp_calendar_and_tracker.json", MCP)
    write_native(out, "search_python_release.json", [SEARCH_NATIVE])
    write_awb(out, "search_agentworldbench.jsonl", [SEARCH_AWB])
    write_native(out, "terminal_backup_disk_full.json", [TERMINAL_NATIVE])
    write_awb(out, "terminal_agentworldbench.jsonl", [TERMINAL_AWB])
    write_native(out, "swe_tinyqueue_tie_break.json", [SWE])
    write_native(out, "android_clock_and_messages.json", ANDROID)
    write_native(out, "web_shop_return.json", [WEB])
    write_awb(out, "os_agentworldbench.jsonl", [OS_FILES_AWB])
    write_native(out, "os_settings_night_light.json", [OS_SETTINGS])


if __name__ == "__main__":
    main()
