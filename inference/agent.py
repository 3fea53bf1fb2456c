"""The agent side of a rollout: an OpenAI-compatible chat model proposes the next action of the
trajectory while the world model answers it. Prompt written for this project."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, cast

AGENT_SYSTEM_PROMPT = """\
You are the agent in a {domain} environment, working step by step towards the task below.
After every action the environment answers with an observation; read it before acting again.

Reply in one of two ways, and nothing after the closing tag:
- to act:    <action>the exact action to execute</action>
- to finish: <final_answer>your answer or a short summary of what you achieved</final_answer>
You may reason first inside <think>...</think>. Use the action syntax of the history below
(the same tool-call JSON, shell commands or UI actions); do not invent observations."""

TOOLS_SECTION = "\n\nTools you can call (JSON schemas):\n{tools}"


class AgentError(RuntimeError):
    """The agent model could not be reached or answered with an error (readable message)."""


@dataclass
class AgentDecision:
    action: str
    final: bool
    thought: str = ""
    raw: str = ""


def build_agent_messages(
    domain: str,
    task_instruction: str,
    history: list[tuple[str, str]],
    tools: list | None = None,
) -> list[dict]:
    """System prompt, then the task, then each (action, observation) as assistant/user turns:
    the agent sees its own actions as its replies and the world's answers as the user's."""
    system = AGENT_SYSTEM_PROMPT.format(domain=domain)
    if tools:
        system += TOOLS_SECTION.format(tools=json.dumps(tools, ensure_ascii=False, indent=1))
    messages = [
        {"role": "system", "content": system},
        {"role": "user", "content": f"Task: {task_instruction or '(no instruction recorded)'}"},
    ]
    for action, observation in history:
        messages.extend(agent_turn_messages(action, observation))
    return messages


def agent_turn_messages(action: str, observation: str) -> list[dict]:
    """One finished step as the agent sees it: its action as its reply, the world's answer
    as the user's next message."""
    return [
        {"role": "assistant", "content": f"<action>{action}</action>"},
        {"role": "user", "content": f"Observation:\n{observation}"},
    ]


_THINK = re.compile(r"<think>(.*?)</think>", re.S)
_ACTION = re.compile(r"<action>(.*?)(?:</action>|$)", re.S)
_FINAL = re.compile(r"<final_answer>(.*?)(?:</final_answer>|$)", re.S)


def parse_agent_reply(text: str) -> AgentDecision:
    """Final answer wins over an action; with neither tag the whole visible text is the action."""
    thought = "\n".join(m.strip() for m in _THINK.findall(text))
    visible = _THINK.sub("", text)
    if "</think>" in visible:  # an orphan closing tag: the reasoning came before it
        before, visible = visible.rsplit("</think>", 1)
        thought = (thought + "\n" + before).strip()
    final = _FINAL.search(visible)
    if final:
        return AgentDecision(final.group(1).strip(), True, thought, text)
    action = _ACTION.search(visible)
    chosen = action.group(1).strip() if action else visible.strip()
    return AgentDecision(chosen, False, thought, text)


class AgentModel:
    """An OpenAI-compatible chat model playing the agent."""

    def __init__(self, *, base_url: str, model: str, api_key: str = "EMPTY", timeout: float = 120):
        if not base_url:
            raise AgentError(
                "a rollout needs an agent model: set AGENT_MODEL_BASE_URL (or WORLD_MODEL_BASE_URL)"
            )
        from openai import DefaultHttpxClient, OpenAI

        self.model = model
        self.base_url = base_url
        self.client = OpenAI(
            base_url=base_url,
            api_key=api_key,
            timeout=timeout,
            max_retries=2,
            http_client=DefaultHttpxClient(follow_redirects=False),
        )

    def propose(
        self, messages: list[dict], *, temperature: float = 0.7, max_tokens: int = 1024
    ) -> AgentDecision:
        import openai

        try:
            response = self.client.chat.completions.create(
                model=self.model,
                messages=cast(Any, messages),
                temperature=temperature,
                max_tokens=max_tokens,
            )
        except openai.OpenAIError as exc:
            raise AgentError(
                f"The agent model {self.model!r} at {self.base_url} failed: {exc}"
            ) from exc
        if not response.choices:
            raise AgentError(
                f"The agent model {self.model!r} at {self.base_url} returned no choice"
            )
        text = response.choices[0].message.content or ""
        return parse_agent_reply(text)
