"""The Django-free fine-tune runner (`inference.finetune`) on the tiny qwen3_5_moe model, CPU."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from inference.finetune import (
    ELAPSED_FILE,
    FineTuneCancelled,
    FineTuneConfig,
    FineTuneInputError,
    TrainProgress,
    build_trainer,
    fit_rows,
    last_checkpoint,
    train,
)
from tests.support.tiny_model import tiny_model_dir


@pytest.fixture(scope="session")
def base_model() -> str:
    """The tiny random qwen3_5_moe model, built once per test session."""
    return tiny_model_dir()


SYSTEM = "You are a world model: predict the environment's observation of the agent's action."
TARGET = "<predicted_observation>Paris: 18 C, light rain.</predicted_observation>"


def wm_row(i: int, target: str = TARGET) -> dict:
    """A wm-turns row as the export writes it (meta included: the runner drops it)."""
    return {
        "prompt": [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": f"### Turn 1\n**Action:** search[weather Paris {i % 2}]"},
        ],
        "completion": [{"role": "assistant", "content": target}],
        "meta": {"trajectory_id": i, "corrected": False},
    }


def rows(n: int = 8) -> list[dict]:
    return [wm_row(i) for i in range(n)]


def config(base: str, **kw) -> FineTuneConfig:
    defaults = dict(max_length=256, learning_rate=5e-3, save_every=100)
    return FineTuneConfig(base_model=base, **{**defaults, **kw})


# --- config -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"base_model": " "}, "base_model"),
        ({"method": "qlora"}, "method: must be one of lora, full"),
        ({"lora_rank": 0}, "lora_rank: must be from 1 to 256"),
        ({"lora_rank": 257}, "lora_rank: must be from 1 to 256"),
        ({"lora_rank": True}, "lora_rank: must be a whole number"),
        ({"lora_alpha": 0}, "lora_alpha: must be from 1 to 4096"),
        ({"lora_dropout": 1.0}, "lora_dropout: must be in [0, 1)"),
        ({"lora_targets": ("q_proj", "x.y")}, "lora_targets: 'x.y' is not a module name"),
        ({"epochs": 0}, "epochs: must be in (0, 100]"),
        ({"epochs": math.inf}, "epochs: must be a finite number in (0, 100]"),
        ({"learning_rate": math.nan}, "learning_rate: must be a finite number in (0, 1]"),
        ({"learning_rate": 1.5}, "learning_rate: must be in (0, 1]"),
        ({"max_length": 8}, "max_length: must be from 16 to 131072"),
        ({"batch_size": 0}, "batch_size: must be from 1 to 1024"),
        ({"grad_accum": 2.0}, "grad_accum: must be a whole number"),
        ({"seed": -1}, "seed: must be from 0 to 4294967295"),
        ({"max_steps": 0}, "max_steps: must be from 1 to 1000000"),
        ({"save_every": 0}, "save_every: must be from 1"),
        ({"logging_every": 0}, "logging_every: must be from 1"),
    ],
)
def test_config_validation_names_the_field_and_its_bounds(changes, message):
    cfg = FineTuneConfig(**{"base_model": "/models/base", **changes})
    with pytest.raises(ValueError) as e:
        cfg.validate()
    assert message in str(e.value)


def test_config_defaults_are_valid_and_round_trip_through_as_dict():
    cfg = FineTuneConfig(base_model="/models/base", lora_targets=("q_proj", "v_proj"), max_steps=5)
    cfg.validate()
    data = cfg.as_dict()
    assert data["lora_targets"] == ["q_proj", "v_proj"]
    assert json.loads(json.dumps(data)) == data
    assert FineTuneConfig.from_dict({**data, "unknown": 1}) == cfg


# --- user errors --------------------------------------------------------------------------


def test_errors_a_user_can_cause_are_value_errors_naming_what_is_wrong(base_model, tmp_path):
    with pytest.raises(ValueError, match="base model folder '/nowhere/model' does not exist"):
        train(rows(), config("/nowhere/model"), tmp_path)
    with pytest.raises(ValueError, match="no rows to train on"):
        train([], config(base_model), tmp_path)
    with pytest.raises(ValueError, match="row 2: no 'completion'"):
        train([wm_row(0), {"prompt": []}], config(base_model), tmp_path)
    tool_row = wm_row(0)
    tool_row["completion"] = [{"role": "assistant", "content": "", "tool_calls": []}]
    with pytest.raises(ValueError, match="row 1, completion message 1: only role and content"):
        train([tool_row], config(base_model), tmp_path)
    with pytest.raises(ValueError, match="row 1: the completion has no message"):
        train([{"prompt": [], "completion": []}], config(base_model), tmp_path)
    # A row whose own turn and target do not fit in max_length trains nothing: when no row
    # fits, the run is refused before the model loads, naming the length needed.
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(base_model)
    long_row = wm_row(1)
    long_row["prompt"][1]["content"] = "**Action:** " + "search[weather] " * 40
    need = len(tok.apply_chat_template(long_row["prompt"] + long_row["completion"])["input_ids"])
    with pytest.raises(FineTuneInputError) as refused:
        train([long_row, long_row], config(base_model, max_length=need - 1), tmp_path)
    assert refused.value.field == "max_length"
    assert f"no row fits in {need - 1} tokens" in str(refused.value)
    assert f"raise max length to at least {need}" in str(refused.value)
    assert not (tmp_path / "adapter").exists()


# --- what trains --------------------------------------------------------------------------


def test_only_the_completion_tokens_have_labels(base_model, tmp_path):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(base_model)
    data = [
        wm_row(0),
        wm_row(1, target="<predicted_observation>No results.</predicted_observation>"),
    ]
    trainer = build_trainer(data, config(base_model), tmp_path)
    for row, example in zip(data, trainer.train_dataset, strict=True):
        prompt_ids = tok.apply_chat_template(row["prompt"], add_generation_prompt=True)["input_ids"]
        labels = example["labels"]
        # every prompt token (the context, through the opened assistant turn) is masked ...
        assert labels[: len(prompt_ids)] == [-100] * len(prompt_ids)
        assert example["input_ids"][: len(prompt_ids)] == prompt_ids
        # ... and every later token, the completion and its end of turn, trains
        trained = labels[len(prompt_ids) :]
        assert -100 not in trained
        text = row["completion"][0]["content"]
        assert tok.decode(trained) == text + "<|im_end|>\n"
    # The batches the model sees carry the same mask.
    batch = next(iter(trainer.get_train_dataloader()))
    assert set(batch) >= {"input_ids", "labels", "attention_mask"}
    assert "row_number" not in batch and "meta" not in batch
    masked = (batch["labels"] == -100).sum().item()
    assert 0 < masked < batch["labels"].numel()


def history_row(earlier: int, action: str = "search[weather Paris]") -> dict:
    """A wm-turns row of turn `earlier + 1`: the system message, `earlier` user/assistant turns
    (the history) and the current turn's prompt; the reviewed target as its completion."""
    prompt = [{"role": "system", "content": SYSTEM}]
    for t in range(1, earlier + 1):
        prompt.append({"role": "user", "content": f"### Turn {t}\n**Action:** search[city {t}]"})
        prompt.append(
            {"role": "assistant", "content": f"<predicted_observation>\nCity {t}: {t} C.\n"}
        )
    prompt.append({"role": "user", "content": f"### Turn {earlier + 1}\n**Action:** {action}"})
    return {"prompt": prompt, "completion": [{"role": "assistant", "content": TARGET}]}


def row_tokens(tok, row: dict) -> int:
    return len(tok.apply_chat_template(row["prompt"] + row["completion"])["input_ids"])


def test_a_long_row_leaves_out_its_earliest_turns_and_keeps_its_target(base_model, tmp_path):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(base_model)
    long = history_row(10)
    # max_length: what the row is with its last 3 earlier turns (turns 8, 9, 10 of the history)
    kept = {**long, "prompt": long["prompt"][:1] + long["prompt"][15:]}
    assert "search[city 8]" in kept["prompt"][1]["content"]
    max_length = row_tokens(tok, kept)
    assert row_tokens(tok, long) > max_length
    too_long = history_row(0, action="search[" + " ".join(f"w{i}" for i in range(200)) + "]")
    assert row_tokens(tok, too_long) > max_length
    short = history_row(1)
    data = [long, too_long, short]

    fitted = fit_rows(data, tok, max_length)
    assert (fitted.trimmed, fitted.dropped) == ([1], [2])
    assert [r["row_number"] for r in fitted.rows] == [1, 3]
    assert fitted.rows[0]["prompt"] == kept["prompt"]  # the fewest turns left out
    assert fitted.rows[1]["prompt"] == short["prompt"]  # a row that fits is untouched
    assert fitted.tokens == [max_length, row_tokens(tok, short)]

    trainer = build_trainer(data, config(base_model, max_length=max_length), tmp_path)
    example = next(e for e in trainer.train_dataset if e["row_number"] == 1)
    assert len(example["input_ids"]) == max_length
    text = tok.decode(example["input_ids"])
    assert SYSTEM in text and "search[city 8]" in text and "search[weather Paris]" in text
    assert "search[city 7]" not in text and "search[city 1]" not in text
    # the completion's labels are whole: the target and its end of turn
    trained = [t for t in example["labels"] if t != -100]
    assert tok.decode(trained) == TARGET + "<|im_end|>\n"
    assert example["labels"][-len(trained) :] == trained

    seen: list[TrainProgress] = []
    result = train(
        data,
        config(base_model, max_length=max_length, max_steps=1),
        tmp_path,
        on_progress=seen.append,
    )
    assert (result.rows, result.rows_trimmed, result.rows_dropped) == (2, 1, [2])
    assert seen and all((p.rows_trimmed, p.rows_dropped) == (1, [2]) for p in seen)
    lineage = json.loads(Path(result.result_dir, "studio_lineage.json").read_text())
    assert lineage["result"]["rows_dropped"] == [2] and lineage["rows"] == 2


def test_lora_steps_lower_the_loss_and_write_a_peft_adapter(base_model, tmp_path):
    seen: list[TrainProgress] = []
    cfg = config(base_model, max_steps=20, learning_rate=1e-2, save_every=8)
    description = {"dataset": "steps", "dataset_version": 3, "name": "Paris *weather* <b>"}
    result = train(rows(), cfg, tmp_path / "run", on_progress=seen.append, description=description)

    assert (result.steps, result.total_steps, result.method) == (20, 20, "lora")
    assert result.resumed_from_step is None
    assert [s for s, _ in result.losses] == list(range(1, 21))
    assert result.first_loss == result.losses[0][1] and result.final_loss == result.losses[-1][1]
    assert result.final_loss < result.first_loss / 3, result.losses

    # progress: every step reported, tokens counted from the batches, losses as logged
    steps = [p.step for p in seen]
    assert steps == sorted(steps) and set(steps) == set(range(1, 21))
    assert all(p.total_steps == 20 for p in seen)
    tokens = [p.tokens_seen for p in seen]
    assert tokens == sorted(tokens) and tokens[0] > 0
    assert seen[-1].tokens_seen == result.tokens_seen
    assert seen[-1].loss == pytest.approx(result.final_loss)
    assert seen[-1].elapsed_s <= result.train_s
    # each loss comes with the step it was logged at (the trainer's log history), the ends of
    # steps without one
    logged = [[p.step, p.loss] for p in seen if p.loss is not None]
    assert logged == result.losses
    assert len([p for p in seen if p.loss is None]) == 20

    # the folder's card is ours (not PEFT's blank one): what it is, its lineage, how to load it
    card = (Path(result.result_dir) / "README.md").read_text()
    assert "More Information Needed" not in card
    assert f"LoRA adapter of the base model `{Path(base_model).resolve()}`" in card
    assert "trained by AgentWorld Studio on 8 rows" in card
    assert "- dataset: steps" in card and "- dataset version: 3" in card
    assert r"Paris \*weather\* \<b\>" in card  # markup of a name is escaped
    assert "| LoRA rank | 8 |" in card and "| max length | 256 tokens |" in card
    assert f"--enable-lora --lora-modules paris-weather-b={result.result_dir}" in card
    assert f"--lora-paths paris-weather-b={result.result_dir}" in card
    assert "AutoPeftModelForCausalLM.from_pretrained" in card

    adapter = Path(result.result_dir)
    assert adapter == (tmp_path / "run" / "adapter").resolve()
    files = {p.name for p in adapter.iterdir()}
    assert {"adapter_config.json", "adapter_model.safetensors", "studio_lineage.json"} <= files
    assert "tokenizer.json" in files or "tokenizer_config.json" in files
    adapter_config = json.loads((adapter / "adapter_config.json").read_text())
    assert adapter_config["base_model_name_or_path"] == str(Path(base_model).resolve())
    assert Path(adapter_config["base_model_name_or_path"]).is_absolute()
    assert adapter_config["r"] == 8 and adapter_config["lora_alpha"] == 16
    lineage = json.loads((adapter / "studio_lineage.json").read_text())
    assert lineage["config"] == cfg.as_dict()
    assert lineage["result"]["final_loss"] == result.final_loss
    assert lineage["rows"] == 8 and lineage["description"] == description
    assert (result.rows, result.rows_trimmed, result.rows_dropped) == (8, 0, [])
    # checkpoints every 8 steps and at the end; the last two kept
    checkpoints = {p.name for p in (tmp_path / "run" / "checkpoints").glob("checkpoint-*")}
    assert checkpoints == {"checkpoint-16", "checkpoint-20"}
    assert last_checkpoint(tmp_path / "run") == (
        str(tmp_path / "run" / "checkpoints" / "checkpoint-20"),
        20,
    )


def test_a_stop_saves_a_checkpoint_and_resume_ends_at_total_steps(base_model, tmp_path):
    cfg = config(base_model, max_steps=6)
    steps: list[int] = []
    elapsed: list[float] = []

    def on_progress(p: TrainProgress) -> None:
        steps.append(p.step)
        elapsed.append(p.elapsed_s)

    with pytest.raises(FineTuneCancelled) as stopped:
        train(rows(), cfg, tmp_path, on_progress=on_progress, should_stop=lambda: 2 in steps)
    assert stopped.value.step == 2
    assert last_checkpoint(tmp_path) == (str(tmp_path / "checkpoints" / "checkpoint-2"), 2)
    assert not (tmp_path / "adapter").exists()
    # the checkpoint keeps the training time so far, the stop's too
    saved = json.loads((tmp_path / "checkpoints" / "checkpoint-2" / ELAPSED_FILE).read_text())
    assert saved["step"] == 2 and saved["train_s"] >= elapsed[-1] > 0
    assert stopped.value.elapsed_s == pytest.approx(saved["train_s"], abs=1.0)
    stopped_s = elapsed[-1]

    resumed_elapsed: list[float] = []
    resumed = train(
        rows(), cfg, tmp_path, on_progress=lambda p: resumed_elapsed.append(p.elapsed_s)
    )
    assert resumed.resumed_from_step == 2
    # the resumed run's time goes on from the stopped run's
    assert resumed_elapsed[0] >= saved["train_s"] >= stopped_s
    assert resumed_elapsed == sorted(resumed_elapsed)
    assert resumed.train_s >= resumed_elapsed[-1]
    assert (resumed.steps, resumed.total_steps) == (6, 6)
    # the losses of the steps before the stop come back from the checkpoint's state
    assert [s for s, _ in resumed.losses] == [1, 2, 3, 4, 5, 6]
    assert Path(resumed.result_dir, "adapter_model.safetensors").is_file()

    # The same run without a stop ends where the resumed one did.
    straight = train(rows(), cfg, tmp_path / "straight", resume=False)
    assert straight.resumed_from_step is None
    assert straight.tokens_seen == resumed.tokens_seen
    assert straight.final_loss == pytest.approx(resumed.final_loss, rel=1e-3)


def test_resume_false_starts_over(base_model, tmp_path):
    cfg = config(base_model, max_steps=2)
    train(rows(2), cfg, tmp_path)
    again = train(rows(2), cfg, tmp_path, resume=False)
    assert again.resumed_from_step is None and again.steps == 2


def test_full_finetune_saves_a_model_the_hf_backend_loads(base_model, tmp_path):
    from inference.backends.hf import HFBackend, load_model
    from inference.types import GenerationRequest, SamplingParams

    result = train(rows(2), config(base_model, method="full", max_steps=2), tmp_path)
    model_dir = Path(result.result_dir)
    assert model_dir == (tmp_path / "model").resolve() and result.method == "full"
    assert (model_dir / "config.json").is_file() and (model_dir / "studio_lineage.json").is_file()
    assert not (model_dir / "adapter_config.json").exists()
    saved = json.loads((model_dir / "config.json").read_text())
    base = json.loads((Path(base_model) / "config.json").read_text())
    # the router loss of training is not left switched on in the saved model
    assert saved.get("output_router_logits") == base.get("output_router_logits")

    loaded = load_model(str(model_dir), "cpu")
    assert type(loaded.model).__name__ == "Qwen3_5MoeForCausalLM"
    [completion] = HFBackend(model=str(model_dir), device="cpu").generate(
        GenerationRequest(
            messages=wm_row(0)["prompt"], params=SamplingParams(temperature=0, max_tokens=8)
        )
    )
    assert completion.tokens_out > 0
