"""Configuration of the ``mimicmotion`` backend as data: architecture presets, the released
model's inference defaults and the backend's options (:class:`MimicMotionOptions`).

MimicMotion (Zhang et al., "MimicMotion: High-Quality Human Motion Video Generation with
Confidence-aware Pose Guidance", https://arxiv.org/abs/2406.19680; code: Tencent/MimicMotion) is
Stable Video Diffusion img2vid-xt 1.1 with its UNet fine-tuned and a small PoseNet whose output is
added to the UNet's first feature map. The released recipe (``released/mimicmotion-1.1.json``, from
the official ``configs/test.yaml`` and ``inference.py``): 72-frame windows overlapping by 6 frames
fused progressively, 25 Euler steps, CFG 2.0, no noise augmentation, conditioning fps 7 (the
pipeline passes 6), motion bucket 127, the short side at 576 and the long side
``int(576 / (9/16) // 64) * 64`` = 1024, the VAE decoding 8 frames at a time.

Presets build the architecture with seeded random weights when no model folder is given:

- ``tiny``: a two-level UNet 32/64 wide, a 32-wide VAE, a two-layer CLIP, 80 x 128: CPU tests in seconds.
- ``svd-xt-1.1``: the released architecture (``released/svd-xt-1.1/``: UNet 1.5B parameters,
  temporal-decoder VAE, CLIP ViT-H/14 with projection) for timing and memory measurements.

Everything produced with random weights says so. With a ``model_path`` (an SVD-xt-1.1 diffusers
folder) and the MimicMotion checkpoint (``checkpoint``, default ``{model_path}/MimicMotion_1-1.pth``)
the preset is ignored and unset options take the released defaults.

Accelerations through the registry: ``compile`` (regional: the UNet's spatio-temporal transformer
and resnet blocks), ``channels_last`` (NHWC convolution weights), ``conv3d_as_2d`` (the time-only
3-D convolutions as 2-D ones, :mod:`newsmotion_engine.accel.conv3d`) and ``fp8`` (the linears of the
UNet's down / mid / up blocks in FP8, :mod:`newsmotion_engine.accel.fp8`); the other Wan-oriented
keys are refused. Two exact
savings are always on (``denoise.py``): each window's PoseNet features are computed once per render
instead of once per step, and ``batch_cfg`` (default on) runs the unconditional and the conditional
pass of a window as one batch of two instead of two calls.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, ClassVar

from newsmotion_engine.accel.registry import AccelConfig
from newsmotion_engine.render.base import BackendOptionError
from newsmotion_engine.render.backends.wan.diffusers_config import DTYPES, FLAT_ACCELERATION_KEYS, DiffusersOptions, parse_accelerations

__all__ = ["MODEL_DIR_ENV", "NAME", "PRESETS", "Preset", "MimicMotionConfigError", "MimicMotionOptions",
           "native_size", "released", "released_component"]  # fmt: skip

NAME = "mimicmotion"
MODEL_DIR_ENV = "NEWSMOTION_MODEL_DIR_MIMICMOTION"
RELEASED_DIR = Path(__file__).parent / "released"
SVD_RELEASE = "svd-xt-1.1"
# The flat acceleration keys that apply to the SVD UNet (the others target Wan's transformer).
ACCELERATION_KEYS = ("compile", "compile_vae", "channels_last", "conv3d_as_2d", "fp8", "attention", "one_key_cross")
_WAN_ONLY_KEYS = frozenset(FLAT_ACCELERATION_KEYS) - set(ACCELERATION_KEYS)
ASPECT_RATIO = 9 / 16  # the official constants.py: width / height of the portrait target


class MimicMotionConfigError(BackendOptionError):
    """A mimicmotion option that is unknown or out of range."""


@cache
def released() -> dict[str, Any]:
    """The official inference defaults and checkpoint facts (``released/mimicmotion-1.1.json``)."""
    return json.loads((RELEASED_DIR / "mimicmotion-1.1.json").read_text())


@cache
def released_component(relative: str) -> dict[str, Any]:
    """One released SVD-xt-1.1 config file (e.g. ``"unet/config.json"``), keys starting with
    ``_`` dropped (they are file metadata, not constructor arguments)."""
    data = json.loads((RELEASED_DIR / SVD_RELEASE / relative).read_text())
    return {k: v for k, v in data.items() if not k.startswith("_")}


def native_size(resolution: int, width: int, height: int) -> tuple[int, int]:
    """The frame size MimicMotion renders for an output of ``width`` x ``height``: the official
    ``preprocess`` target (portrait: short side ``resolution``, long side
    ``int(resolution / (9/16) // 64) * 64``; landscape the other way round). 576 -> 576 x 1024."""
    long_side = int(resolution / ASPECT_RATIO // 64) * 64
    return (resolution, long_side) if height > width else (long_side, resolution)


@dataclass(frozen=True)
class Preset:
    """One architecture: constructor kwargs per component, the scheduler config, and the window
    geometry its renders use."""

    name: str
    unet: dict[str, Any]  # UNetSpatioTemporalConditionModel kwargs
    vae: dict[str, Any]  # AutoencoderKLTemporalDecoder kwargs
    image_encoder: dict[str, Any]  # transformers.CLIPVisionConfig kwargs (with projection_dim)
    scheduler: dict[str, Any]
    resolution: int  # the native short side
    segment_frames: int  # window length (reference frame included)
    overlap: int


def _released_preset() -> Preset:
    inf = released()["inference"]
    return Preset(
        name=SVD_RELEASE,
        unet=released_component("unet/config.json"),
        vae=released_component("vae/config.json"),
        image_encoder={k: v for k, v in released_component("image_encoder/config.json").items()
                       if k not in ("architectures", "model_type")},  # fmt: skip
        scheduler=released_component("scheduler/scheduler_config.json"),
        resolution=inf["resolution"], segment_frames=inf["num_frames"], overlap=inf["frames_overlap"],
    )  # fmt: skip


PRESETS: dict[str, Preset] = {
    "tiny": Preset(
        name="tiny",
        unet=dict(
            in_channels=8, out_channels=4, block_out_channels=(32, 64), layers_per_block=1,
            down_block_types=("CrossAttnDownBlockSpatioTemporal", "DownBlockSpatioTemporal"),
            up_block_types=("UpBlockSpatioTemporal", "CrossAttnUpBlockSpatioTemporal"),
            num_attention_heads=(2, 4), cross_attention_dim=32, addition_time_embed_dim=8,
            projection_class_embeddings_input_dim=24, num_frames=8,
        ),  # fmt: skip
        # Four levels as the released VAE (the PoseNet downsamples by 8 too), 32 wide.
        vae=dict(in_channels=3, out_channels=3, down_block_types=("DownEncoderBlock2D",) * 4,
                 block_out_channels=(32, 32, 32, 32), layers_per_block=1, latent_channels=4),  # fmt: skip
        image_encoder=dict(hidden_size=32, intermediate_size=37, num_hidden_layers=2, num_attention_heads=4,
                           image_size=224, patch_size=14, projection_dim=32),  # fmt: skip
        scheduler=released_component("scheduler/scheduler_config.json"),
        resolution=80,  # 80 x 128 (the official long-side rule); latents 10 x 16
        segment_frames=8,
        overlap=2,
    ),
    SVD_RELEASE: _released_preset(),
}


@dataclass(frozen=True)
class MimicMotionOptions(DiffusersOptions):
    """Every ``mimicmotion`` option (the renderer resource's ``options`` map onto these through
    :meth:`from_mapping`).

    Model:
        model_path: an SVD-xt-1.1 diffusers folder (``unet/``, ``vae/``, ``image_encoder/``,
            ``scheduler/``, ``feature_extractor/``); default ``$NEWSMOTION_MODEL_DIR_MIMICMOTION``;
            none -> ``preset`` with random weights.
        checkpoint: the MimicMotion checkpoint (``MimicMotion_1-1.pth`` as released, or a
            ``.safetensors`` with the same keys: ``unet.*`` and ``pose_net.*``); default
            ``{model_path}/MimicMotion_1-1.pth``.
        preset: ``"tiny"`` or ``"svd-xt-1.1"`` (architecture without a model folder).
        device, dtype: as every diffusers backend (the UNet's and PoseNet's compute dtype; the
            official inference runs float16).
    Sampling (defaults: the released recipe):
        steps (25), guidance_scale (2.0; the pipeline's min and max guidance both),
        segment_frames: window length, the reference frame included (72; the preset's without a
        folder), overlap: frames two windows share (6), resolution: the native short side (576;
        multiple of 64 for the released VAE and UNet), noise_aug_strength (0.0),
        motion_bucket_id (127), conditioning_fps (7; the pipeline conditions on fps - 1),
        decode_chunk (8 frames per temporal-decoder call), batch_cfg (True: both CFG passes of a
        window in one UNet call; False: two calls, as the official pipeline).
    Accelerations: ``compile``, ``channels_last``, ``conv3d_as_2d``, ``fp8`` (module docstring).
    Tests: cache_root (where backend sub-caches go).
    """

    backend: ClassVar[str] = NAME
    config_error: ClassVar[type[BackendOptionError]] = MimicMotionConfigError
    model_dir_env: ClassVar[str] = MODEL_DIR_ENV
    presets: ClassVar[Mapping[str, Preset]] = PRESETS
    released_segment_frames: ClassVar[int] = 72
    default_scheduler: ClassVar[str] = "EulerDiscreteScheduler"
    checkpoint: str | None = None
    steps: int = 25
    guidance_scale: float = 2.0
    segment_frames: int | None = None
    overlap: int | None = None
    resolution: int | None = None
    noise_aug_strength: float = 0.0
    motion_bucket_id: int = 127
    conditioning_fps: int = 7
    decode_chunk: int = 8
    batch_cfg: bool = True
    accelerations: tuple[AccelConfig, ...] = ()
    cache_root: str | None = None

    @classmethod
    def known_options(cls) -> tuple[str, ...]:
        return tuple(k for k in super().known_options() if k not in _WAN_ONLY_KEYS)

    @classmethod
    def parse_flat_accelerations(cls, flat: Mapping[str, Any]) -> tuple[AccelConfig, ...]:
        return parse_accelerations(flat, backend=NAME, error=MimicMotionConfigError)

    def __post_init__(self) -> None:
        self._check_choice("preset", PRESETS)
        self._check_choice("dtype", DTYPES)
        self._check_steps()
        self._check_guidance_scale()
        self._check_strings(optional=("model_path", "checkpoint", "cache_root"), required=())
        for name, lo, hi in (("motion_bucket_id", 0, 1023), ("conditioning_fps", 2, 120), ("decode_chunk", 1, 1024)):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi:
                raise self._bad(name, f"use an integer {lo}..{hi}")
        n = self.noise_aug_strength
        if not isinstance(n, (int, float)) or isinstance(n, bool) or not 0.0 <= float(n) <= 1.0:
            raise self._bad("noise_aug_strength", "use 0.0 .. 1.0")
        if not isinstance(self.batch_cfg, bool):
            raise self._bad("batch_cfg", "use true or false")
        tile = self.segment_length
        if not isinstance(tile, int) or isinstance(tile, bool) or tile < 2:
            raise self._bad("segment_frames", "use an integer >= 2 (the reference frame and at least one frame; released: 72)")
        ov = self.window_overlap
        if not isinstance(ov, int) or isinstance(ov, bool) or not 0 <= ov <= tile - 2:
            raise self._bad("overlap", f"use an integer 0..{tile - 2} (segment_frames - 2; released: 6)")
        res = self.native_resolution
        if not isinstance(res, int) or isinstance(res, bool) or not 64 <= res <= 2048:
            raise self._bad("resolution", "use an integer 64..2048 (released: 576)")
        self._check_lora()
        if self.lora:
            raise self._bad("lora", "mimicmotion takes no LoRA")
        object.__setattr__(self, "accelerations", self._ordered_accelerations())
        other = sorted({c.technique for c in self.accelerations} - set(ACCELERATION_KEYS))
        if other:
            raise self.config_error(f"{NAME} option accelerations: {', '.join(other)} do not apply to the SVD UNet; "
                                    f"use {', '.join(ACCELERATION_KEYS)}")
        self._check_only_our_attention("the spatial self-attention, mimicmotion/attention.py")
        object.__setattr__(self, "guidance_scale", float(self.guidance_scale))
        object.__setattr__(self, "noise_aug_strength", float(self.noise_aug_strength))

    # ------------------------------------------------------------------ queries
    @property
    def window_overlap(self) -> int:
        """Frames two windows share: ``overlap``, else the released 6 (folder) or the preset's."""
        if self.overlap is not None:
            return self.overlap
        return released()["inference"]["frames_overlap"] if self.model_path else self.preset_spec.overlap

    @property
    def native_resolution(self) -> int:
        if self.resolution is not None:
            return self.resolution
        return released()["inference"]["resolution"] if self.model_path else self.preset_spec.resolution

    def checkpoint_path(self) -> Path | None:
        """The MimicMotion checkpoint: ``checkpoint``, else ``{model_path}/MimicMotion_1-1.pth``;
        None without a model folder (random weights)."""
        if self.checkpoint:
            return Path(self.checkpoint)
        return Path(self.model_path) / released()["checkpoint"] if self.model_path else None

    def preset_scheduler_config(self) -> dict[str, Any]:
        return dict(self.preset_spec.scheduler)

    def model_defaults(self) -> dict[str, Any]:
        inf = released()["inference"]
        return {**super().model_defaults(), "steps": inf["num_inference_steps"], "guidance_scale": inf["guidance_scale"],
                "overlap": self.window_overlap, "resolution": self.native_resolution,
                "noise_aug_strength": inf["noise_aug_strength"], "conditioning_fps": inf["conditioning_fps"],
                "motion_bucket_id": inf["motion_bucket_id"], "model_fps": inf["output_fps"]}  # fmt: skip
