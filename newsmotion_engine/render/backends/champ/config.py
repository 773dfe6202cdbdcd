"""Configuration of the ``champ`` backend: the released model as data (``released/champ.json``,
each number from the official repository, the file names its sources), the presets, and
:class:`ChampOptions`.

Presets build the architecture with random weights when no model folder is given:

- ``tiny``: two UNet levels of 32 / 64 channels, two heads, a 4-level VAE of 8 channels, a 2-layer
  CLIP: the whole pipeline on the CPU in seconds (tests).
- ``champ``: the released architecture (SD1.5 UNet + AnimateDiff-v2 motion modules as the
  denoising UNet, an SD1.5 reference UNet, four guidance encoders, sd-vae-ft-mse, CLIP ViT-L/14
  with projection), for timing and memory.

With ``model_path`` (the official ``pretrained_models/`` folder, see :mod:`.components`) the
preset is ignored and the architecture comes from the folder's configs.

Defaults are the official inference's (``configs/inference/inference.yaml``,
``pipelines/pipeline_aggregation.py``): 20 DDIM steps (v-prediction, zero-SNR, trailing), CFG
3.5, 24-frame context windows overlapping by 4 (the loop closed: windows wrap around the end).
The official size is 512 x 512; ours keeps the width (``model_width``, default 512) and takes the
render's aspect ratio (512 x 912 for 720 x 1280), then scales the frames onto the render size.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any, ClassVar

from newsmotion_engine.accel.registry import AccelConfig
from newsmotion_engine.render.base import BackendOptionError
from newsmotion_engine.render.backends.wan.diffusers_config import DTYPES, FLAT_ACCELERATION_KEYS, DiffusersOptions

__all__ = ["COMPILE_SCOPES", "NAME", "PRESETS", "ChampConfigError", "ChampOptions", "Preset", "released"]

NAME = "champ"
MODEL_DIR_ENV = "NEWSMOTION_MODEL_DIR_CHAMP"
SMPL_ENV = "NEWSMOTION_SMPL_MODEL"
# The accelerations that apply to a UNet here (the others target Wan's transformer blocks).
ACCELERATION_KEYS = ("compile", "compile_vae", "channels_last", "fp8", "attention", "one_key_cross", "short_attention")
# short_attention (accel/short_attention.py, the motion modules' 24-frame attention) has no flat
# option yet: a config in ``accelerations`` reaches it (the bench) until a GPU run says it pays.
REFERENCE_PASSES = ("conditional", "official")
# compile_scope -> the denoising UNet's sub-modules ``compile`` compiles (Compile.regions; () = the
# model's own _repeated_blocks, diffusers' BasicTransformerBlock). "unet_blocks" (the default) also
# takes the resnets and the wrappers of the spatial transformers and motion modules, whose
# GroupNorms, SiLUs, residual adds and [B, C, F, H, W] <-> [(B H W), F, C] layout changes otherwise
# run eagerly between compiled blocks: the denoise 41.1 s instead of 49.9 s (champ_h100.json).
DEFAULT_COMPILE_SCOPE = "unet_blocks"
COMPILE_SCOPES: dict[str, tuple[str, ...]] = {
    "transformer_blocks": (),
    "unet_blocks": ("ResnetBlock2D", "Transformer2DModel", "AnimateDiffTransformer3D"),
}


class ChampConfigError(BackendOptionError):
    """A champ option that is unknown or out of range."""


@lru_cache(maxsize=1)
def released() -> dict[str, Any]:
    """``released/champ.json``: the official model's configs and sampling defaults."""
    return json.loads((Path(__file__).parent / "released" / "champ.json").read_text())


@dataclass(frozen=True)
class Preset:
    """One architecture, as the component configs the builders take."""

    name: str
    unet: dict[str, Any]
    motion_module: dict[str, Any]
    guidance_encoder: dict[str, Any]
    vae: dict[str, Any]
    image_encoder: dict[str, Any]


def _tiny() -> Preset:
    return Preset(
        name="tiny",
        unet=dict(block_out_channels=[32, 64], layers_per_block=1, cross_attention_dim=16, attention_head_dim=2,
                  norm_num_groups=32, down_block_types=["CrossAttnDownBlock2D", "DownBlock2D"],
                  up_block_types=["UpBlock2D", "CrossAttnUpBlock2D"], sample_size=16, in_channels=4, out_channels=4),
        motion_module=dict(released()["motion_module"], num_attention_heads=2),
        guidance_encoder=dict(released()["guidance_encoder"], guidance_embedding_channels=32,
                              block_out_channels=[8, 16, 16, 32], attention_num_heads=2, norm_num_groups=8),
        vae=dict(block_out_channels=[8, 8, 8, 8], layers_per_block=1, norm_num_groups=4, latent_channels=4,
                 down_block_types=["DownEncoderBlock2D"] * 4, up_block_types=["UpDecoderBlock2D"] * 4, scaling_factor=0.18215),
        image_encoder=dict(hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
                           image_size=224, patch_size=14, projection_dim=16),
    )  # fmt: skip


def _champ() -> Preset:
    r = released()
    strip = lambda d: {k: v for k, v in d.items() if not k.startswith("_") and k != "comment"}  # noqa: E731
    return Preset("champ", strip(r["unet"]), strip(r["motion_module"]), strip(r["guidance_encoder"]), strip(r["vae"]),
                  strip(r["image_encoder"]))  # fmt: skip


PRESETS: dict[str, Any] = {"tiny": _tiny, "champ": _champ}


@dataclass(frozen=True)
class ChampOptions(DiffusersOptions):
    """Every ``champ`` option (``-o KEY=VALUE``; the renderer resource's ``options``).

    Model:
        model_path: the official ``pretrained_models/`` folder; default ``$NEWSMOTION_MODEL_DIR_CHAMP``;
            none -> ``preset`` with random weights.
        preset: ``"tiny"`` or ``"champ"`` (ignored with a model folder).
        device, dtype, chroma: as every diffusers backend's.
        smpl_model: the user's SMPL model file (``.pkl`` / ``.npz``; default ``$NEWSMOTION_SMPL_MODEL``).
            Required: Champ's depth / normal / semantic guidance are renders of that body.
    Sampling (the official defaults):
        steps (20), guidance_scale (3.5), context_frames (24), context_overlap (4),
        model_width (512, a multiple of 8; the height follows the render's aspect ratio).
        reference_pass: ``"conditional"`` (default: the reference UNet runs once, for the
        conditional half, and the unconditional rows attend without the bank) or ``"official"``
        (the official pipeline's order of work: the reference UNet for both CFG halves, every row
        attending over the bank, the unconditional rows then recomputed without it). Same frames;
        ``"official"`` is the benchmark's stock side.
    Accelerations: ``compile`` (``"blocks"``: each transformer block of the denoising UNet
        compiled), ``channels_last`` (NHWC convolution weights) and ``fp8`` (the denoising UNet's
        block linears in FP8) — the accelerations that apply to a UNet here.
        compile_scope: what ``compile`` compiles: ``"unet_blocks"`` (default, as measured in the
        headline: the transformer blocks, the resnets and the spatial-transformer and motion-module
        wrappers, :data:`COMPILE_SCOPES`) or ``"transformer_blocks"`` (those blocks alone); only
        with ``compile`` (``"transformer_blocks"`` without it is refused).
    Tests: cache_root (where the sub-caches go; default inside the parent caches).
    """

    backend: ClassVar[str] = NAME
    config_error: ClassVar[type[BackendOptionError]] = ChampConfigError
    model_dir_env: ClassVar[str] = MODEL_DIR_ENV
    presets: ClassVar[Mapping[str, Any]] = PRESETS
    default_scheduler: ClassVar[str] = "DDIMScheduler"
    smpl_model: str | None = None
    steps: int = 20
    guidance_scale: float = 3.5
    context_frames: int = 24
    context_overlap: int = 4
    model_width: int = 512
    reference_pass: str = "conditional"
    compile_scope: str = DEFAULT_COMPILE_SCOPE
    accelerations: tuple[AccelConfig, ...] = ()
    cache_root: str | None = None

    @classmethod
    def known_options(cls) -> tuple[str, ...]:
        fields = {f for f in super().known_options() if f not in _WAN_ONLY}
        return tuple(sorted(fields))

    @classmethod
    def from_mapping(cls, options: Mapping[str, Any] | None = None, **kw: Any):
        merged = {**(dict(options) if options else {}), **kw}
        if merged.get("smpl_model") is None and os.environ.get(SMPL_ENV):
            merged["smpl_model"] = os.environ[SMPL_ENV]
        return super().from_mapping(merged)

    def __post_init__(self) -> None:
        from newsmotion_engine.render.backends.champ.smpl import SmplModelMissingError, smpl_missing_message

        self._check_choice("preset", PRESETS)
        self._check_choice("dtype", DTYPES)
        self._check_choice("reference_pass", REFERENCE_PASSES)
        self._check_choice("compile_scope", COMPILE_SCOPES)
        self._check_steps()
        self._check_guidance_scale()
        self._check_strings(optional=("model_path", "cache_root", "smpl_model"), required=())
        for name, low, high in (("context_frames", 2, 32), ("context_overlap", 0, 31), ("model_width", 64, 2048)):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or not low <= v <= high:
                raise self._bad(name, f"use an integer {low}..{high}")
        if self.context_overlap >= self.context_frames:
            raise self._bad("context_overlap", f"use fewer frames than context_frames ({self.context_frames})")
        if self.model_width % 8:
            raise self._bad("model_width", "use a multiple of 8 (the VAE's factor)")
        if self.lora:
            raise self._bad("lora", "champ takes no LoRAs")
        object.__setattr__(self, "accelerations", self._ordered_accelerations())
        if any(c.technique not in ACCELERATION_KEYS for c in self.accelerations):
            raise self._bad("accelerations", f"champ applies {', '.join(ACCELERATION_KEYS)} only (the others target Wan's transformer)")
        self._scope_compile()
        self._check_only_our_attention("the reference attention, champ/attention.py")
        object.__setattr__(self, "guidance_scale", float(self.guidance_scale))
        if self.smpl_model is None:
            raise SmplModelMissingError(smpl_missing_message())

    def _scope_compile(self) -> None:
        """``compile_scope`` into the Compile config's regions (a Compile given with its own regions keeps them)."""
        if not any(c.technique == "compile" for c in self.accelerations):
            # The default scope is moot without compile; another one asked for is a mistake worth saying.
            if self.compile_scope != DEFAULT_COMPILE_SCOPE:
                raise self._bad("compile_scope", "it says what compile compiles: add -o compile=blocks")
            return
        regions = COMPILE_SCOPES[self.compile_scope]
        if not regions:
            return
        object.__setattr__(self, "accelerations", tuple(
            replace(c, regions=regions) if c.technique == "compile" and not c.regions else c  # type: ignore[attr-defined]
            for c in self.accelerations))  # fmt: skip

    # ------------------------------------------------------------------ what the base expects
    @property
    def preset_spec(self) -> Preset:
        return PRESETS[self.preset]()

    @property
    def default_segment_frames(self) -> int:
        return self.context_frames

    def scheduler_config(self) -> dict[str, Any]:
        """DDIM as the official inference builds it (the folder has no scheduler config of its own)."""
        return dict(released()["scheduler"])

    def model_defaults(self) -> dict[str, Any]:
        s = released()["sampling"]
        return {"source": self.defaults_source, "scheduler": "DDIMScheduler (v-prediction, zero-SNR, trailing)",
                "steps": s["num_inference_steps"], "guidance_scale": s["guidance_scale"],
                "context_frames": s["context_frames"], "context_overlap": s["context_overlap"],
                "official_size": [s["width"], s["height"]]}  # fmt: skip

    def model_size(self, width: int, height: int) -> tuple[int, int]:
        """The model's frame for a render of ``width`` x ``height``: ``model_width`` wide, the
        render's aspect ratio, both multiples of 8."""
        h = max(8, round(self.model_width * height / width / 8) * 8)
        return self.model_width, h


_WAN_ONLY = tuple(k for k in FLAT_ACCELERATION_KEYS if k not in ACCELERATION_KEYS)
