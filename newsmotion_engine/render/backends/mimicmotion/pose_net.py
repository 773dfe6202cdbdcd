"""MimicMotion's PoseNet and how its features enter the SVD UNet.

:class:`PoseNet` is written from the official definition (``mimicmotion/modules/pose_net.py``):
eight 3x3 / 4x4 convolutions with SiLU, three of them stride 2 (so 1/8 of the pose frame, the VAE
latents' size), a 1x1 projection to the UNet's first width (320) and a learned scalar ``scale``
(initialised to 2). Its parameter names are the official ones (``conv_layers.{0,2,...,14}``,
``final_proj``, ``scale``), so the checkpoint's ``pose_net.*`` keys load as they are.

The official UNet is diffusers' ``UNetSpatioTemporalConditionModel`` with one line added: after
``conv_in``, ``sample = sample + pose_latents``. :func:`pose_conditioning` does that to the stock
diffusers UNet with a forward hook on ``conv_in`` for the duration of a call, so the UNet stays the
library's class (its state-dict keys equal the checkpoint's ``unet.*`` keys) and the hook is gone
afterwards.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

__all__ = ["PoseNet", "pose_conditioning"]


class PoseNet(nn.Module):
    """Pose frames ``[N, 3, H, W]`` (or ``[B, F, 3, H, W]``, flattened) in [-1, 1] ->
    features ``[N, noise_latent_channels, H/8, W/8]`` added to the UNet's ``conv_in`` output."""

    def __init__(self, noise_latent_channels: int = 320):
        super().__init__()
        widths = [(3, 3, 3, 1), (3, 16, 4, 2), (16, 16, 3, 1), (16, 32, 4, 2), (32, 32, 3, 1), (32, 64, 4, 2),
                  (64, 64, 3, 1), (64, 128, 3, 1)]  # (in, out, kernel, stride) as the official stack  # fmt: skip
        layers: list[nn.Module] = []
        for cin, cout, k, s in widths:
            layers += [nn.Conv2d(cin, cout, kernel_size=k, stride=s, padding=1), nn.SiLU()]
        self.conv_layers = nn.Sequential(*layers)
        self.final_proj = nn.Conv2d(128, noise_latent_channels, kernel_size=1)
        self.scale = nn.Parameter(torch.ones(1) * 2)
        self._initialize_weights()

    def _initialize_weights(self) -> None:
        """He-normal convolutions with zero biases, a zero projection (the official init: an
        untrained PoseNet adds nothing)."""
        for m in self.conv_layers:
            if isinstance(m, nn.Conv2d):
                n = m.kernel_size[0] * m.kernel_size[1] * m.in_channels
                nn.init.normal_(m.weight, mean=0.0, std=(2.0 / n) ** 0.5)
                nn.init.zeros_(m.bias)
        nn.init.zeros_(self.final_proj.weight)
        nn.init.zeros_(self.final_proj.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.ndim == 5:
            x = x.flatten(0, 1)
        return self.final_proj(self.conv_layers(x)) * self.scale


@contextlib.contextmanager
def pose_conditioning(unet: Any, pose_latents: torch.Tensor | None) -> Iterator[None]:
    """Within the block, every ``unet`` call adds ``pose_latents`` (``[B * F, C, h, w]``, matching
    the flattened batch of frames) to ``conv_in``'s output, as the official UNet's forward does;
    ``None`` adds nothing (the unconditional pass)."""
    if pose_latents is None:
        yield
        return

    def add(_module: nn.Module, _inputs: Any, output: torch.Tensor) -> torch.Tensor:
        return output + pose_latents.to(output.dtype)

    handle = unet.conv_in.register_forward_hook(add)
    try:
        yield
    finally:
        handle.remove()
