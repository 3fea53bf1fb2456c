"""Benchmark of the branching engine against the ways one would do without it: the same model,
the same inputs, greedy, no eos stop.

    python -m inference.bench --preset tiny                       # CPU, 2-3 minutes
    python -m inference.bench --preset qwen3.5-35b-a3b --device cuda
    python -m inference.bench --preset qwen3.5-35b-a3b-100k --device cuda   # memory goal
    python -m inference.bench --plan --preset qwen3.5-35b-a3b-100k          # arithmetic only
    python -m inference.bench --sides served --url http://host:8000/v1 --model NAME

Sides (`--sides`):
  naive    `model.generate` once per branch (batch 1): the prefix is computed N times;
  batched  ONE `model.generate` over the N prompts, left-padded with an attention mask:
           batching without prefix sharing (N copies of the prefix's KV);
  engine   `BranchingEngine.generate`: the prefix once, the branches decoded in one batch;
  served   an OpenAI-compatible server (`--url`, vLLM/SGLang): the same token ids on
           /v1/completions, one request with n=N for identical suffixes, N concurrent requests
           for differing ones (the server has its own weights: outputs are not compared).
Inputs (`--suffix`): `identical` = N copies of one P-token prompt; `differing` = the P-token
prefix plus a different suffix per branch (8 to 32 random tokens, lengths spread so padding is
exercised). For each T (`--new-tokens`, default 16,256,1024) and mode, one line per side with
tokens/s, wall time, peak memory and whether its greedy tokens equal naive's, then
`speedup: X.XXx over naive` and `speedup: X.XXx over batched` (the engine's wall time against
theirs) with how each was formed, a `prefix saving:` line (prompt tokens each side ran, the
prefix KV held once against a copy per branch, the engine's prefill time), and a summary at the
end. With `--profile` (on for the tiny presets) the largest T of each mode also prints where
the engine's decode step spends its time: a table of ms per step and share by section
(attention, recurrent layers, MoE router / routed experts / shared expert, norms, lm head,
sampler, cache bookkeeping, host reads) from one extra untimed run with timers, and the step
time of the model's forward for comparison. Exit code 1 if the engine's tokens differ from
naive's.

Every side runs once outside the timed region first (first calls allocate, pick kernels, JIT
Triton kernels on a GPU). The timed runs come in rounds that run every side in turn (naive,
batched, engine, naive, ...; naive only in the first `--naive-repeat` rounds), `--repeat`
rounds, or for the tiny presets more (up to 15) while a case's runs took under 2 s in all: on a
shared machine load then falls on the sides alike. A side's time is its best run; a speedup is
the median of the per-round ratios (one naive run: against the engine's median). Peak memory
is measured in the first `--repeat` rounds: on CUDA
`torch.cuda.max_memory_allocated()` during the side minus what was allocated just before it
(the weights); on a CPU the process's peak RSS during the side (the kernel's high-water mark,
reset before it; or RSS sampled every 2 ms by a thread where that cannot be reset) minus the
RSS just before it.

Models have random weights built from a config (no download): `tiny` is a shrunk qwen3_5_moe
for a CPU (P=512, N=3; hidden 64, one linear- and one full-attention layer, 4 experts with 2
active and a shared expert: 0.2M parameters), followed (unless --prompt-tokens or
--new-tokens is given) by `tiny-long`, the same model with P=4096 and T=16,256, where computing
the shared prefix once shows; `qwen3.5-35b-a3b` is the full Qwen3.5-35B-A3B text
architecture (40 layers, 256 experts) in bf16 for a GPU; `qwen3.5-35b-a3b-100k` is the same with
P=100,000 and N=64, engine only (batched `generate` would need 64 copies of the prefix KV,
190 GiB; naive would prefill 100K tokens 64 times). The memory plan of the run
(`inference.memory`: weights, prefix KV once, per-branch state and suffix KV) is printed first."""

from __future__ import annotations

import argparse
import ctypes
import gc
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

SIDES = ("naive", "batched", "engine", "served")
SUFFIX_MODES = ("identical", "differing")
WARM_PREFIX = 4096  # prompt tokens of the untimed warm-up runs, at most


@dataclass(frozen=True)
class Preset:
    name: str
    prompt_tokens: int  # P
    branches: int  # N
    new_tokens: tuple[int, ...]  # the T values
    repeat: int  # timed runs of each side, best kept
    sides: tuple[str, ...] = ("naive", "batched", "engine")
    suffixes: tuple[str, ...] = SUFFIX_MODES
    suffix_tokens: tuple[int, int] = (8, 32)  # shortest and longest differing suffix
    gpu: bool = False  # bf16 on a GPU (the plan assumes 2-byte weights without --device)
    naive_repeat: int | None = None  # rounds naive runs in (None: every round)
    # more rounds for short cases: up to max_rounds while a case's rounds took < min_seconds
    min_seconds: float = 0.0
    max_rounds: int = 0
    profile: bool = False  # print the engine's decode-step profile (at the largest T)
    follow: tuple[str, ...] = ()  # presets whose cases run after this one's, on the same model


PRESETS = {
    # CPU: the whole default run (3 sides x 2 modes x T of 16, 256, 1024) in under a minute on
    # 2 cores. A decode step of the tiny model is ~3 ms of fixed overhead whatever the batch, and
    # naive decoding makes N x 1296 of them per mode (batched and the engine 1296 each): N=3.
    "tiny": Preset(
        "tiny",
        prompt_tokens=512,
        branches=3,
        new_tokens=(16, 256, 1024),
        repeat=3,
        naive_repeat=1,
        min_seconds=2.0,
        max_rounds=15,
        profile=True,
        follow=("tiny-long",),
    ),
    # The same tiny model with a longer shared prefix: what computing it once saves (prefill
    # tokens, the prefix KV held once, time). Run by `--preset tiny` after its own cases.
    "tiny-long": Preset(
        "tiny-long",
        prompt_tokens=4096,
        branches=3,
        new_tokens=(16, 256),
        repeat=3,
        naive_repeat=1,
        min_seconds=2.0,
        max_rounds=15,
        profile=True,
    ),
    "qwen3.5-35b-a3b": Preset(
        "qwen3.5-35b-a3b", prompt_tokens=4096, branches=16, new_tokens=(64,), repeat=1, gpu=True
    ),
    "qwen3.5-35b-a3b-100k": Preset(
        "qwen3.5-35b-a3b-100k",
        prompt_tokens=100_000,
        branches=64,
        new_tokens=(64,),
        repeat=1,
        sides=("engine",),
        gpu=True,
    ),
}


def preset_config(name: str):
    """The model config of a preset (transformers `Qwen3_5MoeTextConfig`)."""
    from transformers import Qwen3_5MoeTextConfig

    from inference.tiny import tiny_config

    if name in ("tiny", "tiny-long"):
        # The tiny test architecture (hidden 64, 4 experts with 2 active, a shared expert) cut to
        # one linear-attention and one full-attention layer: a CPU decode step is mostly fixed
        # per-layer overhead, and the hybrid cache (recurrent state + KV) is all still there.
        cfg = tiny_config(640, eos_token_id=2, pad_token_id=0)
        cfg.num_hidden_layers = 2
        cfg.layer_types = ["linear_attention", "full_attention"]
        return cfg
    if name in ("qwen3.5-35b-a3b", "qwen3.5-35b-a3b-100k"):
        # Qwen3.5-35B-A3B text model: hybrid 3 linear-attention : 1 full-attention layers.
        return Qwen3_5MoeTextConfig(
            vocab_size=248320,
            hidden_size=2048,
            num_hidden_layers=40,
            num_attention_heads=16,
            num_key_value_heads=2,
            head_dim=256,
            linear_conv_kernel_dim=4,
            linear_key_head_dim=128,
            linear_value_head_dim=128,
            linear_num_key_heads=16,
            linear_num_value_heads=32,
            moe_intermediate_size=512,
            shared_expert_intermediate_size=512,
            num_experts=256,
            num_experts_per_tok=8,
            max_position_embeddings=262144,
            rope_parameters={
                "rope_type": "default",
                "rope_theta": 10_000_000.0,
                "partial_rotary_factor": 0.25,
                "mrope_section": [11, 11, 10],
                "mrope_interleaved": True,
            },
            eos_token_id=248046,
            pad_token_id=248044,
        )
    raise ValueError(f"unknown preset {name!r}; choose from {', '.join(PRESETS)}")


def build_model(name: str, device: str):
    """Random-weight model of the preset on `device` (bf16 on CUDA, float32 elsewhere)."""
    import torch
    from transformers import Qwen3_5MoeForCausalLM

    cfg = preset_config(name)
    dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    torch.manual_seed(0)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            model = Qwen3_5MoeForCausalLM(cfg)
    finally:
        torch.set_default_dtype(previous)
    return model.to(dtype).eval()  # type: ignore[arg-type]


# -- inputs ------------------------------------------------------------------------------------


def make_inputs(
    vocab: int, p: int, n: int, mode: str, suffix_tokens: tuple[int, int] = (8, 32)
) -> list[list[int]]:
    """The N prompts of a mode: the same P-token prompt N times, or that prompt plus a random
    suffix per branch, of lengths spread over `suffix_tokens` (seeded: the same every run)."""
    import torch

    gen = torch.Generator().manual_seed(0)
    prompt = torch.randint(3, vocab, (p,), generator=gen).tolist()
    if mode == "identical":
        return [list(prompt) for _ in range(n)]
    if mode != "differing":
        raise ValueError(f"unknown suffix mode {mode!r}; choose from {', '.join(SUFFIX_MODES)}")
    lo, hi = suffix_tokens
    gen = torch.Generator().manual_seed(1)
    out = []
    for i in range(n):
        length = lo + (i * (hi - lo)) // max(1, n - 1)
        out.append(prompt + torch.randint(3, vocab, (length,), generator=gen).tolist())
    return out


def suffix_length(branches: Sequence[Sequence[int]], p: int) -> int:
    return max(len(b) for b in branches) - p


# -- peak memory -------------------------------------------------------------------------------


class PeakMemory:
    """Peak memory of a block above what it started with. CUDA: the allocator's peak. CPU: the
    kernel's high-water mark of the process RSS (VmHWM), reset at the start of the block through
    /proc/self/clear_refs; where that cannot be written, the RSS sampled by a thread every
    `interval_s` (which costs the block some time: the sampler takes the GIL)."""

    def __init__(self, device: str, interval_s: float = 0.002):
        self.cuda = device.startswith("cuda")
        self.interval_s = interval_s
        self.peak = 0
        self.base = 0
        self._stop = threading.Event()
        self._sampled = threading.Event()
        self._thread: threading.Thread | None = None

    @staticmethod
    def describe(device: str) -> str:
        if device.startswith("cuda"):
            return (
                "peak memory = torch.cuda.max_memory_allocated() during the side minus what was "
                "allocated just before it (the weights)"
            )
        if _reset_hwm():
            return (
                "peak memory = the process's peak RSS during the side (kernel high-water mark "
                "VmHWM, reset before it) minus the RSS just before it (CPU)"
            )
        return (
            "peak memory = process RSS (/proc/self/statm) sampled every 2 ms during the side, "
            "peak minus the RSS just before it (CPU)"
        )

    def _sample(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, _rss() - self.base)
            self._sampled.set()
            self._stop.wait(self.interval_s)

    def wait_for_sample(self, timeout_s: float = 5.0) -> None:
        """Return once the sampling thread has read the RSS after this call (at once when
        the kernel's high-water mark is used: it sees every allocation by itself)."""
        if self._thread is None:
            return
        # Two signals: the first may come from a read begun before this call; the second's
        # read began after the first signal, so after this call.
        for _ in range(2):
            self._sampled.clear()
            if not self._sampled.wait(timeout_s):
                raise TimeoutError(f"the RSS sampler took no sample in {timeout_s} s")

    def __enter__(self) -> PeakMemory:
        gc.collect()
        if self.cuda:
            import torch

            torch.cuda.synchronize()
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
            self.base = torch.cuda.memory_allocated()
            return self
        _malloc_trim()
        self.base = _rss()
        if not _reset_hwm():
            self._thread = threading.Thread(target=self._sample, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.cuda:
            import torch

            torch.cuda.synchronize()
            self.peak = torch.cuda.max_memory_allocated() - self.base
            return
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self.peak = max(self.peak, _rss() - self.base)
        else:
            self.peak = max(0, _hwm() - self.base)


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _hwm() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise OSError("no VmHWM in /proc/self/status")


def _reset_hwm() -> bool:
    """Reset the kernel's peak-RSS mark to the current RSS (Linux >= 4.0); False if not here."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        _hwm()
    except OSError:
        return False
    return True


def _malloc_trim() -> None:
    """Give freed heap back to the OS (glibc), so an earlier side's freed memory does not hide
    the next side's growth in the RSS."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


# -- sides -------------------------------------------------------------------------------------


@dataclass
class SideResult:
    side: str
    seconds: float
    tokens: int
    peak_bytes: int | None
    outputs: list[list[int]] | None  # None: not comparable (served)
    prompt_tokens_computed: int | None = None
    detail: str = ""
    prefill_s: float | None = None  # the engine's
    decode_s: float | None = None
    decode_steps: int = 0


def _sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _greedy(model, ids, mask, t: int):
    """`model.generate`, greedy, exactly t new tokens (no eos stop), as every side decodes."""
    return model.generate(
        ids,
        attention_mask=mask,
        max_new_tokens=t,
        min_new_tokens=t,
        do_sample=False,
        eos_token_id=None,
        pad_token_id=model.config.pad_token_id or 0,
    )


def run_naive(model, branches: Sequence[Sequence[int]], t: int, device: str):
    """`model.generate` once per branch, batch 1."""
    import torch

    outs = []
    with torch.inference_mode():
        for b in branches:
            ids = torch.tensor([list(b)], device=device)
            out = _greedy(model, ids, torch.ones_like(ids), t)
            outs.append(out[0, len(b) :].tolist())
    _sync(device)
    return outs, sum(len(b) for b in branches)


def run_batched(model, branches: Sequence[Sequence[int]], t: int, device: str):
    """ONE `model.generate` over all branches, left-padded: batching without prefix sharing."""
    import torch

    pad = model.config.pad_token_id or 0
    width = max(len(b) for b in branches)
    ids = torch.full((len(branches), width), pad, dtype=torch.long)
    mask = torch.zeros((len(branches), width), dtype=torch.long)
    for i, b in enumerate(branches):
        ids[i, width - len(b) :] = torch.tensor(list(b))
        mask[i, width - len(b) :] = 1
    with torch.inference_mode():
        out = _greedy(model, ids.to(device), mask.to(device), t)
    _sync(device)
    return out[:, width:].tolist(), len(branches) * width


def run_engine(model, branches: Sequence[Sequence[int]], t: int, device: str):
    from inference.engine import BranchingEngine

    result = BranchingEngine(model, eos_token_ids=()).generate(
        [list(b) for b in branches], max_new_tokens=t, temperature=0.0
    )
    _sync(device)
    return result


def run_served(
    url: str, model_name: str, branches: Sequence[Sequence[int]], t: int
) -> tuple[int, float]:
    """The served path: the same token ids on /v1/completions (greedy, `min_tokens` and
    `ignore_eos` so each branch decodes T tokens on vLLM/SGLang). One request with n=N when all
    prompts are equal, else one request per branch, all in flight at once. Returns (completion
    tokens the server reports, wall seconds)."""
    from concurrent.futures import ThreadPoolExecutor

    from inference.backends.errors import BackendError
    from inference.backends.openai_compat import OpenAIBackend

    backend = OpenAIBackend(model=model_name, base_url=url, concurrency=len(branches))
    name = backend.model

    def request(prompt: Sequence[int], n: int) -> int:
        def call():
            return backend.client.completions.create(
                model=name,
                prompt=list(prompt),
                n=n,
                max_tokens=t,
                temperature=0.0,
                extra_body={"min_tokens": t, "ignore_eos": True},
            )

        resp = backend._with_retries(call, "POST /completions")
        if len(resp.choices) != n:
            raise BackendError(f"{url}/completions returned {len(resp.choices)} choices, not {n}")
        return resp.usage.completion_tokens if resp.usage else n * t

    start = time.perf_counter()
    if all(list(b) == list(branches[0]) for b in branches):
        tokens = request(branches[0], len(branches))
    else:
        with ThreadPoolExecutor(max_workers=len(branches)) as pool:
            tokens = sum(pool.map(lambda b: request(b, 1), branches))
    return tokens, time.perf_counter() - start


def measure(run: Callable[[], SideResult], device: str, repeat: int) -> SideResult:
    """Best of `repeat` timed runs of one side; peak memory is the largest over them."""
    return best_of(measure_rounds({"side": run}, device, repeat)["side"])


def measure_rounds(
    runs: dict[str, Callable[[], SideResult]],
    device: str,
    repeat: int,
    limit: dict[str, int] | None = None,
    min_seconds: float = 0.0,
    max_rounds: int = 0,
) -> dict[str, list[SideResult]]:
    """Rounds of timed runs, each running every side once in turn (A B A B ...), so that load
    on a shared machine falls on all sides alike rather than on whichever ran during it: at
    least `repeat` rounds, and more (up to `max_rounds`) while the runs so far took less
    than `min_seconds` in all (short cases get more rounds; noise shrinks, the run stays
    short). `limit` caps a side's rounds (naive, many times slower, in the first round only).
    A result's peak_bytes is its own run's peak in the first `repeat` rounds, 0 (not
    measured) in the extra ones; `best_of` reports the largest."""
    limit = limit or {}
    out: dict[str, list[SideResult]] = {side: [] for side in runs}
    timed = 0.0  # the runs' own seconds (not the memory bookkeeping between them)
    r = 0
    while r < repeat or (r < max_rounds and timed < min_seconds):
        for side, run in runs.items():
            if r >= limit.get(side, max(repeat, max_rounds)):
                continue
            if r < repeat:
                with PeakMemory(device) as mem:
                    res = run()
                if res.peak_bytes is not None:
                    res.peak_bytes = mem.peak
            else:  # the extra rounds skip the memory bookkeeping (a gc pass, ~0.5 s each)
                res = run()
            out[side].append(res)
            timed += res.seconds
        r += 1
    return out


def best_of(results: list[SideResult]) -> SideResult:
    """The fastest run, with the largest peak memory of all the runs."""
    best = min(results, key=lambda r: r.seconds)
    peaks = [r.peak_bytes for r in results if r.peak_bytes is not None]
    if best.peak_bytes is not None and peaks:
        best.peak_bytes = max(peaks)
    return best


def speedup(other: list[SideResult], engine: list[SideResult]) -> tuple[float, str]:
    """(the engine's speedup over `other`, how it was formed). With one run of `other` per
    engine run (the same rounds) the median of the per-round ratios; otherwise the median
    time of `other` over the engine's median time."""
    best = min(r.seconds for r in other) / min(r.seconds for r in engine)
    if len(other) == len(engine) and len(engine) > 1:
        ratios = sorted(o.seconds / e.seconds for o, e in zip(other, engine, strict=True))
        ratio = statistics.median(ratios)
        text = ", ".join(f"{x:.2f}" for x in ratios)
        return (
            ratio,
            f"median of {len(ratios)} paired rounds: {text}; best against best {best:.2f}x",
        )
    ratio = statistics.median(r.seconds for r in other) / statistics.median(
        r.seconds for r in engine
    )
    runs = "its one run" if len(other) == 1 else f"its median of {len(other)} runs"
    return ratio, (
        f"{runs} against the engine's median of {len(engine)}; best against best {best:.2f}x"
    )


def prefix_saving_line(results: dict[str, SideResult], p: int, n: int, kv_per_token: int) -> str:
    """What computing the shared prefix once saves in this case: prompt tokens run, the
    prefix KV held (once, against one copy per branch), the engine's prefill time."""
    engine = results["engine"]
    parts = [f"engine {engine.prompt_tokens_computed}"]
    for side in ("naive", "batched"):
        if side in results and results[side].prompt_tokens_computed is not None:
            parts.append(f"{side} {results[side].prompt_tokens_computed}")
    prefill = f"; engine prefill {engine.prefill_s:.3f}s" if engine.prefill_s is not None else ""
    return (
        f"prefix saving: prompt tokens run {', '.join(parts)}; prefix KV "
        f"{_mib(p * kv_per_token)} held once (batched holds a copy per branch: "
        f"{n} x {_mib(p * kv_per_token)} = {_mib(n * p * kv_per_token)}){prefill}"
    )


def profile_lines(model, branches, t: int, device: str, engine: SideResult) -> list[str]:
    """Where the engine's decode step spends its time: one more (untimed) engine run with
    section timers, then, for comparison, a short run whose step is the model's forward
    (what `generate`'s step runs, and the engine's step without the direct path)."""
    from inference.engine import BranchingEngine, StepProfile

    prof = StepProfile(device)
    r = BranchingEngine(model, eos_token_ids=()).generate(
        [list(b) for b in branches], max_new_tokens=t, temperature=0.0, profile=prof
    )
    steps = max(1, prof.steps)
    timed = (
        f"{1000 * engine.decode_s / engine.decode_steps:.3f} ms/step"
        if engine.decode_s and engine.decode_steps
        else "n/a"
    )
    lines = [
        f"profile of the engine's decode step ({r.decode_path}; an extra run with timers: "
        f"{1000 * prof.total() / steps:.3f} ms/step over {prof.steps} steps; the timed best "
        f"run's decode: {timed}):"
    ]
    lines += [f"  {name:<38} {ms:8.3f} ms/step {share:6.1%}" for name, ms, share in prof.rows()]
    ref_t = min(t, 64)
    ref = StepProfile(device)
    BranchingEngine(model, eos_token_ids=(), direct_step=False).generate(
        [list(b) for b in branches], max_new_tokens=ref_t, temperature=0.0, profile=ref
    )
    lines.append(
        f"  for comparison, the model's forward as the step ({ref.steps} steps): "
        f"{1000 * ref.total() / max(1, ref.steps):.3f} ms/step"
    )
    return lines


def side_runner(
    side: str, model, branches, t: int, device: str, url: str, model_name: str
) -> Callable[[], SideResult]:
    def run() -> SideResult:
        _sync(device)
        start = time.perf_counter()
        if side == "naive":
            outs, computed = run_naive(model, branches, t, device)
            secs = time.perf_counter() - start
            return SideResult(side, secs, sum(map(len, outs)), 0, outs, computed)
        if side == "batched":
            outs, computed = run_batched(model, branches, t, device)
            secs = time.perf_counter() - start
            return SideResult(side, secs, sum(map(len, outs)), 0, outs, computed)
        if side == "engine":
            r = run_engine(model, branches, t, device)
            secs = time.perf_counter() - start
            decode_rate = r.tokens_out / r.decode_s if r.decode_s else float("inf")
            detail = (
                f"prefix {r.prefix_tokens} once; prefill {r.prefill_s:.3f}s, decode "
                f"{r.decode_s:.3f}s = {decode_rate:.1f} tok/s"
            )
            held = getattr(r, "cache_bytes", None) or {}
            if held:
                detail += "; cache " + ", ".join(f"{k} {_mib(v)}" for k, v in held.items())
            graph = getattr(r, "graph", "")
            if graph:
                detail += f"; {graph}"
            path = getattr(r, "decode_path", "")
            if path:
                detail += f"; decode step: {path}"
            outs = [b.tokens for b in r.branches]
            return SideResult(
                side,
                secs,
                r.tokens_out,
                0,
                outs,
                r.prefill_tokens,
                detail,
                prefill_s=r.prefill_s,
                decode_s=r.decode_s,
                decode_steps=r.decode_steps,
            )
        if side == "served":
            tokens, secs = run_served(url, model_name, branches, t)
            n = len(branches)
            how = "1 request, n=N" if len(set(map(tuple, branches))) == 1 else f"{n} requests"
            return SideResult(side, secs, tokens, None, None, None, f"{how}, server's weights")
        raise ValueError(f"unknown side {side!r}")

    return run


# -- output ------------------------------------------------------------------------------------


def _mib(n: int | None) -> str:
    return "n/a (server)" if n is None else f"{n / 1024**2:.1f} MiB"


def compare(outputs: list[list[int]] | None, naive: list[list[int]] | None) -> tuple[bool, str]:
    """(equal, text) of a side's greedy tokens against naive's."""
    if outputs is None:
        return True, "n/a (server's weights)"
    if naive is None:
        return True, "n/a (no naive side)"
    bad = [i for i, (a, b) in enumerate(zip(outputs, naive, strict=True)) if a != b]
    if not bad:
        return True, "yes"
    a, b = outputs[bad[0]], naive[bad[0]]
    first = next(
        (k for k, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b))
    )
    return False, f"NO ({len(bad)}/{len(naive)} branches differ; branch {bad[0]} at token {first})"


def side_line(r: SideResult, equal: str, median: float | None = None, runs: int = 1) -> str:
    rate = r.tokens / r.seconds if r.seconds else float("inf")
    spread = f" (median {median:.3f}s of {runs})" if median is not None and runs > 1 else ""
    computed = (
        ""
        if r.prompt_tokens_computed is None
        else f"; prompt tokens computed {r.prompt_tokens_computed}"
    )
    detail = f" ({r.detail})" if r.detail else ""
    return (
        f"  {r.side:<8} {r.tokens} tokens in {r.seconds:.3f}s{spread} = {rate:.1f} tok/s; "
        f"peak {_mib(r.peak_bytes)}{computed}; outputs = naive: {equal}{detail}"
    )


def _list(text: str, allowed: Sequence[str] | None = None) -> list[str]:
    items = [x.strip() for x in text.split(",") if x.strip()]
    if allowed is not None:
        bad = [x for x in items if x not in allowed]
        if bad:
            raise argparse.ArgumentTypeError(f"{', '.join(bad)}: choose from {', '.join(allowed)}")
    return items


def _ints(text: str) -> list[int]:
    try:
        values = [int(x) for x in _list(text)]
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError("positive integers, comma-separated")
    return values


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m inference.bench",
        description="Benchmark of the branching engine against naive, batched and served "
        "generation on the same model and inputs.",
        epilog=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--preset", choices=sorted(PRESETS), default="tiny")
    parser.add_argument(
        "--device", default=None, help="cpu, cuda, cuda:0 (default: cuda if available)"
    )
    parser.add_argument("--prompt-tokens", type=int, default=None, help="override P")
    parser.add_argument("--branches", type=int, default=None, help="override N")
    parser.add_argument(
        "--new-tokens", type=_ints, default=None, help="T values, comma-separated: 16,256,1024"
    )
    parser.add_argument(
        "--suffix",
        type=lambda s: _list(s, SUFFIX_MODES),
        default=None,
        help="identical,differing (default: the preset's)",
    )
    parser.add_argument(
        "--suffix-tokens",
        type=_ints,
        default=None,
        help="shortest,longest differing suffix (default 8,32)",
    )
    parser.add_argument(
        "--sides",
        type=lambda s: _list(s, SIDES),
        default=None,
        help="naive,batched,engine,served (default: the preset's, plus served with --url)",
    )
    parser.add_argument("--url", default="", help="OpenAI-compatible base URL, .../v1")
    parser.add_argument("--model", default="", help="the served model's name (default: /models)")
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch CPU threads (default 1 on CPU: stable figures on a shared machine)",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=None,
        help="rounds of timed runs (every side once per round, in turn); best run kept, "
        "speedups the median of the per-round ratios",
    )
    parser.add_argument(
        "--naive-repeat",
        type=int,
        default=None,
        help="rounds naive runs in, at most --repeat (default: the preset's; tiny: 1)",
    )
    parser.add_argument(
        "--profile",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="print where the engine's decode step spends its time, at the largest T "
        "(default: on for the tiny presets)",
    )
    parser.add_argument(
        "--gpu-gb", type=float, default=141.0, help="GPU memory for the plan (H200: 141)"
    )
    parser.add_argument(
        "--plan", action="store_true", help="print the memory plan only (no model is built)"
    )
    args = parser.parse_args(argv)
    for name in ("repeat", "naive_repeat"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.suffix_tokens is not None and (
        len(args.suffix_tokens) != 2 or args.suffix_tokens[0] > args.suffix_tokens[1]
    ):
        parser.error("--suffix-tokens takes SHORTEST,LONGEST")
    return args


def main(argv: list[str] | None = None) -> int:
    try:
        return _main(argv)
    finally:
        gc.unfreeze()


def _main(argv: list[str] | None) -> int:
    args = parse_args(argv)
    from inference.memory import format_plan, memory_plan

    preset = PRESETS[args.preset]
    p = args.prompt_tokens or preset.prompt_tokens
    n = args.branches or preset.branches
    ts = list(args.new_tokens or preset.new_tokens)
    modes = list(args.suffix or preset.suffixes)
    suffix_tokens = tuple(args.suffix_tokens or preset.suffix_tokens)
    sides = list(args.sides or preset.sides)
    if args.url and args.sides is None:
        sides.append("served")
    if "served" in sides and not args.url:
        print("the served side needs --url http://host:port/v1", file=sys.stderr)
        return 2
    repeat = args.repeat or preset.repeat
    cfg = preset_config(args.preset)

    def plan_lines(dtype_bytes: int, device: str | None = None) -> list[str]:
        plan = memory_plan(
            cfg,
            p,
            n,
            max(ts),
            dtype_bytes,
            suffix_tokens=suffix_tokens[1] if "differing" in modes else 0,
            gpu_bytes=args.gpu_gb * 1e9,
        )
        return format_plan(plan, cfg, device=device)

    if args.plan:
        cuda = args.device.startswith("cuda") if args.device else preset.gpu
        print(f"preset {preset.name} ({'bf16' if cuda else 'float32'})")
        print("\n".join(plan_lines(2 if cuda else 4)))
        return 0

    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    threads = args.threads or (1 if device == "cpu" else None)
    if threads:
        torch.set_num_threads(threads)
    profile = preset.profile if args.profile is None else args.profile

    t0 = time.perf_counter()
    model = None
    if any(s != "served" for s in sides):
        model = build_model(args.preset, device)
        dtype = model.dtype
        params = sum(x.numel() for x in model.parameters())
        built = (
            f"params={params / 1e6:.1f}M dtype={dtype} (built in {time.perf_counter() - t0:.1f}s)"
        )
    else:
        dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
        built = "no local model (served side only)"
    # Everything alive now (torch, transformers, the model) out of the collector's sight: the
    # full collection before each measured run then takes microseconds, not ~0.3 s.
    gc.collect()
    gc.freeze()
    naive_repeat = min(repeat, args.naive_repeat or preset.naive_repeat or repeat)
    print(
        f"preset {preset.name}: P={p} N={n} T={','.join(map(str, ts))} "
        f"suffix={','.join(modes)} ({suffix_tokens[0]}-{suffix_tokens[1]} tokens when differing) "
        f"sides={','.join(sides)} repeat={repeat} device={device} "
        f"threads={torch.get_num_threads()} {built}"
    )
    print("\n".join(plan_lines(2 if dtype == torch.bfloat16 else 4, device)))
    if device.startswith("cuda"):
        print(f"weights allocated on the GPU: {torch.cuda.memory_allocated() / 1024**3:.2f} GiB")
    print(PeakMemory.describe(device))
    print(
        f"timing: each case runs its sides in turn, {repeat} round{'s' if repeat != 1 else ''}"
        + (
            f" or more (up to {preset.max_rounds} while under {preset.min_seconds:g}s)"
            if preset.max_rounds > repeat and not args.repeat
            else ""
        )
        + f", naive in the first {naive_repeat}; load on the machine hits every side alike. "
        "A side's time is its best round; a speedup is the median of the per-round ratios"
    )

    # Sections: the preset's own, then (unless P was given) the presets it brings along,
    # e.g. tiny's longer shared prefix (tiny-long, P=4096) on the same model.
    sections = [(preset, p, ts, repeat, naive_repeat)]
    if args.prompt_tokens is None and args.new_tokens is None:
        for name in preset.follow:
            extra = PRESETS[name]
            r = args.repeat or extra.repeat
            sections.append(
                (
                    extra,
                    extra.prompt_tokens,
                    list(extra.new_tokens),
                    r,
                    min(r, extra.naive_repeat or r),
                )
            )
    engine_ok = True
    summary: list[str] = []
    equal_by_side: dict[str, bool] = {}
    for k, (sec, sec_p, sec_ts, sec_repeat, sec_naive) in enumerate(sections):
        if k:
            print(
                f"preset {sec.name}: P={sec_p} N={n} T={','.join(map(str, sec_ts))} "
                f"repeat={sec_repeat} (naive {sec_naive}), the same model"
            )
            plan = memory_plan(
                cfg,
                sec_p,
                n,
                max(sec_ts),
                2 if dtype == torch.bfloat16 else 4,
                suffix_tokens=suffix_tokens[1] if "differing" in modes else 0,
                gpu_bytes=args.gpu_gb * 1e9,
            )
            print("\n".join(format_plan(plan, cfg, device=device)))
        ok, lines = run_section(
            model,
            sec_p,
            n,
            sec_ts,
            modes,
            suffix_tokens,
            sides,
            device,
            sec_repeat,
            sec_naive,
            cfg.vocab_size,
            args,
            equal_by_side,
            profile=profile,
            kv_bytes_per_token=memory_plan(
                cfg, sec_p, n, 1, 2 if dtype == torch.bfloat16 else 4
            ).kv_bytes_per_token,
            # --repeat given: exactly that many rounds
            min_seconds=0.0 if args.repeat else sec.min_seconds,
            max_rounds=0 if args.repeat else sec.max_rounds,
        )
        engine_ok = engine_ok and ok
        if len(sections) > 1:
            summary.append(f"  P={sec_p}:")
        summary.extend(lines)

    p_text = ",".join(str(sec[1]) for sec in sections)
    print(f"summary ({preset.name}, {device}, P={p_text}, N={n}), the engine's wall time against:")
    print("\n".join(summary))
    compared = [f"{s} {'yes' if ok else 'NO'}" for s, ok in equal_by_side.items() if s != "served"]
    if "naive" in sides and compared:
        print(f"  greedy outputs equal naive's: {', '.join(compared)}")
    print(f"  total {time.perf_counter() - t0:.1f}s")
    return 0 if engine_ok else 1


def run_section(
    model,
    p: int,
    n: int,
    ts: Sequence[int],
    modes: Sequence[str],
    suffix_tokens: tuple[int, ...],
    sides: Sequence[str],
    device: str,
    repeat: int,
    naive_repeat: int,
    vocab: int,
    args: argparse.Namespace,
    equal_by_side: dict[str, bool],
    *,
    profile: bool,
    kv_bytes_per_token: int,
    min_seconds: float = 0.0,
    max_rounds: int = 0,
) -> tuple[bool, list[str]]:
    """The cases of one prompt length: warm-up, then per T and mode the sides' rounds, their
    lines and speedups, and (with `profile`) the engine's decode profile at the largest T.
    Returns (the engine's tokens equal naive's everywhere, summary lines)."""
    inputs = {m: make_inputs(vocab, p, n, m, suffix_tokens) for m in modes}  # type: ignore[arg-type]

    # Warm-up of every side, untimed: first calls allocate, pick kernels and JIT-compile. On a
    # prefix of at most WARM_PREFIX tokens (the same shapes but the length; a 100K prefill twice
    # would only cost time), naive on one branch.
    t_warm = time.perf_counter()
    for m in modes:
        warm = [b[: min(p, WARM_PREFIX)] + b[p:] for b in inputs[m]]
        for side in sides:
            branches = warm[:1] if side == "naive" else warm
            side_runner(side, model, branches, 2, device, args.url, args.model)()
    print(
        f"warm-up (every side and mode, T=2, prefix <= {WARM_PREFIX}) "
        f"{time.perf_counter() - t_warm:.1f}s"
    )

    engine_ok = True
    summary = []
    for t in ts:
        for m in modes:
            branches = inputs[m]
            print(f"[{m} suffixes, T={t}, P={p}, N={n}, suffix +{suffix_length(branches, p)}]")
            runs = {
                side: side_runner(side, model, branches, t, device, args.url, args.model)
                for side in sides
            }
            rounds = measure_rounds(
                runs,
                device,
                repeat,
                {"naive": naive_repeat},
                min_seconds=min_seconds,
                max_rounds=max_rounds,
            )
            results = {side: best_of(rs) for side, rs in rounds.items()}
            naive = results.get("naive")
            for side, r in results.items():
                median = statistics.median(x.seconds for x in rounds[side])
                if side == "naive":
                    print(side_line(r, "-", median, len(rounds[side])))
                    continue
                ok, text = compare(r.outputs, naive.outputs if naive else None)
                equal_by_side[side] = equal_by_side.get(side, True) and ok
                engine_ok = engine_ok and (ok or side != "engine")
                print(side_line(r, text, median, len(rounds[side])))
            ratios = []
            if "engine" in rounds:
                for other in ("naive", "batched"):
                    if other not in rounds:
                        continue
                    ratio, detail = speedup(rounds[other], rounds["engine"])
                    print(f"speedup: {ratio:.2f}x over {other}")
                    print(f"  ({detail})")
                    ratios.append(f"{ratio:.2f}x over {other}")
                print(prefix_saving_line(results, p, n, kv_bytes_per_token))
                if profile and t == max(ts) and model is not None:
                    print("\n".join(profile_lines(model, branches, t, device, results["engine"])))
            if not ratios:
                ratios = ["no speedup (needs the engine and naive or batched)"]
            summary.append(f"  {m:<9} T={t:<5} " + ", ".join(ratios))
    return engine_ok, summary


if __name__ == "__main__":
    sys.exit(main())
