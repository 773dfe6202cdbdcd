"""The ``mimicmotion`` diffusion backend: MimicMotion 1.1 (SVD-xt-1.1 with a fine-tuned UNet and a
PoseNet; Tencent/MimicMotion) on diffusers' components.

Importing this package is cheap (no torch / diffusers); :func:`register` adds the backend to the
render registry (and its checkpoint layout to ``newsmotion model check``) with its options class
and a lazy factory::

    backend = get_backend("mimicmotion", preset="tiny", steps=2)

Options: :class:`~newsmotion_engine.render.backends.mimicmotion.config.MimicMotionOptions`.
"""

from __future__ import annotations

from newsmotion_engine.render.backends.mimicmotion.config import NAME, PRESETS, MimicMotionConfigError, MimicMotionOptions

__all__ = ["NAME", "PRESETS", "MimicMotionConfigError", "MimicMotionOptions", "create", "register"]


def create(options: MimicMotionOptions):
    """Factory: a new, not yet loaded :class:`~.backend.MimicMotionBackend` for validated ``options``."""
    from newsmotion_engine.render.backends.mimicmotion.backend import MimicMotionBackend

    return MimicMotionBackend(options)


def register() -> None:
    """Register ``mimicmotion`` in the render backend registry (idempotent)."""
    from newsmotion_engine.render.backends.mimicmotion.components import PIPELINE_CLASSES, check_model_folder
    from newsmotion_engine.render.backends.mimicmotion.config import RELEASED_DIR, SVD_RELEASE, released
    from newsmotion_engine.render.backends.mimicmotion.model_check import checkpoint_rows, has_checkpoint
    from newsmotion_engine.render.backends.wan.model_check import register_checkpoint
    from newsmotion_engine.render.base import register_backend

    register_backend(NAME, create, options=MimicMotionOptions)
    register_checkpoint(NAME, PIPELINE_CLASSES, check_model_folder, MimicMotionOptions,
                        release=(RELEASED_DIR / SVD_RELEASE / "unet" / "config.json", released()["base_model"]),
                        marker=has_checkpoint, extra_rows=checkpoint_rows,
                        expects="an SVD-xt-1.1 diffusers folder (model_index.json: StableVideoDiffusionPipeline) + MimicMotion_1-1.pth")
