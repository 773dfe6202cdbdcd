"""What the two diffusers backends' options share (``wan-animate`` and ``wan-animate-2``): the
random-weights label, the flat acceleration keys and their one parser, and
:class:`DiffusersOptions`, the base of :class:`~.wan_animate.config.WanAnimateOptions` and
:class:`~.wan_animate_2.config.WanAnimate2Options` (``from_mapping``, the checks both
``__post_init__`` run, the acceleration queries).

The flat keys (:data:`ACCELERATION_KEYS`; the table is in :mod:`.wan_animate.config`) become typed
configs of :mod:`newsmotion_engine.accel`. Those modules import torch, so they are imported only
when such a key is used: importing this module stays cheap and an unknown key fails before torch
loads.

Defaults: an option left unset (``None``) takes the released model's value when a ``model_path`` is
given (the reference code's defaults, the folder's scheduler and, for wan-animate-2, its pipeline
class and guider), else the preset's (random weights). The preset is ignored with a model folder.
:meth:`DiffusersOptions.model_defaults` lists what an unset option resolves to and where it came
from; the backends' ``describe()`` shows it under ``"defaults"``.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from newsmotion_engine.accel.registry import AccelConfig, AccelConfigError, UnknownAccelerationError, ordered
from newsmotion_engine.errors import BadInputError
from newsmotion_engine.render.base import BackendOptionError, BackendOptions

__all__ = [
    "ACCELERATION_KEYS",
    "DTYPES",
    "DiffusersOptions",
    "FLAT_ACCELERATION_KEYS",
    "RANDOM_WEIGHTS_LABEL",
    "parse_accelerations",
    "read_json",
]

RANDOM_WEIGHTS_LABEL = "random weights"
DTYPES = ("bfloat16", "float16", "float32")
_COMPILE = ("off", "blocks", "blocks-cudagraphs")
_FP8 = ("off", "auto", "compute", "storage")
_ACCEL = "newsmotion_engine.accel."
# A diffusers model folder's index files; the first present names the pipeline.
PIPELINE_INDEX_FILES = ("modular_model_index.json", "model_index.json")


def pipeline_index(model_path: str | Path) -> Path | None:
    """The model folder's index file (:data:`PIPELINE_INDEX_FILES`, first present), or None."""
    return next((Path(model_path) / n for n in PIPELINE_INDEX_FILES if (Path(model_path) / n).is_file()), None)


def folder_pipeline_class(model_path: str | Path) -> tuple[str, Path] | None:
    """``(pipeline class name, index file)`` of a model folder: the ``_class_name`` of its
    :func:`pipeline_index`; None when it has none or the file is unreadable (loading the folder
    names the problem)."""
    index = pipeline_index(model_path)
    if index is None:
        return None
    try:
        cls = json.loads(index.read_text()).get("_class_name")
    except (OSError, ValueError, AttributeError):
        return None
    return (cls, index) if isinstance(cls, str) else None


def read_json(path: Path) -> dict[str, Any]:
    """A JSON object from a model folder's config file; :class:`BadInputError` naming the file
    when it is missing, unreadable or not an object."""
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise BadInputError(path, "missing from the model folder (incomplete download?)") from None
    except (OSError, ValueError) as exc:
        raise BadInputError(path, f"is not readable JSON ({exc})") from None
    if not isinstance(data, dict):
        raise BadInputError(path, "is not a JSON object")
    return data


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


def _switch(key: str, module: str, name: str) -> Callable[[dict[str, Any]], AccelConfig | None]:
    """The parser of an on/off technique: option ``key`` true -> ``accel.<module>.<name>()``."""

    def parse(v: dict[str, Any]) -> AccelConfig | None:
        on = v.get(key, False)
        if not isinstance(on, bool):
            raise AccelConfigError("use true or false")
        return _config_class(module, name)() if on else None

    return parse


# Why the Wan backends refuse ``compile_vae`` (accel/compile_vae.py) when the options are read,
# before any weights load.
COMPILE_VAE_REFUSED = "the Wan VAE's causal frame cache would recompile every call; use causal_pad_fold / fused_vae_norm"
# Why the Wan transformers refuse ``one_key_cross`` (accel/one_key_cross.py): nothing to shorten.
ONE_KEY_CROSS_REFUSED = "the Wan transformers' cross-attention reads the text's 512 tokens (and the image's 257), not one"


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
    ("channels_last",): _switch("channels_last", "memory_format", "ChannelsLast"),
    ("conv3d_as_2d",): _switch("conv3d_as_2d", "conv3d", "Conv3dAs2d"),
    ("causal_pad_fold",): _switch("causal_pad_fold", "causal_pad", "CausalPadFold"),
    ("fused_vae_norm",): _switch("fused_vae_norm", "vae_norm", "FusedVaeNorm"),
    ("compile_vae",): _switch("compile_vae", "compile_vae", "CompileVae"),
    ("one_key_cross",): _switch("one_key_cross", "one_key_cross", "OneKeyCross"),
}
FLAT_ACCELERATION_KEYS = tuple(k for keys in ACCELERATION_KEYS for k in keys)


def parse_accelerations(flat: Mapping[str, Any], *, backend: str,
                        error: type[BackendOptionError]) -> tuple[AccelConfig, ...]:  # fmt: skip
    """Typed configs from flat acceleration keys (:data:`ACCELERATION_KEYS`), in registry order.

    Raises:
        error: an unknown key, or a value the technique's config rejects (the message names
            ``backend``, the option keys and the config's rule).
    """
    unknown = sorted(set(flat) - set(FLAT_ACCELERATION_KEYS))
    if unknown:
        raise error(
            f"unknown {backend} acceleration option(s) {', '.join(unknown)}; known: {', '.join(sorted(FLAT_ACCELERATION_KEYS))}"
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
            raise error(f"{backend} option {shown}: {exc}") from None
        if config is not None:
            configs.append(config)
    return ordered(configs)


@dataclass(frozen=True)
class DiffusersOptions(BackendOptions):
    """Base of a diffusers backend's frozen options dataclass: the model fields every such backend
    has come first (``model_path``: a diffusers-format folder, none -> ``preset`` with random
    weights; ``device``: ``"auto"`` / ``"cpu"`` / ``"cuda[:n]"``; ``dtype``: the transformer's
    compute dtype). The subclass declares the rest (``segment_frames``, ``prompt``,
    ``accelerations``, ``cache_root``...) and sets the class variables; its ``__post_init__``
    calls the ``_check_*`` helpers in its own order, so each option's rule is written once.

    :meth:`from_mapping` is the edge parser: model and sampling keys map onto fields, the flat
    acceleration keys become typed configs, ``accelerations`` may carry typed configs too (a
    technique given both ways is an error), unknown keys raise with the list of known ones
    (before torch is imported), and ``model_path`` defaults to ``$<model_dir_env>``.

    Defaults (see the module docstring): with a ``model_path`` the preset is ignored and an unset
    option takes the released model's value (``released_segment_frames``, the folder's
    ``scheduler/scheduler_config.json``...), else the preset's; :meth:`model_defaults` says what
    each resolves to and where it came from.
    """

    config_error: ClassVar[type[BackendOptionError]] = BackendOptionError
    model_dir_env: ClassVar[str] = ""
    presets: ClassVar[Mapping[str, Any]] = {}
    released_segment_frames: ClassVar[int] = 81  # frames per segment of the released model's reference code
    default_scheduler: ClassVar[str] = ""  # scheduler class when the config names none (presets)
    # technique -> why it does not apply to this model: :meth:`_ordered_accelerations` refuses it with the reason
    refused_accelerations: ClassVar[Mapping[str, str]] = {}
    model_path: str | None = None
    preset: str = "tiny"
    device: str = "auto"
    dtype: str = "bfloat16"
    # "matte": every generated frame's person composited onto the exact spec.background
    # (render/chroma.py); "off": the model's raw frames.
    chroma: str = "matte"
    # LoRAs fused into the transformer before any acceleration (render/backends/wan/lora.py): "PATH[:SCALE]",
    # several comma- or semicolon-separated, or a list; normalized to a tuple of LoraSpec.
    lora: Any = ()

    # ------------------------------------------------------------------ parsing
    @classmethod
    def known_options(cls) -> tuple[str, ...]:
        fields = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        return tuple(sorted(fields | set(FLAT_ACCELERATION_KEYS)))

    @classmethod
    def unknown_options_error(cls, unknown: list[str]) -> BackendOptionError:
        return cls.config_error(str(super().unknown_options_error(unknown)))

    @classmethod
    def parse_flat_accelerations(cls, flat: Mapping[str, Any]) -> tuple[AccelConfig, ...]:
        """The typed configs of the flat acceleration keys, as this backend takes them."""
        return parse_accelerations(flat, backend=cls.backend, error=cls.config_error)

    @classmethod
    def from_mapping(cls, options: Mapping[str, Any] | None = None, **kw: Any):
        """Build from a flat mapping (CLI ``-o``, the resource's ``options``; ``kw`` overrides
        it); see the class docstring."""
        merged = {**(dict(options) if options else {}), **kw}
        unknown = [k for k in merged if k not in cls.known_options()]
        if unknown:
            raise cls.unknown_options_error(unknown)
        flat = {k: merged.pop(k) for k in list(merged) if k in FLAT_ACCELERATION_KEYS}
        parsed = cls.parse_flat_accelerations(flat)
        given = tuple(merged.pop("accelerations", ()) or ())
        clash = {type(c) for c in parsed} & {type(c) for c in given}
        if clash:
            names = ", ".join(sorted(t.__name__ for t in clash))
            raise cls.config_error(f"{cls.backend} options: {names} given both as flat keys and in accelerations; give it once")
        if merged.get("model_path") is None and os.environ.get(cls.model_dir_env):
            merged["model_path"] = os.environ[cls.model_dir_env]
        return cls(**merged, accelerations=(*parsed, *given))

    # ------------------------------------------------------------------ checks (for __post_init__)
    def _bad(self, name: str, rule: str) -> BackendOptionError:
        return self.config_error(str(self.option_error(name, rule)))

    def _check_choice(self, name: str, choices: Any) -> None:
        if getattr(self, name) not in choices:
            raise self._bad(name, f"use one of {', '.join(choices)}")

    def _check_steps(self) -> None:
        s = self.steps  # type: ignore[attr-defined]
        if not isinstance(s, int) or isinstance(s, bool) or not 1 <= s <= 1000:
            raise self._bad("steps", "use an integer 1..1000")

    def _check_guidance_scale(self) -> None:
        g = self.guidance_scale  # type: ignore[attr-defined]
        if not isinstance(g, (int, float)) or isinstance(g, bool) or not 1.0 <= float(g) <= 30.0:
            raise self._bad("guidance_scale", "use 1.0 (no CFG) .. 30")

    def _check_segment_frames(self, example: int) -> None:
        n = self.segment_frames  # type: ignore[attr-defined]
        if n is not None and (not isinstance(n, int) or n < 5 or (n - 1) % 4):
            raise self._bad("segment_frames", f"use 4k+1 frames, at least 5 (e.g. {example})")

    def _check_only_our_attention(self, where: str) -> None:
        """A UNet backend takes only ``attention=fp8-triton`` (our kernel, wired into ``where``)."""
        others = sorted({getattr(c, "kernel", None) for c in self.accelerations if c.technique == "attention"} - {"fp8-triton"})  # type: ignore[attr-defined]
        if others:
            raise self.config_error(f"{self.backend} option attention={others[0]!r}: use 'fp8-triton' (our 8-bit kernel in "
                                    f"{where}); without the option it runs SDPA")  # fmt: skip

    def _check_strings(self, optional: tuple[str, ...], required: tuple[str, ...]) -> None:
        for name in optional:
            if getattr(self, name) is not None and not isinstance(getattr(self, name), str):
                raise self._bad(name, "use a string")
        for name in required:
            if not isinstance(getattr(self, name), str):
                raise self._bad(name, "use a string")

    def _check_lora(self) -> None:
        """``lora`` as a tuple of :class:`~newsmotion_engine.render.backends.wan.lora.LoraSpec` (the files are
        read when the model loads)."""
        from newsmotion_engine.render.backends.wan.lora import parse_lora_option

        try:
            object.__setattr__(self, "lora", parse_lora_option(self.lora))
        except (TypeError, ValueError) as exc:
            raise self._bad("lora", f"{exc} (PATH[:SCALE], several comma- or semicolon-separated, or a list)") from None

    def _ordered_accelerations(self) -> tuple[AccelConfig, ...]:
        """``accelerations`` checked (none of :attr:`refused_accelerations`) and in the registry's application order."""
        accelerations = self.accelerations  # type: ignore[attr-defined]
        if isinstance(accelerations, (str, bytes, Mapping)) or not hasattr(accelerations, "__iter__"):
            raise self._bad("accelerations", "give a sequence of acceleration configs (newsmotion_engine.accel)")
        try:
            configs = ordered(accelerations)
        except (AccelConfigError, UnknownAccelerationError) as exc:
            raise self.config_error(f"{self.backend} option accelerations: {exc}") from None
        for c in configs:
            if c.technique in self.refused_accelerations:
                raise self.config_error(f"{self.backend}: acceleration {type(c).__name__} does not apply: {self.refused_accelerations[c.technique]}")
        return configs

    # ------------------------------------------------------------------ queries
    @property
    def preset_spec(self) -> Any:
        return self.presets[self.preset]  # type: ignore[attr-defined]

    @property
    def defaults_source(self) -> str:
        """Where an unset option's value comes from: the model folder, else the preset."""
        return f"model folder {self.model_path}" if self.model_path else f"preset {self.preset!r} (random weights)"

    @property
    def default_segment_frames(self) -> int:
        """Frames per segment when ``segment_frames`` is unset: the released model's with a model
        folder, else the preset's."""
        return self.released_segment_frames if self.model_path else self.preset_spec.segment_frames

    @property
    def segment_length(self) -> int:
        return self.segment_frames or self.default_segment_frames  # type: ignore[attr-defined]

    def folder_json(self, relative: str) -> dict[str, Any]:
        """A config file of the model folder (``relative`` to ``model_path``), read and checked."""
        if not self.model_path:
            raise ValueError("no model_path: there is no folder to read")
        return read_json(Path(self.model_path) / relative)

    def preset_scheduler_config(self) -> dict[str, Any]:
        """The scheduler config of a preset (random weights)."""
        raise NotImplementedError

    def scheduler_config(self) -> dict[str, Any]:
        """The scheduler config: the folder's ``scheduler/scheduler_config.json`` (its
        ``_class_name`` included), else the preset's."""
        if self.model_path:
            return self.folder_json("scheduler/scheduler_config.json")
        return {"_class_name": self.default_scheduler, **self.preset_scheduler_config()}

    @staticmethod
    def scheduler_shift(config: Mapping[str, Any]) -> float | None:
        """The flow shift a scheduler config sets (``flow_shift``: UniPC / DPM; ``shift``: flow-matching Euler)."""
        for key in ("flow_shift", "shift"):
            if isinstance(config.get(key), (int, float)):
                return float(config[key])
        return None

    def model_defaults(self) -> dict[str, Any]:
        """What the options left unset resolve to, and where from (``source``), for ``describe()``.
        The subclass adds its own entries; a folder file that cannot be read is reported, not
        raised (loading the folder raises)."""
        info: dict[str, Any] = {"source": self.defaults_source, "segment_frames": self.default_segment_frames}
        try:
            config = self.scheduler_config()
        except BadInputError as exc:
            info["scheduler"] = f"unreadable: {exc}"
        else:
            info["scheduler"] = config.get("_class_name") or self.default_scheduler
            info["shift"] = self.scheduler_shift(config)
        return info

    def accel(self, config_type: type) -> Any:
        """The configured acceleration of ``config_type``, or None."""
        return next((c for c in self.accelerations if isinstance(c, config_type)), None)  # type: ignore[attr-defined]

    def has(self, technique: str) -> bool:
        """Whether an acceleration with this ``technique`` name (e.g. ``"fp8"``) is configured
        (checks without importing the acceleration modules)."""
        return any(c.technique == technique for c in self.accelerations)  # type: ignore[attr-defined]

    def with_accelerations(self, *configs: AccelConfig):
        """A copy where ``configs`` replace the configured ones of the same types."""
        types = {type(c) for c in configs}
        kept = tuple(c for c in self.accelerations if type(c) not in types)  # type: ignore[attr-defined]
        return dataclasses.replace(self, accelerations=(*kept, *configs))  # type: ignore[type-var]

    def accel_summary(self) -> dict[str, Any]:
        """The acceleration configs for telemetry: ``{technique: settings}`` (empty: stock)."""
        return {c.technique: c.fields() for c in self.accelerations}  # type: ignore[attr-defined]
