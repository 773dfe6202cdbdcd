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

The acceleration modules import torch, so they are imported only when such a key (or a backend)
is used: importing this module stays cheap and an unknown key fails before torch loads.

Presets build the named architecture with random weights when no model folder is given:

- ``tiny``: two layers, two heads, 16 px face crops; CPU tests run a whole clip in seconds.
- ``smoke``: real head size (128), tiny otherwise: every GPU path in seconds.
- ``14b``: the Wan2.2-Animate-14B architecture (transformer 17.3B parameters, 40 layers, 40 heads x
  128, FFN 13824, CLIP ViT-H/14 image encoder, UMT5-XXL text encoder, Wan 2.1 VAE) for timing and
  memory measurements.

Everything produced with random weights says so (``describe()["weights"]``, cache metadata, bench
rows): such frames are noise-shaped and measure speed and numerical drift only.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from newsmotion_engine.accel.registry import AccelConfig, AccelConfigError, UnknownAccelerationError, ordered
from newsmotion_engine.render.base import BackendOptionError, BackendOptions

__all__ = [
    "ACCELERATION_KEYS",
    "PRESETS",
    "Preset",
    "RANDOM_WEIGHTS_LABEL",
    "WanAnimateConfigError",
    "WanAnimateOptions",
    "parse_accelerations",
]

RANDOM_WEIGHTS_LABEL = "random weights"
MODEL_DIR_ENV = "NEWSMOTION_MODEL_DIR"
NAME = "wan-animate"


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
_COMPILE = ("off", "blocks", "blocks-cudagraphs")
_FP8 = ("off", "auto", "compute", "storage")
_ACCEL = "newsmotion_engine.accel."


def _config_class(module: str, name: str) -> type:
    return getattr(importlib.import_module(_ACCEL + module), name)


def _fp8(v: dict[str, Any]) -> AccelConfig | None:
    mode = v.get("fp8", "off")
    if mode not in _FP8:
        raise AccelConfigError(f"use one of {', '.join(_FP8)}")
    return None if mode == "off" else _config_class("fp8", "Fp8Linears")(mode=mode)


def _compile(v: dict[str, Any]) -> AccelConfig | None:
    mode = v.get("compile", "off")
    if mode == "off":
        return None
    if mode not in _COMPILE:
        raise AccelConfigError(f"use one of {', '.join(_COMPILE)}")
    return _config_class("compile", "Compile")(cudagraphs=mode == "blocks-cudagraphs")


def _attention(v: dict[str, Any]) -> AccelConfig | None:
    kernel, variant = v.get("attention", "sdpa"), v.get("fp8_attention_variant")
    if kernel == "sdpa" and variant is None:
        return None  # stock attention: nothing to apply
    return _config_class("attention", "Attention")(kernel=kernel, variant=variant)


def _teacache(v: dict[str, Any]) -> AccelConfig | None:
    threshold, record = v.get("teacache", 0.0), v.get("teacache_record", False)
    if threshold == 0 and record is False:
        return None
    return _config_class("teacache", "TeaCache")(
        threshold=threshold, warmup_steps=v.get("teacache_warmup", 1),
        coefficients=v.get("teacache_coefficients", (1.0, 0.0)), record=record,
    )  # fmt: skip


def _cfg(v: dict[str, Any]) -> AccelConfig | None:
    cls = _config_class("cfg", "CFGSchedule")
    schedule = cls(start=v.get("cfg_start", 0.0), stop=v.get("cfg_stop", 1.0), every=v.get("cfg_every", 1),
                   momentum=v.get("cfg_momentum", 0.0))  # fmt: skip
    return None if schedule == cls() else schedule


def _vae_tiling(v: dict[str, Any]) -> AccelConfig | None:
    on = v.get("vae_tiling", False)
    if not isinstance(on, bool):
        raise AccelConfigError("use true or false")
    return _config_class("memory", "VaeTiling")() if on else None


def _ffn_chunks(v: dict[str, Any]) -> AccelConfig | None:
    chunks = v.get("ffn_chunks", 0)
    return None if chunks == 0 and not isinstance(chunks, bool) else _config_class("memory", "FfnChunks")(chunks=chunks)


def _sparse_attention(v: dict[str, Any]) -> AccelConfig | None:
    density = v.get("sparse_attention", 1.0)
    if density == 1.0 and not isinstance(density, bool):
        return None  # dense: nothing to apply
    return _config_class("sparse", "SparseAttention")(
        density=density, dense_steps=v.get("sparse_dense_steps", 1), global_frames=v.get("sparse_global_frames", 1),
    )  # fmt: skip


def _pyramid(v: dict[str, Any]) -> AccelConfig | None:
    low = v.get("pyramid_low_steps", 0)
    if low == 0 and not isinstance(low, bool):
        return None  # off
    return _config_class("pyramid", "PyramidCascade")(low_steps=low, factor=v.get("pyramid_factor", 2))


# Flat option keys per technique -> the parser building its typed config (None = not used).
ACCELERATION_KEYS: dict[tuple[str, ...], Callable[[dict[str, Any]], AccelConfig | None]] = {
    ("fp8",): _fp8,
    ("compile",): _compile,
    ("attention", "fp8_attention_variant"): _attention,
    ("teacache", "teacache_warmup", "teacache_coefficients", "teacache_record"): _teacache,
    ("cfg_start", "cfg_stop", "cfg_every", "cfg_momentum"): _cfg,
    ("vae_tiling",): _vae_tiling,
    ("ffn_chunks",): _ffn_chunks,
    ("sparse_attention", "sparse_dense_steps", "sparse_global_frames"): _sparse_attention,
    ("pyramid_low_steps", "pyramid_factor"): _pyramid,
}
FLAT_ACCELERATION_KEYS = tuple(k for keys in ACCELERATION_KEYS for k in keys)


def parse_accelerations(flat: Mapping[str, Any]) -> tuple[AccelConfig, ...]:
    """Typed configs from flat acceleration keys (:data:`ACCELERATION_KEYS`), in registry order.

    Raises:
        WanAnimateConfigError: an unknown key, or a value the technique's config rejects (the
            message names the option keys and the config's rule).
    """
    unknown = sorted(set(flat) - set(FLAT_ACCELERATION_KEYS))
    if unknown:
        raise WanAnimateConfigError(
            f"unknown wan-animate acceleration option(s) {', '.join(unknown)}; known: {', '.join(sorted(FLAT_ACCELERATION_KEYS))}"
        )
    configs = []
    for keys, parse in ACCELERATION_KEYS.items():
        given = {k: flat[k] for k in keys if k in flat}
        if not given:
            continue
        try:
            config = parse(given)
        except (AccelConfigError, TypeError, ValueError) as exc:
            shown = ", ".join(f"{k}={v!r}" for k, v in given.items())
            raise WanAnimateConfigError(f"wan-animate option {shown}: {exc}") from None
        if config is not None:
            configs.append(config)
    return ordered(configs)


@dataclass(frozen=True)
class WanAnimateOptions(BackendOptions):
    """Every ``wan-animate`` option (the renderer resource's ``options`` map onto these through
    :meth:`from_mapping`).

    Model:
        model_path: a diffusers-format Wan-Animate folder; default ``$NEWSMOTION_MODEL_DIR``; none ->
            ``preset`` with random weights.
        preset: ``"tiny"``, ``"smoke"`` or ``"14b"`` (architecture when there is no model folder).
        device: ``"cpu"``, ``"cuda"``, ``"cuda:1"``... default ``"auto"`` (cuda when available).
        dtype: transformer compute dtype, ``"bfloat16"`` (default), ``"float16"`` or ``"float32"``.
    Sampling:
        steps: denoising steps (default 20); guidance_scale: CFG scale (1.0 = no CFG, the Wan
        default); segment_frames: frames per segment (4k+1; default the preset's); prev_frames:
        frames carried from one segment into the next (1 or 5); seed base comes from RenderSpec.
        prompt: overrides the loop's prompt; negative_prompt: for CFG.
    Accelerations:
        accelerations: typed configs (:mod:`newsmotion_engine.accel`), each off unless present,
            each removable through :mod:`newsmotion_engine.accel.registry`; kept in the
            registry's application order. The flat keys of :data:`ACCELERATION_KEYS` build them.
    Tests:
        cache_root: where backend sub-caches go (default: inside the parent caches).
    """

    backend: ClassVar[str] = NAME
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
    accelerations: tuple[AccelConfig, ...] = ()
    cache_root: str | None = None

    def __post_init__(self) -> None:
        def bad(name: str, rule: str) -> WanAnimateConfigError:
            return WanAnimateConfigError(str(self.option_error(name, rule)))

        if self.preset not in PRESETS:
            raise bad("preset", f"use one of {', '.join(PRESETS)}")
        if self.dtype not in _DTYPES:
            raise bad("dtype", f"use one of {', '.join(_DTYPES)}")
        if not isinstance(self.steps, int) or isinstance(self.steps, bool) or not 1 <= self.steps <= 1000:
            raise bad("steps", "use an integer 1..1000")
        if not isinstance(self.guidance_scale, (int, float)) or isinstance(self.guidance_scale, bool) \
                or not 1.0 <= float(self.guidance_scale) <= 30.0:  # fmt: skip
            raise bad("guidance_scale", "use 1.0 (no CFG) .. 30")
        if self.segment_frames is not None and (
            not isinstance(self.segment_frames, int) or self.segment_frames < 5 or (self.segment_frames - 1) % 4
        ):
            raise bad("segment_frames", "use 4k+1 frames, at least 5 (e.g. 77)")
        if self.prev_frames not in (1, 5) or isinstance(self.prev_frames, bool):
            raise bad("prev_frames", "use 1 or 5")
        for name in ("prompt", "model_path", "cache_root"):
            if getattr(self, name) is not None and not isinstance(getattr(self, name), str):
                raise bad(name, "use a string")
        if not isinstance(self.negative_prompt, str):
            raise bad("negative_prompt", "use a string")
        if isinstance(self.accelerations, (str, bytes, Mapping)) or not hasattr(self.accelerations, "__iter__"):
            raise bad("accelerations", "give a sequence of acceleration configs (newsmotion_engine.accel)")
        try:
            object.__setattr__(self, "accelerations", ordered(self.accelerations))
        except (AccelConfigError, UnknownAccelerationError) as exc:
            raise WanAnimateConfigError(f"wan-animate option accelerations: {exc}") from None
        object.__setattr__(self, "guidance_scale", float(self.guidance_scale))

    @classmethod
    def known_options(cls) -> tuple[str, ...]:
        fields = {f.name for f in dataclasses.fields(cls)}
        return tuple(sorted(fields | set(FLAT_ACCELERATION_KEYS)))

    @classmethod
    def unknown_options_error(cls, unknown: list[str]) -> BackendOptionError:
        return WanAnimateConfigError(str(super().unknown_options_error(unknown)))

    @classmethod
    def from_mapping(cls, options: Mapping[str, Any] | None = None, **kw: Any) -> WanAnimateOptions:
        """Build from a flat mapping (CLI ``-o``, the resource's ``options``); see the module
        docstring. ``accelerations`` may hold typed configs; a technique given both ways is an
        error. Unknown keys raise with the list of known ones (before torch is imported)."""
        merged = {**(dict(options) if options else {}), **kw}
        unknown = [k for k in merged if k not in cls.known_options()]
        if unknown:
            raise cls.unknown_options_error(unknown)
        flat = {k: merged.pop(k) for k in list(merged) if k in FLAT_ACCELERATION_KEYS}
        parsed = parse_accelerations(flat)
        given = tuple(merged.pop("accelerations", ()) or ())
        clash = {type(c) for c in parsed} & {type(c) for c in given}
        if clash:
            names = ", ".join(sorted(t.__name__ for t in clash))
            raise WanAnimateConfigError(f"wan-animate options: {names} given both as flat keys and in accelerations; give it once")
        if merged.get("model_path") is None and os.environ.get(MODEL_DIR_ENV):
            merged["model_path"] = os.environ[MODEL_DIR_ENV]
        return cls(**merged, accelerations=(*parsed, *given))

    @property
    def preset_spec(self) -> Preset:
        return PRESETS[self.preset]

    @property
    def segment_length(self) -> int:
        return self.segment_frames or self.preset_spec.segment_frames

    def accel(self, config_type: type) -> Any:
        """The configured acceleration of ``config_type``, or None."""
        return next((c for c in self.accelerations if isinstance(c, config_type)), None)

    def has(self, technique: str) -> bool:
        """Whether an acceleration with this ``technique`` name (e.g. ``"fp8"``) is configured
        (checks without importing the acceleration modules)."""
        return any(c.technique == technique for c in self.accelerations)

    def with_accelerations(self, *configs: AccelConfig) -> WanAnimateOptions:
        """A copy where ``configs`` replace the configured ones of the same types."""
        types = {type(c) for c in configs}
        kept = tuple(c for c in self.accelerations if type(c) not in types)
        return dataclasses.replace(self, accelerations=(*kept, *configs))

    def accel_summary(self) -> dict[str, Any]:
        """The acceleration configs for telemetry: ``{technique: settings}`` (empty: stock)."""
        return {c.technique: c.fields() for c in self.accelerations}
