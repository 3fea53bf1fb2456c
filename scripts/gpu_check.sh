#!/usr/bin/env bash
# The GPU check of the world-model engine, prepared as ONE short run (under ~8 minutes, each step
# under its own timeout) for a session that is lent a GPU machine for 15 minutes in all. Its
# python3 needs torch + transformers, and trl + peft for the fine-tune step (`inference/` is plain
# Python; PYTHON=... to use another).
# Everything is tee'd under $OUT (or /tmp/gpu-check), for the README's figures:
#   env.txt           GPU, driver, torch/transformers, whether fla and causal_conv1d import
#   plan-100k.txt     the memory arithmetic of N=64 at P=100K (no model built)
#   bench-tiny.txt    tiny preset on CUDA, all sides, T=16,256 (sanity: outputs equal naive)
#   bench-35b.txt     full architecture, random bf16 weights, P=4096 N=16 T=64, both suffix
#                     modes, naive/batched/engine: the headline speedups
#   bench-100k.txt    full architecture, P=100,000 N=64 T=64, engine only: peak memory, no OOM
#   finetune-tiny.txt LoRA fine-tune of the tiny model on CUDA (24 steps, bf16 base), then the
#                     adapter loaded by the hf backend (merged) answering greedily beside its base
#   bench-35b-256.txt the full preset at T=256 (identical suffixes), only if time is left
#   steps.txt         each step's start time and exit code (124: its timeout)
set -uo pipefail
export PYTHONUNBUFFERED=1
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/gpu-check}
py=${PYTHON:-python3}
mkdir -p "$out"
start=$(date +%s)
elapsed() { echo $(($(date +%s) - start)); }

step() { # step NAME TIMEOUT_S COMMAND...
    local name=$1 limit=$2
    shift 2
    echo "== $name: start at $(elapsed)s, timeout ${limit}s: $*" | tee -a "$out/steps.txt"
    timeout --kill-after=10 "$limit" "$@" 2>&1 | tee "$out/$name.txt"
    echo "== $name: exit ${PIPESTATUS[0]} at $(elapsed)s" | tee -a "$out/steps.txt"
}

step env 60 bash -c "nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; $py -c '
import importlib, torch, transformers
print(\"torch\", torch.__version__, \"cuda\", torch.version.cuda, \"transformers\", transformers.__version__)
print(\"device\", torch.cuda.get_device_name(0) if torch.cuda.is_available() else \"NO CUDA\")
for mod in (\"fla\", \"causal_conv1d\"):
    try:
        importlib.import_module(mod)
        print(mod, \"imports\")
    except Exception as e:
        print(mod, \"does not import:\", type(e).__name__, e)
'"
step plan-100k 60 "$py" -m inference.bench --plan --preset qwen3.5-35b-a3b-100k
step bench-tiny 75 "$py" -m inference.bench --preset tiny --device cuda --new-tokens 16,256
step bench-35b 210 "$py" -m inference.bench --preset qwen3.5-35b-a3b --device cuda --new-tokens 64
step bench-100k 150 "$py" -m inference.bench --preset qwen3.5-35b-a3b-100k --device cuda
step finetune-tiny 120 "$py" -m inference.finetune --check
left=$((470 - $(elapsed)))
if [ "$left" -ge 120 ]; then
    step bench-35b-256 "$left" "$py" -m inference.bench --preset qwen3.5-35b-a3b --device cuda \
        --new-tokens 256 --suffix identical
else
    echo "== bench-35b-256: skipped, ${left}s left of the 470s plan" | tee -a "$out/steps.txt"
fi
echo "== done in $(elapsed)s" | tee -a "$out/steps.txt"
