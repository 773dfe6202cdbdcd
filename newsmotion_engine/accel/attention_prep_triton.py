"""The Triton kernels behind :func:`newsmotion_engine.accel.attention_prep.incontext_prep`
(imported only where they run: this module imports triton). See that module's docstring."""

from __future__ import annotations

import triton
import triton.language as tl
from triton.language.extra import libdevice


@triton.jit
def _rint(x, LIBDEVICE: tl.constexpr):
    if LIBDEVICE:
        return libdevice.rint(x)
    else:  # Triton's interpreter has no libdevice: 1.5 * 2^23 rounds half to even for |x| < 2^22
        return (x + 12582912.0) - 12582912.0


@triton.jit
def _bf16(x):
    # float32 -> the nearest bfloat16 (ties to even), kept in float32: integer ops, so Triton's
    # interpreter (whose cast truncates) rounds as the GPU's cvt.rn does
    u = x.to(tl.uint32, bitcast=True)
    u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    return u.to(tl.float32, bitcast=True)


@triton.jit
def _norm_rope(x, rstd, w, c, s, BT: tl.constexpr, D: tl.constexpr):
    # RMSNorm's output rounded once to bf16 (aten._fused_rms_norm), then RoPE over interleaved
    # (even, odd) pairs in float32, rounded to bf16 (the processor's apply_rope(...).type_as(v)).
    y = _bf16(x * rstd[:, None] * w[None, :])
    even, odd = tl.split(tl.reshape(y, (BT, D // 2, 2)))
    rotated = tl.join(even * c - odd * s, even * s + odd * c)
    return _bf16(tl.reshape(rotated, (BT, D)))


@triton.jit
def rstd_kernel(Q, K, RQ, RK, S, sqb, sqs, skb, sks, eps, N: tl.constexpr, BT: tl.constexpr, BC: tl.constexpr):
    t = tl.program_id(0) * BT + tl.arange(0, BT)
    b = tl.program_id(1).to(tl.int64)
    rows = t < S
    cols = tl.arange(0, BC)
    acc_q = tl.zeros((BT,), tl.float32)
    acc_k = tl.zeros((BT,), tl.float32)
    for c0 in range(0, N, BC):
        m = rows[:, None] & ((c0 + cols) < N)[None, :]
        q = tl.load(Q + b * sqb + t[:, None].to(tl.int64) * sqs + c0 + cols[None, :], mask=m, other=0.0).to(tl.float32)
        k = tl.load(K + b * skb + t[:, None].to(tl.int64) * sks + c0 + cols[None, :], mask=m, other=0.0).to(tl.float32)
        acc_q += tl.sum(q * q, axis=1)
        acc_k += tl.sum(k * k, axis=1)
    tl.store(RQ + b * S + t, 1.0 / tl.sqrt_rn(acc_q / N + eps), mask=rows)
    tl.store(RK + b * S + t, 1.0 / tl.sqrt_rn(acc_k / N + eps), mask=rows)


@triton.jit
def stats_kernel(K, V, RK, WK, COS, SIN, KSUM, KMAX, KMIN, VMAX, S, NBLK, skb, sks, svb, svs,
                 H: tl.constexpr, D: tl.constexpr, BT: tl.constexpr):  # fmt: skip
    h = tl.program_id(0)  # heads fastest: a token block's programs run together and share RoPE's cos/sin in L2
    blk = tl.program_id(1)
    b = tl.program_id(2).to(tl.int64)
    t = blk * BT + tl.arange(0, BT)
    rows = t < S
    d = tl.arange(0, D)
    j = tl.arange(0, D // 2)
    col = h * D + d
    k = tl.load(K + b * skb + t[:, None].to(tl.int64) * sks + col[None, :], mask=rows[:, None], other=0.0).to(tl.float32)
    v = tl.load(V + b * svb + t[:, None].to(tl.int64) * svs + col[None, :], mask=rows[:, None], other=0.0).to(tl.float32)
    rk = tl.load(RK + b * S + t, mask=rows, other=0.0)
    w = tl.load(WK + col).to(tl.float32)
    c = tl.load(COS + t[:, None] * (D // 2) + j[None, :], mask=rows[:, None], other=0.0)
    s = tl.load(SIN + t[:, None] * (D // 2) + j[None, :], mask=rows[:, None], other=0.0)
    kr = _norm_rope(k, rk, w, c, s, BT, D)
    out = (b * NBLK + blk) * (H * D) + col
    tl.store(KSUM + out, tl.sum(tl.where(rows[:, None], kr, 0.0), axis=0))
    tl.store(KMAX + out, tl.max(tl.where(rows[:, None], kr, -float("inf")), axis=0))
    tl.store(KMIN + out, tl.min(tl.where(rows[:, None], kr, float("inf")), axis=0))
    tl.store(VMAX + out, tl.max(tl.abs(v), axis=0))  # masked rows loaded as 0


@triton.jit
def quant_kernel(Q, K, V, RQ, RK, WQ, WK, COS, SIN, KC, KMEAN, RKC, SHIFT, VINV,
                 Q8, QS, RQ8, RQS, DELTA, K8, VT, S, S16, sqb, sqs, skb, sks, svb, svs, sm,
                 H: tl.constexpr, D: tl.constexpr, BT: tl.constexpr, QK_INT8: tl.constexpr,
                 LIBDEVICE: tl.constexpr):  # fmt: skip
    h = tl.program_id(0)  # heads fastest: a token block's programs run together and share RoPE's cos/sin in L2
    blk = tl.program_id(1)
    b = tl.program_id(2).to(tl.int64)
    t = blk * BT + tl.arange(0, BT)
    rows = t < S
    d = tl.arange(0, D)
    j = tl.arange(0, D // 2)
    col = h * D + d
    c = tl.load(COS + t[:, None] * (D // 2) + j[None, :], mask=rows[:, None], other=0.0)
    s = tl.load(SIN + t[:, None] * (D // 2) + j[None, :], mask=rows[:, None], other=0.0)
    hd = (b * H + h) * D + d  # this (sample, head)'s channel statistics [B, H, D]
    qmax = 127.0 if QK_INT8 else 448.0
    bhs = (b * H + h) * S + t  # rows of [B, H, S, ...]

    q = tl.load(Q + b * sqb + t[:, None].to(tl.int64) * sqs + col[None, :], mask=rows[:, None], other=0.0).to(tl.float32)
    rq = tl.load(RQ + b * S + t, mask=rows, other=0.0)
    qr = _norm_rope(q, rq, tl.load(WQ + col).to(tl.float32), c, s, BT, D)
    # delta = q . (mean_ref - mean_gen) in exponent units
    tl.store(DELTA + bhs, tl.sum(qr * tl.load(SHIFT + hd)[None, :], axis=1) * sm, mask=rows)
    for which in tl.static_range(2):  # Q over the generation keys' channel scales, then the reference keys'
        if which == 0:
            qf = qr * tl.load(KC + hd)[None, :]
        else:
            qf = qr * tl.load(RKC + hd)[None, :]
        qs = tl.maximum(tl.max(tl.abs(qf), axis=1), 1e-30) / qmax
        qq = qf * (1.0 / qs)[:, None]
        if QK_INT8:
            qq = _rint(qq, LIBDEVICE)
        qq = tl.minimum(tl.maximum(qq, -qmax), qmax)
        if which == 0:
            tl.store(Q8 + bhs[:, None] * D + d[None, :], qq.to(Q8.dtype.element_ty), mask=rows[:, None])
            tl.store(QS + bhs, qs * sm, mask=rows)
        else:
            tl.store(RQ8 + bhs[:, None] * D + d[None, :], qq.to(RQ8.dtype.element_ty), mask=rows[:, None])
            tl.store(RQS + bhs, qs * sm, mask=rows)

    k = tl.load(K + b * skb + t[:, None].to(tl.int64) * sks + col[None, :], mask=rows[:, None], other=0.0).to(tl.float32)
    rk = tl.load(RK + b * S + t, mask=rows, other=0.0)
    kr = _norm_rope(k, rk, tl.load(WK + col).to(tl.float32), c, s, BT, D)
    kq = (kr - tl.load(KMEAN + hd)[None, :]) * (1.0 / tl.load(KC + hd))[None, :]
    if QK_INT8:
        kq = _rint(kq, LIBDEVICE)
    kq = tl.minimum(tl.maximum(kq, -qmax), qmax)
    tl.store(K8 + bhs[:, None] * D + d[None, :], kq.to(K8.dtype.element_ty), mask=rows[:, None])

    v = tl.load(V + b * svb + t[:, None].to(tl.int64) * svs + col[None, :], mask=rows[:, None], other=0.0).to(tl.float32)
    vq = tl.minimum(tl.maximum(v * tl.load(VINV + hd)[None, :], -448.0), 448.0)
    # V transposed: [B, H, D, S16], tokens contiguous
    tl.store(VT + ((b * H + h) * D + d[None, :]) * S16 + t[:, None], vq.to(VT.dtype.element_ty), mask=rows[:, None])
