"""A pure sampler: next-token ids from a batch of logits. No model, no state, no tokenizer.

Greedy (argmax) when temperature is 0. Otherwise temperature scaling, nucleus (top-p)
truncation and one draw per row by the Gumbel-max trick: the row's token is
argmax(logits / T + g), where g is Gumbel noise made from a counter-based hash of
(row seed, step, token id). Why a hash and not a `torch.Generator`:

- a row's draw depends only on its own seed and step, never on how many rows share the batch,
  their order, or rows that stopped: branch i of a fork samples the same text at N=2 and N=64;
- it is plain integer arithmetic on tensors, with no generator state and no host sync, so a
  decode step that samples can be captured in a CUDA graph;
- the same seed gives the same noise on any device.

Argmax of logits plus Gumbel(0, 1) noise is distributed exactly as softmax(logits), so this is
ordinary sampling, not an approximation."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch is imported lazily by the engine; only types here
    import torch

_MASK32 = 0xFFFFFFFF
# Constants of a well-mixing 32-bit integer hash (xorshift-multiply, "lowbias32").
_M1 = 0x7FEB352D
_M2 = 0x846CA68B
_STEP_SALT = 0x9E3779B9


def _mul32(a: torch.Tensor, b: int) -> torch.Tensor:
    """(a * b) mod 2**32 for 0 <= a < 2**32, in int64 without overflow: b is split into 16-bit
    halves so no product reaches 2**63."""
    lo = a * (b & 0xFFFF)
    hi = ((a * (b >> 16)) & 0xFFFF) << 16
    return (lo + hi) & _MASK32


def mix32(x: torch.Tensor) -> torch.Tensor:
    """A 32-bit integer hash of each element of an int64 tensor holding values in [0, 2**32)."""
    x = x ^ (x >> 16)
    x = _mul32(x, _M1)
    x = x ^ (x >> 15)
    x = _mul32(x, _M2)
    return x ^ (x >> 16)


def row_keys(seeds: torch.Tensor, step: torch.Tensor | int) -> torch.Tensor:
    """One 32-bit key per row from its seed ([batch] int64) and the decode step."""
    import torch

    step_t = torch.as_tensor(step, dtype=torch.long, device=seeds.device)
    s = seeds.long()
    return mix32(
        (s & _MASK32) ^ mix32(((s >> 32) & _MASK32) ^ mix32((step_t + _STEP_SALT) & _MASK32))
    )


def uniform_noise(keys: torch.Tensor, token_hash: torch.Tensor) -> torch.Tensor:
    """[batch, vocab] uniforms in (0, 1): row key hashed with each token's precomputed hash."""
    import torch

    bits = mix32(keys.unsqueeze(1) ^ token_hash.unsqueeze(0)) >> 8  # 24 bits: exact in float32
    return (bits.to(torch.float32) + 0.5) * (1.0 / (1 << 24))


def token_hashes(vocab: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """The per-token half of the noise hash, computed once per vocabulary."""
    import torch

    return mix32(torch.arange(vocab, dtype=torch.long, device=device))


def sample_next(
    logits: torch.Tensor,
    *,
    temperature: float,
    top_p: float = 1.0,
    seeds: torch.Tensor | None = None,
    step: torch.Tensor | int = 0,
    token_hash: torch.Tensor | None = None,
) -> torch.Tensor:
    """Pick one token per row of `logits` ([batch, vocab]); returns a [batch] long tensor.

    Sampling (temperature > 0) needs `seeds` ([batch] int64, one per row) and the decode
    `step`; the same (seed, step, logits) always gives the same token. `token_hash` is
    `token_hashes(vocab)`, passed in so a decode loop computes it once."""
    import torch

    if logits.ndim != 2:
        raise ValueError(f"logits must be [batch, vocab], got shape {tuple(logits.shape)}")
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature}")
    if not 0 < top_p <= 1:
        raise ValueError(f"top_p must be in (0, 1], got {top_p}")
    if temperature == 0:
        return torch.argmax(logits, dim=-1)
    if seeds is None:
        raise ValueError("sampling (temperature > 0) needs one seed per row")
    if seeds.shape != logits.shape[:1]:
        raise ValueError(f"seeds must be [{logits.shape[0]}], got shape {tuple(seeds.shape)}")

    scaled = logits.float() / temperature
    if top_p < 1.0:
        probs = torch.softmax(scaled, dim=-1)
        sorted_probs, sorted_idx = torch.sort(probs, dim=-1, descending=True)
        cumulative = torch.cumsum(sorted_probs, dim=-1)
        # Drop a token when the tokens before it already reach top_p; the first always stays.
        drop_sorted = (cumulative - sorted_probs) >= top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, sorted_idx, drop_sorted)
        scaled = scaled.masked_fill(drop, float("-inf"))
    if token_hash is None:
        token_hash = token_hashes(logits.shape[-1], logits.device)
    u = uniform_noise(row_keys(seeds.to(logits.device), step), token_hash)
    gumbel = -torch.log(-torch.log(u))
    return torch.argmax(scaled + gumbel, dim=-1)


def branch_seeds(seed: int | None, n: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """Seeds of n branches: branch i gets seed + i (a fresh random base when `seed` is None),
    so a branch's sample is fixed by the job's seed and its index alone."""
    import secrets

    import torch

    base = secrets.randbits(62) if seed is None else int(seed)
    return torch.arange(n, dtype=torch.long, device=device) + base
