"""Temporal convolutions as 2-D convolutions (registry order 75; the option ``temporal_conv``).

Why: SVD's UNet and its temporal VAE decoder (mimicmotion) mix frames with ``nn.Conv3d`` layers
whose kernel spans time only (``(3, 1, 1)``, and ``(1, 1, 1)`` shortcuts). cuDNN runs a 3-D
convolution through its general 3-D kernels, which on Hopper in bf16 are far slower per FLOP than
its 2-D ones (measured: ``python -m benchmarks.temporal_conv``). A ``(k, 1, 1)`` kernel never mixes
pixels, so the same layer is a 2-D convolution with a ``(k, 1)`` kernel over the
``[B, C, T, H*W]`` view of its input (a view, no copy, for contiguous and channels-last-3d
tensors): the same weights (viewed, not copied), the same products, fp32 accumulation in both;
only the kernels' summation order may differ, as between any two cuDNN algorithms.

How: a diffusers ``ModelHook`` on each such convolution replaces its forward (the module, its
parameters and state-dict keys stay as loaded); removing the acceleration removes the hooks.

Which modules: ``TemporalConv.modules`` names component attributes; empty (the default) means
every ``torch.nn.Module`` attribute of the components that holds such a convolution.

Example::

    applied = apply_accelerations(components, (TemporalConv(), Compile()))
    applied.report["temporal_conv"]   # {"modules": {"unet": 32, "vae": 31}}
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from diffusers.hooks import HookRegistry, ModelHook

from newsmotion_engine.accel.registry import AccelConfig, AccelConfigError, AccelHandle, register_acceleration

__all__ = ["HOOK_NAME", "TemporalConv", "is_temporal_conv", "set_temporal_conv", "temporal_conv2d", "temporal_conv_modules"]

HOOK_NAME = "newsmotion_temporal_conv"


@dataclass(frozen=True)
class TemporalConv(AccelConfig):
    """Time-only 3-D convolutions run as 2-D convolutions.

    Args:
        modules: component attribute names to change; empty: every module holding one.
    """

    technique: ClassVar[str] = "temporal_conv"
    modules: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if isinstance(self.modules, str) or not all(isinstance(m, str) and m for m in self.modules):
            raise AccelConfigError(f"temporal_conv modules {self.modules!r}: give a tuple of component attribute names")


def is_temporal_conv(module: torch.nn.Module) -> bool:
    """A plain ``nn.Conv3d`` whose kernel spans time only: ``(k, 1, 1)``, stride 1, padding
    ``(p, 0, 0)``, no dilation or groups, zero padding."""
    return (
        isinstance(module, torch.nn.Conv3d)
        and tuple(module.kernel_size[1:]) == (1, 1)
        and tuple(module.stride) == (1, 1, 1)
        and tuple(module.dilation) == (1, 1, 1)
        and module.groups == 1
        and module.padding_mode == "zeros"
        and isinstance(module.padding, tuple)
        and tuple(module.padding[1:]) == (0, 0)
    )


def temporal_conv2d(conv: torch.nn.Conv3d, x: torch.Tensor) -> torch.Tensor:
    """``conv(x)`` for a time-only ``conv`` (:func:`is_temporal_conv`), as one 2-D convolution
    over ``x`` ``[B, C, T, H, W]`` seen as ``[B, C, T, H*W]``."""
    b, _, t, h, w = x.shape
    weight = conv.weight.flatten(3)  # [Co, Ci, k, 1, 1] -> [Co, Ci, k, 1], a view
    y = F.conv2d(x.flatten(3), weight, conv.bias, padding=(conv.padding[0], 0))
    return y.unflatten(3, (h, w))


class _TemporalConvHook(ModelHook):
    def new_forward(self, module: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
        return temporal_conv2d(module, x)


def _convs(module: torch.nn.Module) -> list[torch.nn.Module]:
    return [m for m in module.modules() if is_temporal_conv(m)]


def temporal_conv_modules(components: Any) -> list[str]:
    """The components' attributes that are modules holding a time-only 3-D convolution."""
    return [name for name, value in vars(components).items() if isinstance(value, torch.nn.Module) and _convs(value)]


def set_temporal_conv(module: torch.nn.Module, on: bool) -> int:
    """Hook (``on``) or unhook every time-only 3-D convolution of ``module``; how many."""
    convs = _convs(module)
    for conv in convs:
        registry = HookRegistry.check_if_exists_or_initialize(conv)
        if on:
            if registry.get_hook(HOOK_NAME) is None:
                registry.register_hook(_TemporalConvHook(), HOOK_NAME)
        elif registry.get_hook(HOOK_NAME) is not None:
            registry.remove_hook(HOOK_NAME, recurse=False)
    return len(convs)


def _set(components: Any, names: list[str], on: bool) -> dict[str, int]:
    counts = {}
    for name in names:
        module = getattr(components, name, None)
        if not isinstance(module, torch.nn.Module):
            raise AccelConfigError(f"temporal_conv: the components have no module {name!r}")
        counts[name] = set_temporal_conv(module, on)
    return counts


def _apply(components: Any, config: TemporalConv) -> AccelHandle:
    names = list(config.modules) or temporal_conv_modules(components)
    return AccelHandle(report={"modules": _set(components, names, True)}, state=names)


def _remove(components: Any, handle: AccelHandle) -> None:
    _set(components, handle.state, False)


register_acceleration(TemporalConv, order=75, apply=_apply, remove=_remove)
