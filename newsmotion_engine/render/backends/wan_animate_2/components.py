"""Loading the Wan-Animate-2 components: from a diffusers-format folder, or a preset's
architecture with seeded random weights.

Render-time components (:func:`load_render_components`): transformer, VAE (its decoder; its
encoder only for ``continuation="frames"``), scheduler config. The image encoder and the text
encoder are for cache building only (:func:`load_image_encoder`, :func:`load_text_encoder`).

The scheduler is the class and config of the folder's ``scheduler/scheduler_config.json`` (a
preset: ``FlowMatchEulerDiscreteScheduler``, shift 5). The stock denoise step (and ours) passes
``generator=`` to ``scheduler.step``, so a scheduler whose ``step`` takes no generator (UniPC) is
refused, naming the file. The guidance scale of a folder's ``guider/guider_config.json`` is checked
at load too (the options read it, :meth:`~.config.WanAnimate2Options.cfg_scale`).

The folder checks, the identity, the seeded builders, the text encoder and the assembly are
the shared Wan loaders' (:mod:`..wan.components`), given this model's classes and scheduler.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from newsmotion_engine.errors import BadInputError
from newsmotion_engine.render.backends.wan import components as _wan
from newsmotion_engine.render.backends.wan.components import load_text_encoder
from newsmotion_engine.render.backends.wan_animate_2.config import NAME, WanAnimate2Options

__all__ = [
    "RenderComponents",
    "check_model_folder",
    "load_image_encoder",
    "load_render_components",
    "load_text_encoder",
    "model_identity",
]

RANDOM_SEED = _wan.RANDOM_SEED
PIPELINE_CLASSES = ("WanAnimate2ModularPipeline", "WanAnimate2DistilledModularPipeline")
TRANSFORMER_CLASS = "WanAnimate2Transformer3DModel"


def check_model_folder(path: Path) -> None:
    """Raise :class:`BadInputError` naming the first missing file, or a wrong architecture."""
    _wan.check_wan_folder(path, pipelines=PIPELINE_CLASSES, transformer=TRANSFORMER_CLASS, model="Wan-Animate-2", backend=NAME,
                          env="NEWSMOTION_MODEL_DIR_ANIMATE2")  # fmt: skip


def model_identity(opts: WanAnimate2Options, device: Any) -> dict[str, Any]:
    """What caches built with these weights are keyed on (JSON-able, with a ``digest``)."""
    return _wan.model_identity(opts, device, model=NAME)  # type: ignore[arg-type]


class RenderComponents(_wan.RenderComponents):
    """What a render uses; the object the acceleration registry applies configs to."""

    default_scheduler = WanAnimate2Options.default_scheduler

    def new_scheduler(self):
        """A fresh scheduler of the config's class (its state must never leak between segments)."""
        return _wan.scheduler_class(self.scheduler_config, self.default_scheduler).from_config(self.scheduler_config)


def scheduler_config(opts: WanAnimate2Options) -> dict[str, Any]:
    """The scheduler config (the folder's, else the preset's), its class checked: it must take the
    ``generator`` the denoise step passes (:class:`BadInputError` naming the file)."""
    import inspect

    config = _wan.scheduler_config(opts)
    cls = _wan.scheduler_class(config, opts.default_scheduler)
    if "generator" not in inspect.signature(cls.step).parameters:
        where = Path(opts.model_path) / "scheduler" / "scheduler_config.json" if opts.model_path else f"preset {opts.preset!r}"
        raise BadInputError(where, f"names {cls.__name__}, whose step() takes no generator; the Wan-Animate-2 pipeline steps "
                                   "with one (the released config names FlowMatchEulerDiscreteScheduler)")  # fmt: skip
    opts.folder_guidance_scale()  # a bad guider config fails the load, not a render
    return config


def build_transformer(opts: WanAnimate2Options, device: Any, dtype: Any):
    from diffusers import WanAnimate2Transformer3DModel

    return _wan.build_transformer(opts, device, dtype, WanAnimate2Transformer3DModel)


def load_render_components(opts: WanAnimate2Options) -> RenderComponents:
    """Transformer + VAE + scheduler config on the configured device (no CLIP, no text encoder)."""
    from newsmotion_engine.render.backends.wan_animate_2 import attention  # noqa: F401  registers its fp8-triton processor

    return _wan.assemble_render_components(opts, RenderComponents, check_folder=check_model_folder, identity=model_identity,
                                           scheduler_config=scheduler_config, build=build_transformer)  # fmt: skip


def load_image_encoder(opts: WanAnimate2Options, device: Any):
    """The CLIP vision model (cache building only); preprocessing is the stock ``clip_visual_encode``."""
    return _wan.build_image_encoder(opts, device)
