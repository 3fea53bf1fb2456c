"""Data shared by prompts, backends and the studio. Plain dataclasses, no Django, no torch."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

# A chat message as the OpenAI API and chat templates take it: {"role": ..., "content": ...}
Message = dict[str, str]


@dataclass
class Turn:
    """One step of a trajectory as the world model sees it.

    `raw_prompt` is an AgentWorldBench turn prompt kept verbatim from the file; when set, the
    prompt builder uses it unchanged instead of composing one from the fields."""

    action: str
    observation: str | None = None
    state: str = ""
    raw_prompt: str = ""
    raw_response: str = ""  # AgentWorldBench ground-truth response, verbatim


@dataclass
class SamplingParams:
    temperature: float = 0.7
    top_p: float | None = 0.95  # None: not sent (the server's own default)
    max_tokens: int = 1024
    seed: int | None = None
    n: int = 1


@dataclass
class Completion:
    """One sampled continuation and what it cost."""

    text: str
    tokens_in: int = 0
    tokens_out: int = 0
    prefill_s: float = 0.0
    decode_s: float = 0.0
    finish_reason: str = "stop"  # stop | length | cancelled | error
    error: str = ""
    # A reasoning model's thinking when its server returned it apart (`reasoning_content`):
    # `text` then starts with it as a <think> block, and `answer` is the content alone.
    reasoning: str = ""
    answer: str | None = None


@dataclass
class StreamEvent:
    """Progress of one sample while it decodes: the text so far and token count."""

    sample: int
    text: str
    tokens_out: int
    phase: str = "decoding"  # prefill | decoding | done


# Called by backends as samples progress; return True to ask the backend to stop that sample
# (per-branch stop), False to go on.
StreamCallback = Callable[[StreamEvent], bool]


@dataclass
class GenerationRequest:
    """N continuations. Either one prompt sampled N times (`messages`), or one prompt per
    branch (`branches`, all sharing a prefix); backends accept both."""

    messages: list[Message] | None = None
    branches: list[list[Message]] | None = None
    params: SamplingParams = field(default_factory=SamplingParams)

    def prompts(self) -> list[list[Message]]:
        if self.branches is not None:
            return self.branches
        assert self.messages is not None
        return [self.messages] * max(1, self.params.n)


class Backend(Protocol):
    name: str  # "openai" | "hf" | "retrieval"
    model: str
    is_neural: bool  # False for the retrieval baseline, labelled as such in the UI

    def generate(
        self, request: GenerationRequest, on_event: StreamCallback | None = None
    ) -> list[Completion]: ...
