"""Context-parallel forward benchmark: run under ``torchrun`` on 1, 2, 4 or 8 GPUs of one host.

    torchrun --standalone --nproc-per-node N -m benchmarks.context_parallel --preset 14b --json OUT.json

Every rank builds the same random-weight transformer (same seed), applies the acceleration stack
(FP8 linears, our FP8 attention kernel where it runs, regional compile) plus
``ContextParallel(world_size=N)``, and times the segment forward (77 frames at 720x1280 for 14b);
rank 0 writes the JSON (seconds, peak VRAM per rank, the output's relative difference from a
1-process forward when ``--check`` — small presets only, it needs the whole model twice). Compare
runs of different N for ``cp_speedup_2gpu`` etc. (:func:`speedups` merges result files).
On the CPU it runs with gloo (``--device cpu``, tiny preset): what the tests do.
"""

from __future__ import annotations

import argparse
import os
import time
import types
from pathlib import Path
from typing import Any

from benchmarks.lab_record import read_lab_data, write_lab_result

__all__ = ["run", "speedups"]


def run(preset: str, device: str, json_path: str | None, frames: int, width: int, height: int, reps: int, check: bool) -> dict[str, Any]:
    import torch
    import torch.distributed as dist

    from newsmotion_engine.accel.attention import Attention, fp8_attention_supported
    from newsmotion_engine.accel.compile import Compile
    from newsmotion_engine.accel.context_parallel import ContextParallel
    from newsmotion_engine.accel.fp8 import Fp8Linears
    from newsmotion_engine.accel.registry import apply_accelerations
    from newsmotion_engine.bench.gpu import forward_inputs
    from newsmotion_engine.bench.timing import peak_gib, peak_reset, time_calls
    from newsmotion_engine.render.backends.wan_animate.components import build_transformer
    from newsmotion_engine.render.backends.wan_animate.config import WanAnimateOptions

    cuda = device == "cuda"
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(dev)
    dtype = torch.bfloat16 if cuda else torch.float32
    opts = WanAnimateOptions(preset=preset, device=str(dev.type), dtype="bfloat16" if cuda else "float32")
    torch.manual_seed(0)
    t0 = time.perf_counter()
    model = build_transformer(opts, dev, dtype)
    build_s = time.perf_counter() - t0
    inputs = forward_inputs(dict(opts.preset_spec.transformer), width, height, frames, dev, dtype)
    ref = None
    if check:
        with torch.no_grad():
            ref = model(**inputs)[0]
    configs: list[Any] = [ContextParallel(world_size=world)]
    if cuda:
        configs += [Fp8Linears(mode="auto"), Compile()]
        if fp8_attention_supported()[0]:
            configs.append(Attention("fp8-triton"))
    applied = apply_accelerations(types.SimpleNamespace(transformer=model), configs)
    peak_reset(dev)
    with torch.no_grad():
        timed = time_calls(lambda: model(**inputs)[0], dev, 1, reps)
    out = timed.output
    row = {
        "world_size": world,
        "forward_ms": round(timed.median_ms, 1),
        "forward_ms_all": [round(t, 1) for t in timed.ms],
        "first_call_ms": round(timed.first_call_ms, 1),
        "peak_vram_gib": peak_gib(dev),
        "build_s": round(build_s, 1),
        "accelerations": applied.report,
    }
    if ref is not None:
        row["rel_diff_vs_one_process"] = float((out.float() - ref.float()).norm() / ref.float().norm())
    rows: list[Any] = [None] * world
    dist.all_gather_object(rows, row)
    result = {
        "bench": "gpu_context_parallel" if cuda else "cpu_context_parallel",
        "weights": "random (speed only)",
        "preset": preset,
        "shape": {"frames": frames, "width": width, "height": height},
        "world_size": world,
        "forward_ms": max(r["forward_ms"] for r in rows),  # the slowest rank is the forward's time
        "peak_vram_gib_per_rank": [r["peak_vram_gib"] for r in rows],
        "ranks": rows,
        "device": torch.cuda.get_device_name(dev) if cuda else "cpu",
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    if rank == 0 and json_path:
        write_lab_result(json_path, result, title=f"context-parallel forward, wan-animate {preset}, {world} process(es), {width}x{height}x{frames}",
                         headline={"forward (ms)": result["forward_ms"], "world size": world})  # fmt: skip
    dist.destroy_process_group()
    return result


def speedups(paths: list[str | Path]) -> dict[str, Any]:
    """``cp_speedup_{N}gpu`` from result files of the same preset and shape at several world sizes."""
    by_world = {}
    for p in paths:
        r = read_lab_data(p)
        by_world[r["world_size"]] = r["forward_ms"]
    base = by_world.get(1)
    return {f"cp_speedup_{w}gpu": round(base / ms, 3) for w, ms in sorted(by_world.items()) if base and w > 1} | {
        "forward_ms_by_world_size": by_world
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="14b")
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--json")
    ap.add_argument("--frames", type=int, default=77)
    ap.add_argument("--width", type=int, default=720)
    ap.add_argument("--height", type=int, default=1280)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--check", action="store_true", help="also compare with a 1-process forward (small presets)")
    a = ap.parse_args()
    run(a.preset, a.device, a.json, a.frames, a.width, a.height, a.reps, a.check)


if __name__ == "__main__":
    main()
