"""In-context reference attention on the 8-bit kernel: Wan-Animate-2's cached pass in one launch.

In the cached pass every generation token attends to all generation tokens, and a token of
generation frame ``f >= 1`` also to the ``hw`` reference tokens of driving frame ``f - 1`` (frame
0 is the persona's latent and sees none). The earlier path computed that as two attentions (dense
generation, then per-frame reference) merged by log-sum-exp: 231 ms a layer at the 14B 720p
shape where the dense part alone is ~160 ms (``cb32d61:bench/results/gpu_animate2_attention_14b_h200.json``)
- the reference part is 5 % of the scores but paid a second launch, a second quantization of Q,
an LSE output, a float32 merge and a concatenation. Here the kernel's query tile, after its
generation keys, walks its own frame's reference keys in the same online softmax
(``attention_triton.attention_fwd`` with ``REF``; keys outside the row's frame masked).

The reference K/V do not change during a segment's denoising steps, so their quantized form is
built once per segment and layer (:func:`prepare_reference`, from the RoPE-rotated keys) and
kept instead of the raw FP8 cache (``render/backends/wan_animate_2/kv.py``). They have their own
quantization: K minus its own channel mean over its own channel scales (so Q is quantized a
second time with those scales folded in, :func:`reference_launch`), V over its own channel
scales. Per query row the kernel then needs ``delta = q . (mean_ref - mean_gen)`` in exponent
units (the two smoothings subtract different constants from a row's scores; softmax over the
union needs them to agree), and it moves the accumulator from the generation V's scales to the
reference V's once, before the reference keys.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

from newsmotion_engine.accel import attention as A

__all__ = [
    "ReferenceKV",
    "ReferenceLaunch",
    "dequantize_reference",
    "incontext_attention",
    "prepare_reference",
    "reference_incontext_attention",
    "reference_launch",
]


class ReferenceKV(NamedTuple):
    """One layer's reference K/V in the kernel's format, built once per segment (batch B)."""

    k: torch.Tensor  # [B, H, S_ref, D] int8 or e4m3: RoPE-rotated keys minus their channel mean, over channel scales
    vt: torch.Tensor  # [B, H, D, S_ref16] e4m3 (or bf16): values transposed, padded to 16
    k_scale: torch.Tensor  # [B, 1, H, D] float32: the keys' channel scales (folded into Q)
    k_mean: torch.Tensor  # [B, 1, H, D] float32: the keys' channel means (the smoothing)
    v_scale: torch.Tensor  # [B, H, D] float32


class ReferenceLaunch(NamedTuple):
    """What the kernel reads of the reference in one call (:func:`reference_launch`)."""

    q: torch.Tensor  # [B, H, S, D] 8-bit: Q with the reference keys' channel scales folded in
    q_scale: torch.Tensor  # [B, H, S] float32 per-row factor
    delta: torch.Tensor  # [B, H, S] float32: q . (mean_ref - mean_gen) in exponent units
    k: torch.Tensor
    vt: torch.Tensor
    v_scale: torch.Tensor
    hw: int


def prepare_reference(k_ref: torch.Tensor, v_ref: torch.Tensor, variant: str | None = None) -> ReferenceKV:
    """BSHD reference keys (RoPE applied) and values -> :class:`ReferenceKV` for ``variant``."""
    k8, kc, mean = A.quantize_keys(k_ref, variant)
    vt, vs = A.quantize_values(v_ref, variant)
    return ReferenceKV(k=k8.permute(0, 2, 1, 3).contiguous(), vt=vt, k_scale=kc.contiguous(), k_mean=mean.contiguous(), v_scale=vs)


def reference_launch(q: torch.Tensor, k: torch.Tensor, ref: ReferenceKV, hw: int, variant: str | None = None) -> ReferenceLaunch:
    """The per-call reference inputs for BSHD generation ``q, k`` (torch; a compiled block fuses it)."""
    q8, q_scale = A.quantize_queries(q, ref.k_scale, variant)
    shift = ref.k_mean - k.float().mean(dim=1, keepdim=True)  # [B, 1, H, D]
    delta = (q.float() * shift).sum(-1) * (A.LOG2E / math.sqrt(q.shape[-1]))  # [B, S, H]
    return ReferenceLaunch(q8, q_scale, delta.transpose(1, 2).contiguous(), ref.k, ref.vt, ref.v_scale, int(hw))


def dequantize_reference(ref: ReferenceKV) -> tuple[torch.Tensor, torch.Tensor]:
    """:class:`ReferenceKV` back to float32 BSHD ``(k, v)`` (what the kernel's reference keys and
    values stand for, up to their 8-bit rounding)."""
    s_ref = ref.k.shape[2]
    k = ref.k.float().permute(0, 2, 1, 3) * ref.k_scale + ref.k_mean
    v = ref.vt[..., :s_ref].float().permute(0, 3, 1, 2) * ref.v_scale[:, None]
    return k, v


def reference_incontext_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, ref: ReferenceKV, hw: int) -> torch.Tensor:
    """The in-context attention in float32 torch over the dequantized reference (generation Q/K/V
    exact): the CPU stand-in for :func:`incontext_attention` in tests. BSHD in/out."""
    k_ref, v_ref = dequantize_reference(ref)
    B, S, H, D = q.shape
    frames = S // hw
    keys = torch.cat([k.float(), k_ref], dim=1)
    vals = torch.cat([v.float(), v_ref], dim=1)
    q_frame = torch.arange(S) // hw
    ref_frame = torch.arange(k_ref.shape[1]) // hw
    allowed = torch.cat([torch.ones(S, S, dtype=torch.bool), ref_frame[None, :] == (q_frame[:, None] - 1)], dim=1)
    if frames < 1 or k_ref.shape[1] != (frames - 1) * hw:
        raise ValueError(f"in-context attention: {k_ref.shape[1]} reference tokens do not fit {S} queries in frames of {hw}")
    s = torch.einsum("bshd,bthd->bhst", q.float(), keys) / math.sqrt(D)
    s = s.masked_fill(~allowed.to(s.device), float("-inf"))
    out = torch.einsum("bhst,bthd->bshd", s.softmax(-1), vals)
    return out.to(q.dtype)


@torch.library.custom_op("newsmotion::fp8_attention_kernel_incontext", mutates_args=())
def _kernel_op(q: torch.Tensor, k: torch.Tensor, vt: torch.Tensor, q_scale: torch.Tensor, v_scale: torch.Tensor,
               rq: torch.Tensor, rq_scale: torch.Tensor, delta: torch.Tensor, rk: torch.Tensor, rvt: torch.Tensor,
               rv_scale: torch.Tensor, hw: int, variant: str) -> torch.Tensor:  # fmt: skip
    reference = ReferenceLaunch(rq, rq_scale, delta, rk, rvt, rv_scale, hw)
    return A._launch(A.QuantizedQKV(q, k, vt, q_scale, v_scale), variant, reference=reference)


@_kernel_op.register_fake
def _(q, k, vt, q_scale, v_scale, rq, rq_scale, delta, rk, rvt, rv_scale, hw, variant):  # noqa: ANN001, ANN202
    B, H, S, D = q.shape
    return q.new_empty((B, S, H, D), dtype=torch.bfloat16)


def incontext_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, ref: ReferenceKV, hw: int,
                        variant: str | None = None) -> torch.Tensor:  # fmt: skip
    """Generation ``q, k, v`` (BSHD, ``frames * hw`` tokens) attending to themselves and, frame
    ``f >= 1``, to reference frame ``f - 1`` of ``ref``: one 8-bit kernel launch. CUDA sm_90."""
    name, x = A._kernel_inputs("incontext_attention", q, k, v, variant)
    r = reference_launch(q, k, ref, hw, name)
    out = _kernel_op(*x, r.q, r.q_scale, r.delta, r.k, r.vt, r.v_scale, r.hw, name)
    return out.to(q.dtype)
