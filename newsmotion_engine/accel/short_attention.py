"""Self-attention over short sequences, many per program (registry order 33; bench-only for now,
not yet timed on a GPU).

Why: AnimateDiff's motion modules (champ) attend over a window's 24 frames once per token and
head: at champ's top level 2 rows x 7,296 tokens x 8 heads = 116,736 sequences of 24, 40 wide.
cuDNN's flash attention gives each sequence a 64-row tile of its own, so a call is ~117k tiny
tiles: in champ's profile (``benchmarks/results/champ_profile_h100.json``) that kernel takes
113 ms of a step for 60 calls, ~1.9 ms a call, where reading Q, K, V and writing the output
(~0.9 GB) would take ~0.3 ms at the card's bandwidth. Here one Triton program runs
``SEQ_PER_PROGRAM`` sequences one after another, each padded to 32 rows and 64 channels in
registers only (masked loads: no padded bytes move), reading the heads straight out of the
projections' ``[B, L, heads * d]`` layout and writing the output in it (no transposes).

What changes: nothing in the function; the softmax runs in float32 as in flash attention (the
order of the sums may differ in the last bits). A call it does not take (a mask, norms, a scale
other than ``d**-0.5``, a sequence longer than 32, heads wider than 64, a CPU tensor) goes to the
processor it wraps.

Which modules: every diffusers ``Attention`` that is a self-attention with diffusers' stock
processor (custom ones, e.g. champ's reference readers, are left alone). ``modules`` names
component attributes (empty: all). Removing it puts the wrapped processors back.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from newsmotion_engine.accel.attention import plain_attention_call, project_attention_out
from newsmotion_engine.accel.module_toggle import ModuleToggleConfig, register_module_toggle, wrap_processors

__all__ = ["MAX_HEAD", "MAX_SEQ", "ShortAttention", "ShortAttentionProcessor", "set_short_attention", "short_attention"]

MAX_SEQ = 32  # the padded tile's rows
MAX_HEAD = 64  # the padded tile's channels
SEQ_PER_PROGRAM = 8


@dataclass(frozen=True)
class ShortAttention(ModuleToggleConfig):
    """Short self-attention sequences packed into Triton programs (module docstring).

    Args:
        modules: component attribute names to change; empty: every module holding such a layer.
    """

    technique: ClassVar[str] = "short_attention"


def _stock_self(module: torch.nn.Module) -> bool:
    from diffusers.models.attention_processor import Attention, AttnProcessor, AttnProcessor2_0

    return isinstance(module, Attention) and not module.is_cross_attention and type(module.processor) in (AttnProcessor, AttnProcessor2_0)


def short_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, heads: int, *,
                    seq_per_program: int = SEQ_PER_PROGRAM) -> torch.Tensor:  # fmt: skip
    """Softmax attention at ``1 / sqrt(d)`` of ``q``, ``k``, ``v`` ``[B, S, heads * d]`` (last dim
    contiguous; ``S <= 32``, ``d <= 64``) -> ``[B, S, heads * d]`` in ``q``'s dtype. Runs the Triton
    kernel (on the CPU only under ``TRITON_INTERPRET=1``)."""
    from newsmotion_engine.accel import short_attention_triton as T

    B, S, C = q.shape
    d = C // heads
    if k.shape != q.shape or v.shape != q.shape or C % heads or S > MAX_SEQ or d > MAX_HEAD:
        raise ValueError(f"short attention: q, k, v must be equal [B, S<={MAX_SEQ}, heads*d<={MAX_HEAD}], got {tuple(q.shape)} with {heads} heads")
    if any(t.stride(-1) != 1 for t in (q, k, v)):
        raise ValueError("short attention: the channel dim must be contiguous")
    out = torch.empty_like(q)
    n = B * heads
    T.short_attention_fwd[(math.ceil(n / seq_per_program),)](
        q, k, v, out, n, S, heads, d, q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1),
        out.stride(0), out.stride(1), (d**-0.5) * math.log2(math.e), SB=MAX_SEQ, DB=MAX_HEAD, G=seq_per_program)  # fmt: skip
    return out


@torch.library.custom_op("newsmotion::short_attention", mutates_args=())
def _short_attention_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, heads: int) -> torch.Tensor:
    return short_attention(q, k, v, heads)


@_short_attention_op.register_fake
def _(q, k, v, heads):  # noqa: ANN001, ANN202
    return torch.empty_like(q)


def _on_kernel_device(x: torch.Tensor) -> bool:
    return x.is_cuda


class ShortAttentionProcessor:
    """Wraps a stock processor: a plain self-attention call over at most 32 tokens with heads at
    most 64 wide, on CUDA, goes to :func:`short_attention`; any other call to ``inner``."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __call__(self, attn: Any, hidden_states: torch.Tensor, encoder_hidden_states: torch.Tensor | None = None,
                 attention_mask: torch.Tensor | None = None, temb: torch.Tensor | None = None, *args: Any, **kwargs: Any) -> torch.Tensor:  # fmt: skip
        if (encoder_hidden_states is not None or not _on_kernel_device(hidden_states) or not plain_attention_call(attn, hidden_states, attention_mask)
                or hidden_states.shape[1] > MAX_SEQ or attn.to_q.out_features // attn.heads > MAX_HEAD):  # fmt: skip
            return self.inner(attn, hidden_states, encoder_hidden_states, attention_mask, temb, *args, **kwargs)
        q, k, v = attn.to_q(hidden_states), attn.to_k(hidden_states), attn.to_v(hidden_states)
        out = torch.ops.newsmotion.short_attention(q.contiguous(), k.contiguous(), v.contiguous(), attn.heads)
        return project_attention_out(attn, out.unflatten(2, (attn.heads, -1)), hidden_states)


def set_short_attention(module: torch.nn.Module, on: bool) -> int:
    """Wrap (``on``) or unwrap every stock self-attention processor of ``module``; how many."""
    return wrap_processors(module, on, _stock_self, ShortAttentionProcessor)


register_module_toggle(ShortAttention, order=33, holds=_stock_self, switch=set_short_attention)
