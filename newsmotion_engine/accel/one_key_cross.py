"""Cross-attention over a one-token context as the value it must return (registry order 32; the
option ``one_key_cross``).

Why: the UNet backends condition on a CLIP image embedding of one token. MimicMotion's SVD UNet
(every spatial and temporal transformer block's ``attn2``) and Champ's SD1.5 UNets with their
motion modules pass ``encoder_hidden_states`` of shape ``[B, 1, D]``. Softmax over one key is
exactly 1 whatever the score, so such an attention returns its single value row for every query:
``to_out(to_v(context))``, the same for all of a row's tokens. Diffusers' processor still
projects every token to a query (``to_q``: one ``C x C`` matmul over e.g. 663,552 tokens a
window row at mimicmotion's top level), runs the attention kernel over them and projects every
token's output (``to_out``), and the block normalises every token for it (``norm2``). Here the
value is projected once per row and broadcast; under ``torch.compile`` inductor may also drop the
``norm2`` whose output is then unused (its shape is all the processor reads).

What changes: nothing in the function. The query, key and scores never influence the output (one
key: weight 1), so the result is the stock processor's; only ``to_out`` runs on one row instead
of many, so its matmul may sum in another order (last bits). A call that is not exactly this case
(a context longer than one token, a mask, a 4-D input, a cross norm, a batch that does not match)
goes to the processor it wraps, unchanged.

Which modules: every diffusers ``Attention`` that is a cross-attention (``is_cross_attention``)
whose processor is diffusers' ``AttnProcessor2_0`` or ``AttnProcessor`` (a custom processor may
do more than attend, so it is left alone). ``OneKeyCross.modules`` names component attributes;
empty (the default) means every ``torch.nn.Module`` attribute holding such a layer. Removing it
puts the wrapped processors back.

Example::

    applied = apply_accelerations(components, (OneKeyCross(), Compile()))
    applied.report["one_key_cross"]   # mimicmotion: {"modules": {"unet": 32}}
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from newsmotion_engine.accel.module_toggle import ModuleToggleConfig, register_module_toggle, wrap_processors

__all__ = ["OneKeyCross", "OneKeyCrossProcessor", "set_one_key_cross", "takes_one_key"]


@dataclass(frozen=True)
class OneKeyCross(ModuleToggleConfig):
    """Cross-attention over a one-token context computed as its value (module docstring).

    Args:
        modules: component attribute names to change; empty: every module holding such a layer.
    """

    technique: ClassVar[str] = "one_key_cross"


def _stock_processor(processor: Any) -> bool:
    from diffusers.models.attention_processor import AttnProcessor, AttnProcessor2_0

    return type(processor) in (AttnProcessor, AttnProcessor2_0)


def _is_cross(module: torch.nn.Module) -> bool:
    from diffusers.models.attention_processor import Attention

    return isinstance(module, Attention) and bool(module.is_cross_attention)


def _holds(module: torch.nn.Module) -> bool:
    return _is_cross(module) and _stock_processor(module.processor)


def takes_one_key(attn: Any, hidden_states: torch.Tensor, encoder_hidden_states: Any, attention_mask: Any) -> bool:
    """Whether the stock processor's call reduces to the context's value: a ``[B, 1, D]``
    context for a ``[B, L, C]`` input, no mask, no cross norm (the query side's norms and scale
    cannot change a weight of 1)."""
    return (isinstance(encoder_hidden_states, torch.Tensor) and encoder_hidden_states.dim() == 3
            and encoder_hidden_states.shape[1] == 1 and hidden_states.dim() == 3
            and encoder_hidden_states.shape[0] == hidden_states.shape[0]
            and attention_mask is None and not attn.norm_cross)  # fmt: skip


class OneKeyCrossProcessor:
    """Wraps a stock processor: one-token cross-attention as ``to_out(to_v(context))``
    broadcast over the tokens; any other call goes to ``inner``."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __call__(self, attn: Any, hidden_states: torch.Tensor, encoder_hidden_states: torch.Tensor | None = None,
                 attention_mask: torch.Tensor | None = None, temb: torch.Tensor | None = None, *args: Any, **kwargs: Any) -> torch.Tensor:  # fmt: skip
        if not takes_one_key(attn, hidden_states, encoder_hidden_states, attention_mask):
            return self.inner(attn, hidden_states, encoder_hidden_states, attention_mask, temb, *args, **kwargs)
        # The stock processor's residual is its input before any spatial / group norm.
        residual = hidden_states
        value = attn.to_v(encoder_hidden_states).to(hidden_states.dtype)  # [B, 1, inner]: every query's output
        out = attn.to_out[1](attn.to_out[0](value))
        out = out.expand(hidden_states.shape[0], hidden_states.shape[1], out.shape[-1])
        if attn.residual_connection:
            out = out + residual
        return out / attn.rescale_output_factor


def set_one_key_cross(module: torch.nn.Module, on: bool) -> int:
    """Wrap (``on``) or unwrap every eligible cross-attention processor of ``module``; how many."""
    return wrap_processors(module, on, _holds, OneKeyCrossProcessor)


register_module_toggle(OneKeyCross, order=32, holds=_holds, switch=set_one_key_cross)
