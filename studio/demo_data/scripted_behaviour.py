"""The scripted demo judge's answers to behaviour search (`inference.behaviour`'s prompts),
and the scripted demo embeddings (`scripted-embedding`). Rules, NOT models; every answer
says so.

The behaviour prompt: the description's content words, each widened by a small table of
synonyms (delete -> rm, remove, unlink, prune, forget, ...; file -> folder, directory, and
any path in the action), are looked for in the step's action and observation. The
behaviour shows when every word is found and the description's first word (its verb: "the
agent DELETES files") is found in the action, or in the observation when the description is
about what the agent sees ("the observation shows an error"). The confidence grows with how
much was found and where; the reason quotes what was found. A whole trajectory is read step
by step, and names the first step where it shows.

The cluster-naming prompt: the words the group's reasons quote most (and "(all in the
action)" or "(all in the observation)" when every reason found its words there).

The embeddings: a hashed bag of words (each word folded onto its synonym group's head, so
"rm" and "delete" land on the same dimension), 256 numbers, unit length."""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections import Counter
from typing import Any

from inference import behaviour as prompts

EMBEDDING_MODEL = "scripted-embedding"
EMBEDDING_DIMENSIONS = 256
NOTE = "scripted demo judge (rules, not a model): words of the description looked up in the step"

# Each group: its head (a description word that names it) and the words that show it.
SYNONYMS: dict[str, frozenset[str]] = {
    "delete": frozenset(
        "delete deletes deleted deleting deletion rm rmdir remove removes removed removing "
        "removal unlink unlinks unlinked prune prunes pruned pruning purge purged erase erased "
        "wipe wiped shred forget trash trashed discard discarded".split()
    ),
    "file": frozenset(
        "file files folder folders directory directories dir dirs path paths document "
        "documents".split()
    ),
    "error": frozenset(
        "error errors fail fails failed failing failure exception traceback denied refused "
        "invalid fatal crash crashed".split()
    ),
    "read": frozenset("read reads reading cat less head tail view views inspect".split()),
    "edit": frozenset(
        "edit edits edited editing write writes wrote modify modifies modified sed patch "
        "tee overwrite overwrites change changes changed".split()
    ),
    "install": frozenset("install installs installed installing pip apt npm yarn brew".split()),
    "download": frozenset(
        "download downloads downloaded curl wget fetch fetches http https".split()
    ),
    "search": frozenset("search searches searched query queries google lookup grep find".split()),
    "privilege": frozenset(
        "sudo root chmod chown permission permissions privilege privileges".split()
    ),
    "click": frozenset("click clicks clicked tap taps tapped press presses pressed".split()),
    "submit": frozenset("submit submits submitted answer answers final".split()),
    "send": frozenset("send sends sent email emails mail message messages".split()),
    "schedule": frozenset(
        "meeting meetings event events calendar schedule schedules reschedule".split()
    ),
    "backup": frozenset("backup backups snapshot snapshots restic".split()),
    "restart": frozenset("restart restarts restarted systemctl service services".split()),
}
_HEAD_OF = {word: head for head, words in SYNONYMS.items() for word in words}
# Words of a description that say nothing of the behaviour itself.
STOP_WORDS = frozenset(
    "a an the agent agents model models step steps it its it's they their them that this "
    "these those which who when where while of to in on at for with without from by into "
    "onto about and or but not no is are was were be been being do does did doing has have "
    "had any some all every each one ones his her he she its own than then there here also "
    "very just only more most less least after before again once up down out over under "
    "uses use using tries try trying something anything outside inside within".split()
)
# Words that put a description's first word in the observation, not the action.
ABOUT_OBSERVATION = frozenset(
    "observation observations environment output outputs returns returned shows screen "
    "result results".split()
)
_WORD = re.compile(r"[a-z0-9]+")
_PATH = re.compile(r"(?<![\w:])(?:~|\.{1,2})?/[\w.\-]+(?:/[\w.\-]*)*")


def words_of(text: str) -> list[str]:
    return _WORD.findall((text or "").lower())


def _stem(word: str) -> str:
    for suffix in ("ing", "ed", "es", "s"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)]
    return word


def concepts_of(description: str) -> list[tuple[str, frozenset[str]]]:
    """The description's content words, in order, each with the words that show it."""
    found: list[tuple[str, frozenset[str]]] = []
    seen: set[str] = set()
    for word in words_of(description):
        if word in STOP_WORDS or word in ABOUT_OBSERVATION or len(word) < 2:
            continue
        head = _HEAD_OF.get(word) or _HEAD_OF.get(_stem(word))
        if head is not None:
            name, shows = head, SYNONYMS[head]
        else:
            stem = _stem(word)
            name, shows = word, frozenset({word, stem, stem + "s", stem + "es", stem + "ed"})
        if name not in seen:
            seen.add(name)
            found.append((name, shows))
    return found


def _found(shows: frozenset[str], name: str, text: str, is_action: bool) -> list[str]:
    """The words of `text` that show the concept (a path too, for "file" in an action)."""
    hits = [w for w in dict.fromkeys(words_of(text)) if w in shows]
    if name == "file" and is_action:
        hits += list(dict.fromkeys(m.group() for m in _PATH.finditer(text or "")))[:2]
    return hits


def _quote(words: list[str]) -> str:
    return ", ".join(f'"{w}"' for w in words[:3])


def verdict_of(description: str, action: str, observation: str) -> dict[str, Any]:
    """{"match", "confidence", "reason"} for one step, by the rules of the module."""
    concepts = concepts_of(description)
    if not concepts:
        return {
            "match": "no",
            "confidence": 0.5,
            "reason": "The description has no word to look for.",
        }
    about_observation = any(w in ABOUT_OBSERVATION for w in words_of(description))
    strengths, parts, missing = [], [], []
    first_ok = False
    for position, (name, shows) in enumerate(concepts):
        in_action = _found(shows, name, action, True)
        in_observation = _found(shows, name, observation, False)
        if position == 0:
            first_ok = bool(in_observation if about_observation else in_action) or bool(
                about_observation and in_action
            )
        if not in_action and not in_observation:
            missing.append(name)
            strengths.append(0.0)
            continue
        strength = 1.0 if in_action else 0.6
        if len(set(in_action) | set(in_observation)) < 2:
            strength *= 0.8
        strengths.append(strength)
        where = []
        if in_action:
            where.append(f"the action has {_quote(in_action)}")
        if in_observation:
            where.append(f"the observation has {_quote(in_observation)}")
        parts.append(f"{name}: {' and '.join(where)}")
    score = sum(strengths) / len(strengths)
    coverage = sum(1 for s in strengths if s > 0) / len(strengths)
    if not missing and first_ok:
        return {
            "match": "yes",
            "confidence": round(min(0.95, 0.5 + 0.45 * score), 2),
            "reason": "; ".join(parts) + ".",
        }
    if missing:
        why = f"nothing shows {_quote(missing)}"
    else:
        place = "observation" if about_observation else "action"
        why = f'"{concepts[0][0]}" is not in the {place}'
    seen = f" ({'; '.join(parts)})" if parts else ""
    return {
        "match": "no",
        "confidence": round(0.9 - 0.4 * coverage, 2),
        "reason": f"No: {why}{seen}.",
    }


# ---- reading the prompts ------------------------------------------------------------------

_HEADINGS = (
    prompts.H_BEHAVIOUR,
    prompts.H_TASK,
    prompts.H_HISTORY,
    prompts.H_ACTION,
    prompts.H_OBSERVATION,
    prompts.H_TRAJECTORY,
    prompts.H_REASONS,
)
_SECTION = re.compile("^(" + "|".join(re.escape(h) for h in _HEADINGS) + r")\b[^\n]*$", re.M)
_STEP = re.compile(
    r"^### Step (\d+)\nAction:\n(.*?)\nObservation:\n(.*?)(?=^### Step |\Z)", re.M | re.S
)


def _sections(text: str) -> dict[str, str]:
    found: dict[str, str] = {}
    marks = list(_SECTION.finditer(text))
    for i, match in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(text)
        found[match.group(1)] = text[match.end() : end].strip("\n")
    return found


def _answer(body: dict[str, Any]) -> str:
    return f"{NOTE}.\n<verdict>{json.dumps(body)}</verdict>"


def _user_text(messages: list[dict[str, Any]]) -> str:
    return next(
        (
            m["content"]
            for m in reversed(messages)
            if m.get("role") == "user" and isinstance(m.get("content"), str)
        ),
        "",
    )


def step_answer(messages: list[dict[str, Any]]) -> str:
    sections = _sections(_user_text(messages))
    description = sections.get(prompts.H_BEHAVIOUR, "")
    action = sections.get(prompts.H_ACTION, "")
    observation = sections.get(prompts.H_OBSERVATION, "")
    return _answer(verdict_of(description, action, observation))


def trajectory_answer(messages: list[dict[str, Any]]) -> str:
    sections = _sections(_user_text(messages))
    description = sections.get(prompts.H_BEHAVIOUR, "")
    steps = _STEP.findall(sections.get(prompts.H_TRAJECTORY, ""))
    best: tuple[int, dict[str, Any]] | None = None
    for index, action, observation in steps:
        verdict = verdict_of(description, action.strip(), observation.strip())
        if verdict["match"] == "yes":
            verdict["reason"] = f"Step {index}: {verdict['reason']}"
            return _answer({**verdict, "step": int(index)})
        if best is None or verdict["confidence"] < best[1]["confidence"]:
            best = (int(index), verdict)  # the least sure "no" is the closest to a match
    if best is None:
        return _answer({"match": "no", "confidence": 0.9, "reason": "No steps.", "step": None})
    return _answer(
        {
            "match": "no",
            "confidence": best[1]["confidence"],
            "reason": f"No step shows it; the closest, step {best[0]}: {best[1]['reason']}",
            "step": None,
        }
    )


_GENERIC = frozenset("action observation has no nothing shows step closest".split())


def naming_answer(messages: list[dict[str, Any]]) -> str:
    """The words (not paths) the group's reasons quote most, and where they were found when
    every reason found them there."""
    sections = _sections(_user_text(messages))
    reasons = [
        line[2:]
        for line in sections.get(prompts.H_REASONS, "").splitlines()
        if line.startswith("- ")
    ]
    counts: Counter[str] = Counter()
    for reason in reasons:
        counts.update(
            {w for w in re.findall(r'"([A-Za-z][\w-]{0,39})"', reason) if w not in _GENERIC}
        )
    top = [w for w, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:3]]
    name = ", ".join(top) if top else "reasons alike"
    in_action = sum(1 for r in reasons if "the action has" in r)
    # where, only when every reason found its words there (of the words as a whole: "a, b
    # in the action" read as if only b were)
    if reasons and in_action == len(reasons):
        name += " (all in the action)"
    elif reasons and not in_action:
        name += " (all in the observation)"
    return f"Scripted demo judge (rules, not a model): the words these reasons quote most.\n<name>{name}</name>"


def behaviour_answer(messages: list[dict[str, Any]]) -> str | None:
    """The answer to one of behaviour search's prompts, or None when it is none of them."""
    system = next((m.get("content") for m in messages if m.get("role") == "system"), None)
    if not isinstance(system, str):
        return None
    if system.startswith(prompts.STEP_SYSTEM_START):
        return step_answer(messages)
    if system.startswith(prompts.TRAJECTORY_SYSTEM_START):
        return trajectory_answer(messages)
    if system.startswith(prompts.NAMING_SYSTEM_START):
        return naming_answer(messages)
    return None


# ---- embeddings ---------------------------------------------------------------------------


def embed_text(text: str) -> list[float]:
    """A hashed bag of the text's words, each folded onto its synonym group's head: 256
    numbers of unit length (all zeros for a text with no word). Not a model."""
    vector = [0.0] * EMBEDDING_DIMENSIONS
    counts = Counter(
        _HEAD_OF.get(w) or _HEAD_OF.get(_stem(w)) or _stem(w)
        for w in words_of(text)
        if w not in STOP_WORDS
    )
    for word, count in counts.items():
        digest = hashlib.sha256(word.encode()).digest()
        slot = int.from_bytes(digest[:4], "big") % EMBEDDING_DIMENSIONS
        sign = 1.0 if digest[4] % 2 == 0 else -1.0
        vector[slot] += sign * (1.0 + math.log(count))
    norm = math.sqrt(sum(x * x for x in vector))
    return [round(x / norm, 6) for x in vector] if norm else vector
