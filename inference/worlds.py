"""Fictional worlds: what a world is made of, how it is checked, and how it becomes the world
model's system prompt. Plain Python (no Django): the studio stores versions of a world and
its forms edit the parts; the `worlds` command imports and exports the file format.

A world file is one JSON object:

    {"format": "agentworld-studio/world-v1", "name": "...", "domain": "mcp",
     "description": "...", "rules": "...", "knowledge": ["a fact", ...],
     "files": {"path": "content", ...}, "tools": [<OpenAI tools list>],
     "corpus": [{"title", "url", "snippet", "body"}, ...],
     "screens": [{"name", "elements"}, ...], "initial_state": "...",
     "demonstrations": [{"action", "observation"}, ...],
     "tasks": [...], "rubric": {...}, "termination": {...}, "state_keys": [...]}

`name`, `domain`, `description`, `knowledge`, `files` and `tools` are what every world
has (empty where unused); the rest are optional. `tools` is an OpenAI `tools` list
(`{"type": "function", "function": {"name", "description", "parameters"}}`); an MCP
`tools/list` result (`{"tools": [{"name", "description", "inputSchema"}]}`) is read too.
Each tool's parameters must be a valid JSON Schema (checked with `jsonschema`); errors name
the field and the tool. `world_to_file(parse_world(x))` is stable: export -> import ->
export gives the same bytes.

`tasks`, `rubric`, `termination` and `state_keys` make a world rewarded: what each task asks,
how an episode is scored and when it ends (`inference.rubrics` describes them). They are
written only when the world has them, so a world without them keeps its file."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from inference import rubrics
from inference.prompts import DOMAINS, build_system_prompt
from inference.rubrics import Rubric, RubricError, StateKey, Task, Termination

FORMAT = "agentworld-studio/world-v1"
MAX_TEXT = 200_000  # characters of any one text part
MAX_ITEMS = 2_000  # entries of any one list part
# Characters per token, for the preview's size when no tokenizer is at hand (English text
# and code with Qwen's tokenizer average close to this).
CHARS_PER_TOKEN = 3.6
DEFAULT_CONTEXT_BUDGET = 32_768  # tokens the system prompt should stay under by default
MAX_TASK_STEPS = 1000  # a task's max_steps (the episode API's own limit)


class WorldError(ValueError):
    """A world that cannot be used; the message names the field (and the tool)."""


# ---- hostile input: numbers that are not numbers, names that are not names ----------------

# A tool's name as OpenAI function names are (and MCP clients show them): letters, digits,
# '_', '-' and '.', at most 64. A name with spaces or markup reaches the agent's prompt and
# the model's tool call, where neither can be matched back reliably.
TOOL_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
TOOL_NAME_RULE = "letters, digits, '_', '-' or '.', at most 64 characters"
MAX_JSON_DEPTH = 200  # nesting the finite-number walk follows (deeper: refused)
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")  # C0 and C1 controls: line breaks and tabs too


def _constant(name: str) -> float:
    # json.loads accepts NaN, Infinity and -Infinity (not JSON) by default; they become the
    # floats the walk below refuses with the path, so a file's and a form's errors read alike
    return float(name)


def loads(text: str, *, check: bool = True) -> Any:
    """JSON text as Python, refusing NaN / Infinity / -Infinity (and numbers too large to be
    finite, e.g. 1e400) with WorldError naming the path. Syntax errors are JSONDecodeError and
    too deep a nesting RecursionError, as json.loads raises them. `check=False`: for a world
    file, which `parse_world` checks next (its message names the tool too)."""
    data = json.loads(text, parse_constant=_constant)
    if check:
        check_finite(data)
    return data


def non_finite(value: Any, path: str = "") -> tuple[str, float] | None:
    """(path, number) of the first NaN or infinite number in already-parsed JSON-like data
    (`a.b[2].c`; the root is "(root)"), or None. Depth is bounded: too deep a nesting raises
    WorldError rather than RecursionError."""
    stack: list[tuple[Any, str, int]] = [(value, path, 0)]
    while stack:
        item, at, depth = stack.pop()
        if depth > MAX_JSON_DEPTH:
            raise WorldError(f"{at or '(root)'} is nested more than {MAX_JSON_DEPTH} levels deep")
        if isinstance(item, float) and not math.isfinite(item):
            return at or "(root)", item
        if isinstance(item, Mapping):
            children = [(v, f"{at}.{k}" if at else str(k)) for k, v in item.items()]
        elif isinstance(item, list | tuple):
            children = [(v, f"{at}[{i}]") for i, v in enumerate(item)]
        else:
            continue
        stack.extend((v, p, depth + 1) for v, p in reversed(children))
    return None


def number_word(number: float) -> str:
    return "NaN" if math.isnan(number) else "Infinity" if number > 0 else "-Infinity"


def check_finite(value: Any, path: str = "", *, suffix: str = "") -> None:
    """Raise WorldError if `value` holds NaN or an infinity: `tools[0].function.parameters.
    properties.n.maximum is NaN: only finite numbers are allowed`. `suffix` follows the path
    (e.g. the tool's name)."""
    found = non_finite(value, path)
    if found is not None:
        at, number = found
        raise WorldError(f"{at} is {number_word(number)}{suffix}: only finite numbers are allowed")


def name_problem(name: str, what: str, *, path_like: bool = False) -> str | None:
    """Why `name` (a world's, a state key's) cannot be one, or None: names are shown in pages,
    prompts and file names, so no markup characters and no control characters. `path_like`:
    a screen's name may say where it is ("Settings > Wi-Fi"), so only '<' is refused there."""
    if "<" in name or (">" in name and not path_like):
        return f"{what} {name!r} has '<' or '>': a name is plain text, not markup"
    if CONTROL.search(name):
        return (
            f"{what} {name!r} has a control character (a line break, a tab, ...): a name is "
            "one line of plain text"
        )
    return None


def tool_name_problem(name: str) -> str | None:
    if TOOL_NAME.fullmatch(name):
        return None
    return f"tool name {name!r} must be {TOOL_NAME_RULE} (as OpenAI function names are)"


@dataclass(frozen=True)
class Document:
    title: str
    url: str = ""
    snippet: str = ""
    body: str = ""


@dataclass(frozen=True)
class Screen:
    name: str
    elements: str = ""  # the element list or accessibility tree, as the domain writes it


@dataclass(frozen=True)
class Demonstration:
    action: str
    observation: str


@dataclass(frozen=True)
class WorldSpec:
    name: str
    domain: str
    description: str = ""
    rules: str = ""
    knowledge: tuple[str, ...] = ()
    files: tuple[tuple[str, str], ...] = ()  # (path, content), sorted by path
    tools: tuple[dict[str, Any], ...] = ()  # OpenAI tools, normalised
    corpus: tuple[Document, ...] = ()
    screens: tuple[Screen, ...] = ()
    initial_state: str = ""
    demonstrations: tuple[Demonstration, ...] = ()
    tasks: tuple[Task, ...] = ()
    rubric: Rubric = Rubric()
    termination: Termination = Termination()
    state_keys: tuple[StateKey, ...] = ()

    @property
    def tool_names(self) -> list[str]:
        return [t["function"]["name"] for t in self.tools]

    def task(self, task_id: str) -> Task | None:
        for task in self.tasks:
            if task.id == task_id:
                return task
        return None

    def tool(self, name: str) -> dict[str, Any] | None:
        for t in self.tools:
            if t["function"]["name"] == name:
                return t
        return None


# ---- reading and checking -----------------------------------------------------------------


def _text(data: Mapping[str, Any], key: str, where: str, *, required: bool = False) -> str:
    value = data.get(key)
    if value is None:
        if required:
            raise WorldError(f"{where}{key} is required")
        return ""
    if not isinstance(value, str):
        raise WorldError(f"{where}{key} must be text, got {type(value).__name__}")
    if len(value) > MAX_TEXT:
        raise WorldError(f"{where}{key} is longer than {MAX_TEXT:,} characters")
    return value.replace("\r\n", "\n")


def _list(data: Mapping[str, Any], key: str) -> list:
    value = data.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise WorldError(f"{key} must be a list, got {type(value).__name__}")
    if len(value) > MAX_ITEMS:
        raise WorldError(f"{key} has more than {MAX_ITEMS} entries")
    return value


def _objects(data: Mapping[str, Any], key: str) -> list[Mapping[str, Any]]:
    items = _list(data, key)
    for i, item in enumerate(items):
        if not isinstance(item, Mapping):
            raise WorldError(f"{key}[{i}] must be an object")
    return items


def read_tools(
    raw: Any, where: str = "tools", *, check_names: bool = True
) -> tuple[dict[str, Any], ...]:
    """An OpenAI `tools` list, a list of bare functions, or an MCP `tools/list` result
    (`{"tools": [...]}` with `inputSchema`), as normalised OpenAI tools. Each tool's
    parameters are checked as a JSON Schema, and hold only finite numbers; `check_names`:
    each name matches TOOL_NAME (off only for versions stored before that rule)."""
    from jsonschema import exceptions, validators

    if isinstance(raw, Mapping) and "tools" in raw:
        raw = raw["tools"]  # an MCP tools/list result (or {"tools": [...]})
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise WorldError(f"{where} must be a list of tools (an OpenAI tools list)")
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    for i, item in enumerate(raw):
        at = f"{where}[{i}]"
        if not isinstance(item, Mapping):
            check_finite(item, at)
            raise WorldError(f"{at} must be an object")
        inner = item.get("function")
        fn: Mapping[str, Any] = inner if isinstance(inner, Mapping) else item
        name = fn.get("name")
        if not isinstance(name, str) or not name.strip():
            check_finite(item, at)  # NaN where the function or its name belongs: say so
            raise WorldError(f"{at}: a tool needs a name")
        name = name.strip()
        if check_names and (problem := tool_name_problem(name)) is not None:
            raise WorldError(f"{at}: {problem}")
        check_finite(item, at, suffix=f" (tool {name!r})")
        at = f"{where}[{i}] ({name})"
        if name in seen:
            raise WorldError(f"{at}: two tools are named {name!r}")
        seen.add(name)
        description = fn.get("description") or ""
        if not isinstance(description, str):
            raise WorldError(f"{at}: description must be text")
        params = fn.get("parameters", fn.get("inputSchema", {"type": "object", "properties": {}}))
        if not isinstance(params, Mapping):
            raise WorldError(f"{at}: parameters must be a JSON Schema object")
        if "$schema" in params and not isinstance(params["$schema"], str):
            raise WorldError(f"{at}: parameters.$schema must be the URI of a JSON Schema dialect")
        if len(name) > 200 or len(description) > MAX_TEXT:
            raise WorldError(f"{at}: the name (200) or description ({MAX_TEXT:,}) is too long")
        try:
            validators.validator_for(params).check_schema(params)
        except RecursionError:
            raise WorldError(f"{at}: parameters are nested too deeply") from None
        except exceptions.SchemaError as exc:
            path = "/".join(str(p) for p in exc.path) or "(root)"
            raise WorldError(
                f"{at}: parameters is not a valid JSON Schema at {path}: {exc.message}"
            ) from None
        out.append(
            {
                "type": "function",
                "function": {"name": name, "description": description, "parameters": params},
            }
        )
    return tuple(out)


def parse_world(data: Any, *, incoming: bool = False) -> WorldSpec:
    """Check a world (a file's JSON, or the editor's data); raise WorldError naming the
    field. Unknown top-level keys are refused, so a typo is not silently dropped; so is NaN
    or an infinity anywhere (naming its path). `incoming`: a world arriving (a file, the
    editor, the shell), whose names are held to `check_names`; a stored version is read
    without it, so a world saved before those rules still opens (and is checked when saved
    again)."""
    if not isinstance(data, Mapping):
        raise WorldError("a world is a JSON object")
    # everything but a tools list here; its tools in read_tools, each message with its name
    check_finite({k: v for k, v in data.items() if k != "tools" or not isinstance(v, list)})
    known = {
        "format", "name", "domain", "description", "rules", "knowledge", "files", "tools",
        "corpus", "screens", "initial_state", "demonstrations", "tasks", "rubric",
        "termination", "state_keys",
    }  # fmt: skip
    unknown = sorted(set(data) - known, key=str)
    if unknown:
        raise WorldError(f"unknown field {unknown[0]!r} (a world has: {', '.join(sorted(known))})")
    fmt = data.get("format", FORMAT)
    if fmt != FORMAT:
        raise WorldError(f"format must be {FORMAT!r}, got {fmt!r}")
    name = _text(data, "name", "", required=True).strip()
    if not name:
        raise WorldError("name is required")
    if len(name) > 200:
        raise WorldError("name is longer than 200 characters")
    domain = _text(data, "domain", "", required=True)
    if domain not in DOMAINS:
        raise WorldError(f"domain must be one of {', '.join(DOMAINS)}, got {domain!r}")
    knowledge = []
    for i, entry in enumerate(_list(data, "knowledge")):
        if not isinstance(entry, str):
            raise WorldError(f"knowledge[{i}] must be text")
        if len(entry) > MAX_TEXT:
            raise WorldError(f"knowledge[{i}] is longer than {MAX_TEXT:,} characters")
        if entry.strip():
            knowledge.append(entry.replace("\r\n", "\n").strip())
    files_raw = data.get("files") or {}
    if not isinstance(files_raw, Mapping):
        raise WorldError("files must be an object of path: content")
    if len(files_raw) > MAX_ITEMS:
        raise WorldError(f"files has more than {MAX_ITEMS} entries")
    files = []
    for path, content in files_raw.items():
        clean = str(path).strip()
        if not clean:
            raise WorldError("files: a file needs a path")
        if not isinstance(content, str):
            raise WorldError(f"files[{clean!r}] must be text (the file's content)")
        if len(content) > MAX_TEXT:
            raise WorldError(f"files[{clean!r}] is longer than {MAX_TEXT:,} characters")
        files.append((clean, content.replace("\r\n", "\n")))
    paths = [p for p, _ in files]
    if len(set(paths)) != len(paths):
        raise WorldError("files: two files have the same path")
    corpus = tuple(
        Document(
            title=_text(d, "title", f"corpus[{i}].", required=True),
            url=_text(d, "url", f"corpus[{i}]."),
            snippet=_text(d, "snippet", f"corpus[{i}]."),
            body=_text(d, "body", f"corpus[{i}]."),
        )
        for i, d in enumerate(_objects(data, "corpus"))
    )
    screens = tuple(
        Screen(
            name=_text(s, "name", f"screens[{i}].", required=True),
            elements=_text(s, "elements", f"screens[{i}]."),
        )
        for i, s in enumerate(_objects(data, "screens"))
    )
    demos = tuple(
        Demonstration(
            action=_text(d, "action", f"demonstrations[{i}].", required=True),
            observation=_text(d, "observation", f"demonstrations[{i}].", required=True),
        )
        for i, d in enumerate(_objects(data, "demonstrations"))
    )
    tools = read_tools(data.get("tools"), check_names=incoming)
    try:
        state_keys = rubrics.read_state_keys(data.get("state_keys"))
        key_names = [k.name for k in state_keys]
        rubric = rubrics.read_rubric(data.get("rubric"), state_keys=key_names)
        termination = rubrics.read_termination(
            data.get("termination"),
            state_keys=key_names,
            tool_names=[t["function"]["name"] for t in tools],
        )
        tasks = rubrics.read_tasks(
            data.get("tasks"),
            state_keys=key_names,
            max_steps_limit=MAX_TASK_STEPS,
            item_limit=MAX_ITEMS,
        )
        rubrics.check_task_rubrics(tasks, rubric, termination)
    except RubricError as exc:
        raise WorldError(str(exc)) from None
    spec = WorldSpec(
        name=name,
        domain=domain,
        description=_text(data, "description", "").strip(),
        rules=_text(data, "rules", "").strip(),
        knowledge=tuple(knowledge),
        files=tuple(sorted(files)),
        tools=tools,
        corpus=corpus,
        screens=screens,
        initial_state=_text(data, "initial_state", "").strip(),
        demonstrations=demos,
        tasks=tasks,
        rubric=rubric,
        termination=termination,
        state_keys=state_keys,
    )
    if incoming:
        check_names(spec)
    return spec


def check_names(spec: WorldSpec) -> None:
    """Raise WorldError unless the world's names are sane: its name, its state keys' and its
    screens' plain one-line text without markup, its tools' names TOOL_NAME, its files' paths
    free of control characters. Where a world comes in (`parse_world(incoming=True)`)."""
    problem = name_problem(spec.name, "the world's name")
    if problem is not None:
        raise WorldError(f"name: {problem}")
    for i, tool in enumerate(spec.tools):
        problem = tool_name_problem(tool["function"]["name"])
        if problem is not None:
            raise WorldError(f"tools[{i}]: {problem}")
    for i, key in enumerate(spec.state_keys):
        problem = name_problem(key.name, "the state key")
        if problem is not None:
            raise WorldError(f"state_keys[{i}].name: {problem}")
    for i, screen in enumerate(spec.screens):
        problem = name_problem(screen.name, "the screen's name", path_like=True)
        if problem is not None:
            raise WorldError(f"screens[{i}].name: {problem}")
    for path, _ in spec.files:
        if CONTROL.search(path):
            raise WorldError(
                f"files[{path!r}]: a path has no control characters (line breaks, tabs, ...)"
            )


def world_to_file(spec: WorldSpec) -> dict[str, Any]:
    """The world as its file's JSON object (the form `parse_world` reads back). The parts of
    a rewarded world are written only when it has them."""
    out: dict[str, Any] = {
        "format": FORMAT,
        "name": spec.name,
        "domain": spec.domain,
        "description": spec.description,
        "rules": spec.rules,
        "knowledge": list(spec.knowledge),
        "files": dict(spec.files),
        "tools": [json.loads(json.dumps(t)) for t in spec.tools],
        "corpus": [asdict(d) for d in spec.corpus],
        "screens": [asdict(s) for s in spec.screens],
        "initial_state": spec.initial_state,
        "demonstrations": [asdict(d) for d in spec.demonstrations],
    }
    if spec.tasks:
        out["tasks"] = [t.to_file() for t in spec.tasks]
    if spec.rubric:
        out["rubric"] = spec.rubric.to_file()
    if spec.termination:
        out["termination"] = spec.termination.to_file()
    if spec.state_keys:
        out["state_keys"] = [asdict(k) for k in spec.state_keys]
    return out


def dumps(spec: WorldSpec) -> str:
    """The world file's text: stable (sorted keys, two-space indent, a final newline)."""
    return json.dumps(world_to_file(spec), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


# ---- composing the system prompt ----------------------------------------------------------


@dataclass
class Composed:
    system_prompt: str
    world_section: str
    chars: int
    tokens: int
    tokens_estimated: bool
    budget: int
    warnings: list[str] = field(default_factory=list)

    @property
    def over_budget(self) -> bool:
        return self.tokens > self.budget


def world_text(spec: WorldSpec) -> str:
    """The world section of the system prompt: every non-empty part, headed."""
    parts: list[str] = [f"World: {spec.name}"]
    if spec.description:
        parts.append(spec.description)
    if spec.rules:
        parts.append("Rules of this world (they hold at every step):\n" + spec.rules)
    if spec.initial_state:
        parts.append("Initial state:\n" + spec.initial_state)
    if spec.knowledge:
        parts.append("What is true in this world:\n" + "\n".join(f"- {k}" for k in spec.knowledge))
    if spec.files:
        listing = "\n".join(f"- {path} ({len(content)} chars)" for path, content in spec.files)
        bodies = "\n\n".join(f"--- {path}\n{content}" for path, content in spec.files)
        parts.append(f"The file system holds these files:\n{listing}\n\nTheir contents:\n{bodies}")
    if spec.corpus:
        docs = "\n\n".join(
            f"[{i + 1}] {d.title}" + (f"\nURL: {d.url}" if d.url else "")
            + (f"\nSnippet: {d.snippet}" if d.snippet else "")
            + (f"\n{d.body}" if d.body else "")
            for i, d in enumerate(spec.corpus)
        )  # fmt: skip
        parts.append(
            "The search corpus (searches return these documents when they match; nothing "
            "else exists):\n" + docs
        )
    if spec.screens:
        parts.append(
            "Screens of this world:\n"
            + "\n\n".join(f"Screen {s.name}:\n{s.elements}" for s in spec.screens)
        )
    if spec.demonstrations:
        parts.append(
            "Examples of this world's observations:\n"
            + "\n\n".join(
                f"Action:\n{d.action}\nObservation:\n{d.observation}" for d in spec.demonstrations
            )
        )
    return "\n\n".join(parts)


def compose(
    spec: WorldSpec,
    *,
    count_tokens=None,
    budget: int = DEFAULT_CONTEXT_BUDGET,
    perturbation: str = "",
) -> Composed:
    """The world model's system prompt for `spec`, with its size. `count_tokens(text) ->
    int` is a tokenizer when the caller has one; else the size is an estimate."""
    section = world_text(spec)
    prompt = build_system_prompt(
        spec.domain,
        list(spec.tools) or None,
        world=section,
        perturbation=perturbation,
        state_keys=[(k.name, k.description) for k in spec.state_keys],
    )
    if count_tokens is not None:
        tokens, estimated = int(count_tokens(prompt)), False
    else:
        tokens, estimated = round(len(prompt) / CHARS_PER_TOKEN), True
    composed = Composed(prompt, section, len(prompt), tokens, estimated, budget)
    if composed.over_budget:
        composed.warnings.append(
            f"The system prompt is about {tokens:,} tokens, more than the budget of "
            f"{budget:,}: the history and the answer may not fit the model's context."
        )
    if spec.domain == "mcp" and not spec.tools:
        composed.warnings.append("An MCP world without tools: every tool call will fail.")
    return composed
