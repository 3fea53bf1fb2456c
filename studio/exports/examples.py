"""What one exported row is made from: a step to train on (`Example.turn`), the steps before
it on its branch (`Example.history`), the branch's other steps (AgentWorldBench rows hold a
trajectory's every turn) and the trajectory's context. Plain data, no
Django; `studio.services.datasets` builds them from the database, one trajectory's steps in
memory at a time, and `studio.exports.formats` turns each into a row of a format."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class ExportTurn:
    index: int  # 0-based position on its branch
    action: str
    # the observation to train on: a correction where an annotator made one, else the step's
    observation: str
    corrected: bool = False
    state: str = ""  # the "current state" shown to the world model
    # the world model's thinking for a simulated step; the agent's for a recorded one
    thinking: str = ""
    thinking_is_world_model: bool = False
    # AgentWorldBench strings as imported (verbatim prompt; the response, empty when the
    # observation was corrected or the step was not imported from AgentWorldBench)
    raw_prompt: str = ""
    raw_response: str = ""
    tool_name: str = ""  # a tool call's function name (MCP, search, OpenAI-style logs)
    call_id: str = ""
    final: bool = False  # the agent's final answer: no observation follows
    meta: dict[str, Any] = field(default_factory=dict)
    # a review of the step rejected it (`studio.services.datasets.rejected_steps`); read
    # only by exports that drop rows whose context holds a rejected step
    rejected: bool = False
    # The model that wrote its observation (`model_identity.world_model_dict`; one dict
    # shared by the steps of a job: read-only), None where the export was not told.
    world_model: dict[str, Any] | None = None


@dataclass(slots=True)
class Example:
    trajectory_id: int
    branch_id: int
    domain: str
    title: str
    task_instruction: str
    # the world-model system prompt the studio simulates with (the file's for AgentWorldBench)
    system_prompt: str
    tools: list[Any]
    # every step of the branch, in order (one list shared by all the examples of a branch)
    steps: list[ExportTurn]
    position: int  # which of them this row trains on
    tags: list[str] = field(default_factory=list)
    # For a trajectory imported from AgentWorldBench: {"task", "id", "row_turns",
    # "total_turns", "current_prompt"} of the file's row for this turn, so the export writes
    # the same row back; None for every other step.
    awb_row: dict[str, Any] | None = None
    # the agent's own system prompt as the trajectory recorded it (its importer's
    # `metadata["agent_system_prompt"]`); empty: agent turns use `agent_system_prompt(domain)`
    agent_system_prompt: str = ""

    @property
    def turn(self) -> ExportTurn:
        return self.steps[self.position]

    @property
    def history(self) -> list[ExportTurn]:
        return self.steps[: self.position]
