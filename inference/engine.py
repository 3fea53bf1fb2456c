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
   replayed (eager elsewhere, same tokens). On a CPU, where a small model's step is per-op
   dispatch, the step is the decoder layers' arithmetic on their weights (`_DirectStep`:
   fused projections, rope from a table, states updated in place, one softmax per attention)
   instead of the model's forward: the same tokens, a step 2.5-4x faster on the tiny model
   (`python -m inference.bench --preset tiny` prints both). The host reads the new tokens
   only every `sync_every` steps: that is when eos, max_new_tokens and the callback's stop
   are seen and when streaming callbacks get the tokens that came since the last read.

Under greedy decoding the tokens equal N separate `model.generate` calls (tested on the tiny
qwen3_5_moe model). Branch i samples with seed + i: its text does not depend on N, on the
order of the branches or on siblings that stopped. torch is imported lazily."""

from __future__ import annotations

import logging
import time
import weakref
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
    # "direct step" (the decoder layers' arithmetic, `_DirectStep`) or "model forward"
    decode_path: str = "model forward"
    cache_bytes: dict[str, int] = field(default_factory=dict)

    @property
    def tokens_out(self) -> int:
        return sum(len(b.tokens) for b in self.branches)


class StepProfile:
    """Where the decode steps of a run spend their time: wall seconds per section, summed
    over the steps (`BranchingEngine.generate(profile=...)`). Sections end at `mark`; on CUDA
    each mark synchronizes first, so a profiled run is slower than a plain one (and runs
    eagerly: a CUDA graph has no sections). Off (None) costs nothing."""

    def __init__(self, device: Any = "cpu"):
        self.cuda = getattr(device, "type", str(device)).startswith("cuda")
        self.seconds: dict[str, float] = {}
        self.steps = 0
        self._t = 0.0

    def start(self) -> None:
        _sync("cuda" if self.cuda else "cpu")
        self._t = time.perf_counter()

    def mark(self, section: str) -> None:
        if self.cuda:
            _sync("cuda")
        now = time.perf_counter()
        self.seconds[section] = self.seconds.get(section, 0.0) + now - self._t
        self._t = now

    def total(self) -> float:
        return sum(self.seconds.values())

    def rows(self) -> list[tuple[str, float, float]]:
        """(section, ms per step, share of the step), largest first."""
        total = self.total() or 1.0
        steps = max(1, self.steps)
        return [
            (name, 1000 * sec / steps, sec / total)
            for name, sec in sorted(self.seconds.items(), key=lambda kv: -kv[1])
        ]


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
    default). `cuda_graph` captures the decode step on CUDA (eager if capture fails).
    `direct_step`: decode with `_DirectStep` instead of the model's forward (default: on a CPU
    with float32 weights)."""

    def __init__(
        self,
        model: Any,
        *,
        eos_token_ids: Iterable[int] = (),
        sync_every: int | None = None,
        prefill_chunk: int = PREFILL_CHUNK,
        cuda_graph: bool = True,
        direct_step: bool | None = None,
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
        # The decode step as the decoder layers' arithmetic (`_DirectStep`) rather than the
        # model's forward. Default: on a CPU in float32, where a step is dispatch-bound and the
        # tokens equal generate's (tested); a GPU replays the model's forward as a CUDA graph,
        # where per-op overhead is gone anyway. In bf16 its rounding differs from the forward's
        # enough to change greedy tokens after a few dozen, so it is not the default there.
        if direct_step is None:
            direct_step = self.device.type == "cpu" and _dtype_of(model) == "float32"
        self.direct_step = bool(direct_step) and direct_step_supported(model)
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
        profile: StepProfile | None = None,
    ) -> EngineOutput:
        """`seed`: branch i samples with seed + i (the N futures of one job). `seeds`: one
        seed per branch instead (a batch of rows of different episodes, each with the seed
        of its own step); a row's text depends on its seed alone, not on its batch.
        `profile`: a StepProfile that gets the decode steps' time per section."""
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
                profile=profile,
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
            decode_path=run.decode_path,
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
        profile: StepProfile | None = None,
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
        self.profile = profile
        self.direct = (
            _DirectStep(engine.model, cache, prefix_len, profile) if engine.direct_step else None
        )
        self.decode_path = "direct step" if self.direct is not None else "model forward"

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
        tm = self.profile
        if self.direct is not None:
            self.logits.copy_(self.direct(self.out[:, self.steps - 1]))
            self.cache.suffix_len += 1
            if tm:
                tm.mark("cache bookkeeping")
            self._sample_into_out()
            if tm:
                tm.mark("sampler")
            return
        last = self.out.index_select(1, self.step_t.view(1) - 1)
        positions = (self.cache.suffix_len + self.prefix_len).view(-1, 1)
        self.logits.copy_(self.engine._forward(self.cache, last, positions))
        if tm:
            tm.mark("model forward (all layers)")
        self._sample_into_out()
        if tm:
            tm.mark("sampler")

    def _run_step(self) -> None:
        if self._graph is not None:
            self._graph.replay()
        else:
            self._step()
        self.steps += 1
        if self.profile is not None:
            self.profile.steps += 1

    def _maybe_capture(self) -> int:
        """On CUDA, capture the step once and replay it from then on. Returns the decode steps
        it ran (one real step on the capture stream first, as CUDA graphs want: it sets up the
        libraries' per-stream state outside the capture)."""
        import torch

        if (
            self.direct is not None
            or self.profile is not None
            or not (self.engine.cuda_graph and self.logits.device.type == "cuda")
        ):
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
        tm = self.profile
        if tm:
            tm.start()
        while True:
            if watching and self.steps % self.engine.sync_every == 0:
                self._read()
                if tm:
                    tm.mark("host reads")
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


class _DirectStep:
    """The decode step of a qwen3_5_moe model without the model's forward: the decoder layers'
    arithmetic on their own weights, one token per branch row, for the engine's cache.

    Why: at a small size a decode step is mostly per-op dispatch, and the model's forward pays
    for much that a one-token step of the engine does not need (the decorators and output
    records of every module, mask and rope construction each step, a convolution kernel for a
    4-tap filter, the linear-attention state copied back into the cache, dtype casts that are
    no-ops in float32, the router and shared expert as separate products, a sort-and-group of
    the expert assignments for three tokens). Here: the products that read the same input are
    one matrix product (weights concatenated once per model), rope comes from a table made
    once per run, the conv and recurrent states are updated in place in the cache, attention
    is one softmax over [prefix | suffix] scores, and with few experts (at most 4 x top-k) all
    experts run densely on all rows in two batched products, the unrouted ones weighted 0.
    Same arithmetic as the model's decode path up to float rounding; the tests and the bench
    check that greedy tokens equal `model.generate`'s. With many experts the model's own
    experts module runs (its configured implementation: grouped_mm, batched_mm, ...)."""

    def __init__(
        self,
        model: Any,
        cache: SharedPrefixCache,
        prefix_len: int,
        profile: StepProfile | None = None,
    ):
        import torch

        self.torch = torch
        self.profile = profile
        self.cache = cache
        self.prefix_len = prefix_len
        self.weights = _direct_weights(model)
        w = self.weights
        dev = cache.suffix_len.device
        n, s = cache.n_rows, cache.suffix_capacity
        self.rows = cache._all_rows
        # Additive suffix mask: 0 where a row has a token, -inf elsewhere; the step opens the
        # slot it writes (in place: fixed address).
        self.mask = torch.full((n, 1, 1, s), float("-inf"), dtype=torch.float32, device=dev)
        cols = torch.arange(s, device=dev).view(1, s)
        self.mask.view(n, s).masked_fill_(cols < cache.suffix_len.view(n, 1), 0.0)
        self.mask_rows = self.mask.view(n, s)
        # rope for every position this run can reach, computed by the model's rotary module
        # (positions as floats times the inverse frequencies, cos/sin, scaling)
        positions = torch.arange(prefix_len + s, device=dev).view(1, -1)
        cos, sin = model.model.rotary_emb(w.dtype_probe, positions)
        self.cos, self.sin = cos[0], sin[0]  # [positions, rotary dim]
        decode = cache._states["decode"]
        self.states = [(decode["conv"].get(lw.idx), decode["rec"].get(lw.idx)) for lw in w.layers]
        self.prefix = [
            (cache.prefix_k[lw.idx][0, :, :prefix_len], cache.prefix_v[lw.idx][0, :, :prefix_len])
            if prefix_len and lw.kind == "full_attention"
            else (None, None)
            for lw in w.layers
        ]

    def __call__(self, tok):
        """Logits [N, vocab] of the next token after `tok` ([N] long) for every branch row."""
        torch = self.torch
        w, cache, tm = self.weights, self.cache, self.profile
        pos = cache.suffix_len + self.prefix_len
        h = w.embed[tok]
        cos = self.cos[pos].unsqueeze(1)
        sin = self.sin[pos].unsqueeze(1)
        if tm:
            tm.mark("embedding + rope table")
        for lw, (conv, rec), (pk, pv) in zip(w.layers, self.states, self.prefix, strict=True):
            x = _rms(h, lw.in_norm, w.eps, w.fp32)
            if tm:
                tm.mark("norms")
            if lw.kind == "linear_attention":
                h = self._linear_attention(h, x, lw, conv, rec)
                if tm:
                    tm.mark("linear attention (recurrent layers)")
            else:
                h = self._full_attention(h, x, lw, cos, sin, pk, pv)
                if tm:
                    tm.mark("full attention (prefix + suffix KV)")
            x = _rms(h, lw.post_norm, w.eps, w.fp32)
            if tm:
                tm.mark("norms")
            h = self._moe(h, x, lw, tm)
        logits = torch.mm(_rms(h, w.final_norm, w.eps, w.fp32), w.lm_head_t)
        if tm:
            tm.mark("final norm + lm head")
        return logits

    def _linear_attention(self, h, x, lw, conv_state, rec_state):
        torch = self.torch
        F = torch.nn.functional
        fp32 = self.weights.fp32
        n = x.shape[0]
        hk, g, dk, dv = lw.hk, lw.group, lw.dk, lw.dv
        proj = torch.mm(x, lw.in_proj_t)  # [qkv | z | b | a]
        c = lw.conv_dim
        # the causal conv over [kept columns | this token]: the state shifted in place
        window = torch.cat([conv_state[..., 1:], proj[:, :c].unsqueeze(-1)], dim=-1)
        conv_state.copy_(window)
        mixed = F.silu((window * lw.conv_w).sum(-1))
        if not fp32:
            mixed = mixed.to(x.dtype)
        qk = mixed[:, : 2 * lw.key_dim].view(n, 2, hk, dk)
        zba = proj[:, c:]
        if not fp32:
            qk, zba = qk.float(), zba.float()
        qk = qk * torch.rsqrt((qk * qk).sum(-1, keepdim=True) + 1e-6)  # l2norm of q and k
        q = qk[:, 0] / lw.sqrt_dk
        k = qk[:, 1].view(n, hk, 1, dk, 1)
        v = mixed[:, 2 * lw.key_dim :].view(n, hk, g, dv)
        vd = lw.value_dim
        beta = torch.sigmoid(proj[:, c + vd : c + vd + lw.hv]).view(n, hk, g, 1)
        decay = torch.exp(lw.neg_a * F.softplus(zba[:, vd + lw.hv :] + lw.dt_bias))
        if not fp32:
            v, beta = v.float(), beta.float()
        # gated delta rule, one token: the recurrent state (in the cache) updated in place
        state = rec_state.view(n, hk, g, dk, dv)
        state.mul_(decay.view(n, hk, g, 1, 1))
        delta = (v - (state * k).sum(-2)) * beta
        state.add_(k * delta.unsqueeze(-2))
        out = (state * q.view(n, hk, 1, dk, 1)).sum(-2).view(n * lw.hv, dv)  # [N*Hv, Dv]
        # gated RMS norm per value head, then the output projection onto the residual
        z = zba[:, :vd].reshape(n * lw.hv, dv)
        if fp32:
            normed = lw.norm_w * (out * torch.rsqrt(out.pow(2).mean(-1, keepdim=True) + lw.eps))
            gated = normed * F.silu(z)
        else:
            out = out.to(x.dtype).float()
            normed = out * torch.rsqrt(out.pow(2).mean(-1, keepdim=True) + lw.eps)
            gated = ((lw.norm_w * normed.to(x.dtype)) * F.silu(z)).to(x.dtype)
        return torch.addmm(h, gated.view(n, vd), lw.out_proj_t)

    def _full_attention(self, h, x, lw, cos, sin, pk, pv):
        torch = self.torch
        fp32 = self.weights.fp32
        n = x.shape[0]
        cache = self.cache
        hq, hkv, d, r = lw.hq, lw.hkv, lw.head_dim, lw.rot
        proj = torch.mm(x, lw.in_proj_t)  # [q, gate per head | k | v]
        qg = proj[:, : hq * 2 * d].view(n, hq, 2 * d)
        # q_norm and k_norm in one pass: the heads side by side, each with its norm's weight
        qk = _rms(
            torch.cat(
                [qg[..., :d], proj[:, hq * 2 * d : (hq + hkv) * d + hq * d].view(n, hkv, d)], 1
            ),
            lw.qk_norm,
            self.weights.eps,
            fp32,
        )
        # rope on the first r dims: x*cos + rotate_half(x)*sin, rotate_half as an exact signed
        # permutation product
        rot = qk[..., :r]
        roped = rot * cos + torch.matmul(rot, lw.rotate) * sin
        if r < d:
            qk = torch.cat([roped, qk[..., r:]], dim=-1)
        else:
            qk = roped
        keys, values = cache.suffix_k[lw.idx], cache.suffix_v[lw.idx]
        slot = cache.suffix_len
        keys[self.rows, :, slot] = qk[:, hq:]
        values[self.rows, :, slot] = proj[:, (hq + hkv) * d + hq * d :].view(n, hkv, d)
        self.mask_rows[self.rows, slot] = 0.0
        g = hq // hkv
        qs = qk[:, :hq].reshape(n, hkv, g, d)
        scores = torch.matmul(qs, keys.transpose(-1, -2))
        if not fp32:
            scores = scores.float()
        scores = scores * lw.scaling + self.mask
        if pk is not None:
            p = pk.shape[-2]
            qp = qs.transpose(0, 1).reshape(hkv, n * g, d)
            sp = torch.matmul(qp, pk.transpose(-1, -2))
            if not fp32:
                sp = sp.float()
            sp = (sp * lw.scaling).view(hkv, n, g, p).transpose(0, 1)
            probs = torch.softmax(torch.cat([sp, scores], dim=-1), dim=-1)
            if not fp32:
                probs = probs.to(values.dtype)
            pp = probs[..., :p].transpose(0, 1).reshape(hkv, n * g, p)
            out = torch.matmul(pp, pv).view(hkv, n, g, d).transpose(0, 1)
            out = out + torch.matmul(probs[..., p:], values)
        else:
            probs = torch.softmax(scores, dim=-1)
            if not fp32:
                probs = probs.to(values.dtype)
            out = torch.matmul(probs, values)
        out = out.reshape(n, hq * d)
        if not fp32:
            out = out.to(x.dtype)
        out = out * torch.sigmoid(qg[..., d:].reshape(n, hq * d))
        return torch.addmm(h, out, lw.o_proj_t)

    def _moe(self, h, x, lw, tm):
        torch = self.torch
        F = torch.nn.functional
        # router | shared expert's gate | its up | the shared expert's output gate
        proj = torch.mm(x, lw.moe_in_t)
        e, i = lw.n_experts, lw.shared_dim
        probs = torch.softmax(proj[:, :e], dtype=torch.float, dim=-1)
        top, idx = torch.topk(probs, lw.top_k, dim=-1)
        top = top / top.sum(dim=-1, keepdim=True)
        if not self.weights.fp32:
            top = top.to(x.dtype)
        if tm:
            tm.mark("MoE router")
        if lw.dense_experts:
            # every expert on every row ([E, N, .] batched products), unrouted ones weighted 0
            gate_up = torch.matmul(x, lw.gate_up_t)  # [E, N, 2I]
            act = F.silu(gate_up[..., : lw.expert_dim]) * gate_up[..., lw.expert_dim :]
            y = torch.bmm(act, lw.down_t)  # [E, N, H]
            weights = top.new_zeros(probs.shape).scatter_(1, idx, top)  # [N, E]
            routed = (y * weights.t().unsqueeze(-1)).sum(0)
        else:
            routed = lw.experts(x, idx, top)
        if tm:
            tm.mark("MoE routed experts")
        shared = F.silu(proj[:, e : e + i]) * proj[:, e + i : e + 2 * i]
        shared = torch.mm(shared, lw.shared_down_t) * torch.sigmoid(proj[:, -1:])
        out = h + (routed + shared)
        if tm:
            tm.mark("MoE shared expert")
        return out


def _rms(x, weight_plus_one, eps, fp32=False):
    """Qwen3.5's zero-centred RMSNorm: x / rms(x) * (1 + weight), in float32."""
    import torch

    xf = x if fp32 else x.float()
    out = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * weight_plus_one
    return out if fp32 else out.to(x.dtype)


class _LayerWeights:
    """One decoder layer's weights as the direct step reads them (attributes by name)."""

    def __init__(self, idx: int, kind: str, in_norm: Any, post_norm: Any, **values: Any):
        self.idx, self.kind, self.in_norm, self.post_norm = idx, kind, in_norm, post_norm
        self.__dict__.update(values)

    def __getattr__(self, name: str) -> Any:  # for the type checker: values set in __init__
        raise AttributeError(name)


@dataclass
class _ModelWeights:
    embed: Any
    lm_head_t: Any
    final_norm: Any
    eps: float
    fp32: bool
    dtype_probe: Any
    layers: list[_LayerWeights]


# model -> (stamp of its parameters, the weights prepared from them); weak: no model pinned
_DIRECT_CACHE: weakref.WeakKeyDictionary[Any, tuple[tuple, _ModelWeights]] = (
    weakref.WeakKeyDictionary()
)
DENSE_EXPERTS_FACTOR = 4  # run all experts densely when there are at most this x top-k


def direct_step_supported(model: Any) -> bool:
    """Whether `_DirectStep` knows this model's layers (qwen3_5_moe text decoders)."""
    inner = getattr(model, "model", None)
    layers = getattr(inner, "layers", None)
    if layers is None or not hasattr(model, "lm_head") or not hasattr(inner, "rotary_emb"):
        return False
    cfg = model.config
    if not str(getattr(cfg, "model_type", "")).startswith("qwen3_5_moe"):
        return False
    if cfg.rope_parameters.get("rope_type", "default") != "default":
        return False
    for layer in layers:
        mlp = getattr(layer, "mlp", None)
        if not all(hasattr(mlp, a) for a in ("gate", "experts", "shared_expert")):
            return False
        if not (hasattr(layer, "linear_attn") or hasattr(layer, "self_attn")):
            return False
    return True


def _dtype_of(model: Any) -> str:
    weight = getattr(getattr(model, "lm_head", None), "weight", None)
    return str(getattr(weight, "dtype", "")).removeprefix("torch.")


def _version(tensor: Any) -> int:
    try:
        return tensor._version
    except RuntimeError:  # an inference-mode tensor keeps no version counter (nor changes)
        return -1


def _direct_weights(model: Any) -> _ModelWeights:
    """The weights the direct step reads, prepared once per model: the products that share an
    input concatenated and transposed for mm/addmm, norms as (1 + weight)."""
    import torch

    # The concatenated copies are remade when a parameter was replaced, moved or written in
    # place (load_state_dict, an optimizer step: the tensor's version counter moves).
    stamp = tuple((p.data_ptr(), _version(p)) for p in model.parameters())
    hit = _DIRECT_CACHE.get(model)
    if hit is not None and hit[0] == stamp:
        return hit[1]
    inner = model.model
    dtype = model.lm_head.weight.dtype
    dev = model.lm_head.weight.device
    cfg = model.config

    def plus_one(norm):
        return 1.0 + norm.weight.detach().float()

    def cat_t(*linears):
        return torch.cat([m.weight.detach() for m in linears]).t().contiguous()

    layers = []
    with torch.no_grad():
        for i, layer in enumerate(inner.layers):
            kind = cfg.layer_types[i]
            mlp = layer.mlp
            experts = mlp.experts
            e, top_k = mlp.gate.weight.shape[0], mlp.gate.top_k
            dense = e <= DENSE_EXPERTS_FACTOR * top_k and hasattr(experts, "gate_up_proj")
            vals: dict[str, Any] = {
                "experts": experts,
                "n_experts": e,
                "top_k": top_k,
                "shared_dim": mlp.shared_expert.gate_proj.weight.shape[0],
                "moe_in_t": torch.cat(
                    [
                        mlp.gate.weight.detach(),
                        mlp.shared_expert.gate_proj.weight.detach(),
                        mlp.shared_expert.up_proj.weight.detach(),
                        mlp.shared_expert_gate.weight.detach(),
                    ]
                )
                .t()
                .contiguous(),
                "shared_down_t": mlp.shared_expert.down_proj.weight.detach().t(),
                "dense_experts": dense,
            }
            if dense:
                transposed = getattr(experts, "is_transposed", False)
                gu, down = experts.gate_up_proj.detach(), experts.down_proj.detach()
                vals.update(
                    gate_up_t=gu if transposed else gu.transpose(1, 2),  # [E, H, 2I]
                    down_t=down if transposed else down.transpose(1, 2),  # [E, I, H]
                    expert_dim=(gu.shape[-1] if transposed else gu.shape[1]) // 2,
                )
            if kind == "linear_attention":
                la = layer.linear_attn
                vals.update(
                    in_proj_t=cat_t(la.in_proj_qkv, la.in_proj_z, la.in_proj_b, la.in_proj_a),
                    conv_dim=la.conv_dim,
                    key_dim=la.key_dim,
                    value_dim=la.value_dim,
                    hk=la.num_k_heads,
                    hv=la.num_v_heads,
                    group=la.num_v_heads // la.num_k_heads,
                    dk=la.head_k_dim,
                    dv=la.head_v_dim,
                    sqrt_dk=la.head_k_dim**0.5,
                    conv_w=la.conv1d.weight.detach()[:, 0, :],
                    neg_a=-la.A_log.detach().float().exp(),
                    dt_bias=la.dt_bias.detach(),
                    norm_w=la.norm.weight.detach(),
                    eps=la.norm.variance_epsilon,
                    out_proj_t=la.out_proj.weight.detach().t(),
                )
            else:
                sa = layer.self_attn
                d = sa.head_dim
                hq, hkv = cfg.num_attention_heads, cfg.num_key_value_heads
                rot = inner.rotary_emb.inv_freq.shape[0] * 2
                half = rot // 2
                rotate = torch.zeros(rot, rot, dtype=dtype, device=dev)
                # rotate_half(x) = cat(-x[half:], x[:half]) = x @ rotate
                rotate[torch.arange(half, rot), torch.arange(half)] = -1.0
                rotate[torch.arange(half), torch.arange(half, rot)] = 1.0
                vals.update(
                    in_proj_t=cat_t(sa.q_proj, sa.k_proj, sa.v_proj),
                    hq=hq,
                    hkv=hkv,
                    head_dim=d,
                    scaling=sa.scaling,
                    rot=rot,
                    rotate=rotate,
                    qk_norm=torch.cat(
                        [plus_one(sa.q_norm).expand(hq, d), plus_one(sa.k_norm).expand(hkv, d)]
                    ),
                    o_proj_t=sa.o_proj.weight.detach().t(),
                )
            layers.append(
                _LayerWeights(
                    i,
                    kind,
                    plus_one(layer.input_layernorm),
                    plus_one(layer.post_attention_layernorm),
                    **vals,
                )
            )
        weights = _ModelWeights(
            embed=inner.embed_tokens.weight.detach(),
            lm_head_t=model.lm_head.weight.detach().t(),
            final_norm=plus_one(inner.norm),
            eps=inner.norm.eps,
            fp32=dtype == torch.float32,
            dtype_probe=torch.zeros(1, dtype=dtype, device=dev),
            layers=layers,
        )
    _DIRECT_CACHE[model] = (stamp, weights)
    return weights
