"""Benchmark of the branching engine against the ways one would do without it: the same model,
the same inputs, greedy, no eos stop.

    python -m inference.bench --preset tiny                       # CPU, under a minute
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
theirs), and a summary at the end. Exit code 1 if the engine's tokens differ from naive's.

Every side runs once outside the timed region first (first calls allocate, pick kernels, JIT
Triton kernels on a GPU); the timed runs are best-of `--repeat`. Peak memory: on CUDA
`torch.cuda.max_memory_allocated()` during the side minus what was allocated just before it
(the weights); on a CPU the process's peak RSS during the side (the kernel's high-water mark,
reset before it; or RSS sampled every 2 ms by a thread where that cannot be reset) minus the
RSS just before it.

Models have random weights built from a config (no download): `tiny` is a shrunk qwen3_5_moe
for a CPU (P=512, N=3; hidden 64, one linear- and one full-attention layer, 4 experts with 2
active and a shared expert: 0.2M parameters); `qwen3.5-35b-a3b` is the full Qwen3.5-35B-A3B text
architecture (40 layers, 256 experts) in bf16 for a GPU; `qwen3.5-35b-a3b-100k` is the same with
P=100,000 and N=64, engine only (batched `generate` would need 64 copies of the prefix KV,
190 GiB; naive would prefill 100K tokens 64 times). The memory plan of the run
(`inference.memory`: weights, prefix KV once, per-branch state and suffix KV) is printed first."""

from __future__ import annotations

import argparse
import ctypes
import gc
import os
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


PRESETS = {
    # CPU: the whole default run (3 sides x 2 modes x T of 16, 256, 1024) in under a minute on
    # 2 cores. A decode step of the tiny model is ~3 ms of fixed overhead whatever the batch, and
    # naive decoding makes N x 1296 of them per mode (batched and the engine 1296 each): N=3.
    "tiny": Preset("tiny", prompt_tokens=512, branches=3, new_tokens=(16, 256, 1024), repeat=1),
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

    if name == "tiny":
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
    """Best of `repeat` timed runs; peak memory is the largest over them."""
    best: SideResult | None = None
    peak = 0
    for _ in range(repeat):
        with PeakMemory(device) as mem:
            res = run()
        peak = max(peak, mem.peak)
        if best is None or res.seconds < best.seconds:
            best = res
    assert best is not None
    if best.peak_bytes is not None:
        best.peak_bytes = peak
    return best


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
            outs = [b.tokens for b in r.branches]
            return SideResult(side, secs, r.tokens_out, 0, outs, r.prefill_tokens, detail)
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


def side_line(r: SideResult, equal: str) -> str:
    rate = r.tokens / r.seconds if r.seconds else float("inf")
    computed = (
        ""
        if r.prompt_tokens_computed is None
        else f"; prompt tokens computed {r.prompt_tokens_computed}"
    )
    detail = f" ({r.detail})" if r.detail else ""
    return (
        f"  {r.side:<8} {r.tokens} tokens in {r.seconds:.3f}s = {rate:.1f} tok/s; "
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
        "--repeat", type=int, default=None, help="timed runs of each side, best kept"
    )
    parser.add_argument(
        "--gpu-gb", type=float, default=141.0, help="GPU memory for the plan (H200: 141)"
    )
    parser.add_argument(
        "--plan", action="store_true", help="print the memory plan only (no model is built)"
    )
    args = parser.parse_args(argv)
    if args.suffix_tokens is not None and (
        len(args.suffix_tokens) != 2 or args.suffix_tokens[0] > args.suffix_tokens[1]
    ):
        parser.error("--suffix-tokens takes SHORTEST,LONGEST")
    return args


def main(argv: list[str] | None = None) -> int:
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

    def plan_lines(dtype_bytes: int) -> list[str]:
        plan = memory_plan(
            cfg,
            p,
            n,
            max(ts),
            dtype_bytes,
            suffix_tokens=suffix_tokens[1] if "differing" in modes else 0,
            gpu_bytes=args.gpu_gb * 1e9,
        )
        return format_plan(plan, cfg)

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
    print(
        f"preset {preset.name}: P={p} N={n} T={','.join(map(str, ts))} "
        f"suffix={','.join(modes)} ({suffix_tokens[0]}-{suffix_tokens[1]} tokens when differing) "
        f"sides={','.join(sides)} repeat={repeat} device={device} "
        f"threads={torch.get_num_threads()} {built}"
    )
    print("\n".join(plan_lines(2 if dtype == torch.bfloat16 else 4)))
    if device.startswith("cuda"):
        print(f"weights allocated on the GPU: {torch.cuda.memory_allocated() / 1024**3:.2f} GiB")
    print(PeakMemory.describe(device))

    inputs = {m: make_inputs(cfg.vocab_size, p, n, m, suffix_tokens) for m in modes}  # type: ignore[arg-type]

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
    equal_by_side: dict[str, bool] = {}
    for t in ts:
        for m in modes:
            branches = inputs[m]
            print(f"[{m} suffixes, T={t}, P={p}, N={n}, suffix +{suffix_length(branches, p)}]")
            results = {}
            for side in sides:
                run = side_runner(side, model, branches, t, device, args.url, args.model)
                results[side] = measure(run, device, repeat)
            naive = results.get("naive")
            for side, r in results.items():
                if side == "naive":
                    print(side_line(r, "-"))
                    continue
                ok, text = compare(r.outputs, naive.outputs if naive else None)
                equal_by_side[side] = equal_by_side.get(side, True) and ok
                engine_ok = engine_ok and (ok or side != "engine")
                print(side_line(r, text))
            engine = results.get("engine")
            ratios = []
            for other in ("naive", "batched"):
                if engine is not None and other in results:
                    ratio = results[other].seconds / engine.seconds
                    print(f"speedup: {ratio:.2f}x over {other}")
                    ratios.append(f"{ratio:.2f}x over {other}")
            if not ratios:
                ratios = ["no speedup (needs the engine and naive or batched)"]
            summary.append(f"  {m:<9} T={t:<5} " + ", ".join(ratios))

    print(f"summary ({preset.name}, {device}, P={p}, N={n}), the engine's wall time against:")
    print("\n".join(summary))
    compared = [f"{s} {'yes' if ok else 'NO'}" for s, ok in equal_by_side.items() if s != "served"]
    if "naive" in sides and compared:
        print(f"  greedy outputs equal naive's: {', '.join(compared)}")
    print(f"  total {time.perf_counter() - t0:.1f}s")
    return 0 if engine_ok else 1


if __name__ == "__main__":
    sys.exit(main())
