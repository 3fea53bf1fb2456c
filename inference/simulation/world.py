"""The trajectory as the runner sees it at the fork: who the world model is (system prompt,
task, tools), the turns before the fork, and the recorded steps from the fork on.

Memory stays flat in futures and history: `history` is read once, into the message list that
every future shares (`prompts.history_messages`); each future keeps only what it added since
the fork."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from inference.types import Turn


@dataclass(frozen=True)
class RecordedStep:
    """A recorded step at or after the fork: its action, and the context its turn prompt had
    (state, the verbatim AgentWorldBench prompt)."""

    index: int
    action: str
    state: str = ""
    raw_prompt: str = ""


@dataclass
class WorldContext:
    domain: str
    task_instruction: str
    system_prompt: str
    history: Iterable[Turn]  # the turns before the fork, oldest first; read once
    recorded: Sequence[RecordedStep] = ()  # recorded steps with index >= the fork, in order
    tools: list | None = None

    def recorded_at(self, index: int) -> RecordedStep | None:
        for step in self.recorded:
            if step.index == index:
                return step
        return None


def prompt_with_action(raw_prompt: str, recorded_action: str, action: str) -> str:
    """The verbatim turn prompt with its action swapped for an edited one. When the recorded
    action does not occur exactly once we cannot edit safely: "" (the prompt is then composed
    from the fields instead)."""
    if not raw_prompt:
        return ""
    if action == recorded_action:
        return raw_prompt
    if recorded_action and raw_prompt.count(recorded_action) == 1:
        return raw_prompt.replace(recorded_action, action)
    return ""


def current_turn(recorded: RecordedStep | None, action: str) -> Turn:
    """The turn whose observation is asked for: `action`, in the recorded step's context."""
    if recorded is None:
        return Turn(action=action)
    return Turn(
        action=action,
        state=recorded.state,
        raw_prompt=prompt_with_action(recorded.raw_prompt, recorded.action, action),
    )
