"""Fine-tune a world model on `wm-turns` rows: LoRA (PEFT) or full, with TRL's SFTTrainer.

Plain Python, no Django: the worker calls `train(rows, config, out_dir)` with the rows of an export
(TRL conversational prompt-completion rows, `studio.exports.formats`) and renders the figures it
reports. torch, transformers, trl, peft and datasets are imported inside the functions.

What trains. Each row's prompt (the branch's context) is only context; the completion (the
reviewed target) is the only text with a loss (`completion_only_loss`). A row longer than
`max_length` tokens (prompt and completion, as the trainer tokenizes them with the base's chat
template) keeps its system message, its current turn, its completion and as many of its most
recent earlier turns as fit: its earliest turns are left out (`fit_rows`), so the trainer never
cuts the completion. A row that does not fit even with no earlier turn is left out and counted;
when every row is, the run is refused (`FineTuneInputError`, naming the length needed). Rows of
any other shape are refused too.

What is written under `out_dir`:

- `checkpoints/checkpoint-N`: the Trainer's checkpoints (model or adapter, optimizer, scheduler,
  RNG, trainer state) every `save_every` optimizer steps, at the end and when stopped; the last
  two are kept. `train(..., resume=True)` continues from the last one.
- `adapter/` (LoRA): a PEFT adapter folder (adapter_config.json naming the base by its absolute
  path, adapter_model.safetensors) with the tokenizer files; `model/` (full): a transformers
  model folder with the tokenizer. Either holds `studio_lineage.json` (the config, figures and
  the caller's description) and a README.md model card saying how to load it.
- each checkpoint holds `studio_train_s.json`, the run's training seconds when it was saved:
  a resumed run's time goes on from there.

On a GPU the base is trained in bf16 (LoRA: bf16 base weights with fp32 adapter weights; full:
fp32 weights under bf16 autocast, saved in bf16); on CPU everything is float32."""

from __future__ import annotations

import json
import math
import os
import shutil
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

METHODS = ("lora", "full")
LINEAGE_FILE = "studio_lineage.json"
ADAPTER_DIR = "adapter"
MODEL_DIR = "model"
CHECKPOINTS_DIR = "checkpoints"
ELAPSED_FILE = "studio_train_s.json"  # in each checkpoint: the training seconds so far
README_FILE = "README.md"

# Bounds of the config's numbers (inclusive unless said otherwise), named in validate()'s messages.
MAX_LORA_RANK = 256
MAX_LORA_ALPHA = 4096
MAX_EPOCHS = 100.0
MIN_MAX_LENGTH = 16
MAX_MAX_LENGTH = 131072
MAX_BATCH = 1024
MAX_STEPS = 1_000_000
MAX_SEED = 2**32 - 1
MAX_TARGETS = 64


@dataclass(frozen=True)
class FineTuneConfig:
    base_model: str  # a local model folder
    method: str = "lora"  # "lora" | "full"
    lora_rank: int = 8
    lora_alpha: int = 16
    lora_dropout: float = 0.0
    lora_targets: tuple[str, ...] = ()  # module names; () means PEFT's "all-linear"
    epochs: float = 1.0
    learning_rate: float = 2e-4
    max_length: int = 2048
    batch_size: int = 1  # per device
    grad_accum: int = 1
    seed: int = 0
    max_steps: int | None = None  # optimizer steps; None: as many as `epochs` make
    save_every: int = 20  # optimizer steps between checkpoints
    logging_every: int = 1  # optimizer steps between logged losses

    def validate(self) -> None:
        """Raise ValueError naming the first field out of its bounds."""
        if not isinstance(self.base_model, str) or not self.base_model.strip():
            raise FineTuneInputError("base_model: a local model folder is required", "base_model")
        if self.method not in METHODS:
            raise FineTuneInputError(
                f"method: must be one of {', '.join(METHODS)} (got {self.method!r})", "method"
            )
        _int_in("lora_rank", self.lora_rank, 1, MAX_LORA_RANK)
        _int_in("lora_alpha", self.lora_alpha, 1, MAX_LORA_ALPHA)
        _number_in("lora_dropout", self.lora_dropout, 0.0, 1.0, high_open=True)
        if not isinstance(self.lora_targets, tuple):
            raise FineTuneInputError(
                "lora_targets: must be a tuple of module names", "lora_targets"
            )
        if len(self.lora_targets) > MAX_TARGETS:
            raise FineTuneInputError(
                f"lora_targets: at most {MAX_TARGETS} module names", "lora_targets"
            )
        for name in self.lora_targets:
            if not isinstance(name, str) or not name or not name.replace("_", "").isalnum():
                raise FineTuneInputError(
                    f"lora_targets: {name!r} is not a module name (letters, digits, underscores)",
                    "lora_targets",
                )
        _number_in("epochs", self.epochs, 0.0, MAX_EPOCHS, low_open=True)
        _number_in("learning_rate", self.learning_rate, 0.0, 1.0, low_open=True)
        _int_in("max_length", self.max_length, MIN_MAX_LENGTH, MAX_MAX_LENGTH)
        _int_in("batch_size", self.batch_size, 1, MAX_BATCH)
        _int_in("grad_accum", self.grad_accum, 1, MAX_BATCH)
        _int_in("seed", self.seed, 0, MAX_SEED)
        if self.max_steps is not None:
            _int_in("max_steps", self.max_steps, 1, MAX_STEPS)
        _int_in("save_every", self.save_every, 1, MAX_STEPS)
        _int_in("logging_every", self.logging_every, 1, MAX_STEPS)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready, for lineage (`from_dict` reads it back)."""
        data = asdict(self)
        data["lora_targets"] = list(self.lora_targets)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FineTuneConfig:
        """A config from `as_dict()`'s shape, ignoring other keys (not validated)."""
        names = {f.name for f in fields(cls)}
        kwargs = {k: v for k, v in data.items() if k in names}
        if isinstance(kwargs.get("lora_targets"), list):
            kwargs["lora_targets"] = tuple(kwargs["lora_targets"])
        return cls(**kwargs)


def _int_in(name: str, value: Any, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise FineTuneInputError(
            f"{name}: must be a whole number from {low} to {high} (got {value!r})", name
        )
    if not low <= value <= high:
        raise FineTuneInputError(f"{name}: must be from {low} to {high} (got {value})", name)


def _number_in(
    name: str,
    value: Any,
    low: float,
    high: float,
    *,
    low_open: bool = False,
    high_open: bool = False,
) -> None:
    bounds = f"{'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise FineTuneInputError(
            f"{name}: must be a finite number in {bounds} (got {value!r})", name
        )
    if value < low or value > high or (low_open and value == low) or (high_open and value == high):
        raise FineTuneInputError(f"{name}: must be in {bounds} (got {value:g})", name)


@dataclass
class TrainProgress:
    step: int  # optimizer steps done
    total_steps: int
    epoch: float
    loss: float | None  # the loss logged at `step` (None: a step's end, not a log)
    learning_rate: float | None  # the learning rate logged with the loss
    tokens_seen: int  # non-padding input tokens of every batch so far (resumed runs included)
    elapsed_s: float  # training seconds of the run so far, before a stop and resume included
    rows_trimmed: int = 0  # rows whose earliest turns were left out to fit max_length
    rows_dropped: list[int] = field(default_factory=list)  # numbers (from 1) of rows left out


@dataclass
class TrainResult:
    result_dir: str  # out_dir/adapter (LoRA) or out_dir/model (full)
    method: str
    steps: int
    total_steps: int
    first_loss: float | None
    final_loss: float | None
    losses: list[list[float]] = field(default_factory=list)  # [[step, loss], ...]
    tokens_seen: int = 0
    # training seconds of the whole run (before a stop and resume included), not counting the
    # rows' building, the model's loading or the result's saving
    train_s: float = 0.0
    resumed_from_step: int | None = None
    rows: int = 0  # rows trained on
    rows_trimmed: int = 0  # of those, rows whose earliest turns were left out to fit max_length
    rows_dropped: list[int] = field(default_factory=list)  # numbers (from 1) of rows left out

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class FineTuneCancelled(Exception):
    """`should_stop()` answered True: a checkpoint of `step` is saved; `train` resumes from it."""

    def __init__(self, step: int, *, saved: bool = True, elapsed_s: float | None = None):
        super().__init__(
            f"fine-tuning stopped at step {step}; its checkpoint is saved"
            if saved
            else "fine-tuning stopped before its first step"
        )
        self.step = step
        self.saved = saved
        self.elapsed_s = elapsed_s  # training seconds of the run so far (None: before it trained)


class FineTuneInputError(ValueError):
    """A fine-tune its input cannot make (its settings, its base folder, its rows): the message
    says what to change, starting with the config field at fault (`field`) when there is one."""

    def __init__(self, message: str, field: str | None = None):
        super().__init__(message)
        self.field = field


ProgressCallback = Callable[[TrainProgress], None]
StopCheck = Callable[[], bool]


def clean_rows(rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The rows' prompt and completion (other keys dropped), checked: each a list of
    {role, content} messages with string content, the completion not empty. Rows are numbered
    from 1 in the messages."""
    cleaned: list[dict[str, Any]] = []
    for number, row in enumerate(rows, start=1):
        if not isinstance(row, Mapping):
            raise FineTuneInputError(f"row {number}: not an object with prompt and completion")
        for key in ("prompt", "completion"):
            if key not in row:
                raise FineTuneInputError(
                    f"row {number}: no {key!r} (wm-turns rows have prompt and completion)"
                )
        prompt = _messages(row["prompt"], number, "prompt")
        completion = _messages(row["completion"], number, "completion")
        if not completion:
            raise FineTuneInputError(f"row {number}: the completion has no message")
        cleaned.append({"prompt": prompt, "completion": completion})
    if not cleaned:
        raise FineTuneInputError("no rows to train on")
    return cleaned


def _messages(value: Any, number: int, key: str) -> list[dict[str, str]]:
    if not isinstance(value, list):
        raise FineTuneInputError(f"row {number}: {key} must be a list of messages")
    out = []
    for i, message in enumerate(value, start=1):
        if not isinstance(message, Mapping):
            raise FineTuneInputError(f"row {number}, {key} message {i}: not an object")
        extra = sorted(set(message) - {"role", "content"})
        if extra:
            raise FineTuneInputError(
                f"row {number}, {key} message {i}: only role and content are trained on "
                f"(found {', '.join(map(repr, extra))})"
            )
        role, content = message.get("role"), message.get("content")
        if not isinstance(role, str) or not role or not isinstance(content, str):
            raise FineTuneInputError(
                f"row {number}, {key} message {i}: needs a role and a text content"
            )
        out.append({"role": role, "content": content})
    return out


@dataclass
class FittedRows:
    """The rows as they train: each fitted into max_length by leaving out its earliest turns."""

    rows: list[dict[str, Any]]  # the rows that train (prompt, completion, row_number)
    tokens: list[int]  # each one's prompt+completion tokens, as the trainer tokenizes it
    trimmed: list[int]  # numbers (from 1) of rows whose earliest turns were left out
    dropped: list[int]  # numbers of rows that do not fit even with no earlier turn
    shortest: int  # the fewest tokens any row can have (its system messages, turn, completion)


def _turns(prompt: list[dict[str, str]]) -> tuple[list[dict], list[list[dict]], list[dict]]:
    """(its leading system messages, its earlier turns, its current turn): a `wm-turns` prompt is
    [system, user (turn 1), assistant (observation 1), ..., user (the current turn)]; an earlier
    turn is a user message with the messages after it, the current turn its last user message
    on. A prompt with no user message has no earlier turn."""
    head = 0
    while head < len(prompt) and prompt[head]["role"] == "system":
        head += 1
    rest = prompt[head:]
    users = [i for i, m in enumerate(rest) if m["role"] == "user"]
    if not users:
        return prompt[:head], [], rest
    turns: list[list[dict]] = []
    for message in rest[: users[-1]]:
        if message["role"] == "user" or not turns:
            turns.append([message])
        else:
            turns[-1].append(message)
    return prompt[:head], turns, rest[users[-1] :]


def _fit_row(
    prompt: list[dict[str, str]],
    completion: list[dict[str, str]],
    count: Callable[[list[dict[str, str]]], int],
    max_length: int,
) -> tuple[list[dict[str, str]] | None, int, int]:
    """(the prompt without the fewest earliest turns that fits, or None; its row's tokens; the
    row's tokens with no earlier turn)."""
    head, turns, current = _turns(prompt)
    lengths: dict[int, int] = {}

    def from_turn(k: int) -> list[dict[str, str]]:
        return head + [m for turn in turns[k:] for m in turn] + current

    def length(k: int) -> int:
        if k not in lengths:
            lengths[k] = count(from_turn(k) + completion)
        return lengths[k]

    least = length(len(turns))
    if least > max_length:
        return None, least, least
    if length(0) <= max_length:
        return prompt, length(0), least
    # halving: a row's length grows with each earlier turn it keeps
    low, high = 0, len(turns)  # length(low) does not fit, length(high) does
    while high - low > 1:
        middle = (low + high) // 2
        if length(middle) <= max_length:
            high = middle
        else:
            low = middle
    return from_turn(high), length(high), least


def fit_rows(rows: list[dict[str, Any]], tokenizer: Any, max_length: int) -> FittedRows:
    """Fit each row (from `clean_rows`) into `max_length` tokens, counted as the trainer
    tokenizes it (the chat template over prompt + completion), by leaving out the fewest of its
    earliest turns; the system messages, the current turn and the completion are always kept.
    A row that does not fit even with no earlier turn is left out (`dropped`); when every row
    is, FineTuneInputError names the shortest row's length."""

    def count(messages: list[dict[str, str]]) -> int:
        encoded = tokenizer.apply_chat_template(messages, tokenize=True, return_dict=True)
        return len(encoded["input_ids"])

    fitted = FittedRows(rows=[], tokens=[], trimmed=[], dropped=[], shortest=0)
    shortest: int | None = None
    for number, row in enumerate(rows, start=1):
        prompt, tokens, least = _fit_row(row["prompt"], row["completion"], count, max_length)
        shortest = least if shortest is None else min(shortest, least)
        if prompt is None:
            fitted.dropped.append(number)
            continue
        if len(prompt) < len(row["prompt"]):
            fitted.trimmed.append(number)
        fitted.rows.append(
            {"prompt": prompt, "completion": row["completion"], "row_number": number}
        )
        fitted.tokens.append(tokens)
    fitted.shortest = shortest or 0
    if not fitted.rows:
        raise FineTuneInputError(
            f"max_length: no row fits in {max_length} tokens, even with none of its earlier "
            f"turns (the shortest, its system message, its own turn and its target, is "
            f"{fitted.shortest} tokens): raise max length to at least {fitted.shortest}",
            "max_length",
        )
    return fitted


def _base_dir(config: FineTuneConfig) -> Path:
    base = Path(config.base_model).expanduser()
    if not base.is_dir():
        raise FineTuneInputError(
            f"base model folder {config.base_model!r} does not exist", "base_model"
        )
    if not (base / "config.json").is_file():
        raise FineTuneInputError(
            f"base model folder {config.base_model!r} has no config.json", "base_model"
        )
    return base.resolve()


def last_checkpoint(out_dir: str | Path) -> tuple[str, int] | None:
    """(path, step) of the newest checkpoint under out_dir/checkpoints, if any."""
    folder = Path(out_dir) / CHECKPOINTS_DIR
    if not folder.is_dir():
        return None
    best: tuple[str, int] | None = None
    for child in folder.iterdir():
        name = child.name
        if child.is_dir() and name.startswith("checkpoint-") and name[11:].isdigit():
            step = int(name[11:])
            if (child / "trainer_state.json").is_file() and (best is None or step > best[1]):
                best = (str(child), step)
    return best


@dataclass
class _Built:
    trainer: Any  # trl.SFTTrainer
    base: str  # the absolute base folder
    router_logits: bool | None  # the base config's output_router_logits (TRL switches it on)
    fitted: FittedRows


def build_trainer(
    rows: Iterable[Mapping[str, Any]],
    config: FineTuneConfig,
    out_dir: str | Path,
    callbacks: Iterable[Any] = (),
) -> Any:
    """The SFTTrainer `train` runs (its dataset tokenized and masked), for inspection.
    Raises ValueError for a config, a base folder or rows that cannot train."""
    return _build(rows, config, out_dir, callbacks).trainer


def _build(
    rows: Iterable[Mapping[str, Any]],
    config: FineTuneConfig,
    out_dir: str | Path,
    callbacks: Iterable[Any],
) -> _Built:
    config.validate()
    base = _base_dir(config)
    cleaned = clean_rows(rows)
    try:
        import torch
        from datasets import Dataset
        from peft import LoraConfig
        from transformers import AutoModelForCausalLM, AutoTokenizer, PrinterCallback
        from trl import SFTConfig, SFTTrainer
    except ImportError as e:  # pragma: no cover - the image without the model extra
        raise RuntimeError(
            "fine-tuning needs torch, transformers, trl and peft (the 'model' extra)"
        ) from e

    cuda = torch.cuda.is_available()
    bf16 = cuda and torch.cuda.is_bf16_supported()
    # LoRA trains adapter weights only: the base can stay in bf16. A full fine-tune keeps fp32
    # master weights and computes under bf16 autocast.
    dtype = torch.bfloat16 if bf16 and config.method == "lora" else torch.float32
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(base))
    except (OSError, ValueError) as e:
        raise FineTuneInputError(
            f"cannot load the tokenizer of the base model {str(base)!r}: {e}", "base_model"
        ) from e
    if not getattr(tokenizer, "chat_template", None):
        raise FineTuneInputError(
            f"the tokenizer of {str(base)!r} has no chat template", "base_model"
        )
    # before the model loads: rows that cannot fit are told at once
    fitted = fit_rows(cleaned, tokenizer, config.max_length)
    try:
        model = AutoModelForCausalLM.from_pretrained(str(base), dtype=dtype)
    except (OSError, ValueError) as e:
        raise FineTuneInputError(
            f"cannot load the base model {str(base)!r}: {e}", "base_model"
        ) from e

    text_config = model.config.get_text_config()
    router_logits = getattr(text_config, "output_router_logits", None)
    args = SFTConfig(
        output_dir=str(Path(out_dir) / CHECKPOINTS_DIR),
        num_train_epochs=float(config.epochs),
        max_steps=config.max_steps if config.max_steps is not None else -1,
        learning_rate=float(config.learning_rate),
        per_device_train_batch_size=config.batch_size,
        gradient_accumulation_steps=config.grad_accum,
        max_length=config.max_length,
        completion_only_loss=True,  # the completion is the reviewed target; the prompt is context
        packing=False,
        seed=config.seed,
        data_seed=config.seed,
        logging_strategy="steps",
        logging_steps=config.logging_every,
        save_strategy="steps",
        save_steps=config.save_every,
        save_total_limit=2,
        report_to="none",
        bf16=bf16,
        fp16=False,
        use_cpu=not cuda,
        include_num_input_tokens_seen="non_padding",
        disable_tqdm=True,
        dataloader_num_workers=0,
        # Recomputing activations saves GPU memory; on CPU it would only cost time.
        gradient_checkpointing=cuda,
    )
    peft_config = None
    if config.method == "lora":
        peft_config = LoraConfig(
            task_type="CAUSAL_LM",
            r=config.lora_rank,
            lora_alpha=config.lora_alpha,
            lora_dropout=config.lora_dropout,
            target_modules=list(config.lora_targets) if config.lora_targets else "all-linear",
        )
    dataset = Dataset.from_list(fitted.rows)
    trainer = SFTTrainer(
        model=model,
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        peft_config=peft_config,
        callbacks=list(callbacks),
    )
    # The Trainer prints every log line when its progress bar is off; the caller reports instead.
    trainer.remove_callback(PrinterCallback)
    prepared: Any = trainer.train_dataset
    lost = sorted({row["row_number"] for row in fitted.rows} - set(prepared["row_number"]))
    if lost:  # the trainer tokenized a row longer than it was counted: a bug, not the input
        raise RuntimeError(
            f"the trainer left out row(s) {', '.join(map(str, lost[:10]))} that were fitted "
            f"into max_length={config.max_length} tokens"
        )
    return _Built(trainer, str(base), router_logits, fitted)


def _saved_train_s(checkpoint: str) -> float:
    """The training seconds a checkpoint was saved at (0 for one saved without them)."""
    try:
        value = float(json.loads((Path(checkpoint) / ELAPSED_FILE).read_text())["train_s"])
    except (OSError, ValueError, KeyError, TypeError):
        return 0.0
    return value if math.isfinite(value) and value >= 0 else 0.0


def _check_description(description: Mapping[str, Any] | None) -> dict[str, Any]:
    if description is None:
        return {}
    if not isinstance(description, Mapping) or not all(isinstance(k, str) for k in description):
        raise TypeError("description: must be a dict with string keys")
    data = dict(description)
    try:
        json.dumps(data)
    except (TypeError, ValueError) as e:
        raise TypeError(f"description: must be JSON-ready ({e})") from None
    return data


def train(
    rows: Iterable[Mapping[str, Any]],
    config: FineTuneConfig,
    out_dir: str | Path,
    *,
    on_progress: ProgressCallback | None = None,
    should_stop: StopCheck | None = None,
    resume: bool = True,
    description: Mapping[str, Any] | None = None,
) -> TrainResult:
    """Fine-tune `config.base_model` on `rows` into `out_dir` (see the module's docstring).

    `on_progress` is called at the end of every optimizer step (loss None) and at every log
    (the loss logged, with the step it belongs to); `should_stop` is asked at the end of every
    step: True saves a checkpoint and raises FineTuneCancelled. With `resume`, a checkpoint
    under out_dir/checkpoints is continued from (its training time too); without, earlier
    checkpoints are removed first. `description` (JSON-ready: e.g. the dataset and version
    the rows come from) goes into the result folder's README.md and studio_lineage.json."""
    from transformers import TrainerCallback

    out = Path(out_dir)
    config.validate()
    lineage_description = _check_description(description)
    if not resume:
        shutil.rmtree(out / CHECKPOINTS_DIR, ignore_errors=True)
    checkpoint = last_checkpoint(out) if resume else None
    if should_stop is not None and should_stop():
        raise FineTuneCancelled(checkpoint[1] if checkpoint else 0, saved=checkpoint is not None)
    fitted: list[FittedRows] = []

    class _Watch(TrainerCallback):
        def __init__(self, before_s: float) -> None:
            self.before_s = before_s  # training seconds of the run before this call
            self.started: float | None = None  # when this call's training began
            self.stopped_at: int | None = None

        def elapsed(self) -> float:
            since = 0.0 if self.started is None else time.perf_counter() - self.started
            return self.before_s + since

        def _report(self, state: Any, loss: float | None, lr: float | None) -> None:
            if on_progress is None:
                return
            fit = fitted[0] if fitted else None
            on_progress(
                TrainProgress(
                    step=int(state.global_step),
                    total_steps=int(state.max_steps),
                    epoch=float(state.epoch or 0.0),
                    loss=loss,
                    learning_rate=lr,
                    tokens_seen=int(state.num_input_tokens_seen),
                    elapsed_s=self.elapsed(),
                    rows_trimmed=len(fit.trimmed) if fit else 0,
                    rows_dropped=list(fit.dropped) if fit else [],
                )
            )

        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any):
            if logs and "loss" in logs:
                lr = logs.get("learning_rate")
                self._report(state, float(logs["loss"]), None if lr is None else float(lr))

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any):
            self._report(state, None, None)
            if should_stop is not None and state.global_step < state.max_steps and should_stop():
                self.stopped_at = int(state.global_step)
                control.should_save = True
                control.should_training_stop = True
            return control

        def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any):
            folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
            if folder.is_dir():
                record = {"train_s": self.elapsed(), "step": int(state.global_step)}
                (folder / ELAPSED_FILE).write_text(json.dumps(record))

    watch = _Watch(_saved_train_s(checkpoint[0]) if checkpoint else 0.0)
    built = _build(rows, config, out, [watch])
    fitted.append(built.fitted)
    trainer = built.trainer
    # the training time: from here (the rows built, the model loaded), across resumes
    watch.started = time.perf_counter()
    trainer.train(resume_from_checkpoint=checkpoint[0] if checkpoint else None)
    train_s = watch.elapsed()
    state = trainer.state
    if watch.stopped_at is not None:
        raise FineTuneCancelled(watch.stopped_at, elapsed_s=train_s)

    losses = [
        [int(entry["step"]), float(entry["loss"])]
        for entry in state.log_history
        if "loss" in entry and "step" in entry
    ]
    result_dir = out / (ADAPTER_DIR if config.method == "lora" else MODEL_DIR)
    result = TrainResult(
        result_dir=str(result_dir.resolve()),
        method=config.method,
        steps=int(state.global_step),
        total_steps=int(state.max_steps),
        first_loss=losses[0][1] if losses else None,
        final_loss=losses[-1][1] if losses else None,
        losses=losses,
        tokens_seen=int(state.num_input_tokens_seen),
        train_s=train_s,
        resumed_from_step=checkpoint[1] if checkpoint else None,
        rows=len(built.fitted.rows),
        rows_trimmed=len(built.fitted.trimmed),
        rows_dropped=list(built.fitted.dropped),
    )
    _save_result(built, config, result_dir, result, lineage_description)
    return result


_MARKDOWN_SPECIALS = "\\`*_[]<>|#~!"


def _md(value: Any) -> str:
    """A value as one line of Markdown text, its markup characters escaped."""
    text = value if isinstance(value, str) else json.dumps(value)
    text = " ".join(text.split())
    return "".join(f"\\{c}" if c in _MARKDOWN_SPECIALS else c for c in text)


def _module_name(description: Mapping[str, Any]) -> str:
    """A serving module name for the loading lines: the description's name, as a slug."""
    raw = str(description.get("name") or "world-model").lower()
    slug = "".join(c if c.isalnum() else "-" for c in raw).strip("-")
    return "-".join(part for part in slug.split("-") if part)[:64] or "world-model"


def model_card(
    config: FineTuneConfig,
    base: str,
    folder: str,
    result: TrainResult,
    description: Mapping[str, Any],
) -> str:
    """The README.md of a result folder: what it is, its lineage and settings, how to load it."""
    lora = config.method == "lora"
    what = "A LoRA adapter" if lora else "A fully fine-tuned copy"
    lines = [
        f"# {'LoRA adapter' if lora else 'Fine-tuned model'} of {_md(Path(base).name)}",
        "",
        f"{what} of the base model `{base}`, trained by AgentWorld Studio on {result.rows} "
        f"row{'s' if result.rows != 1 else ''} (`wm-turns`: each row's prompt is the history "
        "of a trajectory's branch, and its completion, the reviewed observation, is the only "
        "text trained on).",
        "",
    ]
    if description:
        lines += ["## Lineage", ""]
        lines += [f"- {_md(key.replace('_', ' '))}: {_md(v)}" for key, v in description.items()]
        lines.append("")
    length = (
        f"{config.epochs:g} epoch{'s' if config.epochs != 1 else ''}"
        if config.max_steps is None
        else f"{config.max_steps} optimizer steps (max steps, in place of the epochs)"
    )
    loss = (
        f"{result.first_loss:.4f} at the first step, {result.final_loss:.4f} at the last"
        if result.first_loss is not None and result.final_loss is not None
        else "not logged"
    )
    settings = [
        ("method", config.method),
        *(
            [
                ("LoRA rank", config.lora_rank),
                ("LoRA alpha", config.lora_alpha),
                ("LoRA dropout", config.lora_dropout),
                ("LoRA target modules", ", ".join(config.lora_targets) or "all linear layers"),
            ]
            if lora
            else []
        ),
        ("training length", length),
        ("learning rate", f"{config.learning_rate:g}"),
        ("max length", f"{config.max_length} tokens"),
        ("batch size", f"{config.batch_size} x {config.grad_accum} gradient accumulation"),
        ("seed", config.seed),
        ("steps done", f"{result.steps} of {result.total_steps}"),
        ("training loss", loss),
        ("tokens seen", f"{result.tokens_seen:,}"),
        ("training time", f"{result.train_s:.1f} s"),
        (
            "rows fitted into max length",
            f"{result.rows_trimmed} trimmed (their earliest turns left out), "
            f"{len(result.rows_dropped)} left out",
        ),
    ]
    lines += ["## Settings", "", "| setting | value |", "| --- | --- |"]
    lines += [f"| {name} | {_md(value)} |" for name, value in settings]
    name = _module_name(description)
    lines += ["", "## Loading", ""]
    if lora:
        rank_flag = f" --max-lora-rank {config.lora_rank}" if config.lora_rank > 16 else ""
        lines += [
            "With PEFT:",
            "",
            "```python",
            "from peft import AutoPeftModelForCausalLM",
            "",
            f"model = AutoPeftModelForCausalLM.from_pretrained({folder!r})",
            "```",
            "",
            "With vLLM (requests then name the model by the module name):",
            "",
            "```sh",
            f"vllm serve {base} --enable-lora --lora-modules {name}={folder}{rank_flag}",
            "```",
            "",
            "With SGLang:",
            "",
            "```sh",
            f"python -m sglang.launch_server --model-path {base} --lora-paths {name}={folder}",
            "```",
            "",
            "The adapter names its base by the absolute path above (adapter_config.json's "
            "`base_model_name_or_path`): on another machine, load the base from where it is.",
        ]
    else:
        lines += [
            "A transformers model folder: `AutoModelForCausalLM.from_pretrained` loads it, "
            "and vLLM or SGLang serve it as any model folder:",
            "",
            "```sh",
            f"vllm serve {folder} --served-model-name {name}",
            f"python -m sglang.launch_server --model-path {folder} --served-model-name {name}",
            "```",
        ]
    lines += ["", f"`{LINEAGE_FILE}` holds the settings and figures as JSON.", ""]
    return "\n".join(lines)


def _save_result(
    built: _Built,
    config: FineTuneConfig,
    result_dir: Path,
    result: TrainResult,
    description: Mapping[str, Any],
) -> None:
    """Write the adapter (LoRA) or the model (full) with the tokenizer and the lineage into a
    partial folder, then move it into place (a reader never sees a half-written folder)."""
    import peft
    import torch
    import transformers
    import trl

    trainer, base = built.trainer, built.base
    partial = result_dir.with_name(f".{result_dir.name}.partial")
    shutil.rmtree(partial, ignore_errors=True)
    model = trainer.model
    if config.method == "lora":
        model.save_pretrained(str(partial))
        # The adapter names its base by the absolute path the studio loads it from.
        adapter_config = partial / "adapter_config.json"
        data = json.loads(adapter_config.read_text())
        data["base_model_name_or_path"] = base
        adapter_config.write_text(json.dumps(data, indent=2, sort_keys=True))
    else:
        # Trained with the MoE router loss: the saved model answers as the base did.
        text_config = model.config.get_text_config()
        if built.router_logits is not None:
            text_config.output_router_logits = built.router_logits
        model.config.use_cache = True
        if trainer.args.bf16:
            model.to(torch.bfloat16)
        model.save_pretrained(str(partial))
    trainer.processing_class.save_pretrained(str(partial))
    lineage = {
        "kind": "studio-finetune",
        "base_model": base,
        "config": config.as_dict(),
        "result": {k: v for k, v in result.as_dict().items() if k != "result_dir"},
        "rows": len(trainer.train_dataset),
        "description": dict(description),
        "versions": {
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "trl": trl.__version__,
            "peft": peft.__version__,
        },
    }
    (partial / LINEAGE_FILE).write_text(json.dumps(lineage, indent=2, sort_keys=True))
    # our card, in place of PEFT's blank one
    card = model_card(config, base, str(result_dir.resolve()), result, description)
    (partial / README_FILE).write_text(card)
    shutil.rmtree(result_dir, ignore_errors=True)
    os.replace(partial, result_dir)


def check(out_dir: str | Path, *, steps: int = 24) -> dict[str, Any]:
    """The fine-tune path end to end on the tiny model (`inference.tiny`), on CUDA when there
    is one: a LoRA fine-tune overfit on one row, then the adapter loaded by the hf backend and
    answering greedily, beside its base. Returns the figures (`main` prints them)."""
    import torch

    from inference.backends.hf import HFBackend, load_model
    from inference.tiny import build_tiny_model
    from inference.types import GenerationRequest, SamplingParams

    out = Path(out_dir)
    base = build_tiny_model(out / "tiny-base")
    prompt = [
        {"role": "system", "content": "You are a world model."},
        {"role": "user", "content": "**Action:** search[weather Paris]"},
    ]
    target = "<predicted_observation>Paris: 18 C, light rain.</predicted_observation>"
    row = {"prompt": prompt, "completion": [{"role": "assistant", "content": target}]}
    config = FineTuneConfig(
        base_model=base, max_steps=steps, learning_rate=2e-2, max_length=128, lora_rank=16
    )
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    result = train([row] * 4, config, out / "run", resume=False)
    peak_train = torch.cuda.max_memory_allocated() if device == "cuda" else 0
    greedy = SamplingParams(temperature=0, max_tokens=40)
    answers = {}
    for name, model in (("adapter", result.result_dir), ("base", base)):
        [completion] = HFBackend(model=model, device=device).generate(
            GenerationRequest(messages=prompt, params=greedy)
        )
        answers[name] = completion.text
    merged = load_model(result.result_dir, device).model
    return {
        "device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu",
        "steps": result.steps,
        "first_loss": result.first_loss,
        "final_loss": result.final_loss,
        "tokens_seen": result.tokens_seen,
        "train_s": round(result.train_s, 2),
        "peak_train_gib": round(peak_train / 2**30, 3),
        "merged_model": type(merged).__name__,
        "merged_dtype": str(next(merged.parameters()).dtype),
        "adapter_answer": answers["adapter"],
        "base_answer": answers["base"],
        "adapter_answers_target": answers["adapter"] == target,
        "adapter_differs_from_base": answers["adapter"] != answers["base"],
    }


def main(argv: list[str] | None = None) -> int:  # pragma: no cover - the GPU check's entry
    import argparse
    import tempfile

    parser = argparse.ArgumentParser(
        description="Fine-tune the tiny model (LoRA) and answer with the adapter: a smoke check."
    )
    parser.add_argument("--check", action="store_true", required=True)
    parser.add_argument("--out", default=None, help="folder for the run (default: a temp dir)")
    parser.add_argument("--steps", type=int, default=24)
    args = parser.parse_args(argv)
    out = args.out or tempfile.mkdtemp(prefix="finetune-check-")
    figures = check(out, steps=args.steps)
    for key, value in figures.items():
        print(f"{key}: {value}")
    ok = (
        figures["final_loss"] is not None
        and figures["first_loss"] is not None
        and figures["final_loss"] < figures["first_loss"] / 3
        and figures["adapter_differs_from_base"]
    )
    print(
        "finetune check:",
        "ok" if ok else "FAILED (the loss did not drop, or the adapter answers as its base)",
    )
    return 0 if ok else 1


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
