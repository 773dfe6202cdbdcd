"""MuseTalk's three models on diffusers / transformers components, from a local folder in the
official layout or with seeded random weights.

The official layout (what ``download_weights.sh`` fetches)::

    <model_path>/musetalkV15/musetalk.json   the UNet config (UNet2DConditionModel keyword arguments)
    <model_path>/musetalkV15/unet.pth        the UNet state dict, in diffusers' own key names
    <model_path>/sd-vae/                     stabilityai/sd-vae-ft-mse (a diffusers AutoencoderKL folder)
    <model_path>/whisper/                    openai/whisper-tiny (a transformers folder)

The UNet's keys are diffusers' (the official code builds ``UNet2DConditionModel(**config)`` and
calls ``load_state_dict``), so no key map is needed; a state dict that does not fit is refused
with the missing and unexpected keys named.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from newsmotion_engine.errors import BadInputError
from newsmotion_engine.render.musetalk.config import RANDOM_WEIGHTS_LABEL, MuseTalkConfigError, MuseTalkOptions, preset_config

__all__ = ["MuseTalkComponents", "MuseTalkModelError", "build_unet", "check_model_folder", "load_components", "positional_encoding"]

UNET_CONFIG = "musetalkV15/musetalk.json"
UNET_WEIGHTS = "musetalkV15/unet.pth"
VAE_DIR = "sd-vae"
WHISPER_DIR = "whisper"


class MuseTalkModelError(BadInputError):
    """A MuseTalk model folder that is incomplete or does not fit the architecture."""


@dataclass
class MuseTalkComponents:
    """The loaded models: ``unet`` (UNet2DConditionModel), ``vae`` (AutoencoderKL), ``whisper``
    (the whisper encoder), ``feature_extractor`` (whisper's log-mel), on ``device`` in ``dtype``."""

    unet: Any
    vae: Any
    whisper: Any
    feature_extractor: Any
    device: Any
    dtype: Any
    weights_label: str
    inference: dict[str, Any]

    @property
    def scaling_factor(self) -> float:
        return float(self.vae.config.scaling_factor)


def check_model_folder(root: Path) -> None:
    """Raise :class:`MuseTalkModelError` naming the first missing file of the official layout."""
    for rel in (UNET_CONFIG, UNET_WEIGHTS, f"{VAE_DIR}/config.json", f"{WHISPER_DIR}/config.json"):
        if not (root / rel).is_file():
            raise MuseTalkModelError(root, f"no {rel} (the MuseTalk 1.5 layout: musetalkV15/, sd-vae/, whisper/)")


def build_unet(config: dict[str, Any]) -> Any:
    from diffusers import UNet2DConditionModel

    return UNet2DConditionModel(**{k: v for k, v in config.items() if not k.startswith("_")})


def load_unet_weights(unet: Any, path: Path) -> None:
    """The official ``unet.pth`` into ``unet``; every key must fit."""
    import torch

    state = torch.load(path, map_location="cpu", weights_only=True)
    if isinstance(state, dict) and "state_dict" in state and isinstance(state["state_dict"], dict):
        state = state["state_dict"]
    missing, unexpected = unet.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise MuseTalkModelError(path, f"does not fit the MuseTalk UNet ({len(missing)} missing, e.g. {missing[:3]}; "
                                 f"{len(unexpected)} unexpected, e.g. {unexpected[:3]})")  # fmt: skip


def _device(opts: MuseTalkOptions) -> Any:
    import torch

    if opts.device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if opts.device == "cuda" and not torch.cuda.is_available():
        raise MuseTalkConfigError("musetalk device 'cuda': no CUDA GPU here; use device=cpu or auto")
    return torch.device(opts.device)


def load_components(opts: MuseTalkOptions) -> MuseTalkComponents:
    """The three models for ``opts`` (eval mode, no grad), on the chosen device and dtype."""
    import torch
    from diffusers import AutoencoderKL
    from transformers import WhisperConfig, WhisperFeatureExtractor, WhisperModel
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    device = _device(opts)
    dtype = getattr(torch, opts.dtype) if device.type == "cuda" else torch.float32
    cfg = preset_config(opts.preset)
    if opts.model_path:
        root = Path(opts.model_path)
        check_model_folder(root)
        unet = build_unet(json.loads((root / UNET_CONFIG).read_text()))
        load_unet_weights(unet, root / UNET_WEIGHTS)
        vae = AutoencoderKL.from_pretrained(root / VAE_DIR)
        whisper = WhisperModel.from_pretrained(root / WHISPER_DIR).encoder
        extractor = WhisperFeatureExtractor.from_pretrained(root / WHISPER_DIR)
        label = f"weights from {root.name}"
    else:
        gen_state = torch.random.get_rng_state()
        torch.manual_seed(opts.seed)
        try:
            unet = build_unet(cfg["unet"])
            vae = AutoencoderKL(**cfg["vae"])
            whisper = WhisperEncoder(WhisperConfig(**cfg["whisper"]))
        finally:
            torch.random.set_rng_state(gen_state)
        extractor = WhisperFeatureExtractor(feature_size=cfg["whisper"]["num_mel_bins"])
        label = RANDOM_WEIGHTS_LABEL
    # .to(dtype) on diffusers models logs a note about modules to keep in float32 (none here)
    with _diffusers_quiet():
        models = [m.to(device=device, dtype=dtype).eval().requires_grad_(False) for m in (unet, vae, whisper)]
    return MuseTalkComponents(*models, feature_extractor=extractor, device=device, dtype=dtype, weights_label=label,
                              inference=cfg["inference"])  # fmt: skip


@contextlib.contextmanager
def _diffusers_quiet():
    from diffusers.utils import logging as diffusers_logging

    level = diffusers_logging.get_verbosity()
    diffusers_logging.set_verbosity_error()
    try:
        yield
    finally:
        diffusers_logging.set_verbosity(level)


def positional_encoding(tokens: int, dim: int) -> Any:
    """The sinusoidal table MuseTalk adds to the audio tokens before the UNet's cross-attention
    (``[1, tokens, dim]``: sines on even channels, cosines on odd, wavelengths up to 10000)."""
    import math

    import torch

    position = torch.arange(tokens, dtype=torch.float32)[:, None]
    rate = torch.exp(torch.arange(0, dim, 2, dtype=torch.float32) * (-math.log(10000.0) / dim))
    table = torch.zeros(tokens, dim)
    table[:, 0::2] = torch.sin(position * rate)
    table[:, 1::2] = torch.cos(position * rate)
    return table[None]
