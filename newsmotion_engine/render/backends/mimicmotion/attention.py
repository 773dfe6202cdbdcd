"""Our 8-bit attention kernel in the SVD UNet's spatial self-attention (``-o attention=fp8-triton``).

Why: in every ``TransformerSpatioTemporalModel`` the spatial transformer block's ``attn1`` attends
over one frame's tokens (9,216 at the top level of a 576x1024 render, head size 64), for each
of the window's 72 frames and both guidance halves. On the H100 the stock UNet's attention
(cuDNN, bf16) is ~115 ms of a ~0.95 s call (``benchmarks/results/mimicmotion_channels_last_h100.json``,
the one-step profile, less the decoder's share). :func:`newsmotion_engine.accel.attention.fp8_attention`
takes head sizes 64 and 128, so those layers can run on the 8-bit tensor cores as the Wan
transformers' self-attention does (the same kernel and variant, the same approximation: its
error against bf16 is measured in ``attention_kernel_h200.json``).

Which layers: the ``attn1`` of each ``transformer_blocks`` entry (spatial, long sequences). The
temporal blocks' ``attn1`` (72 frames long) and every ``attn2`` (one image token) keep SDPA.
A call the kernel cannot take (a mask, cross-attention, a norm or scale it does not apply, a
head size other than 64 / 128) goes through diffusers' own processor unchanged.

Registered with :func:`newsmotion_engine.accel.attention.register_fp8_processor` at import (the
backend imports this module), so ``Attention(kernel="fp8-triton")`` applied through the
registry to mimicmotion's components replaces exactly these processors, and removing it puts
the originals back.
"""

from __future__ import annotations

from typing import Any

import torch

from newsmotion_engine.accel import attention as A

__all__ = ["Fp8SpatialSelfAttnProcessor", "spatial_self_attention"]


def spatial_self_attention(unet: torch.nn.Module) -> list[torch.nn.Module]:
    """The spatial transformer blocks' self-attention modules of an SVD UNet, in module order."""
    return [block.attn1 for m in unet.modules() if type(m).__name__ == "TransformerSpatioTemporalModel"
            for block in m.transformer_blocks]  # fmt: skip


class Fp8SpatialSelfAttnProcessor:
    """``attn1`` of a spatial transformer block with :func:`~newsmotion_engine.accel.attention.fp8_attention`:
    the same projections and output projection as diffusers' ``AttnProcessor2_0``."""

    def __init__(self, variant: str | None = None) -> None:
        from diffusers.models.attention_processor import AttnProcessor2_0

        self.variant = variant
        self.fallback = AttnProcessor2_0()

    def takes(self, attn: Any, hidden_states: torch.Tensor, encoder_hidden_states: Any, attention_mask: Any) -> bool:
        """Whether the kernel computes this call exactly as the stock processor would."""
        head = attn.to_q.out_features // attn.heads
        return (encoder_hidden_states is None and A.plain_attention_call(attn, hidden_states, attention_mask)
                and head in A.FP8_HEAD_SIZES and hidden_states.is_cuda)  # fmt: skip

    def __call__(self, attn: Any, hidden_states: torch.Tensor, encoder_hidden_states: torch.Tensor | None = None,
                 attention_mask: torch.Tensor | None = None, temb: torch.Tensor | None = None, *args: Any, **kwargs: Any) -> torch.Tensor:  # fmt: skip
        if not self.takes(attn, hidden_states, encoder_hidden_states, attention_mask):
            return self.fallback(attn, hidden_states, encoder_hidden_states, attention_mask, temb, *args, **kwargs)
        return self.attend(attn, hidden_states)

    def attend(self, attn: Any, hidden_states: torch.Tensor) -> torch.Tensor:
        """The call :meth:`takes`: projections, the 8-bit kernel over BSHD heads, output projection."""
        q, k, v = (proj(hidden_states).unflatten(2, (attn.heads, -1)) for proj in (attn.to_q, attn.to_k, attn.to_v))
        return A.project_attention_out(attn, A.fp8_attention(q, k, v, variant=self.variant), hidden_states)


def _factory(config: A.Attention) -> Fp8SpatialSelfAttnProcessor:
    if config.kernel != "fp8-triton":
        raise A.AttentionUnavailableError(f"attention={config.kernel!r} is not wired into the SVD UNet; use 'fp8-triton'")
    return Fp8SpatialSelfAttnProcessor(config.variant)


A.register_fp8_processor("UNetSpatioTemporalConditionModel", _factory, layers=spatial_self_attention)
