"""EXPERIMENTAL pyramid cascade: the first denoising steps at a lower resolution.

The early steps of a flow-matching trajectory decide layout and coarse motion; their detail is
mostly noise. Running them at half the latent resolution costs a quarter of the tokens (and about
a sixteenth of the attention work); the trajectory then moves to full resolution:

1. steps ``0 .. low_steps - 1`` denoise latents downsampled by ``factor`` (area resampling; the
   initial noise is renormalised to unit variance), with the pose and reference latents
   downsampled the same way (the transformer's rotary positions follow the grid it is given);
2. at the switch, the low-resolution estimate of the clean latents from the last low step,
   ``x0 = x - sigma * v`` (flow matching predicts the velocity ``v = noise - x0``), is upsampled
   and re-noised to the next step's noise level with the render's own full-resolution noise,
   ``x = (1 - sigma_k) up(x0) + sigma_k noise`` — the flow-matching forward process, so the
   full-resolution steps start on their own schedule;
3. steps ``low_steps .. steps - 1`` run at full resolution with a fresh scheduler.

This follows the idea of Pyramidal Flow Matching (Y. Jin et al., "Pyramidal Flow Matching for
Efficient Video Generative Modeling", https://arxiv.org/abs/2410.05954) in its simplest
training-free form. Whether the pictures hold up can only be judged with real weights: it is off
by default, and ``newsmotion calibrate pyramid`` measures PSNR / SSIM against the full-resolution
run on a user's own clips (:mod:`newsmotion_engine.render.backends.wan_animate.calibrate`).

:class:`PyramidCascade` (registry order 45; options ``pyramid_low_steps``, ``pyramid_factor``) is a
sampling-time acceleration like the CFG schedule: applying it attaches it to the components
(``components.pyramid``); the denoising loop reads it.

Example::

    configs = (PyramidCascade(low_steps=2),)       # 2 of 4 steps at half resolution
    newsmotion render ... --backend wan-animate -o pyramid_low_steps=2
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

from newsmotion_engine.accel.registry import AccelConfig, AccelConfigError, AccelHandle, register_acceleration

__all__ = ["PyramidCascade", "low_size"]


@dataclass(frozen=True)
class PyramidCascade(AccelConfig):
    """The first ``low_steps`` steps at ``1 / factor`` of the latent height and width."""

    technique: ClassVar[str] = "pyramid"
    low_steps: int = 1
    factor: int = 2

    def __post_init__(self) -> None:
        for name in ("low_steps", "factor"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool):
                raise AccelConfigError(f"pyramid {name} {v!r} is not an integer")
        if self.low_steps < 1:
            raise AccelConfigError(f"pyramid low_steps {self.low_steps} must be at least 1 (the option pyramid_low_steps=0 means off)")
        if self.factor not in (2, 4):
            raise AccelConfigError(f"pyramid factor {self.factor} must be 2 or 4")

    def check_steps(self, steps: int) -> None:
        """A render of ``steps`` steps must keep at least one at full resolution."""
        if self.low_steps >= steps:
            raise AccelConfigError(
                f"pyramid low_steps {self.low_steps} leaves no full-resolution step of {steps}: use at most {steps - 1}"
            )


def low_size(height: int, width: int, factor: int, patch: int = 2) -> tuple[int, int]:
    """The low-resolution latent grid: ``1 / factor`` of ``height x width``, rounded up to a
    multiple of the transformer's spatial ``patch`` (a 720-wide frame's 90 latent columns -> 46)."""
    return (max(patch, patch * math.ceil(height / (factor * patch))), max(patch, patch * math.ceil(width / (factor * patch))))


def _apply(components: Any, config: PyramidCascade) -> AccelHandle:
    previous = getattr(components, "pyramid", None)
    components.pyramid = config
    return AccelHandle(report=config.fields(), state=previous)


def _remove(components: Any, handle: AccelHandle) -> None:
    components.pyramid = handle.state


register_acceleration(PyramidCascade, order=45, apply=_apply, remove=_remove)
