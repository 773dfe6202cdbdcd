"""The ``wan-animate-2`` diffusion backend (Wan-Animate-2 through diffusers 0.42.1's components).

Importing this package is cheap (no torch / diffusers); :func:`register` adds the backend to the
render registry with a lazy factory::

    backend = get_backend("wan-animate-2", preset="tiny", device="cpu", schedule="distilled")

Options: :class:`~newsmotion_engine.render.backends.wan_animate_2.config.WanAnimate2Options`.
"""

from __future__ import annotations

from newsmotion_engine.render.backends.wan_animate_2.config import NAME, PRESETS, RANDOM_WEIGHTS_LABEL, SCHEDULES, WanAnimate2ConfigError, WanAnimate2Options

__all__ = ["NAME", "PRESETS", "RANDOM_WEIGHTS_LABEL", "SCHEDULES", "WanAnimate2ConfigError", "WanAnimate2Options", "create", "register"]


def create(options: WanAnimate2Options):
    """Factory: a new, not yet loaded :class:`WanAnimate2Backend`."""
    from newsmotion_engine.render.backends.wan_animate_2.backend import WanAnimate2Backend

    return WanAnimate2Backend(options)


def register() -> None:
    """Register ``wan-animate-2`` in the render backend registry (idempotent)."""
    from newsmotion_engine.render.backends.wan_animate_2.components import PIPELINE_CLASSES, check_model_folder
    from newsmotion_engine.render.backends.wan.model_check import register_checkpoint
    from newsmotion_engine.render.base import register_backend

    register_backend(NAME, create, options=WanAnimate2Options)
    register_checkpoint(NAME, PIPELINE_CLASSES, check_model_folder, WanAnimate2Options)
