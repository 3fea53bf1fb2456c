"""What the campaign tests share: the Northwind calendar world (the demo's rewarded world), a
scripted agent on the fake OpenAI-compatible server, a world model that answers every call,
and a campaign made over them."""

from __future__ import annotations

import json
import threading
from typing import Any

from inference.worlds import parse_world
from studio.demo_data.worlds_text import CALENDAR_WORLD
from studio.services.campaigns import CampaignData, create_campaign, world_tasks
from studio.services.endpoints import EndpointData, save_endpoint
from studio.services.worlds import save_world

WORLD_ANSWER = (
    '<predicted_observation>{"events": [{"id": "evt_7Qk2"}, {"id": "evt_93fA"}, '
    '{"id": "evt_1b0c"}]}</predicted_observation>'
)


def calendar_world(project):
    return save_world(project, parse_world(CALENDAR_WORLD)).world


def tool_call(name: str, arguments: dict[str, Any], call_id: str = "call_0") -> dict[str, Any]:
    return {
        "content": None,
        "tool_calls": [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments)},
            }
        ],
    }


class ScriptedAgent:
    """An agent that lists Thursday's events, then submits: "3" to the counting task (its
    right answer), "11:30" to the sync task (right, but it never moved the sync: the
    rubric's state checks fail). `hold_at`: the chat request of that number waits for
    `release` (a test that cancels while an episode is in flight)."""

    def __init__(self, hold_at: int | None = None):
        self.hold_at = hold_at
        self.release = threading.Event()
        self.arrived = threading.Event()

    def __call__(self, body: dict, index: int):
        if self.hold_at is not None and index == self.hold_at:
            self.arrived.set()
            self.release.wait(timeout=60)
        messages = body["messages"]
        task = messages[1]["content"]
        taken = sum(1 for m in messages if m["role"] == "tool")
        if taken == 0:
            return tool_call("list_events", {"date": "2026-03-12"})
        answer = "3" if "How many events" in task else "11:30"
        return tool_call("submit_answer", {"answer": answer}, "call_1")


def endpoints(project, agent_url: str, world_url: str):
    agent = save_endpoint(
        project,
        EndpointData(
            name="scripted agent", role="agent", kind="openai", base_url=agent_url, model="agent-m"
        ),
    ).endpoint
    world = save_endpoint(
        project,
        EndpointData(
            name="fake world", role="world", kind="openai", base_url=world_url, model="world-m"
        ),
    ).endpoint
    return agent, world


def make_campaign(project, user, world, agent, world_model, **changes):
    data = {
        "name": "calendar sweep",
        "world": world,
        "source": "world",
        "agent": agent,
        "world_model": world_model,
        "episodes_per_task": 2,
        "max_steps": 5,
        "seed": 7,
        "concurrency": 2,
        **changes,
    }
    if "tasks" not in data:
        data["tasks"] = tuple(world_tasks(world, ["count-thursday", "move-sync"]))
    return create_campaign(project, user, CampaignData(**data))
