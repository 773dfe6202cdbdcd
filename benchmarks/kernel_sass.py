"""What the FP8 attention kernel compiles to on Hopper, read on any machine (no GPU needed).

Triton compiles for a named target on a CPU (``GPUTarget("cuda", 90, 32)``) with the ``ptxas``
and ``cuobjdump`` its wheel bundles. From the cubin this reports, per kernel variant and config:
registers per thread, stack (spill) bytes, shared memory, the tensor-core instructions used
(``IGMMA``/``QGMMA``/``HGMMA``: a kernel without them is on a slow path) and the main loop's
instruction count per attention score. The kernel is issue-bound when that count times the
scores per SM cycle passes the 4 instructions per cycle an SM issues, which is what the first
version (per-byte K loads, ~23 instructions per score) was.

    python -m benchmarks.kernel_sass --json benchmarks/results/attention_sass.json
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

__all__ = ["kernel_report", "sass_report"]

_OPCODE = re.compile(r"/\*([0-9a-f]{4,6})\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*(?:\.[A-Z0-9_]+)*)")
_BRANCH = re.compile(r"/\*([0-9a-f]{4,6})\*/.*\bBRA (0x[0-9a-f]+)")


def _tool(name: str) -> str:
    import triton

    return str(Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / name)


def _compile(variant: str, config: tuple[int, int, int, int, bool], head_dim: int) -> Any:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from newsmotion_engine.accel import attention_triton as T
    from newsmotion_engine.accel.attention import FP8_VARIANTS

    var = FP8_VARIANTS[variant]
    bm, bn, warps, stages, pipeline = config
    qk = "i8" if var.qk_int8 else "fp8e4nv"
    pv = "fp8e4nv" if var.pv_fp8 else "bf16"
    signature = {
        "q_desc": f"tensordesc<{qk}[1,{bm},{head_dim}]>", "k_desc": f"tensordesc<{qk}[1,{bn},{head_dim}]>",
        "vt_desc": f"tensordesc<{pv}[1,{head_dim},{bn}]>", "O": "*bf16", "QS": "*fp32", "VS": "*fp32",
        "S": "i32", "H": "i32", "stride_ob": "i32", "stride_os": "i32", "stride_oh": "i32",
        "D": "constexpr", "BLOCK_M": "constexpr", "BLOCK_N": "constexpr", "QK_INT8": "constexpr",
        "PV_FP8": "constexpr", "PIPELINE_QK": "constexpr",
    }  # fmt: skip
    constexprs = {"D": head_dim, "BLOCK_M": bm, "BLOCK_N": bn, "QK_INT8": var.qk_int8, "PV_FP8": var.pv_fp8,
                  "PIPELINE_QK": pipeline}  # fmt: skip
    src = ASTSource(fn=T.attention_fwd, signature=signature, constexprs=constexprs)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": warps, "num_stages": stages})


def sass_report(cubin: bytes) -> dict[str, Any]:
    """Registers, stack, opcode histogram and the innermost tensor-core loop of one cubin."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "kernel.cubin")
        Path(path).write_bytes(cubin)
        sass = subprocess.run([_tool("cuobjdump"), "--dump-sass", path], capture_output=True, text=True, check=True).stdout
        usage = subprocess.run([_tool("cuobjdump"), "-res-usage", path], capture_output=True, text=True, check=True).stdout
    res = {k: int(v) for k, v in re.findall(r"\b(REG|STACK|SHARED|LOCAL):(\d+)", usage)}
    lines = [(int(m.group(1), 16), m.group(2)) for m in map(_OPCODE.search, sass.splitlines()) if m]
    loops = []
    for m in map(_BRANCH.search, sass.splitlines()):
        if m and int(m.group(2), 16) < int(m.group(1), 16):
            lo, hi = int(m.group(2), 16), int(m.group(1), 16)
            body = [op for addr, op in lines if lo <= addr <= hi]
            if any("GMMA" in op for op in body):
                loops.append(body)
    loop = min(loops, key=len) if loops else []
    ops = Counter(op.split(".")[0] for _, op in lines)
    return {
        "registers": res.get("REG"),
        "stack_bytes": res.get("STACK"),
        "tensor_core_ops": sorted({op for _, op in lines if "GMMA" in op}),
        "instructions": len(lines),
        "opcodes": dict(ops.most_common(12)),
        "main_loop_instructions": len(loop),
        "main_loop_opcodes": dict(Counter(op.split(".")[0] for op in loop).most_common(12)),
    }


def kernel_report(variants: tuple[str, ...] | None = None, configs: Any = None, head_dim: int = 128) -> dict[str, Any]:
    """:func:`sass_report` of every kernel variant x autotune config (default: all of both), plus
    ``instructions_per_score``: main-loop instructions per warp over the scores one thread
    handles per iteration (``BLOCK_M * BLOCK_N / (32 * num_warps)``)."""
    import triton

    from newsmotion_engine.accel.attention import AUTOTUNE_CONFIGS, FP8_VARIANTS

    out: dict[str, Any] = {"target": "cuda sm_90 (compiled on CPU)", "triton": triton.__version__,
                           "head_dim": head_dim, "kernels": {}}  # fmt: skip
    for variant in variants or tuple(FP8_VARIANTS):
        for cfg in configs or AUTOTUNE_CONFIGS:
            bm, bn, warps, stages, pipeline = cfg
            key = f"{variant} {bm}x{bn} w{warps} s{stages}" + (" pipelined" if pipeline else "")
            kernel = _compile(variant, tuple(cfg), head_dim)
            row = sass_report(kernel.asm["cubin"])
            row["shared_bytes"] = kernel.metadata.shared
            per_thread = bm * bn / (32 * warps)
            row["instructions_per_score"] = round(row["main_loop_instructions"] / per_thread, 2) if row["main_loop_instructions"] else None
            out["kernels"][key] = row
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.kernel_sass", description=__doc__.splitlines()[0])
    p.add_argument("--json", help="where the result record goes")
    a = p.parse_args(argv)
    try:
        import triton  # noqa: F401
    except ImportError:
        print("kernel_sass needs triton (it ships the sm_90 compiler and cuobjdump)", file=sys.stderr)
        return 1
    result = kernel_report()
    if a.json:
        from benchmarks.lab_record import write_lab_result

        fastest = min((r["instructions_per_score"] for r in result["kernels"].values() if r["instructions_per_score"]), default=None)
        write_lab_result(a.json, {**result, "device": result["target"]}, title="FP8 attention kernel compiled for sm_90: SASS per variant and config",
                         headline={"fewest loop instructions per score": fastest} if fastest is not None else {})  # fmt: skip
        print(f"wrote {a.json}")
    print("kernel | registers | stack B | shared KiB | tensor-core ops | loop instr / score")
    for key, row in result["kernels"].items():
        print(f"{key} | {row['registers']} | {row['stack_bytes']} | {row['shared_bytes'] / 1024:.0f} | "
              f"{' '.join(row['tensor_core_ops'])} | {row['instructions_per_score']}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
