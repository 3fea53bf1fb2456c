"""AgentWorldBench JSONL: one row per turn to predict, grouped back into trajectories.

A row holds `task` (domain after the last `/`), `id`, `prompt` (per-turn user prompts),
`response` (per-turn ground-truth observations), `system_str`, `turn_idx` (1-based) and
`total_turns`. Rows of the same trajectory share their `prompt`/`response` lists (or hold
prefixes of them, one turn longer per row) whatever their ids, so rows are grouped by those
lists: each group becomes ONE trajectory whose steps are the turns of its longest lists.

Per step: `raw_prompt` = prompt[i] and `meta["raw_response"]` = response[i], verbatim, so
prompts rebuilt for simulation are byte-identical to the file's. The shown action is the
`**Action:**` section without the `### Turn N` heading; `**Current State:**` goes to
`Step.state`, `**Historical Context:**` to `meta["historical_context"]`, and the first
`**Task Instruction:**` to the trajectory. The observation is the response without its
`**Environment Observation:**` marker. A short row that is a prefix of two diverging longer
trajectories joins the first of them. A `task` naming no studio domain is an error unless
the user gives the domain.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from studio.importers.base import (
    DOMAINS,
    ParsedStep,
    ParsedTrajectory,
    Source,
    Where,
    get,
    get_str_list,
    shorten,
)

NAME = "agentworldbench"
DOMAIN = "mcp"
# Generic format: a domain-named folder in the path (…/web/…) decides, else DOMAIN.
PATH_DECIDES_DOMAIN = True

TURN_HEADING = re.compile(
    r"\A\s*#{1,6}[ \t]*Turn[ \t]+\d+[ \t]*:?[ \t]*(?:\r?\n|\Z)", re.IGNORECASE
)
# `**Label:**` at a line start (also written `**Label**:`)
SECTION = re.compile(
    r"^\*\*(Task Instruction|Historical Context|Current State|Action)(?::\*\*|\*\*:)[ \t]*",
    re.MULTILINE,
)
# A fenced code block: labels inside it are the action's text (a command writing markdown).
FENCE = re.compile(r"^[ \t]*```.*?^[ \t]*```", re.MULTILINE | re.DOTALL)
OBS_MARKER = re.compile(r"\A\s*\*\*Environment Observation(?::\*\*|\*\*:)[ \t]*\n?")


def sniff(kind: str, sample) -> bool:
    row = sample[0] if isinstance(sample, list) and sample else sample
    return (
        isinstance(row, dict)
        and isinstance(row.get("prompt"), list)
        and isinstance(row.get("response"), list)
        and ("task" in row or "system_str" in row or "turn_idx" in row)
    )


def split_prompt(prompt: str) -> dict[str, str]:
    """The labelled sections of a turn prompt, heading removed; text with no label is the
    action (a prompt that is only an action)."""
    body = TURN_HEADING.sub("", prompt, count=1)
    fenced = [m.span() for m in FENCE.finditer(body)]
    matches = [m for m in SECTION.finditer(body) if not any(a < m.start() < b for a, b in fenced)]
    sections: dict[str, str] = {}
    if not matches:
        sections["Action"] = _trim(body)
        return sections
    for m, nxt in zip(matches, [*matches[1:], None], strict=True):
        end = nxt.start() if nxt else len(body)
        sections[m.group(1)] = _trim(body[m.end() : end])
    return sections


def strip_observation(response: str) -> str:
    return _trim(OBS_MARKER.sub("", TURN_HEADING.sub("", response, count=1), count=1))


def _trim(text: str) -> str:
    # Blank lines around go; leading spaces of the first line stay (aligned terminal output).
    return text.lstrip("\r\n").rstrip()


def domain_of(task: str) -> str:
    return task.rsplit("/", 1)[-1].strip().lower().removesuffix("_test")


@dataclass
class Row:
    where: Where
    id: str
    task: str
    system: str
    turn: int
    prompt: list[str]
    response: list[str]
    # how many turns the row's own lists held, and its `total_turns` (kept in its Member,
    # so an export writes the row back as it was)
    turns: int = 0
    total: int | None = None


@dataclass(slots=True)  # one per row of the file: kept small
class Member:
    """What a trajectory keeps of each of its rows: no lists (those of its longest row are
    read again from the file when it is built)."""

    id: str
    turn: int
    turns: int
    total: int | None


@dataclass(slots=True)
class Group:
    place: tuple[int, int]  # where its longest row is: (line number, byte offset) or (index, 0)
    turns: int  # how many turns the longest row's lists hold
    first: int  # position of its first row in the file
    rows: list[Member] = field(default_factory=list)
    alive: bool = True  # False once merged into a longer group


def _prefix_hashes(row: Row) -> list[bytes]:
    """Hash of the first k turns for every k (system prompt and task included, so equal
    turns of different samples stay apart, and every row of a group has the same ones)."""
    h = hashlib.sha1(_utf8(f"{row.task}\0{row.system}")).digest()
    out = []
    for p, r in zip(row.prompt, row.response, strict=False):
        turn = hashlib.sha1(_utf8(p)).digest() + hashlib.sha1(_utf8(r)).digest()
        h = hashlib.sha1(h + turn).digest()
        out.append(h)
    return out


def _utf8(text: str) -> bytes:
    # JSON may hold half a surrogate pair ("\\ud800"); it is hashed as is, replaced on write.
    return text.encode("utf-8", "surrogatepass")


def read_row(where: Where, record) -> Row:
    if not isinstance(record, dict):
        raise where.error("expected a JSON object (one AgentWorldBench row)")
    prompt = get_str_list(record, "prompt", where)
    response = get_str_list(record, "response", where)
    task = get(record, "task", str, where, required=False) or ""
    system = get(record, "system_str", str, where, required=False) or ""
    row_id = record.get("id", "")
    if not isinstance(row_id, str | int):
        raise where.fail("id", "must be a string or an integer")
    turn = get(record, "turn_idx", int, where, required=False)
    if turn is None:
        turn = min(len(prompt), len(response))
    if not prompt or not response:
        raise where.fail("prompt", "must hold at least one turn")
    if turn < 1 or turn > len(prompt):
        raise where.fail("turn_idx", f"must be between 1 and {len(prompt)} (the prompts given)")
    if turn > len(response):
        raise where.fail("response", f"must hold the observation of turn {turn}")
    total = record.get("total_turns")
    total = total if isinstance(total, int) and not isinstance(total, bool) else None
    turns = min(len(prompt), len(response))
    return Row(where, str(row_id), task, system, turn, prompt, response, turns, total)


def group_rows(rows: Iterable[tuple[tuple[int, int], Row]]) -> list[Group]:
    """Rows whose turn lists are equal or prefixes of each other form one group.

    The first of two passes over the file: a group keeps the hashes of its longest row's
    prefixes, where that row is, and the ids and turns of its rows, never their text, so
    memory follows the number of rows and turns, not the file's size. `build` reads each
    group's longest row again."""
    owner: dict[bytes, Group] = {}  # hash of every prefix of a group's longest lists
    groups: list[Group] = []
    for position, (place, row) in enumerate(rows):
        hashes = _prefix_hashes(row)
        member = Member(row.id, row.turn, row.turns, row.total)
        group = owner.get(hashes[-1])
        if group is not None and group.alive:
            group.rows.append(member)
            continue
        group = Group(place=place, turns=len(hashes), first=position, rows=[member])
        for turns, h in enumerate(hashes[:-1], start=1):
            shorter = owner.get(h)
            # a group whose whole lists are this prefix joins; one that diverges later stays
            if shorter is not None and shorter.alive and shorter.turns == turns:
                group.rows += shorter.rows
                group.first = min(group.first, shorter.first)
                shorter.alive = False
        for h in hashes:
            if h not in owner or not owner[h].alive:
                owner[h] = group
        groups.append(group)
    alive = [g for g in groups if g.alive]
    alive.sort(key=lambda g: g.first)  # the file's order of first appearance
    return alive


def build(group: Group, longest: Row) -> ParsedTrajectory:
    """The trajectory of a group, from its longest row (read again) and its rows' ids."""
    rows = sorted(group.rows, key=lambda r: r.turn)
    turns = min(len(longest.prompt), len(longest.response))
    row_of_turn = {r.turn: r for r in rows}
    instruction = ""
    steps = []
    for i in range(turns):
        prompt, response = longest.prompt[i], longest.response[i]
        sections = split_prompt(prompt)
        instruction = instruction or sections.get("Task Instruction", "")
        meta = {"raw_response": response, "turn": i + 1}
        if "Historical Context" in sections:
            meta["historical_context"] = sections["Historical Context"]
        if (i + 1) in row_of_turn:
            row = row_of_turn[i + 1]
            meta["row_id"] = row.id
            meta["row_turns"] = row.turns
            if row.total is not None:
                meta["row_total_turns"] = row.total
        steps.append(
            ParsedStep(
                action=sections.get("Action", ""),
                observation=strip_observation(response),
                state=sections.get("Current State", ""),
                raw_prompt=prompt,
                meta=meta,
            )
        )
    ids = list(dict.fromkeys(r.id for r in rows))
    first_id = ids[0] if ids else ""
    title = f"{first_id}: {shorten(instruction, 100)}" if instruction else f"{first_id}"
    domain, problem = domain_of(longest.task) if longest.task else None, ""
    if domain is not None and domain not in DOMAINS:
        message = f'names no known domain ("{domain}"); give one with --domain'
        domain, problem = None, str(longest.where.fail("task", message))
    return ParsedTrajectory(
        title=title or f"AgentWorldBench {longest.task}",
        task_instruction=instruction,
        system_prompt=longest.system,  # the rows of a group share it (it is in their hashes)
        steps=steps,
        metadata={"agentworldbench": {"ids": ids, "task": longest.task}},
        domain=domain,
        domain_problem=problem,
        where=longest.where,
    )


def parse(source: Source):
    """Two passes over the rows: the first groups them (`group_rows`), the second reads each
    group's longest row again and yields its trajectory, one at a time, so the caller can
    write it before the next is built. Each pass is half of the progress."""
    first, second = source.part(0.0, 0.5), source.part(0.5, 0.5)
    if source.kind == "jsonl":
        rows = (
            ((number, offset), read_row(Where(source.name, f"line {number}"), record))
            for number, offset, record in first.lines_at()
        )
    else:
        rows = (((i, 0), read_row(at, record)) for i, (at, record) in enumerate(first.records()))
    groups = group_rows(rows)
    items = source.data if isinstance(source.data, list) else [source.data]
    for done, group in enumerate(groups, start=1):
        number, offset = group.place
        if source.kind == "jsonl":
            where = Where(source.name, f"line {number}")
            record = source.record_at(number, offset)
        else:
            where, record = Where(source.name, f"record {number}"), items[number]
        yield build(group, read_row(where, record))
        second.report(done / len(groups))
