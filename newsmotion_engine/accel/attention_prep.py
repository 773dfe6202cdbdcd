"""The in-context attention's inputs in three Triton passes: QK-norm, RoPE and 8-bit quantization.

Between the Q/K/V projections and the in-context kernel (:mod:`.attention_incontext`) a
Wan-Animate-2 cached pass does, per layer: RMSNorm of Q and K over all heads, RoPE, K's channel
mean and scales, Q quantized twice (with the generation keys' channel scales and with the
reference keys'), the smoothing difference ``delta`` per query row, and V's channel scales and
transposed e4m3 copy. Compiled, inductor spreads that over seven kernels that re-read the
bf16 tensors and spent several times the time those bytes need (profiled in
``benchmarks/results/wan_animate_2_clip_profile_h200.json``; the fused passes against them in
``benchmarks/results/attention_prep_h200.json``).

:func:`incontext_prep` does it in three passes over the projections' bf16 output:

1. ``rstd``: per token, the RMS statistic of Q and of K (reads Q and K once).
2. ``stats``: per (block of tokens, head), K normalized and rotated, its per-channel partial sum,
   max and min, and V's per-channel partial absolute max (reads K and V once). A few torch ops
   on those partials give K's mean and scales (``max |k - mean| == max(max - mean, mean - min)``:
   float32 subtraction is monotonic) and V's scales.
3. ``quant``: per (block of tokens, head), Q and K normalized and rotated again from the raw
   projections (cheaper than writing and re-reading them), both Q quantizations with their row
   factors, ``delta``, K and V quantized; the kernel's layouts written directly.

The arithmetic is :func:`~newsmotion_engine.accel.attention_incontext.reference_launch`'s and
:func:`~newsmotion_engine.accel.attention.quantize_attention_inputs`' on the same rounded
intermediates (the norm's output rounded once to bfloat16, as ``aten._fused_rms_norm``; RoPE in
float32 rounded to bfloat16, as the processor's ``apply_rope(...).type_as(v)``); each value is
multiplied by the reciprocal of its scale instead of divided by it (within an ulp: a quotient
within an ulp of a rounding boundary can land one 8-bit step away). ``delta`` sums in a different
order. Tests check it against the torch path under Triton's interpreter; on the GPU the bench
(``python -m benchmarks.animate2_kernels --prep-only``) records how many values differ.

Registered as the custom op ``newsmotion::incontext_prep`` so a compiled block calls it as one
opaque step. CUDA only, for the variants whose V is e4m3; elsewhere the torch path runs.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from newsmotion_engine.accel import attention as A

__all__ = ["incontext_prep", "incontext_prep_reference", "launch", "norm_rope_reference", "prepared_incontext_attention", "supported"]

_KERNELS: Any = None
BLOCK_T = 64  # tokens per program of the rstd pass (it loops over the row's heads)
# (tokens, warps) per program of the quant pass (its tiles arrive by TMA descriptors: with
# per-element pointers it compiled to 255 registers and spilled) and of the stats pass (pointer
# loads): the fastest of the H200 sweep (benchmarks/results/attention_prep_h200.json)
TILE = (16, 4)
STATS = (64, 4)


def supported(q: torch.Tensor, variant: str | None) -> bool:
    """Whether :func:`incontext_prep` runs its kernels here (else the torch path is used)."""
    _, var = A._variant(variant)
    return q.is_cuda and var.pv_fp8 and q.dtype == torch.bfloat16


def _build_kernels() -> Any:
    from newsmotion_engine.accel import attention_prep_triton as T

    return T.rstd_kernel, T.stats_kernel, T.quant_kernel


def launch(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, wq: torch.Tensor, wk: torch.Tensor, eps: float,
           cos: torch.Tensor, sin: torch.Tensor, ref_k_scale: torch.Tensor, ref_k_mean: torch.Tensor, heads: int,
           variant: str | None = None, *, out_dtype: torch.dtype | None = None,
           libdevice: bool = True, tile: tuple[int, int] = TILE,
           stats: tuple[int, int] = STATS) -> tuple[A.QuantizedQKV, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:  # fmt: skip
    """The three passes on ``q, k, v`` ``[B, S, H * D]`` (module docstring) ->
    ``(QuantizedQKV, (reference q8, its row factors, delta))``. ``out_dtype`` overrides the 8-bit
    outputs' dtype (float32 lets tests see the values before the cast); ``libdevice=False`` rounds
    without libdevice (Triton's interpreter)."""
    global _KERNELS
    if _KERNELS is None:
        _KERNELS = _build_kernels()
    rstd_kernel, stats_kernel, quant_kernel = _KERNELS
    _, var = A._variant(variant)
    B, S, N = q.shape
    D = N // heads
    if N != heads * D or D % 2 or k.shape != q.shape or v.shape != q.shape or cos.shape != (S, D // 2) or sin.shape != cos.shape:
        raise ValueError(f"incontext_prep: q/k/v {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)} with {heads} heads and RoPE "
                         f"{tuple(cos.shape)} do not fit")  # fmt: skip
    if any(t.stride(-1) != 1 for t in (q, k, v)):
        raise ValueError("incontext_prep: q, k, v need a contiguous last dimension")
    dev = q.device
    f32 = dict(device=dev, dtype=torch.float32)
    cos, sin = cos.float().contiguous(), sin.float().contiguous()
    from triton.tools.tensor_descriptor import TensorDescriptor

    nblk_r = math.ceil(S / BLOCK_T)
    bt, warps = tile
    nblk = math.ceil(S / bt)

    rq, rk = torch.empty((B, S), **f32), torch.empty((B, S), **f32)
    rstd_kernel[(nblk_r, B)](q, k, rq, rk, S, q.stride(0), q.stride(1), k.stride(0), k.stride(1), float(eps),
                           N=N, BT=BLOCK_T, BC=128, num_warps=4)  # fmt: skip

    def rows(t: torch.Tensor) -> Any:  # [B, S, N] (row stride free) in [1, BT, D] tiles
        return TensorDescriptor(t, [B, S, N], [t.stride(0), t.stride(1), 1], [1, bt, D])

    def angles(t: torch.Tensor) -> Any:
        return TensorDescriptor(t, [S, D // 2], [D // 2, 1], [bt, D // 2])

    sbt, swarps = stats
    nblk_s = math.ceil(S / sbt)
    parts = torch.empty((4, B, nblk_s, N), **f32)
    stats_kernel[(heads, nblk_s, B)](k, v, rk, wk, cos, sin, parts[0], parts[1], parts[2], parts[3], S, nblk_s, k.stride(0),
                                     k.stride(1), v.stride(0), v.stride(1), H=heads, D=D, BT=sbt, num_warps=swarps)  # fmt: skip
    qmax = A.INT8_MAX if var.qk_int8 else A.E4M3_MAX
    mean = parts[0].sum(dim=1) / S  # [B, N]
    amax = torch.maximum(parts[1].amax(dim=1) - mean, mean - parts[2].amin(dim=1))
    kc = amax.clamp_min(1e-12) / qmax
    vs = parts[3].amax(dim=1).clamp_min(1e-12) / A.E4M3_MAX
    ref_kc = ref_k_scale.reshape(B, N).float().contiguous()
    shift = (ref_k_mean.reshape(B, N).float() - mean).contiguous()

    qk_dtype = out_dtype or (torch.int8 if var.qk_int8 else torch.float8_e4m3fn)
    s16 = A._pad16(S)
    q8 = torch.empty((B, heads, S, D), device=dev, dtype=qk_dtype)
    rq8, k8 = torch.empty_like(q8), torch.empty_like(q8)
    vt = torch.empty((B, heads, D, s16), device=dev, dtype=out_dtype or torch.float8_e4m3fn)
    if s16 != S:
        vt[..., S:].zero_()
    q_scale, rq_scale, delta = (torch.empty((B, heads, S), **f32) for _ in range(3))

    def heads_rows(t: torch.Tensor) -> Any:  # [B, H, S, D] contiguous in [1, BT, D] tiles
        return TensorDescriptor(t, [B * heads, S, D], [S * D, D, 1], [1, bt, D])

    vt_desc = TensorDescriptor(vt, [B * heads, D, S], [D * s16, s16, 1], [1, D, bt])
    sm = A.LOG2E / math.sqrt(D)
    quant_kernel[(heads, nblk, B)](rows(q), rows(k), rows(v), angles(cos), angles(sin), heads_rows(q8), heads_rows(rq8),
                                   heads_rows(k8), vt_desc, rq, rk, wq, wk, kc, mean, ref_kc, shift, 1.0 / vs,
                                   q_scale, rq_scale, delta, S, sm, H=heads, D=D, BT=bt, QK_INT8=var.qk_int8,
                                   LIBDEVICE=libdevice, num_warps=warps)  # fmt: skip
    x = A.QuantizedQKV(q=q8, k=k8, vt=vt, q_scale=q_scale, v_scale=vs.reshape(B, heads, D))
    return x, (rq8, rq_scale, delta)


@torch.library.custom_op("newsmotion::incontext_prep", mutates_args=())
def _prep_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, wq: torch.Tensor, wk: torch.Tensor, eps: float,
             cos: torch.Tensor, sin: torch.Tensor, ref_k_scale: torch.Tensor, ref_k_mean: torch.Tensor, heads: int,
             variant: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:  # fmt: skip
    x, r = launch(q, k, v, wq, wk, eps, cos, sin, ref_k_scale, ref_k_mean, heads, variant)
    return (*x, *r)


@_prep_op.register_fake
def _(q, k, v, wq, wk, eps, cos, sin, ref_k_scale, ref_k_mean, heads, variant):  # noqa: ANN001, ANN202
    _, var = A._variant(variant)
    B, S, N = q.shape
    D = N // heads
    q8 = q.new_empty((B, heads, S, D), dtype=torch.int8 if var.qk_int8 else torch.float8_e4m3fn)
    scale = q.new_empty((B, heads, S), dtype=torch.float32)
    vt = q.new_empty((B, heads, D, A._pad16(S)), dtype=torch.float8_e4m3fn)
    return q8, torch.empty_like(q8), vt, scale, q.new_empty((B, heads, D), dtype=torch.float32), torch.empty_like(q8), \
        torch.empty_like(scale), torch.empty_like(scale)  # fmt: skip


def norm_rope_reference(x: torch.Tensor, w: torch.Tensor, eps: float, cos: torch.Tensor, sin: torch.Tensor, heads: int) -> torch.Tensor:
    """``[B, S, H * D]`` -> BSHD: RMSNorm over all heads (``aten._fused_rms_norm``: float32, one
    rounding to ``x``'s dtype), then RoPE over interleaved pairs in float32, rounded again."""
    xf = x.float()
    y = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w.float()).to(x.dtype)
    y = y.unflatten(-1, (heads, -1, 2)).float()
    c, s = cos[None, :, None], sin[None, :, None]
    re, im = y[..., 0], y[..., 1]
    return torch.stack([re * c - im * s, re * s + im * c], dim=-1).flatten(-2).to(x.dtype)


def incontext_prep_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, wq: torch.Tensor, wk: torch.Tensor,
                             eps: float, cos: torch.Tensor, sin: torch.Tensor, ref_k_scale: torch.Tensor,
                             ref_k_mean: torch.Tensor, heads: int,
                             variant: str | None = None) -> tuple[A.QuantizedQKV, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:  # fmt: skip
    """The same with torch ops: the processor's unfused path (``aten._fused_rms_norm``'s rounding,
    the float32 RoPE, :func:`~newsmotion_engine.accel.attention.quantize_attention_inputs` and
    :func:`~newsmotion_engine.accel.attention_incontext.reference_launch`)."""
    from newsmotion_engine.accel.attention_incontext import ReferenceKV, reference_launch

    qr, kr = norm_rope_reference(q, wq, eps, cos, sin, heads), norm_rope_reference(k, wk, eps, cos, sin, heads)
    vh = v.unflatten(-1, (heads, -1))
    x = A.quantize_attention_inputs(qr, kr, vh, variant)
    B, _, H, D = qr.shape
    ref = ReferenceKV(k=x.k, vt=x.vt, k_scale=ref_k_scale, k_mean=ref_k_mean, v_scale=x.v_scale)
    r = reference_launch(qr, kr, ref, 1, variant)
    return x, (r.q, r.q_scale, r.delta)


def incontext_prep(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, wq: torch.Tensor, wk: torch.Tensor, eps: float,
                   cos: torch.Tensor, sin: torch.Tensor, ref_k_scale: torch.Tensor, ref_k_mean: torch.Tensor, heads: int,
                   variant: str | None = None) -> tuple[A.QuantizedQKV, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:  # fmt: skip
    """Raw projections ``q, k, v`` ``[B, S, H * D]`` -> the in-context kernel's generation inputs
    and ``(reference q8, its row factors, delta)``: the kernels where :func:`supported`, else
    :func:`incontext_prep_reference`."""
    name, _ = A._variant(variant)
    if not supported(q, name):
        return incontext_prep_reference(q, k, v, wq, wk, eps, cos, sin, ref_k_scale, ref_k_mean, heads, name)
    out = _prep_op(q, k, v, wq, wk, float(eps), cos, sin, ref_k_scale, ref_k_mean, heads, name)
    return A.QuantizedQKV(*out[:5]), tuple(out[5:])  # type: ignore[return-value]


def prepared_incontext_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, wq: torch.Tensor, wk: torch.Tensor,
                                 eps: float, cos: torch.Tensor, sin: torch.Tensor, ref: Any, hw: int, heads: int,
                                 variant: str | None = None) -> torch.Tensor:  # fmt: skip
    """The in-context attention (:func:`~newsmotion_engine.accel.attention_incontext.incontext_attention`)
    from the raw projections ``[B, S, H * D]``: :func:`incontext_prep`, then the kernel. ``ref`` a
    :class:`~newsmotion_engine.accel.attention_incontext.ReferenceKV`. BSHD bf16 out. CUDA sm_90."""
    from newsmotion_engine.accel import attention_incontext as I

    name, _ = A._variant(variant)
    x, (rq, rq_scale, delta) = incontext_prep(q, k, v, wq, wk, eps, cos, sin, ref.k_scale, ref.k_mean, heads, name)
    return I._kernel_op(*x, rq, rq_scale, delta, ref.k, ref.vt, ref.v_scale, int(hw), name)
