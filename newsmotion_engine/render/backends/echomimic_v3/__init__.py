"""The ``echomimic-v3`` diffusion backend (EchoMimicV3 flash-pro on diffusers' Wan components).

Importing this package is cheap (no torch / diffusers); :func:`register` adds the backend to the
render registry with a lazy factory::

    backend = get_backend("echomimic-v3", preset="tiny", device="cpu", speech="news-1", speech_root="storage/speech")

Options: :class:`~newsmotion_engine.render.backends.echomimic_v3.config.EchoMimicV3Options`.
"""

from __future__ import annotations

from newsmotion_engine.render.backends.echomimic_v3.config import NAME, PRESETS, EchoMimicV3ConfigError, EchoMimicV3Options

__all__ = ["NAME", "PRESETS", "EchoMimicV3ConfigError", "EchoMimicV3Options", "create", "register"]


def create(options: EchoMimicV3Options):
    """Factory: a new, not yet loaded :class:`~.backend.EchoMimicV3Backend`."""
    from newsmotion_engine.render.backends.echomimic_v3.backend import EchoMimicV3Backend

    return EchoMimicV3Backend(options)


def register() -> None:
    """Register ``echomimic-v3`` in the render backend registry and its folder layout with
    ``newsmotion model check`` (idempotent)."""
    from newsmotion_engine.render.backends.echomimic_v3 import model_check
    from newsmotion_engine.render.base import register_backend

    register_backend(NAME, create, options=EchoMimicV3Options)
    model_check.register()
