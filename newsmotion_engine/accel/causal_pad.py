"""The Wan VAE's spatial zero padding done by the convolution itself (registry order 72; the
option ``causal_pad_fold``).

Why: diffusers' ``WanCausalConv3d`` pads every input with ``F.pad`` in time (causally, in front)
and in space (one pixel each side) and then runs an unpadded ``nn.Conv3d``. The spatial part
is a full copy of the activation for every convolution of the decoder (and of the encoder that
the continuation of wan-animate-2 runs): at 720x1280 float32 with 96 channels and 6 frames that
is 2 GB read and written per call, for padding a convolution can do for free. Public profiles of
the Wan decoder put copies, concatenations and pads at about a fifth of its time.

What changes: only the spatial padding moves into the convolution (its ``padding`` becomes
``(0, ph, pw)``); the cached frames are still concatenated in front and the causal front padding
is still done by ``F.pad`` (it is asymmetric, which a convolution's padding is not). The sums
are the same zeros times the same weights; cuDNN may pick a different algorithm for the padded
call, so the output may differ in the last bits, like any change of kernel.

How: each ``WanCausalConv3d`` gets an instance-level ``forward`` (the same steps as the
release's, minus the spatial pad) and its ``padding`` set to the spatial part. Both the stock
``nn.Conv3d._conv_forward`` and :mod:`.conv3d`'s 2-D version read ``padding``, so this composes
with ``conv3d_as_2d``. Removing it pops the forward and puts ``padding`` back to ``(0, 0, 0)``.

Which modules: ``CausalPadFold.modules`` names component attributes; empty (the default) means
every ``torch.nn.Module`` attribute of the components that holds a ``WanCausalConv3d``.

Example::

    applied = apply_accelerations(components, (CausalPadFold(), Compile()))
    applied.report["causal_pad_fold"]   # wan-animate-2: {"modules": {"vae": 59}}
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch
import torch.nn.functional as F

from newsmotion_engine.accel.module_toggle import ModuleToggleConfig, register_module_toggle

__all__ = ["CausalPadFold", "is_causal_conv", "set_causal_pad_fold"]


@dataclass(frozen=True)
class CausalPadFold(ModuleToggleConfig):
    """The Wan causal convolutions' spatial padding inside the convolution (module docstring).

    Args:
        modules: component attribute names to change; empty: every module holding one.
    """

    technique: ClassVar[str] = "causal_pad_fold"


def is_causal_conv(module: torch.nn.Module) -> bool:
    """A diffusers ``WanCausalConv3d``: an ``nn.Conv3d`` whose ``_padding`` is the 6-tuple
    ``(pw, pw, ph, ph, front, 0)`` its forward passes to ``F.pad``."""
    pad = getattr(module, "_padding", None)
    return (
        isinstance(module, torch.nn.Conv3d)
        and type(module).__name__ == "WanCausalConv3d"
        and isinstance(pad, tuple)
        and len(pad) == 6
        and pad[0] == pad[1]
        and pad[2] == pad[3]
        and pad[5] == 0
    )


def _folded_forward(self: torch.nn.Conv3d, x: torch.Tensor, cache_x: torch.Tensor | None = None) -> torch.Tensor:
    # The release's forward without the spatial pad: self.padding holds it (set below).
    front = self._padding[4]
    if cache_x is not None and front > 0:
        x = torch.cat([cache_x.to(x.device), x], dim=2)
        front -= cache_x.shape[2]
    if front:  # negative crops, as F.pad does in the release
        x = F.pad(x, (0, 0, 0, 0, front, 0))
    return torch.nn.Conv3d.forward(self, x)


def set_causal_pad_fold(module: torch.nn.Module, on: bool) -> int:
    """Every ``WanCausalConv3d`` of ``module`` with its spatial padding folded in (``on``) or as
    loaded; how many."""
    convs = [m for m in module.modules() if is_causal_conv(m)]
    for conv in convs:
        if on:
            conv.padding = (0, conv._padding[2], conv._padding[0])
            conv.forward = _folded_forward.__get__(conv)  # an instance attribute, bound to this conv
        else:
            conv.padding = (0, 0, 0)
            conv.__dict__.pop("forward", None)
    return len(convs)


register_module_toggle(CausalPadFold, order=72, holds=is_causal_conv, switch=set_causal_pad_fold)
