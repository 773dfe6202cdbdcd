"""Per-row FP8 quantization of a linear's input in one pass, optionally with the GELU before it.

:class:`~newsmotion_engine.accel.fp8.Float8Linear` quantizes each token row of its input to e4m3
with one float32 scale (``amax / 448``) before the FP8 GEMM. Under torch.compile inductor fuses
that into the producer's kernel, but a row longer than 1024 becomes a looped reduction that
reads the row and recomputes the fused prologue once for the max and once more for the
quantization. For the feed-forward's down projection the prologue is ``GELU(approximate="tanh")``
over 13824 channels, and inductor's tanh is libdevice's exact one: that kernel ran several times
its memory time (``cb32d61:bench/results/gpu_animate2_kernels_14b_h200.json``).

:func:`quantize_rows` is one Triton program per row, the row held in registers: one read, the
activation once, the max, the quantized row and its scale written. ``gelu=True`` applies
``GELU(tanh)`` first, rounded to bfloat16 as the unfused module would hand it on, written as
``x * sigmoid(2u)`` (``(1 + tanh u) / 2 == sigmoid(2u)``: one exp2 and one reciprocal instead of a
tanh), and each value is multiplied by ``1 / scale`` rather than divided by it (within an ulp).
Measured on the H200 against :func:`quantize_rows_reference` (the torch ops): 1.2e-4 of the
values differ (2.2e-4 with the GELU) — the reciprocal, and Triton's float32 -> e4m3 cast, which
rounds some values differently from torch's (with IEEE division the kernel still differed on
1.8e-4). The scales (the exact row max over 448, IEEE) were not compared on the GPU. Under
Triton's interpreter the arithmetic before the cast, scales included, is checked against the
reference (tests).

Registered as the custom op ``newsmotion::fp8_quantize_rows`` so a compiled block calls it as one
kernel. CUDA only (the FP8 GEMM it feeds is sm_90); elsewhere the torch reference runs.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

__all__ = ["E4M3_MAX", "launch", "quantize_rows", "quantize_rows_reference"]

E4M3_MAX = float(torch.finfo(torch.float8_e4m3fn).max)  # 448
MAX_ROW = 16384  # the row must fit one program's registers (16 warps x 32 threads x 32 values)
_KERNEL = None


def quantize_rows_reference(x: torch.Tensor, gelu: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """2-D ``x`` -> (e4m3 rows, float32 ``[M, 1]`` scales) with torch ops: the unfused path
    (``F.gelu(x, approximate="tanh")`` in ``x``'s dtype first when ``gelu``)."""
    if gelu:
        x = F.gelu(x, approximate="tanh")
    amax = x.abs().amax(dim=-1, keepdim=True).float().clamp_min(1e-12)
    scale = amax / E4M3_MAX
    q = (x.float() / scale).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    return q, scale


def _build_kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def quantize_rows_kernel(X, Q, S, N, stride_x, stride_q, GELU: tl.constexpr, ROUND_BF16: tl.constexpr,
                             BLOCK: tl.constexpr, RECIPROCAL: tl.constexpr = False):  # fmt: skip
        row = tl.program_id(0).to(tl.int64)
        offs = tl.arange(0, BLOCK)
        mask = offs < N
        x = tl.load(X + row * stride_x + offs, mask=mask, other=0.0).to(tl.float32)
        if GELU:
            # 2u = x * (2 sqrt(2/pi) + 2 sqrt(2/pi) 0.044715 x^2); sigmoid(2u) = 1 / (1 + 2^(-2u log2 e))
            two_u = x * (1.5957691216057308 + 0.0713548162726009 * x * x)
            x = x / (1.0 + tl.math.exp2(-1.4426950408889634 * two_u))
            if ROUND_BF16:
                x = x.to(tl.bfloat16).to(tl.float32)
        amax = tl.maximum(tl.max(tl.abs(x), axis=0), 1e-12)
        scale = tl.math.div_rn(amax, 448.0)
        if RECIPROCAL:  # one multiply per value instead of an IEEE division (within an ulp of it)
            q = x * tl.math.div_rn(1.0, scale)
        else:
            q = tl.math.div_rn(x, scale)
        q = tl.minimum(tl.maximum(q, -448.0), 448.0)
        tl.store(Q + row * stride_q + offs, q.to(Q.dtype.element_ty), mask=mask)  # e4m3 (float32: tests see it uncast)
        tl.store(S + row, scale)

    return quantize_rows_kernel


def launch(x: torch.Tensor, gelu: bool, *, values_per_thread: int = 32, reciprocal: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """The kernel on a contiguous-rows CUDA ``x`` with an explicit shape of program (the bench
    sweeps it): ``values_per_thread`` of the row per thread sets the warps; ``reciprocal``
    multiplies by ``1 / scale`` instead of dividing each value. The defaults are the sweep's
    fastest (``benchmarks/results/fp8_rows_h200.json``, against dividing and inductor's)."""
    global _KERNEL
    if _KERNEL is None:
        _KERNEL = _build_kernel()
    M, N = x.shape
    q = torch.empty((M, N), device=x.device, dtype=torch.float8_e4m3fn)
    s = torch.empty((M, 1), device=x.device, dtype=torch.float32)
    block = max(16, 1 << math.ceil(math.log2(N)))
    warps = max(1, min(32, block // (32 * values_per_thread)))
    _KERNEL[(M,)](x, q, s, N, x.stride(0), q.stride(0), GELU=gelu, ROUND_BF16=x.dtype == torch.bfloat16,
                  BLOCK=block, RECIPROCAL=reciprocal, num_warps=warps)  # fmt: skip
    return q, s


@torch.library.custom_op("newsmotion::fp8_quantize_rows", mutates_args=())
def _quantize_rows_op(x: torch.Tensor, gelu: bool) -> tuple[torch.Tensor, torch.Tensor]:
    return launch(x, gelu)


@_quantize_rows_op.register_fake
def _(x: torch.Tensor, gelu: bool) -> tuple[torch.Tensor, torch.Tensor]:
    return x.new_empty(x.shape, dtype=torch.float8_e4m3fn), x.new_empty((x.shape[0], 1), dtype=torch.float32)


def quantize_rows(x: torch.Tensor, gelu: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """2-D ``x`` -> (e4m3 rows, float32 ``[M, 1]`` scales): the Triton kernel on CUDA for rows of
    at most :data:`MAX_ROW` (module docstring), else :func:`quantize_rows_reference`."""
    if x.dim() != 2:
        raise ValueError(f"quantize_rows: a 2-D tensor, got shape {tuple(x.shape)}")
    if not x.is_cuda or x.shape[1] > MAX_ROW or x.shape[0] == 0:
        return quantize_rows_reference(x, gelu)
    if x.stride(1) != 1:
        x = x.contiguous()
    return _quantize_rows_op(x, gelu)
