"""The FP8 attention's warp-specialized kernel (``attention_triton.attention_fwd_ws``) against the
one-loop production kernel on the GPU, and what it compiles to for sm_90 on any machine.

Why: our attention kernel runs at ~750-780 TFLOP/s on Hopper (``attention_kernel_h200.json``),
where FlashAttention-3's FP8 kernel reaches more by giving the tensor-core feed (TMA loads) to a
producer warp and splitting each 128-row query tile over two consumer warpgroups whose softmax
overlaps the other's matrix products. Triton 3.6 does this itself for a loop marked
``tl.range(..., warp_specialize=True)`` when the kernel is simple enough (compiled here for sm_90:
12 warps, ``setmaxnreg``, 168 registers, no spills) - only, found by trying, when the loop is the
kernel's one place with matrix products (a ragged tail tile or the in-context reference's tiles
before or after it turn the pass off) and every load before it is a TMA load (the per-row query
scale loaded through a pointer makes the pass assert). Hence its shape: a ragged end masked in
every tile, and for the in-context reference the dense loop leaves its softmax state
(``STATE_OUT``) for the one-loop kernel to finish with the reference keys (``STATE_IN``).

Rows per shape: the production one-loop kernel (autotuned), the warp-specialized launch
(autotuned over ``WS_CONFIGS``) and each of its configs alone; median ms
(``triton.testing.do_bench``), TFLOP/s, the difference from the one-loop output and each one's
error against bf16 SDPA (dense shapes) or the float32 in-context reference on a slice of rows
(``wan_animate_2``).

    python -m benchmarks.attention_ws --json $OUT/attention_ws_h200.json      # GPU
    python -m benchmarks.attention_ws --probe --json $OUT/attention_ws_probe.json       # GPU: which launches run
    python -m benchmarks.attention_ws --sass --json benchmarks/results/attention_ws_sass.json   # compile only (CPU)
"""

from __future__ import annotations

import argparse
import datetime as _dt
import math
from pathlib import Path
from typing import Any

import triton
import triton.language as tl

from newsmotion_engine.accel import attention_triton as T

__all__ = ["bench_attention_ws", "sass"]

VARIANT = "int8qk-fp8pv"  # the production default
# name: (B, H, S, D[, hw]) - S generation tokens; hw: tokens per frame of an in-context launch
SHAPES = {"wan_animate_2": (1, 40, 79200, 128, 3600), "wan_14b": (1, 40, 75600, 128), "echomimic_v3": (2, 12, 48384, 128)}


def _signature(bm: int, bn: int, d: int) -> dict[str, str]:
    state = {"ST_ACC": "*fp32", "ST_M": "*fp32", "ST_L": "*fp32"}
    return {"Q": "*i8", "K": "*i8", "VT": "*fp8e4nv", "QS": "*fp32", "O": "*bf16",
            "VS": "*fp32", "S": "i32", "H": "i32", "stride_ob": "i32", "stride_os": "i32", "stride_oh": "i32", **state,
            "D": "constexpr", "BLOCK_M": "constexpr", "BLOCK_N": "constexpr", "QK_INT8": "constexpr",
            "PV_FP8": "constexpr", "MASK_TAIL": "constexpr", "STATE_OUT": "constexpr"}  # fmt: skip


def sass(d: int = 128) -> dict[str, Any]:
    """Compile each of ``WS_CONFIGS`` for sm_90 on this machine, whole tiles / masked, output or
    state out: registers, spills, warps, whether the warp-specialized form
    (``setmaxnreg``) came out."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from benchmarks.kernel_sass import sass_report
    from newsmotion_engine.accel.attention import WS_CONFIGS

    rows = {}
    for bm, bn, warps, stages in WS_CONFIGS:
        for mask in (False, True):
            for state_out in (False, True):
                ce = {"D": d, "BLOCK_M": bm, "BLOCK_N": bn, "QK_INT8": True, "PV_FP8": True, "MASK_TAIL": mask, "STATE_OUT": state_out}
                key = f"{bm}x{bn} w{warps} s{stages}" + (" mask_tail" if mask else "") + (" state_out" if state_out else "")
                try:
                    k = triton.compile(ASTSource(fn=T.attention_fwd_ws, signature=_signature(bm, bn, d), constexprs=ce),
                                       target=GPUTarget("cuda", 90, 32), options={"num_warps": warps, "num_stages": stages})  # fmt: skip
                except Exception as exc:  # noqa: BLE001 - a config the pass rejects is a finding, not a crash
                    rows[key] = {"error": str(exc).splitlines()[0][:200]}
                    continue
                r = sass_report(k.asm["cubin"])
                rows[key] = {"registers": r["registers"], "stack_bytes": r["stack_bytes"], "warps": k.metadata.num_warps,
                             "warp_specialized": "setmaxnreg" in k.asm["ptx"], "shared_bytes": k.metadata.shared,
                             "main_loop_instructions": r["main_loop_instructions"]}  # fmt: skip
    return rows


def _inputs(name: str) -> tuple[Any, Any, Any, Any]:
    """Quantized inputs for a shape, a reference output to hold each kernel against, the flop count
    and the in-context reference launch (or None)."""
    import torch
    import torch.nn.functional as F

    from newsmotion_engine.accel import attention as A
    from newsmotion_engine.accel import attention_incontext as I

    B, H, S, D, *hw = SHAPES[name]
    torch.manual_seed(0)
    q, k, v = (torch.randn(B, S, H, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    x = A.quantize_attention_inputs(q, k, v, VARIANT)
    if not hw:
        ref = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)).transpose(1, 2)
        return x, ref, 4 * B * H * S * S * D, None
    hw = hw[0]
    k_ref, v_ref = (torch.randn(B, S - hw, H, D, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    prepared = I.prepare_reference(k_ref, v_ref, VARIANT)
    r = I.reference_launch(q, k, prepared, hw, VARIANT)
    # the float32 reference on the rows of frames 0 and 1 and two heads only (the whole one does
    # not fit in memory): frame 0 sees no reference, frame 1 reference frame 0
    rows, heads = 2 * hw, 2
    kk, vv = I.dequantize_reference(prepared)
    keys = torch.cat([k[:, :, :heads].float(), kk[:, :hw, :heads]], dim=1)
    vals = torch.cat([v[:, :, :heads].float(), vv[:, :hw, :heads]], dim=1)
    allowed = torch.ones(rows, S + hw, dtype=torch.bool, device="cuda")
    allowed[:hw, S:] = False
    sc = torch.einsum("bshd,bthd->bhst", q[:, :rows, :heads].float(), keys) / math.sqrt(D)
    ref = torch.einsum("bhst,bthd->bshd", sc.masked_fill(~allowed, float("-inf")).softmax(-1), vals)
    del sc
    return x, ref, 4 * B * H * S * (S + hw) * D, r


def bench_attention_ws(shapes: tuple[str, ...] = tuple(SHAPES), json_path: str | Path | None = None, log: Any = print) -> dict[str, Any]:
    """The rows of the module docstring per shape; the record is rewritten after each shape."""
    import torch

    from benchmarks.lab_record import write_lab_result
    from newsmotion_engine.accel import attention as A

    result: dict[str, Any] = {"bench": "attention_ws", "weights": "random inputs", "variant": VARIANT,
                              "device": torch.cuda.get_device_name(), "triton": triton.__version__, "torch": torch.__version__,
                              "created_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), "shapes": {}}  # fmt: skip
    one_loop = A._build_kernel()
    ws = T.autotuned_ws(A.WS_CONFIGS)

    def rel(a: Any, b: Any) -> float:  # b may hold the first rows and heads only
        a = a[:, : b.shape[1], : b.shape[2]].float()
        return round(float((a - b.float()).norm() / b.float().norm()), 5)

    for name in shapes:
        x, ref, flop, r = _inputs(name)
        S = x.q.shape[2]
        launches = {"one_loop": lambda: A.launch_kernel(one_loop, x, VARIANT, reference=r),
                    "ws": lambda: A.launch_kernel_ws(ws, one_loop, x, VARIANT, reference=r)}  # fmt: skip
        for bm, bn, warps, stages in A.WS_CONFIGS:
            meta = {"BLOCK_M": bm, "BLOCK_N": bn, "MASK_TAIL": S % bn != 0, "num_warps": warps, "num_stages": stages}
            launches[f"ws {bm}x{bn} w{warps} s{stages}"] = (
                lambda meta=meta: A.launch_kernel_ws(T.attention_fwd_ws, one_loop, x, VARIANT, reference=r, **meta))  # fmt: skip
        rows: dict[str, Any] = {}
        base = None
        for key, fn in launches.items():
            try:
                out = fn()
                torch.cuda.synchronize()
                ms = triton.testing.do_bench(fn, warmup=100, rep=1000, return_mode="median")
            except Exception as exc:  # noqa: BLE001 - record and go on
                rows[key] = {"error": str(exc).splitlines()[0][:200]}
                log(f"{name} {key}: {rows[key]}")
                continue
            base = out if base is None else base
            rows[key] = {"ms": round(ms, 2), "tflops": round(flop / ms / 1e9, 1), "err_vs_exact": rel(out, ref),
                         "diff_vs_one_loop": round(float((out.float() - base.float()).norm() / base.float().norm()), 5),
                         "finite": bool(torch.isfinite(out).all())}  # fmt: skip
            if "one_loop" in rows and key != "one_loop":
                rows[key]["speedup_vs_one_loop"] = round(rows["one_loop"]["ms"] / ms, 3)
            log(f"{name} {key}: {rows[key]}")
        result["shapes"][name] = {"shape": list(SHAPES[name]), "tflop": round(flop / 1e12, 2), "rows": rows}
        if json_path:
            head = {}
            for n, sh in result["shapes"].items():
                for k_ in ("one_loop", "ws"):
                    if "ms" in sh["rows"].get(k_, {}):
                        head[f"{n} {k_} (ms)"] = sh["rows"][k_]["ms"]
            write_lab_result(json_path, result, title="FP8 attention: warp-specialized kernel vs the one-loop kernel", headline=head)
        del x, ref, r, base, out
        torch.cuda.empty_cache()
    return result


@triton.jit
def _minimal_attention(q_desc, k_desc, v_desc, O, S, scale, D: tl.constexpr, BLOCK_M: tl.constexpr,
                       BLOCK_N: tl.constexpr, WS: tl.constexpr, DEVICE_DESC: tl.constexpr):  # fmt: skip
    """A plain bf16 attention forward (2-D descriptors over ``[B*H*S, D]``, S a multiple of both
    blocks), the smallest kernel of the warp-specialized shape: does Triton's Hopper pass run at
    all on this card, whatever our kernel does? ``DEVICE_DESC``: q/k/v come as plain tensors and
    the descriptors are made here (as Triton's attention tutorial does on Hopper), else from the host."""
    start_m = tl.program_id(0) * BLOCK_M
    row0 = tl.program_id(1) * S
    if DEVICE_DESC:
        rows = S * tl.num_programs(1)
        q_desc = tl.make_tensor_descriptor(q_desc, shape=[rows, D], strides=[D, 1], block_shape=[BLOCK_M, D])
        k_desc = tl.make_tensor_descriptor(k_desc, shape=[rows, D], strides=[D, 1], block_shape=[BLOCK_N, D])
        v_desc = tl.make_tensor_descriptor(v_desc, shape=[rows, D], strides=[D, 1], block_shape=[BLOCK_N, D])
    q = q_desc.load([row0 + start_m, 0])
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, D], tl.float32)
    for start_n in tl.range(0, S, BLOCK_N, warp_specialize=WS):
        s = tl.dot(q, k_desc.load([row0 + start_n, 0]).T) * scale
        m_new = tl.maximum(m_i, tl.max(s, 1))
        p = tl.math.exp2(s - m_new[:, None])
        alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = tl.dot(p.to(tl.bfloat16), v_desc.load([row0 + start_n, 0]), acc * alpha[:, None])
        m_i = m_new
    rows = (row0 + start_m + tl.arange(0, BLOCK_M)).to(tl.int64)  # a pointer store: a TMA store after the loop fails the pass
    tl.store(O + rows[:, None] * D + tl.arange(0, D)[None, :], (acc / l_i[:, None]).to(tl.bfloat16))


# name: (kernel, warp-specialized, S, hw or 0, (BLOCK_M, BLOCK_N, num_warps, num_stages)); kernel
# "minimal" (device descriptors) / "minimal_host" (host descriptors) / "ws" (ours)
PROBES = {
    "minimal bf16, plain loop": ("minimal", False, 4096, 0, (128, 128, 8, 2)),
    "minimal bf16, ws, host descriptors": ("minimal_host", True, 4096, 0, (128, 128, 4, 2)),
    "minimal bf16, ws 128x128 w4 s2": ("minimal", True, 4096, 0, (128, 128, 4, 2)),
    "minimal bf16, ws 128x128 w4 s3": ("minimal", True, 4096, 0, (128, 128, 4, 3)),
    "minimal bf16, ws 128x128 w8 s2": ("minimal", True, 4096, 0, (128, 128, 8, 2)),
    "minimal bf16, ws 128x64 w4 s2": ("minimal", True, 4096, 0, (128, 64, 4, 2)),
    "minimal bf16, ws 64x128 w4 s2": ("minimal", True, 4096, 0, (64, 128, 4, 2)),
    "ours dense whole tiles 128x128 w4 s2": ("ws", True, 4096, 0, (128, 128, 4, 2)),
    "ours dense whole tiles 128x128 w8 s2": ("ws", True, 4096, 0, (128, 128, 8, 2)),
    "ours dense whole tiles 128x64 w4 s3": ("ws", True, 4096, 0, (128, 64, 4, 3)),
    "ours in-context 128x128 w4 s2": ("ws", True, 4096, 1024, (128, 128, 4, 2)),
}


def _probe_one(name: str) -> dict[str, Any]:
    """One probe of :data:`PROBES` in this process: its error against bf16 SDPA and its time."""
    import torch
    import torch.nn.functional as F

    from newsmotion_engine.accel import attention as A

    kind, ws, S, hw, (bm, bn, warps, stages) = PROBES[name]
    B, H, D = 1, 8, 128
    torch.manual_seed(0)
    q, k, v = (torch.randn(B, S, H, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    ref = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)).transpose(1, 2)
    if kind.startswith("minimal"):
        from triton.tools.tensor_descriptor import TensorDescriptor

        qh, kh, vh = (t.transpose(1, 2).contiguous().view(B * H * S, D) for t in (q, k, v))
        o = torch.empty_like(qh)
        host = kind == "minimal_host"
        args = [TensorDescriptor.from_tensor(t, [bm if t is qh else bn, D]) if host else t for t in (qh, kh, vh)] + [o]
        A._set_scratch_allocator(q.device)

        def fn():
            _minimal_attention[(S // bm, B * H)](*args, S, 1.4426950408889634 / math.sqrt(D), D=D, BLOCK_M=bm, BLOCK_N=bn,
                                                  WS=ws, DEVICE_DESC=not host, num_warps=warps, num_stages=stages)  # fmt: skip
            return o.view(B, H, S, D).transpose(1, 2)
    else:
        r = None
        if hw:
            from newsmotion_engine.accel import attention_incontext as I

            prepared = I.prepare_reference(*(torch.randn(B, S - hw, H, D, device="cuda", dtype=torch.bfloat16) for _ in range(2)), VARIANT)
            r = I.reference_launch(q, k, prepared, hw, VARIANT)
        x = A.quantize_attention_inputs(q, k, v, VARIANT)
        one_loop = A._build_kernel()
        meta = {"BLOCK_M": bm, "BLOCK_N": bn, "MASK_TAIL": S % bn != 0, "num_warps": warps, "num_stages": stages}

        def fn():
            return A.launch_kernel_ws(T.attention_fwd_ws, one_loop, x, VARIANT, reference=r, **meta)

        if hw:  # against the one-loop kernel (the in-context softmax has no SDPA form)
            ref = A.launch_kernel(one_loop, x, VARIANT, reference=r)
    out = fn()
    torch.cuda.synchronize()
    ms = triton.testing.do_bench(fn, warmup=20, rep=200, return_mode="median")
    return {"ok": True, "ms": round(ms, 3), "rel_err": round(float((out.float() - ref.float()).norm() / ref.float().norm()), 5),
            "finite": bool(torch.isfinite(out).all())}  # fmt: skip


def probe(timeout_s: float = 30.0) -> dict[str, Any]:
    """Each of :data:`PROBES` in its own process under a time limit, so that a hang (a barrier the
    pass got wrong) or an illegal address is a row, not the end of the run."""
    import json
    import subprocess
    import sys

    rows = {}
    for name in PROBES:
        code = f"import json; from benchmarks.attention_ws import _probe_one; print('PROBE', json.dumps(_probe_one({name!r})))"
        try:
            p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            rows[name] = {"ok": False, "error": f"no result in {timeout_s:.0f} s (hang)"}
        else:
            line = [ln for ln in p.stdout.splitlines() if ln.startswith("PROBE ")]
            rows[name] = json.loads(line[-1][6:]) if line else {"ok": False, "error": (p.stderr.strip().splitlines() or ["?"])[-1][:200]}
        print(name, rows[name], flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.attention_ws", description=__doc__.splitlines()[0])
    p.add_argument("--sass", action="store_true", help="compile each config for sm_90 here and report (no GPU)")
    p.add_argument("--probe", action="store_true", help="small launches, each in its own process: which ones run (GPU)")
    p.add_argument("--shapes", default=",".join(SHAPES))
    p.add_argument("--json")
    a = p.parse_args(argv)
    if a.sass:
        rows = sass()
        for key, row in rows.items():
            print(key, row)
        if a.json:
            from benchmarks.lab_record import write_lab_result

            out = {"target": "cuda sm_90 (compiled on CPU)", "device": "cuda sm_90 (compiled on CPU)", "triton": triton.__version__,
                   "variant": VARIANT, "kernels": rows}  # fmt: skip
            write_lab_result(a.json, out, title="FP8 attention, warp-specialized kernel compiled for sm_90: registers, warps, spills",
                             headline={"configs warp-specialized": sum(bool(r.get("warp_specialized")) for r in rows.values()),
                                       "configs": len(rows)})  # fmt: skip
        return 0
    if a.probe:
        import torch

        from benchmarks.lab_record import write_lab_result

        rows = probe()
        if a.json:
            out = {"device": torch.cuda.get_device_name(), "triton": triton.__version__, "torch": torch.__version__,
                   "variant": VARIANT, "probes": rows}  # fmt: skip
            write_lab_result(a.json, out, title="FP8 attention, warp-specialized kernel: which small launches run",
                             headline={"probes ok": sum(bool(r.get("ok")) for r in rows.values()), "probes": len(rows)})  # fmt: skip
        return 0
    bench_attention_ws(tuple(a.shapes.split(",")), json_path=a.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
