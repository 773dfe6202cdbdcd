"""The Triton kernel behind :func:`newsmotion_engine.accel.short_attention.short_attention`
(imported only where it runs: this module imports triton)."""

from __future__ import annotations

import triton
import triton.language as tl

__all__ = ["short_attention_fwd"]


@triton.jit
def short_attention_fwd(Q, K, V, O, n_seq, S, H, D, sqb, sqs, skb, sks, svb, svs, sob, sos, scale_log2,
                        SB: tl.constexpr, DB: tl.constexpr, G: tl.constexpr):  # fmt: skip
    """``G`` (batch, head) sequences per program, one after another; each ``[S, D]`` of Q, K, V
    read from ``[B, S, H * D]`` into a ``[SB, DB]`` tile (masked: padded rows and channels are
    zeros in registers), scores, a float32 softmax over the ``S`` real keys, ``P V``, stored back
    into ``O``'s ``[B, S, H * D]``."""
    pid = tl.program_id(0)
    rows = tl.arange(0, SB)
    cols = tl.arange(0, DB)
    key_ok = rows[None, :] < S
    for g in range(G):
        seq = pid * G + g
        b = (seq // H).to(tl.int64)
        h = seq % H
        mask = (rows[:, None] < S) & (cols[None, :] < D) & (seq < n_seq)
        q = tl.load(Q + b * sqb + rows[:, None] * sqs + h * D + cols[None, :], mask=mask, other=0.0)
        k = tl.load(K + b * skb + rows[:, None] * sks + h * D + cols[None, :], mask=mask, other=0.0)
        v = tl.load(V + b * svb + rows[:, None] * svs + h * D + cols[None, :], mask=mask, other=0.0)
        s = tl.dot(q, tl.trans(k)) * scale_log2
        s = tl.where(key_ok, s, float("-inf"))
        m = tl.max(s, 1)
        p = tl.math.exp2(s - m[:, None])
        l_sum = tl.sum(p, 1)
        o = tl.dot(p.to(v.dtype), v) / l_sum[:, None]
        tl.store(O + b * sob + rows[:, None] * sos + h * D + cols[None, :], o.to(O.dtype.element_ty), mask=mask)
