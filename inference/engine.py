"""The branching engine: N continuations that share a prompt prefix, computed for little more
than the price of one.

It knows nothing of tokenization: branches are lists of token ids and the result is lists of
token ids. The steps:

1. Prefill the longest common prefix of all branches ONCE (batch of 1, in chunks). Its
   full-attention keys/values stay in one buffer that every branch reads: they are never
   copied per branch (`inference.shared_cache`).
2. Feed what differs: the distinct suffixes (at least the last prompt token of each branch, so
   every branch gets logits), those of one length as one batch. Each suffix row starts from a
   copy of the prefix's recurrent (Gated DeltaNet / conv) states: the one copy a branch makes,
   at the fork. Branches with equal prompts share a row until decoding starts.
3. Decode all N branches in a fixed-shape step: one token per branch written at that
   branch's position of a fixed-size suffix buffer, recurrent states updated in place, the
   sampler run on the device with per-branch seeds. A finished branch is masked, not removed,
   so shapes and addresses never change; on CUDA the step is captured once as a CUDA graph and
   replayed (eager elsewhere, same tokens). The host reads the new tokens only every
   `sync_every` steps: that is when eos, max_new_tokens and the callback's stop are seen and
   when streaming callbacks get the tokens that came since the last read.

Under greedy decoding the tokens equal N separate `model.generate` calls (tested on the tiny
qwen3_5_moe model). Branch i samples with seed + i: its text does not depend on N, on the
order of the branches or on siblings that stopped. torch is imported lazily."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from inference.kernels import warn_if_slow_kernels
from inference.sampler import branch_seeds, sample_next, token_hashes
from inference.shared_cache import ATTENTION_NAME, SharedPrefixCache, register_attention

log = logging.getLogger(__name__)

# on_tokens(branch_index, tokens_since_last_call) -> True to stop that branch
TokenCallback = Callable[[int, list[int]], bool]

PREFILL_CHUNK = 8192  # prefix tokens per forward: bounds activation memory on long prompts
SYNC_EVERY = 16  # decode steps between host reads of the token buffer


@dataclass
class BranchOutput:
    tokens: list[int] = field(default_factory=list)
    finish_reason: str = "length"  # stop (eos) | length | cancelled (callback asked to stop)


@dataclass
class EngineOutput:
    branches: list[BranchOutput]
    prefix_tokens: int  # length of the prefix shared by all branches (computed once)
    prefill_tokens: int  # prompt tokens actually run through the model (prefix + distinct suffixes)
    prompt_tokens: list[int]  # prompt length of each branch
    prefill_s: float
    decode_s: float
    decode_steps: int
    host_syncs: int = 0  # reads of the device token buffer during decoding
    graph: str = "eager"  # "cuda graph" when the decode step ran as a captured graph
    cache_bytes: dict[str, int] = field(default_factory=dict)

    @property
    def tokens_out(self) -> int:
        return sum(len(b.tokens) for b in self.branches)


def common_prefix_length(seqs: Sequence[Sequence[int]]) -> int:
    first = seqs[0]
    n = min(len(s) for s in seqs)
    for i in range(n):
        tok = first[i]
        if any(s[i] != tok for s in seqs[1:]):
            return i
    return n


@contextmanager
def _shared_prefix_attention(model: Any):
    """The model's attention layers use the engine's attention only inside this block, so the
    same model object still serves `generate` and anything else unchanged."""
    register_attention()
    config = model.config
    previous = config._attn_implementation
    config._attn_implementation = ATTENTION_NAME
    try:
        yield
    finally:
        config._attn_implementation = previous


class BranchingEngine:
    """Wraps a transformers causal LM of the qwen3_5_moe family (hybrid full / linear attention)
        for shared-prefix batched decoding. `eos_token_ids` end a branch (pass none to always decode
        max_new_tokens). `sync_every`: decode steps between host reads (16 on CUDA, 1 on CPU by
    default). `cuda_graph` captures the decode step on CUDA (eager if capture fails)."""

    def __init__(
        self,
        model: Any,
        *,
        eos_token_ids: Iterable[int] = (),
        sync_every: int | None = None,
        prefill_chunk: int = PREFILL_CHUNK,
        cuda_graph: bool = True,
    ):
        if sync_every is not None and sync_every < 1:
            raise ValueError(f"sync_every must be >= 1, got {sync_every}")
        self.model = model
        self.eos_token_ids = frozenset(int(t) for t in eos_token_ids)
        if sync_every is None:
            # A read stalls a GPU until its queue drains; on a CPU there is no queue, so a read
            # per step costs nothing and a stop or eos is seen at once.
            sync_every = SYNC_EVERY if self.device.type == "cuda" else 1
        self.sync_every = sync_every
        self.prefill_chunk = prefill_chunk
        self.cuda_graph = cuda_graph
        self._token_hash: Any = None

    @property
    def device(self):
        return self.model.device

    def _forward(self, cache: SharedPrefixCache, input_ids, position_ids):
        # The mask mapping is handed over as is, so transformers builds no mask; our attention
        # reads the lengths from the cache it is given in the mask's place.
        out = self.model(
            input_ids=input_ids,
            position_ids=position_ids,
            attention_mask={"full_attention": cache, "linear_attention": None},
            cache=cache,
            use_cache=True,
            logits_to_keep=1,
        )
        cache.advance(input_ids.shape[1])
        return out.logits[:, -1, :]

    def generate(
        self,
        branches: Sequence[Sequence[int]],
        *,
        max_new_tokens: int,
        temperature: float = 0.0,
        top_p: float = 1.0,
        seed: int | None = None,
        seeds: Sequence[int] | None = None,
        on_tokens: TokenCallback | None = None,
    ) -> EngineOutput:
        """`seed`: branch i samples with seed + i (the N futures of one job). `seeds`: one
        seed per branch instead (a batch of rows of different episodes, each with the seed
        of its own step); a row's text depends on its seed alone, not on its batch."""
        import torch

        if not branches:
            raise ValueError("no branches to generate")
        if any(len(b) == 0 for b in branches):
            raise ValueError("every branch needs at least one prompt token")
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        if temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {temperature}")
        if not 0 < top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {top_p}")
        if seeds is not None and len(seeds) != len(branches):
            raise ValueError(
                f"seeds must have one seed per branch: {len(seeds)} for {len(branches)}"
            )
        warn_if_slow_kernels(self.device)
        prompts = [list(map(int, b)) for b in branches]

        with torch.inference_mode(), _shared_prefix_attention(self.model):
            t0 = time.perf_counter()
            cache, logits, prefix_len, prefill_tokens = self._prefill(prompts, max_new_tokens)
            _sync(self.device)
            t1 = time.perf_counter()
            run = _Decode(
                self,
                cache,
                logits,
                prefix_len=prefix_len,
                max_new_tokens=max_new_tokens,
                temperature=temperature,
                top_p=top_p,
                seeds=(
                    branch_seeds(seed, len(prompts), self.device)
                    if seeds is None
                    else torch.tensor([int(s) for s in seeds], dtype=torch.long, device=self.device)
                ),
                on_tokens=on_tokens,
            )
            run.loop()
            _sync(self.device)
            t2 = time.perf_counter()
        return EngineOutput(
            branches=run.outputs,
            prefix_tokens=prefix_len,
            prefill_tokens=prefill_tokens,
            prompt_tokens=[len(p) for p in prompts],
            prefill_s=t1 - t0,
            decode_s=t2 - t1,
            decode_steps=run.steps,
            host_syncs=run.syncs,
            graph=run.graph,
            cache_bytes=cache.nbytes(),
        )

    # -- prefill -------------------------------------------------------------------------------

    def _prefill(self, prompts: list[list[int]], max_new_tokens: int):
        import torch

        dev = self.device
        # Keep at least one token per branch out of the prefix so each gets its own logits.
        prefix_len = min(common_prefix_length(prompts), min(len(p) for p in prompts) - 1)

        # Distinct suffixes, in first-seen order; branch -> suffix index.
        suffix_index: dict[tuple[int, ...], int] = {}
        branch_suffix = [
            suffix_index.setdefault(tuple(p[prefix_len:]), len(suffix_index)) for p in prompts
        ]
        suffixes = list(suffix_index)
        cache = SharedPrefixCache(
            self.model.config.layer_types,
            rows=len(prompts),
            prefix_capacity=prefix_len,
            suffix_capacity=max(len(s) for s in suffixes) + max_new_tokens,
            device=dev,
        )

        prefix = prompts[0][:prefix_len]
        for start in range(0, prefix_len, self.prefill_chunk):
            chunk = prefix[start : start + self.prefill_chunk]
            ids = torch.tensor([chunk], device=dev)
            pos = torch.arange(start, start + len(chunk), device=dev).unsqueeze(0)
            self._forward(cache, ids, pos)

        logits = None
        by_length: dict[int, list[int]] = {}
        for i, s in enumerate(suffixes):
            by_length.setdefault(len(s), []).append(i)
        for length, idxs in by_length.items():
            cache.begin_rows(len(idxs))
            ids = torch.tensor([list(suffixes[i]) for i in idxs], device=dev)
            pos = torch.arange(prefix_len, prefix_len + length, device=dev)
            rows_logits = self._forward(cache, ids, pos.unsqueeze(0).expand(len(idxs), -1))
            row_of = {suffix: row for row, suffix in enumerate(idxs)}
            takers = [b for b, s in enumerate(branch_suffix) if s in row_of]
            branches_t = torch.tensor(takers, dtype=torch.long, device=dev)
            rows_t = torch.tensor(
                [row_of[branch_suffix[b]] for b in takers], dtype=torch.long, device=dev
            )
            cache.commit_rows(branches_t, rows_t, length)
            if logits is None:
                logits = rows_logits.new_empty((len(prompts), rows_logits.shape[-1]))
            logits.index_copy_(0, branches_t, rows_logits.index_select(0, rows_t))
        cache.begin_decode()
        prefill_tokens = prefix_len + sum(len(s) for s in suffixes)
        return cache, logits, prefix_len, prefill_tokens

    def token_hash(self, vocab: int):
        if self._token_hash is None or self._token_hash.shape[0] != vocab:
            self._token_hash = token_hashes(vocab, self.device)
        return self._token_hash


class _Decode:
    """One decoding run: static device buffers, the step, and the host's periodic reads."""

    def __init__(
        self,
        engine: BranchingEngine,
        cache: SharedPrefixCache,
        logits,
        *,
        prefix_len: int,
        max_new_tokens: int,
        temperature: float,
        top_p: float,
        seeds,
        on_tokens: TokenCallback | None,
    ):
        import torch

        self.engine, self.cache = engine, cache
        self.n = logits.shape[0]
        self.t_max = max_new_tokens
        self.temperature, self.top_p = temperature, top_p
        self.seeds = seeds
        self.on_tokens = on_tokens
        dev = logits.device
        self.prefix_len = prefix_len
        self.logits = logits  # static: the step overwrites it in place
        self.token_hash = engine.token_hash(logits.shape[-1]) if temperature > 0 else None
        self.out = torch.zeros((self.n, max_new_tokens), dtype=torch.long, device=dev)
        self.step_t = torch.zeros((), dtype=torch.long, device=dev)  # next column of `out`
        self.outputs = [BranchOutput() for _ in range(self.n)]
        self.live = set(range(self.n))
        self.read_upto = 0
        self.steps = 0  # tokens sampled per branch so far (= filled columns of `out`)
        self.syncs = 0
        self.graph = "eager"
        self._graph: Any = None

    # -- device side ---------------------------------------------------------------------------

    def _sample_into_out(self) -> Any:
        tok = sample_next(
            self.logits,
            temperature=self.temperature,
            top_p=self.top_p,
            seeds=self.seeds,
            step=self.step_t,
            token_hash=self.token_hash,
        )
        self.out.index_copy_(1, self.step_t.view(1), tok.view(-1, 1))
        self.step_t += 1
        return tok

    def _step(self) -> None:
        """Feed the last sampled token of every branch, sample the next. Fixed shapes, no host
        read: the last token is read back from `out` on the device."""
        last = self.out.index_select(1, self.step_t.view(1) - 1)
        positions = (self.cache.suffix_len + self.prefix_len).view(-1, 1)
        self.logits.copy_(self.engine._forward(self.cache, last, positions))
        self._sample_into_out()

    def _run_step(self) -> None:
        if self._graph is not None:
            self._graph.replay()
        else:
            self._step()
        self.steps += 1

    def _maybe_capture(self) -> int:
        """On CUDA, capture the step once and replay it from then on. Returns the decode steps
        it ran (one real step on the capture stream first, as CUDA graphs want: it sets up the
        libraries' per-stream state outside the capture)."""
        import torch

        if not (self.engine.cuda_graph and self.logits.device.type == "cuda"):
            return 0
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            self._step()
        torch.cuda.current_stream().wait_stream(stream)
        if self.steps + 1 >= self.t_max:
            return 1
        try:
            graph = torch.cuda.CUDAGraph()
            # Capture records the kernels without running them. Everything a step changes
            # (the suffix lengths, the step counter, `out`, the states) is a device tensor
            # updated in place, so each replay advances the run by one step.
            with torch.cuda.graph(graph, stream=stream):
                self._step()
            torch.cuda.current_stream().wait_stream(stream)
        except Exception as e:  # noqa: BLE001 - any capture failure means: stay eager
            log.warning("decode step not captured as a CUDA graph, running eagerly: %s", e)
            self.graph = f"eager (capture failed: {type(e).__name__}: {str(e)[:200]})"
            self.engine.cuda_graph = False  # do not try again with this model
            return 1
        self._graph = graph
        self.graph = "cuda graph"
        return 1

    # -- host side -----------------------------------------------------------------------------

    def loop(self) -> None:
        eos = self.engine.eos_token_ids
        self._sample_into_out()  # the first token comes from the prefill's logits
        self.steps = 1
        warm = 2  # eager steps before a capture (first calls allocate and pick kernels)
        watching = bool(eos or self.on_tokens)
        while True:
            if watching and self.steps % self.engine.sync_every == 0:
                self._read()
            if self.steps >= self.t_max or not self.live:
                break
            if self._graph is None and self.steps == 1 + warm:
                ran = self._maybe_capture()
                if ran:
                    self.steps += ran
                    continue
            self._run_step()
        self._read(final=True)

    def _read(self, final: bool = False) -> None:
        """Copy the columns sampled since the last read to the host (N x sync_every ids, not
        whole lists), end branches on eos or length, hand new tokens to the callback."""
        if self.read_upto == self.steps:
            if final:
                self.live.clear()
            return
        cols = self.out[:, self.read_upto : self.steps].tolist()
        self.syncs += 1
        self.read_upto = self.steps
        eos = self.engine.eos_token_ids
        for b in sorted(self.live):
            new = cols[b]
            if eos:
                for i, tok in enumerate(new):
                    if tok in eos:
                        new = new[:i]
                        self.outputs[b].finish_reason = "stop"
                        self.live.discard(b)
                        break
            out = self.outputs[b]
            out.tokens.extend(new)
            if b in self.live and len(out.tokens) >= self.t_max:
                out.finish_reason = "length"
                self.live.discard(b)
            if new and self.on_tokens is not None and self.on_tokens(b, new):
                if b in self.live:
                    out.finish_reason = "cancelled"
                    self.live.discard(b)
        if final:
            self.live.clear()


def _sync(device: Any) -> None:
    import torch

    if getattr(device, "type", str(device)) == "cuda":
        torch.cuda.synchronize()
