#!/usr/bin/env bash
# The GPU check of the world-model engine, prepared as ONE short run for a session that is lent
# a GPU machine (its python3 has torch + transformers; nothing else is needed: `inference/` is
# plain Python). Writes its output under $OUT (or /tmp/gpu-check) for the README's figures:
#   bench-tiny.txt   tiny preset on CUDA (sanity: greedy outputs equal, speedup line)
#   bench-35b.txt    full qwen3_5_moe architecture, random bf16 weights, P=4096 N=16 T=64
set -uo pipefail
export PYTHONUNBUFFERED=1
out=${OUT:-/tmp/gpu-check}
mkdir -p "$out"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$out/gpu.txt"
python3 -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)' | tee -a "$out/gpu.txt"
timeout 120 python3 -m inference.bench --preset tiny --device cuda 2>&1 | tee "$out/bench-tiny.txt"
timeout 420 python3 -m inference.bench --preset qwen3.5-35b-a3b --device cuda 2>&1 | tee "$out/bench-35b.txt"
