#!/usr/bin/env bash
# The one script the GPU device runs: the lab benchmarks (python -m benchmarks.*), results under $OUT.
# Usage (device, repo root, with .whl carried; see ../shared/tools/device-wheels.sh):
#   bash benchmarks/device_gpu.sh forward|render|all|smoke|speech|sweep|sparse|cp|clip [preset] [JSON of extra kwargs] [part after sweep]
#   bash benchmarks/device_gpu.sh animate2 [preset] [forward|attention|clip|clip-ours|clip-stock|multistream|all] ["extra benchmarks.animate2 flags"]
#   bash benchmarks/device_gpu.sh zoo SECONDS "BENCH FLAGS" ["BENCH FLAGS" ...]   (the model-zoo benches, one after another)
#   bash benchmarks/device_gpu.sh kernels   (benchmarks.attention_ws --probe, then benchmarks.conv3d --parts wan_decode)
# e.g. bash benchmarks/device_gpu.sh render 14b '{"width": 480, "height": 832, "steps": 20, "guidance_scale": 5.0}'
# Writes $OUT/gpu_<part>.json (a result record, rewritten after every variant) and $OUT/gpu_<part>.log
# (smoke also $OUT/gpu_backend_smoke.json). Copy a record into benchmarks/results/ only from a real run.
# The JSON kwargs go to benchmarks.gpu.bench_gpu (clip: bench_clip): "render_accel" and "render_variants"
# values may be flat option mappings (the CLI's -o keys, e.g. {"fp8": "auto", "attention": "best"}).
set -uo pipefail
part="${1:-forward}"
preset="${2:-14b}"
kwargs="${3:-{\}}"
out="${OUT:-/tmp/out}"
mkdir -p "$out"
# --upgrade: on a warm machine the wheels are there already, and pip would print a warning per
# package (a screenful that crowds the log's tail out of the device reply)
python3 -m pip install -q --upgrade --no-index --no-deps --no-compile --target "$HOME/site" .whl/*.whl || exit 3
# attention='fp8-cudnn' needs cuDNN's frontend (an optional dependency): its wheel in .whl/cudnn/, when carried.
if ls .whl/cudnn/nvidia_cudnn_frontend-*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --upgrade --no-index --no-deps --no-compile --target "$HOME/site" "$(ls .whl/cudnn/nvidia_cudnn_frontend-*.whl | head -1)" || exit 3
fi
export PYTHONPATH="$PWD:$HOME/site" PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
if [ "$part" = smoke ]; then
  # Small shapes, every code path: catches API drift before the long run. The bench (forward
  # variants applied/removed through the registry, stock vs the shipped segment renderer), then a
  # whole clip through the backend's own entry points with every acceleration (the FP8 attention
  # kernel and compile included; CUDA graphs run in the forward part), then each FP8 kernel
  # variant against SDPA.
  python3 - <<PY 2>&1 | tee "$out/gpu_smoke.log"
import json
from benchmarks.gpu import backend_smoke, bench_gpu
bench_gpu("smoke", part="all", width=256, height=256, frames=9, steps=2, render_variants=["all", "kernels_only"],
          json_path="$out/gpu_smoke.json")
clip = backend_smoke("smoke", width=256, height=256, frames=13, steps=2,
                     options={"fp8": "auto", "attention": "fp8-triton", "compile": "blocks", "teacache": 0.15,
                              "guidance_scale": 3.0, "cfg_stop": 0.8, "cfg_every": 2, "cfg_momentum": 0.5,
                              "vae_tiling": True, "ffn_chunks": 2})
open("$out/gpu_backend_smoke.json", "w").write(json.dumps(clip, indent=2, default=str) + "\n")
assert clip["frames"] == 13, clip
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
if [ "$part" = kernels ]; then
  # The kernel-level benches in one call (~4 min): which warp-specialized launches run on this
  # card's Triton (each in its own process: a hang is a row), then the Wan VAE's decode / encode
  # with causal_pad_fold and conv3d_as_2d. Writes $out/attention_ws_probe_<card>.json and $out/conv3d_<card>.json.
  name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | awk '{print tolower($2)}')
  timeout 420 python3 -m benchmarks.attention_ws --probe --json "$out/attention_ws_probe_$name.json" 2>&1 | tee "$out/attention_ws.log"
  timeout 180 python3 -m benchmarks.conv3d --parts wan_decode --repeats 3 --json "$out/conv3d_$name.json" 2>&1 | tee "$out/conv3d.log"
  exit 0
fi
if [ "$part" = zoo ]; then
  # The model-zoo benches (benchmarks.mimicmotion / champ / scail2 / echomimic_v3 / ...), each
  # "BENCH FLAGS" run as python -m benchmarks.BENCH FLAGS --json $out/BENCH_<card>.json under a
  # limit of SECONDS (a bench rewrites its record after every variant, so a cut one keeps what it measured).
  limit="${2:-300}"
  shift 2
  name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | awk '{print tolower($2)}')
  rc=0
  for job in "$@"; do
    bench="${job%% *}"
    flags="${job#"$bench"}"
    json="$out/${bench}_${name}.json"
    [ -e "$json" ] && json="$out/${bench}_${name}_$(date +%s).json"  # the same bench twice: keep both
    echo "=== $bench$flags (limit ${limit} s)"
    # shellcheck disable=SC2086
    timeout "$limit" python3 -m "benchmarks.$bench" $flags --json "$json" 2>&1 | tee -a "$out/gpu_zoo.log"
    r="${PIPESTATUS[0]}"
    [ "$r" = 0 ] || { echo "=== $bench: exit $r"; rc=1; }
  done
  exit "$rc"
fi
if [ "$part" = speech ]; then
  # The speech tier on the GPU: the MuseTalk lip-sync stage's fps at 720x1280 (released
  # architecture, fp16, random weights), then the SimHash audio-encoder cache over the sample
  # speeches (carry storage/speech: their caches, built where the TTS is installed).
  name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | awk '{print tolower($2)}')
  python3 -m benchmarks.musetalk --device cuda --frames 480 --json "$out/musetalk_${name}.json" 2>&1 | tee "$out/gpu_speech.log"
  python3 -m benchmarks.simhash --device cuda --speech-root storage/speech --json "$out/simhash_${name}.json" 2>&1 | tee -a "$out/gpu_speech.log"
  exit "${PIPESTATUS[0]}"
fi
if [ "$part" = sparse ]; then
  # EXPERIMENTAL block-sparse attention: kernel per density at the 14B shape, then the 14B forward.
  python3 -m benchmarks.sparse --preset "$preset" --json "$out/gpu_sparse.json" 2>&1 | tee "$out/gpu_sparse.log"
  exit "${PIPESTATUS[0]}"
fi
if [ "$part" = clip ]; then
  # A whole 120-frame clip, stock vs ours (keyframes + infill, the 3-stage queue, approximations
  # labelled), VAE decode settings, the batch queue: benchmarks.clip; kwargs go to bench_clip.
  python3 - "$kwargs" <<PY 2>&1 | tee "$out/gpu_clip.log"
import json, sys
from benchmarks.clip import bench_clip
bench_clip("$preset", json_path="$out/gpu_clip.json", **json.loads(sys.argv[1]))
PY
  exit "${PIPESTATUS[0]}"
fi
if [ "$part" = cp ]; then
  # Context parallelism: every GPU of this host (torchrun), preset $preset; on one GPU world size 1.
  n=$(nvidia-smi -L | wc -l)
  python3 -m torch.distributed.run --standalone --nproc-per-node "$n" -m benchmarks.context_parallel \
    --preset "$preset" --json "$out/gpu_cp_${n}gpu.json" $([ "$preset" = 14b ] || echo --check) 2>&1 | tee "$out/gpu_cp.log"
  exit "${PIPESTATUS[0]}"
fi
if [ "$part" = animate2 ]; then
  # Wan-Animate-2: the stock modular pipelines vs the wan-animate-2 backend (random weights);
  # each sub-part fits one call (--budget-s 540). Writes $out/gpu_animate2_<sub>_<preset>.json.
  sub="${3:-forward}"
  python3 -m benchmarks.animate2 --preset "$preset" --part "$sub" --budget-s 540 \
    --json "$out/gpu_animate2_${sub}_${preset}.json" ${4:-} 2>&1 | tee "$out/gpu_animate2_${sub}_${preset}.log"
  exit "${PIPESTATUS[0]}"
fi
if [ "$part" = sweep ]; then
  # Every kernel config of every FP8 attention variant at the 14B shape, next to cuDNN; the third
  # argument, if given, is flags for other shapes / variants, e.g.
  # "--shape 75600,40,128 --shape 7296,384,64 --variants int8qk-fp8pv,int8qk-fp8pv-polyexp".
  sweep_flags=""
  [ "$kwargs" = "{}" ] || sweep_flags="$kwargs"
  # shellcheck disable=SC2086
  python3 -m benchmarks.gpu sweep $sweep_flags --json "$out/gpu_sweep.json" 2>&1 | tee "$out/gpu_sweep.log"
  [ "${PIPESTATUS[0]}" = 0 ] || exit 1
  part="${4:-}"  # optionally go on with another part in the same call
  [ -n "$part" ] || exit 0
fi
python3 -m benchmarks.gpu "$part" --preset "$preset" --kwargs "$kwargs" --json "$out/gpu_$part.json" 2>&1 | tee "$out/gpu_$part.log"
exit "${PIPESTATUS[0]}"
