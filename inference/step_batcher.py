"""One engine call for the steps of many episodes that arrive together (the in-process model).

An episode's step is one prompt and one sample; on a GPU, one row costs about as much time as
sixteen (decoding is memory-bound), so the worker that holds the model runs the steps of many
episodes on a threads pool, and every thread hands its prompt to this process's collector
instead of calling the engine itself. The collector takes the first prompt, waits up to
`window_s` for others (or until `max_rows` are there), and runs them as ONE engine call:
differing prompts, their shared prefix (the world's system prompt) computed once, each row
with its own seed (`BranchingEngine.generate(seeds=...)`, counter-based per row: a row's text
depends on its seed alone, not on the rows beside it). While a batch runs, the next prompts
queue up and go together as soon as it ends.

Rows batch together only when they sample alike (model, temperature, top_p, max_tokens): one
engine call has one of each. Plain Python (no Django); torch only through the backend."""

from __future__ import annotations

import itertools
import logging
import threading
import time
import uuid
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

from inference.types import Completion, GenerationRequest, Message, SamplingParams, StreamCallback

log = logging.getLogger(__name__)

WINDOW_S = 0.005  # how long the first prompt of a batch waits for others
MAX_ROWS = 16  # rows per engine call (its cache holds every row's suffix and answer)


@dataclass(frozen=True)
class BatchInfo:
    """Which engine call answered a row: recorded on the step (`Step.meta["batch"]`)."""

    id: str
    rows: int  # rows in that call
    row: int  # this row's place in it

    def as_dict(self) -> dict:
        return {"id": self.id, "rows": self.rows, "row": self.row}


@dataclass
class _Row:
    key: Hashable
    messages: list[Message]
    seed: int
    arrived: float
    backend: Any = None  # what answers the batch: one with `generate_rows` (the hf backend)
    params: SamplingParams | None = None
    done: threading.Event = field(default_factory=threading.Event)
    completion: Completion | None = None
    error: BaseException | None = None
    batch: BatchInfo | None = None


# run(rows' messages, their sampling, rows' seeds, the backend) -> one completion per row
RunBatch = Callable[[list[list[Message]], SamplingParams, list[int], Any], list[Completion]]


def run_rows(
    rows: list[list[Message]], params: SamplingParams, seeds: list[int], backend: Any
) -> list[Completion]:
    return backend.generate_rows(rows, params, seeds)


class StepBatcher:
    """The collector: one thread that makes engine calls of the prompts handed to `submit`."""

    def __init__(
        self, run: RunBatch = run_rows, *, window_s: float = WINDOW_S, max_rows: int = MAX_ROWS
    ):
        if max_rows < 1:
            raise ValueError(f"max_rows must be >= 1, got {max_rows}")
        self.run = run
        self.window_s = max(0.0, window_s)
        self.max_rows = max_rows
        self.calls = 0  # engine calls made (tests and the bench count them)
        self._pending: list[_Row] = []
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None

    def submit(
        self,
        key: Hashable,
        messages: list[Message],
        seed: int,
        *,
        params: SamplingParams | None = None,
        backend: Any = None,
    ) -> tuple[Completion, BatchInfo]:
        """Answer one prompt as a row of the next batch of `key` (rows of one key sample
        alike: `params`, `backend`); blocks until it is."""
        row = _Row(
            key=key,
            messages=messages,
            seed=int(seed),
            arrived=time.monotonic(),
            backend=backend,
            params=params,
        )
        with self._cond:
            self._pending.append(row)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, name="step-batcher", daemon=True)
                self._thread.start()
            self._cond.notify_all()
        row.done.wait()
        if row.error is not None:
            raise row.error
        assert row.completion is not None and row.batch is not None
        return row.completion, row.batch

    def _loop(self) -> None:
        while True:
            batch = self._collect()
            for key, rows in _by_key(batch):
                self._run(key, rows)

    def _collect(self) -> list[_Row]:
        with self._cond:
            while not self._pending:
                self._cond.wait()
            # the window runs from the first prompt's arrival: prompts that queued while the
            # last batch ran go at once
            deadline = self._pending[0].arrived + self.window_s
            while len(self._pending) < self.max_rows:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            taken, self._pending = self._pending[: self.max_rows], self._pending[self.max_rows :]
            return taken

    def _run(self, key: Hashable, rows: list[_Row]) -> None:
        batch_id = uuid.uuid4().hex[:12]
        self.calls += 1
        try:
            first = rows[0]
            completions = self.run(
                [r.messages for r in rows],
                first.params or SamplingParams(),
                [r.seed for r in rows],
                first.backend,
            )
            if len(completions) != len(rows):
                raise RuntimeError(f"{len(completions)} answers for a batch of {len(rows)} rows")
        except BaseException as exc:  # noqa: BLE001 - every waiting step hears it
            log.warning("a batch of %d step(s) failed: %s", len(rows), exc)
            for row in rows:
                row.error = exc
                row.done.set()
            return
        for place, (row, completion) in enumerate(zip(rows, completions, strict=True)):
            row.completion = completion
            row.batch = BatchInfo(id=batch_id, rows=len(rows), row=place)
            row.done.set()


def _by_key(rows: Sequence[_Row]) -> list[tuple[Hashable, list[_Row]]]:
    groups: dict[Hashable, list[_Row]] = {}
    for row in rows:
        groups.setdefault(row.key, []).append(row)
    return list(groups.items())


_seeds = itertools.count(1)


class BatchedBackend:
    """A backend for one step that sends its one-prompt, one-sample request through the
    process's `StepBatcher`; anything else goes to the wrapped backend as is. `batch` is the
    engine call that answered it (None until then, or when not batched)."""

    is_neural = True

    def __init__(self, inner, batcher: StepBatcher):
        self.inner = inner
        self.name = inner.name
        self.batcher = batcher
        self.batch: BatchInfo | None = None

    def __getattr__(self, name: str):
        return getattr(self.inner, name)  # encode, model, ... as the wrapped backend has them

    def generate(
        self, request: GenerationRequest, on_event: StreamCallback | None = None
    ) -> list[Completion]:
        prompts = request.prompts()
        params = request.params
        if len(prompts) != 1 or params.n != 1:
            return self.inner.generate(request, on_event)
        key = (
            getattr(self.inner, "model", ""),
            getattr(self.inner, "device", None),
            params.temperature,
            params.top_p,
            params.max_tokens,
        )
        # no seed (a world model's default sampling): a distinct one per row, so that rows
        # of one batch never share their draws
        seed = params.seed if params.seed is not None else (time.time_ns() + next(_seeds))
        completion, self.batch = self.batcher.submit(
            key, prompts[0], seed % (2**62), params=params, backend=self.inner
        )
        return [completion]
