"""The search box's query language, parsed into a typed `Query` (no database here).

    words            every word must match (AND): all in the step's action and observation,
                     or all in one of its annotations (comment, tags, correction)
    "a phrase"       the words in this order, next to each other
    pref*            a word starting with "pref"
    -word -"a b"     excludes steps that match (any term or filter can be negated)
    action:word      the word in the action only (observation: likewise); the value may be
                     a phrase or a prefix: action:"rm -rf", observation:err*
    comment:word     in an annotation's comment (tag: its tags, correction: its corrected
                     observation); several of these must hold in the same annotation
    title:word       in the step's trajectory's title (task: its task, world: the name of the
                     world it was played in)
    domain:web  source:simulated  model:qwen3-8b  perturbation:drop-line  verdict:reject
                     filters on the step's trajectory, provenance, model and annotations
    re:/pattern/     a regular expression (Python syntax; re:/pattern/i ignores case),
                     applied to action and observation over a bounded candidate set, in
                     a bounded time (`RegexTimeout`)

Words are split like the index splits text: runs of letters and digits, lower-cased, so
`foo.bar` or `foo_bar` is the phrase "foo bar". Errors name what is wrong and the column
(1-based) where it is."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

# the `regex` module rather than `re`: same syntax (VERSION0), and a search takes a timeout,
# so that a pattern that backtracks for ever ("((a|aa)+)+c") stops instead of holding the
# web process
import regex

from studio.models.annotations import Verdict
from studio.models.trajectories import DOMAINS

STEP_FIELDS = ("action", "observation")
ANNOTATION_FIELDS = ("comment", "tag", "correction")
TRAJECTORY_FIELDS = ("title", "task", "world")
TEXT_FIELDS = (*STEP_FIELDS, *ANNOTATION_FIELDS, *TRAJECTORY_FIELDS)
SOURCES = ("recorded", "simulated", "perturbed", "episode")
VERDICTS = tuple(v.value for v in Verdict)
FILTER_FIELDS = ("domain", "source", "model", "perturbation", "verdict")
FIELDS = (*TEXT_FIELDS, *FILTER_FIELDS, "re")
MAX_TERMS = 32

_TOKEN = re.compile(r"[^\W_]+")
_FIELD = re.compile(r"([A-Za-z_]+):")


def tokens_of(text: str) -> list[str]:
    """The index's words of `text`: runs of letters and digits, lower-cased."""
    return [t.lower() for t in _TOKEN.findall(text)]


class RegexTimeout(ValueError):
    """A query's regular expression ran past its time budget (a search is stopped, not
    answered with the hits found so far: those would read as all of them). The budget is of
    the process's time: the `regex` module's timeout counts the CPU time of all its threads,
    so searches matching at the same moment stop sooner; `seconds` is how long this one ran."""

    def __init__(self, pattern: str, seconds: float, tested: int, candidates: int):
        super().__init__(
            f"the regular expression /{pattern}/ was stopped after {seconds:.1f} s, having "
            f"been tried on {tested:,} of {candidates:,} steps. Nested repeats such as "
            "((a|aa)+)+ can take time that grows exponentially with the text: make it more "
            "specific, or add words to the query so that it is tried on fewer steps"
        )
        self.pattern = pattern
        self.seconds = seconds


class QueryError(ValueError):
    def __init__(self, message: str, column: int):
        super().__init__(f"{message} (column {column})")
        self.message = message
        self.column = column


@dataclass(frozen=True)
class TextTerm:
    """Words to find: one word (possibly a prefix), or a phrase of several in order."""

    words: tuple[str, ...]
    prefix: bool = False  # the last word is a prefix
    field: str | None = None  # one of TEXT_FIELDS; None: a step's text or an annotation's
    negated: bool = False

    @property
    def is_phrase(self) -> bool:
        return len(self.words) > 1


@dataclass(frozen=True)
class FilterTerm:
    field: str  # one of FILTER_FIELDS
    value: str
    negated: bool = False


@dataclass(frozen=True)
class RegexTerm:
    pattern: str
    ignore_case: bool = False
    negated: bool = False

    def compiled(self) -> regex.Pattern[str]:
        flags = regex.VERSION0 | (regex.IGNORECASE if self.ignore_case else 0)
        return regex.compile(self.pattern, flags)


@dataclass(frozen=True)
class Query:
    text: tuple[TextTerm, ...] = ()
    filters: tuple[FilterTerm, ...] = ()
    regexes: tuple[RegexTerm, ...] = ()
    raw: str = field(default="", compare=False)

    @property
    def positive_text(self) -> tuple[TextTerm, ...]:
        return tuple(t for t in self.text if not t.negated)

    @property
    def negative_text(self) -> tuple[TextTerm, ...]:
        return tuple(t for t in self.text if t.negated)

    def positive_in(self, fields: tuple[str | None, ...]) -> tuple[TextTerm, ...]:
        return tuple(t for t in self.positive_text if t.field in fields)

    def negative_in(self, fields: tuple[str | None, ...]) -> tuple[TextTerm, ...]:
        return tuple(t for t in self.negative_text if t.field in fields)

    @property
    def words(self) -> tuple[TextTerm, ...]:
        """The positive terms of no field (a step's text or one of its annotations)."""
        return self.positive_in((None,))

    @property
    def is_empty(self) -> bool:
        return not (self.text or self.filters or self.regexes)


def parse(source: str) -> Query:
    """Parse the query language (module docstring); raises `QueryError`."""
    text: list[TextTerm] = []
    filters: list[FilterTerm] = []
    regexes: list[RegexTerm] = []
    i, n = 0, len(source)
    while i < n:
        if source[i].isspace():
            i += 1
            continue
        start = i
        negated = False
        if source[i] == "-" and i + 1 < n and not source[i + 1].isspace():
            negated = True
            i += 1
        name = None
        m = _FIELD.match(source, i)
        if m:
            name = m.group(1).lower()
            if name not in FIELDS:
                raise QueryError(
                    f"unknown field {m.group(1)!r}: fields are {', '.join(FIELDS)} "
                    f'(put the word in quotes to search for it as text: "{m.group(0)}")',
                    i + 1,
                )
            i = m.end()
            if i >= n or source[i].isspace():
                raise QueryError(f"{name}: has no value", start + 1)
        if name == "re":
            term, i = _regex(source, i, negated)
            regexes.append(term)
        elif name in FILTER_FIELDS:
            value, quoted, i = _value(source, i)
            filters.append(_filter(name, value, negated, quoted, m.end() + 1 if m else start + 1))
        else:
            value_start = i
            value, quoted, i = _value(source, i)
            prefix = not quoted and value.endswith("*")
            words = tokens_of(value[:-1] if prefix else value)
            if not words:
                raise QueryError(
                    f"{value!r} has no letters or digits to search for", value_start + 1
                )
            text.append(TextTerm(tuple(words), prefix=prefix, field=name, negated=negated))
        if len(text) + len(filters) + len(regexes) > MAX_TERMS:
            raise QueryError(f"more than {MAX_TERMS} terms", start + 1)
    return Query(tuple(text), tuple(filters), tuple(regexes), raw=source)


def _value(source: str, i: int) -> tuple[str, bool, int]:
    """A quoted phrase or a bare word starting at `i`: (value, quoted, end)."""
    if source[i] == '"':
        end = source.find('"', i + 1)
        if end < 0:
            raise QueryError("unclosed quote", i + 1)
        return source[i + 1 : end], True, end + 1
    end = i
    while end < len(source) and not source[end].isspace():
        if source[end] == '"':
            raise QueryError("a quote inside a word (leave a space before it)", end + 1)
        end += 1
    return source[i:end], False, end


def _regex(source: str, i: int, negated: bool) -> tuple[RegexTerm, int]:
    if source[i] != "/":
        raise QueryError("re: takes a pattern between slashes: re:/pattern/", i + 1)
    j = i + 1
    chars: list[str] = []
    while j < len(source):
        c = source[j]
        if c == "\\" and j + 1 < len(source) and source[j + 1] == "/":
            chars.append("/")
            j += 2
            continue
        if c == "/":
            break
        chars.append(c)
        j += 1
    else:
        raise QueryError("unclosed regular expression (no closing /)", i + 1)
    j += 1
    ignore_case = False
    if j < len(source) and source[j] == "i":
        ignore_case = True
        j += 1
    if j < len(source) and not source[j].isspace():
        raise QueryError("unexpected text after the regular expression", j + 1)
    term = RegexTerm("".join(chars), ignore_case=ignore_case, negated=negated)
    if not term.pattern:
        raise QueryError("empty regular expression", i + 1)
    try:
        term.compiled()
    except regex.error as exc:
        # the module sets pos and msg (its stubs do not say so)
        column = i + 2 + (getattr(exc, "pos", None) or 0)
        message = getattr(exc, "msg", None) or str(exc)
        raise QueryError(f"bad regular expression: {message}", column) from None
    except (OverflowError, ValueError, RecursionError, MemoryError) as exc:
        # a repeat count or a nesting past what the engine takes ("a{99999999999}")
        raise QueryError(f"bad regular expression: {exc}", i + 2) from None
    return term, j


def _filter(name: str, value: str, negated: bool, quoted: bool, column: int) -> FilterTerm:
    value = value.strip()
    if not value:
        raise QueryError(f"{name}: has no value", column)
    allowed: tuple[str, ...] | None = {
        "domain": tuple(DOMAINS),
        "source": SOURCES,
        "verdict": VERDICTS,
    }.get(name)
    if allowed is not None:
        value = value.lower()
        if value not in allowed:
            raise QueryError(
                f"{name}:{value} is not one of {', '.join(allowed)}",
                column,
            )
    return FilterTerm(name, value, negated)
