"""What N branches of a qwen3_5_moe text model hold in memory, from the config alone (no model
is built, torch is not imported): `memory_plan(config, P, N, T, dtype_bytes)`.

The four parts, as the transformers modeling code lays them out (`Qwen3_5MoeGatedDeltaNet`,
`Qwen3_5MoeAttention`, `cache_utils.LinearAttentionLayer`):

- weights: embeddings, lm_head (unless tied), per layer two RMSNorms, the mixer (full attention:
  q (doubled: query and gate), k, v, o, q/k norms; linear attention: in_proj_qkv/z/b/a, the
  depthwise conv1d, dt_bias, A_log, the gated norm, out_proj) and the MoE block (router, experts'
  gate_up and down, shared expert, its gate), then the final norm.
- prefix KV, stored ONCE: keys and values of the P prompt tokens in the full-attention layers
  only, 2 * kv_heads * head_dim * dtype_bytes per token per full layer.
- per-branch state: each linear-attention layer keeps a conv state (conv_dim x kernel, in the
  model dtype; transformers keeps the whole kernel width, vLLM kernel - 1) and a recurrent state
  (value_heads x key_head_dim x value_head_dim), which the gated delta rule computes and keeps in
  float32 whatever the model dtype. Its size does not depend on the length of the prompt.
- per-branch suffix KV: the full-attention keys/values of what each branch adds after the shared
  prefix (its own suffix and the new tokens).

Activations and workspace of the forward passes are not counted here: the bench measures peaks."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

H200_BYTES = 141e9  # an H200's 141 GB (131.3 GiB)
RECURRENT_STATE_BYTES = 4  # float32: the gated delta rule keeps its state in fp32

GIB = 1024**3


@dataclass(frozen=True)
class MemoryPlan:
    prompt_tokens: int  # P, shared by all branches
    branches: int  # N
    new_tokens: int  # T per branch
    suffix_tokens: int  # tokens of each branch's own suffix after the shared prefix (at most)
    dtype_bytes: int
    params: int
    full_layers: int
    linear_layers: int
    kv_bytes_per_token: int  # all full-attention layers, keys + values
    conv_state_bytes: int  # one branch, all linear-attention layers
    recurrent_state_bytes: int  # one branch, all linear-attention layers
    gpu_bytes: float

    @property
    def weights_bytes(self) -> int:
        return self.params * self.dtype_bytes

    @property
    def prefix_kv_bytes(self) -> int:
        return self.prompt_tokens * self.kv_bytes_per_token

    @property
    def branch_state_bytes(self) -> int:
        return self.conv_state_bytes + self.recurrent_state_bytes

    @property
    def branch_suffix_kv_bytes(self) -> int:
        return (self.suffix_tokens + self.new_tokens) * self.kv_bytes_per_token

    @property
    def per_branch_bytes(self) -> int:
        return self.branch_state_bytes + self.branch_suffix_kv_bytes

    @property
    def total_bytes(self) -> int:
        return self.weights_bytes + self.prefix_kv_bytes + self.branches * self.per_branch_bytes

    @property
    def copied_prefix_total_bytes(self) -> int:
        """The total if every branch held its own copy of the prefix KV (batched `generate`)."""
        return self.total_bytes + (self.branches - 1) * self.prefix_kv_bytes

    @property
    def fits(self) -> bool:
        return self.total_bytes <= self.gpu_bytes


def _get(config: Any, name: str, default: Any = None) -> Any:
    value = getattr(config, name, default)
    return default if value is None else value


def layer_counts(config: Any) -> tuple[int, int]:
    """(full-attention layers, linear-attention layers)."""
    types = list(config.layer_types)[: config.num_hidden_layers]
    full = types.count("full_attention")
    linear = types.count("linear_attention")
    if full + linear != config.num_hidden_layers:
        raise ValueError(f"unknown layer types in {sorted(set(types))}")
    return full, linear


def linear_attention_dims(config: Any) -> dict[str, int]:
    key_dim = config.linear_key_head_dim * config.linear_num_key_heads
    value_dim = config.linear_value_head_dim * config.linear_num_value_heads
    return {
        "key_dim": key_dim,
        "value_dim": value_dim,
        "conv_dim": 2 * key_dim + value_dim,
        "value_heads": config.linear_num_value_heads,
    }


def count_params(config: Any) -> int:
    """Parameters of `Qwen3_5MoeForCausalLM(config)`, by arithmetic on the config."""
    h = config.hidden_size
    v = config.vocab_size
    full, linear = layer_counts(config)
    head_dim = _get(config, "head_dim", h // config.num_attention_heads)
    q_heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
    bias = bool(_get(config, "attention_bias", False))

    embeddings = v * h
    lm_head = 0 if _get(config, "tie_word_embeddings", False) else v * h
    final_norm = h

    # Full attention: q_proj gives query and gate (2x), k/v grouped, o back to hidden.
    attn = h * q_heads * head_dim * 2 + 2 * h * kv_heads * head_dim + q_heads * head_dim * h
    if bias:
        attn += q_heads * head_dim * 2 + 2 * kv_heads * head_dim + h
    attn += 2 * head_dim  # q_norm, k_norm

    d = linear_attention_dims(config)
    lin = (
        h * d["conv_dim"]  # in_proj_qkv
        + h * d["value_dim"]  # in_proj_z
        + 2 * h * d["value_heads"]  # in_proj_b, in_proj_a
        + d["conv_dim"] * config.linear_conv_kernel_dim  # depthwise conv1d, no bias
        + 2 * d["value_heads"]  # dt_bias, A_log
        + config.linear_value_head_dim  # gated RMSNorm
        + d["value_dim"] * h  # out_proj
    )

    experts = config.num_experts
    moe = (
        experts * h  # router
        + experts * 3 * config.moe_intermediate_size * h  # experts: gate_up (2x) and down
        + 3 * config.shared_expert_intermediate_size * h  # shared expert MLP
        + h  # shared expert gate
    )
    norms = 2 * h  # input_layernorm, post_attention_layernorm
    layers = full * (attn + moe + norms) + linear * (lin + moe + norms)
    return embeddings + lm_head + final_norm + layers


def memory_plan(
    config: Any,
    prompt_tokens: int,
    branches: int,
    new_tokens: int,
    dtype_bytes: int,
    *,
    suffix_tokens: int = 0,
    gpu_bytes: float = H200_BYTES,
) -> MemoryPlan:
    full, linear = layer_counts(config)
    head_dim = _get(config, "head_dim", config.hidden_size // config.num_attention_heads)
    kv_per_token_layer = 2 * config.num_key_value_heads * head_dim * dtype_bytes
    d = linear_attention_dims(config)
    conv = d["conv_dim"] * config.linear_conv_kernel_dim * dtype_bytes
    recurrent = (
        d["value_heads"]
        * config.linear_key_head_dim
        * config.linear_value_head_dim
        * RECURRENT_STATE_BYTES
    )
    return MemoryPlan(
        prompt_tokens=prompt_tokens,
        branches=branches,
        new_tokens=new_tokens,
        suffix_tokens=suffix_tokens,
        dtype_bytes=dtype_bytes,
        params=count_params(config),
        full_layers=full,
        linear_layers=linear,
        kv_bytes_per_token=full * kv_per_token_layer,
        conv_state_bytes=linear * conv,
        recurrent_state_bytes=linear * recurrent,
        gpu_bytes=gpu_bytes,
    )


def _size(n: float) -> str:
    if n >= GIB:
        return f"{n / GIB:.2f} GiB"
    if n >= 1024**2:
        return f"{n / 1024**2:.1f} MiB"
    if n >= 1024:
        return f"{n / 1024:.1f} KiB"
    return f"{n:.0f} B"


def format_plan(plan: MemoryPlan, config: Any, *, device: str | None = None) -> list[str]:
    """The plan as lines of arithmetic: each part's formula, its bytes and its GiB. `device`:
    where the run it is printed for runs; on a CPU the budget is said to be the GPU's the plan
    is for, not the memory of this run (None: the plan alone, or a GPU run)."""
    head_dim = _get(config, "head_dim", config.hidden_size // config.num_attention_heads)
    d = linear_attention_dims(config)
    n, p, t, s = plan.branches, plan.prompt_tokens, plan.new_tokens, plan.suffix_tokens
    b = plan.dtype_bytes
    kv_layer = 2 * config.num_key_value_heads * head_dim * b
    gpu = f"{plan.gpu_bytes / 1e9:.0f} GB = {plan.gpu_bytes / GIB:.1f} GiB"
    on_cpu = device is not None and not device.startswith("cuda")
    if on_cpu:
        owner = "an H200's" if plan.gpu_bytes == H200_BYTES else "a GPU's"
        budget = f" against {owner} {gpu}, the GPU the plan is for (this run is on a CPU): " + (
            "it would fit there" if plan.fits else "it WOULD NOT FIT there"
        )
        copied_fits, copied_not = ", would fit there as well)", ", would not fit there)"
    else:
        budget = f" of {gpu}: " + ("fits" if plan.fits else "DOES NOT FIT")
        copied_fits, copied_not = ", fits as well)", ", does not fit)"
    lines = [
        f"memory plan: P={p} N={n} T={t} suffix<={s} tokens, {b}-byte weights/KV, "
        f"{plan.full_layers} full-attention + {plan.linear_layers} linear-attention layers",
        f"  weights              {plan.params:,} params x {b} B = {plan.weights_bytes:,} B "
        f"({_size(plan.weights_bytes)})",
        f"  KV per token         {plan.full_layers} full layers x 2 x {config.num_key_value_heads}"
        f" kv heads x {head_dim} x {b} B = {plan.kv_bytes_per_token:,} B "
        f"({_size(plan.kv_bytes_per_token)}; {_size(kv_layer)} per layer)",
        f"  prefix KV (once)     {p:,} tokens x {plan.kv_bytes_per_token:,} B = "
        f"{plan.prefix_kv_bytes:,} B ({_size(plan.prefix_kv_bytes)})",
        f"  per-branch state     {plan.linear_layers} linear layers x (conv {d['conv_dim']} x "
        f"{config.linear_conv_kernel_dim} x {b} B + recurrent {d['value_heads']} x "
        f"{config.linear_key_head_dim} x {config.linear_value_head_dim} x "
        f"{RECURRENT_STATE_BYTES} B fp32) = {plan.branch_state_bytes:,} B "
        f"({_size(plan.branch_state_bytes)}), whatever P",
        f"  per-branch suffix KV ({s} + {t}) tokens x {plan.kv_bytes_per_token:,} B = "
        f"{plan.branch_suffix_kv_bytes:,} B ({_size(plan.branch_suffix_kv_bytes)})",
        f"  branches             {n} x {plan.per_branch_bytes:,} B = "
        f"{n * plan.per_branch_bytes:,} B ({_size(n * plan.per_branch_bytes)})",
        f"  total                {plan.total_bytes:,} B ({_size(plan.total_bytes)})"
        + budget
        + f", {_size(max(0.0, plan.gpu_bytes - plan.total_bytes))} left"
        + (" there" if on_cpu else "")
        + " for activations",
        f"  (prefix KV copied into every branch instead: {_size(plan.copied_prefix_total_bytes)}"
        + (copied_not if plan.copied_prefix_total_bytes > plan.gpu_bytes else copied_fits),
    ]
    return lines
