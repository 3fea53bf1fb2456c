"""Benchmark: naive per-branch `generate` against the branching engine, same model, same inputs.

    python -m inference.bench --preset tiny                       # CPU, under a minute
    python -m inference.bench --preset qwen3.5-35b-a3b --device cuda

Both sides decode N branches of T new tokens from one P-token prompt, greedily and without
stopping at eos, so they produce the same tokens (checked and printed). Naive runs
`model.generate` once per branch (prefix computed N times); the engine computes the prefix once
and decodes the N branches in one batch. Prints tokens/s of each, prefix tokens computed by each,
and as the last line `speedup: X.XXx` (naive wall time / engine wall time).

Models have random weights built from a config (no download): `tiny` is the tiny qwen3_5_moe
architecture at a size where CPU prefill costs something; `qwen3.5-35b-a3b` is the full
Qwen3.5-35B-A3B text architecture (40 layers, 256 experts) in bf16, for a GPU."""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class Preset:
    name: str
    prompt_tokens: int  # P
    branches: int  # N
    new_tokens: int  # T
    repeat: int  # runs of each side, best kept


PRESETS = {
    "tiny": Preset("tiny", prompt_tokens=2048, branches=8, new_tokens=16, repeat=2),
    "qwen3.5-35b-a3b": Preset(
        "qwen3.5-35b-a3b", prompt_tokens=4096, branches=16, new_tokens=64, repeat=1
    ),
}


def preset_config(name: str):
    """The model config of a preset (transformers `Qwen3_5MoeTextConfig`)."""
    from transformers import Qwen3_5MoeTextConfig

    from inference.tiny import tiny_config

    if name == "tiny":
        # The tiny test architecture, widened so a 2048-token prefill is real work on a CPU.
        cfg = tiny_config(640, eos_token_id=2, pad_token_id=0)
        cfg.hidden_size = 256
        cfg.head_dim = 64
        cfg.linear_key_head_dim = 64
        cfg.linear_value_head_dim = 64
        cfg.moe_intermediate_size = 256
        cfg.shared_expert_intermediate_size = 256
        cfg.rope_parameters = dict(cfg.rope_parameters, mrope_section=[8, 4, 4])
        return cfg
    if name == "qwen3.5-35b-a3b":
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
    """Random-weight model of the preset on `device` (bf16 on CUDA, float32 on CPU)."""
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


def _sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def run_naive(
    model, prompt: list[int], n: int, t: int, device: str
) -> tuple[list[list[int]], float]:
    import torch

    outs = []
    _sync(device)
    start = time.perf_counter()
    with torch.inference_mode():
        for _ in range(n):
            ids = torch.tensor([prompt], device=device)
            out = model.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=t,
                min_new_tokens=t,
                do_sample=False,
                eos_token_id=None,
                pad_token_id=0,
            )
            outs.append(out[0, len(prompt) :].tolist())
    _sync(device)
    return outs, time.perf_counter() - start


def run_engine(model, prompt: list[int], n: int, t: int, device: str):
    from inference.engine import BranchingEngine

    engine = BranchingEngine(model, eos_token_ids=())
    _sync(device)
    start = time.perf_counter()
    result = engine.generate([prompt] * n, max_new_tokens=t, temperature=0.0)
    _sync(device)
    return result, time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m inference.bench", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--preset", choices=sorted(PRESETS), default="tiny")
    parser.add_argument(
        "--device", default=None, help="cpu, cuda, cuda:0 (default: cuda if available)"
    )
    parser.add_argument("--prompt-tokens", type=int, default=None, help="override P")
    parser.add_argument("--branches", type=int, default=None, help="override N")
    parser.add_argument("--new-tokens", type=int, default=None, help="override T")
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch CPU threads (default 1 on CPU: stable figures on a shared machine)",
    )
    parser.add_argument(
        "--repeat", type=int, default=None, help="runs of each side, best kept (preset default)"
    )
    args = parser.parse_args(argv)

    import torch

    preset = PRESETS[args.preset]
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    threads = args.threads or (1 if device == "cpu" else None)
    if threads:
        torch.set_num_threads(threads)

    repeat = args.repeat or preset.repeat
    p = args.prompt_tokens or preset.prompt_tokens
    n = args.branches or preset.branches
    t = args.new_tokens or preset.new_tokens

    t0 = time.perf_counter()
    model = build_model(args.preset, device)
    params = sum(x.numel() for x in model.parameters())
    print(
        f"preset {preset.name}: P={p} N={n} T={t} repeat={repeat} device={device} "
        f"dtype={model.dtype} "
        f"params={params / 1e6:.1f}M threads={torch.get_num_threads()} "
        f"(built in {time.perf_counter() - t0:.1f}s)"
    )
    gen = torch.Generator().manual_seed(0)
    vocab = model.config.vocab_size
    prompt = torch.randint(3, vocab, (p,), generator=gen).tolist()

    # Warm up both paths (first calls allocate and pick kernels) on a short prompt.
    run_naive(model, prompt[:64], 1, 2, device)
    run_engine(model, prompt[:64], 2, 2, device)

    # Best of --repeat runs of each side (interleaved), so a burst of load on a shared machine
    # does not decide the ratio.
    naive_s = engine_s = float("inf")
    for _ in range(repeat):
        naive_out, seconds = run_naive(model, prompt, n, t, device)
        naive_s = min(naive_s, seconds)
        result, seconds = run_engine(model, prompt, n, t, device)
        if seconds < engine_s:
            engine_res, engine_s = result, seconds
    engine_out = [b.tokens for b in engine_res.branches]

    tokens = n * t
    print(
        f"naive  per-branch generate: {tokens} tokens in {naive_s:.3f}s = "
        f"{tokens / naive_s:.1f} tok/s; prefix tokens computed {n * p}"
    )
    print(
        f"engine shared-prefix batch: {engine_res.tokens_out} tokens in {engine_s:.3f}s = "
        f"{engine_res.tokens_out / engine_s:.1f} tok/s; prefix tokens computed "
        f"{engine_res.prefill_tokens} (prefill {engine_res.prefill_s:.3f}s, "
        f"decode {engine_res.decode_s:.3f}s = {engine_res.tokens_out / engine_res.decode_s:.1f} tok/s)"
    )
    same = naive_out == engine_out
    print(f"greedy outputs equal: {same}")
    print(f"speedup: {naive_s / engine_s:.2f}x")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
