"""Configuration of the ``wan-animate`` backend as data: architecture presets and the backend's
options (:class:`WanAnimateOptions`), validated, with a clear error on unknown keys.

Presets build the named architecture with random weights when no model folder is given:

- ``tiny``: two layers, two heads, 16 px face crops; CPU tests run a whole clip in seconds.
- ``14b``: the Wan2.2-Animate-14B architecture (transformer 17.3B parameters, 40 layers, 40 heads x
  128, FFN 13824, CLIP ViT-H/14 image encoder, UMT5-XXL text encoder, Wan 2.1 VAE) for timing and
  memory measurements.

Everything produced with random weights says so (``describe()["weights"]``, cache metadata, bench
rows): such frames are noise-shaped and measure speed and numerical drift only.

Example::

    opts = WanAnimateOptions.from_mapping({"preset": "tiny", "steps": 2, "teacache": 0.15})
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from newsmotion_engine.errors import NewsmotionError

__all__ = [
    "PRESETS",
    "Preset",
    "WanAnimateConfigError",
    "WanAnimateOptions",
    "RANDOM_WEIGHTS_LABEL",
]

RANDOM_WEIGHTS_LABEL = "random weights"
MODEL_DIR_ENV = "NEWSMOTION_MODEL_DIR"


class WanAnimateConfigError(NewsmotionError, ValueError):
    """A wan-animate option that is unknown or out of range."""


@dataclass(frozen=True)
class Preset:
    """One architecture: constructor kwargs for each component (diffusers / transformers configs)."""

    name: str
    transformer: dict[str, Any]
    vae: dict[str, Any]
    image_encoder: dict[str, Any]  # transformers.CLIPVisionConfig kwargs
    text_encoder: dict[str, Any]  # transformers.UMT5Config kwargs
    scheduler: dict[str, Any]
    max_text_tokens: int = 512  # WanAttnProcessor hard-codes 512 text tokens after the image tokens
    segment_frames: int = 77  # frames per inference segment (4k + 1)


_SCHEDULER = {
    "num_train_timesteps": 1000,
    "prediction_type": "flow_prediction",
    "use_flow_sigmas": True,
    "flow_shift": 5.0,
}

PRESETS: dict[str, Preset] = {
    "tiny": Preset(
        name="tiny",
        transformer=dict(
            patch_size=(1, 2, 2),
            num_attention_heads=2,
            attention_head_dim=12,
            in_channels=36,
            latent_channels=16,
            out_channels=16,
            text_dim=32,
            freq_dim=32,
            ffn_dim=32,
            num_layers=2,
            cross_attn_norm=True,
            qk_norm="rms_norm_across_heads",
            eps=1e-6,
            image_dim=16,
            added_kv_proj_dim=24,
            rope_max_seq_len=64,
            motion_encoder_channel_sizes={"4": 8, "8": 8, "16": 8},
            motion_encoder_size=16,
            motion_style_dim=8,
            motion_dim=4,
            motion_encoder_dim=16,
            face_encoder_hidden_dim=16,
            face_encoder_num_heads=2,
            inject_face_latents_blocks=2,
            motion_encoder_batch_size=4,
        ),
        vae=dict(base_dim=4, z_dim=16, dim_mult=[1, 1, 1, 1], num_res_blocks=1, temperal_downsample=[False, True, True]),
        image_encoder=dict(
            hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
            image_size=32, patch_size=8, projection_dim=16,
        ),  # fmt: skip
        text_encoder=dict(vocab_size=512, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4, feed_forward_proj="gated-gelu"),
        scheduler=_SCHEDULER,
        segment_frames=9,
    ),
    # GPU smoke test: real head size (128) and 16-aligned widths so every GPU path (cuDNN, FP8
    # GEMMs, the FP8 attention kernel, compile) runs in seconds; not a real model.
    "smoke": Preset(
        name="smoke",
        transformer=dict(
            patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=128, in_channels=36,
            latent_channels=16, out_channels=16, text_dim=64, freq_dim=64, ffn_dim=512, num_layers=2,
            cross_attn_norm=True, qk_norm="rms_norm_across_heads", eps=1e-6, image_dim=32,
            added_kv_proj_dim=256, rope_max_seq_len=256,
            motion_encoder_channel_sizes={"4": 16, "8": 16, "16": 16, "32": 16}, motion_encoder_size=32,
            motion_style_dim=16, motion_dim=4, motion_encoder_dim=16, face_encoder_hidden_dim=32,
            face_encoder_num_heads=2, inject_face_latents_blocks=2, motion_encoder_batch_size=8,
        ),
        vae=dict(base_dim=8, z_dim=16, dim_mult=[1, 1, 1, 1], num_res_blocks=1, temperal_downsample=[False, True, True]),
        image_encoder=dict(
            hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
            image_size=32, patch_size=8, projection_dim=32,
        ),
        text_encoder=dict(vocab_size=512, d_model=64, d_kv=16, d_ff=128, num_layers=2, num_heads=4, feed_forward_proj="gated-gelu"),
        scheduler=_SCHEDULER,
        segment_frames=9,
    ),
    "14b": Preset(
        name="14b",
        transformer=dict(
            patch_size=(1, 2, 2),
            num_attention_heads=40,
            attention_head_dim=128,
            in_channels=36,
            latent_channels=16,
            out_channels=16,
            text_dim=4096,
            freq_dim=256,
            ffn_dim=13824,
            num_layers=40,
            cross_attn_norm=True,
            qk_norm="rms_norm_across_heads",
            eps=1e-6,
            image_dim=1280,
            added_kv_proj_dim=5120,
            rope_max_seq_len=1024,
            motion_encoder_size=512,
            motion_style_dim=512,
            motion_dim=20,
            motion_encoder_dim=512,
            face_encoder_hidden_dim=1024,
            face_encoder_num_heads=4,
            inject_face_latents_blocks=5,
            motion_encoder_batch_size=8,
        ),
        vae=dict(base_dim=96, z_dim=16, dim_mult=[1, 2, 4, 4], num_res_blocks=2, temperal_downsample=[False, True, True]),
        image_encoder=dict(
            hidden_size=1280, intermediate_size=5120, num_hidden_layers=32, num_attention_heads=16,
            image_size=224, patch_size=14, projection_dim=1024, hidden_act="gelu",
        ),  # fmt: skip
        text_encoder=dict(
            vocab_size=256384, d_model=4096, d_kv=64, d_ff=10240, num_layers=24, num_heads=64,
            feed_forward_proj="gated-gelu", relative_attention_num_buckets=32,
        ),  # fmt: skip
        scheduler=_SCHEDULER,
        segment_frames=77,
    ),
}

_DTYPES = ("bfloat16", "float16", "float32")
_FP8_MODES = ("off", "auto", "compute", "storage")
_ATTENTION = ("sdpa", "cudnn", "flash", "fp8-triton")
_COMPILE = ("off", "blocks", "blocks-cudagraphs")
# Mirrors newsmotion_engine.accel.attention.FP8_VARIANTS (kept here so config imports no torch).
_FP8_ATTENTION_VARIANTS = ("fp8", "int8qk-fp8pv", "int8qk-bf16pv")


@dataclass(frozen=True)
class WanAnimateOptions:
    """Every ``wan-animate`` option (the renderer resource's ``options`` map onto these fields).

    Model:
        model_path: a diffusers-format Wan-Animate folder; default ``$NEWSMOTION_MODEL_DIR``; none ->
            ``preset`` with random weights.
        preset: ``"tiny"`` or ``"14b"`` (architecture when there is no model folder).
        device: ``"cpu"``, ``"cuda"``, ``"cuda:1"``... default ``"auto"`` (cuda when available).
        dtype: transformer compute dtype, ``"bfloat16"`` (default), ``"float16"`` or ``"float32"``.
    Sampling:
        steps: denoising steps (default 20); guidance_scale: CFG scale (1.0 = no CFG, the Wan
        default); segment_frames: frames per segment (4k+1; default the preset's); prev_frames:
        frames carried from one segment into the next (1 or 5); seed base comes from RenderSpec.
        prompt: overrides the loop's prompt; negative_prompt: for CFG.
    Accelerations (each off by default, each removable):
        fp8: ``"off"`` | ``"auto"`` (FP8 compute where the GPU has it, else a labelled
            FP8-storage fallback) | ``"compute"`` (error without FP8 hardware) | ``"storage"``.
        compile: ``"off"`` | ``"blocks"`` (regional torch.compile of the repeated blocks) |
            ``"blocks-cudagraphs"``.
        attention: ``"sdpa"`` (PyTorch picks) | ``"cudnn"`` | ``"flash"`` | ``"fp8-triton"``;
            fp8_attention_variant: the FP8 kernel's variant (``accel.attention.FP8_VARIANTS``;
            default ``DEFAULT_FP8_VARIANT``, the one the GPU bench measured accurate and fastest).
        teacache: threshold (0 = off; 0.15 is the usual value); teacache_warmup: first steps
            always computed; teacache_coefficients: rescale polynomial (highest power first);
            teacache_record: with teacache 0, compute every step but record (embedding change,
            output change) pairs for calibration (``newsmotion calibrate teacache``).
        cfg_start, cfg_stop: CFG window as fractions of the steps; cfg_every: one-pass momentum
            CFG (two passes every k steps; 1 = plain CFG); cfg_momentum: momentum of the cached delta.
        vae_tiling: tiled VAE decode; ffn_chunks: feed-forward over N sequence chunks (0 = off).
    """

    model_path: str | None = None
    preset: str = "tiny"
    device: str = "auto"
    dtype: str = "bfloat16"
    steps: int = 20
    guidance_scale: float = 1.0
    segment_frames: int | None = None
    prev_frames: int = 1
    prompt: str | None = None
    negative_prompt: str = ""
    fp8: str = "off"
    compile: str = "off"
    attention: str = "sdpa"
    fp8_attention_variant: str | None = None
    teacache: float = 0.0
    teacache_warmup: int = 1
    teacache_coefficients: tuple[float, ...] = (1.0, 0.0)
    teacache_record: bool = False
    cfg_start: float = 0.0
    cfg_stop: float = 1.0
    cfg_every: int = 1
    cfg_momentum: float = 0.0
    vae_tiling: bool = False
    ffn_chunks: int = 0
    cache_root: str | None = None  # tests only: where backend sub-caches go (default: inside the parent caches)
    extra: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        def bad(name: str, rule: str) -> WanAnimateConfigError:
            return WanAnimateConfigError(f"wan-animate option {name}={getattr(self, name)!r}: {rule}")

        if self.preset not in PRESETS:
            raise bad("preset", f"use one of {', '.join(PRESETS)}")
        if self.dtype not in _DTYPES:
            raise bad("dtype", f"use one of {', '.join(_DTYPES)}")
        if self.fp8 not in _FP8_MODES:
            raise bad("fp8", f"use one of {', '.join(_FP8_MODES)}")
        if self.compile not in _COMPILE:
            raise bad("compile", f"use one of {', '.join(_COMPILE)}")
        if self.attention not in _ATTENTION:
            raise bad("attention", f"use one of {', '.join(_ATTENTION)}")
        if self.fp8_attention_variant is not None and self.fp8_attention_variant not in _FP8_ATTENTION_VARIANTS:
            raise bad("fp8_attention_variant", f"use one of {', '.join(_FP8_ATTENTION_VARIANTS)}")
        if not isinstance(self.steps, int) or not 1 <= self.steps <= 1000:
            raise bad("steps", "use an integer 1..1000")
        if not 1.0 <= float(self.guidance_scale) <= 30.0:
            raise bad("guidance_scale", "use 1.0 (no CFG) .. 30")
        if self.segment_frames is not None and (self.segment_frames < 5 or (self.segment_frames - 1) % 4):
            raise bad("segment_frames", "use 4k+1 frames, at least 5 (e.g. 77)")
        if self.prev_frames not in (1, 5):
            raise bad("prev_frames", "use 1 or 5")
        if not 0.0 <= float(self.teacache) <= 10.0:
            raise bad("teacache", "use a threshold 0 (off) .. 10; 0.15 is typical")
        if self.teacache_warmup < 0:
            raise bad("teacache_warmup", "use 0 or more steps")
        if len(self.teacache_coefficients) < 1:
            raise bad("teacache_coefficients", "give at least one polynomial coefficient")
        if self.teacache_record and self.teacache > 0:
            raise bad("teacache_record", "record a full run: set teacache=0 (every step computed)")
        if not 0.0 <= self.cfg_start < self.cfg_stop <= 1.0:
            raise bad("cfg_start", "need 0 <= cfg_start < cfg_stop <= 1")
        if not isinstance(self.cfg_every, int) or self.cfg_every < 1:
            raise bad("cfg_every", "use an integer >= 1 (1 = two passes every step)")
        if not 0.0 <= self.cfg_momentum < 1.0:
            raise bad("cfg_momentum", "use 0 <= momentum < 1")
        if not isinstance(self.ffn_chunks, int) or self.ffn_chunks < 0:
            raise bad("ffn_chunks", "use 0 (off) or a number of chunks")
        object.__setattr__(self, "teacache_coefficients", tuple(float(c) for c in self.teacache_coefficients))

    @classmethod
    def from_mapping(cls, options: Mapping[str, Any] | None = None, **kw: Any) -> WanAnimateOptions:
        """Build from a resource's ``options`` dict; unknown keys raise with the list of known ones."""
        merged = {**(dict(options) if options else {}), **kw}
        known = {f.name for f in dataclasses.fields(cls) if f.name != "extra"}
        unknown = sorted(set(merged) - known)
        if unknown:
            raise WanAnimateConfigError(
                f"unknown wan-animate option(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}"
            )
        if merged.get("model_path") is None and os.environ.get(MODEL_DIR_ENV):
            merged["model_path"] = os.environ[MODEL_DIR_ENV]
        if "teacache_coefficients" in merged:
            merged["teacache_coefficients"] = tuple(merged["teacache_coefficients"])
        return cls(**merged)

    @property
    def preset_spec(self) -> Preset:
        return PRESETS[self.preset]

    @property
    def segment_length(self) -> int:
        return self.segment_frames or self.preset_spec.segment_frames

    def accel_summary(self) -> dict[str, Any]:
        """The acceleration settings, for telemetry."""
        return {
            "fp8": self.fp8,
            "compile": self.compile,
            "attention": self.attention,
            "fp8_attention_variant": self.fp8_attention_variant,
            "teacache": self.teacache,
            "cfg_window": [self.cfg_start, self.cfg_stop],
            "cfg_every": self.cfg_every,
            "cfg_momentum": self.cfg_momentum,
            "vae_tiling": self.vae_tiling,
            "ffn_chunks": self.ffn_chunks,
        }
