"""The Wan VAE's RMS norm and the SiLU after it as one pass (registry order 73; the option
``fused_vae_norm``).

Why: in diffusers' ``AutoencoderKLWan`` every residual block runs ``norm -> SiLU -> conv`` twice,
and the encoder's and decoder's heads once more. ``WanRMS_norm`` is ``F.normalize(x, dim=1) *
scale * gamma + bias``: a norm reduction, a clamp, a division, two multiplications and an
addition (of ``0.0`` when the norm has no bias), then the SiLU: six or seven passes over an
activation of up to 1.4 GB (float32, 96 channels, 4 frames at 720x1280). The H100 profile of a
17-frame float32 decode (``benchmarks/results/conv3d_h100.json``) spends 364 ms of its 1434 ms
busy in such element-wise kernels, beside 818 ms of convolutions. One kernel that reads each
position's channels once, normalises, scales and applies the SiLU does the same sums in one pass.

Measured there (H100, float32, channels-last, 17 frames at 720x1280, with ``causal_pad_fold``):
decode 1435.4 -> 1200.5 ms (-16%), encode 869.2 -> 731.4 ms (-16%). The largest difference from
the stock output is 2.9e-3 of its largest magnitude, the size a change of convolution algorithm
makes in these TF32 convolutions (the same VAE in torch's default layout: 2.8e-3).

What changes: the same function. The sum of squares is accumulated in float32 in another order
and the division, scale and gamma are applied in float32 before one rounding to the tensor's
dtype (eager rounds a bf16 tensor after the normalisation and again after each product), so
the output may differ in the last bits, like any change of kernel. On the CPU, or for a layout
the kernel does not take, the eager norm and SiLU run (the stock arithmetic, bit for bit).

How: in each ``WanResidualBlock`` (``norm1``, ``norm2``) and in the encoder's and decoder's
heads (``norm_out``) the norm gets an instance-level ``forward`` that also applies the SiLU, and
the owner's ``nonlinearity`` becomes an ``nn.Identity`` (there it only ever follows those norms).
Only owners whose nonlinearity is an ``nn.SiLU`` are touched. Removing it deletes the forwards
and puts the SiLU modules back; parameters and state-dict keys are never touched.

Which modules: ``FusedVaeNorm.modules`` names component attributes; empty (the default) means
every ``torch.nn.Module`` attribute of the components that holds such a block (the VAE).

Example::

    applied = apply_accelerations(components, (CausalPadFold(), FusedVaeNorm()))
    applied.report["fused_vae_norm"]   # wan-animate-2: {"modules": {"vae": ...}}
"""

from __future__ import annotations

import types
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
import torch.nn.functional as F

from newsmotion_engine.accel.module_toggle import ModuleToggleConfig, register_module_toggle

__all__ = ["FusedVaeNorm", "norm_act_owners", "rms_norm_silu", "set_fused_vae_norm"]

_SAVED_ACT = "_newsmotion_saved_nonlinearity"
# Owner class name -> the norms its forward follows with ``self.nonlinearity``
# (diffusers/models/autoencoders/autoencoder_kl_wan.py).
_FUSED_NORMS = {"WanResidualBlock": ("norm1", "norm2"), "WanEncoder3d": ("norm_out",), "WanDecoder3d": ("norm_out",)}


@dataclass(frozen=True)
class FusedVaeNorm(ModuleToggleConfig):
    """The Wan VAE's RMS norms and their SiLU in one pass (module docstring).

    Args:
        modules: component attribute names to change; empty: every module holding such a block.
    """

    technique: ClassVar[str] = "fused_vae_norm"


def _is_owner(module: torch.nn.Module) -> bool:
    names = _FUSED_NORMS.get(type(module).__name__)
    act = getattr(module, _SAVED_ACT, None) or getattr(module, "nonlinearity", None)
    return bool(names) and isinstance(act, torch.nn.SiLU) and all(type(getattr(module, n, None)).__name__ == "WanRMS_norm" for n in names)


def norm_act_owners(module: torch.nn.Module) -> list[torch.nn.Module]:
    """The blocks of ``module`` whose RMS norms are always followed by their SiLU."""
    return [m for m in module.modules() if _is_owner(m)]


def _flat_positions(x: torch.Tensor) -> int | None:
    """The one stride that steps through the (T, H, W) positions of a 5-D ``x`` (contiguous:
    1; channels-last-3d: C), or None when they are not evenly spaced."""
    if x.dim() != 5:
        return None
    _, _, t, h, w = x.shape
    st, sh, sw = x.stride()[2:]
    if (h == 1 or sh == w * sw) and (t == 1 or st == h * w * sw):
        return sw
    return None


def rms_norm_silu(norm: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """``silu(norm(x))`` for a channel-first ``WanRMS_norm``: one Triton pass on a GPU, the eager
    modules elsewhere."""
    stride_p = _flat_positions(x) if x.is_cuda else None
    # The kernel has no backward: where autograd would need one, the eager modules run.
    if stride_p is None or not norm.channel_first or (torch.is_grad_enabled() and (x.requires_grad or norm.gamma.requires_grad)):
        return F.silu(type(norm).forward(norm, x))
    from newsmotion_engine.accel.vae_norm_triton import rms_norm_silu_cuda

    bias = norm.bias if isinstance(norm.bias, torch.Tensor) else None
    return rms_norm_silu_cuda(x, norm.gamma, bias, float(norm.scale), stride_p)


def set_fused_vae_norm(module: torch.nn.Module, fused: bool) -> int:
    """Fuse (or un-fuse) the norms and SiLUs of every eligible block of ``module``; how many blocks."""
    owners = norm_act_owners(module)
    for owner in owners:
        for name in _FUSED_NORMS[type(owner).__name__]:
            norm = getattr(owner, name)
            if fused:
                norm.forward = types.MethodType(rms_norm_silu, norm)
            elif "forward" in vars(norm):
                del norm.forward
        saved = getattr(owner, _SAVED_ACT, None)
        if fused and saved is None:
            setattr(owner, _SAVED_ACT, owner.nonlinearity)
            owner.nonlinearity = torch.nn.Identity()
        elif not fused and saved is not None:
            owner.nonlinearity = saved
            delattr(owner, _SAVED_ACT)
    return len(owners)


register_module_toggle(FusedVaeNorm, order=73, holds=_is_owner, switch=set_fused_vae_norm)
