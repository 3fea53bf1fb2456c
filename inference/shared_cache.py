"""The branching engine's cache: the shared prefix's keys/values stored ONCE, per-branch suffix
buffers of fixed size, per-branch recurrent states; and the attention that reads them.

A transformers model (qwen3_5_moe and its hybrid relatives) talks to its cache through a few
calls: full-attention layers `update(keys, values, layer)`, linear-attention (Gated DeltaNet)
layers `get/update_conv_state` and `get/update_recurrent_state`. This class answers them in
three modes:

- "prefix": batch 1, the common prefix (in chunks). Keys/values go into one prefix buffer;
  linear-attention states are the prefix's own.
- "rows": the distinct suffixes of one length, as a batch of G rows. Each row starts from a copy
  of the prefix's recurrent states (the only copy a branch makes of them: at the fork); its keys
  and values are its own. `commit_rows` then copies them into the rows of the branches that
  have that suffix.
- "decode": all N branches, one token each. Each branch writes its key/value at its own
  position of its fixed-size suffix buffer (no concatenation, no reallocation), and its
  recurrent states in place, so tensor addresses never change and a decode step can be
  captured in a CUDA graph. A finished branch is not removed: its row keeps running and the
  engine ignores it.

The attention (`shared_prefix_attention`, registered with transformers' AttentionInterface and
selected for the engine's forwards only) computes, for each branch's queries, one softmax over
[shared prefix | own suffix] (a prefix chunk is a row whose "prefix" is the chunks before it). The prefix part folds the queries of every branch into one matrix
product against the single prefix copy, so the prefix's keys/values are read once per step for
all branches; nothing is expanded or repeated per branch. torch is imported lazily."""

from __future__ import annotations

from typing import Any

ATTENTION_NAME = "studio_shared_prefix"
# Prefix scores of one query chunk are [kv_heads, queries, prefix] floats; chunk the queries
# so that block stays near this many bytes (a long differing suffix over a 100K-token prefix
# would otherwise need hundreds of GB at once).
SCORE_BYTES = 256 * 1024 * 1024


class SharedPrefixCache:
    def __init__(
        self,
        layer_types: list[str],
        *,
        rows: int,
        prefix_capacity: int,
        suffix_capacity: int,
        device: Any,
    ):
        import torch

        self.layer_types = list(layer_types)
        self.n_rows = rows
        self.prefix_capacity = prefix_capacity
        self.suffix_capacity = suffix_capacity
        self.device = device
        self.mode = "prefix"
        self.prefix_len = 0  # prefix tokens stored so far (fixed once the suffixes start)
        # Valid suffix tokens of each branch row; the decode step writes at this position.
        self.suffix_len = torch.zeros(rows, dtype=torch.long, device=device)
        self._all_rows = torch.arange(rows, device=device)
        # full attention: layer -> tensor
        self.prefix_k: dict[int, Any] = {}
        self.prefix_v: dict[int, Any] = {}
        self.suffix_k: dict[int, Any] = {}
        self.suffix_v: dict[int, Any] = {}
        # linear attention: layer -> tensor, per mode
        self._states: dict[str, dict[str, dict[int, Any]]] = {
            m: {"conv": {}, "rec": {}} for m in ("prefix", "rows", "decode")
        }
        self._group_k: dict[int, Any] = {}
        self._group_v: dict[int, Any] = {}
        self._group_len = 0

    # -- modes ---------------------------------------------------------------------------------

    def begin_rows(self, group_size: int) -> None:
        """Start a batch of `group_size` suffix rows, each from a copy of the prefix states."""
        self.mode = "rows"
        self._group_k, self._group_v = {}, {}
        self._group_len = 0
        rows = self._states["rows"]
        for kind in ("conv", "rec"):
            rows[kind] = {
                layer: state.expand(group_size, *state.shape[1:]).clone()
                for layer, state in self._states["prefix"][kind].items()
            }

    def commit_rows(self, branches: Any, group_rows: Any, length: int) -> None:
        """Copy the rows' suffix keys/values and states into branch rows: branch `branches[i]`
        takes group row `group_rows[i]` (several branches can share one distinct suffix)."""
        for layer, keys in self._group_k.items():
            for store, part in ((self.suffix_k, keys), (self.suffix_v, self._group_v[layer])):
                if layer not in store:
                    _, h, _, d = part.shape
                    store[layer] = part.new_zeros((self.n_rows, h, self.suffix_capacity, d))
                store[layer][:, :, :length].index_copy_(
                    0, branches, part.index_select(0, group_rows)
                )
        decode = self._states["decode"]
        for kind in ("conv", "rec"):
            for layer, state in self._states["rows"][kind].items():
                if layer not in decode[kind]:
                    decode[kind][layer] = state.new_zeros((self.n_rows, *state.shape[1:]))
                decode[kind][layer].index_copy_(0, branches, state.index_select(0, group_rows))
        self.suffix_len.index_fill_(0, branches, length)
        self._states["rows"] = {"conv": {}, "rec": {}}
        self._group_k, self._group_v = {}, {}

    def begin_decode(self) -> None:
        self.mode = "decode"

    def advance(self, tokens: int) -> None:
        """After a forward: the prefix grew (prefix mode), or each branch's suffix did."""
        if self.mode == "prefix":
            self.prefix_len += tokens
        elif self.mode == "rows":
            self._group_len += tokens
        else:
            self.suffix_len += tokens

    # -- what full-attention layers call -------------------------------------------------------

    def update(self, key_states, value_states, layer_idx: int, *args, **kwargs):
        n = key_states.shape[-2]
        if self.mode == "prefix":
            if layer_idx not in self.prefix_k:
                b, h, _, d = key_states.shape
                shape = (1, h, max(self.prefix_capacity, 1), d)
                self.prefix_k[layer_idx] = key_states.new_empty(shape)
                self.prefix_v[layer_idx] = value_states.new_empty(shape)
            start = self.prefix_len
            if start + n > self.prefix_capacity:
                raise ValueError(f"prefix of {start + n} tokens > capacity {self.prefix_capacity}")
            self.prefix_k[layer_idx][:, :, start : start + n] = key_states
            self.prefix_v[layer_idx][:, :, start : start + n] = value_states
            # The chunk attends to the stored prefix before it plus itself (causal), like a
            # suffix row: see shared_prefix_attention.
            return key_states, value_states
        if self.mode == "rows":
            if self._group_len:  # suffix rows fed in several pieces: keep them together
                key_states = _cat(self._group_k[layer_idx], key_states)
                value_states = _cat(self._group_v[layer_idx], value_states)
            self._group_k[layer_idx], self._group_v[layer_idx] = key_states, value_states
            return key_states, value_states
        # decode: one token per branch row, written at that row's own position
        keys, values = self.suffix_k[layer_idx], self.suffix_v[layer_idx]
        keys[self._all_rows, :, self.suffix_len] = key_states[:, :, 0]
        values[self._all_rows, :, self.suffix_len] = value_states[:, :, 0]
        return keys, values

    # -- what linear-attention layers call -----------------------------------------------------

    def _state(self, kind: str, layer_idx: int):
        return self._states[self.mode][kind].get(layer_idx)

    def get_conv_state(self, layer_idx: int, state_idx: int = 0):
        return self._state("conv", layer_idx)

    def get_recurrent_state(self, layer_idx: int, state_idx: int = 0):
        return self._state("rec", layer_idx)

    def has_previous_state(self, layer_idx: int | None = None, state_idx: int | None = None):
        return bool(self._states[self.mode]["conv"])

    def update_conv_state(self, conv_states, layer_idx: int, state_idx: int = 0, **kwargs):
        """The prefill path of a linear-attention layer: returns the inputs with the kept
        left context in front (zeros when there is none), keeps the last kernel-size columns."""
        import torch

        kernel = kwargs.get("conv_kernel_size") or conv_states.shape[-1]
        current = self._state("conv", layer_idx)
        if current is None:
            full = conv_states
            if full.shape[-1] < kernel:
                full = torch.nn.functional.pad(full, (kernel - full.shape[-1], 0))
            self._states[self.mode]["conv"][layer_idx] = full[..., -kernel:].clone()
        else:
            full = torch.cat([current, conv_states], dim=-1)
            current.copy_(full[..., -kernel:])
        return full

    def update_recurrent_state(self, recurrent_states, layer_idx: int, state_idx: int = 0, **kw):
        if not hasattr(recurrent_states, "shape"):
            # A list of intermediate states comes only from a layer told to keep some for a
            # rollback, which this cache never asks for (get_recurrent_states_to_keep).
            raise TypeError(
                f"layer {layer_idx} passed {type(recurrent_states).__name__} of recurrent "
                "states; SharedPrefixCache keeps only the last state (it records no past)"
            )
        current = self._state("rec", layer_idx)
        if current is None:
            current = recurrent_states.clone()
            self._states[self.mode]["rec"][layer_idx] = current
        else:
            current.copy_(recurrent_states)  # in place: the address stays (CUDA graphs)
        return current

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.prefix_len

    # -- rollback (what transformers asks for assisted/speculative decoding) -------------------
    # A transformers cache can record past conv/recurrent states so that `crop` can undo the
    # last tokens (assisted decoding, a deferred stop check). The engine never undoes a token:
    # every state is overwritten in place (fixed addresses, for CUDA graphs). So this cache
    # records no past, and no linear-attention layer computes intermediate states for it.

    def is_recording_past(self, layer_idx: int) -> bool:
        return False

    def get_recurrent_states_to_keep(self, layer_idx: int | None = None) -> int:
        """How many of the last tokens' recurrent states a linear-attention layer must compute
        and hand to `update_recurrent_state` (as a list) so that a later `crop` can return to
        them (transformers >= 5.25 asks; like its Cache, 0 for a layer not recording the past,
        and for `layer_idx=None` the most over all layers). Always 0 here: nothing is recorded."""
        return 0

    def increase_count(self, layer_idx: int, state_idx: int = 0) -> None:
        """transformers >= 5.25 calls this when a one-token decode updated a layer's conv state
        in place (without `update_conv_state`), so that a per-layer token count stays right.
        This cache counts tokens per forward instead: the engine calls `advance` once after
        each forward, for all layers, so the in-place update has nothing more to count."""

    # -- accounting ----------------------------------------------------------------------------

    def nbytes(self) -> dict[str, int]:
        """Bytes held: the prefix keys/values (one copy), the branches' suffix buffers, and the
        branches' recurrent/conv states."""

        def total(tensors) -> int:
            return sum(t.numel() * t.element_size() for t in tensors)

        decode = self._states["decode"]
        return {
            "prefix_kv": total([*self.prefix_k.values(), *self.prefix_v.values()]),
            "suffix_kv": total([*self.suffix_k.values(), *self.suffix_v.values()]),
            "branch_states": total([*decode["conv"].values(), *decode["rec"].values()]),
        }


def _cat(a, b):
    import torch

    return torch.cat([a, b], dim=-2)


def shared_prefix_attention(
    module: Any,
    query: Any,
    key: Any,
    value: Any,
    attention_mask: Any,
    scaling: float,
    dropout: float = 0.0,
    **kwargs: Any,
) -> tuple[Any, None]:
    """Attention for the engine's forwards. `attention_mask` is the SharedPrefixCache itself
    (the engine passes it in the model's mask mapping), which says the mode and the lengths.
    Returns [batch, q_len, heads, head_dim] like transformers' attention functions."""

    cache: SharedPrefixCache = attention_mask
    layer = module.layer_idx
    # Before this forward's `advance`, prefix_len is the prefix stored before this chunk (in
    # prefix mode the chunk's own keys were just written after it, and are `key` too).
    prefix_len = cache.prefix_len
    if cache.mode == "prefix" and not prefix_len:
        # The first prefix chunk attends to itself alone, causally: plain causal attention,
        # which torch's fused kernel does without the [queries x keys] score matrix in memory
        # (what `generate` runs for a prompt too).
        import torch

        out = torch.nn.functional.scaled_dot_product_attention(
            query, key, value, is_causal=True, scale=scaling, enable_gqa=True
        )
        return out.transpose(1, 2).contiguous(), None
    prefix_k = cache.prefix_k[layer][:, :, :prefix_len] if prefix_len else None
    prefix_v = cache.prefix_v[layer][:, :, :prefix_len] if prefix_len else None
    if cache.mode == "decode":
        valid = cache.suffix_len + 1  # this step's token was just written
        q_offset = 0
    else:
        # prefix chunk or suffix rows: `key` holds the row's own tokens so far, the queries
        # are its last q_len positions (causal)
        valid = None
        q_offset = key.shape[-2] - query.shape[-2]
    out = _attend(query, prefix_k, prefix_v, key, value, scaling, valid=valid, q_offset=q_offset)
    return out, None


def _attend(query, prefix_k, prefix_v, suffix_k, suffix_v, scaling, *, valid, q_offset):
    """softmax over [shared prefix | own suffix] for every branch, in float32.

    query [B, Hq, L, D]; prefix_k/v [1, Hkv, P, D] or None; suffix_k/v [B, Hkv, S, D].
    `valid` ([B]) masks suffix slots >= valid (decode); otherwise the suffix is causal with the
    queries at positions q_offset..q_offset+L-1 of it."""
    import torch

    b, hq, q_len, d = query.shape
    hkv = suffix_k.shape[1]
    group = hq // hkv
    p = 0 if prefix_k is None else prefix_k.shape[-2]
    s = suffix_k.shape[-2]
    rows_per_chunk = max(1, SCORE_BYTES // max(1, 4 * hkv * b * group * max(p, s)))
    outs = []
    for start in range(0, q_len, rows_per_chunk):
        q = query[:, :, start : start + rows_per_chunk]
        n_q = q.shape[-2]
        # [B, Hkv, G*n_q, D]: the query heads sharing one key/value head side by side
        qg = q.reshape(b, hkv, group * n_q, d)
        scores_s = torch.matmul(qg, suffix_k.transpose(-1, -2)).float() * scaling
        if valid is not None:
            keep = torch.arange(s, device=q.device).view(1, 1, 1, s) < valid.view(b, 1, 1, 1)
        else:
            q_pos = torch.arange(n_q, device=q.device) + q_offset + start
            keep = torch.arange(s, device=q.device).view(1, s) <= q_pos.view(n_q, 1)
            keep = keep.repeat(group, 1).view(1, 1, group * n_q, s)
        scores_s = scores_s.masked_fill(~keep, float("-inf"))
        m = scores_s.amax(dim=-1, keepdim=True)
        denom: Any = 0.0
        num: Any = 0.0
        if p:
            # Every branch's queries against the one prefix copy: [Hkv, B*G*n_q, P]
            qp = qg.transpose(0, 1).reshape(hkv, b * group * n_q, d)
            scores_p = torch.matmul(qp, prefix_k[0].transpose(-1, -2)).float() * scaling
            scores_p = scores_p.view(hkv, b, group * n_q, p)
            m = torch.maximum(m, scores_p.amax(dim=-1, keepdim=True).transpose(0, 1))
            e_p = torch.exp(scores_p - m.transpose(0, 1))
            denom = e_p.sum(dim=-1, keepdim=True).transpose(0, 1)
            num = torch.matmul(e_p.view(hkv, b * group * n_q, p).to(prefix_v.dtype), prefix_v[0])
            num = num.view(hkv, b, group * n_q, d).transpose(0, 1).float()
        e_s = torch.exp(scores_s - m)
        denom = denom + e_s.sum(dim=-1, keepdim=True)
        num = num + torch.matmul(e_s.to(suffix_v.dtype), suffix_v).float()
        outs.append((num / denom).view(b, hkv, group, n_q, d))
    out = outs[0] if len(outs) == 1 else torch.cat(outs, dim=3)
    return out.reshape(b, hq, q_len, d).transpose(1, 2).contiguous().to(query.dtype)


def register_attention() -> None:
    """Make `ATTENTION_NAME` known to transformers (idempotent)."""
    from transformers import AttentionInterface

    AttentionInterface.register(ATTENTION_NAME, shared_prefix_attention)
