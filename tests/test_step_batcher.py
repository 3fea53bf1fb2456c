"""The collector that makes one engine call of the steps of many episodes
(`inference.step_batcher`), and the engine's per-row seeds it relies on: a row's text depends
on its prompt and seed alone, not on the rows beside it (tiny model, CPU)."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from inference.step_batcher import BatchedBackend, StepBatcher
from inference.types import Completion, GenerationRequest, SamplingParams
from tests.support.tiny_model import tiny_model_path  # noqa: F401  (fixture)
from tests.support.worker import wait_for


def _recording_run(calls: list, gate: threading.Event | None = None):
    def run(rows, params, seeds, backend):
        if gate is not None:
            gate.wait(timeout=30)
        calls.append(([r[0]["content"] for r in rows], list(seeds), params.max_tokens))
        return [Completion(text=f"{r[0]['content']}/{s}") for r, s in zip(rows, seeds, strict=True)]

    return run


def _ask(batcher: StepBatcher, text: str, seed: int, key="k", max_tokens: int = 8):
    params = SamplingParams(max_tokens=max_tokens)
    return batcher.submit(key, [{"role": "user", "content": text}], seed, params=params)


def test_rows_that_arrive_within_the_window_go_as_one_call_each_with_its_seed():
    calls: list = []
    batcher = StepBatcher(_recording_run(calls), window_s=30, max_rows=4)
    with ThreadPoolExecutor(4) as pool:
        futures = [pool.submit(_ask, batcher, f"p{i}", 100 + i) for i in range(4)]
        answers = [f.result(timeout=30) for f in futures]
    assert len(calls) == 1 and batcher.calls == 1  # four rows, one call: max_rows sent it
    texts, seeds, _ = calls[0]
    assert sorted(texts) == ["p0", "p1", "p2", "p3"] and sorted(seeds) == [100, 101, 102, 103]
    for i, (completion, batch) in enumerate(answers):
        assert completion.text == f"p{i}/{100 + i}"  # each row its own answer
        assert batch.rows == 4 and texts[batch.row] == f"p{i}"
    assert len({batch.id for _, batch in answers}) == 1


def test_a_lone_row_goes_at_once_and_rows_queued_meanwhile_go_next_as_one_call():
    calls: list = []
    running, gate = threading.Event(), threading.Event()

    def run(rows, params, seeds, backend):
        running.set()
        gate.wait(timeout=30)  # the engine is busy with the first call
        calls.append(sorted(r[0]["content"] for r in rows))
        return [Completion(text="ok") for _ in rows]

    batcher = StepBatcher(run, window_s=0.0, max_rows=8)
    with ThreadPoolExecutor(4) as pool:
        first = pool.submit(_ask, batcher, "first", 1)
        assert running.wait(timeout=30)  # a lone row does not wait for company
        later = [pool.submit(_ask, batcher, f"later{i}", 10 + i) for i in range(3)]
        wait_for(lambda: len(batcher._pending) == 3, timeout=30)
        gate.set()
        for f in [first, *later]:
            f.result(timeout=30)
    assert calls == [["first"], ["later0", "later1", "later2"]]


def test_rows_that_sample_differently_never_share_a_call():
    calls: list = []
    batcher = StepBatcher(_recording_run(calls), window_s=30, max_rows=2)
    with ThreadPoolExecutor(2) as pool:
        a = pool.submit(_ask, batcher, "a", 1, "k8", 8)
        b = pool.submit(_ask, batcher, "b", 2, "k16", 16)
        a.result(timeout=30), b.result(timeout=30)
    assert sorted((texts[0], tokens) for texts, _, tokens in calls) == [("a", 8), ("b", 16)]


def test_a_failed_call_fails_every_row_of_it_and_the_next_call_works():
    def run(rows, params, seeds, backend):
        if any(r[0]["content"] == "boom" for r in rows):
            raise RuntimeError("out of memory")
        return [Completion(text="ok") for _ in rows]

    batcher = StepBatcher(run, window_s=0.0, max_rows=1)
    with pytest.raises(RuntimeError, match="out of memory"):
        _ask(batcher, "boom", 1)
    assert _ask(batcher, "fine", 2)[0].text == "ok"


def test_the_batched_backend_sends_only_one_prompt_one_sample_requests_through():
    class Inner:
        name, model, device = "hf", "m", None

        def __init__(self):
            self.direct = 0

        def generate(self, request, on_event=None):
            self.direct += 1
            return [Completion(text="direct")] * len(request.prompts())

        def generate_rows(self, rows, params, seeds):
            return [Completion(text=f"row seed {s}") for s in seeds]

    inner = Inner()
    backend = BatchedBackend(inner, StepBatcher(window_s=0.0, max_rows=4))
    one = GenerationRequest(
        messages=[{"role": "user", "content": "x"}], params=SamplingParams(seed=9)
    )
    assert backend.generate(one)[0].text == "row seed 9" and backend.batch.rows == 1
    many = GenerationRequest(
        messages=[{"role": "user", "content": "x"}], params=SamplingParams(n=3)
    )
    assert [c.text for c in backend.generate(many)] == ["direct"] * 3 and inner.direct == 1


@pytest.mark.torch
def test_a_rows_sample_depends_on_its_seed_not_on_its_batch(tiny_model_path):  # noqa: F811
    from inference.backends.hf import load_model
    from inference.engine import BranchingEngine

    loaded = load_model(tiny_model_path, "cpu")
    encode = loaded.tokenizer
    prompts = [
        encode(f"### Turn 1\n**Action:** {action}\n", add_special_tokens=False)["input_ids"]
        for action in ("ls -la", "cat /etc/hosts", "pwd")
    ]
    engine = BranchingEngine(loaded.model, eos_token_ids=())
    together = engine.generate(prompts, max_new_tokens=10, temperature=0.9, seeds=[7, 8, 9])
    for prompt, seed, row in zip(prompts, (7, 8, 9), together.branches, strict=True):
        alone = engine.generate([prompt], max_new_tokens=10, temperature=0.9, seeds=[seed])
        assert alone.branches[0].tokens == row.tokens
    swapped = engine.generate(prompts[::-1], max_new_tokens=10, temperature=0.9, seeds=[9, 8, 7])
    assert [b.tokens for b in swapped.branches] == [b.tokens for b in together.branches][::-1]
    with pytest.raises(ValueError, match="one seed per branch"):
        engine.generate(prompts, max_new_tokens=2, seeds=[1])
