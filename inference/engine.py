"""The branching engine: N continuations that share a prompt prefix, computed for little more
than the price of one.

It knows nothing of tokenization: branches are lists of token ids and the result is lists of
token ids. The steps:

1. Prefill the longest common prefix of all branches ONCE (batch of 1).
2. Feed what differs: the distinct suffixes (at least the last prompt token of each branch, so
   every branch gets logits). Suffixes of the same length run together: the prefix cache is
   deep-copied and expanded with `reorder_cache(zeros)` to one row per distinct suffix, then one
   forward. Branches with equal prompts share a row until decoding starts.
3. Lay the rows out as one batch of N (`reorder_cache` with the row of each branch). When the
   suffixes differ in length, the full-attention key/value caches are left-padded to one length
   and masked; linear-attention (recurrent) states need no padding because each row's state was
   computed on its own tokens only - padding tokens would otherwise leak into the recurrent state.
4. Move the full-attention keys/values into buffers with room for the new tokens, so a decode
   step writes in place instead of concatenating (copying) the whole cache.
5. Decode all live branches in one batch with our own loop over the model's forward and cache,
   with the pure sampler (`inference.sampler`). A branch stops on an eos token, at max_new_tokens,
   or when the per-branch callback returns True; stopped rows are dropped from the batch.

Under greedy decoding the tokens equal N separate `model.generate` calls (tested on the tiny
qwen3_5_moe model). torch is imported lazily."""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from inference.sampler import make_generator, sample_next

# on_token(branch_index, generated_ids_so_far) -> True to stop that branch
TokenCallback = Callable[[int, list[int]], bool]


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


class BranchingEngine:
    """Wraps a causal LM (transformers, with a `DynamicCache`-style cache) for shared-prefix
    batched decoding. `eos_token_ids` end a branch (pass none to always decode max_new_tokens)."""

    def __init__(self, model: Any, *, eos_token_ids: Iterable[int] = ()):
        self.model = model
        self.eos_token_ids = frozenset(int(t) for t in eos_token_ids)

    @property
    def device(self):
        return self.model.device

    def _new_cache(self):
        from transformers import DynamicCache

        return DynamicCache(config=self.model.config)

    def _forward(self, input_ids, cache, *, attention_mask=None, position_ids=None):
        out = self.model(
            input_ids=input_ids,
            cache=cache,
            attention_mask=attention_mask,
            position_ids=position_ids,
            use_cache=True,
            logits_to_keep=1,
        )
        return out.logits[:, -1, :]

    def generate(
        self,
        branches: Sequence[Sequence[int]],
        *,
        max_new_tokens: int,
        temperature: float = 0.0,
        top_p: float = 1.0,
        seed: int | None = None,
        on_token: TokenCallback | None = None,
    ) -> EngineOutput:
        import torch

        if not branches:
            raise ValueError("no branches to generate")
        if any(len(b) == 0 for b in branches):
            raise ValueError("every branch needs at least one prompt token")
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")

        with torch.inference_mode():
            t0 = time.perf_counter()
            state = self._prefill([list(map(int, b)) for b in branches])
            _preallocate(state["cache"], extra=max_new_tokens)
            if self.device.type == "cuda":
                torch.cuda.synchronize()
            t1 = time.perf_counter()
            outs, steps = self._decode(
                state,
                n=len(branches),
                max_new_tokens=max_new_tokens,
                temperature=temperature,
                top_p=top_p,
                seed=seed,
                on_token=on_token,
            )
            if self.device.type == "cuda":
                torch.cuda.synchronize()
            t2 = time.perf_counter()
        return EngineOutput(
            branches=outs,
            prefix_tokens=state["prefix_len"],
            prefill_tokens=state["prefill_tokens"],
            prompt_tokens=[len(b) for b in branches],
            prefill_s=t1 - t0,
            decode_s=t2 - t1,
            decode_steps=steps,
        )

    # -- prefill -------------------------------------------------------------------------------

    def _prefill(self, branches: list[list[int]]) -> dict:
        import torch

        dev = self.device
        # Keep at least one token per branch out of the prefix so each gets its own logits.
        prefix_len = min(common_prefix_length(branches), min(len(b) for b in branches) - 1)
        prefix = branches[0][:prefix_len]

        prefix_cache = self._new_cache()
        if prefix_len:
            self._forward(torch.tensor([prefix], device=dev), prefix_cache)

        # Distinct suffixes, in first-seen order; branch -> suffix index.
        suffix_index: dict[tuple[int, ...], int] = {}
        branch_suffix = []
        for b in branches:
            key = tuple(b[prefix_len:])
            branch_suffix.append(suffix_index.setdefault(key, len(suffix_index)))
        suffixes = list(suffix_index)

        # Run suffixes of equal length together: one forward per distinct length.
        by_length: dict[int, list[int]] = {}
        for i, s in enumerate(suffixes):
            by_length.setdefault(len(s), []).append(i)
        groups = []  # (cache, logits, suffix indices, total length)
        for length, idxs in by_length.items():
            cache = copy.deepcopy(prefix_cache)
            if prefix_len and len(idxs) > 1:
                cache.reorder_cache(torch.zeros(len(idxs), dtype=torch.long, device=dev))
            ids = torch.tensor([list(suffixes[i]) for i in idxs], device=dev)
            if prefix_len:
                pos = torch.arange(prefix_len, prefix_len + length, device=dev)
                pos = pos.unsqueeze(0).expand(len(idxs), -1)
            else:
                pos = None
            logits = self._forward(ids, cache, position_ids=pos)
            groups.append((cache, logits, idxs, prefix_len + length))

        # Row of each distinct suffix in the concatenation of the groups.
        row_of_suffix = {}
        offset = 0
        for _, _, idxs, _ in groups:
            for j, i in enumerate(idxs):
                row_of_suffix[i] = offset + j
            offset += len(idxs)
        rows = torch.tensor([row_of_suffix[s] for s in branch_suffix], dtype=torch.long, device=dev)

        lengths = torch.tensor(
            [g[3] for g in groups for _ in g[2]], dtype=torch.long, device=dev
        ).index_select(0, rows)
        if len(groups) == 1:
            cache, logits = groups[0][0], groups[0][1]
            cache.reorder_cache(rows)
            logits = logits.index_select(0, rows)
            padded = False
        else:
            cache = _merge_group_caches([g[0] for g in groups], [g[3] for g in groups], rows)
            logits = torch.cat([g[1] for g in groups], dim=0).index_select(0, rows)
            padded = True
        max_len = max(g[3] for g in groups)
        return {
            "cache": cache,
            "logits": logits,
            "lengths": lengths,  # tokens so far per row (= next position id)
            "max_len": max_len,
            "padded": padded,
            "prefix_len": prefix_len,
            "prefill_tokens": prefix_len + sum(len(s) for s in suffixes),
        }

    # -- decode --------------------------------------------------------------------------------

    def _decode(self, state, *, n, max_new_tokens, temperature, top_p, seed, on_token):
        import torch

        dev = self.device
        gen = make_generator(seed, dev)
        cache, logits = state["cache"], state["logits"]
        positions = state["lengths"].clone()
        padded = state["padded"]
        if padded:
            # Row i holds lengths[i] real tokens, right-aligned in max_len slots.
            max_len = state["max_len"]
            slots = torch.arange(max_len, device=dev).unsqueeze(0)
            attn = (slots >= (max_len - positions).unsqueeze(1)).long()
        outs = [BranchOutput() for _ in range(n)]
        live = list(range(n))  # branch index of each batch row
        steps = 0
        while True:
            next_ids = sample_next(logits, temperature=temperature, top_p=top_p, generator=gen)
            ids = next_ids.tolist()
            keep_rows = []
            for row, (b, tok) in enumerate(zip(live, ids, strict=True)):
                if tok in self.eos_token_ids:
                    outs[b].finish_reason = "stop"
                    continue
                outs[b].tokens.append(tok)
                if on_token is not None and on_token(b, list(outs[b].tokens)):
                    outs[b].finish_reason = "cancelled"
                    continue
                if len(outs[b].tokens) >= max_new_tokens:
                    outs[b].finish_reason = "length"
                    continue
                keep_rows.append(row)
            if not keep_rows:
                break
            if len(keep_rows) < len(live):
                sel = torch.tensor(keep_rows, dtype=torch.long, device=dev)
                cache.reorder_cache(sel)
                next_ids = next_ids.index_select(0, sel)
                positions = positions.index_select(0, sel)
                if padded:
                    attn = attn.index_select(0, sel)
                live = [live[r] for r in keep_rows]
            if padded:
                attn = torch.cat([attn, torch.ones_like(attn[:, :1])], dim=1)
                logits = self._forward(
                    next_ids.unsqueeze(1),
                    cache,
                    attention_mask=attn,
                    position_ids=positions.unsqueeze(1),
                )
            else:
                logits = self._forward(next_ids.unsqueeze(1), cache)
            positions = positions + 1
            steps += 1
        return outs, steps


def _merge_group_caches(caches: list, lengths: list[int], rows) -> Any:
    """One cache from several batched caches whose sequences have different lengths: full
    attention keys/values are left-padded with zeros to the longest (the attention mask hides
    them), recurrent/conv states are concatenated as they are; then rows are picked."""
    import torch
    from transformers.cache_utils import DynamicLayer, LinearAttentionCacheLayerMixin

    merged = caches[0]  # reused as the container; its tensors are replaced below
    max_len = max(lengths)
    for li, layer in enumerate(merged.layers):
        group_layers = [c.layers[li] for c in caches]
        if isinstance(layer, LinearAttentionCacheLayerMixin):
            for si in range(layer.number_of_states):
                if layer.is_conv_states_initialized[si]:
                    layer.conv_states[si] = torch.cat(
                        [g.conv_states[si] for g in group_layers], dim=0
                    ).index_select(0, rows)
                if layer.is_recurrent_states_initialized[si]:
                    layer.recurrent_states[si] = torch.cat(
                        [g.recurrent_states[si] for g in group_layers], dim=0
                    ).index_select(0, rows)
        if isinstance(layer, DynamicLayer) and layer.is_initialized:
            keys, values = [], []
            for g, length in zip(group_layers, lengths, strict=True):
                pad = max_len - length
                keys.append(torch.nn.functional.pad(g.keys, (0, 0, pad, 0)))
                values.append(torch.nn.functional.pad(g.values, (0, 0, pad, 0)))
            layer.keys = torch.cat(keys, dim=0).index_select(0, rows)
            layer.values = torch.cat(values, dim=0).index_select(0, rows)
        elif not isinstance(layer, LinearAttentionCacheLayerMixin | DynamicLayer):
            raise TypeError(f"cannot merge cache layer of type {type(layer).__name__}")
    return merged


def _preallocate(cache: Any, extra: int) -> None:
    """Swap each full-attention layer of `cache` for one with room for `extra` more tokens, so
    decoding writes keys/values in place instead of concatenating (copying) the whole cache at
    every step. Same values, same results."""
    from transformers.cache_utils import DynamicLayer

    for i, layer in enumerate(cache.layers):
        if type(layer) is DynamicLayer and layer.keys is not None and layer.keys.numel():
            cache.layers[i] = _preallocated_layer(layer.keys, layer.values, extra)


def _preallocated_layer_class():
    from transformers.cache_utils import DynamicLayer

    class PreallocatedLayer(DynamicLayer):
        """A DynamicLayer whose keys/values are views into a buffer with spare capacity."""

        def __init__(self, keys, values, extra: int):
            super().__init__()
            self.device = keys.device
            self.is_initialized = True
            self._len = keys.shape[-2]
            self._k = self._alloc(keys, self._len + extra)
            self._v = self._alloc(values, self._len + extra)
            self._views()

        def _alloc(self, tensor, capacity):
            b, h, n, d = tensor.shape
            buf = tensor.new_empty((b, h, capacity, d))
            buf[:, :, :n] = tensor
            return buf

        def _views(self):
            self.keys = self._k[:, :, : self._len]
            self.values = self._v[:, :, : self._len]

        def update(self, key_states, value_states, *args, **kwargs):
            n = key_states.shape[-2]
            if self._len + n > self._k.shape[-2]:  # out of room: grow (rare)
                self._k = self._alloc(self.keys, 2 * (self._len + n))
                self._v = self._alloc(self.values, 2 * (self._len + n))
            self._k[:, :, self._len : self._len + n] = key_states
            self._v[:, :, self._len : self._len + n] = value_states
            self._len += n
            self._views()
            return self.keys, self.values

        def reorder_cache(self, beam_idx) -> None:
            self._k = self._k.index_select(0, beam_idx.to(self._k.device))
            self._v = self._v.index_select(0, beam_idx.to(self._v.device))
            self._views()

        def batch_select_indices(self, indices) -> None:
            self.reorder_cache(indices)

        def crop(self, tokens_to_remove: int) -> None:
            if tokens_to_remove > 0:
                raise ValueError("crop takes a negative number of tokens to remove")
            self._len -= abs(tokens_to_remove)
            self._views()

    return PreallocatedLayer


def _preallocated_layer(keys, values, extra: int) -> Any:
    """The class subclasses a transformers type, so it is defined on first use (lazy import)."""
    global _PREALLOCATED
    if _PREALLOCATED is None:
        _PREALLOCATED = _preallocated_layer_class()
    return _PREALLOCATED(keys, values, extra)


_PREALLOCATED: Any = None
