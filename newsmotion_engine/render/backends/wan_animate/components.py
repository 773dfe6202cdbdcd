"""Loading the Wan-Animate components, through the shared Wan loaders (:mod:`..wan.components`).

The transformer, VAE and scheduler are the render-time components (:func:`load_render_components`).
The scheduler is the class the folder's ``scheduler/scheduler_config.json`` names, with that config
(a preset: UniPC, Wan's default solver). The image encoder (:func:`load_image_encoder`) and the text
encoder (:func:`~..wan.components.load_text_encoder`) are for cache building only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from newsmotion_engine.errors import BadInputError
from newsmotion_engine.render.backends.wan import components as wan
from newsmotion_engine.render.backends.wan_animate.config import NAME, WanAnimateOptions

__all__ = ["PIPELINE_CLASSES", "build_transformer", "check_model_folder", "load_image_encoder", "load_render_components"]

PIPELINE_CLASSES = ("WanAnimatePipeline",)
TRANSFORMER_CLASS = "WanAnimateTransformer3DModel"
# Sub-folder -> files that must be there (a weight file is checked separately).
_REQUIRED = {
    ".": ("model_index.json",),
    "transformer": ("config.json",),
    "vae": ("config.json",),
    "scheduler": ("scheduler_config.json",),
    "image_encoder": ("config.json",),
    "image_processor": ("preprocessor_config.json",),
    "text_encoder": ("config.json",),
    "tokenizer": ("tokenizer_config.json",),
}


def check_model_folder(path: Path) -> None:
    """Raise :class:`BadInputError` naming the first missing file, or a wrong architecture."""
    if not path.is_dir():
        raise BadInputError(path, "model folder does not exist (set model_path or NEWSMOTION_MODEL_DIR, or use a preset)")
    wan.check_folder_contents(path, path / "model_index.json", required=_REQUIRED, pipelines=PIPELINE_CLASSES,
                              transformer=TRANSFORMER_CLASS, model="Wan-Animate", backend=NAME)  # fmt: skip


def build_transformer(opts: WanAnimateOptions, device: Any, dtype: Any):
    from diffusers import WanAnimateTransformer3DModel

    return wan.build_transformer(opts, device, dtype, WanAnimateTransformer3DModel)


def load_render_components(opts: WanAnimateOptions) -> wan.RenderComponents:
    """Transformer + VAE + scheduler config on the configured device (no encoders)."""
    return wan.assemble_render_components(opts, wan.RenderComponents, check_folder=check_model_folder, identity=wan.model_identity,
                                          scheduler_config=wan.scheduler_config, build=build_transformer)  # fmt: skip


def load_image_encoder(opts: WanAnimateOptions, device: Any):
    """``(image_processor, clip_vision_model)``; for cache building only."""
    from transformers import CLIPImageProcessor, CLIPVisionConfig

    if opts.model_path:
        proc = CLIPImageProcessor.from_pretrained(Path(opts.model_path) / "image_processor")
    else:
        size = CLIPVisionConfig(**opts.preset_spec.image_encoder).image_size
        proc = CLIPImageProcessor(size={"shortest_edge": size}, crop_size={"height": size, "width": size})
    return proc, wan.build_image_encoder(opts, device)
