"""The agent of a rollout campaign: an OpenAI-compatible chat model that proposes the next
action of an episode from the chat so far. A world with tools gets them as the request's
OpenAI `tools`, and the model's tool call is the action `{"name", "arguments"}`; a reply
without a tool call is read as text (`<action>` / `<final_answer>`, `inference.agent`). Plain
Python (no Django): the studio's campaign job calls it from its threads. Prompts written for
this project."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, cast

from inference.agent import AgentError, agent_turn_messages, build_agent_messages, parse_agent_reply

TOOLS_SYSTEM_PROMPT = """\
You are the agent in a {domain} environment, working step by step towards the task below.
Act by calling exactly one of the tools you are given; the environment answers each call
with its result. Read every result before acting again, and do not invent results.
When the task is done, {finish}"""

FINISH_WITH_TEXT = (
    "reply without a tool call, as <final_answer>your answer or a short summary</final_answer>."
)
FINISH_WITH_TOOL = "call {tool} with your final answer."


@dataclass
class Proposal:
    """What the agent model proposed: `action` (a tool call {"name", "arguments"} or the
    text of an action), or `final` with its `final_answer`; the tokens the call used."""

    action: Any
    final: bool
    final_answer: str | None = None
    thought: str = ""
    raw: str = ""
    tokens_in: int = 0
    tokens_out: int = 0


def openai_tools(tools: list | None) -> list[dict[str, Any]]:
    """The world's tools as the OpenAI `tools` parameter: [{"type": "function", "function":
    {"name", "description", "parameters"}}]. A schema given bare ({"name", ...}) is wrapped."""
    out: list[dict[str, Any]] = []
    for tool in tools or []:
        if not isinstance(tool, dict):
            continue
        function = tool.get("function") if tool.get("type") == "function" else tool
        if not isinstance(function, dict) or not function.get("name"):
            continue
        out.append(
            {
                "type": "function",
                "function": {
                    "name": str(function["name"]),
                    "description": str(function.get("description") or ""),
                    "parameters": function.get("parameters")
                    or function.get("input_schema")
                    or {"type": "object", "properties": {}},
                },
            }
        )
    return out


def build_messages(
    domain: str,
    task_instruction: str,
    history: list[tuple[Any, str]],
    *,
    tools: list | None = None,
    submit_tool: str = "",
    system_prompt: str = "",
) -> list[dict[str, Any]]:
    """The chat so far: the system prompt (a recorded trajectory's own one when given, else
    this project's), the task, then every (action, observation). With tools, an action that
    is a tool call is the assistant's tool call and its observation the tool's result; a
    text action and its observation are turns as `inference.agent` writes them."""
    if not tools:
        messages = build_agent_messages(domain, task_instruction, [])
        if system_prompt:
            messages[0] = {"role": "system", "content": system_prompt}
    else:
        finish = FINISH_WITH_TOOL.format(tool=submit_tool) if submit_tool else FINISH_WITH_TEXT
        system = system_prompt or TOOLS_SYSTEM_PROMPT.format(domain=domain, finish=finish)
        messages = [
            {"role": "system", "content": system},
            {"role": "user", "content": f"Task: {task_instruction or '(no instruction given)'}"},
        ]
    for i, (action, observation) in enumerate(history):
        if tools and isinstance(action, dict) and "name" in action:
            call_id = f"call_{i}"
            arguments = action.get("arguments")
            messages.append(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": call_id,
                            "type": "function",
                            "function": {
                                "name": str(action["name"]),
                                "arguments": json.dumps(
                                    arguments if arguments is not None else {}, ensure_ascii=False
                                ),
                            },
                        }
                    ],
                }
            )
            messages.append({"role": "tool", "tool_call_id": call_id, "content": observation})
        else:
            text = action if isinstance(action, str) else json.dumps(action, ensure_ascii=False)
            messages.extend(agent_turn_messages(text, observation))
    return messages


class CampaignAgent:
    """An OpenAI-compatible chat model playing the agent of a campaign's episodes (one
    client, used by many threads: the OpenAI client is thread-safe)."""

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key: str = "EMPTY",
        temperature: float = 0.7,
        max_tokens: int = 1024,
        timeout: float = 120.0,
        max_retries: int = 2,
    ):
        if not base_url:
            raise AgentError(f"the agent model {model!r} has no base URL")
        from openai import DefaultHttpxClient, OpenAI

        self.model = model
        self.base_url = base_url
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.client = OpenAI(
            base_url=base_url,
            api_key=api_key or "EMPTY",
            timeout=timeout,
            max_retries=max_retries,
            # a redirect would lead the request to a host the studio did not check
            http_client=DefaultHttpxClient(follow_redirects=False),
        )

    def _failed(self, why: str) -> AgentError:
        return AgentError(f"the agent model {self.model!r} at {self.base_url} {why}")

    def propose(
        self, messages: list[dict[str, Any]], *, tools: list | None = None, seed: int | None = None
    ) -> Proposal:
        """The next action (or the final answer) for the chat `messages`. AgentError, naming
        the model and its URL, when the model cannot be reached or answers with nothing."""
        import openai

        kwargs: dict[str, Any] = {
            "model": self.model,
            "messages": cast(Any, messages),
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
        }
        offered = openai_tools(tools)
        if offered:
            kwargs["tools"] = offered
        if seed is not None:
            kwargs["seed"] = seed
        try:
            response = self.client.chat.completions.create(**kwargs)
        except openai.OpenAIError as exc:
            raise self._failed(f"failed: {exc}") from exc
        usage = getattr(response, "usage", None)
        tokens_in = int(getattr(usage, "prompt_tokens", 0) or 0)
        tokens_out = int(getattr(usage, "completion_tokens", 0) or 0)
        if not response.choices:
            raise self._failed("returned no choice")
        message = response.choices[0].message
        text = message.content or ""
        calls = list(getattr(message, "tool_calls", None) or [])
        if calls:
            function = getattr(calls[0], "function", None)
            name = getattr(function, "name", "") or ""
            raw_arguments = getattr(function, "arguments", "") or "{}"
            if not name:
                raise self._failed("returned a tool call without a tool name")
            try:
                arguments = json.loads(raw_arguments)
            except json.JSONDecodeError as exc:
                raise self._failed(
                    f"called {name} with arguments that are not JSON ({exc.msg}): "
                    f"{raw_arguments[:200]!r}"
                ) from None
            if not isinstance(arguments, dict):
                raise self._failed(f"called {name} with arguments that are not an object")
            thought = parse_agent_reply(text).thought if text else ""
            return Proposal(
                action={"name": name, "arguments": arguments},
                final=False,
                thought=thought,
                raw=text,
                tokens_in=tokens_in,
                tokens_out=tokens_out,
            )
        decision = parse_agent_reply(text)
        if decision.final:
            return Proposal(
                action=None,
                final=True,
                final_answer=decision.action,
                thought=decision.thought,
                raw=text,
                tokens_in=tokens_in,
                tokens_out=tokens_out,
            )
        if not decision.action.strip():
            raise self._failed("answered with neither an action nor a final answer")
        return Proposal(
            action=decision.action,
            final=False,
            thought=decision.thought,
            raw=text,
            tokens_in=tokens_in,
            tokens_out=tokens_out,
        )


__all__ = ["AgentError", "CampaignAgent", "Proposal", "build_messages", "openai_tools"]
