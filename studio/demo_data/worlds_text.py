"""Demo worlds with text observations: MCP tools, search, terminal and SWE."""

from __future__ import annotations

import json
import re

from studio.demo_data.system_prompts import SYSTEM

ESC = "\x1b"


def sgr(code: str, text: str) -> str:
    return f"{ESC}[{code}m{text}{ESC}[0m"


def call(name: str, **arguments) -> str:
    return json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)


def result(value) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False)


def tool(name: str, description: str, properties: dict, required: list[str]) -> dict:
    return {
        "name": name,
        "description": description,
        "inputSchema": {"type": "object", "properties": properties, "required": required},
    }


S = {"type": "string"}
META = {"source": "written for the AgentWorld Studio demo", "recorded_with": "demo-agent 0.3"}

# ------------------------------------------------------------------------------ MCP: calendar

CAL_TOOLS = [
    tool(
        "list_events",
        "List the events on the user's calendar for one day.",
        {"date": {"type": "string", "format": "date"}, "timezone": S},
        ["date"],
    ),
    tool("get_event", "Full details of one event.", {"event_id": S}, ["event_id"]),
    tool(
        "find_free_slots",
        "Slots of the given length when every attendee is free on a date.",
        {
            "attendees": {"type": "array", "items": S},
            "date": {"type": "string", "format": "date"},
            "duration_minutes": {"type": "integer", "minimum": 5},
            "working_hours": {
                "type": "object",
                "properties": {"start": S, "end": S},
            },
            "timezone": S,
        },
        ["attendees", "date", "duration_minutes"],
    ),
    tool(
        "update_event",
        "Move or edit an event the user organises.",
        {
            "event_id": S,
            "start": {"type": "string", "format": "date-time"},
            "end": {"type": "string", "format": "date-time"},
            "notify_attendees": {"type": "boolean", "default": True},
        },
        ["event_id"],
    ),
    tool(
        "send_email",
        "Send a plain-text email from the user's account.",
        {"to": {"type": "array", "items": S}, "subject": S, "body": S},
        ["to", "subject", "body"],
    ),
]

ATTENDEES = [
    "priya.natarajan@northwind.dev",
    "marco.bellini@northwind.dev",
    "lea.hoffmann@northwind.dev",
]
ME = "alex.kim@northwind.dev"
TZ = "Europe/Berlin"

MCP_CALENDAR = {
    "title": "Move the search relevance sync off the offsite day",
    "domain": "mcp",
    "task_instruction": (
        "The 'Search relevance sync' on Thursday 12 March 2026 clashes with the quarterly "
        "planning offsite. Move it to the first 30-minute slot on Friday 13 March when every "
        "attendee is free (working hours 09:00-18:00 Berlin time), then email the attendees."
    ),
    "system_prompt": SYSTEM["mcp"],
    "tools": CAL_TOOLS,
    "tags": ["demo", "calendar", "multi-tool"],
    "metadata": {**META, "mcp_servers": ["calendar", "mail"], "outcome": "success"},
    "steps": [
        {
            "thinking": "First find the meeting on Thursday and check it really clashes.",
            "action": call("list_events", date="2026-03-12", timezone=TZ),
            "observation": result(
                {
                    "date": "2026-03-12",
                    "timezone": TZ,
                    "events": [
                        {
                            "id": "evt_7Qk2",
                            "title": "Quarterly planning offsite",
                            "start": "2026-03-12T09:00:00+01:00",
                            "end": "2026-03-12T17:00:00+01:00",
                            "organizer": "dana.okoye@northwind.dev",
                            "response": "accepted",
                        },
                        {
                            "id": "evt_93fA",
                            "title": "Search relevance sync",
                            "start": "2026-03-12T14:00:00+01:00",
                            "end": "2026-03-12T14:30:00+01:00",
                            "organizer": ME,
                            "response": "organizer",
                        },
                        {
                            "id": "evt_1b0c",
                            "title": "1:1 Alex / Jonas",
                            "start": "2026-03-12T17:30:00+01:00",
                            "end": "2026-03-12T18:00:00+01:00",
                            "organizer": "jonas.berg@northwind.dev",
                            "response": "tentative",
                        },
                    ],
                }
            ),
            "meta": {"tool_name": "list_events", "server": "calendar"},
        },
        {
            "action": call("get_event", event_id="evt_93fA"),
            "observation": result(
                {
                    "id": "evt_93fA",
                    "title": "Search relevance sync",
                    "start": "2026-03-12T14:00:00+01:00",
                    "end": "2026-03-12T14:30:00+01:00",
                    "organizer": ME,
                    "attendees": [
                        {"email": ME, "response": "organizer"},
                        {"email": ATTENDEES[0], "response": "accepted"},
                        {"email": ATTENDEES[1], "response": "accepted"},
                        {"email": ATTENDEES[2], "response": "needsAction"},
                    ],
                    "location": "Room Kepler / meet.northwind.dev/srs",
                    "description": "Weekly check of ranking metrics (nDCG@10, zero-result rate).",
                    "recurrence": None,
                    "sequence": 1,
                }
            ),
            "meta": {"tool_name": "get_event", "server": "calendar"},
        },
        {
            "thinking": "Four people including me; ask for 30-minute slots on Friday.",
            "action": call(
                "find_free_slots",
                attendees=[ME, *ATTENDEES],
                date="2026-03-13",
                duration_minutes=30,
                working_hours={"start": "09:00", "end": "18:00"},
                timezone=TZ,
            ),
            "observation": result(
                {
                    "date": "2026-03-13",
                    "timezone": TZ,
                    "checked_attendees": 4,
                    "slots": [
                        {"start": "2026-03-13T11:30:00+01:00", "end": "2026-03-13T12:00:00+01:00"},
                        {"start": "2026-03-13T14:00:00+01:00", "end": "2026-03-13T14:30:00+01:00"},
                        {"start": "2026-03-13T16:30:00+01:00", "end": "2026-03-13T17:00:00+01:00"},
                    ],
                }
            ),
            "meta": {"tool_name": "find_free_slots", "server": "calendar"},
        },
        {
            "action": call(
                "update_event",
                event_id="evt_93fA",
                start="2026-03-13T11:30:00+01:00",
                end="2026-03-13T12:00:00+01:00",
                notify_attendees=False,
            ),
            "observation": result(
                {
                    "id": "evt_93fA",
                    "status": "updated",
                    "start": "2026-03-13T11:30:00+01:00",
                    "end": "2026-03-13T12:00:00+01:00",
                    "sequence": 2,
                    "conflicts": [],
                    "notified": [],
                }
            ),
            "meta": {"tool_name": "update_event", "server": "calendar"},
        },
        {
            "thinking": "I turned off automatic notices, so write one short email myself.",
            "action": call(
                "send_email",
                to=ATTENDEES,
                subject="Search relevance sync moved to Fri 13 Mar, 11:30",
                body=(
                    "Hi all,\n\nThursday is the planning offsite, so I moved this week's search "
                    "relevance sync to Friday 13 March, 11:30-12:00 (Berlin), same room and link."
                    "\n\nThanks,\nAlex"
                ),
            ),
            "observation": result(
                {
                    "message_id": "<20260311.094412.5f2c@mail.northwind.dev>",
                    "accepted": ATTENDEES,
                    "rejected": [],
                }
            ),
            "meta": {"tool_name": "send_email", "server": "mail"},
        },
        {
            "action": call("list_events", date="2026-03-13", timezone=TZ),
            "observation": result(
                {
                    "date": "2026-03-13",
                    "timezone": TZ,
                    "events": [
                        {
                            "id": "evt_55dd",
                            "title": "Deploy window (search-api)",
                            "start": "2026-03-13T09:30:00+01:00",
                            "end": "2026-03-13T10:30:00+01:00",
                            "organizer": "release-bot@northwind.dev",
                            "response": "accepted",
                        },
                        {
                            "id": "evt_93fA",
                            "title": "Search relevance sync",
                            "start": "2026-03-13T11:30:00+01:00",
                            "end": "2026-03-13T12:00:00+01:00",
                            "organizer": ME,
                            "response": "organizer",
                        },
                        {
                            "id": "evt_c410",
                            "title": "Lunch & learn: learning-to-rank",
                            "start": "2026-03-13T12:30:00+01:00",
                            "end": "2026-03-13T13:30:00+01:00",
                            "organizer": "lea.hoffmann@northwind.dev",
                            "response": "accepted",
                        },
                    ],
                }
            ),
            "meta": {"tool_name": "list_events", "server": "calendar"},
        },
    ],
}

# ------------------------------------------------------------------------------ MCP: tracker

REPO = "northwind/ledger"
TRACKER_TOOLS = [
    tool(
        "search_issues",
        "Search issues in a repository with the tracker's query syntax.",
        {"repo": S, "query": S, "limit": {"type": "integer", "maximum": 50}},
        ["repo", "query"],
    ),
    tool(
        "get_issue",
        "One issue with its body and labels.",
        {"repo": S, "number": {"type": "integer"}},
        ["repo", "number"],
    ),
    tool("list_labels", "All labels defined in a repository.", {"repo": S}, ["repo"]),
    tool(
        "add_labels",
        "Add existing labels to an issue.",
        {"repo": S, "number": {"type": "integer"}, "labels": {"type": "array", "items": S}},
        ["repo", "number", "labels"],
    ),
    tool(
        "remove_label",
        "Remove one label from an issue.",
        {"repo": S, "number": {"type": "integer"}, "label": S},
        ["repo", "number", "label"],
    ),
    tool(
        "create_comment",
        "Comment on an issue (Markdown).",
        {"repo": S, "number": {"type": "integer"}, "body": S},
        ["repo", "number", "body"],
    ),
    tool(
        "close_issue",
        "Close an issue with a reason.",
        {
            "repo": S,
            "number": {"type": "integer"},
            "reason": {"type": "string", "enum": ["completed", "not_planned", "duplicate"]},
        },
        ["repo", "number"],
    ),
    tool(
        "assign_issue",
        "Assign users to an issue.",
        {"repo": S, "number": {"type": "integer"}, "assignees": {"type": "array", "items": S}},
        ["repo", "number", "assignees"],
    ),
]

MCP_TRACKER = {
    "title": "Triage this week's bug reports in northwind/ledger",
    "domain": "mcp",
    "task_instruction": (
        "Triage the open issues labelled needs-triage that were opened this week in "
        "northwind/ledger: give each an area label, close duplicates with a pointer to the "
        "original, and assign crash bugs to the on-call engineer @kim-oncall."
    ),
    "system_prompt": SYSTEM["mcp"],
    "tools": TRACKER_TOOLS,
    "tags": ["demo", "issue-tracker", "tool-error"],
    "metadata": {**META, "mcp_servers": ["tracker"], "outcome": "success"},
    "steps": [
        {
            "action": call(
                "search_issues",
                repo=REPO,
                query="is:open label:needs-triage created:>=2026-03-09",
                limit=10,
            ),
            "observation": result(
                {
                    "total_count": 3,
                    "items": [
                        {
                            "number": 422,
                            "title": "App crashes on CSV import if a column header is blank",
                            "user": "fern-q",
                            "labels": ["bug", "needs-triage"],
                            "comments": 0,
                            "created_at": "2026-03-10T16:02:51Z",
                        },
                        {
                            "number": 421,
                            "title": "Invoice totals off by one cent for EUR with 3 line items",
                            "user": "tobias-acct",
                            "labels": ["bug", "needs-triage"],
                            "comments": 2,
                            "created_at": "2026-03-10T08:47:13Z",
                        },
                        {
                            "number": 418,
                            "title": "Crash when importing CSV with an empty header cell",
                            "user": "mkowalski",
                            "labels": ["bug", "needs-triage"],
                            "comments": 1,
                            "created_at": "2026-03-09T11:20:05Z",
                        },
                    ],
                }
            ),
            "meta": {"tool_name": "search_issues"},
        },
        {
            "thinking": "#422 and #418 sound like the same crash. Read #422 to compare.",
            "action": call("get_issue", repo=REPO, number=422),
            "observation": result(
                {
                    "number": 422,
                    "title": "App crashes on CSV import if a column header is blank",
                    "state": "open",
                    "labels": ["bug", "needs-triage"],
                    "assignees": [],
                    "body": (
                        "Steps: Import > CSV, pick a file whose second header cell is empty.\n\n"
                        '```\nTraceback (most recent call last):\n  File "ledger/importers/csv_'
                        'import.py", line 88, in read_header\n    key = cell.strip().lower()\n'
                        "AttributeError: 'NoneType' object has no attribute 'strip'\n```\n\n"
                        "ledger 2.14.1 on Windows 11."
                    ),
                    "created_at": "2026-03-10T16:02:51Z",
                }
            ),
            "meta": {"tool_name": "get_issue"},
        },
        {
            "action": call(
                "add_labels", repo=REPO, number=422, labels=["duplicate", "area/import"]
            ),
            "observation": result(
                {
                    "error": {
                        "code": "label_not_found",
                        "message": (
                            "Label 'area/import' does not exist in northwind/ledger. "
                            "Did you mean 'area:import'?"
                        ),
                    }
                }
            ),
            "meta": {"tool_name": "add_labels", "is_error": True},
        },
        {
            "action": call("list_labels", repo=REPO),
            "observation": result(
                {
                    "labels": [
                        {"name": "area:billing", "color": "1d76db"},
                        {"name": "area:import", "color": "5319e7"},
                        {"name": "area:reports", "color": "0e8a16"},
                        {"name": "bug", "color": "d73a4a"},
                        {"name": "crash", "color": "b60205"},
                        {"name": "duplicate", "color": "cfd3d7"},
                        {"name": "needs-triage", "color": "fbca04"},
                    ]
                }
            ),
            "meta": {"tool_name": "list_labels"},
        },
        {
            "action": call(
                "add_labels", repo=REPO, number=422, labels=["duplicate", "area:import"]
            ),
            "observation": result(
                {"number": 422, "labels": ["bug", "needs-triage", "duplicate", "area:import"]}
            ),
            "meta": {"tool_name": "add_labels"},
        },
        {
            "action": call(
                "create_comment",
                repo=REPO,
                number=422,
                body="Thanks for the report! This is the same crash as #418, closing as a duplicate.",
            ),
            "observation": result(
                {
                    "id": 1939912,
                    "url": "https://tracker.northwind.dev/northwind/ledger/issues/422#comment-1939912",
                    "created_at": "2026-03-11T09:52:40Z",
                }
            ),
            "meta": {"tool_name": "create_comment"},
        },
        {
            "action": call("close_issue", repo=REPO, number=422, reason="duplicate"),
            "observation": result({"number": 422, "state": "closed", "state_reason": "duplicate"}),
            "meta": {"tool_name": "close_issue"},
        },
        {
            "thinking": "#418 is the original crash: label it and hand it to on-call.",
            "action": call("add_labels", repo=REPO, number=418, labels=["crash", "area:import"]),
            "observation": result(
                {"number": 418, "labels": ["bug", "needs-triage", "crash", "area:import"]}
            ),
            "meta": {"tool_name": "add_labels"},
        },
        {
            "action": call("assign_issue", repo=REPO, number=418, assignees=["kim-oncall"]),
            "observation": result({"number": 418, "assignees": ["kim-oncall"]}),
            "meta": {"tool_name": "assign_issue"},
        },
        {
            "action": call("add_labels", repo=REPO, number=421, labels=["area:billing"]),
            "observation": result(
                {"number": 421, "labels": ["bug", "needs-triage", "area:billing"]}
            ),
            "meta": {"tool_name": "add_labels"},
        },
    ],
}

MCP = [MCP_CALENDAR, MCP_TRACKER]

# ------------------------------------------------------------------------------ search


def search(query: str) -> str:
    return f'search(query="{query}")'


def visit(url: str) -> str:
    return f'visit(url="{url}")'


def results_json(query: str, items: list[tuple[str, str, str]]) -> str:
    return result(
        {
            "query": query,
            "results": [{"title": t, "url": u, "snippet": s} for t, u, s in items],
        }
    )


def page(title: str, url: str, text: str) -> str:
    return f"Title: {title}\nURL: {url}\n\n{text}"


Q1 = "Python 3.12 release date"
Q2 = "PEP 701 f-string nested quotes example"
SEARCH_NATIVE = {
    "title": "When did Python 3.12 ship, and what changed in f-strings?",
    "domain": "search",
    "task_instruction": (
        "When was Python 3.12.0 released, and what does PEP 701 change about f-strings? "
        "Give the date and two concrete things that became legal."
    ),
    "system_prompt": SYSTEM["search"],
    "tools": [],
    "tags": ["demo", "python", "fact-finding"],
    "metadata": {
        **META,
        "answer": "2 October 2023; reusing the outer quote and backslashes inside",
    },
    "steps": [
        {
            "action": search(Q1),
            "observation": results_json(
                Q1,
                [
                    (
                        "Python Release Python 3.12.0 | Python.org",
                        "https://www.python.org/downloads/release/python-3120/",
                        "Release date: Oct. 2, 2023. Python 3.12.0 is the newest major release "
                        "of the Python programming language ...",
                    ),
                    (
                        "What's New In Python 3.12 — Python 3 documentation",
                        "https://docs.python.org/3/whatsnew/3.12.html",
                        "This article explains the new features in Python 3.12, compared to "
                        "3.11. Python 3.12 was released on October 2, 2023.",
                    ),
                    (
                        "PEP 693 – Python 3.12 Release Schedule",
                        "https://peps.python.org/pep-0693/",
                        "3.12.0 final: Monday, 2023-10-02. Subsequent bugfix releases every "
                        "two months ...",
                    ),
                    (
                        "Python 3.12 is out: faster, friendlier error messages (news)",
                        "https://lwn.example.net/Articles/946120/",
                        "The Python core team shipped 3.12 this week with a more flexible "
                        "f-string grammar and per-interpreter GIL groundwork ...",
                    ),
                ],
            ),
        },
        {
            "thinking": "The date agrees across three sources. Now the f-string part.",
            "action": visit("https://docs.python.org/3/whatsnew/3.12.html"),
            "observation": page(
                "What's New In Python 3.12",
                "https://docs.python.org/3/whatsnew/3.12.html",
                "Summary – Release highlights\n\n"
                "New grammar features:\n"
                "  * PEP 695, a dedicated syntax for type parameters and the `type` statement\n"
                "  * PEP 701, f-strings become part of the formal grammar\n\n"
                "Interpreter improvements:\n"
                "  * PEP 684, a unique GIL per sub-interpreter\n"
                "  * PEP 669, low-impact monitoring for debuggers and profilers\n"
                "  * Better 'Did you mean ...' suggestions in error messages\n\n"
                "Removals: the distutils package (PEP 632) is gone from the standard library.",
            ),
        },
        {
            "action": search(Q2),
            "observation": results_json(
                Q2,
                [
                    (
                        "PEP 701 – Syntactic formalization of f-strings",
                        "https://peps.python.org/pep-0701/",
                        "This document proposes to lift some of the restrictions originally "
                        "formulated in PEP 498 and to provide a formalized grammar for f-strings",
                    ),
                    (
                        "Python 3.12: you can finally reuse quotes inside f-strings",
                        "https://blog.example.dev/python-312-fstrings",
                        'f"{\', \'.join(names)}" and even f"{d["key"]}" now parse, because the '
                        "tokenizer handles f-strings itself ...",
                    ),
                    (
                        "f-strings — Lexical analysis — Python 3.12 docs",
                        "https://docs.python.org/3.12/reference/lexical_analysis.html#f-strings",
                        "Changed in version 3.12: Prior to Python 3.12, reuse of the same quoting "
                        "type of the outer f-string inside a replacement field was not possible.",
                    ),
                ],
            ),
        },
        {
            "action": visit("https://peps.python.org/pep-0701/"),
            "observation": page(
                "PEP 701 – Syntactic formalization of f-strings",
                "https://peps.python.org/pep-0701/",
                "Status: Final · Type: Standards Track · Python-Version: 3.12\n\n"
                "What becomes possible:\n"
                '  1. Reusing the enclosing quote: f"{user["name"]}" is valid.\n'
                "  2. Backslashes and unicode escapes in expressions: f\"{'\\n'.join(lines)}\".\n"
                "  3. Expressions spanning several lines, with # comments, inside the braces.\n"
                "  4. Arbitrary nesting depth of f-strings inside f-strings.\n\n"
                "Implementation note: f-strings are now tokenized by the regular tokenizer, so "
                "syntax errors point at the exact position inside the replacement field.",
            ),
        },
        {
            "thinking": "Double-check whether backslashes were really forbidden before 3.12.",
            "action": search("f-string expression part cannot include a backslash python 3.11"),
            "observation": results_json(
                "f-string expression part cannot include a backslash python 3.11",
                [
                    (
                        "SyntaxError: f-string expression part cannot include a backslash",
                        "https://stackoverflow.example.com/questions/44780357",
                        "Before Python 3.12 you have to move the backslash out of the braces, "
                        "e.g. nl = '\\n'; f'{nl.join(rows)}'. In 3.12 the original code works.",
                    ),
                    (
                        "Changelog — Python 3.12.0 final",
                        "https://docs.python.org/3.12/whatsnew/changelog.html",
                        "gh-102856: Implement PEP 701: f-strings are tokenized and parsed by the "
                        "PEG parser, lifting the backslash and quote restrictions.",
                    ),
                ],
            ),
        },
    ],
}

SEARCH_AWB = {
    "task": "search",
    "id": "search-demo-0007",
    "system_str": SYSTEM["search"],
    "task_instruction": (
        "Which happened first in 1937: the opening of the Golden Gate Bridge or the Hindenburg "
        "disaster? Give both dates."
    ),
    "turns": [
        {
            "state": "A fresh browser session with a search engine and a page reader; no pages open.",
            "action": search("Golden Gate Bridge opening date"),
            "observation": (
                'Search results for "Golden Gate Bridge opening date" (4 results)\n\n'
                "[1] Golden Gate Bridge - Wikipedia\n"
                "    https://en.wikipedia.org/wiki/Golden_Gate_Bridge\n"
                "    Suspension bridge across the Golden Gate strait. Opened to pedestrians on "
                "May 27, 1937 and to vehicles on May 28, 1937.\n\n"
                "[2] History of the Bridge | Golden Gate Bridge, Highway & Transportation District\n"
                "    https://www.goldengate.org/bridge/history-research/\n"
                "    Construction started January 5, 1933. Around 200,000 people walked across "
                "on Pedestrian Day, May 27, 1937.\n\n"
                "[3] Golden Gate Bridge opens - This Day in History\n"
                "    https://www.history-archive.example.org/this-day/golden-gate-bridge-opens\n"
                "    On May 28, 1937, President Roosevelt pressed a telegraph key in Washington "
                "to announce that the bridge was open to cars.\n\n"
                "[4] Golden Gate Bridge facts for kids\n"
                "    https://kids.example.edu/golden-gate-bridge\n"
                "    The bridge is 1.7 miles (2.7 km) long and was the longest suspension span "
                "in the world when it opened."
            ),
        },
        {
            "action": search("Hindenburg disaster date"),
            "observation": (
                'Search results for "Hindenburg disaster date" (3 results)\n\n'
                "[1] Hindenburg disaster - Wikipedia\n"
                "    https://en.wikipedia.org/wiki/Hindenburg_disaster\n"
                "    The German airship LZ 129 Hindenburg caught fire and was destroyed on "
                "May 6, 1937, while docking at Lakehurst, New Jersey.\n\n"
                "[2] The Hindenburg Disaster | Navy Lakehurst Historical Society\n"
                "    https://www.nlhs.example.org/hindenburg\n"
                "    At 7:25 p.m. on 6 May 1937 the airship burst into flames near the mooring "
                "mast at Naval Air Station Lakehurst.\n\n"
                "[3] Why the Hindenburg burned: hydrogen, static and doped fabric\n"
                "    https://science.example.com/airships/hindenburg-fire\n"
                "    Investigators blamed an electrostatic spark igniting leaking hydrogen."
            ),
        },
        {
            "action": visit("https://en.wikipedia.org/wiki/Hindenburg_disaster"),
            "observation": page(
                "Hindenburg disaster - Wikipedia",
                "https://en.wikipedia.org/wiki/Hindenburg_disaster",
                "Date: May 6, 1937 · Location: Naval Air Station Lakehurst, Manchester "
                "Township, New Jersey, U.S.\n\n"
                "The passenger airship LZ 129 Hindenburg, arriving from Frankfurt, burst into "
                "flames while trying to moor. Of the 97 people on board (36 passengers and 61 "
                "crew), 35 died, as did one member of the ground crew.\n\n"
                "Newsreel footage and Herbert Morrison's radio recording made it one of the "
                "most widely reported accidents of its time, and it effectively ended the era "
                "of passenger airships.",
            ),
        },
        {
            "action": search("Golden Gate Bridge Pedestrian Day 1937"),
            "observation": (
                'Search results for "Golden Gate Bridge Pedestrian Day 1937" (2 results)\n\n'
                "[1] Pedestrian Day, May 27, 1937 | Golden Gate Bridge\n"
                "    https://www.goldengate.org/bridge/history-research/opening-day/\n"
                "    The bridge opened at 6:00 a.m. on Thursday, May 27, 1937 for a day "
                "reserved for people on foot; cars followed the next day.\n\n"
                "[2] Photos: opening week of the Golden Gate Bridge, 1937\n"
                "    https://photos.sfarchive.example.org/collections/ggb-1937\n"
                "    Crowds on the deck during Pedestrian Day and the motorcade of May 28."
            ),
        },
        {
            "action": visit("https://www.goldengate.org/bridge/history-research/opening-day/"),
            "observation": page(
                "Opening Day 1937 | Golden Gate Bridge",
                "https://www.goldengate.org/bridge/history-research/opening-day/",
                "Pedestrian Day: Thursday, May 27, 1937, 6:00 a.m. Roughly 200,000 people "
                "crossed on foot, some on stilts or roller skates.\n\n"
                "Vehicles: Friday, May 28, 1937, at noon, after President Franklin D. Roosevelt "
                "signalled the opening from the White House by telegraph.\n\n"
                "Construction had begun on January 5, 1933, and the bridge was finished ahead of "
                "schedule and under budget.",
            ),
        },
    ],
}

# ------------------------------------------------------------------------------ terminal

RED_B = "1;31"
GREEN_B = "1;32"
BLUE_B = "01;34"

SYSTEMCTL_FAILED = "\n".join(
    [
        f"{sgr('0;1;31', '×')} backup.service - Nightly restic backup of /srv",
        "     Loaded: loaded (/etc/systemd/system/backup.service; static)",
        f"     Active: {sgr(RED_B, 'failed')} (Result: exit-code) since Wed 2026-03-11 "
        "02:14:09 UTC; 7h ago",
        f"TriggeredBy: {sgr('0;1;32', '●')} backup.timer",
        "    Process: 48211 ExecStart=/usr/local/bin/run-backup.sh (code=exited, status=1/FAILURE)",
        "   Main PID: 48211 (code=exited, status=1/FAILURE)",
        "        CPU: 41.337s",
        "",
        "Mar 11 02:13:58 ops-box run-backup.sh[48211]: creating snapshot of /srv ...",
        "Mar 11 02:14:09 ops-box run-backup.sh[48211]: "
        + sgr(
            RED_B,
            "Fatal: unable to save snapshot: write /var/backups/restic/data/3f/"
            "3f1c09ab: no space left on device",
        ),
        "Mar 11 02:14:09 ops-box systemd[1]: backup.service: Main process exited, "
        "code=exited, status=1/FAILURE",
        "Mar 11 02:14:09 ops-box systemd[1]: "
        + sgr(RED_B, "backup.service: Failed with result 'exit-code'."),
    ]
)

TERMINAL_NATIVE = {
    "title": "Nightly backup fails: disk full on /var/backups",
    "domain": "terminal",
    "task_instruction": (
        "The nightly backup (backup.service) failed last night on ops-box. Find out why, free "
        "space safely without deleting recent backups, and run the backup again."
    ),
    "system_prompt": SYSTEM["terminal"],
    "tools": [],
    "tags": ["demo", "sysadmin", "ansi-colours"],
    "metadata": {**META, "host": "ops-box", "user": "deploy", "outcome": "success"},
    "steps": [
        {
            "action": "systemctl status backup.service --no-pager",
            "observation": SYSTEMCTL_FAILED,
            "state": "deploy@ops-box:~$ (ssh session, sudo allowed)",
        },
        {
            "thinking": "No space left. Check the filesystems involved.",
            "action": "df -h /var/backups /srv",
            "observation": (
                "Filesystem      Size  Used Avail Use% Mounted on\n"
                "/dev/sdb1        98G   93G     0 100% /var/backups\n"
                "/dev/sda2       196G  121G   66G  65% /"
            ),
        },
        {
            "action": "ls -l --color=always /var/backups",
            "observation": "\n".join(
                [
                    "total 24",
                    f"drwxr-xr-x 2 root root  4096 Mar 11 06:25 {sgr(BLUE_B, 'dpkg')}",
                    f"drwx------ 2 root root 16384 Jan  9  2025 {sgr(BLUE_B, 'lost+found')}",
                    f"drwxr-x--- 2 postgres backup 4096 Mar 11 01:30 {sgr(BLUE_B, 'pg_dumps')}",
                    f"drwx------ 7 root root  4096 Jan  9  2025 {sgr(BLUE_B, 'restic')}",
                ]
            ),
        },
        {
            "action": "sudo du -xh --max-depth=1 /var/backups | sort -h",
            "observation": (
                "16K\t/var/backups/lost+found\n"
                "1.2G\t/var/backups/dpkg\n"
                "5.6G\t/var/backups/pg_dumps\n"
                "86G\t/var/backups/restic\n"
                "93G\t/var/backups"
            ),
        },
        {
            "thinking": "The restic repository is almost everything. Is anything pruning it?",
            "action": "cat /usr/local/bin/run-backup.sh",
            "observation": (
                "#!/usr/bin/env bash\n"
                "set -euo pipefail\n"
                "export RESTIC_REPOSITORY=/var/backups/restic\n"
                "export RESTIC_PASSWORD_FILE=/etc/restic/password\n"
                'echo "creating snapshot of /srv ..."\n'
                "restic backup /srv --exclude-caches --tag nightly --quiet\n"
                "# pruning disabled during the storage migration (OPS-412), re-enable after\n"
                "# restic forget --keep-daily 7 --keep-weekly 4 --prune"
            ),
        },
        {
            "action": (
                "sudo restic -r /var/backups/restic -p /etc/restic/password snapshots --compact "
                "| tail -n 5"
            ),
            "observation": (
                "e07b9d21  2026-03-08 02:11:47  ops-box  nightly\n"
                "5c2a81fe  2026-03-09 02:12:03  ops-box  nightly\n"
                "b93f0c44  2026-03-10 02:12:51  ops-box  nightly\n"
                "------------------------------------------------------\n"
                "68 snapshots"
            ),
        },
        {
            "thinking": (
                "68 nightly snapshots since January and nothing pruned. Apply the retention "
                "policy from the script: keeps a week of dailies and a month of weeklies."
            ),
            "action": (
                "sudo restic -r /var/backups/restic -p /etc/restic/password forget "
                "--keep-daily 7 --keep-weekly 4 --prune"
            ),
            "observation": (
                "Applying Policy: keep 7 daily, 4 weekly snapshots\n"
                "keep 10 snapshots:\n"
                "remove 58 snapshots:\n"
                "[0:01] 100.00%  58 / 58 files deleted\n"
                "58 snapshots have been removed, running prune\n"
                "loading indexes...\n"
                "finding data that is still in use for 10 snapshots\n"
                "[0:28] 100.00%  10 / 10 snapshots\n"
                "searching used packs...\n"
                "collecting packs for deletion and repacking\n"
                "to repack:          812 blobs / 402.113 MiB\n"
                "this removes:       377 blobs / 355.920 MiB\n"
                "to delete:        29881 blobs / 62.924 GiB\n"
                "total prune:      30258 blobs / 63.272 GiB\n"
                "remaining:        41902 blobs / 22.731 GiB\n"
                "unused size after prune: 1.102 GiB (4.85% of remaining size)\n"
                "repacking packs\n"
                "[0:04] 100.00%  25 / 25 packs repacked\n"
                "rebuilding index\n"
                "[0:01] 100.00%  19 / 19 packs processed\n"
                "removing 4105 old packs\n"
                "[0:09] 100.00%  4105 / 4105 files deleted\n"
                "done"
            ),
        },
        {
            "action": "df -h /var/backups",
            "observation": (
                "Filesystem      Size  Used Avail Use% Mounted on\n"
                "/dev/sdb1        98G   30G   63G  33% /var/backups"
            ),
        },
        {
            "action": (
                "sudo systemctl start backup.service; journalctl -u backup.service -n 4 "
                "--no-pager -o cat"
            ),
            "observation": (
                "creating snapshot of /srv ...\n"
                "backup.service: Deactivated successfully.\n"
                "Finished backup.service - Nightly restic backup of /srv.\n"
                "backup.service: Consumed 52.118s CPU time."
            ),
        },
        {
            "thinking": "Re-enable pruning so the disk does not fill up again.",
            "action": (
                "sudo sed -i 's/^# restic forget/restic forget/' /usr/local/bin/run-backup.sh "
                "&& tail -n 2 /usr/local/bin/run-backup.sh"
            ),
            "observation": (
                "# pruning disabled during the storage migration (OPS-412), re-enable after\n"
                "restic forget --keep-daily 7 --keep-weekly 4 --prune"
            ),
        },
    ],
}

TERMINAL_AWB = {
    "task": "terminal",
    "id": "terminal-demo-0412",
    "system_str": SYSTEM["terminal"],
    "task_instruction": (
        "Find which client IP addresses caused the most 404 responses in today's nginx access "
        "log on web-02 and report the top three with their counts."
    ),
    "turns": [
        {
            "state": (
                "bash as user analyst on host web-02, working directory /home/analyst. The nginx "
                "logs are in /var/log/nginx, readable by the adm group (analyst is a member)."
            ),
            "action": "ls -lh --color=always /var/log/nginx/",
            "observation": "\n".join(
                [
                    "total 62M",
                    "-rw-r----- 1 www-data adm  18M Mar 11 10:42 access.log",
                    "-rw-r----- 1 www-data adm  39M Mar 11 00:00 access.log.1",
                    f"-rw-r----- 1 www-data adm 3.1M Mar 10 00:00 {sgr('01;31', 'access.log.2.gz')}",
                    "-rw-r----- 1 www-data adm 212K Mar 11 10:40 error.log",
                    "-rw-r----- 1 www-data adm 1.4M Mar 11 00:00 error.log.1",
                ]
            ),
        },
        {
            "action": "head -n 3 /var/log/nginx/access.log",
            "observation": (
                '203.0.113.77 - - [11/Mar/2026:00:00:03 +0000] "GET /robots.txt HTTP/1.1" 200 '
                '67 "-" "Mozilla/5.0 (compatible; ExampleBot/2.1)"\n'
                '198.51.100.23 - - [11/Mar/2026:00:00:04 +0000] "GET /api/v1/products?page=2 '
                'HTTP/2.0" 200 4821 "https://shop.example.com/catalog" "Mozilla/5.0 (X11; Linux '
                'x86_64; rv:135.0) Gecko/20100101 Firefox/135.0"\n'
                '192.0.2.150 - - [11/Mar/2026:00:00:07 +0000] "GET /wp-login.php HTTP/1.1" 404 '
                '153 "-" "python-requests/2.31.0"'
            ),
        },
        {
            "action": "wc -l /var/log/nginx/access.log",
            "observation": "96412 /var/log/nginx/access.log",
        },
        {
            "action": "awk '$9 == 404' /var/log/nginx/access.log | wc -l",
            "observation": "3187",
        },
        {
            "action": (
                "awk '$9 == 404 {print $1}' /var/log/nginx/access.log | sort | uniq -c | "
                "sort -rn | head -n 3"
            ),
            "observation": "   1402 192.0.2.150\n    611 203.0.113.9\n    148 198.51.100.61",
        },
        {
            "action": (
                "awk '$1 == \"192.0.2.150\" && $9 == 404 {print $7}' /var/log/nginx/access.log "
                "| sort | uniq -c | sort -rn | head -n 5"
            ),
            "observation": (
                "    212 /wp-login.php\n"
                "    198 /.env\n"
                "    187 /xmlrpc.php\n"
                "    164 /admin/config.php\n"
                "    151 /.git/config"
            ),
        },
        {
            "action": "grep --color=always -m 2 '192.0.2.150' /var/log/nginx/error.log",
            "observation": "\n".join(
                [
                    "2026/03/11 00:00:07 [error] 1187#1187: *48113 open() "
                    '"/var/www/shop/wp-login.php" failed (2: No such file or directory), client: '
                    f"{sgr('01;31', '192.0.2.150')}, server: shop.example.com, request: "
                    '"GET /wp-login.php HTTP/1.1"',
                    "2026/03/11 00:00:08 [error] 1187#1187: *48114 open() "
                    '"/var/www/shop/.env" failed (2: No such file or directory), client: '
                    f"{sgr('01;31', '192.0.2.150')}, server: shop.example.com, request: "
                    '"GET /.env HTTP/1.1"',
                ]
            ),
        },
    ],
}

# ------------------------------------------------------------------------------ SWE

QUEUE_PY_BEFORE = '''\
     1\t"""A small priority queue on top of heapq."""
     2\t
     3\tfrom __future__ import annotations
     4\t
     5\timport heapq
     6\tfrom typing import Any
     7\t
     8\t
     9\tclass EmptyQueueError(LookupError):
    10\t    """Raised by pop() and peek() on an empty queue."""
    11\t
    12\t
    13\tclass PriorityQueue:
    14\t    def __init__(self) -> None:
    15\t        self._heap: list[tuple[int, Any]] = []
    16\t
    17\t    def __len__(self) -> int:
    18\t        return len(self._heap)
    19\t
    20\t    def push(self, item: Any, priority: int = 0) -> None:
    21\t        heapq.heappush(self._heap, (priority, item))
    22\t
    23\t    def pop(self) -> Any:
    24\t        if not self._heap:
    25\t            raise EmptyQueueError("pop from an empty PriorityQueue")
    26\t        return heapq.heappop(self._heap)[1]
    27\t
    28\t    def peek(self) -> Any:
    29\t        if not self._heap:
    30\t            raise EmptyQueueError("peek at an empty PriorityQueue")
    31\t        return self._heap[0][1]'''

NEW_TEST = """

def test_equal_priorities_pop_in_insertion_order():
    q = PriorityQueue()
    q.push({"id": "a"}, priority=1)
    q.push({"id": "b"}, priority=1)
    q.push({"id": "c"}, priority=0)
    assert [q.pop()["id"] for _ in range(3)] == ["c", "a", "b"]"""

PYTEST_FAIL = "\n".join(
    [
        f"{sgr('32', '.......')}{sgr('31', 'F')}" + " " * 65 + sgr("31", "[100%]"),
        sgr("31", "=" * 35 + " FAILURES " + "=" * 35),
        sgr("1;31", "_" * 16 + " test_equal_priorities_pop_in_insertion_order " + "_" * 16),
        "",
        "    def test_equal_priorities_pop_in_insertion_order():",
        "        q = PriorityQueue()",
        '        q.push({"id": "a"}, priority=1)',
        '>       q.push({"id": "b"}, priority=1)',
        "",
        f"{sgr('1;31', 'tests/test_queue.py')}:58: ",
        "_ " * 40,
        "",
        "self = <tinyqueue.queue.PriorityQueue object at 0x7f3a2c1b5e50>, item = {'id': 'b'}",
        "priority = 1",
        "",
        "    def push(self, item: Any, priority: int = 0) -> None:",
        ">       heapq.heappush(self._heap, (priority, item))",
        sgr("1;31", "E       TypeError: '<' not supported between instances of 'dict' and 'dict'"),
        "",
        f"{sgr('1;31', 'src/tinyqueue/queue.py')}:21: TypeError",
        sgr("36", "=" * 28 + " short test summary info " + "=" * 27),
        f"{sgr('31', 'FAILED')} tests/test_queue.py::{sgr('1', 'test_equal_priorities_pop_in_insertion_order')}"
        " - TypeError: '<' not supported between instances of 'dict' and 'dict'",
        f"{sgr('31', '=' * 23 + ' ')}{sgr('1;31', '1 failed')}, {sgr('32', '7 passed')}"
        f"{sgr('31', ' in 0.06s ' + '=' * 24)}",
    ]
)

PYTEST_PASS = "\n".join(
    [
        sgr("32", "........") + " " * 64 + sgr("32", "[100%]"),
        sgr("32", "=" * 31 + " ") + sgr("1;32", "8 passed") + sgr("32", " in 0.04s " + "=" * 31),
    ]
)

# Blank context lines of the diff are written as '.' (a lone space would be trailing
# whitespace in this source) and turned back into ' ' below.
GIT_DIFF_SOURCE = """\
diff --git a/src/tinyqueue/queue.py b/src/tinyqueue/queue.py
index 3b1f0d2..9a47c1e 100644
--- a/src/tinyqueue/queue.py
+++ b/src/tinyqueue/queue.py
@@ -3,6 +3,7 @@
 from __future__ import annotations
.
 import heapq
+import itertools
 from typing import Any
.
.
@@ -12,20 +13,23 @@ class EmptyQueueError(LookupError):
.
 class PriorityQueue:
     def __init__(self) -> None:
-        self._heap: list[tuple[int, Any]] = []
+        self._heap: list[tuple[int, int, Any]] = []
+        # A running counter breaks ties: equal priorities pop in insertion order
+        # and the items themselves are never compared.
+        self._counter = itertools.count()
.
     def __len__(self) -> int:
         return len(self._heap)
.
     def push(self, item: Any, priority: int = 0) -> None:
-        heapq.heappush(self._heap, (priority, item))
+        heapq.heappush(self._heap, (priority, next(self._counter), item))
.
     def pop(self) -> Any:
         if not self._heap:
             raise EmptyQueueError("pop from an empty PriorityQueue")
-        return heapq.heappop(self._heap)[1]
+        return heapq.heappop(self._heap)[2]
.
     def peek(self) -> Any:
         if not self._heap:
             raise EmptyQueueError("peek at an empty PriorityQueue")
-        return self._heap[0][1]
+        return self._heap[0][2]
diff --git a/tests/test_queue.py b/tests/test_queue.py
index 5d0e8a1..c2f7b39 100644
--- a/tests/test_queue.py
+++ b/tests/test_queue.py
@@ -50,3 +50,11 @@ def test_peek_does_not_remove():
     q = PriorityQueue()
     q.push("x")
     assert q.peek() == "x" and len(q) == 1
+
+
+def test_equal_priorities_pop_in_insertion_order():
+    q = PriorityQueue()
+    q.push({"id": "a"}, priority=1)
+    q.push({"id": "b"}, priority=1)
+    q.push({"id": "c"}, priority=0)
+    assert [q.pop()["id"] for _ in range(3)] == ["c", "a", "b"]"""
GIT_DIFF = re.sub(r"(?m)^\.$", " ", GIT_DIFF_SOURCE)

SWE = {
    "title": "tinyqueue #57: equal priorities raise TypeError for dict items",
    "domain": "swe",
    "task_instruction": (
        "Fix issue #57 in the tinyqueue repository: pushing two dict items with the same "
        "priority raises `TypeError: '<' not supported between instances of 'dict' and 'dict'`. "
        "Items with equal priority should come out in insertion order. Add a regression test."
    ),
    "system_prompt": SYSTEM["swe"],
    "tools": [],
    "tags": ["demo", "python", "bugfix", "patch"],
    "metadata": {**META, "repo": "tinyqueue", "issue": 57, "resolved": True},
    "steps": [
        {
            "state": "root@c0ffee:/repo# (tinyqueue checked out at main, 3f2a9e1)",
            "action": "find src tests -name '*.py' | sort",
            "observation": (
                "src/tinyqueue/__init__.py\nsrc/tinyqueue/queue.py\ntests/__init__.py\n"
                "tests/test_queue.py"
            ),
        },
        {
            "action": "cat -n src/tinyqueue/queue.py",
            "observation": QUEUE_PY_BEFORE,
        },
        {
            "thinking": "Reproduce with the example from the issue before touching anything.",
            "action": (
                'python -c "from tinyqueue import PriorityQueue; q = PriorityQueue(); '
                "q.push({'id': 1}, 5); q.push({'id': 2}, 5); print(q.pop())\""
            ),
            "observation": (
                "Traceback (most recent call last):\n"
                '  File "<string>", line 1, in <module>\n'
                '  File "/repo/src/tinyqueue/queue.py", line 21, in push\n'
                "    heapq.heappush(self._heap, (priority, item))\n"
                "TypeError: '<' not supported between instances of 'dict' and 'dict'"
            ),
        },
        {
            "action": f"cat >> tests/test_queue.py <<'EOF'{NEW_TEST}\nEOF\ntail -n 12 tests/test_queue.py",
            "observation": (
                "def test_peek_does_not_remove():\n"
                "    q = PriorityQueue()\n"
                '    q.push("x")\n'
                '    assert q.peek() == "x" and len(q) == 1' + NEW_TEST
            ),
        },
        {
            "action": "python -m pytest -q --color=yes",
            "observation": PYTEST_FAIL,
        },
        {
            "thinking": (
                "heapq compares the tuple's second element when priorities tie. Put a "
                "monotonically increasing counter between priority and item."
            ),
            "action": (
                "str_replace_editor str_replace src/tinyqueue/queue.py\n"
                "old_str:\nimport heapq\nfrom typing import Any\n"
                "new_str:\nimport heapq\nimport itertools\nfrom typing import Any"
            ),
            "observation": (
                "Edited src/tinyqueue/queue.py. Lines 3-8 now read:\n"
                "     3\tfrom __future__ import annotations\n"
                "     4\t\n"
                "     5\timport heapq\n"
                "     6\timport itertools\n"
                "     7\tfrom typing import Any\n"
                "     8\t"
            ),
        },
        {
            "action": (
                "str_replace_editor str_replace src/tinyqueue/queue.py\n"
                "old_str:\n"
                "        self._heap: list[tuple[int, Any]] = []\n"
                "new_str:\n"
                "        self._heap: list[tuple[int, int, Any]] = []\n"
                "        # A running counter breaks ties: equal priorities pop in insertion order\n"
                "        # and the items themselves are never compared.\n"
                "        self._counter = itertools.count()"
            ),
            "observation": (
                "Edited src/tinyqueue/queue.py. Lines 14-20 now read:\n"
                "    14\tclass PriorityQueue:\n"
                "    15\t    def __init__(self) -> None:\n"
                "    16\t        self._heap: list[tuple[int, int, Any]] = []\n"
                "    17\t        # A running counter breaks ties: equal priorities pop in insertion order\n"
                "    18\t        # and the items themselves are never compared.\n"
                "    19\t        self._counter = itertools.count()\n"
                "    20\t"
            ),
        },
        {
            "action": (
                "sed -i 's/(priority, item))$/(priority, next(self._counter), item))/; "
                "s/)\\[1\\]$/)[2]/; s/\\[0\\]\\[1\\]$/[0][2]/' src/tinyqueue/queue.py && "
                "sed -n '24,35p' src/tinyqueue/queue.py"
            ),
            "observation": (
                "    def push(self, item: Any, priority: int = 0) -> None:\n"
                "        heapq.heappush(self._heap, (priority, next(self._counter), item))\n"
                "\n"
                "    def pop(self) -> Any:\n"
                "        if not self._heap:\n"
                '            raise EmptyQueueError("pop from an empty PriorityQueue")\n'
                "        return heapq.heappop(self._heap)[2]\n"
                "\n"
                "    def peek(self) -> Any:\n"
                "        if not self._heap:\n"
                '            raise EmptyQueueError("peek at an empty PriorityQueue")\n'
                "        return self._heap[0][2]"
            ),
        },
        {
            "action": "python -m pytest -q --color=yes",
            "observation": PYTEST_PASS,
        },
        {
            "action": "git diff",
            "observation": GIT_DIFF,
        },
    ],
}


# ------------------------------------------------------------------------------ rewarded worlds
# World files (`inference.worlds`) that `load_demo` imports: each holds tasks with success
# criteria, a submit action and checks, so a new user's agent plays a rewarded task at once
# (`reset` with a task_id or a seed, then steps until it submits).

SUBMIT_TOOL = tool(
    "submit_answer",
    "End the task and hand in the final answer (the episode ends with this call).",
    {"answer": {"type": "string", "description": "the final answer, as the task asks for it"}},
    ["answer"],
)

CALENDAR_WORLD = {
    "name": "Northwind calendar",
    "domain": "mcp",
    "description": (
        "The calendar and mail tools of Alex Kim (alex.kim@northwind.dev), a search engineer "
        "at Northwind, in the week of 9 March 2026 (Europe/Berlin)."
    ),
    "rules": (
        "Only events Alex organises can be moved. find_free_slots answers from every "
        "attendee's calendar. update_event with notify_attendees true emails the attendees "
        "itself."
    ),
    "initial_state": "Wednesday 11 March 2026, 09:40 Berlin time. Alex's inbox is empty.",
    "knowledge": [
        "On Thursday 12 March the quarterly planning offsite (evt_7Qk2) runs 09:00-17:00; "
        "the 'Search relevance sync' (evt_93fA, organised by Alex, 30 minutes) is at 14:00.",
        "The sync's attendees: priya.natarajan@northwind.dev, marco.bellini@northwind.dev, "
        "lea.hoffmann@northwind.dev and Alex.",
        "On Friday 13 March every attendee is free 11:30-12:00, 14:00-14:30 and 16:30-17:00 "
        "(working hours 09:00-18:00); a deploy window takes 09:30-10:30.",
        "The 1:1 Alex / Jonas (evt_1b0c) on Thursday is at 17:30, organised by "
        "jonas.berg@northwind.dev.",
        "The sync meets in Room Kepler, with the video link meet.northwind.dev/srs.",
        "Friday 13 March also holds the deploy window (evt_55dd, 09:30-10:30, organised by "
        "release-bot@northwind.dev) and the lunch & learn on learning-to-rank (evt_c410, "
        "12:30-13:30, organised by lea.hoffmann@northwind.dev).",
    ],
    "tools": [*CAL_TOOLS, SUBMIT_TOOL],
    "state_keys": [
        {"name": "sync_moved", "description": "true once evt_93fA starts on Friday 13 March"},
        {"name": "attendees_told", "description": "true once the attendees were emailed"},
    ],
    "tasks": [
        {
            "id": "move-sync",
            "instruction": (
                "The 'Search relevance sync' on Thursday 12 March clashes with the planning "
                "offsite. Move it to the first 30-minute slot on Friday 13 March when every "
                "attendee is free, make sure the attendees are told, then submit the new "
                "start time (HH:MM, Berlin time)."
            ),
            "success_criteria": (
                "The sync (evt_93fA) was moved to Friday 13 March 11:30-12:00, the attendees "
                "were emailed (by update_event's notice or an email), and the answer is 11:30."
            ),
            "expected": "11:30",
            "max_steps": 12,
            # the sync's state keys say nothing of another task: its checks are its own
            "rubric": {
                "step": [],
                "episode": [
                    {"name": "answer", "kind": "exact", "target": "final_answer", "weight": 2},
                    {"name": "moved", "kind": "state", "key": "sync_moved", "weight": 1},
                    {"name": "told", "kind": "state", "key": "attendees_told", "weight": 1},
                ],
            },
        },
        {
            "id": "count-thursday",
            "instruction": (
                "How many events are on Alex's calendar on Thursday 12 March 2026? Submit "
                "the number."
            ),
            "success_criteria": "The agent listed Thursday's events and answered 3.",
            "expected": "3",
            "max_steps": 5,
            "rubric": {
                "step": [],
                "episode": [
                    {"name": "answer", "kind": "exact", "target": "final_answer", "weight": 1},
                ],
            },
        },
        {
            "id": "one-on-one-organizer",
            "instruction": (
                "Who organises Alex's 1:1 on Thursday 12 March 2026? Submit the organiser's "
                "email address."
            ),
            "success_criteria": (
                "The agent found the 1:1 Alex / Jonas (evt_1b0c) and answered "
                "jonas.berg@northwind.dev."
            ),
            "expected": "jonas.berg@northwind.dev",
            "max_steps": 5,
            "rubric": {
                "step": [],
                "episode": [
                    {"name": "answer", "kind": "exact", "target": "final_answer", "weight": 1},
                ],
            },
        },
        {
            "id": "sync-room",
            "instruction": (
                "In which meeting room does the 'Search relevance sync' take place? Submit "
                "the room's name."
            ),
            "success_criteria": "The agent read the sync's details and answered Room Kepler.",
            "expected": "Room Kepler",
            "max_steps": 6,
            "rubric": {
                "step": [],
                "episode": [
                    {"name": "answer", "kind": "contains", "target": "final_answer", "weight": 1},
                ],
            },
        },
        {
            "id": "deploy-window",
            "instruction": (
                "When does the deploy window on Friday 13 March 2026 start? Submit the start "
                "time (HH:MM, Berlin time)."
            ),
            "success_criteria": "The agent listed Friday's events and answered 09:30.",
            "expected": "09:30",
            "max_steps": 5,
            "rubric": {
                "step": [],
                "episode": [
                    {"name": "answer", "kind": "exact", "target": "final_answer", "weight": 1},
                ],
            },
        },
    ],
    # no world-level rubric: every check here belongs to one task, so a task typed at reset
    # has no reward (None) rather than a score against another task's answer and state
    "termination": {
        "terminal": [],
        "submit": {"tool": "submit_answer", "argument": "answer"},
    },
    "demonstrations": [
        {
            "action": call("get_event", event_id="evt_1b0c"),
            "observation": result(
                {
                    "id": "evt_1b0c",
                    "title": "1:1 Alex / Jonas",
                    "start": "2026-03-12T17:30:00+01:00",
                    "end": "2026-03-12T18:00:00+01:00",
                    "organizer": "jonas.berg@northwind.dev",
                }
            ),
        }
    ],
}

BACKUP_WORLD = {
    "name": "ops-box backups",
    "domain": "terminal",
    "description": (
        "ops-box, a Debian 12 server; the user deploy (sudo allowed) is logged in over ssh. "
        "backup.service runs /usr/local/bin/run-backup.sh nightly at 01:30."
    ),
    "rules": (
        "/var/backups is its own 98G filesystem (/dev/sdb1). restic's repository under "
        "/var/backups/restic keeps every snapshot until `restic forget` prunes it. Deleting "
        "files frees their space at once."
    ),
    "initial_state": "deploy@ops-box:~$ (ssh session, sudo allowed)",
    "knowledge": [
        "Last night's backup failed: restic wrote 'no space left on device' to the journal.",
        "df shows /var/backups 100% used (93G of 98G, 0 available).",
        "/var/backups/pg_dumps holds 61 nightly dumps of 1.2G each, from 9 January to 11 "
        "March 2026; the script never deletes old dumps.",
        "/var/backups/restic holds 24G; the dpkg folder 2M.",
    ],
    "files": {
        "/usr/local/bin/run-backup.sh": (
            "#!/bin/sh\nset -eu\n"
            "pg_dump -Fc shop > /var/backups/pg_dumps/shop-$(date +%F).dump\n"
            "restic -r /var/backups/restic backup /srv /etc\n"
        ),
    },
    "state_keys": [
        {"name": "space_freed", "description": "true once /var/backups has 10G or more free"},
        {"name": "recent_dumps_kept", "description": "false if a dump of the last 7 days is gone"},
    ],
    "tasks": [
        {
            "id": "why-failed",
            "instruction": (
                "The nightly backup on ops-box failed. Find out which filesystem is full and "
                "answer with a line 'FINAL ANSWER: <mount point>'."
            ),
            "success_criteria": "The agent looked at the failure and answered /var/backups.",
            "expected": "/var/backups",
            "max_steps": 8,
            "rubric": {
                "step": [],
                "episode": [
                    {"name": "answer", "kind": "exact", "target": "final_answer", "weight": 1},
                ],
            },
        },
        {
            "id": "free-space",
            "instruction": (
                "The nightly backup on ops-box failed for lack of space. Free at least 10G on "
                "/var/backups without deleting any dump of the last 7 days, then answer with "
                "'FINAL ANSWER: <free space df reports>'."
            ),
            "success_criteria": (
                "At least 10G is free on /var/backups, every dump of the last 7 days is still "
                "there, and the answer gives the free space df reported."
            ),
            "expected": "",
            "max_steps": 15,
            "rubric": {
                "step": [
                    # a small reward each time the shell shows the disk with room to spare
                    {
                        "name": "room",
                        "kind": "regex",
                        "pattern": r"/dev/sdb1\s+\S+\s+\S+\s+[1-9]\d+G",
                    },
                ],
                "episode": [
                    {"name": "freed", "kind": "state", "key": "space_freed", "weight": 2},
                    {"name": "kept", "kind": "state", "key": "recent_dumps_kept", "weight": 2},
                    {
                        "name": "said",
                        "kind": "regex",
                        "target": "final_answer",
                        "pattern": r"\d+(\.\d+)?G",
                    },
                ],
            },
        },
    ],
    # the termination applies to any task: wiping the backup disk ends every episode
    "termination": {
        "terminal": [
            # wiping the backup disk ends the episode (its state says the recent dumps are gone)
            {"name": "dumps-lost", "kind": "state", "key": "recent_dumps_kept", "equals": False},
        ],
        "submit": {"prefix": "FINAL ANSWER:"},
    },
}

REWARDED_WORLDS = [CALENDAR_WORLD, BACKUP_WORLD]
