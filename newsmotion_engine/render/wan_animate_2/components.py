"""Loading the Wan-Animate-2 components: from a diffusers-format folder, or a preset's
architecture with seeded random weights.

Render-time components (:func:`load_render_components`): transformer, VAE (its decoder; its
encoder only for ``continuation="pixel"``), scheduler config. The image encoder and the text
encoder are for cache building only (:func:`load_image_encoder`, :func:`load_text_encoder`).

The scheduler is ``FlowMatchEulerDiscreteScheduler`` (flow shift 5): the stock denoise step passes
``generator=`` to ``scheduler.step``, which the flow-matching Euler scheduler accepts.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from newsmotion_engine.cachedir import sha256_json
from newsmotion_engine.errors import BadInputError
from newsmotion_engine.render.wan_animate.components import (
    ByteTokenizer,
    _default_dtype,
    _seeded,
    build_vae,
    resolve_device,
    torch_dtype,
)
from newsmotion_engine.render.wan_animate.components import build_transformer as _build_transformer
from newsmotion_engine.render.wan_animate_2.config import RANDOM_WEIGHTS_LABEL, WanAnimate2Options

__all__ = [
    "RenderComponents",
    "check_model_folder",
    "load_image_encoder",
    "load_render_components",
    "load_text_encoder",
    "model_identity",
]

RANDOM_SEED = 0
PIPELINE_CLASSES = ("WanAnimate2ModularPipeline", "WanAnimate2DistilledModularPipeline")
TRANSFORMER_CLASS = "WanAnimate2Transformer3DModel"
_INDEX_FILES = ("modular_model_index.json", "model_index.json")
_REQUIRED = {
    "transformer": ("config.json",),
    "vae": ("config.json",),
    "scheduler": ("scheduler_config.json",),
    "image_encoder": ("config.json",),
    "text_encoder": ("config.json",),
    "tokenizer": ("tokenizer_config.json",),
}
_WEIGHTED = ("transformer", "vae", "image_encoder", "text_encoder")
_WEIGHT_SUFFIXES = (".safetensors", ".bin")


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise BadInputError(path, f"is not readable JSON ({exc})") from None
    if not isinstance(data, dict):
        raise BadInputError(path, "is not a JSON object")
    return data


def check_model_folder(path: Path) -> None:
    """Raise :class:`BadInputError` naming the first missing file, or a wrong architecture."""
    if not path.is_dir():
        raise BadInputError(path, "model folder does not exist (set model_path or NEWSMOTION_MODEL_DIR_ANIMATE2, or use a preset)")
    index = next((path / n for n in _INDEX_FILES if (path / n).is_file()), None)
    if index is None:
        raise BadInputError(path / "model_index.json", "missing from the Wan-Animate-2 model folder (no model_index.json or modular_model_index.json)")
    for sub, names in _REQUIRED.items():
        for name in names:
            if not (path / sub / name).is_file():
                raise BadInputError(path / sub / name, "missing from the Wan-Animate-2 model folder (incomplete download?)")
    for sub in _WEIGHTED:
        if not any(p.suffix in _WEIGHT_SUFFIXES for p in (path / sub).iterdir()):
            raise BadInputError(path / sub, "has no weight file (*.safetensors); the download is incomplete")
    cls = _read_json(index).get("_class_name")
    if cls not in PIPELINE_CLASSES:
        raise BadInputError(index, f"is a {cls!r} model, not {' / '.join(PIPELINE_CLASSES)} (wrong architecture for wan-animate-2)")
    tcls = _read_json(path / "transformer" / "config.json").get("_class_name")
    if tcls != TRANSFORMER_CLASS:
        raise BadInputError(path / "transformer" / "config.json",
                            f"describes {tcls!r}, not {TRANSFORMER_CLASS} (wrong architecture for wan-animate-2)")  # fmt: skip


def model_identity(opts: WanAnimate2Options, device: Any) -> dict[str, Any]:
    """What caches built with these weights are keyed on (JSON-able, with a ``digest``)."""
    if opts.model_path:
        root = Path(opts.model_path)
        configs, files = {}, {}
        for sub in (*_WEIGHTED, "scheduler"):
            for p in sorted((root / sub).iterdir()):
                if p.suffix == ".json":
                    configs[f"{sub}/{p.name}"] = _read_json(p)
                elif p.suffix in _WEIGHT_SUFFIXES:
                    files[f"{sub}/{p.name}"] = p.stat().st_size
        ident: dict[str, Any] = {"weights": "folder", "path": str(root.resolve()), "configs": sha256_json(configs), "files": files}
    else:
        ident = {"weights": RANDOM_WEIGHTS_LABEL, "model": "wan-animate-2", "preset": opts.preset, "seed": RANDOM_SEED,
                 "init_device": getattr(device, "type", str(device))}  # fmt: skip
    return {**ident, "digest": sha256_json(ident)[:16]}


@dataclass
class RenderComponents:
    """What a render uses; the object the acceleration registry applies configs to."""

    transformer: Any
    vae: Any
    scheduler_config: dict[str, Any]
    identity: dict[str, Any]
    device: Any
    dtype: Any
    vae_dtype: Any
    cfg_schedule: Any = None

    @property
    def weights_label(self) -> str:
        return RANDOM_WEIGHTS_LABEL if self.identity["weights"] == RANDOM_WEIGHTS_LABEL else f"folder {self.identity['path']}"

    def new_scheduler(self):
        """A fresh scheduler (its state must never leak between segments)."""
        from diffusers import FlowMatchEulerDiscreteScheduler

        return FlowMatchEulerDiscreteScheduler.from_config(self.scheduler_config)


def scheduler_config(opts: WanAnimate2Options) -> dict[str, Any]:
    if opts.model_path:
        return _read_json(Path(opts.model_path) / "scheduler" / "scheduler_config.json")
    return {"num_train_timesteps": 1000, "shift": opts.preset_spec.flow_shift}


def build_transformer(opts: WanAnimate2Options, device: Any, dtype: Any):
    from diffusers import WanAnimate2Transformer3DModel

    return _build_transformer(opts, device, dtype, WanAnimate2Transformer3DModel)


def load_render_components(opts: WanAnimate2Options) -> RenderComponents:
    """Transformer + VAE + scheduler config on the configured device (no CLIP, no text encoder)."""
    import torch

    from newsmotion_engine.render.wan_animate_2 import attention  # noqa: F401  registers its fp8-triton processor

    if opts.model_path:
        check_model_folder(Path(opts.model_path))
    device = resolve_device(opts.device)
    dtype = torch_dtype(opts.dtype)
    vae_dtype = torch.float32 if device.type == "cpu" else torch.bfloat16
    identity = model_identity(opts, device)
    transformer = build_transformer(opts, device, dtype)
    vae = build_vae(opts, device, vae_dtype)
    return RenderComponents(transformer, vae, scheduler_config(opts), identity, device, dtype, vae_dtype)


def load_image_encoder(opts: WanAnimate2Options, device: Any):
    """The CLIP vision model (cache building only); preprocessing is the stock ``clip_visual_encode``."""
    import torch
    from transformers import CLIPVisionConfig, CLIPVisionModel

    if opts.model_path:
        enc = CLIPVisionModel.from_pretrained(Path(opts.model_path) / "image_encoder", torch_dtype=torch.float32)
        return enc.to(device).eval()
    with _seeded(RANDOM_SEED + 2, device), device:
        enc = CLIPVisionModel(CLIPVisionConfig(**opts.preset_spec.image_encoder))
    return enc.eval().requires_grad_(False)


def load_text_encoder(opts: WanAnimate2Options, device: Any):
    """``(tokenizer, umt5_encoder)`` (cache building only)."""
    import torch
    from transformers import UMT5Config, UMT5EncoderModel

    enc_dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    if opts.model_path:
        from transformers import AutoTokenizer

        root = Path(opts.model_path)
        tok = AutoTokenizer.from_pretrained(root / "tokenizer")
        return tok, UMT5EncoderModel.from_pretrained(root / "text_encoder", torch_dtype=enc_dtype).to(device).eval()
    cfg = UMT5Config(**opts.preset_spec.text_encoder)
    with _seeded(RANDOM_SEED + 3, device), _default_dtype(enc_dtype), device:
        enc = UMT5EncoderModel(cfg)
    return ByteTokenizer(cfg.vocab_size), enc.eval().requires_grad_(False)
