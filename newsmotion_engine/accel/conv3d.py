"""3-D convolutions as 2-D convolutions (registry order 75; the option ``conv3d_as_2d``).

Why: the video VAEs and SVD's UNet run ``nn.Conv3d`` layers: SVD's UNet and temporal decoder
(mimicmotion) mix frames with time-only kernels (``(3, 1, 1)``, and ``(1, 1, 1)`` shortcuts); the
Wan VAE (wan-animate, wan-animate-2, echomimic-v3, scail-2) is built of causal ``(3, 3, 3)``
convolutions. cuDNN runs them through its 3-D kernels; whether those reach the rate of its 2-D
ones on Hopper is not measured yet (``python -m benchmarks.conv3d`` measures both, and the
option stays off until it has). The same sums can be had from 2-D convolutions:

- a time-only kernel ``(k, 1, 1)`` never mixes pixels: it is one 2-D convolution with a
  ``(k, 1)`` kernel over the ``[B, C, T, H*W]`` view of its input (a view for contiguous and
  channels-last-3d tensors);
- a ``(kt, kh, kw)`` kernel is ``kt`` 2-D ``(kh, kw)`` convolutions, tap ``k`` over the frames
  ``k .. k + T_out - 1`` seen as a batch, summed.

The products are the same and each convolution accumulates in fp32; only the summation order
differs (the taps' partial sums are added in the output's dtype, so a bf16 model rounds twice
more per output; the bench reports that error beside the bf16 model's own against float32).

How: each eligible convolution (stride 1, no dilation, no groups, zero padding) gets an
instance-level ``_conv_forward``, the call ``nn.Conv3d.forward`` ends in. Its own forward stays:
Wan's causal convolution concatenates its cached frames and pads before that call, and that
logic must not be re-implemented here (a ``ModelHook`` replaces the whole forward, so it is
not used). Removing the acceleration deletes the instance attribute; parameters, buffers and
state-dict keys are never touched.

Which modules: ``Conv3dAs2d.modules`` names component attributes; empty (the default) means
every ``torch.nn.Module`` attribute of the components that holds an eligible convolution.

Example::

    applied = apply_accelerations(components, (Conv3dAs2d(), Compile()))
    applied.report["conv3d_as_2d"]   # mimicmotion's release: {"modules": {"transformer": 44, "vae": 29}}
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch
import torch.nn.functional as F

from newsmotion_engine.accel.module_toggle import ModuleToggleConfig, modules_holding, register_module_toggle

__all__ = ["Conv3dAs2d", "conv3d_as_2d", "conv3d_modules", "is_eligible", "set_conv3d_as_2d"]


@dataclass(frozen=True)
class Conv3dAs2d(ModuleToggleConfig):
    """3-D convolutions computed by 2-D ones.

    Args:
        modules: component attribute names to change; empty: every module holding one.
    """

    technique: ClassVar[str] = "conv3d_as_2d"


def is_eligible(module: torch.nn.Module) -> bool:
    """An ``nn.Conv3d`` (or subclass) with stride 1, no dilation, no groups, zero padding given
    as numbers (not ``"same"``)."""
    return (
        isinstance(module, torch.nn.Conv3d)
        and tuple(module.stride) == (1, 1, 1)
        and tuple(module.dilation) == (1, 1, 1)
        and module.groups == 1
        and module.padding_mode == "zeros"
        and isinstance(module.padding, tuple)
    )


def conv3d_as_2d(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                 padding: tuple[int, int, int]) -> torch.Tensor:  # fmt: skip
    """``F.conv3d(x, weight, bias, padding=padding)`` (stride 1, no dilation or groups) by 2-D
    convolutions (module docstring); ``x`` ``[B, C, T, H, W]``."""
    pt, ph, pw = padding
    kt, kh, kw = weight.shape[2:]
    if (kh, kw, ph, pw) == (1, 1, 0, 0):  # time-only: one (k, 1) convolution over [B, C, T, H*W]
        h, w = x.shape[3:]
        y = F.conv2d(x.flatten(3), weight.flatten(3), bias, padding=(pt, 0))
        return y.unflatten(3, (h, w))
    if pt:
        x = F.pad(x, (0, 0, 0, 0, pt, pt))
    b, c, t, h, w = x.shape
    t_out = t - kt + 1
    out = None
    for k in range(kt):
        frames = x[:, :, k : k + t_out].transpose(1, 2).reshape(b * t_out, c, h, w)
        y = F.conv2d(frames, weight[:, :, k], bias if k == 0 else None, padding=(ph, pw))
        out = y if out is None else out.add_(y)
    return out.unflatten(0, (b, t_out)).transpose(1, 2)


def _conv_forward(self: torch.nn.Conv3d, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return conv3d_as_2d(x, weight, bias, tuple(self.padding))


def _convs(module: torch.nn.Module) -> list[torch.nn.Module]:
    return [m for m in module.modules() if is_eligible(m)]


def conv3d_modules(components: Any) -> list[str]:
    """The components' attributes that are modules holding an eligible 3-D convolution."""
    return modules_holding(components, is_eligible)


def set_conv3d_as_2d(module: torch.nn.Module, on: bool) -> int:
    """Every eligible 3-D convolution of ``module`` by 2-D ones (``on``) or as loaded; how many."""
    convs = _convs(module)
    for conv in convs:
        if on:
            conv._conv_forward = _conv_forward.__get__(conv)  # an instance attribute, bound to this conv
        else:
            conv.__dict__.pop("_conv_forward", None)
    return len(convs)


register_module_toggle(Conv3dAs2d, order=75, holds=is_eligible, switch=set_conv3d_as_2d)
