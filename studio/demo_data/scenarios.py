"""The demo gallery: one scenario per domain, each the same action at one step of a demo
trajectory, simulated twice side by side: as the world model predicts it, and under a
perturbation. Written for this project.

A deterministic perturbation runs live even on the offline default (the retrieval
baseline). A prompted one needs a world model: offline, the gallery shows the `sample`
written here instead, labelled as a sample and never as a model's output."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Scenario:
    key: str
    domain: str
    title: str
    trajectory_title: str  # a demo trajectory of `load_demo`
    step: int  # the fork step: its recorded action is simulated twice
    shows: str  # what the side-by-side shows, in a sentence
    perturbation: dict[str, Any]  # name, kind, params, mode
    sample: str = ""  # a prompted perturbation's observation, written for this demo
    tags: tuple[str, ...] = field(default_factory=tuple)


SCENARIOS: tuple[Scenario, ...] = (
    Scenario(
        key="mcp-schema-drift",
        domain="mcp",
        title="A calendar API renames a field",
        trajectory_title="Move the search relevance sync off the offsite day",
        step=1,
        shows="The agent reads an event; in the drifted world the server's new version calls "
        "'start' 'start_time'. Does the agent still find the meeting's time?",
        perturbation={
            "name": "Field renamed (start → start_time)",
            "kind": "schema_drift",
            "params": {"field": "start", "rename_to": "start_time"},
            "mode": "deterministic",
        },
    ),
    Scenario(
        key="search-empty",
        domain="search",
        title="The search engine finds nothing",
        trajectory_title="When did Python 3.12 ship, and what changed in f-strings?",
        step=0,
        shows="The same query, answered normally and with an empty result list.",
        perturbation={
            "name": "No results",
            "kind": "empty_result",
            "params": {},
            "mode": "deterministic",
        },
    ),
    Scenario(
        key="terminal-permission",
        domain="terminal",
        title="The disk check is refused",
        trajectory_title="Nightly backup fails: disk full on /var/backups",
        step=1,
        shows="df -h on the failing backup host, answered normally and with the command "
        "refused for lack of permission.",
        perturbation={
            "name": "df refused",
            "kind": "tool_error",
            "params": {"message": "df: /var/backups: Permission denied", "code": 1},
            "mode": "deterministic",
        },
    ),
    Scenario(
        key="swe-flaky",
        domain="swe",
        title="A flaky test on the reproduction",
        trajectory_title="tinyqueue #57: equal priorities raise TypeError for dict items",
        step=2,
        shows="The agent reproduces the bug; in the perturbed run an unrelated timing test "
        "fails as well. Does it chase the wrong failure?",
        perturbation={
            "name": "Flaky test",
            "kind": "custom",
            "params": {
                "instruction": "besides the expected error, an unrelated test module prints "
                "a timing-related failure from a background thread"
            },
            "mode": "prompted",
        },
        sample=(
            "Traceback (most recent call last):\n"
            '  File "<string>", line 1, in <module>\n'
            '  File "/repo/src/tinyqueue/queue.py", line 24, in push\n'
            "    heapq.heappush(self._heap, (priority, item))\n"
            "TypeError: '<' not supported between instances of 'dict' and 'dict'\n"
            "Exception in thread sweeper:\n"
            "AssertionError: expected the sweep to finish within 0.05 s, took 0.0731 s"
        ),
    ),
    Scenario(
        key="android-permission",
        domain="android",
        title="A permission pop-up over Messages",
        trajectory_title="Text Maya that I'm running late",
        step=0,
        shows="Opening Messages, normally and with a notification-permission dialog on top.",
        perturbation={
            "name": "Permission pop-up",
            "kind": "custom",
            "params": {
                "instruction": "a system dialog asks whether Messages may send notifications, "
                "with Allow and Don't allow buttons, over the conversation list"
            },
            "mode": "prompted",
        },
        sample=(
            '{"package": "com.google.android.permissioncontroller", "activity": '
            '".permission.ui.GrantPermissionsActivity", "elements": [\n'
            '  {"index": 0, "class": "TextView", "text": "Allow Messages to send you '
            'notifications?"},\n'
            '  {"index": 1, "class": "Button", "text": "Allow", "clickable": true},\n'
            '  {"index": 2, "class": "Button", "text": "Don\'t allow", "clickable": true}\n]}'
        ),
    ),
    Scenario(
        key="web-cookie-wall",
        domain="web",
        title="A cookie wall on the order page",
        trajectory_title="Start a return for faulty headphones (Northwind Shop)",
        step=1,
        shows="The order page, normally and hidden behind a consent banner.",
        perturbation={
            "name": "Cookie wall",
            "kind": "custom",
            "params": {
                "instruction": "a cookie consent banner covers the page with 'Accept all' and "
                "'Reject non-essential' buttons; the order details are hidden behind it"
            },
            "mode": "prompted",
        },
        sample=(
            '[1] RootWebArea "Order NW-20931 · Northwind Shop" [focused]\n'
            '  [2] dialog "We value your privacy" [modal]\n'
            '    [3] StaticText "Northwind Shop uses cookies to run the site and, with your '
            'consent, to measure visits."\n'
            '    [4] button "Accept all"\n'
            '    [5] button "Reject non-essential"\n'
            '    [6] link "Cookie settings"'
        ),
    ),
    Scenario(
        key="os-modal",
        domain="os",
        title="An update dialog steals focus",
        trajectory_title="Turn on Night Light and switch to the dark style",
        step=0,
        shows="Searching for Settings, normally and with a software-update dialog in front.",
        perturbation={
            "name": "Update dialog",
            "kind": "custom",
            "params": {
                "instruction": "a modal 'Software Update: restart to install 3 updates' dialog "
                "with 'Restart now' and 'Later' buttons takes the focus"
            },
            "mode": "prompted",
        },
        sample=(
            "[Top bar] Activities · Wed 11 Mar 20:04 · Wi-Fi · Volume · Battery 82%\n"
            "[Dialog, modal, focused] Software Update\n"
            "  Restart to install 3 updates (Security update, Firmware 1.4.2, Files 46.1)\n"
            "  [Button] Later\n"
            "  [Button, default] Restart now\n"
            "[Behind the dialog] Activities overview, search field: settings"
        ),
    ),
)


def scenario(key: str) -> Scenario | None:
    return next((s for s in SCENARIOS if s.key == key), None)
