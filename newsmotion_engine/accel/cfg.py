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

The schedule is a sampling-time acceleration: :class:`CFGSchedule` (registry order 50; options
``cfg_start``, ``cfg_stop``, ``cfg_every``, ``cfg_momentum``) is attached to the components
(``components.cfg_schedule``) when applied and detached (plain CFG) when removed; the segment
renderer builds a :class:`CFGStrategy` from it per segment. The guidance scale itself is a
sampling option of the backend (``guidance_scale``), not part of the acceleration.

Example::

    cfg = CFGStrategy(5.0, steps=40, schedule=CFGSchedule(start=0.0, stop=0.8, every=2, momentum=0.5))
    for i in range(40):
        cond = model(x, cond_inputs)
        uncond = model(x, uncond_inputs) if cfg.needs_uncond(i) else None
        pred = cfg.combine(i, cond, uncond)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

from newsmotion_engine.accel.registry import AccelConfig, AccelConfigError, AccelHandle, register_acceleration

__all__ = ["CFGSchedule", "CFGStrategy", "window_steps"]


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


@dataclass(frozen=True)
class CFGSchedule(AccelConfig):
    """When the unconditional pass runs: window ``[start, stop)`` as fractions of the steps,
    two-pass period ``every`` and delta ``momentum`` in [0, 1). The default is plain CFG."""

    technique: ClassVar[str] = "cfg"
    start: float = 0.0
    stop: float = 1.0
    every: int = 1
    momentum: float = 0.0

    def __post_init__(self) -> None:
        if not (_number(self.start) and _number(self.stop) and 0.0 <= self.start < self.stop <= 1.0):
            raise AccelConfigError(f"CFG window [{self.start!r}, {self.stop!r}) must satisfy 0 <= start < stop <= 1")
        if not isinstance(self.every, int) or isinstance(self.every, bool) or self.every < 1:
            raise AccelConfigError(f"CFG every={self.every!r}: use an integer >= 1 (1 = two passes every step)")
        if not (_number(self.momentum) and 0.0 <= self.momentum < 1.0):
            raise AccelConfigError(f"CFG momentum {self.momentum!r} must be in [0, 1)")
        for name in ("start", "stop", "momentum"):
            object.__setattr__(self, name, float(getattr(self, name)))


def window_steps(schedule: CFGSchedule, steps: int) -> range:
    """Step indices inside the window: ``ceil(start * n) <= i < ceil(stop * n)`` (so a window of
    [0, 1) covers every step, and [0, 0.5) the first half)."""
    return range(math.ceil(schedule.start * steps - 1e-9), math.ceil(schedule.stop * steps - 1e-9))


class CFGStrategy:
    """Per-segment guidance state (create one per segment; it is not reusable).

    Args:
        scale: guidance scale (1 = no guidance: the unconditional pass never runs).
        steps: denoising steps of the segment.
        schedule: the :class:`CFGSchedule`; ``None`` is plain CFG on every step.
    """

    def __init__(self, scale: float, steps: int, schedule: CFGSchedule | None = None) -> None:
        self.scale = float(scale)
        self.schedule = schedule or CFGSchedule()
        self.steps = steps
        self.enabled = self.scale > 1.0
        self._window = window_steps(self.schedule, steps) if self.enabled else range(0)
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
        if self._delta is None or self.schedule.every == 1:
            return True
        # Two passes every `every` steps, counted from the window's first step.
        return (step - self._window.start) % self.schedule.every == 0

    def combine(self, step: int, cond: Any, uncond: Any | None) -> Any:
        """The guided prediction for ``step`` from the conditional (and, when run, unconditional)
        outputs. Must be called once per step, in order."""
        self.cond_passes += 1
        if uncond is not None:
            self.uncond_passes += 1
            delta = cond - uncond
            m = self.schedule.momentum
            self._delta = delta if (self._delta is None or m == 0.0) else m * self._delta + (1.0 - m) * delta
            self._last_two_pass = step
            if m == 0.0:
                # Exactly the textbook formula on two-pass steps (no extra rounding).
                return uncond + self.scale * (cond - uncond)
            return cond + (self.scale - 1.0) * self._delta
        if self.in_window(step) and self._delta is not None:
            return cond + (self.scale - 1.0) * self._delta
        return cond

    def stats(self) -> dict[str, Any]:
        """Passes run and the denoiser FLOPs saved versus plain CFG on every step."""
        plain = self.steps * (2 if self.enabled else 1)
        run = self.cond_passes + self.uncond_passes
        return {
            "cond_passes": self.cond_passes,
            "uncond_passes": self.uncond_passes,
            "plain_cfg_passes": plain,
            "flops_saved": round(1.0 - run / plain, 4) if plain else 0.0,
        }


def _apply(components: Any, config: CFGSchedule) -> AccelHandle:
    previous = getattr(components, "cfg_schedule", None)
    components.cfg_schedule = config
    return AccelHandle(report=config.fields(), state=previous)


def _remove(components: Any, handle: AccelHandle) -> None:
    components.cfg_schedule = handle.state


register_acceleration(CFGSchedule, order=50, apply=_apply, remove=_remove)
