"""The benchmark's code paths (not its figures: speed is measured by running the benchmark)."""

from __future__ import annotations

import re

import torch

from inference import bench


def test_full_qwen35_35b_a3b_architecture_builds_on_the_meta_device():
    from transformers import Qwen3_5MoeForCausalLM

    cfg = bench.preset_config("qwen3.5-35b-a3b")
    assert cfg.num_hidden_layers == 40 and cfg.num_experts == 256
    assert cfg.layer_types.count("full_attention") == 10
    assert cfg.layer_types.count("linear_attention") == 30
    model = bench.build_model("qwen3.5-35b-a3b", "meta")  # the bench's own code path
    assert isinstance(model, Qwen3_5MoeForCausalLM)
    assert all(p.device.type == "meta" for p in model.parameters())
    params = sum(p.numel() for p in model.parameters())
    assert 33e9 < params < 37e9  # 35B total parameters
    preset = bench.PRESETS["qwen3.5-35b-a3b"]
    assert (preset.prompt_tokens, preset.branches, preset.new_tokens) == (4096, 16, 64)


def test_tiny_preset_shape():
    preset = bench.PRESETS["tiny"]
    assert (preset.prompt_tokens, preset.branches) == (2048, 8)
    cfg = bench.preset_config("tiny")
    assert {"linear_attention", "full_attention"} == set(cfg.layer_types)


def test_bench_runs_and_ends_with_the_speedup_line(capsys):
    threads = torch.get_num_threads()
    try:
        code = bench.main(
            [
                "--preset",
                "tiny",
                "--device",
                "cpu",
                "--prompt-tokens",
                "96",
                "--branches",
                "3",
                "--new-tokens",
                "4",
            ]
        )
    finally:
        torch.set_num_threads(threads)
    out = capsys.readouterr().out.strip().splitlines()
    assert code == 0
    assert "greedy outputs equal: True" in out
    naive = next(line for line in out if line.startswith("naive"))
    engine = next(line for line in out if line.startswith("engine"))
    assert "prefix tokens computed 288" in naive  # 3 x 96
    assert "prefix tokens computed 96 " in engine  # once
    assert re.fullmatch(r"speedup: \d+\.\d\dx", out[-1])
