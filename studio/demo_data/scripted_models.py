"""Scripted stand-ins for an agent model and a world model, served over the OpenAI-compatible
chat API on 127.0.0.1, so that a new user without a GPU or weights can run campaigns and
episodes of the demo worlds end to end (`python manage.py demo_models`, started by
scripts/dev.sh). They are NOT models: a few hundred lines of rules, and they say so in every
answer (the `model` field, `system_fingerprint`, the world's thinking) and in the names of the
studio's endpoints that use them ("Scripted demo agent", "Scripted demo world").

- `scripted-agent` reads the chat (the task, the tools passed as OpenAI `tools` or listed in
  the system prompt, its earlier actions and the observations) and answers one action: an
  OpenAI tool call when tools are given (arguments that satisfy the tool's JSON Schema), else
  `<action>...</action>` text, and at the end the world's submit tool (`submit_answer`), a
  `FINAL ANSWER: ...` line when the task asks for one, or `<final_answer>...</final_answer>`.
  For the demo worlds' tasks it follows a playbook whose answer comes from the observations
  it saw, with mistakes drawn from the request's `seed` (a later slot, a miscount, the wrong
  field, deleting too much or too little), so a campaign shows successes and failures; for
  any other task it explores the tools and answers from what it saw. The same request (seed
  included) gets the same answer.
- `scripted-world` reads the world model's prompt (the world's system prompt, the turns) and
  answers `<think>...</think><predicted_observation>...</predicted_observation>`, with
  `<state>{...}</state>` when the prompt asks for state keys. For "Northwind calendar" and
  "ops-box backups" it replays the episode's actions on a small model of the calendar or the
  server, so its observations hold the facts the tasks' checks look for; for any other world
  it answers a plausible, generic observation from the world's facts. A prompted
  perturbation (the turn's simulation note) makes the call fail.

- `scripted-judge` answers the studio's judge prompts with scores that measure the text's
  overlap with the reference and the history (`studio.demo_data.scripted_judge`), and
  behaviour search's prompts by looking up the description's words (and a small table of
  their synonyms) in the step (`studio.demo_data.scripted_behaviour`).
- `scripted-embedding` answers `POST /v1/embeddings` with a hashed bag of each text's words
  (256 numbers), words of one synonym group on one dimension.

usage counts words as tokens. Code of its own (the tests' fake server is not imported)."""

from __future__ import annotations

import fnmatch
import hashlib
import json
import math
import random
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from studio.demo_data.scripted_behaviour import EMBEDDING_MODEL, embed_text
from studio.demo_data.scripted_judge import JUDGE_MODEL, judge_answer

AGENT_MODEL = "scripted-agent"
WORLD_MODEL = "scripted-world"
CHAT_MODELS = (AGENT_MODEL, WORLD_MODEL, JUDGE_MODEL)
MODELS = (*CHAT_MODELS, EMBEDDING_MODEL)
OWNER = "agentworld-studio: scripted demo stand-in, not a model"
FINGERPRINT = "scripted-demo-not-a-model"
DEFAULT_PORT = 8099
MAX_BODY = 32 * 1024 * 1024


class ChatError(ValueError):
    """A request the scripted server cannot answer (its HTTP status, an OpenAI-style error)."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def count_tokens(text: str) -> int:
    """A token, here, is a whitespace-separated word."""
    return len((text or "").split())


def _rng(seed: Any, *parts: Any) -> random.Random:
    digest = hashlib.sha256(":".join(str(p) for p in (seed, *parts)).encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def _content_text(content: Any) -> str:
    """A message's content as text (a string, or OpenAI's list of parts)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(part.get("text") or "") for part in content if isinstance(part, dict))
    return ""


def _squash(text: str) -> str:
    return " ".join(text.split())


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except (TypeError, ValueError, RecursionError):
        return None


def _dump(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False)


# ============================================================================ the demo worlds

ME = "alex.kim@northwind.dev"
TZ = "Europe/Berlin"
SYNC_ATTENDEES = [
    "priya.natarajan@northwind.dev",
    "marco.bellini@northwind.dev",
    "lea.hoffmann@northwind.dev",
]
NOW = datetime.fromisoformat("2026-03-11T09:40:00+01:00")


def _event(eid, title, day, start, end, organizer, response, **details) -> dict[str, Any]:
    return {
        "id": eid,
        "title": title,
        "start": f"{day}T{start}:00+01:00",
        "end": f"{day}T{end}:00+01:00",
        "organizer": organizer,
        "response": response,
        **details,
    }


def calendar_events() -> dict[str, dict[str, Any]]:
    """Alex's calendar in the week of 9 March 2026, as the demo world describes it."""
    events = [
        _event("evt_4e21", "Search team standup", "2026-03-10", "09:30", "09:45", ME,
               "organizer", location="meet.northwind.dev/search"),
        _event("evt_7Qk2", "Quarterly planning offsite", "2026-03-12", "09:00", "17:00",
               "dana.okoye@northwind.dev", "accepted", location="Hotel Spreeblick, Berlin",
               description="Roadmap and staffing for Q2; lunch on site."),
        _event("evt_93fA", "Search relevance sync", "2026-03-12", "14:00", "14:30", ME,
               "organizer", location="Room Kepler / meet.northwind.dev/srs",
               description="Weekly check of ranking metrics (nDCG@10, zero-result rate).",
               attendees=[ME, *SYNC_ATTENDEES]),
        _event("evt_1b0c", "1:1 Alex / Jonas", "2026-03-12", "17:30", "18:00",
               "jonas.berg@northwind.dev", "tentative", location="Room Hopper"),
        _event("evt_55dd", "Deploy window (search-api)", "2026-03-13", "09:30", "10:30",
               "release-bot@northwind.dev", "accepted", location="#deploys"),
        _event("evt_c410", "Lunch & learn: learning-to-rank", "2026-03-13", "12:30", "13:30",
               "lea.hoffmann@northwind.dev", "accepted", location="Room Lovelace"),
    ]  # fmt: skip
    return {e["id"]: e for e in events}


# When every one of the sync's attendees is busy (working hours 09:00-18:00), besides the
# events above: on Friday the common free time is 11:30-12:00, 14:00-14:30 and 16:30-17:00.
BUSY = {
    "2026-03-09": [("09:00", "10:00"), ("12:00", "13:00"), ("15:00", "16:00")],
    "2026-03-10": [("09:00", "10:00"), ("11:00", "12:30"), ("16:00", "17:00")],
    "2026-03-11": [("09:00", "09:40"), ("13:00", "14:00"), ("16:00", "18:00")],
    "2026-03-12": [("09:00", "17:00"), ("17:30", "18:00")],
    "2026-03-13": [("09:00", "11:30"), ("12:00", "14:00"), ("14:30", "16:30"), ("17:00", "18:00")],
}


def _minutes(hhmm: str) -> int:
    h, m = hhmm.split(":")
    return int(h) * 60 + int(m)


def _hhmm(minutes: int) -> str:
    return f"{minutes // 60:02d}:{minutes % 60:02d}"


@dataclass
class Calendar:
    events: dict[str, dict[str, Any]] = field(default_factory=calendar_events)
    emails: list[dict[str, Any]] = field(default_factory=list)
    told_after_move: bool = False
    moves: int = 0

    def state(self) -> dict[str, Any]:
        sync = self.events["evt_93fA"]
        return {
            "sync_moved": sync["start"].startswith("2026-03-13"),
            "attendees_told": self.told_after_move,
        }

    def call(self, name: str, args: dict[str, Any]) -> Any:
        handler = getattr(self, f"tool_{name}", None)
        if handler is None:
            return {"error": {"code": -32601, "message": f"Unknown tool: {name}"}}
        try:
            return handler(**args)
        except TypeError as exc:
            return {"error": {"code": -32602, "message": f"Invalid arguments for {name}: {exc}"}}
        except ValueError as exc:
            return {"error": {"code": -32602, "message": str(exc)}}

    def _day(self, value: Any) -> str:
        try:
            return date.fromisoformat(str(value)).isoformat()
        except ValueError:
            raise ValueError(f"date must be a date (YYYY-MM-DD), got {value!r}") from None

    def tool_list_events(self, date: Any, timezone: str = TZ) -> Any:
        day = self._day(date)
        found = sorted(
            (e for e in self.events.values() if e["start"].startswith(day)),
            key=lambda e: e["start"],
        )
        keys = ("id", "title", "start", "end", "organizer", "response")
        return {"date": day, "timezone": TZ, "events": [{k: e[k] for k in keys} for e in found]}

    def tool_get_event(self, event_id: Any) -> Any:
        event = self.events.get(str(event_id))
        if event is None:
            return {"error": {"code": 404, "message": f"No event {event_id!r} on the calendar"}}
        out = {k: v for k, v in event.items() if k != "attendees" and k != "response"}
        if "attendees" in event:
            out["attendees"] = [
                {"email": a, "response": "organizer" if a == event["organizer"] else "accepted"}
                for a in event["attendees"]
            ]
        out["sequence"] = 1 + (self.moves if event["id"] == "evt_93fA" else 0)
        return out

    def _busy(self, day: str, people: list[str]) -> list[tuple[int, int]]:
        weekday = date.fromisoformat(day).weekday()
        if weekday >= 5:
            return [(_minutes("00:00"), _minutes("23:59"))]
        spans = [(_minutes(a), _minutes(b)) for a, b in BUSY.get(day, BUSY["2026-03-09"])]
        sync = self.events["evt_93fA"]
        if sync["start"].startswith(day) and set(people) & set(sync["attendees"]):
            spans.append((_minutes(sync["start"][11:16]), _minutes(sync["end"][11:16])))
        return spans

    def tool_find_free_slots(
        self,
        attendees: Any,
        date: Any,
        duration_minutes: Any,
        working_hours: Any = None,
        timezone: str = TZ,
    ) -> Any:
        day = self._day(date)
        if not isinstance(attendees, list) or not attendees:
            raise ValueError("attendees must be a list of email addresses")
        if isinstance(duration_minutes, bool) or not isinstance(duration_minutes, int):
            raise ValueError("duration_minutes must be a whole number")
        if duration_minutes < 5:
            raise ValueError("duration_minutes must be at least 5")
        hours = working_hours if isinstance(working_hours, dict) else {}
        start = _minutes(str(hours.get("start") or "09:00"))
        end = _minutes(str(hours.get("end") or "18:00"))
        known = [a for a in attendees if str(a).endswith("@northwind.dev")]
        busy = sorted(self._busy(day, known))
        slots: list[dict[str, str]] = []
        cursor = start
        for b_start, b_end in [*busy, (end, end)]:
            while cursor + duration_minutes <= min(b_start, end) and len(slots) < 8:
                slots.append(
                    {
                        "start": f"{day}T{_hhmm(cursor)}:00+01:00",
                        "end": f"{day}T{_hhmm(cursor + duration_minutes)}:00+01:00",
                    }
                )
                cursor += max(duration_minutes, 30)
            cursor = max(cursor, b_end)
        out: dict[str, Any] = {
            "date": day,
            "timezone": TZ,
            "checked_attendees": len(known),
            "slots": slots,
        }
        unknown = [a for a in attendees if a not in known]
        if unknown:
            out["unknown_attendees"] = unknown
        return out

    def tool_update_event(
        self, event_id: Any, start: Any = None, end: Any = None, notify_attendees: Any = True
    ) -> Any:
        event = self.events.get(str(event_id))
        if event is None:
            return {"error": {"code": 404, "message": f"No event {event_id!r} on the calendar"}}
        if event["organizer"] != ME:
            return {
                "error": {
                    "code": 403,
                    "message": f"Only the organizer ({event['organizer']}) can change {event_id}",
                }
            }
        old_start = datetime.fromisoformat(event["start"])
        old_end = datetime.fromisoformat(event["end"])
        try:
            new_start = datetime.fromisoformat(str(start)) if start else old_start
            new_end = datetime.fromisoformat(str(end)) if end else new_start + (old_end - old_start)
        except ValueError:
            raise ValueError("start and end must be date-times (ISO 8601)") from None
        if new_end <= new_start:
            raise ValueError("end must be after start")
        event["start"] = new_start.isoformat()
        event["end"] = new_end.isoformat()
        self.moves += 1
        notified = [a for a in event.get("attendees", []) if a != ME] if notify_attendees else []
        self.told_after_move = bool(notified)
        conflicts = [
            e["id"]
            for e in self.events.values()
            if e["id"] != event["id"]
            and datetime.fromisoformat(e["start"]) < new_end
            and datetime.fromisoformat(e["end"]) > new_start
        ]
        return {
            "id": event["id"],
            "status": "updated",
            "start": event["start"],
            "end": event["end"],
            "sequence": 1 + self.moves,
            "conflicts": conflicts,
            "notified": notified,
        }

    def tool_send_email(self, to: Any, subject: Any, body: Any) -> Any:
        if not isinstance(to, list) or not to:
            raise ValueError("to must be a list of email addresses")
        accepted = [a for a in to if isinstance(a, str) and "@" in a]
        rejected = [a for a in to if a not in accepted]
        self.emails.append({"to": accepted, "subject": subject})
        if self.moves and set(SYNC_ATTENDEES) <= {a.lower() for a in accepted}:
            self.told_after_move = True
        digest = hashlib.sha256(f"{to}{subject}{body}".encode()).hexdigest()[:4]
        number = len(self.emails)
        return {
            "message_id": f"<20260311.0944{number:02d}.{digest}@mail.northwind.dev>",
            "accepted": accepted,
            "rejected": rejected,
        }

    def tool_submit_answer(self, answer: Any = "") -> Any:
        return {"status": "submitted", "answer": answer}


# ---- ops-box ------------------------------------------------------------------------------

DUMP_DIR = "/var/backups/pg_dumps"


def _dump_dates() -> list[str]:
    day, out = date(2026, 1, 9), []
    while day <= date(2026, 3, 11):
        if day != date(2026, 2, 15):  # the night the host was down: 61 dumps
            out.append(day.isoformat())
        day += timedelta(days=1)
    return out


def _dump_path(day: str) -> str:
    return f"{DUMP_DIR}/shop-{day}.dump"


def _size(gigabytes: float) -> str:
    if gigabytes <= 0.05:
        return "0"
    return f"{gigabytes:.0f}G" if gigabytes >= 10 else f"{gigabytes:.1f}G"


SHELL_KNOWN = {
    "ls", "cat", "df", "du", "rm", "find", "systemctl", "journalctl", "echo", "pwd", "cd",
    "whoami", "head", "tail", "grep", "wc", "sort", "restic", "sudo", "tee", "less", "stat",
    "mount", "lsblk", "uptime", "date", "true", "ncdu", "crontab", "free", "hostname",
}  # fmt: skip


@dataclass
class Server:
    dumps: list[str] = field(default_factory=_dump_dates)
    files: dict[str, str] = field(default_factory=dict)
    backup_ok: bool = False

    @property
    def freed(self) -> float:
        return round(1.2 * (61 - len(self.dumps)), 1)

    def state(self) -> dict[str, Any]:
        recent = {(date(2026, 3, 11) - timedelta(days=i)).isoformat() for i in range(7)}
        return {"space_freed": self.freed >= 10, "recent_dumps_kept": recent <= set(self.dumps)}

    def run(self, line: str) -> str:
        outputs = []
        for part in re.split(r"\s*(?:&&|;|\|\|)\s*", line.strip()):
            if part:
                out = self.pipeline(part)
                if out:
                    outputs.append(out)
        return "\n".join(outputs)

    def pipeline(self, text: str) -> str:
        stages = [s.strip() for s in text.split("|")]
        out = self.command(stages[0])
        for stage in stages[1:]:
            words = stage.split()
            if not words:
                continue
            lines = out.splitlines()
            if words[0] == "wc" and "-l" in words:
                out = str(len(lines))
            elif words[0] in ("head", "tail"):
                n = next((int(w.lstrip("-n")) for w in words[1:] if w.lstrip("-n").isdigit()), 10)
                out = "\n".join(lines[:n] if words[0] == "head" else lines[-n:])
            elif words[0] == "grep" and len(words) > 1:
                pattern = words[-1].strip("'\"")
                out = "\n".join(ln for ln in lines if pattern in ln)
            elif words[0] == "sort":
                out = "\n".join(sorted(lines))
        return out

    def command(self, text: str) -> str:
        words = text.split()
        while words and words[0] == "sudo":
            words = words[1:]
        if not words:
            return ""
        name, args = words[0], words[1:]
        if name == "systemctl":
            return self.systemctl(args)
        if name == "journalctl":
            return "\n".join(self.journal())
        if name == "df":
            return self.df()
        if name == "du":
            return self.du(args)
        if name == "ls":
            return self.ls(args)
        if name == "rm":
            return self.rm(args)
        if name == "find":
            return self.find(args)
        if name == "cat":
            return self.cat(args)
        if name == "echo":
            return " ".join(a.strip("'\"") for a in args)
        if name == "pwd":
            return "/home/deploy"
        if name == "whoami":
            return "deploy"
        if name == "hostname":
            return "ops-box"
        if name in SHELL_KNOWN:
            return ""
        return f"bash: {name}: command not found"

    def journal(self) -> list[str]:
        return [
            "Mar 11 01:30:02 ops-box systemd[1]: Starting backup.service - Nightly restic backup"
            " of /srv...",
            "Mar 11 02:13:58 ops-box run-backup.sh[48211]: creating snapshot of /srv ...",
            "Mar 11 02:14:09 ops-box run-backup.sh[48211]: Fatal: unable to save snapshot: "
            "write /var/backups/restic/data/3f/3f1c09ab: no space left on device",
            "Mar 11 02:14:09 ops-box systemd[1]: backup.service: Failed with result 'exit-code'.",
        ]

    def systemctl(self, args: list[str]) -> str:
        if args and args[0] in ("start", "restart"):
            if self.freed >= 2:
                self.backup_ok = True
                return ""
            return (
                "Job for backup.service failed because the control process exited with error "
                'code.\nSee "systemctl status backup.service" and "journalctl -xeu '
                'backup.service" for details.'
            )
        if self.backup_ok:
            return (
                "○ backup.service - Nightly restic backup of /srv\n"
                "     Loaded: loaded (/etc/systemd/system/backup.service; static)\n"
                "     Active: inactive (dead) since Wed 2026-03-11 09:52:31 UTC\n"
                "   Main PID: 51804 (code=exited, status=0/SUCCESS)"
            )
        return "\n".join(
            [
                "× backup.service - Nightly restic backup of /srv",
                "     Loaded: loaded (/etc/systemd/system/backup.service; static)",
                "     Active: failed (Result: exit-code) since Wed 2026-03-11 02:14:09 UTC; 7h ago",
                "TriggeredBy: ● backup.timer",
                "    Process: 48211 ExecStart=/usr/local/bin/run-backup.sh (code=exited, "
                "status=1/FAILURE)",
                "",
                *self.journal()[1:],
            ]
        )

    def df(self) -> str:
        used, avail = 93 - self.freed, self.freed  # 5G of the 98G are reserved for root
        percent = 100 if avail <= 0.05 else round(100 * used / (used + avail))
        return "\n".join(
            [
                "Filesystem      Size  Used Avail Use% Mounted on",
                "udev            3.9G     0  3.9G   0% /dev",
                "tmpfs           796M  1.1M  795M   1% /run",
                "/dev/sda1        40G   12G   26G  32% /",
                "tmpfs           3.9G     0  3.9G   0% /dev/shm",
                f"/dev/sdb1        98G {_size(used):>5} {_size(avail):>5} {percent:>3}% "
                "/var/backups",
            ]
        )

    def du(self, args: list[str]) -> str:
        dumps = _size(1.2 * len(self.dumps)) if self.dumps else "4.0K"
        rows = [(dumps, DUMP_DIR), ("24G", "/var/backups/restic"), ("2.0M", "/var/backups/dpkg")]
        if any(a.rstrip("/") == DUMP_DIR for a in args):
            rows = rows[:1]
        return "\n".join(f"{size}\t{path}" for size, path in rows)

    def ls(self, args: list[str]) -> str:
        paths = [a for a in args if not a.startswith("-")] or ["/home/deploy"]
        long = any(a.startswith("-") and "l" in a for a in args)
        target = paths[0].rstrip("/")
        if target == "/var/backups":
            return "dpkg\npg_dumps\nrestic"
        if target == DUMP_DIR or target.startswith(DUMP_DIR + "/"):
            names = [f"shop-{d}.dump" for d in self.dumps]
            if target != DUMP_DIR:
                names = [n for n in names if fnmatch.fnmatch(f"{DUMP_DIR}/{n}", target)]
            if not long:
                return "\n".join(names)
            return "\n".join(
                [f"total {_size(1.2 * len(names))}"]
                + [
                    f"-rw-r--r-- 1 postgres postgres 1.2G {_mon(n[5:15])} 02:1{i % 10} {n}"
                    for i, n in enumerate(names)
                ]
            )
        if target == "/home/deploy":
            return ""
        return f"ls: cannot access '{paths[0]}': No such file or directory"

    def rm(self, args: list[str]) -> str:
        paths = [a.strip("'\"") for a in args if not a.startswith("-")]
        recursive = any(a.startswith("-") and "r" in a.lower() for a in args)
        errors = []
        for path in paths:
            clean = path.rstrip("/")
            if clean in (DUMP_DIR, "/var/backups", f"{DUMP_DIR}/*", "/var/backups/*") and (
                recursive or clean.endswith("*")
            ):
                self.dumps = []
                continue
            matched = [d for d in self.dumps if fnmatch.fnmatch(_dump_path(d), clean)]
            if not matched:
                errors.append(f"rm: cannot remove '{path}': No such file or directory")
            self.dumps = [d for d in self.dumps if d not in matched]
        return "\n".join(errors)

    def find(self, args: list[str]) -> str:
        if not args or not args[0].startswith(DUMP_DIR.rsplit("/", 1)[0]):
            return ""
        older = None
        if "-mtime" in args:
            value = args[args.index("-mtime") + 1] if args.index("-mtime") + 1 < len(args) else ""
            if value.startswith("+") and value[1:].isdigit():
                older = int(value[1:])
        chosen = []
        for d in self.dumps:
            age = (NOW - datetime.fromisoformat(f"{d}T02:12:00+01:00")).days
            if older is None or age > older:
                chosen.append(d)
        if "-delete" in args:
            self.dumps = [d for d in self.dumps if d not in chosen]
            return ""
        return "\n".join(_dump_path(d) for d in chosen)

    def cat(self, args: list[str]) -> str:
        out = []
        for path in args:
            if path in self.files:
                out.append(self.files[path].rstrip("\n"))
            else:
                out.append(f"cat: {path}: No such file or directory")
        return "\n".join(out)


def _mon(day: str) -> str:
    d = date.fromisoformat(day)
    return f"{d.strftime('%b')} {d.day:2d}"


# ================================================================================ the world


@dataclass
class WorldPrompt:
    """What the world model's messages say: the world, its state keys, the turns."""

    system: str
    world: str
    domain: str
    state_keys: list[str]
    tools: list[str]
    knowledge: list[str]
    actions: list[str]  # every turn's action, the current one last
    observations: list[str]  # the earlier turns' observations
    perturbed: str  # the current turn's simulation note (or the prompt's perturbation)
    task: str


def _domain_of(system: str) -> str:
    from inference.prompts import DOMAIN_BEHAVIOUR

    for name, text in DOMAIN_BEHAVIOUR.items():
        if text[:60] in system:
            return name
    return ""


def read_world_prompt(messages: list[dict[str, Any]], seed: Any) -> WorldPrompt:
    from inference.prompts import ACTION_HEADER, OBSERVATION_HEADER, TASK_HEADER

    system = "\n".join(
        _content_text(m.get("content")) for m in messages if m.get("role") == "system"
    )
    found = re.search(r"^World: (.+)$", system, re.M)
    world = found.group(1).strip() if found else ""
    keys: list[str] = []
    if "The state object has exactly these keys" in system:
        tail = system.split("The state object has exactly these keys", 1)[1]
        keys = re.findall(r"^- ([A-Za-z0-9_.-]+)", tail, re.M)
    knowledge: list[str] = []
    if "What is true in this world:" in system:
        block = system.split("What is true in this world:", 1)[1].split("\n\n", 1)[0]
        knowledge = [ln[2:].strip() for ln in block.splitlines() if ln.startswith("- ")]
    tools = []
    for line in system.splitlines():
        tool = _json(line) if line.startswith("{") else None
        if isinstance(tool, dict):
            inner = tool.get("function")
            fn = inner if isinstance(inner, dict) else tool
            if isinstance(fn.get("name"), str):
                tools.append(fn["name"])
    actions, observations, notes, task = [], [], [], ""
    for m in messages:
        text = _content_text(m.get("content"))
        if m.get("role") == "user":
            note = ""
            if "**Simulation note:**" in text:
                text, note = text.split("**Simulation note:**", 1)
            if TASK_HEADER in text and not task:
                task = text.split(TASK_HEADER, 1)[1].strip().split("\n\n", 1)[0]
            action = text.split(ACTION_HEADER, 1)[1] if ACTION_HEADER in text else text
            actions.append(action.strip())
            notes.append(note.strip())
        elif m.get("role") == "assistant":
            observations.append(text.split(OBSERVATION_HEADER, 1)[-1].strip())
    perturbed = notes[-1] if notes else ""
    if not perturbed and "Perturbation: in this simulation" in system:
        rule = system.split("Perturbation: in this simulation", 1)[1].split("\n\n")[0]
        if _rng(seed, "perturbation").random() < 0.5:  # "whenever it is relevant"
            perturbed = rule.split(":", 1)[-1].strip()
    return WorldPrompt(
        system, world, _domain_of(system), keys, tools, knowledge, actions, observations,
        perturbed, task,
    )  # fmt: skip


def tool_call(text: str) -> tuple[str, dict[str, Any]] | None:
    """(name, arguments) of an action that is a tool call's JSON."""
    from inference.rubrics import tool_call_of

    return tool_call_of(text)


def failed(observation: str) -> bool:
    """An observation that says the action failed (its effect did not happen)."""
    data = _json(observation)
    if isinstance(data, dict):
        return "error" in data
    low = observation.lower()
    return low.startswith(("error", "bash: ", "fatal")) or "rate limit" in low


def _perturbed_observation(prompt: WorldPrompt, seed: Any) -> str:
    note = re.sub(r"\s+", " ", prompt.perturbed).strip().rstrip(".")
    note = note.split("Write the observation", 1)[0].strip().rstrip(".")
    note = note.split("its normal behaviour:", 1)[-1].strip()  # the note's instruction only
    if prompt.domain == "terminal" or tool_call(prompt.actions[-1]) is None:
        return f"Error: {note or 'the command failed'}"
    return _dump({"error": {"code": 503, "message": note or "the tool failed"}})


def world_answer(messages: list[dict[str, Any]], seed: Any) -> str:
    """The scripted world's whole answer (thinking, observation, state) for a world-model
    prompt."""
    prompt = read_world_prompt(messages, seed)
    if not prompt.actions:
        raise ChatError(400, "the world model's messages hold no turn to answer")
    action = prompt.actions[-1]
    state: dict[str, Any] = {}
    if prompt.world == "Northwind calendar":
        calendar = Calendar()
        for earlier, seen in zip(prompt.actions[:-1], prompt.observations, strict=False):
            call = tool_call(earlier)
            if call is not None and not failed(seen):
                calendar.call(*call)
        state = calendar.state()
        call = tool_call(action)
        if prompt.perturbed:
            observation = _perturbed_observation(prompt, seed)
            why = "a perturbation applies: the call fails"
        elif call is None:
            observation = _dump({"error": {"code": -32600, "message": "Expected a tool call"}})
            why = "the action is no tool call"
        else:
            observation = _dump(calendar.call(*call))
            state = calendar.state()
            why = f"{call[0]} on Alex's calendar as the world holds it after the earlier calls"
    elif prompt.world == "ops-box backups":
        from studio.demo_data.worlds_text import BACKUP_WORLD

        files: Any = BACKUP_WORLD["files"]
        server = Server(files=dict(files))
        for earlier, seen in zip(prompt.actions[:-1], prompt.observations, strict=False):
            if not failed(seen) or seen.startswith("rm:"):
                server.run(earlier)
        if prompt.perturbed:
            observation = _perturbed_observation(prompt, seed)
            why = "a perturbation applies: the command fails"
        else:
            observation = server.run(action)
            why = "the command run on ops-box as the earlier commands left it"
        state = server.state()
    else:
        observation, why = generic_observation(prompt, action, seed)
    think = f"Scripted demo world (rules, not a model), world {prompt.world or 'unnamed'!r}: {why}."
    answer = f"<think>{think}</think>\n<predicted_observation>\n{observation}\n"
    answer += "</predicted_observation>"
    if prompt.state_keys:
        reported = {key: state.get(key) for key in prompt.state_keys}
        answer += f"\n<state>{json.dumps(reported, ensure_ascii=False)}</state>"
    return answer


def generic_observation(prompt: WorldPrompt, action: str, seed: Any) -> tuple[str, str]:
    """An observation for a world the script has no model of: a plausible answer made of
    the world's own facts, chosen by the seed."""
    rng = _rng(seed, "generic", len(prompt.actions))
    fact = rng.choice(prompt.knowledge) if prompt.knowledge else ""
    if prompt.perturbed:
        return _perturbed_observation(prompt, seed), "a perturbation applies: the action fails"
    call = tool_call(action)
    if call is not None:
        name, args = call
        if prompt.tools and name not in prompt.tools:
            error = {"error": {"code": -32601, "message": f"Unknown tool: {name}"}}
            return _dump(error), f"{name} is not one of the world's tools"
        result: dict[str, Any] = {"tool": name, "status": "ok"}
        if args:
            result["arguments"] = args
        if fact:
            result["result"] = fact
        return _dump(result), f"{name} answered with one of the world's facts"
    if prompt.domain == "terminal":
        return fact, "a shell command answered with one of the world's facts"
    return (fact or "OK"), "the action answered with one of the world's facts"


# ================================================================================ the agent


@dataclass
class Action:
    kind: str  # "tool" | "text" | "final"
    name: str = ""  # tool
    arguments: dict[str, Any] = field(default_factory=dict)  # tool
    text: str = ""  # text, final
    thought: str = ""


@dataclass
class Taken:
    action: Action
    observation: str


@dataclass
class AgentView:
    """What the agent's chat holds."""

    seed: Any
    text: str  # the task and everything the system and user said, squashed
    tools: list[dict[str, Any]]  # OpenAI function objects {"name","description","parameters"}
    native_tools: bool  # tools came as the request's `tools`
    taken: list[Taken]
    domain: str

    def rng(self, name: str) -> random.Random:
        return _rng(self.seed, "agent", name)

    def chance(self, name: str, p: float) -> bool:
        return self.rng(name).random() < p

    def results(self, tool: str) -> list[tuple[dict[str, Any], Any]]:
        """(arguments, parsed answer) of the calls of `tool` that did not fail."""
        out = []
        for t in self.taken:
            if t.action.kind == "tool" and t.action.name == tool and not failed(t.observation):
                out.append((t.action.arguments, _json(t.observation)))
        return out

    def outputs(self, command: str) -> list[str]:
        return [
            t.observation
            for t in self.taken
            if t.action.kind == "text" and t.action.text.startswith(command)
        ]

    @property
    def errors(self) -> int:
        return sum(1 for t in self.taken if failed(t.observation))

    def tool_names(self) -> list[str]:
        return [t["name"] for t in self.tools]


_ACTION = re.compile(r"<action>(.*?)(?:</action>|$)", re.S)


def _action_of_message(message: dict[str, Any]) -> list[Action]:
    calls = message.get("tool_calls") or []
    out = []
    for call in calls:
        fn = call.get("function") or {}
        args = fn.get("arguments")
        parsed = _json(args) if isinstance(args, str) else args
        out.append(
            Action("tool", str(fn.get("name") or ""), parsed if isinstance(parsed, dict) else {})
        )
    if out:
        return out
    text = _content_text(message.get("content"))
    found = _ACTION.search(text)
    body = found.group(1).strip() if found else text.strip()
    call = tool_call(body)
    if call is not None:
        return [Action("tool", call[0], call[1])]
    return [Action("text", text=body)]


def _tools_of(body: dict[str, Any], system: str) -> tuple[list[dict[str, Any]], bool]:
    tools = []
    for t in body.get("tools") or []:
        fn = t.get("function") if isinstance(t, dict) else None
        if isinstance(fn, dict) and isinstance(fn.get("name"), str):
            tools.append(fn)
    if tools:
        return tools, True
    marker = "Tools you can call (JSON schemas):"
    if marker in system:
        listed = _json(system.split(marker, 1)[1].strip())
        if isinstance(listed, list):
            for t in listed:
                fn = t.get("function", t) if isinstance(t, dict) else None
                if isinstance(fn, dict) and isinstance(fn.get("name"), str):
                    tools.append(
                        {
                            "name": fn["name"],
                            "description": fn.get("description") or "",
                            "parameters": fn.get("parameters")
                            or fn.get("inputSchema")
                            or fn.get("input_schema")
                            or {"type": "object"},
                        }
                    )
    return tools, False


def read_agent_chat(body: dict[str, Any], seed: Any) -> AgentView:
    messages = body.get("messages") or []
    system = "\n".join(
        _content_text(m.get("content")) for m in messages if m.get("role") == "system"
    )
    tools, native = _tools_of(body, system)
    said = []
    taken: list[Taken] = []
    pending: list[Action] = []
    for m in messages:
        role = m.get("role")
        content = _content_text(m.get("content"))
        if role == "assistant":
            for a in pending:
                taken.append(Taken(a, ""))
            pending = _action_of_message(m)
        elif role in ("tool", "user") and pending:
            observation = re.sub(r"^Observation:\s*\n?", "", content.strip())
            taken.append(Taken(pending.pop(0), observation))
        elif role in ("system", "user"):
            said.append(content)
    domain = ""
    found = re.search(r"agent in an? (\w+) environment", system)
    if found:
        domain = found.group(1)
    return AgentView(seed, _squash("\n".join(said)), tools, native, taken, domain)


def _hm(value: Any) -> str:
    text = str(value or "")
    found = re.search(r"T(\d{2}:\d{2})", text)
    return found.group(1) if found else text


def _events(view: AgentView, day: str) -> list[dict[str, Any]]:
    for args, data in reversed(view.results("list_events")):
        if str(args.get("date")) == day and isinstance(data, dict):
            return [e for e in data.get("events") or [] if isinstance(e, dict)]
    return []


def _listed(view: AgentView, day: str) -> bool:
    return any(str(a.get("date")) == day for a, _ in view.results("list_events"))


def _list(day: str, why: str) -> Action:
    return Action("tool", "list_events", {"date": day, "timezone": TZ}, thought=why)


def _titled(events: list[dict[str, Any]], words: str) -> dict[str, Any] | None:
    return next((e for e in events if words.lower() in str(e.get("title", "")).lower()), None)


def _detail(view: AgentView, event_id: str) -> dict[str, Any] | None:
    for args, data in view.results("get_event"):
        if args.get("event_id") == event_id and isinstance(data, dict):
            return data
    return None


def play_move_sync(view: AgentView) -> Action:
    thursday = "2026-03-12"
    if not _listed(view, thursday):
        return _list(thursday, "Find the sync on Thursday.")
    sync = _titled(_events(view, thursday), "relevance sync")
    if sync is None:
        return Action("final", text="no sync found", thought="The sync is not on Thursday.")
    detail = _detail(view, sync["id"])
    if detail is None:
        return Action("tool", "get_event", {"event_id": sync["id"]}, thought="Who attends?")
    attendees = [a.get("email") for a in detail.get("attendees") or [] if isinstance(a, dict)]
    attendees = [a for a in attendees if isinstance(a, str)] or [ME]
    slots = [d for a, d in view.results("find_free_slots") if str(a.get("date")) == "2026-03-13"]
    if not slots:
        return Action(
            "tool",
            "find_free_slots",
            {
                "attendees": attendees,
                "date": "2026-03-13",
                "duration_minutes": 30,
                "working_hours": {"start": "09:00", "end": "18:00"},
                "timezone": TZ,
            },
            thought="Ask for 30-minute slots on Friday when everyone is free.",
        )
    moved = view.results("update_event")
    if not moved:
        free = [s for s in (slots[-1] or {}).get("slots") or [] if isinstance(s, dict)]
        if not free:
            return Action("final", text="no free slot", thought="Nobody is free on Friday.")
        # the script's mistake: now and then it takes a later slot than the first
        index = (
            0 if view.chance("first-slot", 0.65) else view.rng("which-slot").randrange(len(free))
        )
        slot = free[index]
        notify = view.chance("notify", 0.7)
        return Action(
            "tool",
            "update_event",
            {
                "event_id": sync["id"],
                "start": slot.get("start"),
                "end": slot.get("end"),
                "notify_attendees": notify,
            },
            thought=f"Move the sync to {_hm(slot.get('start'))} on Friday.",
        )
    args, result = moved[-1]
    start = _hm((result or {}).get("start") if isinstance(result, dict) else args.get("start"))
    notified = bool(isinstance(result, dict) and result.get("notified"))
    if not notified and not view.results("send_email") and view.chance("writes-email", 0.5):
        others = [a for a in attendees if a != ME]
        return Action(
            "tool",
            "send_email",
            {
                "to": others,
                "subject": f"Search relevance sync moved to Fri 13 Mar, {start}",
                "body": f"Hi all,\n\nThe sync moves to Friday 13 March, {start} (Berlin).\n\nAlex",
            },
            thought="The attendees were not notified: email them.",
        )
    return Action("final", text=start, thought="Hand in the new start time.")


def play_count_thursday(view: AgentView) -> Action:
    if not _listed(view, "2026-03-12"):
        return _list("2026-03-12", "List Thursday's events.")
    events = _events(view, "2026-03-12")
    if view.chance("skips-unconfirmed", 0.3):  # the mistake: only confirmed events counted
        events = [e for e in events if e.get("response") in ("accepted", "organizer")]
    return Action("final", text=str(len(events)), thought="Count the events listed.")


def play_one_on_one(view: AgentView) -> Action:
    if not _listed(view, "2026-03-12"):
        return _list("2026-03-12", "Find the 1:1 on Thursday.")
    events = _events(view, "2026-03-12")
    chosen = _titled(events, "1:1")
    if view.chance("confuses-events", 0.3) or chosen is None:  # the mistake: another event
        others = [e for e in events if e is not chosen] or events
        chosen = view.rng("other-event").choice(others) if others else None
    answer = str(chosen.get("organizer")) if chosen else "unknown"
    return Action("final", text=answer, thought="Hand in its organiser.")


def play_sync_room(view: AgentView) -> Action:
    if not _listed(view, "2026-03-12"):
        return _list("2026-03-12", "Find the sync on Thursday.")
    sync = _titled(_events(view, "2026-03-12"), "relevance sync")
    if sync is None:
        return Action("final", text="unknown", thought="The sync is not listed.")
    detail = _detail(view, sync["id"])
    if detail is None:
        return Action("tool", "get_event", {"event_id": sync["id"]}, thought="Where is it?")
    parts = [p.strip() for p in str(detail.get("location") or "unknown").split("/", 1)]
    # the mistake: now and then it hands in the video link rather than the room
    room = parts[-1] if len(parts) > 1 and view.chance("takes-link", 0.3) else parts[0]
    return Action("final", text=room, thought="Hand in the room.")


def play_deploy_window(view: AgentView) -> Action:
    if not _listed(view, "2026-03-13"):
        return _list("2026-03-13", "List Friday's events.")
    window = _titled(_events(view, "2026-03-13"), "deploy")
    if window is None:
        return Action("final", text="unknown", thought="No deploy window listed.")
    key = "end" if view.chance("reads-end", 0.3) else "start"  # the mistake: its end
    return Action("final", text=_hm(window.get(key)), thought="Hand in its start time.")


def _df_avail(output: str) -> str:
    for line in output.splitlines():
        if line.rstrip().endswith("/var/backups"):
            cols = line.split()
            return cols[3] if len(cols) >= 6 else ""
    return ""


def play_why_failed(view: AgentView) -> Action:
    if not view.outputs("systemctl status"):
        return Action("text", text="systemctl status backup.service", thought="Why did it fail?")
    df = view.outputs("df")
    if not df:
        if view.chance("checks-df", 0.7):
            return Action("text", text="df -h", thought="Which filesystem is full?")
        # the mistake: it answers with the path in the error message, not the mount point
        found = re.search(r"write (/\S+?/restic)", "\n".join(view.outputs("systemctl status")))
        return Action("final", text=found.group(1) if found else "/", thought="From the log.")
    full = next((ln.split()[-1] for ln in df[-1].splitlines() if ln.split()[-2:-1] == ["100%"]), "")
    return Action("final", text=full or "/", thought="The filesystem at 100%.")


def play_free_space(view: AgentView) -> Action:
    if not view.outputs("df"):
        return Action("text", text="df -h", thought="How full is it?")
    if not view.outputs("ls"):
        return Action("text", text=f"ls {DUMP_DIR}", thought="What fills it?")
    deleted = [
        t
        for t in view.taken
        if t.action.kind == "text"
        and t.action.text.removeprefix("sudo ").startswith(("find", "rm"))
    ]
    if not deleted:
        way = view.rng("cleanup").choices(["older", "few", "all"], [0.55, 0.2, 0.25])[0]
        if way == "older":  # keeps a week of dumps
            text = f"sudo find {DUMP_DIR} -name '*.dump' -mtime +7 -delete"
        elif way == "few":  # the mistake: too little
            names = [ln.strip() for ln in view.outputs("ls")[-1].splitlines() if ln.strip()]
            text = "sudo rm " + " ".join(f"{DUMP_DIR}/{n}" for n in names[:5])
        else:  # the mistake: every dump, the last week's too
            text = f"sudo rm -f {DUMP_DIR}/*.dump"
        return Action("text", text=text, thought="Delete old dumps.")
    last = view.taken[-1]
    if not (last.action.kind == "text" and last.action.text.startswith("df")):
        return Action("text", text="df -h", thought="How much is free now?")
    avail = _df_avail(last.observation) or "0"
    return Action("final", text=f"{avail} free on /var/backups", thought="Report df's figure.")


PLAYBOOKS: dict[tuple[str, str], Callable[[AgentView], Action]] = {
    ("Northwind calendar", "move-sync"): play_move_sync,
    ("Northwind calendar", "count-thursday"): play_count_thursday,
    ("Northwind calendar", "one-on-one-organizer"): play_one_on_one,
    ("Northwind calendar", "sync-room"): play_sync_room,
    ("Northwind calendar", "deploy-window"): play_deploy_window,
    ("ops-box backups", "why-failed"): play_why_failed,
    ("ops-box backups", "free-space"): play_free_space,
}


def playbook_of(view: AgentView) -> Callable[[AgentView], Action] | None:
    from studio.demo_data.worlds_text import REWARDED_WORLDS

    worlds: list[Any] = REWARDED_WORLDS
    for world in worlds:
        for task in world.get("tasks") or []:
            if _squash(task["instruction"]) in view.text:
                return PLAYBOOKS.get((world["name"], task["id"]))
    return None


# ---- arguments from a JSON Schema ---------------------------------------------------------

_DATE = re.compile(r"\b(\d{4}-\d{2}-\d{2})\b")
_EMAIL = re.compile(r"\b[\w.+-]+@[\w-]+(?:\.[\w-]+)+\b")
_WORD = re.compile(r"[A-Za-z][A-Za-z0-9_-]{2,}")


def fill(schema: Any, view: AgentView, rng: random.Random, name: str = "", depth: int = 0) -> Any:
    """A value that satisfies `schema` (the keywords tool schemas use), taken from the task's
    words where the property's name suggests one (a date, an email, an id)."""
    if not isinstance(schema, dict) or depth > 6:
        return "x"
    if "const" in schema:
        return schema["const"]
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return rng.choice(schema["enum"])
    if "default" in schema and rng.random() < 0.5:
        return schema["default"]
    for key in ("anyOf", "oneOf"):
        if isinstance(schema.get(key), list) and schema[key]:
            return fill(schema[key][0], view, rng, name, depth + 1)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    if kind is None:
        kind = "object" if "properties" in schema else "string"
    if kind == "object":
        props = schema.get("properties") or {}
        required = [k for k in schema.get("required") or [] if isinstance(k, str)]
        out = {}
        for key, sub in props.items():
            if key in required or rng.random() < 0.5:
                out[key] = fill(sub, view, rng, key, depth + 1)
        for key in required:
            out.setdefault(key, "x")
        return out
    if kind == "array":
        low = int(schema.get("minItems") or 1)
        high = max(low, min(int(schema.get("maxItems") or 3), 3))
        count = rng.randint(low, high)
        items = schema.get("items") or {}
        values = [fill(items, view, rng, name, depth + 1) for _ in range(count)]
        if schema.get("uniqueItems"):
            unique: list[Any] = []
            for v in values:
                if v not in unique:
                    unique.append(v)
            values = unique
        return values
    if kind in ("integer", "number"):
        bottom, top = schema.get("minimum"), schema.get("maximum")
        if bottom is None and isinstance(schema.get("exclusiveMinimum"), int | float):
            bottom = math.floor(schema["exclusiveMinimum"]) + 1
        if top is None and isinstance(schema.get("exclusiveMaximum"), int | float):
            top = math.ceil(schema["exclusiveMaximum"]) - 1
        first = math.ceil(bottom) if isinstance(bottom, int | float) else 0
        last = math.floor(top) if isinstance(top, int | float) else first + 60
        if not isinstance(bottom, int | float):
            first = min(first, last)  # only a maximum, below 0
        value = rng.randint(first, max(first, last))
        return value if kind == "integer" else float(value)
    if kind == "boolean":
        return rng.random() < 0.5
    if kind == "null":
        return None
    return _string(schema, view, rng, name)


def _string(schema: dict[str, Any], view: AgentView, rng: random.Random, name: str) -> str:
    fmt = schema.get("format")
    dates = _DATE.findall(view.text) or ["2026-03-12"]
    lowered = name.lower()
    if fmt == "date" or "date" in lowered:
        value = rng.choice(dates)
    elif fmt == "date-time" or lowered in ("start", "end", "time", "when"):
        value = f"{rng.choice(dates)}T{rng.choice(['09', '10', '14', '16'])}:00:00+01:00"
    elif fmt == "email" or "email" in lowered or lowered in ("to", "attendees", "cc"):
        value = rng.choice(_EMAIL.findall(view.text) or ["someone@example.com"])
    else:
        words = _WORD.findall(view.text) or ["demo"]
        value = rng.choice(words)
    low, high = int(schema.get("minLength") or 0), schema.get("maxLength")
    if len(value) < low:
        value = value + "x" * (low - len(value))
    if isinstance(high, int) and len(value) > high:
        value = value[:high]
    pattern = schema.get("pattern")
    if isinstance(pattern, str):
        try:
            if not re.search(pattern, value):
                candidates = [w for w in _WORD.findall(view.text) if re.search(pattern, w)]
                value = candidates[0] if candidates else value
        except re.error:
            pass
    return value


def _is_submit(name: str) -> bool:
    return name.lower().startswith(("submit", "final", "finish", "answer"))


def play_generic(view: AgentView) -> Action:
    """Any other task: call a few of the world's tools (or run a few commands), then answer
    with something the observations said."""
    tools = [t for t in view.tools if not _is_submit(t["name"])]
    budget = 1 + view.rng("budget").randrange(3)
    if len(view.taken) < budget and view.errors < 3:
        rng = view.rng(f"explore-{len(view.taken)}")
        if tools:
            tool = rng.choice(tools)
            return Action(
                "tool", tool["name"], fill(tool.get("parameters") or {}, view, rng),
                thought=f"Try {tool['name']}.",
            )  # fmt: skip
        commands = ["ls -la", "pwd", "cat README.md", "ls /", "echo ok"]
        if view.domain not in ("terminal", "swe", "os", ""):
            commands = ["look around", "open the first item", "go back"]
        return Action("text", text=rng.choice(commands), thought="Look around.")
    seen = " ".join(t.observation for t in view.taken)
    words = re.findall(r"[A-Za-z0-9][\w.:@/-]{2,}", seen)
    answer = view.rng("answer").choice(words) if words else "done"
    return Action("final", text=answer, thought="Answer with what the observations said.")


def agent_action(view: AgentView) -> Action:
    if view.errors >= 4:
        return Action("final", text="could not finish: the tools kept failing", thought="Stop.")
    playbook = playbook_of(view)
    return (playbook or play_generic)(view)


def agent_message(body: dict[str, Any], seed: Any) -> tuple[dict[str, Any], str]:
    """The assistant message (with `tool_calls` when tools were given) and its finish reason."""
    messages = body.get("messages") or []
    view = read_agent_chat(body, seed)
    if not view.taken and not view.tools and playbook_of(view) is None and len(messages) <= 1:
        text = "Scripted demo agent (not a model): ready."
        return {"role": "assistant", "content": text}, "stop"
    action = agent_action(view)
    think = f"<think>Scripted demo agent (not a model): {action.thought}</think>"
    if action.kind == "final":
        submit = next((t for t in view.tools if _is_submit(t["name"])), None)
        if submit is not None:
            params = submit.get("parameters") or {}
            props = list((params.get("properties") or {}).keys())
            key = next((k for k in params.get("required") or props if k in props), "answer")
            action = Action("tool", submit["name"], {key: action.text}, thought=action.thought)
        elif "FINAL ANSWER:" in view.text:
            action = Action("text", text=f"FINAL ANSWER: {action.text}", thought=action.thought)
        else:
            return {
                "role": "assistant",
                "content": f"{think}<final_answer>{action.text}</final_answer>",
            }, "stop"
    if action.kind == "tool" and view.native_tools:
        number = len(view.taken)
        call = {
            "id": f"call_{hashlib.sha256(f'{seed}:{number}'.encode()).hexdigest()[:12]}",
            "type": "function",
            "function": {
                "name": action.name,
                "arguments": json.dumps(action.arguments, ensure_ascii=False),
            },
        }
        return {"role": "assistant", "content": think, "tool_calls": [call]}, "tool_calls"
    if action.kind == "tool":
        text = json.dumps({"name": action.name, "arguments": action.arguments}, ensure_ascii=False)
    else:
        text = action.text
    return {"role": "assistant", "content": f"{think}<action>{text}</action>"}, "stop"


# ================================================================================ the server


def _seed_of(body: dict[str, Any]) -> Any:
    seed = body.get("seed")
    if isinstance(seed, int) and not isinstance(seed, bool):
        return seed
    # no seed: the chat itself decides (the same request, the same answer)
    return hashlib.sha256(json.dumps(body.get("messages"), sort_keys=True).encode()).hexdigest()


def _cut(text: str, limit: Any) -> tuple[str, bool]:
    """The first `limit` words of `text` (a model stops at max_tokens)."""
    if not isinstance(limit, int) or isinstance(limit, bool) or limit <= 0:
        return text, False
    words = text.split()
    if len(words) <= limit:
        return text, False
    return " ".join(words[:limit]), True


def completion(body: dict[str, Any]) -> dict[str, Any]:
    """The chat completion object for a request body (raises ChatError)."""
    model = body.get("model")
    if model not in CHAT_MODELS:
        raise ChatError(
            404,
            f"The model {model!r} does not exist here: this scripted demo server answers "
            f"{AGENT_MODEL!r}, {WORLD_MODEL!r} and {JUDGE_MODEL!r} (stand-ins, not models)"
            + (
                f"; {EMBEDDING_MODEL!r} answers POST /v1/embeddings"
                if model == EMBEDDING_MODEL
                else ""
            ),
        )
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ChatError(400, "messages must be a non-empty list")
    n = body.get("n") or 1
    if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= 64:
        raise ChatError(400, "n must be a whole number from 1 to 64")
    seed = _seed_of(body)
    choices = []
    for i in range(n):
        choice_seed = seed if i == 0 else f"{seed}:{i}"
        if model == AGENT_MODEL:
            message, finish = agent_message(body, choice_seed)
        elif model == JUDGE_MODEL:
            message, finish = {"role": "assistant", "content": judge_answer(messages)}, "stop"
        else:
            message, finish = (
                {"role": "assistant", "content": world_answer(messages, choice_seed)},
                "stop",
            )
        content, cut = _cut(message.get("content") or "", body.get("max_tokens"))
        message["content"] = content
        choices.append(
            {"index": i, "message": message, "finish_reason": "length" if cut else finish}
        )
    prompt_tokens = sum(count_tokens(_content_text(m.get("content"))) for m in messages)
    prompt_tokens += count_tokens(json.dumps(body.get("tools") or [])) if body.get("tools") else 0
    out_tokens = 0
    c: Any
    for c in choices:
        out_tokens += count_tokens(c["message"].get("content") or "")
        for call in c["message"].get("tool_calls") or []:
            out_tokens += count_tokens(call["function"]["arguments"]) + 1
    return {
        "id": f"chatcmpl-scripted-{hashlib.sha256(str(seed).encode()).hexdigest()[:16]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "system_fingerprint": FINGERPRINT,
        "choices": choices,
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": out_tokens,
            "total_tokens": prompt_tokens + out_tokens,
        },
    }


def embeddings(body: dict[str, Any]) -> dict[str, Any]:
    """The embeddings object for a request body (raises ChatError): `scripted-embedding`
    only, `input` a string or a list of strings."""
    model = body.get("model")
    if model != EMBEDDING_MODEL:
        raise ChatError(
            404,
            f"The model {model!r} has no embeddings here: this scripted demo server embeds "
            f"with {EMBEDDING_MODEL!r} (a hashed bag of words, not a model)",
        )
    texts = body.get("input")
    if isinstance(texts, str):
        texts = [texts]
    if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
        raise ChatError(400, "input must be a string or a non-empty list of strings")
    if len(texts) > 2048:
        raise ChatError(400, "input holds more than 2048 texts")
    if body.get("encoding_format") not in (None, "float"):
        raise ChatError(400, "encoding_format must be 'float' (this server sends no base64)")
    data = [
        {"object": "embedding", "index": i, "embedding": embed_text(t)} for i, t in enumerate(texts)
    ]
    tokens = sum(count_tokens(t) for t in texts)
    return {
        "object": "list",
        "data": data,
        "model": model,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }


def stream_chunks(result: dict[str, Any], include_usage: bool) -> Iterator[dict[str, Any]]:
    """The completion as server-sent chunks (the content in pieces of a few words)."""
    base = {k: result[k] for k in ("id", "created", "model", "system_fingerprint")}
    base["object"] = "chat.completion.chunk"
    for choice in result["choices"]:
        i, message = choice["index"], choice["message"]
        yield {**base, "choices": [{"index": i, "delta": {"role": "assistant"}}]}
        words = re.findall(r"\S+\s*|\s+", message.get("content") or "")
        for start in range(0, len(words), 4):
            piece = {"content": "".join(words[start : start + 4])}
            yield {**base, "choices": [{"index": i, "delta": piece, "finish_reason": None}]}
        for k, call in enumerate(message.get("tool_calls") or []):
            delta: dict[str, Any] = {"tool_calls": [{"index": k, **call}]}
            yield {**base, "choices": [{"index": i, "delta": delta, "finish_reason": None}]}
        done = {"index": i, "delta": {}, "finish_reason": choice["finish_reason"]}
        yield {**base, "choices": [done]}
    if include_usage:
        yield {**base, "choices": [], "usage": result["usage"]}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    server_version = "ScriptedDemoModels/1"
    quiet = False

    def log_message(self, format: str, *args: Any) -> None:
        if not self.quiet:
            super().log_message(format, *args)

    def _send(self, status: int, payload: Any) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _error(self, status: int, message: str) -> None:
        self._send(status, {"error": {"message": message, "type": "invalid_request_error",
                                      "code": status}})  # fmt: skip

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0].rstrip("/")
        if path in ("/v1/models", "/models"):
            created = 1767225600
            data = [
                {"id": m, "object": "model", "created": created, "owned_by": OWNER} for m in MODELS
            ]
            self._send(200, {"object": "list", "data": data})
        elif path in ("", "/health", "/v1"):
            self._send(200, {"status": "ok", "models": list(MODELS), "note": OWNER})
        else:
            self._error(404, f"no route {self.path}")

    def do_POST(self) -> None:
        path = self.path.split("?", 1)[0].rstrip("/")
        if path not in (
            "/v1/chat/completions",
            "/chat/completions",
            "/v1/embeddings",
            "/embeddings",
        ):
            self._error(404, f"no route {self.path}: POST /v1/chat/completions or /v1/embeddings")
            return
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY:
            self._error(413, f"the request is larger than {MAX_BODY} bytes")
            return
        body = _json(self.rfile.read(length).decode("utf-8", "replace"))
        if not isinstance(body, dict):
            self._error(400, "the body must be a JSON object")
            return
        try:
            if path.endswith("/embeddings"):
                self._send(200, embeddings(body))
                return
            result = completion(body)
        except ChatError as exc:
            self._error(exc.status, str(exc))
            return
        if not body.get("stream"):
            self._send(200, result)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.close_connection = True
        self.end_headers()
        usage = bool((body.get("stream_options") or {}).get("include_usage"))
        try:
            for chunk in stream_chunks(result, usage):
                self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass


class ScriptedServer(ThreadingHTTPServer):
    daemon_threads = True

    @property
    def base_url(self) -> str:
        host, port = self.server_address[:2]
        return (
            f"http://{host!s}:{port}/v1" if isinstance(host, str) else f"http://127.0.0.1:{port}/v1"
        )


def make_server(host: str = "127.0.0.1", port: int = DEFAULT_PORT, *, quiet: bool = False):
    """The server bound on `host:port` (port 0: a free one); call serve_forever()."""
    if host not in ("127.0.0.1", "localhost", "::1"):
        raise ValueError(
            f"the scripted demo models listen on this machine only (127.0.0.1), not {host!r}"
        )
    handler = type("QuietHandler" if quiet else "Handler", (Handler,), {"quiet": quiet})
    return ScriptedServer((host, port), handler)


class running:
    """`with running() as url:` the server on a free port in a thread (for tests and shells)."""

    def __init__(self, port: int = 0):
        self.server = make_server(port=port, quiet=True)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        return self.server.base_url

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)
