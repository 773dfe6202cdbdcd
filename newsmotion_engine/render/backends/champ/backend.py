"""The ``champ`` render backend: Champ (Zhu et al., "Champ: Controllable and Consistent Human
Image Animation with 3D Parametric Guidance", https://arxiv.org/abs/2403.14781) on diffusers
components, on the :class:`~..wan.diffusers_backend.DiffusersBackend` lifecycle (load, describe,
sub-cache plumbing, chroma compositing, out-of-memory message).

Per loop (Tier 1, ``prepare_guidance``): the SMPL fit of the loop's keypoints (:mod:`.fit`).
Per persona (Tier 2, ``prepare_persona``): the reference frame's VAE latents and CLIP embedding.
Per render (``frames``, which only loads those): the body posed by the cached fit and placed on
the retargeted keypoints, rendered as depth / normal / semantic maps plus the DWPose skeleton
(:mod:`.maps`) at the model's size, encoded by the guidance encoders, denoised in context windows
(:mod:`.denoise`), decoded frame by frame and scaled onto the render size.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from newsmotion_engine.errors import BadInputError, CacheError
from newsmotion_engine.render.base import BackendNeeds, RenderSpec
from newsmotion_engine.render.backends.champ import caches
from newsmotion_engine.render.backends.champ.config import NAME, ChampOptions
from newsmotion_engine.render.backends.champ.fit import FitConfig
from newsmotion_engine.render.backends.wan.artifacts import reference_frame, source_digest
from newsmotion_engine.render.backends.wan.diffusers_backend import DiffusersBackend, DiffusersOOMError

__all__ = ["ChampBackend", "ChampOOMError"]

log = logging.getLogger(__name__)


class ChampOOMError(DiffusersOOMError):
    """champ ran out of GPU memory."""


class ContextPlan:
    """The clip's context windows (what ``DiffusersBackend`` calls the segment plan)."""

    def __init__(self, frames: int, context: int, overlap: int) -> None:
        from newsmotion_engine.render.backends.champ.denoise import context_windows

        self.frames, self.context, self.overlap = frames, context, overlap
        self.windows = context_windows(frames, context, overlap)

    def as_dict(self) -> dict[str, Any]:
        return {"frames": self.frames, "context_frames": self.context, "overlap": self.overlap, "windows": len(self.windows)}


class ChampBackend(DiffusersBackend):
    """See the module docstring. Construct through the registry: ``get_backend("champ", smpl_model=...)``."""
    warns_few_steps = False  # Champ is an SD 1.5 model: no Wan distillation LoRA fits it

    name: ClassVar[str] = NAME
    needs: ClassVar[BackendNeeds] = BackendNeeds(guidance=frozenset({"keypoints", "smpl_pose"}),
                                                 persona=frozenset({"portrait", "person_mask", "ref_latents", "clip_embeds"}))  # fmt: skip
    options_class: ClassVar[type] = ChampOptions
    caches: ClassVar[Any] = caches
    oom_error: ClassVar[type[DiffusersOOMError]] = ChampOOMError
    fit_config: ClassVar[FitConfig] = FitConfig()

    def __init__(self, options: ChampOptions) -> None:
        super().__init__(options)
        self.smpl: Any = None

    # ------------------------------------------------------------------ lifecycle
    def _load_components(self) -> Any:
        from newsmotion_engine.render.backends.champ.components import load_components
        from newsmotion_engine.render.backends.champ.smpl import load_smpl_model

        self.smpl = load_smpl_model(self.options.smpl_model)  # before the weights: a bad file fails fast
        comps = load_components(self.options)
        # What Compile compiles in the UNet, set whatever the options at load: the accelerations
        # can be applied to loaded components later (the benchmark switches variants that way).
        comps.transformer._repeated_blocks = ["BasicTransformerBlock"]
        return comps

    def _released(self) -> None:
        self.smpl = None

    def _settings(self) -> dict[str, Any]:
        o = self.options
        return {
            "steps": o.steps,
            "guidance_scale": o.guidance_scale,
            "context_frames": o.context_frames,
            "context_overlap": o.context_overlap,
            "model_width": o.model_width,
            "reference_pass": o.reference_pass,
            "smpl_model": self.smpl.sha256 if self.smpl is not None else o.smpl_model,
            "accelerations": o.accel_summary(),
            "guidance": "SMPL depth / normal / semantic maps (fitted pose, mean shape) + DWPose skeleton, rendered per clip",
        }

    # ------------------------------------------------------------------ caches
    def _check_spec(self, spec: RenderSpec) -> None:
        """Any even render size: the model renders at its own size (:meth:`ChampOptions.model_size`)."""

    def plan(self, frames: int) -> ContextPlan:
        return ContextPlan(frames, self.options.context_frames, self.options.context_overlap)

    def _guidance_dir(self, guidance: Any, spec: RenderSpec) -> Path:
        return caches.guidance_artifacts_dir(Path(guidance.path), self.smpl.sha256, self._cache_root())

    def guidance_params(self, guidance: Any, spec: RenderSpec, plan: Any) -> tuple[dict, dict]:
        source = {"kind": "guidance", "sha256": source_digest(guidance)}
        return source, {"format": caches.FORMAT_VERSION, "smpl_model": self.smpl.sha256, "fit": self.fit_config.as_dict()}

    def persona_params(self, persona: Any, spec: RenderSpec) -> tuple[dict, dict]:
        source, params = super().persona_params(persona, spec)
        return source, {**params, "model_size": list(self.options.model_size(spec.width, spec.height))}

    def prepare_guidance(self, guidance: Any, spec: RenderSpec) -> bool:
        from newsmotion_engine import cachedir

        plan, path, source, params = self._guidance_location(guidance, spec)
        read = lambda: caches.read_guidance_artifacts(path, source, params, plan.frames)  # noqa: E731
        _, built = cachedir.ensure(path, read, lambda: self._build_guidance(path, guidance, spec, plan, source, params))
        return built

    def load_guidance(self, guidance: Any, spec: RenderSpec, frames: int | None = None) -> Any:
        plan, path, source, params = self._guidance_location(guidance, spec, frames)
        try:
            return caches.read_guidance_artifacts(path, source, params, plan.frames)
        except CacheError as exc:
            raise self._not_ready(exc, "guidance", getattr(guidance, "loop_id", path.parent.parent.name), spec) from None

    def prepare_persona(self, persona: Any, spec: RenderSpec) -> bool:
        from newsmotion_engine import cachedir

        path, source, params = self._persona_location(persona, spec)
        mw, mh = self.options.model_size(spec.width, spec.height)
        read = lambda: caches.read_persona_artifacts(path, source, params, mw, mh)  # noqa: E731
        _, built = cachedir.ensure(path, read, lambda: self._build_persona(path, persona, spec, source, params))
        return built

    def load_persona(self, persona: Any, spec: RenderSpec) -> Any:
        path, source, params = self._persona_location(persona, spec)
        mw, mh = self.options.model_size(spec.width, spec.height)
        try:
            return caches.read_persona_artifacts(path, source, params, mw, mh)
        except CacheError as exc:
            raise self._not_ready(exc, "persona", getattr(persona, "persona_id", path.parent.parent.name), spec) from None

    def _build_guidance(self, path: Path, guidance: Any, spec: RenderSpec, plan: Any, source: dict, params: dict) -> None:
        from newsmotion_engine.render.backends.champ.fit import fit_pose

        t0 = time.perf_counter()
        kp = np.asarray(guidance.keypoints)
        size = (int(getattr(guidance, "width", 720)), int(getattr(guidance, "height", 1280)))
        try:
            fit = fit_pose(self.smpl, kp, size, self.fit_config)
        except ValueError as exc:
            raise BadInputError(Path(guidance.path), f"cannot fit the SMPL body to loop {getattr(guidance, 'loop_id', '?')!r}: {exc}") from None
        caches.write_guidance_artifacts(path, caches.BodyFit(fit.pose, fit.error), source=source, params=params,
                                        extra={**self._cache_extra(), "fit_s": round(time.perf_counter() - t0, 3),
                                               "fit_error_mean": float(fit.error.mean())})  # fmt: skip

    def _build_persona(self, path: Path, persona: Any, spec: RenderSpec, source: dict, params: dict) -> None:
        from newsmotion_engine.render.backends.champ.denoise import encode_reference

        mw, mh = self.options.model_size(spec.width, spec.height)
        # The reference as on the render's frame, then resized to the model's as the official code resizes its image.
        frame = reference_frame(persona, spec.width, spec.height, spec.background)
        latents, embeds = encode_reference(self.components, frame, mw, mh)
        caches.write_persona_artifacts(path, caches.PersonaArtifacts(latents, embeds), source=source, params=params,
                                       extra=self._cache_extra())  # fmt: skip

    # ------------------------------------------------------------------ render
    def guidance_videos(self, fit: Any, persona: Any, keypoints: np.ndarray, spec: RenderSpec,
                        workers: int | None = None) -> dict[str, np.ndarray]:  # fmt: skip
        """The clip's four guidance videos (type -> uint8 ``[T, h, w, 3]`` at the model's size);
        ``workers``: frames drawn at once (:func:`~.maps.guidance_frames`'s default: up to 8)."""
        from newsmotion_engine.render.backends.champ.maps import GUIDANCE_TYPES, guidance_frames
        from newsmotion_engine.render.placement import place_portrait

        mw, mh = self.options.model_size(spec.width, spec.height)
        box = place_portrait(np.asarray(persona.portrait).shape[:2], mw, mh)
        from newsmotion_engine.render.keyframes import clip_schedule

        T, n = keypoints.shape[0], fit.pose.shape[0]
        # With sparse keyframes render_clip hands over the keyframes' poses only: pose the same frames.
        keyframes = list(clip_schedule(n, spec).keyframes) if spec.keyframes > 1 else []
        pose = np.asarray(fit.pose)[keyframes if len(keyframes) == T else np.arange(T) % n]
        videos = {t: np.empty((T, mh, mw, 3), np.uint8) for t in GUIDANCE_TYPES}
        for i, maps in enumerate(guidance_frames(self.smpl, pose, keypoints, box, mw, mh, self.components.device, workers)):
            for t in GUIDANCE_TYPES:
                videos[t][i] = maps[t]
        return videos

    def _loop_frames(self, guidance: Any, spec: RenderSpec) -> int:
        return int(np.asarray(guidance.keypoints).shape[0])

    def _frames(self, guidance: Any, persona: Any, keypoints: np.ndarray, spec: RenderSpec) -> Iterator[np.ndarray]:
        import cv2

        from newsmotion_engine.render.backends.champ.denoise import decode_frames, encode_guidance, sample_latents

        o = self.options
        fit = self.load_guidance(guidance, spec)
        ref = self.load_persona(persona, spec)
        t0 = time.perf_counter()
        videos = self.guidance_videos(fit, persona, np.asarray(keypoints), spec)
        t_maps = time.perf_counter() - t0
        fea = encode_guidance(self.components, videos)
        del videos
        latents = sample_latents(self.components, fea, ref.ref_latents, ref.clip_embeds, steps=o.steps,
                                 guidance_scale=o.guidance_scale, context=o.context_frames, overlap=o.context_overlap,
                                 seed=spec.seed, official_reference=o.reference_pass == "official")  # fmt: skip
        self.last_render = {"frames": int(keypoints.shape[0]), "windows": len(self.plan(int(keypoints.shape[0])).windows),
                            "maps_s": round(t_maps, 3), "denoise_s": round(time.perf_counter() - t0 - t_maps, 3),
                            "fit_error_mean": float(np.mean(fit.fit_error))}  # fmt: skip
        for frame in decode_frames(self.components, latents):
            yield cv2.resize(frame, (spec.width, spec.height), interpolation=cv2.INTER_CUBIC)

    def _memory_tips(self, spec: RenderSpec) -> list[str]:
        return [f"a smaller model_width (now {self.options.model_width})", "dtype='float16' or 'bfloat16'"]

    def oom_message(self, spec: RenderSpec) -> str:
        tips = [*self._memory_tips(spec), f"a shorter context_frames (now {self.options.context_frames})"]
        return f"{self.name} ran out of GPU memory at {spec.width}x{spec.height}; reduce memory with: " + ", ".join(tips)
