"""Diffs as plain data, for the compare view and the summary of futures.

- Raw diffs: (op, text) pieces of a word or line diff of the texts as they are.
- Diffs of meaning (`meaning_diff`): two JSON values are compared structurally (keys added,
  removed, values changed, each with its path), so re-indenting or reordering keys is no
  change; other text is compared after normalising line ends (`inference.simulation.meaning`,
  the definition the request's "edited" uses too), so only words that changed show.
- `meaning_similarity`: 0..1, the same way (formatting never lowers it).

Token lists are aligned by their longest common subsequence (rapidfuzz's bit-parallel LCS,
O(n·m/64) whatever the text: difflib's matcher took minutes on log lines repeated a thousand
times); above MAX_ALIGN_WORK the middle that differs is one replacement and its similarity is
not measured (None).

Nothing here builds HTML: `studio.presenters.diff` renders these."""

from __future__ import annotations

import difflib
import json
import math
import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Literal

from rapidfuzz.distance import Indel, LCSseq

from inference.simulation import meaning
from inference.simulation.meaning import canonical_json

# A compare row diffs up to six texts against one reference, twice (diff and similarity):
# the reference's normalised text and parsed JSON are made once. Texts are immutable and
# hash once; the parsed values are only read here, never changed.
json_value = lru_cache(maxsize=16)(meaning.json_value)
normalise_text = lru_cache(maxsize=16)(meaning.normalise_text)

_WORD = re.compile(r"\s+|\w+|[^\w\s]", re.UNICODE)
# Above this many characters texts are diffed by line (word by word between the lines they
# share at either end, when that is under it): aligning the ~30,000 words of 100 KB would
# take ~0.5 s.
WORD_DIFF_LIMIT = 20_000


DiffOp = Literal["equal", "delete", "insert"]
# A diff as plain data: (op, text) pieces; "equal" and "insert" text is from the new text,
# "delete" text from the reference. A replaced run is a delete piece then an insert piece.
DiffPieces = list[tuple[DiffOp, str]]


# Aligning token lists of n and m tokens costs about n·m/64 word operations (~30 ms at this
# bound): above it, what lies between the common head and tail is not aligned.
MAX_ALIGN_WORK = 100_000_000

Opcode = tuple[str, int, int, int, int]


def _common_ends(a: list[str], b: list[str]) -> tuple[int, int]:
    """Lengths of the common head and tail of two token lists (not overlapping)."""
    limit = min(len(a), len(b))
    head = 0
    while head < limit and a[head] == b[head]:
        head += 1
    tail = 0
    while tail < limit - head and a[-1 - tail] == b[-1 - tail]:
        tail += 1
    return head, tail


def alignable(a: list, b: list) -> bool:
    """Whether aligning these token lists stays within MAX_ALIGN_WORK."""
    return len(a) * len(b) <= MAX_ALIGN_WORK


def align(a: list, b: list) -> list[Opcode]:
    """difflib-style opcodes ("equal", "replace", "delete", "insert") of `b` against `a`
    from their longest common subsequence; the edits between two equal runs are one opcode
    (a replacement when both sides have tokens). Lists too long to align
    (`alignable`) are one replacement."""
    if not a and not b:
        return []
    if not alignable(a, b) or not a or not b:
        tag = "replace" if a and b else ("delete" if a else "insert")
        return [(tag, 0, len(a), 0, len(b))]
    out: list[Opcode] = []
    pending: list[int] | None = None  # [i1, i2, j1, j2] of the edits since the last equal run
    for op in Indel.opcodes(a, b):
        tag, i1, i2, j1, j2 = op.tag, op.src_start, op.src_end, op.dest_start, op.dest_end
        if tag == "equal":
            if pending is not None:
                out.append(_edit(*pending))
                pending = None
            out.append(("equal", i1, i2, j1, j2))
        elif pending is None:
            pending = [i1, i2, j1, j2]
        else:
            pending[1], pending[3] = i2, j2
    if pending is not None:
        out.append(_edit(*pending))
    return out


def _edit(i1: int, i2: int, j1: int, j2: int) -> Opcode:
    if i1 < i2 and j1 < j2:
        return ("replace", i1, i2, j1, j2)
    return ("delete" if i1 < i2 else "insert", i1, i2, j1, j2)


def diff_pieces(a: list[str], b: list[str], *, lines: bool = False) -> DiffPieces:
    """Token list `b` against `a` as (op, text) pieces. The common head and tail are equal
    pieces at once; what lies between is aligned (`align`). `lines` is kept for callers: line
    and word tokens are aligned alike."""
    head, tail = _common_ends(a, b)
    out: DiffPieces = []
    if head:
        out.append(("equal", "".join(b[:head])))
    a_mid, b_mid = a[head : len(a) - tail], b[head : len(b) - tail]
    for op, i1, i2, j1, j2 in align(a_mid, b_mid):
        if op == "equal":
            out.append(("equal", "".join(b_mid[j1:j2])))
            continue
        if op in ("delete", "replace"):
            out.append(("delete", "".join(a_mid[i1:i2])))
        if op in ("insert", "replace"):
            out.append(("insert", "".join(b_mid[j1:j2])))
    if tail:
        out.append(("equal", "".join(b[len(b) - tail :])))
    return _merged(out)


def _merged(pieces: DiffPieces) -> DiffPieces:
    """Adjacent equal pieces (the head and a first equal run) as one; empty ones dropped."""
    merged: DiffPieces = []
    for op, text in pieces:
        if merged and merged[-1][0] == op == "equal":
            merged[-1] = ("equal", merged[-1][1] + text)
        elif text:
            merged.append((op, text))
    return merged


def word_pieces(reference: str, text: str) -> DiffPieces:
    """`text` against `reference`, word by word within lines: the lines are aligned first,
    then each changed line that replaces one line is diffed word by word, so a diff of
    multi-line texts keeps its lines as lines (a change never glues the end of one line to
    the start of another). Lines replaced by a different number of lines, and a line that
    kept too little to be worth a word diff (`REWRITE_SHARE`), show as whole lines removed
    then added. Word diffs stop at WORD_DIFF_LIMIT characters in all; past it changed lines
    show whole."""
    if "\n" not in reference and "\n" not in text:
        if len(reference) + len(text) <= WORD_DIFF_LIMIT:
            return diff_pieces(_WORD.findall(reference), _WORD.findall(text))
        return line_pieces(reference, text)
    a, b = reference.splitlines(keepends=True), text.splitlines(keepends=True)
    head, tail = _common_ends(a, b)
    a_mid, b_mid = a[head : len(a) - tail], b[head : len(b) - tail]
    pieces: DiffPieces = [("equal", "".join(b[:head]))]
    budget = WORD_DIFF_LIMIT
    for op, i1, i2, j1, j2 in align(a_mid, b_mid):
        old, new = a_mid[i1:i2], b_mid[j1:j2]
        if op == "equal":
            pieces.append(("equal", "".join(new)))
            continue
        if op == "replace" and len(old) == len(new):
            for x, y in zip(old, new, strict=True):
                size = len(x) + len(y)
                words = diff_pieces(_WORD.findall(x), _WORD.findall(y)) if size <= budget else []
                kept = sum(len(t) for o, t in words if o == "equal")
                if words and kept >= REWRITE_SHARE * max(len(x), len(y)):
                    budget -= size
                    pieces += words
                else:
                    pieces += [("delete", x), ("insert", y)]
            continue
        pieces += [("delete", "".join(old)), ("insert", "".join(new))]
    pieces.append(("equal", "".join(b[len(b) - tail :])))
    return _merged(pieces)


def line_pieces(reference: str, text: str) -> DiffPieces:
    """`text` against `reference`, line by line (line ends kept in the pieces)."""
    return diff_pieces(
        reference.splitlines(keepends=True), text.splitlines(keepends=True), lines=True
    )


def similarity(reference: str, text: str) -> float | None:
    """2·matched / total over word tokens (line tokens for long texts of several lines),
    matched being the longest common subsequence; None when the texts differ over too much
    to align (`alignable`)."""
    if reference == text:
        return 1.0
    lines = by_lines(reference, text)
    a, b = tokens_of(reference, lines=lines), tokens_of(text, lines=lines)
    head, tail = _common_ends(a, b)
    a_mid, b_mid = a[head : len(a) - tail], b[head : len(b) - tail]
    if not alignable(a_mid, b_mid):
        return None
    matched = head + tail + LCSseq.similarity(a_mid, b_mid)
    return 2.0 * matched / (len(a) + len(b))


def by_lines(reference: str, text: str) -> bool:
    """Whether texts are compared line by line: long ones that have lines. A text of one
    long line (canonical JSON has no line breaks) is compared by words: as one line token,
    a 20 KB JSON value with one number changed would share nothing with the original."""
    return len(reference) + len(text) > WORD_DIFF_LIMIT and ("\n" in reference or "\n" in text)


def tokens_of(text: str, *, lines: bool) -> list[str]:
    """What `similarity` compares: words and separators, or lines for long texts."""
    return text.splitlines() if lines else _WORD.findall(text)


def token_similarity(
    a: list[str], b: list[str], *, autojunk_above: int | None = None, cutoff: float = 0.0
) -> float:
    """2·matched / total over two token lists, the common head and tail counted at once;
    matched is their longest common subsequence (`similarity`'s measure) when aligning them
    stays within MAX_ALIGN_WORK (bit-parallel: a pair of 4 KB JSON observations in well under
    a millisecond, where difflib's matcher took ~10 ms), else difflib's matching blocks.
    `autojunk_above`: past the bound, with more tokens than this between them, let difflib
    skip very frequent tokens (faster on long texts, and never higher than the exact ratio:
    for a threshold test, not for a figure shown). `cutoff`: a threshold test; below it the
    value is only known to be below (0), which lets the alignment stop early (~3x faster)."""
    if not a and not b:
        return 1.0
    head, tail = _common_ends(a, b)
    a_mid, b_mid = a[head : len(a) - tail], b[head : len(b) - tail]
    if alignable(a_mid, b_mid):
        needed = math.ceil(cutoff * (len(a) + len(b)) / 2) - head - tail
        if needed <= 0:
            matched = head + tail + LCSseq.similarity(a_mid, b_mid)
        else:
            found = LCSseq.similarity(a_mid, b_mid, score_cutoff=needed)
            if not found:
                return 0.0
            matched = head + tail + found
        return 2.0 * matched / (len(a) + len(b))
    junk = autojunk_above is not None and len(a_mid) + len(b_mid) > autojunk_above
    matcher = difflib.SequenceMatcher(None, a_mid, b_mid, autojunk=junk)
    matched = head + tail + sum(block.size for block in matcher.get_matching_blocks())
    return 2.0 * matched / (len(a) + len(b))


# ---- meaning: JSON structure, normalised text ------------------------------------------

# Values longer than this are cut in change lists (the raw diff shows them whole).
VALUE_CHARS = 300
# A text diff keeping less than this share of the longer text shows as one replacement.
REWRITE_SHARE = 0.3

_canonical = canonical_json
# One encoder for scalars (json.dumps with options builds an encoder per call): a JSON diff of
# two 20 KB observations shows thousands of changed scalar values.
_SCALAR = json.JSONEncoder(ensure_ascii=False)


def _canonical_value(value: Any) -> str:
    """`canonical_json`, at once for a scalar."""
    if isinstance(value, float) and value.is_integer():
        return _SCALAR.encode(int(value))
    if value is None or isinstance(value, str | int | float):
        return _SCALAR.encode(value)
    return _canonical(value)


def _shown(value: Any) -> str:
    text = _canonical_value(value)
    return text if len(text) <= VALUE_CHARS else text[: VALUE_CHARS - 1] + "…"


ChangeOp = Literal["added", "removed", "changed"]


@dataclass(frozen=True)
class JsonChange:
    path: str  # $, $.key, $.list[2], $["odd key"]
    op: ChangeOp
    old: str = ""  # compact JSON of the value before (removed, changed)
    new: str = ""  # and after (added, changed)


def _key_path(path: str, key: str) -> str:
    if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
        return f"{path}.{key}"
    return f"{path}[{json.dumps(key, ensure_ascii=False)}]"


def _same_scalar(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b  # 1 and 1.0 are the same JSON number
    return type(a) is type(b) and a == b


# The canonical texts of a list's items, by the list (kept here, so its id is not reused):
# the outcomes of a fork are each diffed against the same recorded value (one parsed object,
# `json_value` is cached), whose items would otherwise be made canonical once per outcome.
_KEYS: dict[int, tuple[list, list[str]]] = {}
_KEYS_KEPT = 64


def _item_keys(values: list) -> list[str]:
    kept = _KEYS.get(id(values))
    if kept is not None and kept[0] is values:
        return kept[1]
    keys = [_canonical_value(x) for x in values]
    if len(values) > 8:  # short lists cost less than the bookkeeping
        while len(_KEYS) >= _KEYS_KEPT:
            _KEYS.pop(next(iter(_KEYS)), None)
        _KEYS[id(values)] = (values, keys)
    return keys


def json_changes(a: Any, b: Any, path: str = "$") -> list[JsonChange]:
    """What changed from JSON value `a` to `b`, key by key; list items are aligned by their
    content (an item inserted at the top is one addition, not a change of every item)."""
    if isinstance(a, dict) and isinstance(b, dict):
        out: list[JsonChange] = []
        for key in a:
            if key not in b:
                out.append(JsonChange(_key_path(path, key), "removed", old=_shown(a[key])))
        for key in b:
            if key not in a:
                out.append(JsonChange(_key_path(path, key), "added", new=_shown(b[key])))
            else:
                out += json_changes(a[key], b[key], _key_path(path, key))
        return out
    if isinstance(a, list) and isinstance(b, list):
        out = []
        ka, kb = _item_keys(a), _item_keys(b)
        for op, i1, i2, j1, j2 in align(ka, kb):
            if op == "equal":
                continue
            pairs = min(i2 - i1, j2 - j1) if op == "replace" else 0
            for k in range(pairs):
                out += json_changes(a[i1 + k], b[j1 + k], f"{path}[{j1 + k}]")
            for i in range(i1 + pairs, i2):
                out.append(JsonChange(f"{path}[{i}]", "removed", old=_shown(a[i])))
            for j in range(j1 + pairs, j2):
                out.append(JsonChange(f"{path}[{j}]", "added", new=_shown(b[j])))
        return out
    if _same_scalar(a, b):
        return []
    return [JsonChange(path, "changed", old=_shown(a), new=_shown(b))]


@dataclass
class MeaningDiff:
    """A cell's diff against its reference: `kind` "json" (structural `changes`) or "text"
    (word `pieces` of the normalised texts); `same` when the meaning is equal (the texts may
    still differ in formatting: `formatting_only`)."""

    kind: Literal["json", "text"]
    same: bool
    formatting_only: bool = False
    changes: list[JsonChange] = field(default_factory=list)
    pieces: DiffPieces = field(default_factory=list)


def meaning_diff(reference: str, text: str) -> MeaningDiff:
    a_json, a_value = json_value(reference)
    b_json, b_value = json_value(text)
    if a_json and b_json:
        changes = json_changes(a_value, b_value)
        return MeaningDiff(
            kind="json",
            same=not changes,
            formatting_only=not changes and reference != text,
            changes=changes,
        )
    a, b = normalise_text(reference), normalise_text(text)
    if a == b:
        return MeaningDiff(kind="text", same=True, formatting_only=reference != text)
    pieces = word_pieces(a, b)
    kept = sum(len(t) for op, t in pieces if op == "equal")
    if kept < REWRITE_SHARE * max(len(a), len(b)):
        # Hardly anything in common: word by word the diff would be confetti. Say it was
        # replaced as a whole.
        pieces = [p for p in (("delete", a), ("insert", b)) if p[1]]
    return MeaningDiff(kind="text", same=False, pieces=pieces)


def meaning_similarity(reference: str, text: str) -> float | None:
    """0..1, formatting ignored: canonical JSON for two JSON values, else normalised text;
    None when they differ over too much to measure (`similarity`)."""
    a_json, a_value = json_value(reference)
    b_json, b_value = json_value(text)
    if a_json and b_json:
        return similarity(_canonical(a_value), _canonical(b_value))
    return similarity(normalise_text(reference), normalise_text(text))


def meaning_key(text: str) -> str:
    """Equal for texts of the same meaning (the exact clusters of futures)."""
    is_json, value = json_value(text)
    return "json:" + _canonical(value) if is_json else "text:" + normalise_text(text)
