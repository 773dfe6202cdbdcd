"""Convolution weights in channels-last order (registry order 70; the option ``channels_last``).

Why: the UNet backends (mimicmotion's SVD UNet, champ's SD1.5 UNets and their guidance encoders)
spend their time in convolutions, and cuDNN's bf16 tensor-core convolutions on Hopper run natively
in NHWC; with NCHW tensors each convolution is fed through layout transforms or slower kernels.
Setting the weights channels-last is enough: a convolution whose weight is channels-last returns a
channels-last output, which the next convolution, the norms and the activations keep, so the
activations follow without touching the models' code. The arithmetic is the same (bf16 operands,
fp32 accumulation); only the kernels' summation order may differ. Removing it puts the weights
back in the default order.

Which modules: ``ChannelsLast.modules`` names component attributes; empty (the default) means
every ``torch.nn.Module`` attribute of the components that holds a 2-D or 3-D convolution.

Example::

    applied = apply_accelerations(components, (ChannelsLast(), Compile()))
    applied.report["channels_last"]   # {"modules": {"unet": 131, "vae": 36, ...}}
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from newsmotion_engine.accel.module_toggle import ModuleToggleConfig, modules_holding, register_module_toggle

__all__ = ["ChannelsLast", "conv_modules", "set_conv_format"]


@dataclass(frozen=True)
class ChannelsLast(ModuleToggleConfig):
    """Convolution weights channels-last (NHWC; NDHWC for 3-D convolutions).

    Args:
        modules: component attribute names to convert; empty: every module holding a convolution.
    """

    technique: ClassVar[str] = "channels_last"


def _is_conv(module: torch.nn.Module) -> bool:
    return isinstance(module, (torch.nn.Conv2d, torch.nn.Conv3d))


def _convs(module: torch.nn.Module) -> list[torch.nn.Module]:
    return [m for m in module.modules() if _is_conv(m)]


def conv_modules(components: Any) -> list[str]:
    """The components' attributes that are modules holding a 2-D or 3-D convolution."""
    return modules_holding(components, _is_conv)


def set_conv_format(module: torch.nn.Module, channels_last: bool) -> int:
    """Every 2-D / 3-D convolution weight of ``module`` channels-last (NHWC / NDHWC), or back to
    the default order; how many convolutions."""
    convs = _convs(module)
    for conv in convs:
        fmt = torch.contiguous_format
        if channels_last:
            fmt = torch.channels_last if conv.weight.dim() == 4 else torch.channels_last_3d
        conv.weight.data = conv.weight.data.contiguous(memory_format=fmt)
    return len(convs)


register_module_toggle(ChannelsLast, order=70, holds=_is_conv, switch=set_conv_format)
