"""The ``wan-animate`` diffusion backend (Wan2.2-Animate through diffusers' components).

Importing this package is cheap (no torch / diffusers); :func:`register` adds the backend to the
render registry (and its checkpoints to ``newsmotion model check``) with its options class and a
lazy factory that imports them only when a backend is created (``newsmotion_engine.render``
registers every built-in backend on import)::

    backend = get_backend("wan-animate", preset="tiny", steps=2, teacache=0.15)

Options: :class:`~newsmotion_engine.render.backends.wan_animate.config.WanAnimateOptions` (model and
sampling fields plus typed acceleration configs; its ``from_mapping`` parses the flat keys).
"""

from __future__ import annotations

from newsmotion_engine.render.backends.wan_animate.config import NAME, PRESETS, RANDOM_WEIGHTS_LABEL, WanAnimateConfigError, WanAnimateOptions

__all__ = ["NAME", "PRESETS", "RANDOM_WEIGHTS_LABEL", "WanAnimateConfigError", "WanAnimateOptions", "create", "register"]


def create(options: WanAnimateOptions):
    """Factory: a new, not yet loaded :class:`WanAnimateBackend` for validated ``options``."""
    from newsmotion_engine.render.backends.wan_animate.backend import WanAnimateBackend

    return WanAnimateBackend(options)


def register() -> None:
    """Register ``wan-animate`` in the render backend registry (idempotent)."""
    from newsmotion_engine.render.backends.wan_animate.components import PIPELINE_CLASSES, check_model_folder
    from newsmotion_engine.render.backends.wan.model_check import register_checkpoint
    from newsmotion_engine.render.base import register_backend

    register_backend(NAME, create, options=WanAnimateOptions)
    register_checkpoint(NAME, PIPELINE_CLASSES, check_model_folder, WanAnimateOptions)
