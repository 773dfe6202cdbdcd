"""Loading the EchoMimicV3 components: from a model folder, or a preset's architecture with seeded
random weights.

The folder (``docs/backends/echomimic-v3.md``): ``transformer/`` holds the EchoMimicV3 weights as
released (``diffusion_pytorch_model.safetensors`` with the official key names, mapped by
:mod:`.keymap`; an optional original-layout ``config.json``, else the released sizes); ``vae/``,
``image_encoder/``, ``text_encoder/``, ``tokenizer/`` and ``scheduler/`` are the Wan 2.1 i2v
components in diffusers format (EchoMimicV3 runs on Wan2.1-Fun-1.3B-InP, whose VAE, CLIP ViT-H/14
and UMT5-XXL are Wan 2.1's). The sampler is always the release's (UniPC flow, shift 5), whatever
the folder's scheduler config says. ``wav2vec2/``, when present, is the speech encoder's folder.

Render-time components: transformer, VAE, scheduler config (the shared Wan assembly,
:func:`..wan.components.assemble_render_components`); the image and text encoders are for cache
building only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from newsmotion_engine.errors import BadInputError
from newsmotion_engine.render.backends.wan import components as _wan
from newsmotion_engine.render.backends.wan.components import load_text_encoder
from newsmotion_engine.render.backends.wan.diffusers_config import read_json
from newsmotion_engine.render.backends.echomimic_v3.config import NAME, EchoMimicV3Options
from newsmotion_engine.render.backends.echomimic_v3.keymap import official_to_ours, transformer_kwargs

__all__ = ["RenderComponents", "check_model_folder", "load_image_encoder", "load_render_components",
           "load_text_encoder", "load_transformer_weights"]  # fmt: skip

TRANSFORMER_WEIGHTS = "diffusion_pytorch_model.safetensors"
_REQUIRED = {
    "vae": ("config.json",),
    "image_encoder": ("config.json",),
    "text_encoder": ("config.json",),
    "tokenizer": ("tokenizer_config.json",),
    "scheduler": ("scheduler_config.json",),
}


def check_model_folder(path: Path) -> None:
    """Raise :class:`BadInputError` naming the first missing file."""
    if not path.is_dir():
        raise BadInputError(path, "model folder does not exist (set model_path or NEWSMOTION_MODEL_DIR_ECHOMIMIC, or use a preset)")
    weights = path / "transformer" / TRANSFORMER_WEIGHTS
    if not weights.is_file():
        raise BadInputError(weights, "missing: put the EchoMimicV3 transformer (the release's flash/transformer/ file) there")
    for sub, names in _REQUIRED.items():
        for name in names:
            if not (path / sub / name).is_file():
                raise BadInputError(path / sub / name, "missing: the Wan 2.1 i2v components go in diffusers format beside the transformer")
    for sub in ("vae", "image_encoder", "text_encoder"):
        if not any(p.suffix in (".safetensors", ".bin") for p in (path / sub).iterdir()):
            raise BadInputError(path / sub, "has no weight file (*.safetensors); the download is incomplete")


def vae_dtype(opts: EchoMimicV3Options) -> str:
    """The VAE runs in the render dtype, as the official inference does (``vae.to(weight_dtype)`` in
    ``infer_flash_pro.py``; bfloat16 by default), not in Wan's float32."""
    return opts.dtype


def model_identity(opts: EchoMimicV3Options, device: Any) -> dict[str, Any]:
    return _wan.model_identity(opts, device, model=NAME, vae_dtype=vae_dtype(opts))  # type: ignore[arg-type]


class RenderComponents(_wan.RenderComponents):
    """What a render uses; the object the acceleration registry applies configs to."""

    default_scheduler = EchoMimicV3Options.default_scheduler


def scheduler_config(opts: EchoMimicV3Options) -> dict[str, Any]:
    config = opts.scheduler_config()
    _wan.scheduler_class(config, opts.default_scheduler, "the release's scheduler")
    return config


def folder_transformer_kwargs(opts: EchoMimicV3Options) -> dict[str, Any]:
    """The transformer's constructor kwargs: the folder's original-layout ``transformer/config.json``
    over the released sizes, or the released sizes; a preset's without a folder."""
    base = opts.presets["flash-pro"].transformer
    if not opts.model_path:
        return dict(opts.preset_spec.transformer)
    config = Path(opts.model_path) / "transformer" / "config.json"
    if not config.is_file():
        return dict(base)
    try:
        return transformer_kwargs(read_json(config), base)
    except (TypeError, ValueError) as exc:
        raise BadInputError(config, f"is not an EchoMimicV3 (Wan i2v) transformer config: {exc}") from None


def load_transformer_weights(model: Any, path: Path) -> None:
    """Load the official-layout safetensors at ``path`` into ``model`` through the key map.
    Raises :class:`BadInputError` naming the file and the first unknown, missing or mis-shaped key."""
    from safetensors.torch import load_file

    try:
        official = load_file(str(path))
    except Exception as exc:  # safetensors raises several types for a damaged file
        raise BadInputError(path, f"is not a readable safetensors file ({exc})") from None
    ours = model.state_dict()
    mapped = {}
    for name, tensor in official.items():
        key = official_to_ours(name)
        if key is None or key not in ours:
            raise BadInputError(path, f"has tensor {name!r}, which an EchoMimicV3 transformer of this config does not have")
        if tuple(tensor.shape) != tuple(ours[key].shape):
            raise BadInputError(path, f"tensor {name!r} has shape {list(tensor.shape)}; this config expects {list(ours[key].shape)}")
        mapped[key] = tensor
    missing = sorted(set(ours) - set(mapped))
    if missing:
        raise BadInputError(path, f"lacks {len(missing)} tensor(s) of the transformer, e.g. {missing[0]!r} (not an EchoMimicV3 checkpoint?)")
    model.load_state_dict(mapped, strict=True)


def build_transformer(opts: EchoMimicV3Options, device: Any, dtype: Any):
    from newsmotion_engine.render.backends.echomimic_v3.model import EchoMimicV3Transformer3DModel

    kwargs = folder_transformer_kwargs(opts)
    with _wan._seeded(_wan.RANDOM_SEED, device), _wan._default_dtype(dtype), device:
        model = EchoMimicV3Transformer3DModel(**kwargs)
    if opts.model_path:
        load_transformer_weights(model, Path(opts.model_path) / "transformer" / TRANSFORMER_WEIGHTS)
    _wan.keep_fp32_modules(model)
    return model.eval().requires_grad_(False)


def load_render_components(opts: EchoMimicV3Options) -> RenderComponents:
    """Transformer + VAE + scheduler config on the configured device (no CLIP, no text encoder)."""
    return _wan.assemble_render_components(opts, RenderComponents, check_folder=check_model_folder, identity=model_identity,
                                           scheduler_config=scheduler_config, build=build_transformer, vae_dtype=vae_dtype(opts))  # fmt: skip


def load_image_encoder(opts: EchoMimicV3Options, device: Any):
    """The CLIP vision model (cache building only)."""
    return _wan.build_image_encoder(opts, device)
