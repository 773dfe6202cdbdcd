"""Attention choice for the Wan transformers, and an FP8 self-attention kernel in Triton.

At 720x1280 one Wan-Animate segment is 75.6k tokens and self-attention is ~72 % of the forward's
FLOPs, so the attention kernel decides the speed. :func:`set_attention` picks, per model:

- ``"sdpa"``: PyTorch's ``scaled_dot_product_attention`` with its own backend choice (stock);
- ``"cudnn"`` / ``"flash"``: force the cuDNN or the flash SDPA backend (diffusers' dispatcher);
- ``"fp8-triton"``: the self-attention layers (``attn1``) use :func:`fp8_attention`, the kernel
  below; the small cross-attentions stay on SDPA.

The FP8 kernel (a FlashAttention-2 style forward, Dao 2023 https://arxiv.org/abs/2307.08691, with
SageAttention's quantization ideas, Zhang et al. https://arxiv.org/abs/2410.02367):

- K is smoothed by subtracting its mean over tokens (softmax is invariant to a per-query
  constant, and it removes the channel outliers that FP8 would clip); Q, K are quantized to e4m3
  with one scale per (batch, head); ``Q K^T`` runs on the FP8 tensor cores with fp32 accumulation.
- V is quantized per (batch, head, channel); the probabilities are scaled by 448 into e4m3's
  range and ``P V`` runs in FP8 too; the fp32 accumulator is rescaled online as usual.
- Softmax in base 2 with the scales folded into one multiplier.

Its error against bf16 SDPA is measured (and reported) by the GPU bench, not assumed; the kernel
is a registered ``torch.library`` custom op so compiled blocks treat it as one opaque call.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from newsmotion_engine.errors import NewsmotionError

__all__ = ["ATTENTION_KINDS", "AttentionUnavailableError", "Fp8SelfAttnProcessor", "fp8_attention", "set_attention"]

ATTENTION_KINDS = ("sdpa", "cudnn", "flash", "fp8-triton")
_DIFFUSERS_BACKEND = {"sdpa": "native", "cudnn": "_native_cudnn", "flash": "_native_flash"}
E4M3_MAX = 448.0


class AttentionUnavailableError(NewsmotionError, RuntimeError):
    """The chosen attention kernel cannot run here (e.g. FP8 Triton without a Hopper GPU)."""


def fp8_attention_supported() -> tuple[bool, str]:
    if not torch.cuda.is_available():
        return False, "no CUDA GPU on this machine"
    cap = torch.cuda.get_device_capability()
    if cap < (9, 0):
        return False, f"compute capability {cap[0]}.{cap[1]}; the FP8 kernel needs 9.0 (H100/H200)"
    try:
        import triton  # noqa: F401
    except ImportError:
        return False, "triton is not installed"
    return True, "ok"


def set_attention(model: Any, kind: str) -> dict[str, Any]:
    """Select the attention kernel of ``model`` (a Wan / Wan-Animate transformer) in place."""
    if kind not in ATTENTION_KINDS:
        raise ValueError(f"attention {kind!r}: use one of {', '.join(ATTENTION_KINDS)}")
    if kind == "fp8-triton":
        ok, why = fp8_attention_supported()
        if not ok:
            raise AttentionUnavailableError(f"attention='fp8-triton' cannot run: {why}; use attention='sdpa' or 'cudnn'")
        n = 0
        for block in model.blocks:
            block.attn1.set_processor(Fp8SelfAttnProcessor())
            n += 1
        return {"attention": kind, "self_attention_layers": n}
    model.set_attention_backend(_DIFFUSERS_BACKEND[kind])
    return {"attention": kind, "diffusers_backend": _DIFFUSERS_BACKEND[kind]}


def _rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    # Wan's RoPE rotates interleaved (even, odd) channel pairs.
    x1, x2 = x.unflatten(-1, (-1, 2)).unbind(-1)
    c, s = cos[..., 0::2], sin[..., 1::2]
    return torch.stack([x1 * c - x2 * s, x1 * s + x2 * c], dim=-1).flatten(-2).type_as(x)


class Fp8SelfAttnProcessor:
    """Self-attention (``attn1``) of a Wan block with :func:`fp8_attention`; the same projections,
    QK-norms, RoPE and output projection as diffusers' ``WanAttnProcessor`` self-attention path."""

    _attention_backend = None
    _parallel_config = None

    def __call__(self, attn: Any, hidden_states: torch.Tensor, encoder_hidden_states: torch.Tensor | None = None,
                 attention_mask: torch.Tensor | None = None, rotary_emb: Any = None) -> torch.Tensor:  # fmt: skip
        if encoder_hidden_states is not None or attention_mask is not None:
            raise ValueError("Fp8SelfAttnProcessor handles unmasked self-attention only")
        if getattr(attn, "fused_projections", False):
            q, k, v = attn.to_qkv(hidden_states).chunk(3, dim=-1)
        else:
            q, k, v = attn.to_q(hidden_states), attn.to_k(hidden_states), attn.to_v(hidden_states)
        q, k = attn.norm_q(q), attn.norm_k(k)
        q, k, v = (t.unflatten(2, (attn.heads, -1)) for t in (q, k, v))
        if rotary_emb is not None:
            q, k = _rotary(q, *rotary_emb), _rotary(k, *rotary_emb)
        out = fp8_attention(q, k, v).flatten(2, 3).type_as(q)
        out = attn.to_out[0](out)
        return attn.to_out[1](out)


# --------------------------------------------------------------------------------------------
# The Triton kernel (defined lazily: triton is only imported where the kernel is used).
# --------------------------------------------------------------------------------------------
_KERNEL: Any = None


def _build_kernel():
    import triton
    import triton.language as tl

    configs = [
        triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=w, num_stages=s)
        for bm, bn, w, s in ((128, 128, 8, 3), (128, 64, 4, 3), (128, 128, 8, 4), (64, 128, 4, 3), (128, 64, 8, 4))
    ]

    @triton.autotune(configs=configs, key=["S", "D"])
    @triton.jit
    def _fwd(Q, K, VT, O, QK_SCALE, V_SCALE, S, H,
             stride_ob, stride_os, stride_oh,
             D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):  # fmt: skip
        pid_m = tl.program_id(0)
        bh = tl.program_id(1)
        b = bh // H
        h = bh % H
        offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_d = tl.arange(0, D)
        offs_n = tl.arange(0, BLOCK_N)
        q_ptrs = Q + bh * S * D + offs_m[:, None] * D + offs_d[None, :]
        q = tl.load(q_ptrs, mask=offs_m[:, None] < S, other=0.0)
        qk_scale = tl.load(QK_SCALE + bh)
        m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
        l_i = tl.zeros([BLOCK_M], tl.float32)
        acc = tl.zeros([BLOCK_M, D], tl.float32)
        k_base = K + bh * S * D
        v_base = VT + bh * D * S
        n_full = (S // BLOCK_N) * BLOCK_N
        for start_n in range(0, n_full, BLOCK_N):
            cols = start_n + offs_n
            k = tl.load(k_base + offs_d[:, None] + cols[None, :] * D)  # [D, BLOCK_N]
            s = tl.dot(q, k) * qk_scale
            m_new = tl.maximum(m_i, tl.max(s, 1))
            p = tl.math.exp2(s - m_new[:, None])
            alpha = tl.math.exp2(m_i - m_new)
            l_i = l_i * alpha + tl.sum(p, 1)
            acc = acc * alpha[:, None]
            v = tl.load(v_base + cols[:, None] + offs_d[None, :] * S)  # [BLOCK_N, D], K-major in memory
            acc = tl.dot((p * 448.0).to(tl.float8e4nv), v, acc)
            m_i = m_new
        if n_full < S:  # the ragged tail, masked
            cols = n_full + offs_n
            valid = cols < S
            k = tl.load(k_base + offs_d[:, None] + cols[None, :] * D, mask=valid[None, :], other=0.0)
            s = tl.dot(q, k) * qk_scale
            s = tl.where(valid[None, :], s, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, 1))
            p = tl.math.exp2(s - m_new[:, None])
            alpha = tl.math.exp2(m_i - m_new)
            l_i = l_i * alpha + tl.sum(p, 1)
            acc = acc * alpha[:, None]
            v = tl.load(v_base + cols[:, None] + offs_d[None, :] * S, mask=valid[:, None], other=0.0)
            acc = tl.dot((p * 448.0).to(tl.float8e4nv), v, acc)
            m_i = m_new
        v_scale = tl.load(V_SCALE + bh * D + offs_d)
        out = acc * (v_scale[None, :] / (448.0 * l_i[:, None]))
        o_ptrs = O + b * stride_ob + h * stride_oh + offs_m[:, None] * stride_os + offs_d[None, :]
        tl.store(o_ptrs, out.to(O.dtype.element_ty), mask=offs_m[:, None] < S)

    return _fwd


def _quantize_inputs(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor):
    """BSHD bf16 -> fp8 Q, K ``[B*H, S, D]``, fp8 V^T ``[B*H, D, S]`` and the scales."""
    B, S, H, D = q.shape
    qh = q.transpose(1, 2).float()  # [B, H, S, D]
    kh = k.transpose(1, 2).float()
    kh = kh - kh.mean(dim=2, keepdim=True)  # smoothing: softmax(q.(k - m)) == softmax(q.k)
    vh = v.transpose(1, 2).float()
    q_scale = qh.abs().amax(dim=(2, 3)).clamp_min(1e-12) / E4M3_MAX  # [B, H]
    k_scale = kh.abs().amax(dim=(2, 3)).clamp_min(1e-12) / E4M3_MAX
    v_scale = vh.abs().amax(dim=2).clamp_min(1e-12) / E4M3_MAX  # [B, H, D]
    q8 = (qh / q_scale[..., None, None]).to(torch.float8_e4m3fn).reshape(B * H, S, D)
    k8 = (kh / k_scale[..., None, None]).to(torch.float8_e4m3fn).reshape(B * H, S, D)
    vt8 = (vh / v_scale[:, :, None, :]).transpose(2, 3).contiguous().to(torch.float8_e4m3fn).reshape(B * H, D, S)
    qk_scale = (q_scale * k_scale * (1.0 / math.sqrt(D)) * 1.4426950408889634).reshape(-1).contiguous()
    return q8, k8, vt8, qk_scale, v_scale.reshape(B * H, D).contiguous()


@torch.library.custom_op("newsmotion::fp8_attention", mutates_args=())
def _fp8_attention_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    global _KERNEL
    if _KERNEL is None:
        _KERNEL = _build_kernel()
    B, S, H, D = q.shape
    q8, k8, vt8, qk_scale, v_scale = _quantize_inputs(q, k, v)
    out = torch.empty_like(q)

    def grid(meta: dict[str, Any]) -> tuple[int, int]:
        return (math.ceil(S / meta["BLOCK_M"]), B * H)

    _KERNEL[grid](q8, k8, vt8, out, qk_scale, v_scale, S, H, out.stride(0), out.stride(1), out.stride(2), D=D)
    return out


@_fp8_attention_op.register_fake
def _(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(q)


def fp8_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Non-causal softmax attention of BSHD tensors ``[B, S, H, D]`` (D = 64 or 128) with FP8
    tensor-core matmuls; returns BSHD in ``q``'s dtype. CUDA sm_90 only."""
    if q.device.type != "cuda":
        raise AttentionUnavailableError("fp8_attention needs CUDA tensors (Hopper GPU)")
    if q.shape != k.shape or q.shape != v.shape or q.shape[-1] not in (64, 128):
        raise ValueError(f"fp8_attention: q, k, v must be equal BSHD shapes with D 64 or 128, got {tuple(q.shape)}")
    return _fp8_attention_op(q.contiguous(), k.contiguous(), v.contiguous())
