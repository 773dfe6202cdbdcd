"""GPU benchmark: cuDNN's FP8 flash attention (:mod:`newsmotion_engine.accel.attention_cudnn`)
against cuDNN's BF16 SDPA and our Triton 8-bit kernel, at the attention shapes of the backends
(random q/k/v; keys also with a shared per-head offset, as DiT keys have, where smoothing matters).

Per shape and variant: the median ms of a call (quantization included unless the name says
``kernel``), TFLOP/s (4·S_q·S_kv·H·D), and the relative error against cuDNN BF16.

    python -m benchmarks.attention_cudnn --json benchmarks/results/attention_cudnn_h100.json
"""

from __future__ import annotations

import argparse
import datetime as _dt
import time
from collections.abc import Sequence
from typing import Any

from benchmarks.lab_record import top_level_figures, write_lab_result

# name -> (S_q, S_kv, heads, head dim): the shapes the backends' self-attention runs at.
SHAPES = {
    "wan14b_720x1280_81f": (75600, 75600, 40, 128),  # wan-animate / scail-2 (14B), one 81-frame segment
    "animate2_generation_14b": (79200, 79200, 40, 128),  # wan-animate-2's cached pass, its dense (generation) part
    "echomimic_768_81f": (48384, 48384, 12, 128),  # echomimic-v3 (1.3B) at 768x768
}


def _bench_shape(name: str, sq: int, skv: int, heads: int, dim: int, reps: int, log: Any) -> dict[str, Any]:
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from newsmotion_engine.accel import attention as A
    from newsmotion_engine.accel import attention_cudnn as C
    from newsmotion_engine.bench.timing import rel_err, time_calls

    dev = torch.device("cuda")
    g = torch.Generator(device=dev).manual_seed(1)
    q = torch.randn(1, sq, heads, dim, generator=g, device=dev, dtype=torch.bfloat16)
    k = torch.randn(1, skv, heads, dim, generator=g, device=dev, dtype=torch.bfloat16)
    v = torch.randn(1, skv, heads, dim, generator=g, device=dev, dtype=torch.bfloat16)
    flops = 4 * sq * skv * heads * dim
    row: dict[str, Any] = {"shape": {"s_q": sq, "s_kv": skv, "heads": heads, "dim": dim}, "variants": {}}

    def sdpa(kk: torch.Tensor) -> torch.Tensor:
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return torch.nn.functional.scaled_dot_product_attention(q.transpose(1, 2), kk.transpose(1, 2), v.transpose(1, 2)).transpose(1, 2)

    ref = time_calls(lambda: sdpa(k), dev, 1, reps)
    row["variants"]["cudnn_bf16"] = {"ms": round(ref.median_ms, 2), "tflops": round(flops / ref.median_ms / 1e9, 1)}
    log(f"{name} cudnn_bf16: {row['variants']['cudnn_bf16']}")
    offset = k + 4.0 * torch.randn(1, 1, heads, dim, generator=g, device=dev, dtype=torch.bfloat16)
    ref_offset = sdpa(offset)

    def run(variant: str, fn: Any, err_fn: Any = None) -> None:
        try:
            t = time_calls(fn, dev, 1, reps)
            r = {"ms": round(t.median_ms, 2), "tflops": round(flops / t.median_ms / 1e9, 1),
                 "first_call_ms": round(t.first_call_ms or 0.0, 1), "rel_err_vs_cudnn_bf16": round(rel_err(t.output, ref.output), 5)}  # fmt: skip
            if err_fn is not None:
                r["rel_err_offset_keys"] = round(rel_err(err_fn(), ref_offset), 5)
            r["speedup_vs_cudnn_bf16"] = round(ref.median_ms / t.median_ms, 3)
        except Exception as exc:
            r = {"error": f"{type(exc).__name__}: {exc}"[:400]}
        row["variants"][variant] = r
        log(f"{name} {variant}: {r}")

    run("ours_int8qk_fp8pv", lambda: A.fp8_attention(q, k, v, "int8qk-fp8pv"), lambda: A.fp8_attention(q, offset, v, "int8qk-fp8pv"))
    x = A.quantize_attention_inputs(q, k, v, "int8qk-fp8pv")
    kernel = A._build_kernel()
    run("ours_int8qk_fp8pv_kernel", lambda: A.launch_kernel(kernel, x, "int8qk-fp8pv"))
    del x
    run("cudnn_fp8", lambda: C.cudnn_fp8_attention(q, k, v), lambda: C.cudnn_fp8_attention(q, offset, v))
    pre = (C.quantize_per_tensor(q), C.quantize_per_tensor(C.smooth_keys(k)), C.quantize_per_tensor(v))
    run("cudnn_fp8_kernel", lambda: C.cudnn_fp8_attention(q, k, v, quantized=pre))
    unsmoothed = (pre[0], C.quantize_per_tensor(offset), pre[2])
    try:
        row["variants"]["cudnn_fp8"]["rel_err_offset_keys_unsmoothed"] = round(rel_err(C.cudnn_fp8_attention(q, offset, v, quantized=unsmoothed), ref_offset), 5)
    except Exception as exc:
        row["variants"]["cudnn_fp8"]["unsmoothed_error"] = f"{type(exc).__name__}: {exc}"[:300]
    try:  # the log-sum-exp cuDNN returns, against exact float32 on the first 256 rows
        _, lse = C.cudnn_fp8_attention(q, k, v, return_lse=True)
        s = torch.einsum("bqhd,bkhd->bhqk", q[:, :256].float(), k.float()) / dim**0.5
        exact = torch.logsumexp(s, dim=-1)
        shift = (q[:, :256].float() * k.float().mean(dim=1, keepdim=True)).sum(-1).transpose(1, 2) / dim**0.5
        row["variants"]["cudnn_fp8"]["lse_max_abs_err"] = round(float((lse[:, :, :256] + shift - exact).abs().max()), 5)
        del s, exact
    except Exception as exc:
        row["variants"]["cudnn_fp8"]["lse_error"] = f"{type(exc).__name__}: {exc}"[:300]
    del pre, unsmoothed
    torch.cuda.empty_cache()
    return row


def _bench_animate2_cached(reps: int, log: Any) -> dict[str, Any]:
    """Wan-Animate-2's cached-pass attention at the 14B 720x1280 shape (79,200 generation tokens,
    75,600 reference tokens in frames of 3,600): our in-context Triton kernel vs the cuDNN split
    (:func:`~newsmotion_engine.render.backends.wan_animate_2.attention.cudnn_cached_attention`),
    eager and compiled (the quantization fused, as inside a compiled block)."""
    import torch

    from newsmotion_engine.accel.attention_incontext import incontext_attention, prepare_reference
    from newsmotion_engine.bench.timing import rel_err, time_calls
    from newsmotion_engine.render.backends.wan_animate_2.attention import cudnn_cached_attention, prepare_cudnn_reference

    dev = torch.device("cuda")
    g = torch.Generator(device=dev).manual_seed(2)
    hw, gen, heads, dim = 3600, 79200, 40, 128
    q, k, v = (torch.randn(1, gen, heads, dim, generator=g, device=dev, dtype=torch.bfloat16) for _ in range(3))
    k_ref, v_ref = (torch.randn(1, gen - hw, heads, dim, generator=g, device=dev, dtype=torch.bfloat16) for _ in range(2))
    out: dict[str, Any] = {"shape": {"generation": gen, "reference": gen - hw, "frame_tokens": hw, "heads": heads, "dim": dim}}
    ref_t = prepare_reference(k_ref, v_ref, "int8qk-fp8pv")
    t = time_calls(lambda: incontext_attention(q, k, v, ref_t, hw, variant="int8qk-fp8pv"), dev, 1, reps)
    out["ours_incontext_triton"] = {"ms": round(t.median_ms, 2)}
    base = t.output
    log(f"animate2 cached, ours: {out['ours_incontext_triton']}")
    # Compiled as well (its torch quantization fused, as in a compiled block): the fair comparison
    # with the compiled cuDNN split below (the first recorded run timed ours eager only).
    ours_compiled = torch.compile(lambda a, b, c, r: incontext_attention(a, b, c, r, hw, variant="int8qk-fp8pv"))
    t = time_calls(lambda: ours_compiled(q, k, v, ref_t), dev, 2, reps)
    out["ours_incontext_triton_compiled"] = {"ms": round(t.median_ms, 2)}
    log(f"animate2 cached, ours compiled: {out['ours_incontext_triton_compiled']}")
    del ref_t
    ref_c = prepare_cudnn_reference(k_ref, v_ref, hw)
    for name, fn in (("cudnn_split_eager", cudnn_cached_attention), ("cudnn_split_compiled", torch.compile(cudnn_cached_attention))):
        try:
            t = time_calls(lambda: fn(q, k, v, ref_c, hw), dev, 2, reps)
            out[name] = {"ms": round(t.median_ms, 2), "rel_diff_vs_ours": round(rel_err(t.output, base), 5),
                         "speedup_vs_ours_compiled": round(out["ours_incontext_triton_compiled"]["ms"] / t.median_ms, 3)}  # fmt: skip
        except Exception as exc:
            out[name] = {"error": f"{type(exc).__name__}: {exc}"[:400]}
        log(f"animate2 cached, {name}: {out[name]}")
    return out


def main(argv: Sequence[str] | None = None) -> None:
    import torch

    from newsmotion_engine.accel.attention_cudnn import cudnn_fp8_supported

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default=",".join(SHAPES), help="comma-separated names from SHAPES")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--animate2", action="store_true", help="also time Wan-Animate-2's cached-pass attention (ours vs the cuDNN split)")
    ap.add_argument("--json", required=True)
    a = ap.parse_args(argv)
    ok, why = cudnn_fp8_supported()
    result: dict[str, Any] = {"bench": "attention_cudnn", "device": torch.cuda.get_device_name(0),
                              "created_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                              "versions": {"torch": torch.__version__, "cudnn_backend": torch.backends.cudnn.version()},
                              "cudnn_fp8": why, "note": "random q/k/v; errors against cuDNN's BF16 SDPA", "shapes": {}}  # fmt: skip
    t0 = time.perf_counter()

    def write() -> None:
        for n, r in result["shapes"].items():
            for variant in ("cudnn_fp8", "ours_int8qk_fp8pv"):
                if "ms" in r["variants"].get(variant, {}):
                    result[f"{n}_{variant}_ms"] = r["variants"][variant]["ms"]
            if "ms" in r["variants"].get("cudnn_bf16", {}):
                result[f"{n}_cudnn_bf16_ms"] = r["variants"]["cudnn_bf16"]["ms"]
        result["wall_s"] = round(time.perf_counter() - t0, 1)
        write_lab_result(a.json, result, title="cuDNN FP8 attention vs cuDNN BF16 and our 8-bit Triton kernel, at the backends' shapes",
                         headline=top_level_figures(result))  # fmt: skip

    print(why, flush=True)
    if a.animate2:
        result["animate2_cached"] = _bench_animate2_cached(a.reps, lambda s: print(s, flush=True))
        for n in ("ours_incontext_triton_compiled", "cudnn_split_compiled"):
            if "ms" in result["animate2_cached"].get(n, {}):
                result[f"animate2_cached_{n}_ms"] = result["animate2_cached"][n]["ms"]
        write()
    for name in filter(None, a.shapes.split(",")):
        sq, skv, h, d = SHAPES[name]
        result["shapes"][name] = _bench_shape(name, sq, skv, h, d, a.reps, lambda s: print(s, flush=True))
        write()
    write()


if __name__ == "__main__":
    main()
