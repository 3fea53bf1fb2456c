"""Perturbations: ways the environment deviates from its normal behaviour, for controllable
simulation. Plain Python (no Django): the studio's library stores them, the request
validates them, the runner applies them.

A perturbation has a kind (`KINDS`), parameters, and is applied one of two ways:
- prompted: its instruction goes into the world model's prompt for that turn, so the model
  writes a realistic perturbed observation in the domain's own format;
- deterministic: a transform of the observation text (`transform`), no model needed, so it
  also works with the retrieval baseline, offline, and on recorded observations.

A `Rule` says where one applies: at which steps, to which tool, with what probability;
`choose` decides per future and step with a seeded generator, so runs reproduce.

Specs on the command line: `kind` or `kind:param=value,param=value`, e.g.
`truncated:chars=40` or `tool_error:message=Quota exceeded,code=429`."""

from __future__ import annotations

import json
import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from inference.simulation.meaning import json_value

PROMPTED = "prompted"
DETERMINISTIC = "deterministic"
MODES = {PROMPTED: "prompted (the world model writes it)", DETERMINISTIC: "deterministic"}

TRUNCATION_MARKER = "[…truncated]"
MAX_PARAM_CHARS = 2000
MAX_RULES = 8
MAX_SWEEP = 8


@dataclass(frozen=True)
class Param:
    name: str
    kind: type  # str | int | float
    default: Any
    help: str
    low: float | None = None
    high: float | None = None


@dataclass(frozen=True)
class Kind:
    name: str
    label: str
    params: tuple[Param, ...] = ()
    deterministic: bool = True  # has a transform (custom has none)


KINDS: dict[str, Kind] = {
    k.name: k
    for k in (
        Kind(
            "tool_error",
            "Tool error",
            (
                Param("message", str, "Internal error while running the tool", "the message"),
                Param("code", int, 500, "the error code", -99999, 99999),
            ),
        ),
        Kind("timeout", "Timeout", (Param("seconds", int, 30, "after how long", 1, 86400),)),
        Kind(
            "rate_limit",
            "Rate limit",
            (Param("retry_after", int, 60, "seconds until a retry may work", 1, 86400),),
        ),
        Kind("empty_result", "Empty result"),
        Kind(
            "truncated",
            "Truncated output",
            (Param("chars", int, 200, "characters kept", 0, 10_000_000),),
        ),
        Kind(
            "stale",
            "Stale or outdated result",
            (Param("age", str, "3 days", "how old the served result is"),),
        ),
        Kind(
            "permission_denied",
            "Permission denied",
            (Param("resource", str, "", "what access was refused to (blank: the target)"),),
        ),
        Kind(
            "network_failure",
            "Network failure",
            (Param("detail", str, "connection reset by peer", "what failed"),),
        ),
        Kind(
            "schema_drift",
            "Schema drift",
            (
                Param("field", str, "id", "the field that drifted"),
                Param("rename_to", str, "", "its new name (blank: the field is missing)"),
            ),
        ),
        Kind("malformed_json", "Malformed JSON"),
        Kind(
            "custom",
            "Custom instruction",
            (Param("instruction", str, "", "what the environment does differently"),),
            deterministic=False,
        ),
    )
}


class PerturbationError(ValueError):
    """A perturbation or rule that cannot be used; the message names the field."""


@dataclass(frozen=True)
class Perturbation:
    kind: str
    params: Mapping[str, Any] = field(default_factory=dict)
    mode: str = DETERMINISTIC
    name: str = ""  # the library entry's name, or the spec it came from

    @property
    def label(self) -> str:
        return self.name or spec_of(self)

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "params": dict(self.params),
            "mode": self.mode,
            "name": self.name,
        }


def build(
    kind: Any, params: Any = None, mode: Any = DETERMINISTIC, name: Any = "", where: str = ""
) -> Perturbation:
    """Validate one perturbation; every default filled in. `where` prefixes messages."""
    at = f"{where}: " if where else ""
    if not isinstance(kind, str) or kind not in KINDS:
        raise PerturbationError(f"{at}kind must be one of {', '.join(KINDS)}, got {kind!r}")
    spec = KINDS[kind]
    if mode not in MODES:
        raise PerturbationError(f"{at}mode must be prompted or deterministic, got {mode!r}")
    if mode == DETERMINISTIC and not spec.deterministic:
        raise PerturbationError(
            f"{at}a {kind} perturbation has no deterministic form: it is an instruction to "
            "the world model (choose prompted)"
        )
    given = dict(params or {}) if isinstance(params, Mapping) or params is None else None
    if given is None:
        raise PerturbationError(f"{at}params must be an object of parameter: value")
    known = {p.name: p for p in spec.params}
    unknown = sorted(set(given) - set(known), key=str)
    if unknown:
        allowed = ", ".join(known) or "none"
        raise PerturbationError(
            f"{at}{kind} has no parameter {unknown[0]!r} (its parameters: {allowed})"
        )
    values: dict[str, Any] = {}
    for p in spec.params:
        values[p.name] = _param_value(p, given.get(p.name), f"{at}{kind}.{p.name}")
    if kind == "custom" and not str(values["instruction"]).strip():
        raise PerturbationError(f"{at}custom.instruction: write what the environment does")
    if kind == "schema_drift" and not str(values["field"]).strip():
        raise PerturbationError(f"{at}schema_drift.field: name the field that drifts")
    if not isinstance(name, str):
        raise PerturbationError(f"{at}name must be text")
    return Perturbation(kind=kind, params=values, mode=mode, name=name.strip()[:100])


def _param_value(p: Param, raw: Any, where: str) -> Any:
    if raw is None or (isinstance(raw, str) and not raw.strip() and p.kind is not str):
        return p.default
    if p.kind is str:
        if not isinstance(raw, str | int | float) or isinstance(raw, bool):
            raise PerturbationError(f"{where} must be text, got {raw!r}")
        if isinstance(raw, float) and not math.isfinite(raw):
            raise PerturbationError(f"{where} is {raw!r}: only finite numbers are allowed")
        text = str(raw)
        if len(text) > MAX_PARAM_CHARS:
            raise PerturbationError(f"{where} is longer than {MAX_PARAM_CHARS} characters")
        return text
    try:
        if isinstance(raw, bool):
            raise ValueError
        number = p.kind(raw.strip() if isinstance(raw, str) else raw)
        if p.kind is int and isinstance(raw, float) and not raw.is_integer():
            raise ValueError
    except (TypeError, ValueError, OverflowError):  # int(inf) overflows; int("nan") is ValueError
        what = "a whole number" if p.kind is int else "a number"
        raise PerturbationError(f"{where} must be {what}, got {raw!r}") from None
    if isinstance(number, float) and not math.isfinite(number):
        raise PerturbationError(f"{where} is {number!r}: only finite numbers are allowed")
    if (p.low is not None and number < p.low) or (p.high is not None and number > p.high):
        raise PerturbationError(f"{where} must be {p.low:g} to {p.high:g}, got {number}")
    return number


def from_dict(data: Any, where: str = "") -> Perturbation:
    """A perturbation from its stored form (`Perturbation.as_dict`, a job's copy, a request's
    sweep entry); raises PerturbationError naming `where`."""
    if not isinstance(data, Mapping):
        raise PerturbationError(f"{where + ': ' if where else ''}must be an object")
    return build(
        data.get("kind"), data.get("params"), data.get("mode", DETERMINISTIC),
        data.get("name", ""), where,
    )  # fmt: skip


def parse_spec(spec: str, mode: str | None = None) -> Perturbation:
    """`kind` or `kind:param=value,param=value` (a preset with parameters). The mode is
    deterministic where the kind has a transform, else prompted, unless given."""
    text = spec.strip()
    kind, _, rest = text.partition(":")
    kind = kind.strip()
    params: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in rest.split(","))) if rest else ():
        key, sep, value = part.partition("=")
        if not sep or not key.strip():
            raise PerturbationError(f"perturbation {spec!r}: {part!r} is not param=value")
        params[key.strip()] = value.strip()
    if kind not in KINDS:
        raise PerturbationError(
            f"perturbation {spec!r}: unknown kind {kind!r} (kinds: {', '.join(KINDS)})"
        )
    chosen = mode or (DETERMINISTIC if KINDS[kind].deterministic else PROMPTED)
    return build(kind, params, chosen, name="", where=f"perturbation {spec!r}")


def spec_of(p: Perturbation) -> str:
    """The spec that builds `p` again (parameters that differ from their defaults)."""
    spec = KINDS[p.kind]
    parts = [
        f"{q.name}={p.params[q.name]}" for q in spec.params if p.params.get(q.name) != q.default
    ]
    return p.kind + (":" + ",".join(parts) if parts else "")


# ---- prompted: the instruction for the world model ----------------------------------------


def instruction(p: Perturbation) -> str:
    """What the world model is told for a turn under `p`."""
    a = p.params
    texts = {
        "tool_error": f"the tool fails with error code {a.get('code')} and the message "
        f"{a.get('message')!r}, reported the way this environment reports errors",
        "timeout": f"the operation times out after {a.get('seconds')} seconds and returns no "
        "result, reported the way this environment reports a timeout",
        "rate_limit": "the request is refused by a rate limit (too many requests); a retry may "
        f"work after {a.get('retry_after')} seconds",
        "empty_result": "the operation succeeds but returns an empty result: nothing found, "
        "no output, no items",
        "truncated": f"the output is cut off after about {a.get('chars')} characters, as when "
        "a buffer or a page limit is reached",
        "stale": f"the result is stale: it reflects the state of about {a.get('age')} ago, "
        "not the current one (outdated values, missing recent changes), without saying so",
        "permission_denied": "the action is refused for lack of permission"
        + (f" to {a.get('resource')}" if a.get("resource") else ""),
        "network_failure": f"a network failure interrupts the operation ({a.get('detail')})",
        "schema_drift": f"the response schema has drifted: the field {a.get('field')!r} "
        + (
            f"is now called {a.get('rename_to')!r}"
            if a.get("rename_to")
            else "is missing from the response"
        ),
        "malformed_json": "the response is malformed JSON (cut off, or with a syntax error), "
        "as a buggy server would send it",
        "custom": str(a.get("instruction", "")),
    }
    return texts[p.kind]


# ---- deterministic: transforms of the observation text -------------------------------------

JSON_DOMAINS = {"mcp"}
# Kinds whose deterministic form replaces the observation whatever it was: the world model
# is not asked at all for a step they perturb.
REPLACING = frozenset(
    {"tool_error", "timeout", "rate_limit", "permission_denied", "network_failure"}
)


def _as_json(text: str) -> tuple[bool, Any]:
    """(is a JSON object or list, its value): the meaning module's reading of JSON."""
    is_json, value = json_value(text)
    return is_json and isinstance(value, dict | list), value


def _error(domain: str, code: int | str, message: str) -> str:
    if domain in JSON_DOMAINS:
        return json.dumps({"isError": True, "error": {"code": code, "message": message}})
    if domain in ("terminal", "swe", "os"):
        return f"{message}\n[exit code {code}]"
    if domain == "web":
        return f"Error {code}\n{message}"
    if domain == "android":
        return f'Dialog: "{message}" [button: OK]'
    return f"Error {code}: {message}"


def transform(p: Perturbation, observation: str, domain: str) -> str:
    """The observation as it reads under `p` (deterministic mode). Raises PerturbationError
    for a kind without a transform."""
    a = p.params
    kind = p.kind
    if kind == "tool_error":
        return _error(domain, a["code"], a["message"])
    if kind == "timeout":
        if domain in ("terminal", "swe", "os"):
            return f"timeout: the command did not finish within {a['seconds']} s and was killed\n[exit code 124]"
        return _error(
            domain, 408 if domain != "mcp" else -32001, f"Request timed out after {a['seconds']} s"
        )
    if kind == "rate_limit":
        return _error(
            domain, 429, f"Too Many Requests: rate limit exceeded; retry after {a['retry_after']} s"
        )
    if kind == "empty_result":
        return empty_result(observation, domain)
    if kind == "truncated":
        chars = int(a["chars"])
        if len(observation) <= chars:
            return observation
        return observation[:chars] + TRUNCATION_MARKER
    if kind == "stale":
        return f"(cached result, last updated {a['age']} ago)\n{observation}"
    if kind == "permission_denied":
        target = a["resource"] or "the requested resource"
        if domain in ("terminal", "swe", "os"):
            return f"{target}: Permission denied\n[exit code 1]"
        return _error(domain, 403, f"Permission denied: {target}")
    if kind == "network_failure":
        if domain == "web":
            return f"This site can't be reached\n{a['detail']}\nERR_CONNECTION_FAILED"
        return _error(
            domain, "ENETUNREACH" if domain != "mcp" else -32003, f"Network error: {a['detail']}"
        )
    if kind == "schema_drift":
        is_json, value = _as_json(observation)
        if not is_json:
            return observation
        drifted = _drifted(value, a["field"], a["rename_to"])
        # no such field: the text as it was (re-serialising alone is no perturbation)
        return observation if drifted == value else json.dumps(drifted, ensure_ascii=False)
    if kind == "malformed_json":
        text = observation.rstrip()
        is_json, _ = _as_json(text)
        if not is_json:
            return text + "\n}"  # a stray brace: what a buggy serializer appends
        cut = max(1, (len(text) * 2) // 3)
        return text[:cut]  # cut off mid-document: no longer parses
    raise PerturbationError(f"a {kind} perturbation has no deterministic form")


# Keys of a count that goes with the emptied lists ("total": 0 beside "results": []).
COUNT_KEYS = frozenset(
    {"total", "count", "total_count", "totalcount", "num_results", "totalresults", "hits",
     "result_count", "size", "length"}
)  # fmt: skip
# What each domain's observations say when an operation finds nothing, in the forms their
# recorded data have (SWE-agent's shell message, an MCP tool result, a page, a screen).
EMPTY_MCP_RESULT = {"content": [], "isError": False}
SWE_NO_OUTPUT = "Your command ran successfully and did not produce any output."
NO_RESULTS = "No results found."


def empty_result(observation: str, domain: str) -> str:
    """The observation as it reads when the operation succeeds and finds nothing, in the
    domain's own form: a JSON document keeps its shape and metadata with its lists emptied
    (and its counts at 0: `{"query": "q", "results": [], "total": 0}`); an MCP result with
    no list, or one record fetched by its id, is a tool result with an empty content array;
    a shell prints nothing; a search page, a web page, a desktop or a phone screen shows no items."""
    is_json, value = _as_json(observation)
    if is_json and _is_one_record(value):
        # one thing fetched by its id (an event, an issue): found nothing is no record at
        # all, not the record with its lists emptied (an event "with no attendees")
        return json.dumps(EMPTY_MCP_RESULT if domain == "mcp" else {}, ensure_ascii=False)
    if is_json:
        emptied = _emptied(value)
        if emptied != value:
            return json.dumps(emptied, ensure_ascii=False)
        if isinstance(value, dict) and domain != "android":
            return json.dumps(EMPTY_MCP_RESULT if domain == "mcp" else {}, ensure_ascii=False)
    if domain == "mcp":
        return json.dumps(EMPTY_MCP_RESULT)
    if domain == "android":
        return json.dumps({"ui_elements": []})
    if domain in ("terminal", "os") and not observation.lstrip().startswith("[Top bar]"):
        return ""  # a shell that finds nothing prints nothing
    if domain == "swe":
        return SWE_NO_OUTPUT
    if domain == "web":
        return _empty_page(observation)
    if domain == "os":
        return _empty_screen(observation)
    return NO_RESULTS  # search, and any other domain


def _empty_page(observation: str) -> str:
    """A web observation with no items: an accessibility tree keeps its root, HTML its
    head; the page says it found nothing."""
    text = observation.strip()
    first = text.splitlines()[0] if text else ""
    if first.startswith("[") and "RootWebArea" in first:
        return f'{first}\n  [2] main\n    [3] StaticText "{NO_RESULTS}"'
    lower = text.lower()
    if "<body" in lower:
        start = lower.index("<body")
        end = lower.index(">", start) + 1
        return text[:end] + f"\n<main><p>{NO_RESULTS}</p></main>\n</body>\n</html>"
    return NO_RESULTS


def _empty_screen(observation: str) -> str:
    """A desktop observation with no items: its top bar and window lines, nothing in them."""
    kept = [
        line
        for line in observation.splitlines()
        if line.startswith(("[Top bar]", "[Window]", "[Overview]"))
    ]
    return "\n".join([*kept, "  (no items)"])


_ID_KEYS = ("id", "uuid", "_id")


def _is_one_record(value: Any) -> bool:
    """A JSON object that is one record (it has an id of its own), not a page of results."""
    if not isinstance(value, dict):
        return False
    for key, item in value.items():
        name = str(key).lower()
        if (name in _ID_KEYS or name.endswith("_id")) and isinstance(item, str | int):
            return not isinstance(item, bool)
    return False


def _emptied(value: Any, key: str = "") -> Any:
    """The same shape with its collections emptied: lists to [], an object keeps its keys
    (so `{"results": [...]}` becomes `{"results": []}`), its metadata (strings, flags) as
    they were and its counts at 0."""
    if isinstance(value, list):
        return []
    if isinstance(value, dict):
        return {k: _emptied(v, k) for k, v in value.items()}
    if isinstance(value, int | float) and not isinstance(value, bool):
        return 0 if key.lower() in COUNT_KEYS else value
    return value


# ---- checking a prompted perturbation: does the model's answer show it? --------------------

SHOWN, NOT_SHOWN, UNCHECKED = "shown", "not shown", "unchecked"
# Words an error, refusal or failure is written with, whatever the domain's form.
_FAILURE_WORDS = {
    "tool_error": ("error", "fail", "exception", "internal"),
    "timeout": ("timeout", "timed out", "time out", "deadline", "exit code 124", "408"),
    "rate_limit": ("rate limit", "too many requests", "429", "retry", "throttl", "quota"),
    "permission_denied": ("permission", "denied", "forbidden", "403", "unauthori", "not allowed"),
    "network_failure": ("network", "connection", "unreachable", "reset", "refused", "dns", "econn"),
}
_EMPTY_TEXTS = (
    "no results", "no result", "nothing found", "not found", "could not find", "no items",
    "no matches", "no match", "0 results", "did not produce any output", "no output", "empty",
    "no entries", "none found",
)  # fmt: skip


def check_shown(kind: str, observation: str, params: Mapping[str, Any] | None = None) -> str:
    """Whether a simulated observation shows a prompted perturbation of `kind`: SHOWN,
    NOT_SHOWN, or UNCHECKED (a kind no deterministic check can read, e.g. stale data or a
    custom instruction). A check of its form, not of its meaning: an empty result is an
    empty document or a "no results" text; an error kind names its error (its code or its
    words); a truncation is about as short as asked; schema drift lacks the field."""
    params = params or {}
    text = observation.strip()
    low = text.lower()
    if kind == "empty_result":
        is_json, value = _as_json(text)
        if is_json:
            return SHOWN if _is_empty(value) else NOT_SHOWN
        if not text or low in ("[]", "{}", "null", "none", "[exit code 0]"):
            return SHOWN
        return SHOWN if any(w in low for w in _EMPTY_TEXTS) else NOT_SHOWN
    if kind in _FAILURE_WORDS:
        words = list(_FAILURE_WORDS[kind])
        code = params.get("code")
        if kind == "tool_error" and code is not None:
            words.append(str(code))
        is_json, value = _as_json(text)
        if is_json and isinstance(value, dict):  # a document: an error is flagged in it
            if not (value.get("isError") or value.get("error")):
                return NOT_SHOWN
            return SHOWN if kind == "tool_error" or any(w in low for w in words) else NOT_SHOWN
        return SHOWN if any(w in low for w in words) else NOT_SHOWN
    if kind == "truncated":
        chars = params.get("chars")
        if not isinstance(chars, int):
            return UNCHECKED
        # about the length asked, or marked as cut
        cut = len(text) <= chars * 1.5 + 20 or "truncat" in low or text.endswith(("…", "..."))
        return SHOWN if cut else NOT_SHOWN
    if kind == "schema_drift":
        is_json, value = _as_json(text)
        field_name = str(params.get("field") or "")
        if not is_json or not field_name:
            return UNCHECKED
        rename = str(params.get("rename_to") or "")
        has_field = _has_key(value, field_name)
        if rename:
            return SHOWN if _has_key(value, rename) and not has_field else NOT_SHOWN
        return NOT_SHOWN if has_field else SHOWN
    if kind == "malformed_json":
        try:
            json.loads(text)
        except ValueError:
            return SHOWN
        return NOT_SHOWN
    return UNCHECKED  # stale, custom: what they change is meaning, not form


def _is_empty(value: Any) -> bool:
    """Nothing found: no list in it holds an item (an object of metadata and empty lists,
    an MCP result with an empty content array, [] or {})."""
    if isinstance(value, list):
        return not value
    if isinstance(value, dict):
        # the collections in it; an object of scalars alone is metadata ({"page": 1})
        collections = [v for v in value.values() if isinstance(v, list) or _has_list(v)]
        if not collections:
            return not value
        return all(_is_empty(v) for v in collections)
    return value in (None, "")


def _has_list(value: Any) -> bool:
    if isinstance(value, list):
        return True
    return isinstance(value, dict) and any(_has_list(v) for v in value.values())


def _has_key(value: Any, name: str) -> bool:
    if isinstance(value, dict):
        return name in value or any(_has_key(v, name) for v in value.values())
    if isinstance(value, list):
        return any(_has_key(v, name) for v in value)
    return False


def _drifted(value: Any, name: str, rename_to: str) -> Any:
    if isinstance(value, list):
        return [_drifted(v, name, rename_to) for v in value]
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, v in value.items():
            v = _drifted(v, name, rename_to)
            if k == name:
                if rename_to:
                    out[rename_to] = v
                continue
            out[k] = v
        return out
    return value


# ---- rules: where a perturbation applies ---------------------------------------------------


@dataclass(frozen=True)
class Rule:
    perturbation: Perturbation
    first_step: int | None = None  # steps first..last (inclusive); None: unbounded
    last_step: int | None = None
    tool: str = ""  # only actions calling this tool ("" : every action)
    probability: float = 1.0

    def matches(self, index: int, action: str) -> bool:
        if self.first_step is not None and index < self.first_step:
            return False
        if self.last_step is not None and index > self.last_step:
            return False
        return not self.tool or action_tool(action) == self.tool

    def as_dict(self) -> dict[str, Any]:
        return {
            **self.perturbation.as_dict(),
            "first_step": self.first_step,
            "last_step": self.last_step,
            "tool": self.tool,
            "probability": self.probability,
        }

    def where(self) -> str:
        """The rule's scope in words: 'steps 3-5 · tool search · p=0.5'."""
        parts = []
        if self.first_step is not None or self.last_step is not None:
            if self.first_step == self.last_step:
                parts.append(f"step {self.first_step}")
            else:
                lo = "" if self.first_step is None else self.first_step
                hi = "" if self.last_step is None else self.last_step
                parts.append(f"steps {lo}-{hi}")
        if self.tool:
            parts.append(f"tool {self.tool}")
        if self.probability < 1:
            parts.append(f"p={self.probability:g}")
        return " · ".join(parts) or "every step"


def action_tool(action: str) -> str:
    """The tool an action calls: a JSON call's `name` (or `tool`, `action_type`), else the
    first word of a command (`ls -la` -> `ls`, `search[q]` -> `search`)."""
    is_json, value = _as_json(action)
    if is_json and isinstance(value, dict):
        for key in ("name", "tool", "action_type", "action"):
            if isinstance(value.get(key), str):
                return value[key]
        return ""
    first = action.strip().split(None, 1)[0] if action.strip() else ""
    for stop in "[(":
        first = first.split(stop, 1)[0]
    return first


def build_rule(data: Any, where: str) -> Rule:
    p = from_dict(data, where)
    first = _step_bound(data.get("first_step"), f"{where}.first_step")
    last = _step_bound(data.get("last_step"), f"{where}.last_step")
    if first is not None and last is not None and last < first:
        raise PerturbationError(f"{where}: last_step {last} is before first_step {first}")
    tool = data.get("tool") or ""
    if not isinstance(tool, str) or len(tool) > 200:
        raise PerturbationError(f"{where}.tool must be a tool name")
    probability = data.get("probability", 1.0)
    if probability is None or probability == "":
        probability = 1.0
    try:
        probability = float(probability)
    except (TypeError, ValueError):
        raise PerturbationError(f"{where}.probability must be a number from 0 to 1") from None
    if not 0 < probability <= 1:
        raise PerturbationError(
            f"{where}.probability must be above 0 and at most 1, got {probability:g}"
        )
    return Rule(p, first, last, tool.strip(), probability)


def _step_bound(value: Any, where: str) -> int | None:
    if value is None or value == "":
        return None
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise PerturbationError(f"{where} must be a step number")
    try:
        number = int(value)
    except ValueError:
        raise PerturbationError(f"{where} must be a step number, got {value!r}") from None
    if number < 0:
        raise PerturbationError(f"{where} must be 0 or more, got {number}")
    return number


def build_rules(data: Any, field_name: str = "perturbations") -> tuple[Rule, ...]:
    if data is None or data == "":
        return ()
    if not isinstance(data, Sequence) or isinstance(data, str):
        raise PerturbationError(f"{field_name} must be a list of rules")
    if len(data) > MAX_RULES:
        raise PerturbationError(f"{field_name}: at most {MAX_RULES} rules, got {len(data)}")
    return tuple(build_rule(item, f"{field_name}[{i}]") for i, item in enumerate(data))


def choose(
    rules: Sequence[Rule], *, seed: int, sample: int, index: int, action: str
) -> Perturbation | None:
    """The perturbation for one future at one step: the first matching rule whose draw
    succeeds. Each (seed, sample, step, rule) has its own draw, so runs reproduce and a
    rule's draws do not depend on the others."""
    for k, rule in enumerate(rules):
        if not rule.matches(index, action):
            continue
        if rule.probability >= 1:
            return rule.perturbation
        draw = random.Random(f"{seed}:{sample}:{index}:{k}").random()
        if draw < rule.probability:
            return rule.perturbation
    return None


# ---- presets: a few per domain, written for this project -----------------------------------


@dataclass(frozen=True)
class Preset:
    name: str
    kind: str
    params: Mapping[str, Any]
    description: str
    mode: str = DETERMINISTIC


PRESETS: dict[str, tuple[Preset, ...]] = {
    "terminal": (
        Preset(
            "Disk full",
            "tool_error",
            {"message": "write error: No space left on device", "code": 1},
            "Any write fails: the container's disk is full.",
        ),
        Preset(
            "Command not found",
            "tool_error",
            {"message": "bash: command not found", "code": 127},
            "The command is not installed in this container.",
        ),
        Preset(
            "Slow command killed",
            "timeout",
            {"seconds": 60},
            "The command hangs and is killed by the harness.",
        ),
    ),
    "swe": (
        Preset(
            "Flaky test",
            "custom",
            {
                "instruction": "one test that passed before now fails intermittently with a timing-related assertion error; the rest of the output is unchanged"
            },
            "A test fails on this run only, for reasons unrelated to the change.",
            PROMPTED,
        ),
        Preset(
            "Read-only checkout",
            "permission_denied",
            {"resource": "the repository files"},
            "Edits are refused: the checkout is mounted read-only.",
        ),
        Preset(
            "Huge output cut",
            "truncated",
            {"chars": 500},
            "Long test output is cut after 500 characters.",
        ),
    ),
    "android": (
        Preset(
            "App crash dialog",
            "tool_error",
            {"message": "App has stopped. Close app / Send feedback", "code": 1},
            "The foreground app crashes; a system dialog covers the screen.",
        ),
        Preset(
            "Permission pop-up",
            "custom",
            {
                "instruction": "a system permission dialog appears over the app asking to allow access to location, with 'Allow' and 'Don't allow' buttons; the app screen behind it is unchanged"
            },
            "A permission request interrupts the task.",
            PROMPTED,
        ),
    ),
    "web": (
        Preset(
            "404 page",
            "tool_error",
            {"message": "404 Not Found: the page you are looking for does not exist", "code": 404},
            "The link leads to a missing page.",
        ),
        Preset(
            "500 page",
            "tool_error",
            {"message": "500 Internal Server Error", "code": 500},
            "The site fails on the server side.",
        ),
        Preset(
            "Cookie wall",
            "custom",
            {
                "instruction": "a cookie consent banner covers most of the page with 'Accept all' and 'Reject' buttons; the page content is hidden behind it"
            },
            "A consent banner blocks the page until dismissed.",
            PROMPTED,
        ),
        Preset(
            "Captcha",
            "custom",
            {
                "instruction": "the site shows a captcha challenge ('Verify you are human') instead of the requested page"
            },
            "Bot detection stops the agent.",
            PROMPTED,
        ),
    ),
    "os": (
        Preset(
            "Modal dialog",
            "custom",
            {
                "instruction": "a modal system dialog ('Software update available: Restart now / Later') appears in front of the active window and takes focus"
            },
            "An update prompt steals focus.",
            PROMPTED,
        ),
        Preset(
            "Access denied",
            "permission_denied",
            {"resource": ""},
            "The user lacks the rights for this operation.",
        ),
    ),
    "search": (
        Preset("No results", "empty_result", {}, "The search engine finds nothing for the query."),
        Preset(
            "Off-topic results",
            "custom",
            {
                "instruction": "the results are real-looking but off-topic: they match a different meaning of the query words"
            },
            "The engine misreads the query.",
            PROMPTED,
        ),
        Preset(
            "Rate limited", "rate_limit", {"retry_after": 30}, "Too many queries in a short time."
        ),
    ),
    "mcp": (
        Preset(
            "Tool error",
            "tool_error",
            {"message": "upstream service unavailable", "code": -32000},
            "The tool's backend fails.",
        ),
        Preset(
            "Tool timeout",
            "timeout",
            {"seconds": 30},
            "The tool call takes too long and is abandoned.",
        ),
        Preset(
            "Field renamed",
            "schema_drift",
            {"field": "id", "rename_to": "identifier"},
            "A new server version renamed a field.",
        ),
        Preset("Broken JSON", "malformed_json", {}, "The server sends a cut-off response."),
    ),
}
