"""MuseTalk 1.5's released configuration (facts, in ``released/musetalk_v15.json``) and the stage's
options.

Presets: ``v15`` is the released architecture (UNet 2D at 256x256 faces, sd-vae-ft-mse,
whisper-tiny's encoder); ``tiny`` keeps every shape that crosses a module boundary (8 input
channels, 384-wide audio tokens, 5 whisper hidden states, 32x32 latents) with narrow layers, for
the CPU tests.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, fields
from functools import lru_cache
from importlib import resources
from typing import Any

from newsmotion_engine.errors import NewsmotionError

__all__ = ["PRESETS", "RANDOM_WEIGHTS_LABEL", "MuseTalkConfigError", "MuseTalkOptions", "released", "preset_config"]

RANDOM_WEIGHTS_LABEL = "random weights"
PRESETS = ("v15", "tiny")
DTYPES = ("float16", "bfloat16", "float32")


class MuseTalkConfigError(NewsmotionError, ValueError):
    """A MuseTalk option out of range, naming the option and what is allowed."""


@lru_cache(maxsize=1)
def released() -> dict[str, Any]:
    """The released configuration (UNet, VAE, whisper-tiny, inference constants)."""
    text = resources.files("newsmotion_engine.render.musetalk").joinpath("released/musetalk_v15.json").read_text()
    return json.loads(text)


def preset_config(preset: str) -> dict[str, Any]:
    """``{"unet", "vae", "whisper", "inference"}`` for ``preset``."""
    rel = released()
    if preset == "v15":
        return {k: dict(rel[k]) for k in ("unet", "vae", "whisper", "inference")}
    if preset == "tiny":
        unet = {**rel["unet"], "block_out_channels": [32, 32, 64, 64], "layers_per_block": 1, "attention_head_dim": 2,
                "norm_num_groups": 8}  # fmt: skip
        vae = {**rel["vae"], "block_out_channels": [16, 16, 32, 32], "layers_per_block": 1, "norm_num_groups": 8}
        # whisper keeps its 384 width, 4 layers and 1500 positions (the audio token shape the UNet
        # reads and the 30 s feature window); only its attention and MLP are narrowed.
        whisper = {**rel["whisper"], "encoder_attention_heads": 2, "encoder_ffn_dim": 64, "decoder_layers": 1,
                   "decoder_attention_heads": 2, "decoder_ffn_dim": 64, "vocab_size": 64, "max_target_positions": 16,
                   "pad_token_id": 0, "bos_token_id": 0, "eos_token_id": 0, "decoder_start_token_id": 0}  # fmt: skip
        return {"unet": unet, "vae": vae, "whisper": whisper, "inference": dict(rel["inference"])}
    raise MuseTalkConfigError(f"musetalk preset {preset!r}: use one of {', '.join(PRESETS)}")


@dataclass(frozen=True)
class MuseTalkOptions:
    """How the stage runs.

    Args:
        model_path: a local folder in the official layout (``musetalkV15/unet.pth`` +
            ``musetalkV15/musetalk.json``, ``sd-vae/``, ``whisper/``); ``None`` builds the
            preset's architecture with seeded random weights (labelled in every output).
        preset: ``v15`` (released) or ``tiny`` (tests).
        device: ``auto`` (CUDA when available), ``cpu`` or ``cuda``.
        dtype: the UNet / VAE / whisper dtype on a GPU (the official ``--use_float16``); the CPU
            runs float32.
        batch_size: faces per UNet call (the official 8).
        extra_margin: pixels added below the chin box (MuseTalk 1.5's ``--extra_margin``).
        seed: for the random weights and the VAE's latent samples.
    """

    model_path: str | None = None
    preset: str = "v15"
    device: str = "auto"
    dtype: str = "float16"
    batch_size: int = 8
    extra_margin: int = 10
    seed: int = 0

    def __post_init__(self) -> None:
        if self.preset not in PRESETS:
            raise MuseTalkConfigError(f"musetalk preset {self.preset!r}: use one of {', '.join(PRESETS)}")
        if self.dtype not in DTYPES:
            raise MuseTalkConfigError(f"musetalk dtype {self.dtype!r}: use one of {', '.join(DTYPES)}")
        if self.device not in ("auto", "cpu", "cuda"):
            raise MuseTalkConfigError(f"musetalk device {self.device!r}: use auto, cpu or cuda")
        if not isinstance(self.batch_size, int) or not 1 <= self.batch_size <= 64:
            raise MuseTalkConfigError(f"musetalk batch_size {self.batch_size!r}: use 1..64")
        if not isinstance(self.extra_margin, int) or not 0 <= self.extra_margin <= 64:
            raise MuseTalkConfigError(f"musetalk extra_margin {self.extra_margin!r}: use 0..64 pixels")

    @classmethod
    def from_options(cls, options: Mapping[str, object]) -> MuseTalkOptions:
        """Options given as data (``-o KEY=VALUE`` pairs, a resource's dict): an unknown key is a
        :class:`MuseTalkConfigError` naming it and the known ones."""
        known = [f.name for f in fields(cls)]
        unknown = sorted(set(options) - set(known))
        if unknown:
            raise MuseTalkConfigError(f"musetalk options: unknown {', '.join(map(repr, unknown))} (use {', '.join(known)})")
        return cls(**options)  # type: ignore[arg-type]
