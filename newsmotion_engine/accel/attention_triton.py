"""The Triton kernel behind :func:`newsmotion_engine.accel.attention.fp8_attention` (imported only
where it runs: this module imports triton). See that module's docstring for the method; the
inputs come from ``quantize_attention_inputs`` and reach the kernel as TMA tensor descriptors
(Q, K ``[B*H, S, D]``, V^T ``[B*H, D, S]``), so the copy engine moves the tiles and no thread
spends instructions on addresses.

Per score the loop body is one FFMA (scale, and subtract the running max), one EX2, one FADD
(row sum), one max, half an FP8 pack, and ``D / BLOCK_N`` FMULs of output rescaling: the int32
``Q K^T`` is turned into float by adding the bits of 1.5 * 2**23 (exact while |s| < 2**22,
true for int8 x int8 over D <= 128), and that constant comes back out through the FFMA's bias;
the softmax scale, log2(e), every K channel scale and Q's token scale are one per-row factor
``c``; P is produced already scaled into e4m3's range (``exp2(... + log2 448)``).

``POLY_EXP`` (the ``...-polyexp`` variants; not yet timed on a GPU): in the unmasked tiles, every
other column's exponential is computed by :func:`_exp2_poly` on the FMA pipe instead of the
multi-function unit's EX2, which does 16 exponentials per clock per SM against 128 FP32 lanes
(FlashAttention-4's idea, there for Blackwell). With small heads (SD1.5's 40, padded to 64) a tile
has half the tensor-core work of a 128-wide one but the same exponentials, so EX2 is the likelier
limit there. The polynomial's relative error (2.2e-4, tested) is far under P's 8-bit rounding."""

from __future__ import annotations

import triton
import triton.language as tl

__all__ = ["attention_fwd", "attention_fwd_ws", "autotuned", "autotuned_ws"]

MAGIC_BITS = tl.constexpr(0x4B400000)  # float32 bits of 1.5 * 2**23: (s + MAGIC_BITS) as float == 1.5 * 2**23 + s
MAGIC = tl.constexpr(12582912.0)
LOG2_E4M3_MAX = tl.constexpr(8.807354922057604)  # log2(448)
# 2**f on [-0.5, 0.5], degree 3, fitted for relative error (2.2e-4 at most in float32; the fit and
# the bound are re-derived in tests/engine/accel/test_attention_poly_exp.py)
EXP2_C0 = tl.constexpr(0.9999627470970154)
EXP2_C1 = tl.constexpr(0.6935867667198181)
EXP2_C2 = tl.constexpr(0.24215202033519745)
EXP2_C3 = tl.constexpr(0.05286737531423569)


@triton.jit
def _exp2_poly(x):
    """``2**x`` without the EX2 unit, for finite ``x <= 126`` (below -126 it gives about
    ``2**-126``, nothing a softmax weight notices): ``x = r + f`` with ``r`` the nearest integer,
    found by adding 1.5 * 2**23 (its low mantissa bits then hold ``r``), ``2**f`` by the
    polynomial, and ``r`` added to the result's exponent bits."""
    x = tl.maximum(x, -126.0)
    t = x + MAGIC
    f = x - (t - MAGIC)
    p = ((EXP2_C3 * f + EXP2_C2) * f + EXP2_C1) * f + EXP2_C0
    r = t.to(tl.int32, bitcast=True) - MAGIC_BITS
    return (p.to(tl.int32, bitcast=True) + (r << 23)).to(tl.float32, bitcast=True)


@triton.jit
def _scores(q, k_desc, bh, start_n, BLOCK_N: tl.constexpr, D: tl.constexpr):
    k = k_desc.load([bh, start_n, 0]).reshape(BLOCK_N, D)
    return tl.dot(q, k.T)  # int32 (int8 Q K) or fp32 (e4m3 Q K)


@triton.jit
def _softmax_pv(acc, l_i, m_i, s, c, d, vt_desc, bh, start_n, lo, hi,
                D: tl.constexpr, BLOCK_N: tl.constexpr, MASKED: tl.constexpr,
                QK_INT8: tl.constexpr, PV_FP8: tl.constexpr, HAS_D: tl.constexpr = False,
                POLY_EXP: tl.constexpr = False):  # fmt: skip
    """One key tile's online-softmax update and ``P V``, from its scores ``s``: the exponent of a
    score is ``s * c`` (``+ d`` per row with ``HAS_D``). ``MASKED``: keys outside ``[lo, hi)``
    are dropped (``lo`` / ``hi`` scalars, or ``[BLOCK_M, 1]`` per row). ``POLY_EXP``: half the
    exponentials of an unmasked tile by :func:`_exp2_poly` (a masked tile's -inf stays on EX2)."""
    if QK_INT8:
        x = (s + MAGIC_BITS).to(tl.float32, bitcast=True)
        offset = MAGIC
    else:
        x = s
        offset = 0.0
    if MASKED:  # the ragged last tile (the copy engine zero-filled keys past S), or a row's own key range
        cols = start_n + tl.arange(0, BLOCK_N)
        x = tl.where((cols[None, :] >= lo) & (cols[None, :] < hi), x, float("-inf"))
        m_tile = (tl.max(x, 1) - offset) * c
    elif QK_INT8:
        m_tile = tl.max(s, 1).to(tl.float32) * c  # integer max: off the FP32 pipe
    else:
        m_tile = tl.max(x, 1) * c
    if HAS_D:
        m_tile = m_tile + d
    m_new = tl.maximum(m_i, m_tile)
    if PV_FP8:
        bias = offset * c + (m_new - LOG2_E4M3_MAX)  # P comes out in [0, 448]
    else:
        bias = offset * c + m_new
    if HAS_D:
        bias = bias - d
    e = x * c[:, None] - bias[:, None]  # the exponents (one FFMA a score)
    if POLY_EXP and not MASKED:
        # even columns on EX2, odd ones on the FMA pipe: pairs of neighbouring columns sit in one
        # thread's registers in the MMA layout, so the split and the join move no data
        even, odd = tl.split(tl.reshape(e, (e.shape[0], e.shape[1] // 2, 2)))
        p = tl.reshape(tl.join(tl.math.exp2(even), _exp2_poly(odd)), (e.shape[0], e.shape[1]))
    else:
        p = tl.math.exp2(e)
    alpha = tl.math.exp2(m_i - m_new)
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None]
    vt = vt_desc.load([bh, 0, start_n]).reshape(D, BLOCK_N)
    if PV_FP8:
        acc = tl.dot(p.to(tl.float8e4nv), vt.T, acc)
    else:
        acc = tl.dot(p.to(tl.bfloat16), vt.T, acc)
    return acc, l_i, m_new


@triton.jit
def attention_fwd(q_desc, k_desc, vt_desc, O, QS, VS, S, H,
                  stride_ob, stride_os, stride_oh,
                  KV_IDX, KV_CNT, KV_TAIL, MAX_K, LSE,
                  qr_desc, kr_desc, vtr_desc, QS_R, DELTA, VS_R, HW,
                  D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                  QK_INT8: tl.constexpr, PV_FP8: tl.constexpr, PIPELINE_QK: tl.constexpr = False,
                  SPARSE: tl.constexpr = False, RETURN_LSE: tl.constexpr = False, REF: tl.constexpr = False,
                  STATE_IN: tl.constexpr = False, ST_ACC=None, ST_M=None, ST_L=None,
                  POLY_EXP: tl.constexpr = False):  # fmt: skip
    pid_m = tl.program_id(0)
    bh = tl.program_id(1)
    start_m = pid_m * BLOCK_M
    offs_m = start_m + tl.arange(0, BLOCK_M)
    row_ok = offs_m < S
    bh64 = bh.to(tl.int64)  # B*H*S can pass 2**31 in the pointer math below
    q = q_desc.load([bh, start_m, 0]).reshape(BLOCK_M, D)
    c = tl.load(QS + bh64 * S + offs_m, mask=row_ok, other=1.0)  # padded rows: finite, never stored
    if STATE_IN:
        # The generation keys were the warp-specialized kernel's (attention_fwd_ws, STATE_OUT): go
        # on from its online-softmax state with the reference keys alone.
        rows = bh64 * S + offs_m
        m_i = tl.load(ST_M + rows, mask=row_ok, other=0.0)
        l_i = tl.load(ST_L + rows, mask=row_ok, other=1.0)
        acc = tl.load(ST_ACC + rows[:, None] * D + tl.arange(0, D)[None, :], mask=row_ok[:, None], other=0.0)
        n_full = 0
    else:
        m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
        l_i = tl.zeros([BLOCK_M], tl.float32)
        acc = tl.zeros([BLOCK_M, D], tl.float32)
        n_full = (S // BLOCK_N) * BLOCK_N
    if SPARSE:
        # Block-sparse (accel/sparse.py): this query tile visits only the full key tiles its row of
        # the layout lists (``KV_IDX[pid_m, :KV_CNT[pid_m]]``, ascending), plus the ragged last
        # tile when ``KV_TAIL[pid_m]``. Same per-tile arithmetic as the dense loop.
        n_kept = tl.load(KV_CNT + pid_m)
        for i in range(0, n_kept):
            start_n = tl.load(KV_IDX + pid_m * MAX_K + i) * BLOCK_N
            s = _scores(q, k_desc, bh, start_n, BLOCK_N, D)
            acc, l_i, m_i = _softmax_pv(acc, l_i, m_i, s, c, 0.0, vt_desc, bh, start_n, 0, S,
                                        D, BLOCK_N, False, QK_INT8, PV_FP8, POLY_EXP=POLY_EXP)  # fmt: skip
        if n_full < S:
            if tl.load(KV_TAIL + pid_m) != 0:
                s = _scores(q, k_desc, bh, n_full, BLOCK_N, D)
                acc, l_i, m_i = _softmax_pv(acc, l_i, m_i, s, c, 0.0, vt_desc, bh, n_full, 0, S,
                                            D, BLOCK_N, True, QK_INT8, PV_FP8, POLY_EXP=POLY_EXP)  # fmt: skip
    elif PIPELINE_QK:
        # The next tile's Q K^T is issued before this tile's softmax, so the tensor cores work
        # while the exponentials run (FlashAttention-3's intra-warpgroup overlap; the SASS shows
        # the IGMMAs interleaved with MUFU.EX2). Costs one more score tile of registers.
        if n_full > 0:
            s_cur = _scores(q, k_desc, bh, 0, BLOCK_N, D)
            for start_n in range(BLOCK_N, n_full, BLOCK_N):
                s_next = _scores(q, k_desc, bh, start_n, BLOCK_N, D)
                acc, l_i, m_i = _softmax_pv(acc, l_i, m_i, s_cur, c, 0.0, vt_desc, bh, start_n - BLOCK_N, 0, S,
                                            D, BLOCK_N, False, QK_INT8, PV_FP8, POLY_EXP=POLY_EXP)  # fmt: skip
                s_cur = s_next
            acc, l_i, m_i = _softmax_pv(acc, l_i, m_i, s_cur, c, 0.0, vt_desc, bh, n_full - BLOCK_N, 0, S,
                                        D, BLOCK_N, False, QK_INT8, PV_FP8, POLY_EXP=POLY_EXP)  # fmt: skip
    else:
        for start_n in range(0, n_full, BLOCK_N):
            s = _scores(q, k_desc, bh, start_n, BLOCK_N, D)
            acc, l_i, m_i = _softmax_pv(acc, l_i, m_i, s, c, 0.0, vt_desc, bh, start_n, 0, S,
                                        D, BLOCK_N, False, QK_INT8, PV_FP8, POLY_EXP=POLY_EXP)  # fmt: skip
    if not SPARSE and not STATE_IN and n_full < S:
        s = _scores(q, k_desc, bh, n_full, BLOCK_N, D)
        acc, l_i, m_i = _softmax_pv(acc, l_i, m_i, s, c, 0.0, vt_desc, bh, n_full, 0, S,
                                    D, BLOCK_N, True, QK_INT8, PV_FP8, POLY_EXP=POLY_EXP)  # fmt: skip
    offs_d = tl.arange(0, D)
    v_scale = tl.load(VS + bh64 * D + offs_d)
    if REF:
        # In-context reference (accel/attention_incontext.py): a query of generation frame f >= 1
        # also sees the reference tokens of frame f - 1, ``[(f - 1) * HW, f * HW)`` of kr / vtr,
        # in the same online softmax. The reference side has its own quantization: Q again with
        # the reference K's channel scales (qr_desc, per-row factor QS_R), DELTA per row for the
        # two smoothing means, and V's channel scales VS_R, so the accumulator is moved into the
        # reference V's units first (one multiply per output element).
        v_ref_scale = tl.load(VS_R + bh64 * D + offs_d)
        acc = acc * (v_scale / v_ref_scale)[None, :]
        v_scale = v_ref_scale
        last = tl.minimum(start_m + BLOCK_M, S) - 1
        f_first = start_m // HW
        f_lo = tl.maximum(f_first, 1)
        f_hi = last // HW
        if f_hi >= 1:
            q = qr_desc.load([bh, start_m, 0]).reshape(BLOCK_M, D)
            c = tl.load(QS_R + bh64 * S + offs_m, mask=row_ok, other=1.0)
            d = tl.load(DELTA + bh64 * S + offs_m, mask=row_ok, other=0.0)
            if f_first == f_hi:
                # All rows in one frame (all but one tile in ~HW / BLOCK_M): the reference frame's
                # keys [lo, hi) in whole tiles unmasked; masked only a head tile (a tile's first
                # key must be 16-byte aligned for TMA: 16 keys of 8-bit V^T) and the ragged rest.
                lo = (f_hi - 1) * HW
                hi = lo + HW
                start = lo - lo % 16
                if start < lo:
                    s = _scores(q, kr_desc, bh, start, BLOCK_N, D)
                    acc, l_i, m_i = _softmax_pv(acc, l_i, m_i, s, c, d, vtr_desc, bh, start, lo, hi,
                                                D, BLOCK_N, True, QK_INT8, PV_FP8, True, POLY_EXP)  # fmt: skip
                    start += BLOCK_N
                n_full_ref = start + tl.maximum(hi - start, 0) // BLOCK_N * BLOCK_N
                for start_n in range(start, n_full_ref, BLOCK_N):
                    s = _scores(q, kr_desc, bh, start_n, BLOCK_N, D)
                    acc, l_i, m_i = _softmax_pv(acc, l_i, m_i, s, c, d, vtr_desc, bh, start_n, lo, hi,
                                                D, BLOCK_N, False, QK_INT8, PV_FP8, True, POLY_EXP)  # fmt: skip
                if n_full_ref < hi:
                    s = _scores(q, kr_desc, bh, n_full_ref, BLOCK_N, D)
                    acc, l_i, m_i = _softmax_pv(acc, l_i, m_i, s, c, d, vtr_desc, bh, n_full_ref, lo, hi,
                                                D, BLOCK_N, True, QK_INT8, PV_FP8, True, POLY_EXP)  # fmt: skip
            else:
                # A tile across a frame boundary: each row keeps its own frame's keys.
                f_row = offs_m // HW
                lo_row = ((f_row - 1) * HW)[:, None]  # frame 0 (the persona's latent): an empty range below 0
                hi_row = (f_row * HW)[:, None]
                for start_n in range(((f_lo - 1) * HW // BLOCK_N) * BLOCK_N, f_hi * HW, BLOCK_N):
                    s = _scores(q, kr_desc, bh, start_n, BLOCK_N, D)
                    acc, l_i, m_i = _softmax_pv(acc, l_i, m_i, s, c, d, vtr_desc, bh, start_n, lo_row, hi_row,
                                                D, BLOCK_N, True, QK_INT8, PV_FP8, True, POLY_EXP)  # fmt: skip
    out = acc * v_scale[None, :] * (1.0 / l_i)[:, None]
    b = bh64 // H
    h = bh64 % H
    o_ptrs = O + b * stride_ob + h * stride_oh + offs_m[:, None].to(tl.int64) * stride_os + offs_d[None, :]
    tl.store(o_ptrs, out.to(O.dtype.element_ty), mask=row_ok[:, None])
    if RETURN_LSE:
        # log2 of the row's softmax denominator in the exponent's units (smoothed scores; the
        # caller adds back q . mean(k)): lets two partial attentions be merged exactly.
        lse = m_i + tl.math.log2(l_i)
        if PV_FP8:
            lse = lse - LOG2_E4M3_MAX  # P was produced scaled by 448
        tl.store(LSE + bh64 * S + offs_m, lse, mask=row_ok)


@triton.jit
def attention_fwd_ws(Q, K, VT, QS, O, VS, S, H, stride_ob, stride_os, stride_oh, ST_ACC, ST_M, ST_L,
                     D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, QK_INT8: tl.constexpr,
                     PV_FP8: tl.constexpr, MASK_TAIL: tl.constexpr, STATE_OUT: tl.constexpr):  # fmt: skip
    """The dense generation loop warp-specialized (Triton's Hopper pass: a producer warp feeds
    TMA loads, two consumer warpgroups split the 128 query rows). The pass takes the loop only
    when it is the kernel's one place with matrix products and every load before it is a TMA
    load, so: the per-row query scale comes through a descriptor, a ragged end of the keys is
    masked in every tile (``MASK_TAIL``; a tile after the loop, or a branch to a masked body in
    it, turns the pass off: 255 registers and spills), and for an in-context
    reference this kernel leaves its online-softmax state (``STATE_OUT``: accumulator in the
    generation V's units, running max and sum, float32) for ``attention_fwd`` (``STATE_IN``) to
    finish with the reference keys. ``Q`` / ``K`` ``[B*H, S, D]``, ``VT`` ``[B*H, D, S16]``, ``QS``
    ``[B*H, S]`` are plain tensors: the TMA descriptors are made here, in global scratch memory
    (``triton.set_allocator``), because on Hopper the warp-specialized loop hangs with descriptors
    passed from the host (``python -m benchmarks.attention_ws --probe``; Triton's own attention
    tutorial makes them in the kernel for Hopper too)."""
    pid_m = tl.program_id(0)
    bh = tl.program_id(1)
    BH = tl.num_programs(1)
    start_m = pid_m * BLOCK_M
    S16 = tl.cdiv(S, 16) * 16
    q_desc = tl.make_tensor_descriptor(Q, shape=[BH, S, D], strides=[S * D, D, 1], block_shape=[1, BLOCK_M, D])
    k_desc = tl.make_tensor_descriptor(K, shape=[BH, S, D], strides=[S * D, D, 1], block_shape=[1, BLOCK_N, D])
    vt_desc = tl.make_tensor_descriptor(VT, shape=[BH, D, S], strides=[D * S16, S16, 1], block_shape=[1, D, BLOCK_N])
    qs_desc = tl.make_tensor_descriptor(QS, shape=[BH, S], strides=[S, 1], block_shape=[1, BLOCK_M])
    q = q_desc.load([bh, start_m, 0]).reshape(BLOCK_M, D)
    c = qs_desc.load([bh, start_m]).reshape(BLOCK_M)  # rows past S come back 0: finite, never stored
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, D], tl.float32)
    if MASK_TAIL:
        hi = tl.cdiv(S, BLOCK_N) * BLOCK_N
    else:
        hi = S
    for start_n in tl.range(0, hi, BLOCK_N, warp_specialize=True):
        s = _scores(q, k_desc, bh, start_n, BLOCK_N, D)
        acc, l_i, m_i = _softmax_pv(acc, l_i, m_i, s, c, 0.0, vt_desc, bh, start_n, 0, S,
                                    D, BLOCK_N, MASK_TAIL, QK_INT8, PV_FP8)  # fmt: skip
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, D)
    row_ok = offs_m < S
    bh64 = bh.to(tl.int64)
    if STATE_OUT:
        rows = bh64 * S + offs_m
        tl.store(ST_ACC + rows[:, None] * D + offs_d[None, :], acc, mask=row_ok[:, None])
        tl.store(ST_M + rows, m_i, mask=row_ok)
        tl.store(ST_L + rows, l_i, mask=row_ok)
    else:
        out = acc * tl.load(VS + bh64 * D + offs_d)[None, :] * (1.0 / l_i)[:, None]
        o_ptrs = O + (bh64 // H) * stride_ob + (bh64 % H) * stride_oh + offs_m[:, None].to(tl.int64) * stride_os + offs_d[None, :]
        tl.store(o_ptrs, out.to(O.dtype.element_ty), mask=row_ok[:, None])


def _set_block_shapes(nargs: dict) -> None:
    bm, bn, d = nargs["BLOCK_M"], nargs["BLOCK_N"], nargs["D"]
    nargs["q_desc"].block_shape = [1, bm, d]
    nargs["k_desc"].block_shape = [1, bn, d]
    nargs["vt_desc"].block_shape = [1, d, bn]
    nargs["qr_desc"].block_shape = [1, bm, d]  # the reference's (the same objects when not REF)
    nargs["kr_desc"].block_shape = [1, bn, d]
    nargs["vtr_desc"].block_shape = [1, d, bn]


def autotuned(configs: tuple[tuple[int, int, int, int, bool], ...]):
    """``attention_fwd`` autotuned over ``(BLOCK_M, BLOCK_N, num_warps, num_stages, PIPELINE_QK)``
    configs, keyed on the sequence length, head size and variant flags; each config sets the
    descriptors' block shapes before it runs."""
    cfgs = [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "PIPELINE_QK": pipe}, num_warps=w, num_stages=st,
                          pre_hook=_set_block_shapes)
            for bm, bn, w, st, pipe in configs]  # fmt: skip
    return triton.autotune(configs=cfgs, key=["S", "D", "QK_INT8", "PV_FP8", "SPARSE", "REF", "HW", "STATE_IN", "POLY_EXP"])(attention_fwd)


def autotuned_ws(configs: tuple[tuple[int, int, int, int], ...]):
    """``attention_fwd_ws`` autotuned over ``(BLOCK_M, BLOCK_N, num_warps, num_stages)`` configs;
    ``MASK_TAIL`` follows from each config's ``BLOCK_N`` (masked tiles only where S is ragged)."""
    cfgs = [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=w, num_stages=st) for bm, bn, w, st in configs]
    kernel = triton.heuristics({"MASK_TAIL": lambda a: a["S"] % a["BLOCK_N"] != 0})(attention_fwd_ws)
    return triton.autotune(configs=cfgs, key=["S", "D", "QK_INT8", "PV_FP8", "STATE_OUT"])(kernel)
