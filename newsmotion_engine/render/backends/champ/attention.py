"""Our 8-bit attention kernel in champ's reference attention (``-o attention=fp8-triton``).

Why: champ's denoising UNet spends its attention time in the spatial self-attention of its top
level, where each frame row's tokens (7,296 at 512x912) attend over their own tokens and then the
reference image's (:class:`~newsmotion_engine.render.backends.champ.modules.ReferenceReader`),
for every frame of every window at every step. SD1.5's heads there are 40 wide (80 one level
down, 160 below), and the kernel (:func:`newsmotion_engine.accel.attention.fp8_attention`) takes
head sizes 64 and 128 with as many keys as queries. So here:

- the heads are zero-padded to the kernel's size (40 -> 64, 80 -> 128:
  :func:`~newsmotion_engine.accel.attention.fp8_attention_padded`; zero channels change no score);
  the 160-wide heads of the lowest attention level and the mid block (464 and 120 tokens) keep SDPA;
- a conditional row's two key sets, its own tokens and the reference's (both ``L`` long), run as
  two kernel calls merged by their log-sum-exp
  (:func:`~newsmotion_engine.accel.attention.merge_attention`): one softmax over their union;
- the reference's keys and values are projected once per video, not once per frame row as the
  stock processor does on the repeated bank (the same numbers: a projection acts per token);
- the unconditional rows' plain self-attention runs on the kernel too.

The official order of work (``reference_pass="official"``) keeps diffusers' processor, and so
does any call the kernel does not take (a mask, a norm or scale it does not apply, a CPU tensor,
a reference of another length). The kernel's 8-bit rounding is the approximation every backend's
``attention=fp8-triton`` makes (error against bf16 in ``attention_kernel_h200.json``).

Registered with :func:`newsmotion_engine.accel.attention.register_fp8_processor` at import (the
components module imports this one), wrapping each installed
:class:`~newsmotion_engine.render.backends.champ.modules.ReferenceReader` (its layer name and the
shared reference bank carry over); removing the acceleration puts the readers back.
"""

from __future__ import annotations

from typing import Any

import torch

from newsmotion_engine.accel import attention as A
from newsmotion_engine.render.backends.champ.modules import ReferenceReader

__all__ = ["Fp8ReferenceReader", "reference_readers"]


def reference_readers(unet: torch.nn.Module) -> list[torch.nn.Module]:
    """The attention modules of ``unet`` whose processor is a reference reader, in module order."""
    return [m for m in unet.modules() if isinstance(getattr(m, "processor", None), ReferenceReader)]


def _on_kernel_device(x: torch.Tensor) -> bool:
    return x.is_cuda


def _heads(attn: Any, x: torch.Tensor) -> torch.Tensor:
    return x.unflatten(2, (attn.heads, -1))  # [B, L, C] -> BSHD


class Fp8ReferenceReader(ReferenceReader):
    """A :class:`ReferenceReader` whose attention runs on the 8-bit kernel where it can (module
    docstring); built from the reader it replaces."""

    def __init__(self, previous: ReferenceReader, variant: str | None = None) -> None:
        super().__init__(previous.name, previous.state)
        self.variant = variant

    def takes(self, attn: Any, hidden_states: torch.Tensor, attention_mask: Any) -> bool:
        """Whether the kernel computes this call as diffusers' ``AttnProcessor2_0`` would."""
        head = attn.to_q.out_features // attn.heads
        return (A.plain_attention_call(attn, hidden_states, attention_mask) and A.fp8_head_size(head) is not None
                and _on_kernel_device(hidden_states))  # fmt: skip

    def self_attend(self, attn: Any, hidden_states: torch.Tensor, attention_mask: Any, temb: Any) -> torch.Tensor:
        if not self.takes(attn, hidden_states, attention_mask):
            return super().self_attend(attn, hidden_states, attention_mask, temb)
        q, k, v = (_heads(attn, proj(hidden_states)) for proj in (attn.to_q, attn.to_k, attn.to_v))
        return A.project_attention_out(attn, A.fp8_attention_padded(q, k, v, self.variant), hidden_states)

    def attend_with_reference(self, attn: Any, cond: torch.Tensor, ref: torch.Tensor, attention_mask: Any, temb: Any) -> torch.Tensor:
        if not self.takes(attn, cond, attention_mask) or ref.shape[1] != cond.shape[1] or cond.shape[0] % ref.shape[0]:
            return super().attend_with_reference(attn, cond, ref, attention_mask, temb)
        q, k, v = (_heads(attn, proj(cond)) for proj in (attn.to_q, attn.to_k, attn.to_v))
        rows = cond.shape[0] // ref.shape[0]
        rk, rv = (_heads(attn, proj(ref)).repeat_interleave(rows, dim=0) for proj in (attn.to_k, attn.to_v))
        own, own_lse = A.fp8_attention_padded(q, k, v, self.variant, lse=True)
        seen, seen_lse = A.fp8_attention_padded(q, rk, rv, self.variant, lse=True)
        return A.project_attention_out(attn, A.merge_attention(own, own_lse, seen, seen_lse), cond)


def _factory(config: A.Attention, previous: Any) -> Fp8ReferenceReader:
    if config.kernel != "fp8-triton":
        raise A.AttentionUnavailableError(f"attention={config.kernel!r} is not wired into champ's UNet; use 'fp8-triton'")
    return Fp8ReferenceReader(previous, config.variant)


A.register_fp8_processor("UNetMotionModel", _factory, layers=reference_readers, wraps=True)
