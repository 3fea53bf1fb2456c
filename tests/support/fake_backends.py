"""In-process stand-ins for a world model and an agent model, for tests of the runner: they
answer from a script, stream a few chunks, and record what they were asked."""

from __future__ import annotations

from collections.abc import Callable

from inference.agent import AgentDecision
from inference.backends.errors import BackendError
from inference.types import Completion, GenerationRequest, Message, StreamEvent

Responder = Callable[[list[Message], int], str]


def echo_action(messages: list[Message], sample: int) -> str:
    """Answers `ran <the last line of the last user message> #<sample>`."""
    last = messages[-1]["content"].splitlines()[-1]
    return f"<think>sample {sample}</think><predicted_observation>ran {last} #{sample}</predicted_observation>"


class ScriptedBackend:
    name = "fake"
    model = "fake-world-model"

    def __init__(
        self,
        respond: Responder = echo_action,
        *,
        chunks: int = 3,
        errors: dict[int, str] | None = None,
        raise_error: str = "",
        is_neural: bool = True,
    ):
        self.respond = respond
        self.chunks = chunks
        self.errors = errors or {}  # position -> error of its completion, first call only
        self.raise_error = raise_error
        self.is_neural = is_neural
        self.requests: list[GenerationRequest] = []
        self.streamed: list[bool] = []  # whether each call was asked for a stream of events

    def generate(self, request: GenerationRequest, on_event=None) -> list[Completion]:
        self.requests.append(request)
        self.streamed.append(on_event is not None)
        if self.raise_error:
            raise BackendError(self.raise_error)
        out = []
        errors = self.errors if len(self.requests) == 1 else {}
        for i, messages in enumerate(request.prompts()):
            if i in errors:
                out.append(Completion(text="", finish_reason="error", error=errors[i]))
                continue
            text = self.respond(messages, i)
            finish = "stop"
            if on_event is not None:
                on_event(StreamEvent(sample=i, text="", tokens_out=0, phase="prefill"))
                step = max(1, len(text) // self.chunks)
                for k, end in enumerate(range(step, len(text) + step, step)):
                    if on_event(StreamEvent(sample=i, text=text[:end], tokens_out=k + 1)):
                        finish = "cancelled"
                        break
            out.append(
                Completion(
                    text=text,
                    tokens_in=sum(len(m["content"]) for m in messages) // 4,
                    tokens_out=len(text.split()),
                    prefill_s=0.001,
                    decode_s=0.002,
                    finish_reason=finish,
                )
            )
        return out


class ScriptedAgent:
    """Proposes `actions[k]` at its k-th call for each future (by call order); an action
    starting with "FINAL:" is a final answer."""

    def __init__(self, decide: Callable[[list[dict]], str]):
        self.decide = decide
        self.calls: list[list[dict]] = []

    def propose(self, messages, *, temperature: float, max_tokens: int) -> AgentDecision:
        self.calls.append(messages)
        text = self.decide(messages)
        if text.startswith("FINAL:"):
            return AgentDecision(text[6:].strip(), True, "done thinking", text)
        return AgentDecision(text, False, f"why {text}", text)
