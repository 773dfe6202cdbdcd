"""The ``scail-2`` diffusion backend: SCAIL-2's in-context DiT (Wan2.1-14B based) on diffusers' Wan
components, driven by a real video of a person and its matte.

Importing this package is cheap (no torch / diffusers); :func:`register` adds the backend to the
render registry with a lazy factory::

    backend = get_backend("scail-2", preset="tiny", device="cpu", mode="animation")

Options: :class:`~newsmotion_engine.render.backends.scail_2.config.Scail2Options`.
"""

from __future__ import annotations

from newsmotion_engine.render.backends.scail_2.config import MODES, NAME, PRESETS, RANDOM_WEIGHTS_LABEL, Scail2ConfigError, Scail2Options

__all__ = ["MODES", "NAME", "PRESETS", "RANDOM_WEIGHTS_LABEL", "Scail2ConfigError", "Scail2Options", "create", "register"]


def create(options: Scail2Options):
    """Factory: a new, not yet loaded :class:`~.backend.Scail2Backend`."""
    from newsmotion_engine.render.backends.scail_2.backend import Scail2Backend

    return Scail2Backend(options)


def register() -> None:
    """Register ``scail-2`` in the render backend registry (idempotent)."""
    from newsmotion_engine.render.backends.scail_2.components import PIPELINE_CLASSES, check_model_folder
    from newsmotion_engine.render.backends.scail_2.model_check import has_official_transformer, transformer_rows
    from newsmotion_engine.render.backends.scail_2.released import RELEASE
    from newsmotion_engine.render.backends.wan.model_check import register_checkpoint
    from newsmotion_engine.render.base import register_backend

    register_backend(NAME, create, options=Scail2Options)
    register_checkpoint(NAME, PIPELINE_CLASSES, check_model_folder, Scail2Options,
                        release=(RELEASE / "transformer" / "config.json", "zai-org/SCAIL-2"),
                        marker=has_official_transformer, extra_rows=transformer_rows,
                        expects="model_index.json naming SCAIL2Pipeline, transformer/ (the official WanSCAILModel config.json + safetensors), Wan 2.1 vae/, image_encoder/, text_encoder/, tokenizer/, scheduler/")
