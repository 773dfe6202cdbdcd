"""The ``wan-animate`` diffusion backend (Wan2.2-Animate through diffusers' components).

Importing this package is cheap (no torch / diffusers); :func:`register` adds the backend to the
render registry with a lazy factory that imports them only when a backend is created::

    from newsmotion_engine.render import wan_animate
    wan_animate.register()
    backend = get_backend("wan-animate", preset="tiny", steps=2)

Options are :class:`~newsmotion_engine.render.wan_animate.config.WanAnimateOptions` fields.
"""

from __future__ import annotations

from typing import Any

from newsmotion_engine.render.wan_animate.config import PRESETS, RANDOM_WEIGHTS_LABEL, WanAnimateConfigError, WanAnimateOptions

__all__ = ["NAME", "PRESETS", "RANDOM_WEIGHTS_LABEL", "WanAnimateConfigError", "WanAnimateOptions", "create", "register"]

NAME = "wan-animate"


def create(**options: Any):
    """Factory: a new, not yet loaded :class:`WanAnimateBackend` (options validated first, so a
    typo fails before torch is imported)."""
    opts = WanAnimateOptions.from_mapping(options)
    from newsmotion_engine.render.wan_animate.backend import WanAnimateBackend

    return WanAnimateBackend(opts)


def register() -> None:
    """Register ``wan-animate`` in the render backend registry (idempotent)."""
    from newsmotion_engine.render.base import register_backend

    register_backend(NAME, create)
