"""Attention choice for the Wan transformers, and low-precision self-attention kernels in Triton.

At 720x1280 one Wan-Animate segment is 75.6k tokens and self-attention is ~72 % of the forward's
FLOPs, so the attention kernel decides the speed. :func:`set_attention` picks, per model:

- ``"sdpa"``: PyTorch's ``scaled_dot_product_attention`` with its own backend choice (stock);
- ``"cudnn"`` / ``"flash"``: force the cuDNN or the flash SDPA backend (diffusers' dispatcher);
- ``"fp8-triton"``: the self-attention layers (``attn1``) use :func:`fp8_attention`, the kernel
  below; the small cross-attentions stay on SDPA.

The kernel is a FlashAttention-2 style forward (Dao 2023, https://arxiv.org/abs/2307.08691) with
SageAttention's quantization ideas (Zhang et al. https://arxiv.org/abs/2410.02367 and
https://arxiv.org/abs/2411.10958). Every variant (:data:`FP8_VARIANTS`):

- smooths K by subtracting its per-channel mean over tokens (softmax is invariant to a per-query
  constant; it removes the channel offsets that 8-bit formats would spend their range on). V is
  *not* smoothed: measured at 75.6k tokens, subtracting V's (tiny) mean before rounding made the
  rounding error systematic (``Q(v - m) == v`` whenever ``m`` is under half a grid step, so the
  mean added back afterwards is counted twice) and raised the error from 0.010 to 0.104 (bf16 P V)
  and from 0.039 to 0.073 (FP8 P V);
- quantizes Q and K with one scale per token (``QK_INT8``: int8, else e4m3) and runs ``Q K^T``
  on the 8-bit tensor cores (int32 or fp32 accumulation), softmax scale and ``log2 e`` folded in;
- quantizes V per (head, channel) to e4m3 and P (scaled by 448 into e4m3's range) per element,
  and runs ``P V`` in FP8 (``PV_FP8``; else P and V in bf16); ``TWO_LEVEL`` accumulates each
  tile's ``P V`` apart and adds it to the running output in fp32 (Hopper's FP8 MMA accumulates
  with reduced precision, which a 75.6k-token chained sum would otherwise compound).

Quantization (:func:`quantize_attention_inputs`) is plain torch code, so a compiled block fuses it
with the RoPE and norms before it; only the kernel launch is an opaque ``torch.library`` op.
Accuracy is measured, not assumed: :func:`reference_attention` computes the same quantized
arithmetic in torch (CPU tests hold it against SDPA), and the GPU bench measures each variant's
error against bf16 SDPA and keeps the fastest one under its threshold.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch

from newsmotion_engine.errors import NewsmotionError

__all__ = [
    "ATTENTION_KINDS",
    "DEFAULT_FP8_VARIANT",
    "FP8_VARIANTS",
    "AttentionUnavailableError",
    "Fp8SelfAttnProcessor",
    "Fp8Variant",
    "fp8_attention",
    "quantize_attention_inputs",
    "reference_attention",
    "set_attention",
]

ATTENTION_KINDS = ("sdpa", "cudnn", "flash", "fp8-triton")
_DIFFUSERS_BACKEND = {"sdpa": "native", "cudnn": "_native_cudnn", "flash": "_native_flash"}
E4M3_MAX = 448.0
INT8_MAX = 127.0
LOG2E = 1.4426950408889634


@dataclass(frozen=True)
class Fp8Variant:
    """One kernel variant: Q/K format, P/V format, and whether P V tiles accumulate in fp32."""

    qk_int8: bool
    pv_fp8: bool
    two_level: bool


FP8_VARIANTS: dict[str, Fp8Variant] = {
    "fp8": Fp8Variant(qk_int8=False, pv_fp8=True, two_level=False),
    "fp8-acc32": Fp8Variant(qk_int8=False, pv_fp8=True, two_level=True),
    "int8qk-fp8pv": Fp8Variant(qk_int8=True, pv_fp8=True, two_level=False),
    "int8qk-fp8pv-acc32": Fp8Variant(qk_int8=True, pv_fp8=True, two_level=True),
    "int8qk-bf16pv": Fp8Variant(qk_int8=True, pv_fp8=False, two_level=False),
}
# The variant "fp8-triton" uses unless told otherwise: the fastest one under the bench's 0.05
# error threshold on the H200 (BENCHMARKS.md, 2026-11-30: kernel 197 ms vs cuDNN 205 ms at
# [1, 75600, 40, 128], error 0.039 / 0.035 on flat / sharp softmax). Plain FP8 (188 ms) fails the
# threshold (0.053 / 0.091); "-acc32" measured no more accurate; bf16 P V is accurate (0.010) but
# slower than cuDNN (233 ms).
DEFAULT_FP8_VARIANT = "int8qk-fp8pv"


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


def _variant(name: str | None) -> tuple[str, Fp8Variant]:
    name = name or DEFAULT_FP8_VARIANT
    if name not in FP8_VARIANTS:
        raise ValueError(f"fp8 attention variant {name!r}: use one of {', '.join(FP8_VARIANTS)}")
    return name, FP8_VARIANTS[name]


def set_attention(model: Any, kind: str, *, variant: str | None = None) -> dict[str, Any]:
    """Select the attention kernel of ``model`` (a Wan / Wan-Animate transformer) in place;
    ``variant`` names the :data:`FP8_VARIANTS` entry for ``"fp8-triton"``."""
    if kind not in ATTENTION_KINDS:
        raise ValueError(f"attention {kind!r}: use one of {', '.join(ATTENTION_KINDS)}")
    if kind == "fp8-triton":
        name, _ = _variant(variant)
        ok, why = fp8_attention_supported()
        if not ok:
            raise AttentionUnavailableError(f"attention='fp8-triton' cannot run: {why}; use attention='sdpa' or 'cudnn'")
        n = 0
        for block in model.blocks:
            block.attn1.set_processor(Fp8SelfAttnProcessor(name))
            n += 1
        return {"attention": kind, "variant": name, "self_attention_layers": n}
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

    def __init__(self, variant: str | None = None) -> None:
        self.variant, _ = _variant(variant)

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
        out = fp8_attention(q, k, v, variant=self.variant).flatten(2, 3).type_as(q)
        out = attn.to_out[0](out)
        return attn.to_out[1](out)


# --------------------------------------------------------------------------------------------
# Quantization (torch; traceable, so compiled blocks fuse it) and its torch reference
# --------------------------------------------------------------------------------------------
class QuantizedQKV(NamedTuple):
    """The kernel's inputs; every tensor contiguous in exactly this shape. The kernel indexes raw
    memory, so a strided view would silently read other heads' rows, and strided views arise
    easily: an elementwise op on a transposed tensor (``q.transpose(1, 2).float()``) keeps its
    BSHD strides, and a later ``reshape`` can stay a view."""

    q: torch.Tensor  # [B, H, S, D] int8 or e4m3
    k: torch.Tensor  # [B, H, S, D] int8 or e4m3, K minus its per-channel mean
    vt: torch.Tensor  # [B, H, D, S] e4m3 (or bf16), V transposed (K-major for P V)
    q_scale: torch.Tensor  # [B, H, S] float32, includes softmax scale * log2(e)
    k_scale: torch.Tensor  # [B, H, S] float32
    v_scale: torch.Tensor  # [B, H, D] float32


def quantize_attention_inputs(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, variant: str | None = None) -> QuantizedQKV:
    """BSHD ``q, k, v`` -> :class:`QuantizedQKV` for ``variant`` (see the module docstring)."""
    _, var = _variant(variant)
    D = q.shape[-1]
    qf, kf, vf = q.float(), k.float(), v.float()
    kf = kf - kf.mean(dim=1, keepdim=True)  # smoothing: softmax(q.(k - m)) == softmax(q.k)
    qmax = INT8_MAX if var.qk_int8 else E4M3_MAX
    q_amax = qf.abs().amax(dim=-1, keepdim=True).clamp_min(1e-12)  # per token [B, S, H, 1]
    k_amax = kf.abs().amax(dim=-1, keepdim=True).clamp_min(1e-12)
    qs, ks = q_amax / qmax, k_amax / qmax
    if var.qk_int8:
        q8 = (qf / qs).round().clamp(-INT8_MAX, INT8_MAX).to(torch.int8)
        k8 = (kf / ks).round().clamp(-INT8_MAX, INT8_MAX).to(torch.int8)
    else:
        q8 = (qf / qs).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
        k8 = (kf / ks).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    if var.pv_fp8:
        vs = vf.abs().amax(dim=1, keepdim=True).clamp_min(1e-12) / E4M3_MAX  # per (head, channel)
        v8 = (vf / vs).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    else:
        vs = torch.ones_like(vf[:, :1])
        v8 = vf.to(torch.bfloat16)
    sm = LOG2E / math.sqrt(D)
    return QuantizedQKV(
        q=q8.permute(0, 2, 1, 3).contiguous(),
        k=k8.permute(0, 2, 1, 3).contiguous(),
        vt=v8.permute(0, 2, 3, 1).contiguous(),
        q_scale=(qs * sm).squeeze(-1).transpose(1, 2).contiguous(),
        k_scale=ks.squeeze(-1).transpose(1, 2).contiguous(),
        v_scale=vs.squeeze(1).contiguous(),
    )


def reference_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, variant: str | None = None) -> torch.Tensor:
    """The kernel's arithmetic in torch (float32; P quantized against the global row max, where
    the kernel uses the running max: the same rounding model, not the same bits). BSHD in/out."""
    _, var = _variant(variant)
    x = quantize_attention_inputs(q, k, v, variant)
    s = (x.q.float() @ x.k.float().transpose(-1, -2)) * x.q_scale[..., :, None] * x.k_scale[..., None, :]
    p = torch.exp2(s - s.amax(dim=-1, keepdim=True))
    l = p.sum(dim=-1, keepdim=True)  # noqa: E741
    if var.pv_fp8:
        p = (p * E4M3_MAX).to(torch.float8_e4m3fn).float() / E4M3_MAX
    else:
        p = p.to(torch.bfloat16).float()
    out = (p @ x.vt.float().transpose(-1, -2)) * x.v_scale[..., None, :] / l
    return out.transpose(1, 2).to(q.dtype)


# --------------------------------------------------------------------------------------------
# The Triton kernel (defined lazily: triton is only imported where the kernel is used).
# --------------------------------------------------------------------------------------------
_KERNEL: Any = None
# (BLOCK_M, BLOCK_N, num_warps, num_stages). Compiled for sm_90 with Triton 3.6 (ptxas), every
# config holds 255 registers; these spill least (stack 8-56 B; 128x128 spills ~640 B, kept as the
# Triton tutorial's choice for comparison). The autotuner picks per (S, D, variant).
AUTOTUNE_CONFIGS = ((128, 64, 8, 2), (128, 64, 8, 3), (128, 64, 8, 4), (128, 32, 8, 4), (128, 128, 8, 3))


def _build_kernel(autotune: bool = True):
    """The kernel, autotuned over :data:`AUTOTUNE_CONFIGS`; ``autotune=False`` returns the bare
    ``triton.jit`` function (Triton's interpreter, ``TRITON_INTERPRET=1``, runs it on CPU with
    explicit ``BLOCK_M`` / ``BLOCK_N``: tests and debugging)."""
    from newsmotion_engine.accel import attention_triton as T

    return T.autotuned(AUTOTUNE_CONFIGS) if autotune else T.attention_fwd


def launch_kernel(kernel: Any, x: QuantizedQKV, variant: str | None = None, **meta: Any) -> torch.Tensor:
    """Run ``kernel`` (from :func:`_build_kernel`) on quantized inputs -> bf16 BSHD output."""
    _, var = _variant(variant)
    B, H, S, D = x.q.shape
    for name in QuantizedQKV._fields:
        if not getattr(x, name).is_contiguous():
            raise ValueError(f"fp8 attention: quantized {name} must be contiguous (the kernel indexes raw memory)")
    out = torch.empty((B, S, H, D), device=x.q.device, dtype=torch.bfloat16)

    def grid(m: dict[str, Any]) -> tuple[int, int]:
        return (math.ceil(S / m["BLOCK_M"]), B * H)

    kernel[grid](x.q, x.k, x.vt, out, x.q_scale, x.k_scale, x.v_scale, S, H,
                 out.stride(0), out.stride(1), out.stride(2), D=D,
                 QK_INT8=var.qk_int8, PV_FP8=var.pv_fp8, TWO_LEVEL=var.two_level, **meta)  # fmt: skip
    return out


@torch.library.custom_op("newsmotion::fp8_attention_kernel", mutates_args=())
def _kernel_op(q: torch.Tensor, k: torch.Tensor, vt: torch.Tensor, q_scale: torch.Tensor, k_scale: torch.Tensor,
               v_scale: torch.Tensor, variant: str) -> torch.Tensor:  # fmt: skip
    global _KERNEL
    if _KERNEL is None:
        _KERNEL = _build_kernel()
    return launch_kernel(_KERNEL, QuantizedQKV(q, k, vt, q_scale, k_scale, v_scale), variant)


@_kernel_op.register_fake
def _(q, k, vt, q_scale, k_scale, v_scale, variant):  # noqa: ANN001, ANN202
    B, H, S, D = q.shape
    return q.new_empty((B, S, H, D), dtype=torch.bfloat16)


def fp8_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, variant: str | None = None) -> torch.Tensor:
    """Non-causal softmax attention of BSHD tensors ``[B, S, H, D]`` (D = 64 or 128) on the 8-bit
    tensor cores (``variant`` from :data:`FP8_VARIANTS`); returns BSHD in ``q``'s dtype. CUDA sm_90."""
    if q.device.type != "cuda":
        raise AttentionUnavailableError("fp8_attention needs CUDA tensors (Hopper GPU)")
    if q.shape != k.shape or q.shape != v.shape or q.shape[-1] not in (64, 128):
        raise ValueError(f"fp8_attention: q, k, v must be equal BSHD shapes with D 64 or 128, got {tuple(q.shape)}")
    name, _ = _variant(variant)
    x = quantize_attention_inputs(q, k, v, name)
    out = _kernel_op(*x, name)
    return out.to(q.dtype)
