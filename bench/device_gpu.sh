#!/usr/bin/env bash
# The one script the GPU device runs: the wan-animate GPU benchmark, results under $OUT.
# Usage (device, repo root, with .whl carried; see ../shared/tools/device-wheels.sh):
#   bash bench/device_gpu.sh forward|render|all|smoke|sweep [preset] [JSON of extra bench_gpu kwargs] [part after sweep]
# e.g. bash bench/device_gpu.sh render 14b '{"width": 480, "height": 832, "steps": 20, "guidance_scale": 5.0}'
# Writes $OUT/gpu_<part>.json (rewritten after every variant) and $OUT/gpu_<part>.log. Copy the
# JSON into bench/results/ only from a real run.
set -uo pipefail
part="${1:-forward}"
preset="${2:-14b}"
kwargs="${3:-{\}}"
out="${OUT:-/tmp/out}"
mkdir -p "$out"
python3 -m pip install -q --no-index --no-deps --no-compile --target "$HOME/site" .whl/*.whl || exit 3
export PYTHONPATH="$PWD:$HOME/site" PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
if [ "$part" = smoke ]; then
  # Small shapes, every code path: catches API drift before the long run.
  python3 - <<PY 2>&1 | tee "$out/gpu_smoke.log"
from newsmotion_engine.bench.gpu import bench_gpu
bench_gpu("smoke", part="all", width=256, height=256, frames=9, steps=2, json_path="$out/gpu_smoke.json")
import torch
from newsmotion_engine.accel.attention import FP8_VARIANTS, fp8_attention
q, k, v = (torch.randn(1, 4096, 8, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
ref = torch.nn.functional.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)).transpose(1, 2)
for name in FP8_VARIANTS:
    out = fp8_attention(q, k, v, variant=name)
    print(name, "rel err (4096 tokens):", float((out.float() - ref.float()).norm() / ref.float().norm()))
PY
  exit "${PIPESTATUS[0]}"
fi
if [ "$part" = sweep ]; then
  # Every kernel config of every FP8 attention variant at the 14B shape, next to cuDNN.
  python3 - <<PY 2>&1 | tee "$out/gpu_sweep.log"
import json
from newsmotion_engine.bench.gpu import attention_config_sweep
res = attention_config_sweep()
open("$out/gpu_sweep.json", "w").write(json.dumps(res, indent=2) + "\n")
PY
  [ "${PIPESTATUS[0]}" = 0 ] || exit 1
  part="${4:-}"  # optionally go on with another part in the same call
  [ -n "$part" ] || exit 0
fi
python3 - "$kwargs" <<PY 2>&1 | tee "$out/gpu_$part.log"
import json, sys
from newsmotion_engine.bench.gpu import bench_gpu
bench_gpu("$preset", part="$part", json_path="$out/gpu_$part.json", **json.loads(sys.argv[1]))
PY
exit "${PIPESTATUS[0]}"
