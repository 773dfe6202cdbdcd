#!/usr/bin/env bash
# The one script the GPU device runs: the wan-animate GPU benchmark, results under $OUT.
# Usage (device, repo root, with .whl carried; see ../shared/tools/device-wheels.sh):
#   bash bench/device_gpu.sh forward|render|all|smoke [preset]
# Writes $OUT/gpu_<part>.json and $OUT/gpu_<part>.log. Copy the JSON into bench/results/ only from
# a real run.
set -uo pipefail
part="${1:-forward}"
preset="${2:-14b}"
out="${OUT:-/tmp/out}"
mkdir -p "$out"
python3 -m pip install -q --no-index --no-deps --no-compile --target "$HOME/site" .whl/*.whl || exit 3
export PYTHONPATH="$PWD:$HOME/site" PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
if [ "$part" = smoke ]; then
  # Small shapes, every code path: catches API drift before the long run.
  python3 - <<PY 2>&1 | tee "$out/gpu_smoke.log"
from newsmotion_engine.bench.gpu import bench_gpu
bench_gpu("smoke", part="all", width=256, height=256, frames=9, steps=2, json_path="$out/gpu_smoke.json")
from newsmotion_engine.bench.gpu import _attention_bench
import torch
print(_attention_bench(75600, 40, 128, torch.device("cuda"), print, reps=3))
import torch
from newsmotion_engine.accel.attention import fp8_attention
q, k, v = (torch.randn(1, 4096, 8, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
ref = torch.nn.functional.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)).transpose(1, 2)
out = fp8_attention(q, k, v)
print("fp8 attention rel err (4096 tokens):", float((out.float() - ref.float()).norm() / ref.float().norm()))
PY
  exit "${PIPESTATUS[0]}"
fi
python3 -c "
from newsmotion_engine.bench.gpu import bench_gpu
bench_gpu('$preset', part='$part', json_path='$out/gpu_$part.json')
" 2>&1 | tee "$out/gpu_$part.log"
exit "${PIPESTATUS[0]}"
