"""A tiny random-weight Qwen3.5-MoE world model, built in code so tests run the real path on CPU.

No weights can be downloaded here, so `build_tiny_model(path)` writes a model with the real
`qwen3_5_moe` architecture (hybrid linear-attention + full-attention layers, routed experts and a
shared expert) at toy sizes, plus a byte-level BPE tokenizer trained on a short built-in text
(byte-level so it encodes any string) with a chat template. Both load through the same code path
as a real checkpoint: `AutoModelForCausalLM.from_pretrained(path)` / `AutoTokenizer...`.

torch, transformers and tokenizers are imported inside the functions (the web process never
imports this module's heavy dependencies)."""

from __future__ import annotations

from pathlib import Path

SEED = 1234

# Special tokens of our chat format. The names follow the ChatML convention the Qwen family uses,
# so a template written for those models works with ours.
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
END_OF_TEXT = "<|endoftext|>"
SPECIAL_TOKENS = [END_OF_TEXT, IM_START, IM_END]

# Our own Jinja chat template: system/user/assistant turns wrapped in im_start/im_end; with
# add_generation_prompt it opens an assistant turn for the model to continue.
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\n' }}{%- endif -%}"
)

# Text the tokenizer's merges are learned from: world-model vocabulary (tags, markdown headers,
# JSON, shell output) so common scaffolding becomes few tokens, like in a real tokenizer.
_TRAINING_TEXT = """
### Turn 1
**Task Instruction:** Find the weather in Paris and book a table for two.
**Current State:** The browser shows the search page.
**Action:** search[weather Paris]
**Environment Observation:** Paris: 18 C, light rain, wind 12 km/h.
<think>The agent searched for the weather; a search engine returns a short answer box.</think>
<predicted_observation>Paris, France: 18 C, light rain.</predicted_observation>
{"name": "get_order", "arguments": {"order_id": "#W123"}, "status": "ok", "items": [1, 2, 3]}
$ ls -la /home/user/project
total 12
drwxr-xr-x 2 user user 4096 Jan 10 12:00 src
-rw-r--r-- 1 user user  220 Jan 10 12:00 README.md
$ python -m pytest tests -q
3 passed in 0.12s
Traceback (most recent call last): File "main.py", line 3, in <module> ImportError: no module
[12]: <button> "Submit"; [13]: <input> "Search"; [14]: <a> "Next page";
UI elements: TextView "Settings", Button "Wi-Fi", Switch "Bluetooth" checked=false
The quick brown fox jumps over the lazy dog. The observation of the environment follows the
action of the agent, and the world model predicts what the environment would answer.
"""


def _build_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=640,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator([_TRAINING_TEXT] * 4, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=IM_END,
        pad_token=END_OF_TEXT,
        bos_token=None,
        unk_token=None,
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def tiny_config(vocab_size: int, *, eos_token_id: int, pad_token_id: int):
    """Toy sizes of the qwen3_5_moe text architecture: 4 layers (3 linear-attention + 1 full),
    4 experts with 2 active, a shared expert. The larger init range separates the logits of a
    random model so greedy decoding is not decided by rounding noise."""
    from transformers import Qwen3_5MoeTextConfig

    return Qwen3_5MoeTextConfig(
        vocab_size=vocab_size,
        hidden_size=64,
        num_hidden_layers=4,
        layer_types=["linear_attention", "linear_attention", "full_attention", "linear_attention"],
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        linear_conv_kernel_dim=4,
        linear_key_head_dim=16,
        linear_value_head_dim=16,
        linear_num_key_heads=2,
        linear_num_value_heads=4,
        moe_intermediate_size=32,
        shared_expert_intermediate_size=32,
        num_experts=4,
        num_experts_per_tok=2,
        max_position_embeddings=8192,
        initializer_range=0.2,
        rope_parameters={
            "rope_type": "default",
            "rope_theta": 10000.0,
            "partial_rotary_factor": 0.5,
            "mrope_section": [2, 1, 1],
            "mrope_interleaved": True,
        },
        eos_token_id=eos_token_id,
        pad_token_id=pad_token_id,
        tie_word_embeddings=False,
    )


def build_tiny_model(path: str | Path) -> str:
    """Write the tiny model and its tokenizer into `path` (created if needed); return the path.
    Deterministic: the same files (same weights) every time."""
    import torch
    from transformers import GenerationConfig, Qwen3_5MoeForCausalLM

    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = _build_tokenizer()
    eos_id = tokenizer.convert_tokens_to_ids(IM_END)
    pad_id = tokenizer.convert_tokens_to_ids(END_OF_TEXT)
    config = tiny_config(len(tokenizer), eos_token_id=eos_id, pad_token_id=pad_id)

    torch.manual_seed(SEED)
    model = Qwen3_5MoeForCausalLM(config).to(torch.float32).eval()  # type: ignore[arg-type]
    model.generation_config = GenerationConfig(
        eos_token_id=eos_id, pad_token_id=pad_id, do_sample=False
    )
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return str(out)


def main() -> None:  # pragma: no cover - convenience entry point
    import argparse

    parser = argparse.ArgumentParser(description="Write the tiny random qwen3_5_moe test model.")
    parser.add_argument("path")
    print(build_tiny_model(parser.parse_args().path))


if __name__ == "__main__":  # pragma: no cover
    main()
