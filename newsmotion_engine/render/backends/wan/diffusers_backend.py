"""What the two diffusers render backends share (``wan-animate``, ``wan-animate-2``):
:class:`DiffusersBackend`, the base of :class:`~.wan_animate.backend.WanAnimateBackend` and
:class:`~.wan_animate_2.backend.WanAnimate2Backend`.

The base owns the lifecycle (``load`` applies the configured accelerations once through the
acceleration registry; ``close``; ``describe`` with the random-weights note), the backend
sub-caches' locations, keys and ``prepare_*`` / ``load_*`` (``prepare_*`` build through
:func:`cachedir.ensure`; ``load_*`` only read and raise :class:`BackendCacheError` naming what to
materialize), ``frames`` (size check, then the subclass's ``_frames`` with CUDA out-of-memory
turned into the backend's :class:`DiffusersOOMError` naming what reduces memory, each frame
composited onto the exact chroma colour by :mod:`~newsmotion_engine.render.chroma` unless the
``chroma`` option is ``"off"``).

A subclass sets ``name``, ``needs``, ``options_class``, ``caches`` (its caches module: the segment
plan, the artifact directories, readers and ``FORMAT_VERSION``) and ``oom_error``, and writes what
differs: ``_load_components``, ``plan``, ``_build_guidance`` / ``_build_persona``, ``_frames``,
``_settings`` (its ``describe`` entries), ``_memory_tips`` and the small hooks below.

``describe()["defaults"]`` is :meth:`~.diffusers_config.DiffusersOptions.model_defaults`: what
every option left unset resolves to and where from (the model folder, or the preset).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from newsmotion_engine import cachedir
from newsmotion_engine.errors import CacheError, NewsmotionError
from newsmotion_engine.render.base import BackendCacheError, BackendNeeds, InvalidSpecError, RenderSpec
from newsmotion_engine.render.backends.wan.artifacts import source_digest
from newsmotion_engine.render.backends.wan.diffusers_config import RANDOM_WEIGHTS_LABEL
from newsmotion_engine.render.backends.wan.lora import steps_warning, warn_once
from newsmotion_engine.render.backends.wan.prompts import loop_prompt
from newsmotion_engine.render.read_ahead import read_ahead

__all__ = ["DiffusersBackend", "DiffusersOOMError", "check_size"]

# Frames the model may run ahead of the chroma matte: a whole segment (wan-animate's 77,
# wan-animate-2's 81) plus the matte's in-flight frames, so the next segment starts at once
# (about 450 MB of frames at 720x1280).
READ_AHEAD_FRAMES = 160

# What a memory-reducing acceleration's tip says, when it is not configured.
_MEMORY_TIPS = {
    "fp8": "fp8='auto' (halves transformer weights)",
    "vae_tiling": "vae_tiling=True",
    "ffn_chunks": "ffn_chunks=8",
}


class DiffusersOOMError(NewsmotionError, RuntimeError):
    """The GPU ran out of memory; the message names the settings that reduce memory."""


def check_size(backend: str, spec: RenderSpec) -> None:
    """Wan sizes are multiples of 16 (VAE x8, patch x2); both Wan backends refuse others."""
    if spec.width % 16 or spec.height % 16:
        raise InvalidSpecError(
            f"{backend} renders sizes divisible by 16 (VAE x8, patch x2); {spec.width}x{spec.height} is not, "
            f"e.g. use {spec.width // 16 * 16}x{spec.height // 16 * 16}"
        )


class DiffusersBackend:
    """See the module docstring. Construct a subclass through the registry (options validated
    first), or ``Subclass(options)``."""

    name: ClassVar[str]
    needs: ClassVar[BackendNeeds]
    options_class: ClassVar[type]
    caches: ClassVar[Any]  # the backend's caches module
    oom_error: ClassVar[type[DiffusersOOMError]] = DiffusersOOMError
    # Driven by the loop's driving clip (guidance/driver.py): prepare_guidance builds the clip
    # first, and the guidance sub-cache is keyed on the clip's origin and digest.
    driven_by_clip: ClassVar[bool] = False
    # Pose-driven models: a viseme track is accepted and ignored (an audio-driven subclass says True).
    moves_lips: ClassVar[bool] = False
    # Nor is a speech track heard (the audio-driven subclass, echomimic-v3, says True).
    hears_speech: ClassVar[bool] = False
    # Whether few sampling steps without a distillation LoRA is a mistake worth a warning (the Wan
    # models' lightx2v-style LoRAs); a model released for few steps, or one no Wan LoRA fits, says no.
    warns_few_steps: ClassVar[bool] = True
    # Generates at the model's 24 fps (guidance/driver.py MODEL_FPS), re-timed to the loop's rate.
    retimes_to_loop_rate: ClassVar[bool] = False

    def __init__(self, options: Any) -> None:
        self.options = options
        self.components: Any = None
        self.applied: Any = None  # registry.AppliedAccelerations once loaded
        self.accel_report: dict[str, Any] = {}
        self.last_render: dict[str, Any] = {}

    @classmethod
    def from_options(cls, **options: Any):
        return cls(cls.options_class.from_mapping(options))

    # ------------------------------------------------------------------ lifecycle
    def _load_components(self) -> Any:
        """The subclass's render components (transformer, VAE, scheduler config), not accelerated."""
        raise NotImplementedError

    def _loaded(self) -> None:
        """Called once the components are loaded and accelerated (for per-backend state)."""

    def _released(self) -> None:
        """Called by :meth:`close` after the components are dropped (for per-backend state)."""

    def load(self) -> None:
        """Load transformer + VAE and apply the configured accelerations (once, through the
        acceleration registry, in its order)."""
        if self.components is not None:
            return
        from newsmotion_engine.accel.fp8 import module_weight_gib
        from newsmotion_engine.accel.registry import apply_accelerations

        t0 = time.perf_counter()
        comps = self._load_components()
        loaded_gib = module_weight_gib(comps.transformer)
        # A failure leaves no half-accelerated components behind: they are dropped with the error.
        self.applied = apply_accelerations(comps, self.options.accelerations)
        self.components = comps
        self.accel_report = {
            "weight_gib_loaded": round(loaded_gib, 3),
            **self.applied.report,
            "weight_gib": round(module_weight_gib(comps.transformer), 3),
            "load_s": round(time.perf_counter() - t0, 3),
        }
        self._loaded()
        if self.warns_few_steps:
            warn_once(logging.getLogger(type(self).__module__), steps_warning(self.options))
        if comps.identity["weights"] == RANDOM_WEIGHTS_LABEL:
            logging.getLogger(type(self).__module__).warning(
                "%s: preset %r with RANDOM WEIGHTS: frames are noise, for timing only", self.name, self.options.preset
            )

    def close(self) -> None:
        """Drop the models (and the subclass's state) and free GPU memory. Idempotent."""
        if self.components is None:
            return
        device = self.components.device
        self.components = None
        self.applied = None
        self._released()
        import gc

        gc.collect()
        if getattr(device, "type", "cpu") == "cuda":
            import torch

            torch.cuda.empty_cache()

    def _settings(self) -> dict[str, Any]:
        """The subclass's :meth:`describe` entries between the model's and the run's."""
        raise NotImplementedError

    def describe(self) -> dict[str, Any]:
        o = self.options
        info: dict[str, Any] = {
            "weights": self.components.weights_label if self.components else (f"folder {o.model_path}" if o.model_path else RANDOM_WEIGHTS_LABEL),
            "preset": None if o.model_path else o.preset,
            "device": str(self.components.device) if self.components else o.device,
            "dtype": o.dtype,
            **self._settings(),
            "defaults": o.model_defaults(),
        }
        if self.components is not None:
            info["model_digest"] = self.components.identity["digest"]
        if self.accel_report:
            info["accel_report"] = self.accel_report
        if self.last_render:
            info["last_render"] = self.last_render
        if o.lora:
            info["loras"] = [str(spec) for spec in o.lora]
        if self.warns_few_steps and (warning := steps_warning(o)):
            info["warning"] = warning
        if info["weights"] == RANDOM_WEIGHTS_LABEL:
            info["note"] = "random weights: frames are noise-shaped; use for timing and memory only"
        return info

    # ------------------------------------------------------------------ caches
    def _check_spec(self, spec: RenderSpec) -> None:
        check_size(self.name, spec)

    def _cache_root(self) -> Path | None:
        return Path(self.options.cache_root) if self.options.cache_root else None

    def plan(self, frames: int) -> Any:
        """The segment plan (:class:`~.segments.SegmentPlan`) of a clip of ``frames`` frames."""
        raise NotImplementedError

    def _loop_frames(self, guidance: Any, spec: RenderSpec) -> int:
        """How many frames the loop's guidance sub-cache is planned for (default: every keypoint frame)."""
        return int(np.asarray(guidance.keypoints).shape[0])

    def _guidance_dir(self, guidance: Any, spec: RenderSpec) -> Path:
        return self.caches.guidance_artifacts_dir(Path(guidance.path), spec.width, spec.height, self._cache_root())

    def _guidance_params_extra(self, spec: RenderSpec) -> dict[str, Any]:
        """The subclass's own guidance sub-cache params (after the shared ones)."""
        return {}

    def guidance_params(self, guidance: Any, spec: RenderSpec, plan: Any) -> tuple[dict, dict]:
        """(source, params) of the guidance sub-cache for this loop, size and model."""
        o = self.options
        source = {"kind": "guidance", "sha256": source_digest(guidance)}
        params = {
            "format": self.caches.FORMAT_VERSION,
            "size": [spec.width, spec.height],
            "segments": plan.as_dict(),
            "model": self.components.identity["digest"],
            "prompt": loop_prompt(guidance, o.prompt),
            "negative_prompt": o.negative_prompt,
            **self._guidance_params_extra(spec),
        }
        if self.driven_by_clip:
            params["driving"] = self._driving_clip_key(guidance, spec)
        return source, params

    @staticmethod
    def _driving_clip_key(guidance: Any, spec: RenderSpec) -> dict[str, Any]:
        """The loop's driving clip at ``spec``'s size, as the guidance sub-cache is keyed on it."""
        from newsmotion_engine.guidance.driver import load_driving_clip

        try:
            clip = load_driving_clip(guidance, spec.width, spec.height)
        except CacheError as exc:
            # No current clip: no sub-cache can match these params, so a render raises the
            # not-ready error, whose remedy (prepare_guidance) builds the clip first.
            return {"not_ready": exc.problem}
        return {"origin": clip.origin, "fps": clip.fps, "digest": clip.digest}

    def persona_params(self, persona: Any, spec: RenderSpec) -> tuple[dict, dict]:
        source = {"kind": "persona", "sha256": source_digest(persona)}
        params = {
            "format": self.caches.FORMAT_VERSION,
            "size": [spec.width, spec.height],
            "background": list(spec.background),
            "model": self.components.identity["digest"],
        }
        return source, params

    def _guidance_location(self, guidance: Any, spec: RenderSpec, frames: int | None = None):
        self.load()
        self._check_spec(spec)
        plan = self.plan(self._loop_frames(guidance, spec) if frames is None else frames)
        path = self._guidance_dir(guidance, spec)
        return plan, path, *self.guidance_params(guidance, spec, plan)

    def _persona_location(self, persona: Any, spec: RenderSpec):
        self.load()
        self._check_spec(spec)
        path = self.caches.persona_artifacts_dir(Path(persona.path), spec.width, spec.height, self._cache_root())
        return path, *self.persona_params(persona, spec)

    def _prepared_guidance(self, path: Path, plan: Any, spec: RenderSpec) -> bool:
        """Called by :meth:`prepare_guidance` once the guidance sub-cache at ``path`` is current:
        builds (or validates) what derives from it; ``True`` when something was built."""
        return False

    def prepare_guidance(self, guidance: Any, spec: RenderSpec) -> bool:
        """Build (or validate) the guidance sub-cache of ``guidance`` (a loaded guidance cache) at
        ``spec``'s size, then what derives from it (:meth:`_prepared_guidance`): ``True`` when
        something was built, ``False`` when a current one was there. The only place the encoders
        run for a loop (the VAE encoder, the text encoder, and CLIP for wan-animate-2; loaded for
        the build, then freed). A backend ``driven_by_clip`` builds (or reuses) the loop's driving
        clip at ``spec``'s size first (CPU, no model; in Dagster the ``driving_clip`` asset has
        built it already)."""
        clip_built = False
        if self.driven_by_clip:
            from newsmotion_engine.guidance.driver import ensure_driving_clip

            self._check_spec(spec)
            _, clip_built = ensure_driving_clip(guidance, spec.width, spec.height)
        C = self.caches
        plan, path, source, params = self._guidance_location(guidance, spec)
        read = lambda: C.read_guidance_artifacts(path, source, params, plan, spec.width, spec.height)  # noqa: E731
        _, built = cachedir.ensure(path, read, lambda: self._build_guidance(path, guidance, spec, plan, source, params))
        return self._prepared_guidance(path, plan, spec) or built or clip_built

    def prepare_persona(self, persona: Any, spec: RenderSpec) -> bool:
        """Build (or validate) the persona sub-cache (reference latents, CLIP image tokens) of
        ``persona`` (a loaded persona cache) at ``spec``'s size and background: ``True`` when built.
        Runs the VAE encoder and the image encoder."""
        C = self.caches
        path, source, params = self._persona_location(persona, spec)
        read = lambda: C.read_persona_artifacts(path, source, params, spec.width, spec.height)  # noqa: E731
        _, built = cachedir.ensure(path, read, lambda: self._build_persona(path, persona, spec, source, params))
        return built

    def _not_ready(self, exc: CacheError, tier: str, cache_id: Any, spec: RenderSpec) -> BackendCacheError:
        return BackendCacheError.from_cache_error(exc, backend=self.name, tier=tier, cache_id=str(cache_id),
                                                  size=f"{spec.width}x{spec.height}")  # fmt: skip

    def load_guidance(self, guidance: Any, spec: RenderSpec, frames: int | None = None) -> Any:
        """The guidance sub-cache's arrays for a clip of ``frames`` frames (default: the loop's).

        Raises:
            BackendCacheError: missing, stale or damaged (or built at another size); the message
                says what to build. Nothing is built here.
        """
        plan, path, source, params = self._guidance_location(guidance, spec, frames)
        try:
            return self.caches.read_guidance_artifacts(path, source, params, plan, spec.width, spec.height)
        except CacheError as exc:
            raise self._not_ready(exc, "guidance", getattr(guidance, "loop_id", path.parent.parent.name), spec) from None

    def load_persona(self, persona: Any, spec: RenderSpec) -> Any:
        """The persona sub-cache's arrays. Raises :class:`BackendCacheError` like :meth:`load_guidance`."""
        path, source, params = self._persona_location(persona, spec)
        try:
            return self.caches.read_persona_artifacts(path, source, params, spec.width, spec.height)
        except CacheError as exc:
            raise self._not_ready(exc, "persona", getattr(persona, "persona_id", path.parent.parent.name), spec) from None

    def _build_guidance(self, path: Path, guidance: Any, spec: RenderSpec, plan: Any, source: dict, params: dict) -> None:
        raise NotImplementedError

    def _build_persona(self, path: Path, persona: Any, spec: RenderSpec, source: dict, params: dict) -> None:
        raise NotImplementedError

    def _cache_extra(self) -> dict[str, str]:
        """What every sub-cache's metadata says about its maker."""
        return {"backend": self.name, "weights": self.components.weights_label}

    # ------------------------------------------------------------------ render
    def frames(
        self, guidance: Any, persona: Any, keypoints: np.ndarray, spec: RenderSpec, *, visemes: Any = None, speech: Any = None
    ) -> Iterator[np.ndarray]:
        """Yield the clip's frames (uint8 RGB ``[H, W, 3]``), one segment decoded at a time.
        ``visemes`` and ``speech`` are ignored here (see :class:`~newsmotion_engine.render.base.Backend`):
        the audio-driven subclass reads ``speech`` in its own ``frames``.

        Raises:
            BackendCacheError: a sub-cache is missing, stale, or at another size (call
                ``prepare_guidance`` / ``prepare_persona`` first); raised before any denoising.
            DiffusersOOMError: (the backend's ``oom_error``) the GPU ran out of memory; the
                message names what reduces it.
        """
        from newsmotion_engine.render.chroma import composite_frames

        self.load()
        self._check_spec(spec)
        with self._oom_explained(spec):
            model = self._model_frames_no_grad(guidance, persona, keypoints, spec)
            if not self._records_cuda_graphs():
                # The next segment denoises while this one's frames are matted and consumed.
                model = read_ahead(model, READ_AHEAD_FRAMES, name=f"{self.name}-frames")
            # Re-timing blends frames on the CPU: here, in the consumer's thread, it overlaps the
            # next segment's denoise instead of delaying its start (a segment's ~100 frames at once).
            model = self._retimed(model, guidance, keypoints)
            # Green screen: each generated frame's person matted onto the exact spec.background
            # (render/chroma.py), unless chroma="off".
            yield from composite_frames(model, spec.background, getattr(self.options, "chroma", "matte"))

    def _model_frames_no_grad(self, guidance: Any, persona: Any, keypoints: np.ndarray, spec: RenderSpec) -> Iterator[np.ndarray]:
        """:meth:`_model_frames` without autograd in whichever thread runs it (grad mode is per thread)."""
        import torch

        with torch.no_grad():
            yield from self._model_frames(guidance, persona, keypoints, spec)

    def _records_cuda_graphs(self) -> bool:
        """Whether compile records CUDA graphs (trees are per thread: such a render stays in the
        caller's thread, where the warm-up recorded them)."""
        return any(getattr(config, "cudagraphs", False) for config in getattr(self.options, "accelerations", ()))

    def _model_frames(self, guidance: Any, persona: Any, keypoints: np.ndarray, spec: RenderSpec) -> Iterator[np.ndarray]:
        """The raw generated frames, :meth:`_model_frame_count` of them (:meth:`_retimed` makes
        them the clip's)."""
        return self._frames(guidance, persona, keypoints, spec)

    def _model_frame_count(self, guidance: Any, keypoints: np.ndarray) -> int:
        """The frames :meth:`_model_frames` yields for a clip of ``len(keypoints)``: as many, or for a
        backend at the model's 24 fps (``retimes_to_loop_rate``) the same duration at that rate."""
        from newsmotion_engine.guidance.driver import loop_fps, model_frame_count

        T = int(np.asarray(keypoints).shape[0])
        return model_frame_count(T, loop_fps(guidance)) if self.retimes_to_loop_rate else T

    def _retimed(self, frames: Iterator[np.ndarray], guidance: Any, keypoints: np.ndarray) -> Iterator[np.ndarray]:
        """:meth:`_model_frames`' frames as the clip's ``len(keypoints)`` frames, neighbours blended
        (``wan.retime``; as they are when the counts match). Runs in the consumer's thread, after
        the read-ahead."""
        from newsmotion_engine.render.backends.wan.retime import retime_frames

        return retime_frames(frames, self._model_frame_count(guidance, keypoints), int(np.asarray(keypoints).shape[0]))

    def _frames(self, guidance: Any, persona: Any, keypoints: np.ndarray, spec: RenderSpec) -> Iterator[np.ndarray]:
        raise NotImplementedError

    @contextlib.contextmanager
    def _oom_explained(self, spec: RenderSpec) -> Iterator[None]:
        """CUDA out-of-memory -> ``oom_error`` naming what reduces memory."""
        try:
            yield
        except Exception as exc:  # only CUDA OOM is translated; everything else propagates as is
            if type(exc).__name__ == "OutOfMemoryError":
                raise self.oom_error(self.oom_message(spec)) from exc
            raise

    def _memory_tips(self, spec: RenderSpec) -> list[str]:
        """The subclass's settings that reduce memory, as configured now (before the segment
        length and the render size, which every backend names last)."""
        raise NotImplementedError

    def _unused_memory_accelerations(self, *techniques: str) -> list[str]:
        """The tips of the memory-reducing accelerations among ``techniques`` not configured."""
        return [_MEMORY_TIPS[t] for t in techniques if not self.options.has(t)]

    def oom_message(self, spec: RenderSpec) -> str:
        tips = [*self._memory_tips(spec), f"a shorter segment_frames (now {self.options.segment_length})",
                f"a smaller render size (now {spec.width}x{spec.height})"]  # fmt: skip
        return f"{self.name} ran out of GPU memory at {spec.width}x{spec.height}; reduce memory with: " + ", ".join(tips)
