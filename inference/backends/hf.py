"""transformers in this process, with the branching engine.

The model (a local path or a hub id) is loaded ONCE per worker process and kept in a
module-level cache keyed by path and device: bf16 with `device_map="auto"` on a GPU, float32 on
CPU. Prompts go through the tokenizer's chat template; the engine computes the shared prefix of
the N branches once and decodes them together. torch/transformers are imported lazily."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from inference.backends.errors import BackendError
from inference.types import (
    Completion,
    GenerationRequest,
    Message,
    SamplingParams,
    StreamCallback,
    StreamEvent,
)

# How often a decoding branch reports its text (seconds); the first token always reports.
STREAM_INTERVAL_S = 0.2


@dataclass
class LoadedModel:
    model: Any
    tokenizer: Any
    eos_token_ids: tuple[int, ...]
    device: str
    load_s: float


_CACHE: dict[tuple[str, str], LoadedModel] = {}
_CACHE_LOCK = threading.Lock()
# One generation at a time per process: the model and its memory are shared by every backend
# object of the process.
_GENERATE_LOCK = threading.Lock()


def load_model(path: str, device: str | None = None) -> LoadedModel:
    """Load (once per process) the model and tokenizer at `path`."""
    try:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as e:  # the web image has no gpu extra
        raise BackendError(
            "the hf backend needs torch and transformers (install the 'gpu' extra)"
        ) from e

    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    key = (str(path), device)
    with _CACHE_LOCK:
        if key in _CACHE:
            return _CACHE[key]
        start = time.perf_counter()
        try:
            tokenizer = AutoTokenizer.from_pretrained(path)
            if device.startswith("cuda"):
                try:
                    model = AutoModelForCausalLM.from_pretrained(
                        path, dtype=torch.bfloat16, device_map="auto"
                    )
                except ImportError:  # device_map without accelerate: one GPU
                    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16)
                    model.to(device)  # type: ignore[arg-type]  # transformers wraps .to
            else:
                model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
                model.to(device)  # type: ignore[arg-type]  # transformers wraps .to
        except (OSError, ValueError) as e:
            raise BackendError(f"cannot load model {path!r}: {e}") from e
        model.eval()
        if not getattr(tokenizer, "chat_template", None):
            raise BackendError(f"the tokenizer of {path!r} has no chat template")
        eos: set[int] = set()
        gen_eos = getattr(model.generation_config, "eos_token_id", None)
        if isinstance(gen_eos, int):
            eos.add(gen_eos)
        elif gen_eos:
            eos.update(int(t) for t in gen_eos)
        if tokenizer.eos_token_id is not None:
            eos.add(int(tokenizer.eos_token_id))
        loaded = LoadedModel(
            model, tokenizer, tuple(sorted(eos)), device, time.perf_counter() - start
        )
        _CACHE[key] = loaded
        return loaded


def loaded_models() -> list[tuple[str, str]]:
    """(path, device) of the models this process holds."""
    return list(_CACHE)


class HFBackend:
    name = "hf"
    is_neural = True

    def __init__(self, *, model: str, device: str | None = None):
        self.model = model
        self.device = device

    def encode(self, messages) -> list[int]:
        loaded = load_model(self.model, self.device)
        text = loaded.tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=True
        )
        return loaded.tokenizer(text, add_special_tokens=False)["input_ids"]

    def generate(
        self, request: GenerationRequest, on_event: StreamCallback | None = None
    ) -> list[Completion]:
        from inference.engine import BranchingEngine

        loaded = load_model(self.model, self.device)
        tok = loaded.tokenizer
        params = request.params
        prompts = [self.encode(m) for m in request.prompts()]
        last_emit: dict[int, float] = {}
        so_far: dict[int, list[int]] = {}

        def on_tokens(branch: int, new: list[int]) -> bool:
            # The engine hands over only the tokens since its last read; keep the branch's
            # own list and decode it at most every STREAM_INTERVAL_S.
            if on_event is None:
                return False
            tokens = so_far.setdefault(branch, [])
            tokens.extend(new)
            now = time.perf_counter()
            if branch in last_emit and now - last_emit[branch] < STREAM_INTERVAL_S:
                return False
            last_emit[branch] = now
            text = tok.decode(tokens, skip_special_tokens=True)
            return bool(on_event(StreamEvent(sample=branch, text=text, tokens_out=len(tokens))))

        if on_event is not None:
            for i in range(len(prompts)):
                on_event(StreamEvent(sample=i, text="", tokens_out=0, phase="prefill"))
        engine = BranchingEngine(loaded.model, eos_token_ids=loaded.eos_token_ids)
        with _GENERATE_LOCK:
            try:
                result = engine.generate(
                    prompts,
                    max_new_tokens=params.max_tokens,
                    temperature=params.temperature,
                    top_p=1.0 if params.top_p is None else params.top_p,
                    seed=params.seed,
                    on_tokens=on_tokens if on_event is not None else None,
                )
            except (RuntimeError, ValueError) as e:
                raise BackendError(f"generation with {self.model!r} failed: {e}") from e

        completions = []
        for i, branch in enumerate(result.branches):
            text = tok.decode(branch.tokens, skip_special_tokens=True)
            if on_event is not None:
                on_event(
                    StreamEvent(sample=i, text=text, tokens_out=len(branch.tokens), phase="done")
                )
            completions.append(
                Completion(
                    text=text,
                    tokens_in=len(prompts[i]),
                    tokens_out=len(branch.tokens),
                    # The prefill and decode are shared by all branches of the batch.
                    prefill_s=result.prefill_s,
                    decode_s=result.decode_s,
                    finish_reason=branch.finish_reason,
                )
            )
        return completions

    def generate_rows(
        self, rows: Sequence[list[Message]], params: SamplingParams, seeds: Sequence[int]
    ) -> list[Completion]:
        """One engine call for differing prompts, one sample each, row i sampled with
        seeds[i] (the steps of many episodes, `inference.step_batcher`). Not streamed."""
        from inference.engine import BranchingEngine

        loaded = load_model(self.model, self.device)
        prompts = [self.encode(m) for m in rows]
        engine = BranchingEngine(loaded.model, eos_token_ids=loaded.eos_token_ids)
        with _GENERATE_LOCK:
            try:
                result = engine.generate(
                    prompts,
                    max_new_tokens=params.max_tokens,
                    temperature=params.temperature,
                    top_p=1.0 if params.top_p is None else params.top_p,
                    seeds=list(seeds),
                )
            except (RuntimeError, ValueError) as e:
                raise BackendError(f"generation with {self.model!r} failed: {e}") from e
        return [
            Completion(
                text=loaded.tokenizer.decode(branch.tokens, skip_special_tokens=True),
                tokens_in=len(prompts[i]),
                tokens_out=len(branch.tokens),
                prefill_s=result.prefill_s,  # shared by the rows of the call
                decode_s=result.decode_s,
                finish_reason=branch.finish_reason,
            )
            for i, branch in enumerate(result.branches)
        ]
