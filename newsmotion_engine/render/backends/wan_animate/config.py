"""Configuration of the ``wan-animate`` backend as data: architecture presets and the backend's
options (:class:`WanAnimateOptions`): model and sampling fields plus a tuple of typed
acceleration configs.

Options parsing. Python callers build :class:`WanAnimateOptions` directly, with typed configs::

    from newsmotion_engine.accel.teacache import TeaCache
    opts = WanAnimateOptions(preset="tiny", steps=2, accelerations=(TeaCache(threshold=0.15),))

The edges (CLI ``-o KEY=VALUE``, the Dagster renderer resource's ``options`` dict, bench JSON)
give a flat mapping; :meth:`WanAnimateOptions.from_mapping` is the one parser: model and sampling
keys map onto fields, the flat acceleration keys (:data:`ACCELERATION_KEYS`, the names README
examples use) become typed configs, ``accelerations`` may carry typed configs too, and any other
key is one :class:`WanAnimateConfigError` listing the known keys. A value out of range is the
same error, naming the option and the rule (the rule itself lives in the config's
``__post_init__``, once)::

    opts = WanAnimateOptions.from_mapping({"preset": "tiny", "steps": 2, "teacache": 0.15, "fp8": "auto"})
    opts.accelerations   # (Fp8Linears(mode='auto', keep_original=False), TeaCache(threshold=0.15, ...))

=========================  =============================================================
flat keys                  typed config (module)
=========================  =============================================================
``fp8``                    ``Fp8Linears(mode)``; ``"off"`` (default) = none (:mod:`accel.fp8`)
``compile``                ``Compile(cudagraphs=...)`` for ``"blocks"`` /
                           ``"blocks-cudagraphs"``; ``"off"`` = none (:mod:`accel.compile`)
``attention``,             ``Attention(kernel, variant)``; ``"sdpa"`` without a variant =
``fp8_attention_variant``  none (stock) (:mod:`accel.attention`)
``teacache``,              ``TeaCache(threshold, warmup_steps, coefficients, record)`` when
``teacache_warmup``,       ``teacache > 0`` or ``teacache_record`` (:mod:`accel.teacache`)
``teacache_coefficients``,
``teacache_record``
``cfg_start``,             ``CFGSchedule(start, stop, every, momentum)`` when any differs from
``cfg_stop``,              plain CFG (:mod:`accel.cfg`)
``cfg_every``,
``cfg_momentum``
``vae_tiling``             ``VaeTiling()`` when true (:mod:`accel.memory`)
``ffn_chunks``             ``FfnChunks(chunks)`` when not 0 (:mod:`accel.memory`)
``sparse_attention``,      ``SparseAttention(density, dense_steps, global_frames)`` when the
``sparse_dense_steps``,    density is under 1 (:mod:`accel.sparse`; experimental, off by
``sparse_global_frames``   default)
``pyramid_low_steps``,     ``PyramidCascade(low_steps, factor)`` when ``pyramid_low_steps`` is
``pyramid_factor``         not 0 (:mod:`accel.pyramid`; experimental, off by default)
=========================  =============================================================

The parsers of these keys live in :mod:`newsmotion_engine.render.backends.wan.diffusers_config` (wan-animate-2
takes the same keys). The acceleration modules import torch, so they are imported only when such a
key (or a backend) is used: importing this module stays cheap and an unknown key fails before
torch loads.

Presets build the named architecture with random weights when no model folder is given:

- ``tiny``: two layers, two heads, 16 px face crops; CPU tests run a whole clip in seconds.
- ``smoke``: real head size (128), tiny otherwise: every GPU path in seconds.
- ``14b``: the Wan2.2-Animate-14B architecture (transformer 17.3B parameters, 40 layers, 40 heads x
  128, FFN 13824, CLIP ViT-H/14 image encoder, UMT5-XXL text encoder, Wan 2.1 VAE) for timing and
  memory measurements.

Everything produced with random weights says so (``describe()["weights"]``, cache metadata, bench
rows): such frames are noise-shaped and measure speed and numerical drift only.

Defaults with a ``model_path`` are the released Wan2.2-Animate-14B's (Wan2.2's
``wan/configs/wan_animate_14B.py`` and ``generate.py``; diffusers' ``WanAnimatePipeline`` agrees):
77-frame segments, 20 steps, no CFG (guidance 1.0), one frame carried over, the scheduler class and
its shift from the folder's ``scheduler/scheduler_config.json``, the prompt ``视频中的人在做动作``
("the person in the video is moving") and Wan's default negative prompt. The official
preprocessing resamples the driving video to 30 fps. The preset is then ignored; without a
folder the preset's segment length and scheduler apply (steps, CFG and prompts are the same).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from newsmotion_engine.accel.registry import AccelConfig
from newsmotion_engine.render.base import BackendOptionError
from newsmotion_engine.render.backends.wan.diffusers_config import (  # the flat keys and the label: re-exported, wan-animate's names
    ACCELERATION_KEYS,
    COMPILE_VAE_REFUSED,
    DTYPES,
    FLAT_ACCELERATION_KEYS,
    ONE_KEY_CROSS_REFUSED,
    RANDOM_WEIGHTS_LABEL,
    DiffusersOptions,
)
from newsmotion_engine.render.backends.wan.continuation import CONTINUATIONS
from newsmotion_engine.render.backends.wan.prompts import WAN_ANIMATE_PROMPT, WAN_NEGATIVE_PROMPT
from newsmotion_engine.render.backends.wan.diffusers_config import parse_accelerations as _parse_accelerations

__all__ = [
    "ACCELERATION_KEYS",
    "FLAT_ACCELERATION_KEYS",
    "PRESETS",
    "Preset",
    "RANDOM_WEIGHTS_LABEL",
    "WanAnimateConfigError",
    "WanAnimateOptions",
    "parse_accelerations",
]

MODEL_DIR_ENV = "NEWSMOTION_MODEL_DIR"
NAME = "wan-animate"
# The released model's defaults (Wan2.2 wan/configs/wan_animate_14B.py: frame_num, sample_steps,
# sample_guide_scale, sample_fps, prompt).
RELEASED_SEGMENT_FRAMES = 77
RELEASED_STEPS = 20
RELEASED_GUIDANCE = 1.0
RELEASED_FPS = 30  # the official preprocessing resamples the driving video to 30 fps


class WanAnimateConfigError(BackendOptionError):
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


def _transformer(**dims: Any) -> dict[str, Any]:
    """``WanAnimateTransformer3DModel`` kwargs: the Wan-Animate layout every preset shares (patch,
    channels, norms) plus the preset's dimensions."""
    return dict(patch_size=(1, 2, 2), in_channels=36, latent_channels=16, out_channels=16, cross_attn_norm=True,
                qk_norm="rms_norm_across_heads", eps=1e-6, **dims)  # fmt: skip


def _vae(base_dim: int, dim_mult: list[int], num_res_blocks: int) -> dict[str, Any]:
    """``AutoencoderKLWan`` kwargs: 16 latent channels, 4x temporal downsampling."""
    return dict(base_dim=base_dim, z_dim=16, dim_mult=dim_mult, num_res_blocks=num_res_blocks,
                temperal_downsample=[False, True, True])  # fmt: skip


PRESETS: dict[str, Preset] = {
    "tiny": Preset(
        name="tiny",
        transformer=_transformer(
            num_attention_heads=2, attention_head_dim=12, text_dim=32, freq_dim=32, ffn_dim=32, num_layers=2,
            image_dim=16, added_kv_proj_dim=24, rope_max_seq_len=64,
            motion_encoder_channel_sizes={"4": 8, "8": 8, "16": 8}, motion_encoder_size=16, motion_style_dim=8,
            motion_dim=4, motion_encoder_dim=16, face_encoder_hidden_dim=16, face_encoder_num_heads=2,
            inject_face_latents_blocks=2, motion_encoder_batch_size=4,
        ),  # fmt: skip
        vae=_vae(4, [1, 1, 1, 1], 1),
        image_encoder=dict(
            hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
            image_size=224, patch_size=14, projection_dim=16,  # Wan's CLIP input size (caches.encode_image_tokens)
        ),  # fmt: skip
        text_encoder=dict(vocab_size=512, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4, feed_forward_proj="gated-gelu"),
        scheduler=_SCHEDULER,
        segment_frames=9,
    ),
    # GPU smoke test: real head size (128) and 16-aligned widths so every GPU path (cuDNN, FP8
    # GEMMs, the FP8 attention kernel, compile) runs in seconds; not a real model.
    "smoke": Preset(
        name="smoke",
        transformer=_transformer(
            num_attention_heads=2, attention_head_dim=128, text_dim=64, freq_dim=64, ffn_dim=512, num_layers=2,
            image_dim=32, added_kv_proj_dim=256, rope_max_seq_len=256,
            motion_encoder_channel_sizes={"4": 16, "8": 16, "16": 16, "32": 16}, motion_encoder_size=32,
            motion_style_dim=16, motion_dim=4, motion_encoder_dim=16, face_encoder_hidden_dim=32,
            face_encoder_num_heads=2, inject_face_latents_blocks=2, motion_encoder_batch_size=8,
        ),  # fmt: skip
        vae=_vae(8, [1, 1, 1, 1], 1),
        image_encoder=dict(
            hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
            image_size=224, patch_size=14, projection_dim=32,  # Wan's CLIP input size (caches.encode_image_tokens)
        ),  # fmt: skip
        text_encoder=dict(vocab_size=512, d_model=64, d_kv=16, d_ff=128, num_layers=2, num_heads=4, feed_forward_proj="gated-gelu"),
        scheduler=_SCHEDULER,
        segment_frames=9,
    ),
    "14b": Preset(
        name="14b",
        transformer=_transformer(
            num_attention_heads=40, attention_head_dim=128, text_dim=4096, freq_dim=256, ffn_dim=13824, num_layers=40,
            image_dim=1280, added_kv_proj_dim=5120, rope_max_seq_len=1024,
            motion_encoder_size=512, motion_style_dim=512, motion_dim=20, motion_encoder_dim=512,
            face_encoder_hidden_dim=1024, face_encoder_num_heads=4, inject_face_latents_blocks=5,
            motion_encoder_batch_size=8,
        ),  # fmt: skip
        vae=_vae(96, [1, 2, 4, 4], 2),
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


def parse_accelerations(flat: Mapping[str, Any]) -> tuple[AccelConfig, ...]:
    """Typed configs from flat acceleration keys (:data:`ACCELERATION_KEYS`), in registry order.

    Raises:
        WanAnimateConfigError: an unknown key, or a value the technique's config rejects (the
            message names the option keys and the config's rule).
    """
    return _parse_accelerations(flat, backend=NAME, error=WanAnimateConfigError)


# Technique name -> why it does not apply to this model (checked without importing torch).
_REFUSED = {"compile_vae": COMPILE_VAE_REFUSED, "one_key_cross": ONE_KEY_CROSS_REFUSED}


@dataclass(frozen=True)
class WanAnimateOptions(DiffusersOptions):
    """Every ``wan-animate`` option (the renderer resource's ``options`` map onto these through
    :meth:`from_mapping`).

    Model:
        model_path: a diffusers-format Wan-Animate folder; default ``$NEWSMOTION_MODEL_DIR``; none ->
            ``preset`` with random weights. With a folder, unset options take the released
            model's defaults (module docstring).
        preset: ``"tiny"``, ``"smoke"`` or ``"14b"`` (architecture when there is no model folder;
            ignored with one).
        device: ``"cpu"``, ``"cuda"``, ``"cuda:1"``... default ``"auto"`` (cuda when available).
        dtype: transformer compute dtype, ``"bfloat16"`` (default), ``"float16"`` or ``"float32"``.
    Sampling:
        steps: denoising steps (default 20); guidance_scale: CFG scale (1.0 = no CFG, the Wan
        default); segment_frames: frames per segment (4k+1; default 77 with a model folder, else
        the preset's); prev_frames:
        frames carried from one segment into the next (1 or 5; default 1, Wan's ``refert_num``
        default); seed base comes from RenderSpec.
        continuation: how a segment continues the previous one. ``"frames"`` (default, as the
        model was trained): the previous segment's last ``prev_frames`` decoded frames,
        VAE-encoded with zero frames after them, mask marking them known. ``"latent"``
        (EXPERIMENTAL, not what the model was trained on): the previous segment's last denoised
        latent frames put where those encoded frames go; no VAE encode at render time.
        prompt: default Wan's animate prompt (:data:`WAN_ANIMATE_PROMPT`); ``"loop"``: the
        canonical loop's own text; any other text is used as is. negative_prompt: for CFG;
        default Wan's (:data:`WAN_NEGATIVE_PROMPT`).
    Accelerations:
        accelerations: typed configs (:mod:`newsmotion_engine.accel`), each off unless present,
            each removable through :mod:`newsmotion_engine.accel.registry`; kept in the
            registry's application order. The flat keys of :data:`ACCELERATION_KEYS` build them.
    Tests:
        cache_root: where backend sub-caches go (default: inside the parent caches).

    Parsing, the shared checks and the acceleration queries (``has``, ``accel``,
    ``with_accelerations``, ``accel_summary``) are :class:`~..diffusers_config.DiffusersOptions`'.
    """

    backend: ClassVar[str] = NAME
    config_error: ClassVar[type[BackendOptionError]] = WanAnimateConfigError
    refused_accelerations: ClassVar[Mapping[str, str]] = _REFUSED
    model_dir_env: ClassVar[str] = MODEL_DIR_ENV
    presets: ClassVar[Mapping[str, Preset]] = PRESETS
    released_segment_frames: ClassVar[int] = RELEASED_SEGMENT_FRAMES
    default_scheduler: ClassVar[str] = "UniPCMultistepScheduler"  # Wan's default solver (unipc)
    # model_path, preset, device, dtype: DiffusersOptions' fields (first, in this order)
    steps: int = RELEASED_STEPS  # presets use the released model's too
    guidance_scale: float = RELEASED_GUIDANCE
    segment_frames: int | None = None
    prev_frames: int = 1
    continuation: str = "frames"
    prompt: str | None = None
    negative_prompt: str = WAN_NEGATIVE_PROMPT
    accelerations: tuple[AccelConfig, ...] = ()
    cache_root: str | None = None

    def __post_init__(self) -> None:
        self._check_choice("preset", PRESETS)
        self._check_choice("dtype", DTYPES)
        self._check_steps()
        self._check_guidance_scale()
        self._check_segment_frames(example=77)
        if self.prev_frames not in (1, 5) or isinstance(self.prev_frames, bool):
            raise self._bad("prev_frames", "use 1 or 5")
        self._check_choice("continuation", CONTINUATIONS)
        self._check_strings(optional=("prompt", "model_path", "cache_root"), required=("negative_prompt",))
        self._check_lora()
        object.__setattr__(self, "accelerations", self._ordered_accelerations())
        object.__setattr__(self, "guidance_scale", float(self.guidance_scale))

    def preset_scheduler_config(self) -> dict[str, Any]:
        return dict(self.preset_spec.scheduler)

    @property
    def default_prompt(self) -> str:
        """The prompt when ``prompt`` is unset: Wan's animate default."""
        return WAN_ANIMATE_PROMPT

    def model_defaults(self) -> dict[str, Any]:
        return {**super().model_defaults(), "steps": RELEASED_STEPS, "guidance_scale": RELEASED_GUIDANCE, "prev_frames": 1,
                "model_fps": RELEASED_FPS, "prompt": WAN_ANIMATE_PROMPT, "negative_prompt": WAN_NEGATIVE_PROMPT}  # fmt: skip
