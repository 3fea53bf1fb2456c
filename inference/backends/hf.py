"""transformers in this process, with the branching engine.

The model (a local path or a hub id) is loaded ONCE per worker process and kept in a
module-level cache keyed by path and device: bf16 with `device_map="auto"` on a GPU, float32 on
CPU. A PEFT (LoRA) adapter folder, such as `inference.finetune` writes, loads as its base with
the adapter merged in (a plain transformers model again). Prompts go through the tokenizer's
chat template; the engine computes the shared prefix of the N branches once and decodes them
together. torch/transformers are imported lazily."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
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

# A PEFT adapter folder holds this file; a tokenizer folder one of these.
ADAPTER_CONFIG = "adapter_config.json"
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")

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


def adapter_base(path: str) -> str | None:
    """The base model a PEFT adapter folder names (its adapter_config.json's
    base_model_name_or_path), or None when `path` is not an adapter folder."""
    config = Path(path) / ADAPTER_CONFIG
    if not config.is_file():
        return None
    try:
        data = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise BackendError(
            f"the adapter folder {path!r} has an unreadable {ADAPTER_CONFIG}: {e}"
        ) from e
    base = data.get("base_model_name_or_path") if isinstance(data, dict) else None
    if not isinstance(base, str) or not base:
        raise BackendError(
            f"the adapter folder {path!r} names no base model (base_model_name_or_path)"
        )
    return base


def _has_tokenizer(path: str) -> bool:
    folder = Path(path)
    return folder.is_dir() and any((folder / name).is_file() for name in _TOKENIZER_FILES)


def _from_pretrained(path: str, device: str) -> Any:
    import torch
    from transformers import AutoModelForCausalLM

    if device.startswith("cuda"):
        try:
            return AutoModelForCausalLM.from_pretrained(
                path, dtype=torch.bfloat16, device_map="auto"
            )
        except ImportError:  # device_map without accelerate: one GPU
            model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16)
            model.to(device)  # type: ignore[arg-type]  # transformers wraps .to
            return model
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    model.to(device)  # type: ignore[arg-type]  # transformers wraps .to
    return model


def _with_adapter(path: str, base: str, device: str) -> Any:
    """The base with the adapter at `path` merged in: a plain transformers model (the
    engine needs the model's own config and attention, not PEFT's wrappers)."""
    try:
        from peft import PeftModel
    except ImportError as e:
        raise BackendError(
            f"{path!r} is a LoRA adapter folder: loading it needs peft (the 'model' extra)"
        ) from e
    if Path(base).expanduser().is_absolute() or base.startswith("."):
        base = str(Path(base).expanduser())
        if not Path(base).is_dir():
            raise BackendError(f"the base model {base!r} of the adapter folder {path!r} is missing")
    try:
        model = _from_pretrained(base, device)
    except (OSError, ValueError) as e:
        raise BackendError(
            f"cannot load the base model {base!r} of the adapter folder {path!r}: {e}"
        ) from e
    try:
        return PeftModel.from_pretrained(model, path).merge_and_unload()
    except Exception as e:  # noqa: BLE001 - safetensors, PEFT and torch each raise their own
        raise BackendError(f"cannot apply the adapter folder {path!r} to {base!r}: {e}") from e


def load_model(path: str, device: str | None = None) -> LoadedModel:
    """Load (once per process) the model and tokenizer at `path`: a model folder or hub id, or
    a PEFT adapter folder (adapter_config.json), merged into the base it names. An adapter's
    tokenizer is its own folder's when it has one, else the base's."""
    try:
        import torch
        from transformers import AutoTokenizer
    except ImportError as e:  # the web image has no gpu extra
        raise BackendError(
            "the hf backend needs torch and transformers (install the 'gpu' extra)"
        ) from e

    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    # The key is the folder given: an adapter folder is its own entry, apart from its base.
    key = (str(path), device)
    with _CACHE_LOCK:
        if key in _CACHE:
            return _CACHE[key]
        start = time.perf_counter()
        base = adapter_base(path)
        try:
            if base is None:
                tokenizer = AutoTokenizer.from_pretrained(path)
                model = _from_pretrained(path, device)
            else:
                model = _with_adapter(path, base, device)
                tokenizer = AutoTokenizer.from_pretrained(
                    path if _has_tokenizer(path) else str(Path(base).expanduser())
                )
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
