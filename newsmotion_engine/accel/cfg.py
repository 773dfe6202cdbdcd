"""Classifier-free guidance strategies: a CFG window and one-pass CFG with guidance momentum.

Plain CFG (Ho & Salimans, https://arxiv.org/abs/2207.12598) runs the denoiser twice per step,
``pred = uncond + s * (cond - uncond)``. Two ways to run the unconditional pass less often:

- **Window** (as diffusers' guiders' ``start`` / ``stop``): guidance is applied only on steps
  ``i`` with ``start * n <= i < stop * n``; outside it the step is the conditional pass alone.
- **One-pass with momentum**: inside the window the two passes run only every ``every`` steps;
  the steps between run the conditional pass alone and add the cached guidance delta
  ``d = cond - uncond`` of the last two-pass step, smoothed with momentum
  ``d_ema <- m * d_ema + (1 - m) * d`` at each refresh (``m = 0`` keeps the latest delta).

``pred = cond + (s - 1) * d`` equals the plain formula whenever ``d`` is fresh, so ``every=1`` with
a full window is plain CFG. :meth:`CFGStrategy.stats` counts passes and the fraction of denoiser
FLOPs saved against plain CFG (every denoiser pass costs the same).

Example::

    cfg = CFGStrategy(CFGConfig(scale=5.0, start=0.0, stop=0.8, every=2, momentum=0.5), steps=40)
    for i in range(40):
        cond = model(x, cond_inputs)
        uncond = model(x, uncond_inputs) if cfg.needs_uncond(i) else None
        pred = cfg.combine(i, cond, uncond)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

__all__ = ["CFGConfig", "CFGStrategy", "window_steps"]


@dataclass(frozen=True)
class CFGConfig:
    """Guidance scale (1 = off), window ``[start, stop)`` as fractions of the steps, two-pass
    period ``every`` and delta ``momentum`` in [0, 1)."""

    scale: float = 1.0
    start: float = 0.0
    stop: float = 1.0
    every: int = 1
    momentum: float = 0.0

    def __post_init__(self) -> None:
        if self.scale < 1.0:
            raise ValueError(f"CFG scale {self.scale} must be >= 1 (1 = no guidance)")
        if not 0.0 <= self.start < self.stop <= 1.0:
            raise ValueError(f"CFG window [{self.start}, {self.stop}) must satisfy 0 <= start < stop <= 1")
        if self.every < 1:
            raise ValueError(f"CFG every={self.every} must be >= 1")
        if not 0.0 <= self.momentum < 1.0:
            raise ValueError(f"CFG momentum {self.momentum} must be in [0, 1)")

    @property
    def enabled(self) -> bool:
        return self.scale > 1.0


def window_steps(config: CFGConfig, steps: int) -> range:
    """Step indices inside the window: ``ceil(start * n) <= i < ceil(stop * n)`` (so a window of
    [0, 1) covers every step, and [0, 0.5) the first half)."""
    return range(math.ceil(config.start * steps - 1e-9), math.ceil(config.stop * steps - 1e-9))


class CFGStrategy:
    """Per-render guidance state (create one per segment / render; it is not reusable)."""

    def __init__(self, config: CFGConfig, steps: int) -> None:
        self.config = config
        self.steps = steps
        self._window = window_steps(config, steps) if config.enabled else range(0)
        self._delta: Any = None
        self._last_two_pass: int | None = None
        self.cond_passes = 0
        self.uncond_passes = 0

    def in_window(self, step: int) -> bool:
        return step in self._window

    def needs_uncond(self, step: int) -> bool:
        """Whether step ``step`` runs the unconditional pass."""
        if not self.in_window(step):
            return False
        if self._delta is None or self.config.every == 1:
            return True
        # Two passes every `every` steps, counted from the window's first step.
        return (step - self._window.start) % self.config.every == 0

    def combine(self, step: int, cond: Any, uncond: Any | None) -> Any:
        """The guided prediction for ``step`` from the conditional (and, when run, unconditional)
        outputs. Must be called once per step, in order."""
        self.cond_passes += 1
        if uncond is not None:
            self.uncond_passes += 1
            delta = cond - uncond
            m = self.config.momentum
            self._delta = delta if (self._delta is None or m == 0.0) else m * self._delta + (1.0 - m) * delta
            self._last_two_pass = step
            if m == 0.0:
                # Exactly the textbook formula on two-pass steps (no extra rounding).
                return uncond + self.config.scale * (cond - uncond)
            return cond + (self.config.scale - 1.0) * self._delta
        if self.in_window(step) and self._delta is not None:
            return cond + (self.config.scale - 1.0) * self._delta
        return cond

    def stats(self) -> dict[str, Any]:
        """Passes run and the denoiser FLOPs saved versus plain CFG on every step."""
        plain = self.steps * (2 if self.config.enabled else 1)
        run = self.cond_passes + self.uncond_passes
        return {
            "cond_passes": self.cond_passes,
            "uncond_passes": self.uncond_passes,
            "plain_cfg_passes": plain,
            "flops_saved": round(1.0 - run / plain, 4) if plain else 0.0,
        }
