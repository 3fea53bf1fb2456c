"""Which fast kernels the world model's layers will use, and a clear word when they are missing.

transformers runs Qwen3.5's Gated DeltaNet layers (30 of 40 in the 35B-A3B model) with
flash-linear-attention's Triton kernels and their short convolution with causal-conv1d's CUDA
kernel when those packages import; otherwise with a PyTorch reference implementation that is
correct but much slower on a GPU. Both come with the `gpu` extra. On a CPU the reference path
is the only one (the fast kernels are GPU-only), so nothing is said there."""

from __future__ import annotations

import importlib.util
import logging
from typing import Any

log = logging.getLogger(__name__)

# import name -> (distribution on PyPI, what it speeds up)
FAST_KERNELS = {
    "fla": ("flash-linear-attention", "the Gated DeltaNet (linear attention) layers"),
    "causal_conv1d": ("causal-conv1d", "the linear-attention layers' short convolution"),
}

_warned = False


def available_kernels() -> dict[str, bool]:
    """{import name: importable} for each fast kernel package (without importing it)."""
    return {name: importlib.util.find_spec(name) is not None for name in FAST_KERNELS}


def missing_kernels_message() -> str | None:
    missing = [name for name, ok in available_kernels().items() if not ok]
    if not missing:
        return None
    parts = [f"{FAST_KERNELS[m][0]} (for {FAST_KERNELS[m][1]})" for m in missing]
    return (
        f"not installed: {'; '.join(parts)}. The PyTorch fallback runs instead, much slower "
        "on a GPU; install them with the gpu extra: pip install 'agentworld-studio[gpu]'"
    )


def warn_if_slow_kernels(device: Any) -> None:
    """Log once per process, on CUDA only, which fast kernels are missing."""
    global _warned
    if _warned or getattr(device, "type", str(device)) != "cuda":
        return
    _warned = True
    message = missing_kernels_message()
    if message:
        log.warning("world-model engine: %s", message)
