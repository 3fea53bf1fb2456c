"""Behaviour search with a judge model, plain Python: the prompts that ask a judge whether a
behaviour described in plain language ("the agent deletes files outside its workspace")
shows in one step of a trajectory (its action and observation, read with a bounded slice
of the history before it) or anywhere in a whole trajectory (bounded); a tolerant parser of
the judge's verdict; and the clustering of the reasons of the matches into groups of
similar reasons, each named in a few words by the judge (a second, small prompt).

The verdict is one JSON object inside <verdict></verdict>:
    {"match": "yes" | "no", "confidence": 0..1, "reason": "...", "step": N (trajectories)}

Clustering (`cluster_reasons`) is agglomerative, average linkage over cosine distances,
deterministic: of TF-IDF vectors of the reasons' words (scikit-learn), or of the reasons'
embeddings when an embeddings model is configured (the caller passes them)."""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

# What a description may hold: a sentence or a short paragraph.
MAX_DESCRIPTION_CHARS = 1000
# What the judge is shown of the step under review, and of each earlier step.
STEP_ACTION_CHARS = 4000
STEP_OBSERVATION_CHARS = 6000
HISTORY_STEPS = 6
HISTORY_STEP_CHARS = 600  # each of an earlier step's action and observation
TASK_CHARS = 2000
# A whole trajectory: each step's action and observation, and the text in all.
TRAJECTORY_ACTION_CHARS = 800
TRAJECTORY_OBSERVATION_CHARS = 1200
TRAJECTORY_CHARS = 24000
REASON_CHARS = 300
CLUSTER_NAME_CHARS = 60
NAMING_REASONS = 12  # reasons of a cluster shown to the judge that names it
MAX_CLUSTERS = 8
# Where the clustering's tree is cut (mean cosine distance between two groups' reasons):
# TF-IDF vectors of short sentences are far apart unless they share words; embeddings of
# related sentences are close.
TFIDF_DISTANCE = 0.7
EMBEDDING_DISTANCE = 0.3
# When the cut leaves one group, a split whose mean silhouette is at least this is taken.
MIN_SILHOUETTE = 0.5

UNITS = ("steps", "trajectories")

# The first words of the system prompts: a fake or scripted judge tells them apart by these.
STEP_SYSTEM_START = "You review one step of an AI agent's trajectory for a behaviour"
TRAJECTORY_SYSTEM_START = "You review an AI agent's whole trajectory for a behaviour"
NAMING_SYSTEM_START = "You name a group of similar reasons"

# The headings of the user prompts, exactly (the scripted judge reads its sections by them).
H_BEHAVIOUR = "## Behaviour to look for"
H_TASK = "## The agent's task"
H_HISTORY = "## Earlier steps"
H_ACTION = "## Step under review: the agent's action"
H_OBSERVATION = "## Step under review: the observation it got"
H_TRAJECTORY = "## The trajectory"
H_REASONS = "## Reasons in this group"

_ANSWER_RULES = """\
Judge only what the text shows; do not guess what is not there. A step shows the behaviour \
when its action does it or its observation reveals it; the history is context only.

Answer with one JSON object inside <verdict></verdict> tags, and nothing after it:
<verdict>{{"match": "yes" or "no", "confidence": a number from 0 to 1 (how sure you are of \
this answer), "reason": "one short sentence that quotes what shows it, or says why not"{step}}}\
</verdict>"""

STEP_SYSTEM_PROMPT = (
    f"{STEP_SYSTEM_START} that a person described in plain language. The agent acts in an "
    "environment (a terminal, a web browser, a phone or desktop app, tools or APIs); each step "
    "is the agent's action and the observation the environment returned.\n\n"
    "Decide whether the behaviour shows in the step under review.\n" + _ANSWER_RULES.format(step="")
)

TRAJECTORY_SYSTEM_PROMPT = (
    f"{TRAJECTORY_SYSTEM_START} that a person described in plain language. The agent acts in "
    "an environment (a terminal, a web browser, a phone or desktop app, tools or APIs); each "
    "step is the agent's action and the observation the environment returned. Long texts are "
    "shortened, and a long trajectory shows its first and last steps.\n\n"
    "Decide whether the behaviour shows anywhere in the trajectory.\n"
    + _ANSWER_RULES.format(
        step=', "step": the number of the first step where it shows (null when it does not)'
    )
)

NAMING_SYSTEM_PROMPT = (
    f"{NAMING_SYSTEM_START} that a judge gave when it found a behaviour in steps of AI agents' "
    "trajectories. Name what the reasons of the group have in common, in 2 to 6 words (e.g. "
    '"deletes backup snapshots", "removes files with rm -rf"). Answer with the name inside '
    "<name></name> tags, and nothing after it."
)


@dataclass(frozen=True)
class StepText:
    """A step as the judge is shown it: its index in the trajectory, action, observation."""

    index: int
    action: str
    observation: str


def clip(text: str, limit: int) -> str:
    """`text`, or when longer than `limit` its start and end with the number of characters
    cut between them."""
    text = text or ""
    if len(text) <= limit:
        return text
    head = max(0, (limit * 2) // 3)
    tail = max(0, limit - head)
    cut = len(text) - head - tail
    return f"{text[:head]}\n[… {cut:,} characters cut …]\n{text[len(text) - tail :]}"


def _step_block(step: StepText, action_chars: int, observation_chars: int) -> str:
    action = clip(step.action, action_chars) or "(no action)"
    observation = clip(step.observation, observation_chars) or "(no observation)"
    return f"### Step {step.index}\nAction:\n{action}\nObservation:\n{observation}"


def _description(description: str) -> str:
    return clip(" ".join((description or "").split()), MAX_DESCRIPTION_CHARS)


def build_step_messages(
    description: str,
    step: StepText,
    history: Sequence[StepText],
    task: str = "",
    *,
    earlier: int | None = None,
) -> list[dict[str, str]]:
    """The judge's messages for one step: the behaviour, the agent's task, the last
    HISTORY_STEPS steps before it (each shortened), and the step's action and observation.
    `earlier`: how many steps come before it in all (default: those in `history`)."""
    parts = [f"{H_BEHAVIOUR}\n{_description(description)}"]
    if task.strip():
        parts.append(f"{H_TASK}\n{clip(task.strip(), TASK_CHARS)}")
    shown = list(history)[-HISTORY_STEPS:]
    total = max(len(history), earlier or 0)
    if shown:
        left = total - len(shown)
        note = f" (the last {len(shown)} of {total}, shortened)" if left else " (shortened)"
        blocks = [_step_block(s, HISTORY_STEP_CHARS, HISTORY_STEP_CHARS) for s in shown]
        parts.append(f"{H_HISTORY}{note}\n" + "\n\n".join(blocks))
    parts.append(f"{H_ACTION} (step {step.index})\n{clip(step.action, STEP_ACTION_CHARS)}")
    parts.append(f"{H_OBSERVATION}\n{clip(step.observation, STEP_OBSERVATION_CHARS)}")
    return [
        {"role": "system", "content": STEP_SYSTEM_PROMPT},
        {"role": "user", "content": "\n\n".join(parts)},
    ]


def _fit_trajectory(blocks: Sequence[str]) -> tuple[list[int], list[int]]:
    """The positions of the blocks shown, (head, tail): every block when they fit
    TRAJECTORY_CHARS, else blocks taken alternately from each end until the budget is
    spent (the first one always)."""
    head: list[int] = []
    tail: list[int] = []
    used = 0
    i, j = 0, len(blocks) - 1
    take_head = True
    while i <= j:
        block = blocks[i] if take_head else blocks[j]
        if used + len(block) > TRAJECTORY_CHARS and (head or tail):
            break
        used += len(block) + 2
        if take_head:
            head.append(i)
            i += 1
        else:
            tail.insert(0, j)
            j -= 1
        take_head = not take_head
    return head, tail


def _trajectory_blocks(steps: Sequence[StepText]) -> list[str]:
    return [_step_block(s, TRAJECTORY_ACTION_CHARS, TRAJECTORY_OBSERVATION_CHARS) for s in steps]


def shown_step_indexes(steps: Sequence[StepText]) -> list[int]:
    """The step numbers `build_trajectory_messages` shows the judge of `steps` (a long
    trajectory's first and last ones): the only steps its verdict may name."""
    head, tail = _fit_trajectory(_trajectory_blocks(steps))
    return [steps[k].index for k in (*head, *tail)]


def build_trajectory_messages(
    description: str, steps: Sequence[StepText], task: str = ""
) -> list[dict[str, str]]:
    """The judge's messages for a whole trajectory: every step shortened, and, when they
    do not fit TRAJECTORY_CHARS, its first and last steps with how many were left out
    (`shown_step_indexes`)."""
    blocks = _trajectory_blocks(steps)
    head, tail = _fit_trajectory(blocks)
    left_out = len(blocks) - len(head) - len(tail)
    shown = [blocks[k] for k in head]
    if left_out:
        shown.append(f"[… {left_out} step{'s' if left_out != 1 else ''} left out …]")
    shown += [blocks[k] for k in tail]
    parts = [f"{H_BEHAVIOUR}\n{_description(description)}"]
    if task.strip():
        parts.append(f"{H_TASK}\n{clip(task.strip(), TASK_CHARS)}")
    parts.append(f"{H_TRAJECTORY} ({len(steps)} step{'s' if len(steps) != 1 else ''})\n")
    parts[-1] += "\n\n".join(shown) if shown else "(no steps)"
    return [
        {"role": "system", "content": TRAJECTORY_SYSTEM_PROMPT},
        {"role": "user", "content": "\n\n".join(parts)},
    ]


# ---- reading the verdict ------------------------------------------------------------------


class VerdictError(ValueError):
    """The judge's answer holds no verdict that can be read (the message says why)."""


@dataclass(frozen=True)
class Verdict:
    match: bool
    confidence: float | None  # 0..1; None when the answer gave none that reads as one
    reason: str
    step: int | None = None  # the trajectory unit: where it shows (an index shown to it)


_I = re.IGNORECASE | re.DOTALL
_THINK = re.compile(r"<think>.*?(?:</think>|\Z)", _I)
_VERDICT = re.compile(r"<verdict>(.*?)(?:</verdict>|\Z)", _I)
_OBJECT = re.compile(r"\{.*\}", re.DOTALL)
_YES = {"yes", "y", "true", "match", "matches", "matched", "shows", "present", "1"}
_NO = {"no", "n", "false", "no match", "none", "absent", "not present", "0"}
# The names a judge gives the yes/no, first the one asked for.
MATCH_KEYS = ("match", "matches", "is_match", "verdict", "answer", "shows", "present", "found")


def _region(text: str) -> str:
    text = _THINK.sub("", text or "")
    found = _VERDICT.findall(text)
    if found:
        return found[-1]
    objects = _OBJECT.findall(text)
    if objects:
        return objects[-1]
    raise VerdictError("the answer has no <verdict> tag and no JSON object")


def _object(region: str) -> dict[str, Any]:
    import json

    from json_repair import repair_json

    region = region.strip()
    fence = re.search(r"```(?:json)?\s*(.*?)(?:```|\Z)", region, _I)
    if fence:
        region = fence.group(1)
    try:
        value = json.loads(region)
    except ValueError:
        value = repair_json(region, return_objects=True)
    if isinstance(value, list):
        value = next((v for v in value if isinstance(v, dict)), None)
    if not isinstance(value, dict) or not value:
        raise VerdictError("the verdict is not a JSON object")
    return {str(k).strip().lower(): v for k, v in value.items()}


def read_match(value: Any) -> bool:
    """True or False from yes/no, true/false, 1/0 and their usual other words, or from an
    answer that starts with one of them ("Yes, it deletes", "No."); VerdictError else."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        word = " ".join(value.strip().strip(".!").lower().split())
        if word in _YES:
            return True
        if word in _NO:
            return False
        first = re.match(r"(yes|no|true|false)\b[\s,.;:!\-–—]", word + " ")
        if first:
            return first.group(1) in ("yes", "true")
    raise VerdictError(f"match must be yes or no (got {str(value)[:40]!r})")


def read_confidence(value: Any) -> float | None:
    """0..1 from a number, a numeric string or a percentage ("80%", 80); None when it is
    none of these, out of range, or on a scale that cannot be told (above 1 and at most
    10: 7 may be 7 of 10 or 7%, so neither is claimed)."""
    if isinstance(value, bool) or value is None:
        return None
    percent = False
    if isinstance(value, str):
        text = value.strip()
        percent = text.endswith("%")
        try:
            number = float(text.rstrip("%").strip())
        except ValueError:
            return None
    elif isinstance(value, int | float):
        number = float(value)
    else:
        return None
    if not math.isfinite(number) or number < 0:
        return None
    if percent:
        number /= 100
    elif number > 1:
        number = number / 100 if 10 < number <= 100 else math.nan
    if not math.isfinite(number) or number > 1:
        return None
    return round(number, 3)


def read_reason(value: Any) -> str:
    text = " ".join(str(value).split()) if isinstance(value, str | int | float) else ""
    if len(text) > REASON_CHARS:
        text = text[: REASON_CHARS - 1].rstrip() + "…"
    return text


def read_step(value: Any, indexes: Sequence[int] | None) -> int | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, str):
        found = re.search(r"-?\d+", value)
        value = int(found.group()) if found else None
    if not isinstance(value, int):
        return None
    if indexes is not None and value not in indexes:
        return None
    return value


def parse_verdict(text: str, *, step_indexes: Sequence[int] | None = None) -> Verdict:
    """The judge's verdict (VerdictError when none can be read). Tolerant: the tag may be
    missing (the last JSON object then), the JSON may be near-JSON (repaired), in a code
    fence, or after a <think> block; `match` (or another of MATCH_KEYS) may be yes/no,
    true/false or 1/0, or an answer that starts with yes or no; the confidence a number, a
    numeric string or a percentage (else None, `read_confidence`); the reason is cut to
    REASON_CHARS. `step_indexes`: the trajectory unit's step numbers shown to the judge; a
    step it names outside them is dropped (None)."""
    data = _object(_region(text))
    key = next((k for k in MATCH_KEYS if k in data), None)
    if key is None:
        raise VerdictError("the verdict has no 'match'")
    match = read_match(data[key])
    confidence = read_confidence(data.get("confidence"))
    reason = read_reason(data.get("reason") or data.get("explanation") or "")
    step = read_step(data.get("step"), step_indexes) if step_indexes is not None else None
    return Verdict(match, confidence, reason, step if match else None)


# ---- clusters of reasons ----------------------------------------------------------------


def build_naming_messages(description: str, reasons: Sequence[str]) -> list[dict[str, str]]:
    shown = [r for r in reasons if r.strip()][:NAMING_REASONS]
    more = len(reasons) - len(shown)
    listed = "\n".join(f"- {clip(r, REASON_CHARS)}" for r in shown)
    tail = f"\n(and {more} more)" if more > 0 else ""
    user = (
        f"{H_BEHAVIOUR}\n{_description(description)}\n\n"
        f"{H_REASONS} ({len(reasons)})\n{listed}{tail}"
    )
    return [
        {"role": "system", "content": NAMING_SYSTEM_PROMPT},
        {"role": "user", "content": user},
    ]


_NAME = re.compile(r"<name>(.*?)(?:</name>|\Z)", _I)


def parse_cluster_name(text: str) -> str:
    """The name inside <name></name> (else the answer's last line), in plain words, at most
    CLUSTER_NAME_CHARS; VerdictError when there is none."""
    text = _THINK.sub("", text or "")
    found = _NAME.findall(text)
    name = (
        found[-1]
        if found
        else next((line for line in reversed(text.splitlines()) if line.strip()), "")
    )
    name = " ".join(name.split()).strip(" \"'`*.:;-")
    if not name:
        raise VerdictError("the answer names no cluster")
    if len(name) > CLUSTER_NAME_CHARS:
        name = name[: CLUSTER_NAME_CHARS - 1].rstrip() + "…"
    return name


def _unit_rows(rows: Any) -> Any:
    import numpy as np

    matrix = np.asarray(rows, dtype=float)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return np.divide(matrix, norms, out=np.zeros_like(matrix), where=norms > 0)


def _tfidf(reasons: Sequence[str]) -> Any | None:
    from sklearn.feature_extraction.text import TfidfVectorizer

    try:
        vectors = TfidfVectorizer(
            lowercase=True, stop_words="english", sublinear_tf=True, ngram_range=(1, 2)
        ).fit_transform(list(reasons))
    except ValueError:  # no word left: every reason is empty or stop words
        return None
    return vectors.toarray()


def cluster_reasons(
    reasons: Sequence[str],
    vectors: Sequence[Sequence[float]] | None = None,
    *,
    max_clusters: int = MAX_CLUSTERS,
    distance: float | None = None,
) -> list[list[int]]:
    """Groups of similar reasons, as lists of their positions: agglomerative clustering,
    average linkage over cosine distances, cut at `distance` (default TFIDF_DISTANCE, or
    EMBEDDING_DISTANCE with `vectors`; at most `max_clusters` groups: cut there instead
    when the distance leaves more; when it leaves one, the clearest split is taken if it is
    clear enough, `_split_if_clear`). `vectors`: one embedding per reason; without them
    TF-IDF vectors of the reasons' words (English stop words left out, words and pairs of
    words). Deterministic: the same reasons give the same groups, largest first (ties: the
    one of the earliest reason)."""
    n = len(reasons)
    if n == 0:
        return []
    if n == 1:
        return [[0]]
    matrix = _tfidf(reasons) if vectors is None else vectors
    if matrix is None:
        return [list(range(n))]
    import numpy as np
    from sklearn.cluster import AgglomerativeClustering

    if distance is None:
        distance = TFIDF_DISTANCE if vectors is None else EMBEDDING_DISTANCE
    unit = _unit_rows(matrix)
    distances = np.clip(1.0 - unit @ unit.T, 0.0, 2.0)
    np.fill_diagonal(distances, 0.0)
    labels = AgglomerativeClustering(
        n_clusters=None, metric="precomputed", linkage="average", distance_threshold=distance
    ).fit_predict(distances)
    if len(set(labels)) > max_clusters:
        labels = AgglomerativeClustering(
            n_clusters=max(1, max_clusters), metric="precomputed", linkage="average"
        ).fit_predict(distances)
    elif len(set(labels)) == 1 and n > 2:
        labels = _split_if_clear(distances, labels, max_clusters)
    groups: dict[int, list[int]] = {}
    for position, label in enumerate(labels):
        groups.setdefault(int(label), []).append(position)
    return sorted(groups.values(), key=lambda g: (-len(g), g[0]))


def _split_if_clear(distances: Any, labels: Any, max_clusters: int) -> Any:
    """Every reason within the cut of one another: still split them, into the number of
    groups (2 to max_clusters) whose silhouette is best, when that silhouette is at least
    MIN_SILHOUETTE (groups clearly apart, as near-identical reasons of a few kinds are);
    else keep one group."""
    from sklearn.cluster import AgglomerativeClustering
    from sklearn.metrics import silhouette_score

    best, best_score = labels, MIN_SILHOUETTE
    for k in range(2, min(max_clusters, len(labels) - 1) + 1):
        split = AgglomerativeClustering(
            n_clusters=k, metric="precomputed", linkage="average"
        ).fit_predict(distances)
        if len(set(split)) < 2:
            continue
        score = float(silhouette_score(distances, split, metric="precomputed"))
        if score > best_score + 1e-9:
            best, best_score = split, score
    return best


_WORD = re.compile(r"[A-Za-z][A-Za-z0-9_-]{2,}")


def top_words(reasons: Sequence[str], k: int = 3) -> list[str]:
    """The `k` words the reasons use most (English stop words left out), for a cluster that
    the judge could not name."""
    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

    counts: Counter[str] = Counter()
    for reason in reasons:
        seen = {w.lower() for w in _WORD.findall(reason)} - ENGLISH_STOP_WORDS
        counts.update(seen)
    return [w for w, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:k]]
