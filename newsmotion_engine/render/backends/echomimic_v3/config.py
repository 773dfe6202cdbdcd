"""Configuration of the ``echomimic-v3`` backend as data: the released flash-pro numbers
(``released/echomimic-v3-flash-pro.json``, each section citing its source in the official
repository), the presets and :class:`EchoMimicV3Options`.

Sampling (the flash-pro recipe, ``run_flash.sh`` / ``infer_flash.py``): 8 UniPC flow steps (shift 5)
at 25 fps, the model's own size (the canvas' aspect ratio, area at most 768 x 768, sides multiples
of 16: 576 x 1024 for a 720 x 1280 render), classifier-free guidance on the audio only
(``audio_guidance_scale`` 3.0: the unconditional pass is the same prompt with zero audio features),
prompt ``A person is speaking.``. Long speech renders in segments of 81 frames, each after the
first conditioned on the previous one's last 8 frames, the 8 overlapping frames cross-faded
(``infer_preview.py``'s long-video loop).

Accelerations: the typed configs of :mod:`newsmotion_engine.accel` that apply to this transformer
(diffusers' Wan blocks with an audio processor on ``attn2``): ``Fp8Linears`` (every block linear,
the audio ones included), ``FfnChunks``, ``VaeTiling``, ``Compile`` (regional, the blocks) and
``Attention`` on the self-attention (``attn1``). Refused with the reason: ``SparseAttention``,
``ContextParallel``, ``PyramidCascade`` (no plan for this model) and ``CFGSchedule`` (the audio
guidance runs every step, as released). ``TeaCache`` (opt-in: it skips calls, an approximation)
applies per pass; the release's rescale coefficients for the 1.3B model and its threshold (0.1,
after 5 steps) are in the released file (``teacache``) — give them as ``teacache_coefficients``. ``batch_cfg`` (default on) runs the audio pass and
the zero-audio pass as one batch of two instead of two calls; the stock recipe (the bench's
``stock``) runs them one after the other.

Presets build the architecture with **random weights** when no model folder is given (labelled so
everywhere): ``tiny`` (two layers of width 24, one wav2vec2 layer, 9-frame segments; CPU tests)
and ``flash-pro`` (the released sizes).
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
from newsmotion_engine.render.backends.wan.diffusers_config import COMPILE_VAE_REFUSED, DTYPES, ONE_KEY_CROSS_REFUSED, RANDOM_WEIGHTS_LABEL, DiffusersOptions
from newsmotion_engine.render.backends.wan.released import component_kwargs

__all__ = ["NAME", "PRESETS", "RANDOM_WEIGHTS_LABEL", "EchoMimicV3ConfigError", "EchoMimicV3Options", "Preset", "released"]

NAME = "echomimic-v3"
MODEL_DIR_ENV = "NEWSMOTION_MODEL_DIR_ECHOMIMIC"
RELEASED_FILE = Path(__file__).parent / "released" / "echomimic-v3-flash-pro.json"
# The flash models' audio encoder as released (config and feature-extractor settings: do_normalize off), for random weights.
AUDIO_ENCODER_RELEASED = Path(__file__).parent / "released" / "chinese-wav2vec2-base"
AUDIO_FEATURE_RECIPES = ("official", "windowed")
WAN21_COMPONENTS = "wan-animate"  # the Wan 2.1 VAE, CLIP ViT-H/14 and UMT5-XXL configs every Wan 2.1 i2v model shares


@cache
def released() -> dict[str, Any]:
    """The released flash-pro numbers (the JSON file, as stored)."""
    return json.loads(RELEASED_FILE.read_text())


class EchoMimicV3ConfigError(BackendOptionError):
    """An echomimic-v3 option that is unknown, out of range or does not apply to this model."""


@dataclass(frozen=True)
class Preset:
    """One architecture: constructor kwargs per component, and its segment layout."""

    name: str
    transformer: dict[str, Any]  # EchoMimicV3Transformer3DModel kwargs
    vae: dict[str, Any]  # AutoencoderKLWan kwargs
    image_encoder: dict[str, Any]  # transformers.CLIPVisionConfig kwargs
    text_encoder: dict[str, Any]  # transformers.UMT5Config kwargs
    segment_frames: int
    overlap_frames: int


def _released_preset() -> Preset:
    transformer = {k: v for k, v in released()["transformer"].items() if not k.startswith("_")}
    lv = released()["long_video"]
    return Preset("flash-pro", transformer, component_kwargs(WAN21_COMPONENTS, "vae"),
                  component_kwargs(WAN21_COMPONENTS, "image_encoder"), component_kwargs(WAN21_COMPONENTS, "text_encoder"),
                  released()["sampling"]["segment_frames"], lv["overlap_video_length"])  # fmt: skip


PRESETS: dict[str, Preset] = {
    "tiny": Preset(
        name="tiny",
        transformer=dict(num_attention_heads=2, attention_head_dim=12, ffn_dim=32, freq_dim=32, text_dim=32, num_layers=2,
                         added_kv_proj_dim=24, image_dim=1280, audio_layers=1, audio_intermediate_dim=16,
                         audio_context_tokens=4),  # fmt: skip
        vae=dict(base_dim=4, z_dim=16, dim_mult=[1, 1, 1, 1], num_res_blocks=1, temperal_downsample=[False, True, True]),
        image_encoder=dict(hidden_size=1280, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
                           image_size=224, patch_size=14, projection_dim=16),  # fmt: skip
        text_encoder=dict(vocab_size=512, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4, feed_forward_proj="gated-gelu"),
        segment_frames=9,
        overlap_frames=4,
    ),
    "flash-pro": _released_preset(),
}

# Technique name -> why it does not apply to this model (checked without importing torch).
_REFUSED = {
    "sparse_attention": "its block-sparse layout is written for Wan-Animate's processors, not this model's",
    "context_parallel": "there is no context-parallel plan for the audio cross-attention (tokens are split per latent frame)",
    "pyramid": "there is no low-resolution plan for this model",
    "cfg": "the audio guidance runs every step, as the flash-pro recipe does (no CFG schedule)",
    "compile_vae": COMPILE_VAE_REFUSED,
    "one_key_cross": ONE_KEY_CROSS_REFUSED,
}


@dataclass(frozen=True)
class EchoMimicV3Options(DiffusersOptions):
    """Every ``echomimic-v3`` option (:meth:`from_mapping` parses the flat keys).

    Model:
        model_path: a folder in the layout ``docs/backends/echomimic-v3.md`` describes (the
            EchoMimicV3 transformer in the official key names; the Wan 2.1 encoders in diffusers
            format); default ``$NEWSMOTION_MODEL_DIR_ECHOMIMIC``; none -> ``preset`` with random
            weights. device / dtype: as the other diffusers backends.
        audio_model_path: the wav2vec2 folder for the speech features (default: the model
            folder's ``wav2vec2/``; none: ``chinese-wav2vec2-base``, the flash models' encoder, from
            its released config with random weights).
        audio_features: how the speech features are computed: ``official`` (default: as the
            release's ``infer_flash.py`` does, the whole clip at once, -23 LUFS, the conv features
            interpolated to the video rate before the transformer) or ``windowed`` (the speech
            tier's SimHash-able windows at 50 Hz resampled afterwards: an approximation of the
            official input whose windows can be reused across speeches).
    Speech:
        speech: the speech id to perform (its cache under ``speech_root``); the clip then has the
            speech's length. Unset: a silent clip of the loop's length (zero audio features).
        speech_root: the speech cache root (the CLI fills it from the storage).
    Sampling:
        steps (8), audio_guidance_scale (3.0; 1.0 = no guidance, one pass per step),
        prompt (``A person is speaking.``), segment_frames (4k+1; 81 released, 9 ``tiny``),
        overlap_frames (frames carried into the next segment and cross-faded; 8 released),
        max_side (768: the model renders at most max_side**2 pixels, at the canvas' aspect),
        batch_cfg (true: both guidance passes in one batch of two).
    Accelerations: see the module docstring. cache_root: where sub-caches go (tests).
    """

    backend: ClassVar[str] = NAME
    config_error: ClassVar[type[BackendOptionError]] = EchoMimicV3ConfigError
    refused_accelerations: ClassVar[Mapping[str, str]] = _REFUSED
    model_dir_env: ClassVar[str] = MODEL_DIR_ENV
    presets: ClassVar[Mapping[str, Preset]] = PRESETS
    released_segment_frames: ClassVar[int] = released()["sampling"]["segment_frames"]
    default_scheduler: ClassVar[str] = "UniPCMultistepScheduler"
    audio_model_path: str | None = None
    audio_features: str = "official"
    speech: str | None = None
    speech_root: str | None = None
    steps: int | None = None
    audio_guidance_scale: float | None = None
    prompt: str = released()["sampling"]["prompt"]
    segment_frames: int | None = None
    overlap_frames: int | None = None
    max_side: int = released()["sampling"]["max_area"][0]
    batch_cfg: bool = True
    accelerations: tuple[AccelConfig, ...] = ()
    cache_root: str | None = None

    def __post_init__(self) -> None:
        self._check_choice("preset", PRESETS)
        self._check_choice("dtype", DTYPES)
        self._check_choice("audio_features", AUDIO_FEATURE_RECIPES)
        if self.steps is not None:
            self._check_steps()
        g = self.audio_guidance_scale
        if g is not None and (not isinstance(g, (int, float)) or isinstance(g, bool) or not 1.0 <= float(g) <= 30.0):
            raise self._bad("audio_guidance_scale", "use 1.0 (no guidance) .. 30")
        self._check_segment_frames(example=81)
        o = self.overlap_frames
        if o is not None and (not isinstance(o, int) or isinstance(o, bool) or not 1 <= o < self.segment_length - 1):
            raise self._bad("overlap_frames", f"use 1 .. {self.segment_length - 2} (fewer than the segment's frames)")
        m = self.max_side
        if not isinstance(m, int) or isinstance(m, bool) or m < 64 or m % 16:
            raise self._bad("max_side", "use a multiple of 16, at least 64 (the release: 768)")
        if not isinstance(self.batch_cfg, bool):
            raise self._bad("batch_cfg", "use true or false")
        if self.speech is not None:
            from newsmotion_engine.errors import InvalidIdError
            from newsmotion_engine.ids import validate_id

            try:
                validate_id(self.speech, "speech id")
            except InvalidIdError as exc:
                raise self._bad("speech", str(exc)) from None
        self._check_strings(optional=("model_path", "audio_model_path", "speech_root", "cache_root"), required=("prompt",))
        self._check_lora()
        object.__setattr__(self, "accelerations", self._ordered_accelerations())

    @property
    def num_steps(self) -> int:
        return self.steps if self.steps is not None else int(released()["sampling"]["steps"])

    @property
    def guidance(self) -> float:
        g = self.audio_guidance_scale
        return float(g) if g is not None else float(released()["sampling"]["audio_guidance_scale"])

    @property
    def overlap(self) -> int:
        if self.overlap_frames is not None:
            return self.overlap_frames
        return int(released()["long_video"]["overlap_video_length"]) if self.model_path else self.preset_spec.overlap_frames

    @property
    def model_fps(self) -> int:
        return int(released()["sampling"]["fps"])

    @property
    def audio_context(self) -> int:
        return int(released()["sampling"]["audio_context"])

    def preset_scheduler_config(self) -> dict[str, Any]:
        return {k: v for k, v in released()["scheduler"].items() if not k.startswith("_") and k != "sigma_range"}

    def sampling_sigmas(self) -> list[float]:
        """The unshifted sigmas of ``num_steps`` steps, as the official flow UniPC spaces them (linearly
        over its training range, 0.999 .. 0, the last end left out); the scheduler shifts them."""
        hi, lo = released()["scheduler"]["sigma_range"]
        n = self.num_steps
        return [hi + (lo - hi) * i / n for i in range(n)]

    def scheduler_config(self) -> dict[str, Any]:
        """The release's sampler, with or without a model folder (a Wan 2.1 folder's own scheduler
        config is another model's: 480P i2v samples with shift 3)."""
        return {"_class_name": self.default_scheduler, **self.preset_scheduler_config()}

    def model_size(self, width: int, height: int) -> tuple[int, int]:
        """The size the model renders for a ``width`` x ``height`` canvas (official
        ``get_sample_size``: the area capped at ``max_side**2`` keeping the aspect, each side
        floored to a multiple of 16)."""
        area = self.max_side * self.max_side
        if width * height > area:
            ratio = (width * height / area) ** 0.5
            return int(width / ratio // 16 * 16), int(height / ratio // 16 * 16)
        return width // 16 * 16, height // 16 * 16

    def model_defaults(self) -> dict[str, Any]:
        s = released()["sampling"]
        return {**super().model_defaults(), "steps": s["steps"], "audio_guidance_scale": s["audio_guidance_scale"],
                "overlap_frames": self.overlap, "model_fps": s["fps"], "prompt": s["prompt"],
                "max_side": s["max_area"][0]}  # fmt: skip
