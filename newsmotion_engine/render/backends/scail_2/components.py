"""Loading the SCAIL-2 components: from a model folder, or a preset's architecture with seeded
random weights.

The folder (``model_path``)::

    model_index.json            {"_class_name": "SCAIL2Pipeline"}
    transformer/config.json     the official config.json of the converted SCAIL-2 DiT (WanSCAILModel)
    transformer/*.safetensors   its weights under the official names (blocks.N.self_attn.q.weight, ...)
    vae/ image_encoder/ text_encoder/ tokenizer/ scheduler/
                                diffusers format, e.g. from Wan-AI/Wan2.1-I2V-14B-720P-Diffusers
                                (SCAIL-2 uses the Wan2.1 VAE, UMT5-XXL and CLIP ViT-H/14 unchanged)

The DiT keeps the official key names on disk: :func:`load_official_transformer` builds the model
on the meta device, maps every key (:func:`~.transformer.official_to_ours`) and assigns the
tensors; a missing, unknown or mis-shaped tensor is one :class:`BadInputError` naming the file.
The VAE, the encoders, the identity and the assembly are the shared Wan loaders' (:mod:`..wan.components`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from newsmotion_engine.errors import BadInputError
from newsmotion_engine.render.backends.scail_2.config import MODEL_DIR_ENV, NAME, Scail2Options
from newsmotion_engine.render.backends.wan import components as _wan
from newsmotion_engine.render.backends.wan.components import load_text_encoder
from newsmotion_engine.render.backends.wan.diffusers_config import read_json

__all__ = [
    "PIPELINE_CLASSES",
    "RenderComponents",
    "check_model_folder",
    "load_image_encoder",
    "load_official_transformer",
    "load_render_components",
    "load_text_encoder",
    "model_identity",
]

PIPELINE_CLASSES = ("SCAIL2Pipeline",)
TRANSFORMER_CLASS = "WanSCAILModel"  # the official converted checkpoint's config class


def check_model_folder(path: Path) -> None:
    """Raise :class:`BadInputError` naming the first missing file, or a wrong architecture."""
    _wan.check_wan_folder(path, pipelines=PIPELINE_CLASSES, transformer=TRANSFORMER_CLASS, model="SCAIL-2", backend=NAME,
                          env=MODEL_DIR_ENV)  # fmt: skip


def model_identity(opts: Scail2Options, device: Any) -> dict[str, Any]:
    return _wan.model_identity(opts, device, model=NAME)  # type: ignore[arg-type]


class RenderComponents(_wan.RenderComponents):
    """What a render uses (transformer, VAE, scheduler config); the acceleration registry's target."""

    default_scheduler = Scail2Options.default_scheduler


def load_official_transformer(folder: Path, dtype: Any, device: Any):
    """The DiT from ``folder`` (official ``config.json`` + safetensors under the official names).

    Raises:
        BadInputError: no weights, a key the model does not have, a missing tensor, or a shape
            that differs from the config's (naming the file).
    """
    import torch
    from safetensors import safe_open

    from newsmotion_engine.render.backends.scail_2.released import official_kwargs
    from newsmotion_engine.render.backends.scail_2.transformer import SCAIL2Transformer3DModel, official_to_ours

    config_file = folder / "config.json"
    try:
        with torch.device("meta"):
            model = SCAIL2Transformer3DModel(**official_kwargs(read_json(config_file)))
    except TypeError as exc:
        raise BadInputError(config_file, f"is not a SCAIL-2 config ({exc})") from None
    expected = {k: v.shape for k, v in model.state_dict().items()}
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise BadInputError(folder, "has no *.safetensors weight file")
    state: dict[str, Any] = {}
    for f in files:
        with safe_open(f, framework="pt", device="cpu") as fh:
            for key in fh.keys():
                ours = official_to_ours(key)
                if ours is None or ours not in expected:
                    raise BadInputError(f, f"holds {key!r}, which is not a SCAIL-2 DiT parameter (wrong checkpoint?)")
                tensor = fh.get_tensor(key)
                if tuple(tensor.shape) != tuple(expected[ours]):
                    raise BadInputError(f, f"{key}: shape {list(tensor.shape)}, the config's model has {list(expected[ours])}")
                state[ours] = tensor.to(dtype)
    missing = sorted(set(expected) - set(state))
    if missing:
        raise BadInputError(folder, f"{len(missing)} DiT tensor(s) missing from the safetensors files, e.g. {missing[0]}")
    model.load_state_dict(state, strict=True, assign=True)
    _wan.keep_fp32_modules(model)
    return model.to(device).eval().requires_grad_(False)


def build_transformer(opts: Scail2Options, device: Any, dtype: Any):
    from newsmotion_engine.render.backends.scail_2.transformer import SCAIL2Transformer3DModel

    if opts.model_path:
        return load_official_transformer(Path(opts.model_path) / "transformer", dtype, device)
    return _wan.build_transformer(opts, device, dtype, SCAIL2Transformer3DModel)  # the preset, seeded random weights


def load_render_components(opts: Scail2Options) -> RenderComponents:
    """Transformer + VAE + scheduler config on the configured device (no CLIP, no text encoder)."""
    return _wan.assemble_render_components(opts, RenderComponents, check_folder=check_model_folder, identity=model_identity,
                                           scheduler_config=_wan.scheduler_config, build=build_transformer)  # fmt: skip


def load_image_encoder(opts: Scail2Options, device: Any):
    """The CLIP vision model (cache building only)."""
    return _wan.build_image_encoder(opts, device)
