"""Block-sparse attention on the GPU: the kernel per density at the 14B segment's attention shape,
then the 14B forward with it (``python -m benchmarks.sparse``; GPU runs: ``bash benchmarks/device_gpu.sh
sparse``).

Kernel rows (random N(0, 1) inputs, [1, 75600, 40, 128], the token grid 21 x 80 x 45 (frames x rows x
columns) of a 77-frame 720x1280 portrait Wan-Animate segment): ms of the sparse loop per layout density next to the dense
autotuned kernel, the visited tile fraction, and the output's relative difference from the dense
kernel's. That difference on random inputs says nothing about picture quality (real attention is
far more local than random); it shows the mask is real. Density 1.0 must match the dense kernel.

Forward rows: ``stock_bf16``, ``all`` (FP8 linears + the FP8 kernel + compile) and ``all`` with
sparse attention at densities 0.5 and 0.3 (every forward sparse: no step context here), with
their speed-ups vs stock. Random weights: speed only.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from newsmotion_engine.bench.common import machine_info
from newsmotion_engine.bench.gpu import Log
from newsmotion_engine.bench.timing import rel_err, time_calls

from benchmarks.lab_record import top_level_figures, write_lab_result

__all__ = ["bench_sparse", "sparse_kernel_sweep"]

DENSITIES = (1.0, 0.75, 0.5, 0.35, 0.25)


def sparse_kernel_sweep(grid: tuple[int, int, int] = (21, 80, 45), heads: int = 40, dim: int = 128,
                        densities: tuple[float, ...] = DENSITIES, reps: int = 5, log: Log = print) -> dict[str, Any]:  # fmt: skip
    import torch

    from newsmotion_engine.accel import attention as A
    from newsmotion_engine.accel import sparse as SP

    S = grid[0] * grid[1] * grid[2]
    res: dict[str, Any] = {"shape": [1, S, heads, dim], "grid": list(grid), "variant": A.DEFAULT_FP8_VARIANT,
                           "tiles": [SP.SPARSE_BLOCK_M, SP.SPARSE_BLOCK_N]}  # fmt: skip
    ok, why = A.fp8_attention_supported()
    if not ok:
        return {**res, "skipped": why}
    device = torch.device("cuda")
    g = torch.Generator(device=device).manual_seed(1)
    q, k, v = (torch.randn(1, S, heads, dim, generator=g, device=device, dtype=torch.bfloat16) for _ in range(3))
    name = A.DEFAULT_FP8_VARIANT
    x = A.quantize_attention_inputs(q, k, v, name)
    flops = 4 * S * S * heads * dim
    timed = time_calls(lambda: torch.ops.newsmotion.fp8_attention_kernel(*x, name), device, 2, reps)
    dense_ms, dense = timed.median_ms, timed.output
    res["dense_kernel_ms"] = round(dense_ms, 2)
    res["dense_kernel_tflops"] = round(flops / dense_ms / 1e9, 1)
    log(f"dense kernel: {dense_ms:.1f} ms")
    rows = {}
    for d in densities:
        t0 = time.perf_counter()
        lay = SP.block_layout(grid, d)
        layout_s = time.perf_counter() - t0
        tensors = lay.device_tensors(device)
        timed = time_calls(lambda: torch.ops.newsmotion.fp8_sparse_attention_kernel(*x, *tensors, name), device, 2, reps)
        ms, first, out = timed.median_ms, timed.first_call_ms, timed.output
        rows[str(d)] = {
            "tile_density": round(lay.density, 4),
            "kernel_ms": round(ms, 2),
            "speedup_vs_dense": round(dense_ms / ms, 3),
            "rel_diff_vs_dense_random_inputs": round(rel_err(out, dense), 5),
            "finite": bool(torch.isfinite(out).all()),
            "layout_build_s": round(layout_s, 3),
            "first_call_ms": round(first, 1),
        }
        log(f"density {d}: {rows[str(d)]}")
        del out
    res["densities"] = rows
    del q, k, v, x, dense
    torch.cuda.empty_cache()
    return res


def bench_sparse(preset: str = "14b", *, json_path: str | Path | None = None, forward: bool = True, reps: int = 3,
                 log: Log = print) -> dict[str, Any]:  # fmt: skip
    """The kernel sweep, then (``forward``) the forward variants with and without sparse attention."""
    from newsmotion_engine.bench.gpu import bench_forward
    from newsmotion_engine.render.backends.wan_animate.config import WanAnimateOptions

    t0 = time.time()
    result: dict[str, Any] = {
        "bench": "gpu_sparse_attention",
        "weights": "random (speed only: sparse attention's picture quality needs real weights; "
                   "`newsmotion calibrate sparse-attention`)",  # fmt: skip
        "experimental": True,
        "preset": preset,
        "machine": machine_info(),
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }

    def save() -> None:
        if json_path is not None:
            write_lab_result(json_path, {**result, "device": _device_name()}, title=f"block-sparse FP8 attention, wan-animate {preset}",
                             headline=top_level_figures(result))  # fmt: skip

    result["kernel"] = sparse_kernel_sweep(log=log)
    save()
    if forward:
        opts = WanAnimateOptions(preset=preset)
        width, height, frames = (720, 1280, 77) if preset == "14b" else (256, 256, 9)

        def partial(fwd: dict[str, Any]) -> None:
            result["forward"] = fwd
            save()

        fwd = bench_forward(opts, width, height, frames, warmup=1, reps=reps, log=log,
                            variants=("stock_bf16", "all", "all_sparse50", "all_sparse30"),
                            attention_variants=("int8qk-fp8pv",), save=partial)  # fmt: skip
        result["forward"] = fwd
        v = fwd["variants"]
        stock = v.get("stock_bf16", {}).get("forward_ms")
        for name in ("all_sparse50", "all_sparse30"):
            ms = v.get(name, {}).get("forward_ms")
            result[f"forward_speedup_vs_stock_{name[4:]}"] = round(stock / ms, 3) if stock and ms else None
        dense = v.get("all", {}).get("forward_ms")
        sp = v.get("all_sparse50", {}).get("forward_ms")
        result["sparse50_vs_dense_all"] = round(dense / sp, 3) if dense and sp else None
    result["wall_s"] = round(time.time() - t0, 1)
    save()
    return result


def _device_name() -> str:
    import torch

    return torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.sparse", description=__doc__.splitlines()[0])
    p.add_argument("--preset", default="14b")
    p.add_argument("--no-forward", action="store_true", help="the kernel sweep only")
    p.add_argument("--json", help="where the result record goes")
    a = p.parse_args(argv)
    bench_sparse(a.preset, json_path=a.json, forward=not a.no_forward)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
