"""The Triton kernels behind :func:`newsmotion_engine.accel.attention.fp8_attention` (imported only
where they run: this module imports triton). See that module's docstring for the method; the
inputs come from ``quantize_attention_inputs`` (contiguous ``[B, H, S, D]`` Q/K, ``[B, H, D, S]``
V^T, per-token Q/K scales with the softmax scale and log2(e) folded into Q's)."""

from __future__ import annotations

import triton
import triton.language as tl

__all__ = ["attention_fwd", "autotuned"]


@triton.jit
def _tile(acc, l_i, m_i, q, q_scale, k_base, v_base, ks_base, S, start_n, offs_n, offs_d,
          D: tl.constexpr, BLOCK_N: tl.constexpr, MASKED: tl.constexpr,
          PV_FP8: tl.constexpr, TWO_LEVEL: tl.constexpr):  # fmt: skip
    cols = start_n + offs_n
    valid = cols < S
    if MASKED:
        k = tl.load(k_base + offs_d[:, None] + cols[None, :] * D, mask=valid[None, :], other=0.0)  # [D, BLOCK_N]
        k_scale = tl.load(ks_base + cols, mask=valid, other=0.0)
    else:
        k = tl.load(k_base + offs_d[:, None] + cols[None, :] * D)
        k_scale = tl.load(ks_base + cols)
    s = tl.dot(q, k).to(tl.float32) * q_scale[:, None] * k_scale[None, :]  # log2-domain logits
    if MASKED:
        s = tl.where(valid[None, :], s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, 1))
    p = tl.math.exp2(s - m_new[:, None])
    alpha = tl.math.exp2(m_i - m_new)
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None]
    if MASKED:
        v = tl.load(v_base + cols[:, None] + offs_d[None, :] * S, mask=valid[:, None], other=0.0)  # [BLOCK_N, D]
    else:
        v = tl.load(v_base + cols[:, None] + offs_d[None, :] * S)
    if PV_FP8:
        p8 = (p * 448.0).to(tl.float8e4nv)
        if TWO_LEVEL:
            # Promote the FP8 MMA's partial sum into the fp32 accumulator once per tile.
            acc = tl.dot(p8, v, acc, max_num_imprecise_acc=BLOCK_N)
        else:
            acc = tl.dot(p8, v, acc)
    else:
        acc = tl.dot(p.to(tl.bfloat16), v, acc)
    return acc, l_i, m_new

@triton.jit
def attention_fwd(Q, K, VT, O, QS, KS, VS, S, H,
         stride_ob, stride_os, stride_oh,
         D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
         QK_INT8: tl.constexpr, PV_FP8: tl.constexpr, TWO_LEVEL: tl.constexpr):  # fmt: skip
    pid_m = tl.program_id(0)
    bh = tl.program_id(1).to(tl.int64)  # 64-bit offsets: B*H*S*D can pass 2**31
    b = bh // H
    h = bh % H
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, D)
    offs_n = tl.arange(0, BLOCK_N)
    row_ok = offs_m < S
    q = tl.load(Q + bh * S * D + offs_m[:, None] * D + offs_d[None, :], mask=row_ok[:, None], other=0.0)
    q_scale = tl.load(QS + bh * S + offs_m, mask=row_ok, other=0.0)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, D], tl.float32)
    k_base = K + bh * S * D
    v_base = VT + bh * D * S
    ks_base = KS + bh * S
    n_full = (S // BLOCK_N) * BLOCK_N
    for start_n in range(0, n_full, BLOCK_N):
        acc, l_i, m_i = _tile(acc, l_i, m_i, q, q_scale, k_base, v_base, ks_base, S, start_n, offs_n, offs_d,
                              D, BLOCK_N, False, PV_FP8, TWO_LEVEL)  # fmt: skip
    if n_full < S:  # the ragged tail, masked
        acc, l_i, m_i = _tile(acc, l_i, m_i, q, q_scale, k_base, v_base, ks_base, S, n_full, offs_n, offs_d,
                              D, BLOCK_N, True, PV_FP8, TWO_LEVEL)  # fmt: skip
    v_scale = tl.load(VS + bh * D + offs_d)
    if PV_FP8:
        out = acc * (v_scale[None, :] / (448.0 * l_i[:, None]))
    else:
        out = acc * (v_scale[None, :] / l_i[:, None])
    o_ptrs = O + b * stride_ob + h * stride_oh + offs_m[:, None] * stride_os + offs_d[None, :]
    tl.store(o_ptrs, out.to(O.dtype.element_ty), mask=row_ok[:, None])



def autotuned(configs: tuple[tuple[int, int, int, int], ...]):
    """``attention_fwd`` autotuned over ``(BLOCK_M, BLOCK_N, num_warps, num_stages)`` configs,
    keyed on the sequence length, head size and variant flags."""
    cfgs = [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=w, num_stages=st) for bm, bn, w, st in configs]
    return triton.autotune(configs=cfgs, key=["S", "D", "QK_INT8", "PV_FP8", "TWO_LEVEL"])(attention_fwd)
