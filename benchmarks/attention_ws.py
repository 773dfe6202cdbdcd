"""EXPERIMENT: the FP8 attention kernel's dense loop warp-specialized (Triton's Hopper pass), timed
against the production kernel on the GPU.

Why: our attention kernel runs at ~750-780 TFLOP/s on Hopper (``attention_kernel_h200.json``),
where FlashAttention-3's FP8 kernel reaches more by giving the tensor-core feed (TMA loads) to a
producer warp and splitting each 128-row query tile over two consumer warpgroups whose softmax
overlaps the other's matrix products. Triton 3.6 does this itself for a loop marked
``tl.range(..., warp_specialize=True)`` when the kernel is simple enough; compiled here for sm_90
(``python -m benchmarks.attention_ws --sass``, no GPU needed) it does so (12 warps, ``setmaxnreg``,
168 registers, no spills) only when (found by trying): the loop is the kernel's only code with a
matrix product (a ragged tail tile or the in-context reference's tiles before or after it turn
the pass off), and every load is a TMA descriptor load (the per-row query scale loaded through a
pointer makes the pass assert). So this kernel takes keys in whole tiles only, or masks every tile
(``mask_tail``) to cover a ragged end; the wan-animate-2 in-context reference is not in it.

The question this answers before any of it goes into the product: how much faster is the
warp-specialized loop than the production kernel on the same quantized inputs, and is its output
the same (against the production kernel, and both against bf16 SDPA)?

    python -m benchmarks.attention_ws --json $OUT/attention_ws_h200.json      # GPU
    python -m benchmarks.attention_ws --sass                                  # compile only (CPU)
"""

from __future__ import annotations

import argparse
import datetime as _dt
import math
from pathlib import Path
from typing import Any

import triton
import triton.language as tl

from newsmotion_engine.accel.attention_triton import _scores, _softmax_pv

__all__ = ["attention_ws", "bench_attention_ws"]

VARIANT = "int8qk-fp8pv"  # the production default
CONFIGS = ((128, 128, 4, 2), (128, 128, 4, 3), (128, 64, 4, 2), (128, 64, 4, 3))  # BLOCK_M, BLOCK_N, warps, stages
SHAPES = {"wan_14b": (1, 40, 75776, 128), "wan_1.3b": (1, 12, 48384, 128)}  # S a multiple of 128


@triton.jit
def attention_ws(q_desc, k_desc, vt_desc, qs_desc, O, VS, S, H, stride_ob, stride_os, stride_oh,
                 D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, QK_INT8: tl.constexpr,
                 PV_FP8: tl.constexpr, MASK_TAIL: tl.constexpr, WARP_SPEC: tl.constexpr):  # fmt: skip
    pid_m = tl.program_id(0)
    bh = tl.program_id(1)
    start_m = pid_m * BLOCK_M
    q = q_desc.load([bh, start_m, 0]).reshape(BLOCK_M, D)
    c = qs_desc.load([bh, start_m]).reshape(BLOCK_M)  # TMA: rows past S come back 0 (finite, never stored)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, D], tl.float32)
    if MASK_TAIL:
        hi = tl.cdiv(S, BLOCK_N) * BLOCK_N
    else:
        hi = (S // BLOCK_N) * BLOCK_N
    for start_n in tl.range(0, hi, BLOCK_N, warp_specialize=WARP_SPEC):
        s = _scores(q, k_desc, bh, start_n, BLOCK_N, D)
        acc, l_i, m_i = _softmax_pv(acc, l_i, m_i, s, c, 0.0, vt_desc, bh, start_n, 0, S,
                                    D, BLOCK_N, MASK_TAIL, QK_INT8, PV_FP8)  # fmt: skip
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, D)
    bh64 = bh.to(tl.int64)
    out = acc * tl.load(VS + bh64 * D + offs_d)[None, :] * (1.0 / l_i)[:, None]
    o_ptrs = O + (bh64 // H) * stride_ob + (bh64 % H) * stride_oh + offs_m[:, None].to(tl.int64) * stride_os + offs_d[None, :]
    tl.store(o_ptrs, out.to(O.dtype.element_ty), mask=(offs_m < S)[:, None])


def _signature(bm: int, bn: int, d: int) -> dict[str, str]:
    return {"q_desc": f"tensordesc<i8[1,{bm},{d}]>", "k_desc": f"tensordesc<i8[1,{bn},{d}]>",
            "vt_desc": f"tensordesc<fp8e4nv[1,{d},{bn}]>", "qs_desc": f"tensordesc<fp32[1,{bm}]>", "O": "*bf16",
            "VS": "*fp32", "S": "i32", "H": "i32", "stride_ob": "i32", "stride_os": "i32", "stride_oh": "i32",
            "D": "constexpr", "BLOCK_M": "constexpr", "BLOCK_N": "constexpr", "QK_INT8": "constexpr",
            "PV_FP8": "constexpr", "MASK_TAIL": "constexpr", "WARP_SPEC": "constexpr"}  # fmt: skip


def sass(configs: tuple[tuple[int, int, int, int], ...] = CONFIGS, d: int = 128) -> dict[str, Any]:
    """Compile each config for sm_90 on this machine: registers, spills, warps, whether the
    warp-specialized form (``setmaxnreg``) came out."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from benchmarks.kernel_sass import sass_report

    rows = {}
    for bm, bn, warps, stages in configs:
        for mask in (False, True):
            for ws in (True, False):
                ce = {"D": d, "BLOCK_M": bm, "BLOCK_N": bn, "QK_INT8": True, "PV_FP8": True, "MASK_TAIL": mask, "WARP_SPEC": ws}
                key = f"{bm}x{bn} w{warps} s{stages}" + (" mask_tail" if mask else "") + (" ws" if ws else "")
                try:
                    k = triton.compile(ASTSource(fn=attention_ws, signature=_signature(bm, bn, d), constexprs=ce),
                                       target=GPUTarget("cuda", 90, 32), options={"num_warps": warps, "num_stages": stages})  # fmt: skip
                except Exception as exc:  # noqa: BLE001 - a config the pass rejects is a finding, not a crash
                    rows[key] = {"error": str(exc).splitlines()[0][:200]}
                    continue
                r = sass_report(k.asm["cubin"])
                rows[key] = {"registers": r["registers"], "stack_bytes": r["stack_bytes"], "warps": k.metadata.num_warps,
                             "warp_specialized": "setmaxnreg" in k.asm["ptx"], "shared_bytes": k.metadata.shared,
                             "main_loop_instructions": r["main_loop_instructions"]}  # fmt: skip
    return rows


def launch(x: Any, cfg: tuple[int, int, int, int], *, mask_tail: bool, warp_spec: bool = True) -> Any:
    """Run :func:`attention_ws` on quantized inputs (``quantize_attention_inputs``) -> bf16 BSHD."""
    import torch
    from triton.tools.tensor_descriptor import TensorDescriptor

    bm, bn, warps, stages = cfg
    B, H, S, D = x.q.shape
    if not mask_tail and S % bn:
        raise ValueError(f"S={S} is not a multiple of BLOCK_N={bn}: use mask_tail")
    if S % 4:
        raise ValueError("the query scales go through TMA: S must be a multiple of 4")
    out = torch.empty((B, S, H, D), device=x.q.device, dtype=torch.bfloat16)

    def desc(t: Any, rows: int, cols: int, block: list[int]) -> Any:
        return TensorDescriptor(t, [B * H, rows, cols], [t.shape[-2] * t.shape[-1], t.shape[-1], 1], block)

    qs = TensorDescriptor(x.q_scale, [B * H, S], [S, 1], [1, bm])
    vt = TensorDescriptor(x.vt, [B * H, D, S], [D * x.vt.shape[-1], x.vt.shape[-1], 1], [1, D, bn])
    attention_ws[(math.ceil(S / bm), B * H)](desc(x.q, S, D, [1, bm, D]), desc(x.k, S, D, [1, bn, D]), vt, qs, out,
                                            x.v_scale, S, H, out.stride(0), out.stride(1), out.stride(2), D=D,
                                            BLOCK_M=bm, BLOCK_N=bn, QK_INT8=True, PV_FP8=True, MASK_TAIL=mask_tail,
                                            WARP_SPEC=warp_spec, num_warps=warps, num_stages=stages)  # fmt: skip
    return out


def bench_attention_ws(shapes: tuple[str, ...] = tuple(SHAPES), json_path: str | Path | None = None, log: Any = print) -> dict[str, Any]:
    """Per shape: the production kernel (autotuned) and each config of this one, warp-specialized
    or not, whole tiles and ``mask_tail``: median ms (``triton.testing.do_bench``), TFLOP/s, the
    difference from the production output and each one's error against bf16 SDPA."""
    import torch
    import torch.nn.functional as F

    from benchmarks.lab_record import write_lab_result
    from newsmotion_engine.accel.attention import _build_kernel, launch_kernel, quantize_attention_inputs

    result: dict[str, Any] = {"bench": "attention_ws", "weights": "random inputs", "variant": VARIANT,
                              "device": torch.cuda.get_device_name(), "triton": triton.__version__, "torch": torch.__version__,
                              "created_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), "shapes": {}}  # fmt: skip

    def rel(a: Any, b: Any) -> float:
        return round(float((a.float() - b.float()).norm() / b.float().norm()), 5)

    production = _build_kernel()
    for name in shapes:
        B, H, S, D = SHAPES[name]
        torch.manual_seed(0)
        q, k, v = (torch.randn(B, S, H, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        ref = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)).transpose(1, 2)
        x = quantize_attention_inputs(q, k, v, VARIANT)
        del q, k, v
        flop = 4 * B * H * S * S * D
        rows: dict[str, Any] = {}
        out = launch_kernel(production, x, VARIANT)
        ms = triton.testing.do_bench(lambda: launch_kernel(production, x, VARIANT), warmup=100, rep=1000, return_mode="median")
        rows["production"] = {"ms": round(ms, 2), "tflops": round(flop / ms / 1e9, 1), "err_vs_sdpa": rel(out, ref)}
        base = out
        log(f"{name} production: {rows['production']}")
        for cfg in CONFIGS:
            for mask in (False, True):
                for ws in (True, False):
                    key = f"{cfg[0]}x{cfg[1]} w{cfg[2]} s{cfg[3]}" + (" mask_tail" if mask else "") + (" ws" if ws else "")
                    try:
                        out = launch(x, cfg, mask_tail=mask, warp_spec=ws)
                        torch.cuda.synchronize()
                        ms = triton.testing.do_bench(lambda: launch(x, cfg, mask_tail=mask, warp_spec=ws), warmup=100, rep=1000,  # noqa: B023
                                                     return_mode="median")  # fmt: skip
                    except Exception as exc:  # noqa: BLE001 - record and go on
                        rows[key] = {"error": str(exc).splitlines()[0][:200]}
                        log(f"{name} {key}: {rows[key]}")
                        continue
                    rows[key] = {"ms": round(ms, 2), "tflops": round(flop / ms / 1e9, 1), "diff_vs_production": rel(out, base),
                                 "err_vs_sdpa": rel(out, ref), "speedup_vs_production": round(rows["production"]["ms"] / ms, 3)}  # fmt: skip
                    log(f"{name} {key}: {rows[key]}")
        result["shapes"][name] = {"shape_bshd": [B, S, H, D], "tflop": round(flop / 1e12, 2), "rows": rows}
        if json_path:
            best = {n: min((r["ms"] for r in s["rows"].values() if "ms" in r), default=None) for n, s in result["shapes"].items()}
            write_lab_result(json_path, result, title="FP8 attention: warp-specialized dense loop vs the production kernel",
                             headline={f"{n} production (ms)": s["rows"]["production"]["ms"] for n, s in result["shapes"].items()}
                             | {f"{n} fastest (ms)": b for n, b in best.items()})  # fmt: skip
        del x, ref, base, out
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.attention_ws", description=__doc__.splitlines()[0])
    p.add_argument("--sass", action="store_true", help="compile each config for sm_90 here and report (no GPU)")
    p.add_argument("--shapes", default=",".join(SHAPES))
    p.add_argument("--json")
    a = p.parse_args(argv)
    if a.sass:
        for key, row in sass().items():
            print(key, row)
        return 0
    bench_attention_ws(tuple(a.shapes.split(",")), json_path=a.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
