"""A LoRA adapter folder as the model of the in-process `hf` backend: merged into its base,
cached apart from it, and answering with what it was trained on."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from inference.backends.errors import BackendError
from inference.backends.hf import HFBackend, adapter_base, load_model, loaded_models
from inference.finetune import FineTuneConfig, train
from inference.types import GenerationRequest, SamplingParams
from tests.support.tiny_model import tiny_model_dir


@pytest.fixture(scope="session")
def base_model() -> str:
    """The tiny random qwen3_5_moe model, built once per test session."""
    return tiny_model_dir()


PROMPT = [
    {"role": "system", "content": "You are a world model."},
    {"role": "user", "content": "**Action:** search[weather Paris]"},
]
TARGET = "<predicted_observation>Paris: 18 C, light rain.</predicted_observation>"
GREEDY = SamplingParams(temperature=0, max_tokens=40)


@pytest.fixture(scope="module")
def adapter(base_model, tmp_path_factory) -> str:
    """An adapter overfit on one row: its greedy answer to PROMPT is TARGET."""
    row = {"prompt": PROMPT, "completion": [{"role": "assistant", "content": TARGET}]}
    config = FineTuneConfig(
        base_model=base_model, max_steps=24, learning_rate=2e-2, max_length=128, lora_rank=16
    )
    result = train([row] * 4, config, tmp_path_factory.mktemp("finetune"))
    assert result.final_loss is not None and result.final_loss < 0.2, result.losses
    return result.result_dir


def greedy(model: str) -> str:
    [completion] = HFBackend(model=model, device="cpu").generate(
        GenerationRequest(messages=PROMPT, params=GREEDY)
    )
    return completion.text


def test_the_adapter_loads_merged_and_answers_with_the_trained_completion(adapter, base_model):
    assert adapter_base(adapter) == str(Path(base_model).resolve())
    assert adapter_base(base_model) is None

    loaded = load_model(adapter, "cpu")
    # a plain transformers model: no PEFT wrapper, no LoRA weights left beside the merged ones
    assert type(loaded.model).__name__ == "Qwen3_5MoeForCausalLM"
    assert not any("lora_" in name for name, _ in loaded.model.named_parameters())
    assert loaded.model.config.layer_types[2] == "full_attention"
    assert loaded.eos_token_ids

    assert greedy(adapter) == TARGET
    assert greedy(base_model) != TARGET
    # the adapter and its base are two entries of the process's cache
    assert {(adapter, "cpu"), (base_model, "cpu")} <= set(loaded_models())
    assert load_model(adapter, "cpu") is loaded


def test_an_adapter_without_tokenizer_files_uses_the_base_tokenizer(adapter, tmp_path):
    bare = tmp_path / "bare-adapter"
    bare.mkdir()
    for name in ("adapter_config.json", "adapter_model.safetensors"):
        shutil.copy(Path(adapter) / name, bare / name)
    assert greedy(str(bare)) == TARGET


def copy_adapter(adapter: str, dest: Path) -> Path:
    shutil.copytree(adapter, dest)
    return dest


def test_a_missing_base_is_a_backend_error_naming_the_folder(adapter, tmp_path):
    folder = copy_adapter(adapter, tmp_path / "orphan")
    config_file = folder / "adapter_config.json"
    data = json.loads(config_file.read_text())
    data["base_model_name_or_path"] = str(tmp_path / "gone")
    config_file.write_text(json.dumps(data))
    with pytest.raises(BackendError) as e:
        load_model(str(folder), "cpu")
    assert str(folder) in str(e.value) and "missing" in str(e.value)


@pytest.mark.parametrize(
    "damage, message",
    [
        ("weights", "cannot apply the adapter folder"),
        ("config", "unreadable adapter_config.json"),
        ("no-base", "names no base model"),
    ],
)
def test_a_broken_adapter_is_a_backend_error_naming_the_folder(adapter, tmp_path, damage, message):
    folder = copy_adapter(adapter, tmp_path / f"broken-{damage}")
    if damage == "weights":
        (folder / "adapter_model.safetensors").write_bytes(b"not safetensors")
    elif damage == "config":
        (folder / "adapter_config.json").write_text("{not json")
    else:
        data = json.loads((folder / "adapter_config.json").read_text())
        del data["base_model_name_or_path"]
        (folder / "adapter_config.json").write_text(json.dumps(data))
    with pytest.raises(BackendError) as e:
        load_model(str(folder), "cpu")
    assert message in str(e.value) and str(folder) in str(e.value)
