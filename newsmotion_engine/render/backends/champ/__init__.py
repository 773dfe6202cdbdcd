"""The ``champ`` diffusion backend: Champ (SD1.5 denoising UNet with AnimateDiff motion modules, a
reference UNet, and guidance encoders for SMPL depth / normal / semantic maps and the DWPose
skeleton) on diffusers components.

Importing this package is cheap (no torch / diffusers); :func:`register` adds the backend to the
render registry with its options class and a lazy factory::

    backend = get_backend("champ", smpl_model="~/models/SMPL_NEUTRAL.pkl", preset="tiny", steps=2)

It needs the user's SMPL model file (licensed, not shipped): without ``smpl_model`` (or
``$NEWSMOTION_SMPL_MODEL``) the options are refused with one line saying where to get it.
"""

from __future__ import annotations

from newsmotion_engine.render.backends.champ.config import NAME, ChampConfigError, ChampOptions

__all__ = ["NAME", "ChampConfigError", "ChampOptions", "create", "register"]


def create(options: ChampOptions):
    """Factory: a new, not yet loaded :class:`~.backend.ChampBackend` for validated ``options``."""
    from newsmotion_engine.render.backends.champ.backend import ChampBackend

    return ChampBackend(options)


def register() -> None:
    """Register ``champ`` in the render backend registry and its folder layout with
    ``newsmotion model check`` (idempotent)."""
    from newsmotion_engine.render.backends.champ import model_check
    from newsmotion_engine.render.base import register_backend

    register_backend(NAME, create, options=ChampOptions)
    model_check.register()
