"""World-model inference over AgentWorldBench files: one request per row, sent exactly as the
reference does (`inference.prompts.reference_messages`), with the reference's sampling by
default (temperature 0.6, 32,768 tokens, no top_p unless given), concurrent, resumable (rows
already in the output, keyed by domain + id + turn_idx, are skipped; a rerun tries the failed
ones again) and with a tqdm progress bar.

Each output line is the input row plus `gen` (the model's answer; a reasoning model's thinking,
when its server returns it apart, is kept in `reasoning_content`), `predicted_observation`
(parsed like the reference parser) and `parse_status`. A row whose generation failed is kept,
as the reference keeps it: an empty `gen`, `failed` 1.0 and `error_message`; judging and
scoring leave it out."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

from inference.types import GenerationRequest, SamplingParams

REQUIRED_FIELDS = ("id", "prompt", "response", "system_str", "turn_idx")


class BenchDataError(ValueError):
    """An AgentWorldBench file is missing or malformed; the message names file, line and field."""


def find_files(data: str | Path) -> list[Path]:
    path = Path(data)
    if path.is_file():
        return [path]
    if path.is_dir():
        files = sorted(path.glob("*_test.jsonl"))
        if not files:
            raise BenchDataError(f"{path}: no *_test.jsonl files in this directory")
        return files
    raise BenchDataError(f"{path}: no such file or directory")


def domain_of(row: dict) -> str:
    return str(row.get("task", "") or "unknown").rsplit("/", 1)[-1]


def row_key(row: dict) -> tuple[str, str, int]:
    """A row's identity: ids are only known to be unique within one domain's file, so the
    domain is part of the key (else resuming over a directory skips rows of other domains)."""
    return (domain_of(row), str(row.get("id")), int(row.get("turn_idx", 0)))


def validate_row(row: object, where: str) -> dict:
    if not isinstance(row, dict):
        raise BenchDataError(f"{where}: a row must be a JSON object, got {type(row).__name__}")
    for name in REQUIRED_FIELDS:
        if name not in row:
            raise BenchDataError(f"{where}: field {name!r} is missing")
    if not isinstance(row["prompt"], list) or not isinstance(row["response"], list):
        raise BenchDataError(f"{where}: fields 'prompt' and 'response' must be lists")
    turn = row["turn_idx"]
    if isinstance(turn, bool) or not isinstance(turn, int) or not 1 <= turn <= len(row["prompt"]):
        raise BenchDataError(
            f"{where}: field 'turn_idx' must be 1..{len(row['prompt'])} (len of prompt), got {turn!r}"
        )
    return row


def read_rows(files: Iterable[Path]) -> list[dict]:
    rows: list[dict] = []
    for path in files:
        with open(path, encoding="utf-8") as fh:
            for lineno, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                where = f"{path}:{lineno}"
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise BenchDataError(f"{where}: not valid JSON ({exc.msg})") from None
                rows.append(validate_row(row, where))
    return rows


def read_jsonl_keys(path: Path) -> set[tuple[str, str, int]]:
    """Keys of the complete lines already written (a torn last line is ignored and redone)."""
    done: set[tuple[str, str, int]] = set()
    if not path.exists():
        return done
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            try:
                done.add(row_key(json.loads(line)))
            except (json.JSONDecodeError, ValueError, TypeError):
                continue
    return done


def drop_lines(path: Path, redo: Callable[[dict], bool]) -> int:
    """Remove the lines for which `redo` is true (rows to do again), atomically; returns how
    many went. A torn last line goes too."""
    if not path.exists():
        return 0
    kept: list[str] = []
    dropped = 0
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                dropped += 1
                continue
            if isinstance(row, dict) and redo(row):
                dropped += 1
            else:
                kept.append(line if line.endswith("\n") else line + "\n")
    if dropped:
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text("".join(kept), encoding="utf-8")
        tmp.replace(path)
    return dropped


def truncate_torn_line(path: Path) -> None:
    """A run killed mid-write can leave half a line; cut it so appends start on a new line."""
    if not path.exists() or path.stat().st_size == 0:
        return
    data = path.read_bytes()
    if data.endswith(b"\n"):
        return
    cut = data.rfind(b"\n") + 1
    with open(path, "r+b") as fh:
        fh.truncate(cut)


@dataclass
class RunStats:
    total: int = 0
    skipped: int = 0
    written: int = 0
    failed: int = 0
    errors: list[str] = field(default_factory=list)


class JsonlWriter:
    """Appends one JSON line per finished row under a lock, flushed at once (resumable)."""

    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        truncate_torn_line(path)
        self._fh = open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()
        self._lock = threading.Lock()

    def write(self, row: dict) -> None:
        line = json.dumps(row, ensure_ascii=False) + "\n"
        with self._lock:
            self._fh.write(line)
            self._fh.flush()

    def close(self) -> None:
        self._fh.close()


def run_concurrently(
    rows: list[dict],
    work: Callable[[dict], dict],
    out_path: Path,
    *,
    concurrency: int,
    desc: str,
    show_progress: bool = True,
    redo: Callable[[dict], bool] | None = None,
) -> RunStats:
    """Run `work` on every row not yet in `out_path` and append the results as they finish.
    `work` raises to mark a row failed (it is not written, so a later run retries it), or
    returns it with `failed` 1.0 (written, and counted failed). `redo`: rows already in the
    file to do again (dropped from it first)."""
    from tqdm import tqdm

    if redo is not None:
        drop_lines(out_path, redo)
    done = read_jsonl_keys(out_path)
    todo = [r for r in rows if row_key(r) not in done]
    stats = RunStats(total=len(rows), skipped=len(rows) - len(todo))
    writer = JsonlWriter(out_path)
    bar = tqdm(total=len(rows), initial=stats.skipped, desc=desc, disable=not show_progress)
    pool = ThreadPoolExecutor(max_workers=max(1, concurrency))
    try:
        futures = {pool.submit(work, row): row for row in todo}
        for future in as_completed(futures):
            row = futures[future]
            try:
                result = future.result()
                writer.write(result)
                if result.get("failed") == 1.0:
                    stats.failed += 1
                    stats.errors.append(
                        f"id={row.get('id')} turn_idx={row.get('turn_idx')}: "
                        f"{result.get('error_message', 'failed')}"
                    )
                else:
                    stats.written += 1
            except Exception as exc:  # noqa: BLE001 - reported per row, the run goes on
                stats.failed += 1
                stats.errors.append(f"id={row.get('id')} turn_idx={row.get('turn_idx')}: {exc}")
            bar.update(1)
    finally:
        # On Ctrl-C (or any error escaping the loop) drop the rows not started yet instead of
        # computing them all and throwing the results away; a rerun resumes them.
        pool.shutdown(wait=True, cancel_futures=True)
        bar.close()
        writer.close()
    return stats


def run_infer(
    rows: list[dict],
    backend,
    out_path: str | Path,
    *,
    max_tokens: int = 32768,
    temperature: float = 0.6,
    top_p: float | None = None,
    seed: int | None = None,
    concurrency: int = 8,
    show_progress: bool = True,
) -> RunStats:
    from inference.parsing import parse_prediction
    from inference.prompts import reference_messages

    def infer(row: dict) -> dict:
        params = SamplingParams(
            temperature=temperature, top_p=top_p, max_tokens=max_tokens, seed=seed, n=1
        )
        request = GenerationRequest(messages=reference_messages(row), params=params)
        row_backend = backend.for_row(row) if hasattr(backend, "for_row") else backend
        try:
            completion = row_backend.generate(request, None)[0]
        except Exception as exc:  # noqa: BLE001 - kept as a failed generation, as the reference
            return failed_generation(row, f"{type(exc).__name__}: {exc}")
        if completion.finish_reason == "error":
            return failed_generation(row, completion.error or "the backend returned an error")
        gen = completion.text if completion.answer is None else completion.answer
        parsed = parse_prediction(gen)
        out = {
            **row,
            "gen": gen,
            "predicted_observation": parsed.observation,
            "parse_status": str(parsed.status),
        }
        if completion.reasoning:
            out["reasoning_content"] = completion.reasoning
        return out

    # one in-process model is not thread-safe: the hf backend runs rows one at a time
    if getattr(backend, "name", "") == "hf":
        concurrency = 1
    return run_concurrently(
        rows,
        infer,
        Path(out_path),
        concurrency=concurrency,
        desc="infer",
        show_progress=show_progress,
        redo=is_failed_generation,
    )


def failed_generation(row: dict, message: str) -> dict:
    return {**row, "gen": "", "failed": 1.0, "error_message": f"Inference failed: {message}"}


def is_failed_generation(row: dict) -> bool:
    return row.get("failed") == 1.0 and not row.get("gen")


OBSERVATION_MARKER = "**Environment Observation:**"


class LeaveOneOutRetrieval:
    """The retrieval baseline for the benchmark without leaking answers: a row is answered
    from the turns of the OTHER trajectories of its domain (every turn of its own trajectory
    is the ground truth of one of its rows), or of all other trajectories when its domain has
    no other. One index per trajectory id, built lazily."""

    name = "retrieval"
    is_neural = False

    def __init__(self, rows: list[dict], keep: int | None = None):
        from inference.backends.retrieval import MODEL_NAME, query_of

        self.model = MODEL_NAME
        # (trajectory, domain, action, observation); a trajectory is (domain, id): ids are only
        # unique within one domain's file
        self._entries: list[tuple[tuple[str, str], str, str, str]] = []
        seen: set[tuple[tuple[str, str], int]] = set()
        for row in rows:
            tid = (domain_of(row), str(row["id"]))
            for i, (prompt, response) in enumerate(
                zip(row["prompt"], row["response"], strict=False)
            ):
                if (tid, i) in seen:
                    continue
                seen.add((tid, i))
                observation = str(response).strip()
                if observation.startswith(OBSERVATION_MARKER):
                    observation = observation[len(OBSERVATION_MARKER) :].strip()
                action = query_of([{"role": "user", "content": str(prompt)}])
                self._entries.append((tid, domain_of(row), action, observation))
        self._cache: dict[tuple[str, str], object] = {}
        self._lock = threading.Lock()
        # indexes kept at once (one per trajectory): rows that come in trajectory order need
        # few, and each holds almost the whole benchmark
        self.keep = keep

    def for_row(self, row: dict):
        from inference.backends.retrieval import RetrievalBackend

        domain = domain_of(row)
        tid = (domain, str(row["id"]))
        with self._lock:
            if tid not in self._cache:
                others = [(d, a, o) for t, d, a, o in self._entries if t != tid]
                same_domain = [e for e in others if e[0] == domain]
                if self.keep is not None and len(self._cache) >= self.keep:
                    self._cache.pop(next(iter(self._cache)))
                # a domain with a single trajectory borrows from the other domains
                self._cache[tid] = RetrievalBackend(same_domain or others)
            return self._cache[tid]

    def generate(self, request, on_event=None):  # pragma: no cover - rows go through for_row
        raise TypeError("LeaveOneOutRetrieval answers per row: use for_row(row).generate(...)")
