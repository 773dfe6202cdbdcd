"""The ``wan-animate`` render backend: Wan2.2-Animate (diffusers components) driven by the cached
pose latents, prompt embeddings, reference latents and image tokens.

Caches: the backend derives two sub-caches (see :mod:`.caches`) from the guidance and persona
caches. :meth:`WanAnimateBackend.prepare_guidance` / :meth:`WanAnimateBackend.prepare_persona`
build them (the only place the VAE encoder, image encoder and text encoder run) through
:func:`cachedir.ensure`; the CLI calls them before a render, Dagster's sub-cache assets call them
through the renderer resource. Renders only load: ``frames`` raises
:class:`~newsmotion_engine.render.base.BackendCacheError` (missing / stale / corrupt, naming what
to materialize) and builds nothing.

Per render (``frames``): load both sub-caches, build the face video, then per inference segment
:func:`.segment.render_segment` (our denoising loop over the stock components, then decode),
streaming frames out one by one.

Face video: square crops around the retargeted face keypoints of the ``warp`` backend's frames
(which move the persona's own face along the loop), resized to the motion encoder's size, with a
fixed crop size per clip (no zoom jitter).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from newsmotion_engine import cachedir
from newsmotion_engine.errors import CacheError, NewsmotionError
from newsmotion_engine.render.base import BackendCacheError, BackendNeeds, InvalidSpecError, RenderSpec
from newsmotion_engine.render.keyframes import clip_schedule, driving_keypoints
from newsmotion_engine.render.wan_animate import caches as C
from newsmotion_engine.render.wan_animate.config import NAME, RANDOM_WEIGHTS_LABEL, WanAnimateOptions
from newsmotion_engine.skeleton import FACE_START

__all__ = ["ClipWork", "WanAnimateBackend", "WanAnimateOOMError", "loop_prompt"]

log = logging.getLogger(__name__)


class WanAnimateOOMError(NewsmotionError, RuntimeError):
    """The GPU ran out of memory; the message names the settings that reduce memory."""


def loop_prompt(guidance: Any, override: str | None = None) -> str:
    """The text prompt for a loop: the option override, the canonical loop's prompt, or a default."""
    if override:
        return override
    from newsmotion_engine.guidance.palette import canonical_loops

    spec = canonical_loops().get(getattr(guidance, "loop_id", ""))
    return spec.prompt if spec is not None else C.DEFAULT_PROMPT



def check_size(backend: str, spec: RenderSpec) -> None:
    """Wan sizes are multiples of 16 (VAE x8, patch x2); both Wan backends refuse others."""
    if spec.width % 16 or spec.height % 16:
        raise InvalidSpecError(
            f"{backend} renders sizes divisible by 16 (VAE x8, patch x2); {spec.width}x{spec.height} is not, "
            f"e.g. use {spec.width // 16 * 16}x{spec.height // 16 * 16}"
        )

class WanAnimateBackend:
    """See the module docstring. Construct through the registry (options validated first):
    ``get_backend("wan-animate", preset="tiny", steps=2)``, or ``WanAnimateBackend(options)``."""

    name = NAME
    needs = BackendNeeds(
        guidance=frozenset({"keypoints", "pose_latents", "prompt_embeds"}),
        persona=frozenset({"portrait", "person_mask", "face_mask", "landmarks", "ref_latents", "image_tokens"}),
    )

    def __init__(self, options: WanAnimateOptions) -> None:
        self.options = options
        self.components: Any = None
        self.applied: Any = None  # registry.AppliedAccelerations once loaded
        self.accel_report: dict[str, Any] = {}
        self.last_render: dict[str, Any] = {}
        self._warp: Any = None

    @classmethod
    def from_options(cls, **options: Any) -> WanAnimateBackend:
        return cls(WanAnimateOptions.from_mapping(options))

    # ------------------------------------------------------------------ lifecycle
    def load(self) -> None:
        """Load transformer + VAE and apply the configured accelerations (once, through the
        acceleration registry, in its order)."""
        if self.components is not None:
            return
        from newsmotion_engine.accel.fp8 import module_weight_gib
        from newsmotion_engine.accel.registry import apply_accelerations
        from newsmotion_engine.render.wan_animate.components import load_render_components

        t0 = time.perf_counter()
        comps = load_render_components(self.options)
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
        if self.components.identity["weights"] == RANDOM_WEIGHTS_LABEL:
            log.warning("wan-animate: preset %r with RANDOM WEIGHTS: frames are noise, for timing only", self.options.preset)

    def close(self) -> None:
        """Drop the models and free GPU memory. Idempotent."""
        if self.components is None:
            return
        device = self.components.device
        self.components = None
        self.applied = None
        import gc

        gc.collect()
        if getattr(device, "type", "cpu") == "cuda":
            import torch

            torch.cuda.empty_cache()

    def describe(self) -> dict[str, Any]:
        o = self.options
        info: dict[str, Any] = {
            "weights": self.components.weights_label if self.components else (f"folder {o.model_path}" if o.model_path else RANDOM_WEIGHTS_LABEL),
            "preset": None if o.model_path else o.preset,
            "device": str(self.components.device) if self.components else o.device,
            "dtype": o.dtype,
            "steps": o.steps,
            "guidance_scale": o.guidance_scale,
            "segment_frames": o.segment_length,
            "prev_frames": o.prev_frames,
            # The prompts shape the cached embeddings: part of what a render's digest must see.
            "prompt": o.prompt,
            "negative_prompt": o.negative_prompt,
            "accelerations": o.accel_summary(),
            "pose_video": "loop keypoints drawn DWPose-style (Tier-1 guidance cache)",
            "face_video": "face crops of the warp backend's frames",
            "continuation": "latent (no VAE encode at render time)",
        }
        if self.components is not None:
            info["model_digest"] = self.components.identity["digest"]
        if self.accel_report:
            info["accel_report"] = self.accel_report
        if self.last_render:
            info["last_render"] = self.last_render
        if info["weights"] == RANDOM_WEIGHTS_LABEL:
            info["note"] = "random weights: frames are noise-shaped; use for timing and memory only"
        return info

    # ------------------------------------------------------------------ caches
    def _check_spec(self, spec: RenderSpec) -> None:
        check_size(NAME, spec)

    def _cache_root(self) -> Path | None:
        return Path(self.options.cache_root) if self.options.cache_root else None

    def _plan(self, frames: int) -> C.SegmentPlan:
        return C.plan_segments(frames, self.options.segment_length, self.options.prev_frames, fit=True)

    @staticmethod
    def _driving(guidance: Any, spec: RenderSpec) -> np.ndarray:
        """The loop's keypoints this render is driven by: every frame, or the keyframes only
        (``spec.keyframes > 1``, the render-level sparse-keyframe stage)."""
        kp = np.asarray(guidance.keypoints)
        return driving_keypoints(kp, clip_schedule(kp.shape[0], spec))

    def guidance_params(self, guidance: Any, spec: RenderSpec, plan: C.SegmentPlan) -> tuple[dict, dict]:
        """(source, params) of the guidance sub-cache for this loop, size and model."""
        o = self.options
        source = {"kind": "guidance", "sha256": C.source_digest(guidance)}
        params = {
            "format": C.FORMAT_VERSION,
            "size": [spec.width, spec.height],
            "segments": plan.as_dict(),
            "model": self.components.identity["digest"],
            "prompt": loop_prompt(guidance, o.prompt),
            "negative_prompt": o.negative_prompt,
        }
        if spec.keyframes > 1:  # the pose video is the keyframes' poses: its own sub-cache
            params["keyframes"] = spec.keyframes
        return source, params

    def persona_params(self, persona: Any, spec: RenderSpec) -> tuple[dict, dict]:
        source = {"kind": "persona", "sha256": C.source_digest(persona)}
        params = {
            "format": C.FORMAT_VERSION,
            "size": [spec.width, spec.height],
            "background": list(spec.background),
            "model": self.components.identity["digest"],
        }
        return source, params

    def _guidance_location(self, guidance: Any, spec: RenderSpec, frames: int | None = None):
        self.load()
        self._check_spec(spec)
        plan = self._plan(int(self._driving(guidance, spec).shape[0]) if frames is None else frames)
        path = C.guidance_artifacts_dir(Path(guidance.path), spec.width, spec.height, self._cache_root(), spec.keyframes)
        return plan, path, *self.guidance_params(guidance, spec, plan)

    def _persona_location(self, persona: Any, spec: RenderSpec):
        self.load()
        self._check_spec(spec)
        path = C.persona_artifacts_dir(Path(persona.path), spec.width, spec.height, self._cache_root())
        return path, *self.persona_params(persona, spec)

    def prepare_guidance(self, guidance: Any, spec: RenderSpec) -> bool:
        """Build (or validate) the guidance sub-cache (pose latents, first-segment conditioning,
        prompt embeddings) of ``guidance`` (a loaded guidance cache) at ``spec``'s size: ``True``
        when it was built, ``False`` when a current one was there. Runs the VAE encoder and the
        text encoder (loaded for the build, then freed)."""
        plan, path, source, params = self._guidance_location(guidance, spec)
        read = lambda: C.read_guidance_artifacts(path, source, params, plan, spec.width, spec.height)  # noqa: E731
        _, built = cachedir.ensure(path, read, lambda: self._build_guidance(path, guidance, spec, plan, source, params))
        return built

    def prepare_persona(self, persona: Any, spec: RenderSpec) -> bool:
        """Build (or validate) the persona sub-cache (reference latents, CLIP image tokens) of
        ``persona`` (a loaded persona cache) at ``spec``'s size and background: ``True`` when built.
        Runs the VAE encoder and the image encoder."""
        path, source, params = self._persona_location(persona, spec)
        read = lambda: C.read_persona_artifacts(path, source, params, spec.width, spec.height)  # noqa: E731
        _, built = cachedir.ensure(path, read, lambda: self._build_persona(path, persona, spec, source, params))
        return built

    def _not_ready(self, exc: CacheError, tier: str, cache_id: Any, spec: RenderSpec) -> BackendCacheError:
        return BackendCacheError.from_cache_error(exc, backend=NAME, tier=tier, cache_id=str(cache_id),
                                                  size=f"{spec.width}x{spec.height}")  # fmt: skip

    def load_guidance(self, guidance: Any, spec: RenderSpec, frames: int | None = None) -> C.GuidanceArtifacts:
        """The guidance sub-cache's tensors for a clip of ``frames`` frames (default: the loop's).

        Raises:
            BackendCacheError: missing, stale or damaged; the message says what to build. Nothing
                is built here.
        """
        plan, path, source, params = self._guidance_location(guidance, spec, frames)
        try:
            return C.read_guidance_artifacts(path, source, params, plan, spec.width, spec.height)
        except CacheError as exc:
            raise self._not_ready(exc, "guidance", getattr(guidance, "loop_id", path.parent.parent.name), spec) from None

    def load_persona(self, persona: Any, spec: RenderSpec) -> C.PersonaArtifacts:
        """The persona sub-cache's tensors. Raises :class:`BackendCacheError` like :meth:`load_guidance`."""
        path, source, params = self._persona_location(persona, spec)
        try:
            return C.read_persona_artifacts(path, source, params, spec.width, spec.height)
        except CacheError as exc:
            raise self._not_ready(exc, "persona", getattr(persona, "persona_id", path.parent.parent.name), spec) from None

    def _build_guidance(self, path: Path, guidance: Any, spec: RenderSpec, plan: C.SegmentPlan, source: dict, params: dict) -> None:
        import torch

        from newsmotion_engine.guidance.draw import draw_pose
        from newsmotion_engine.render.wan_animate.components import load_text_encoder

        comps = self.components
        kp = self._driving(guidance, spec)
        T = kp.shape[0]
        poses = []
        for k in range(plan.segments):
            start = plan.start(k)
            # Cyclic continuation past the end: the loops are seamless.
            frames = np.stack([draw_pose(kp[(start + j) % T], spec.width, spec.height) for j in range(plan.segment_frames)])
            poses.append(C.vae_encode(comps.vae, C.to_video_tensor(frames), comps.device))
        zeros = torch.zeros(1, 3, plan.segment_frames, spec.height, spec.width)
        cond0 = torch.cat([C.i2v_mask(plan.latent_frames, spec.height // 8, spec.width // 8, 0),
                           C.vae_encode(comps.vae, zeros, comps.device)], dim=1)  # fmt: skip
        tok, enc = load_text_encoder(self.options, comps.device)
        try:
            emb = C.encode_prompts(tok, enc, [params["prompt"], params["negative_prompt"]], comps.device)
        finally:
            del enc  # the text encoder lives only while building caches
            if comps.device.type == "cuda":
                torch.cuda.empty_cache()
        artifacts = C.GuidanceArtifacts(torch.cat(poses), cond0, emb[0:1], emb[1:2])
        C.write_guidance_artifacts(path, artifacts, source=source, params=params,
                                   extra={"backend": NAME, "weights": comps.weights_label})  # fmt: skip

    def _build_persona(self, path: Path, persona: Any, spec: RenderSpec, source: dict, params: dict) -> None:
        import torch

        from newsmotion_engine.render.wan_animate.components import load_image_encoder

        comps = self.components
        frame = C.reference_frame(persona, spec.width, spec.height, spec.background)
        ref = C.vae_encode(comps.vae, C.to_video_tensor(frame[None]), comps.device)
        ref_latents = torch.cat([C.i2v_mask(1, spec.height // 8, spec.width // 8, 1), ref], dim=1)
        proc, enc = load_image_encoder(self.options, comps.device)
        try:
            tokens = C.encode_image_tokens(proc, enc, frame, comps.device)
        finally:
            del enc
        C.write_persona_artifacts(path, C.PersonaArtifacts(ref_latents, tokens), source=source, params=params,
                                  extra={"backend": NAME, "weights": comps.weights_label})  # fmt: skip

    # ------------------------------------------------------------------ face video
    def face_video(self, guidance: Any, persona: Any, keypoints: np.ndarray, spec: RenderSpec) -> np.ndarray:
        """uint8 ``[T, S, S, 3]``: crops of the warp backend's frames around the face."""
        import cv2

        from newsmotion_engine.render.base import get_backend
        from newsmotion_engine.render.warp import place_portrait

        size = int(self.components.transformer.config.motion_encoder_size)
        if self._warp is None:
            self._warp = get_backend("warp")
            self._warp.load()
        kp = np.asarray(keypoints, np.float64)
        ox, oy, pw, ph = place_portrait(np.asarray(persona.portrait).shape[:2], spec.width, spec.height)
        face = kp[:, FACE_START : FACE_START + 68]
        ok = face[..., 2] > 0.3
        px = np.stack([ox + face[..., 0] * pw, oy + face[..., 1] * ph], axis=-1)
        centres, extents = [], []
        for t in range(kp.shape[0]):
            pts = px[t][ok[t]] if ok[t].sum() >= 3 else None
            if pts is None:
                centres.append(centres[-1] if centres else (spec.width / 2, spec.height / 4))
                continue
            lo, hi = pts.min(axis=0), pts.max(axis=0)
            centres.append(tuple((lo + hi) / 2))
            extents.append(float(max(hi - lo)))
        side = 1.6 * (float(np.median(extents)) if extents else spec.width / 4)
        out = np.empty((kp.shape[0], size, size, 3), np.uint8)
        for t, frame in enumerate(self._warp.frames(guidance, persona, keypoints, spec)):
            cx, cy = centres[t]
            s = size / side
            m = np.array([[s, 0, size / 2 - s * cx], [0, s, size / 2 - s * cy]], np.float64)
            out[t] = cv2.warpAffine(frame, m, (size, size), flags=cv2.INTER_AREA if s < 1 else cv2.INTER_LINEAR,
                                    borderMode=cv2.BORDER_REPLICATE)  # fmt: skip
        return out

    # ------------------------------------------------------------------ render
    def frames(self, guidance: Any, persona: Any, keypoints: np.ndarray, spec: RenderSpec) -> Iterator[np.ndarray]:
        """Yield the clip's frames (uint8 RGB ``[H, W, 3]``), one segment decoded at a time.

        Raises:
            BackendCacheError: a sub-cache is missing or stale (call ``prepare_guidance`` /
                ``prepare_persona`` first); raised before any denoising.
            WanAnimateOOMError: the GPU ran out of memory (the message names what reduces it).
        """
        self.load()
        self._check_spec(spec)
        with self._oom_explained(spec):
            yield from self._frames(guidance, persona, keypoints, spec)

    def _oom_message(self, spec: RenderSpec) -> str:
        o = self.options
        tips = []
        if not o.has("fp8"):
            tips.append("fp8='auto' (halves transformer weights)")
        if not o.has("vae_tiling"):
            tips.append("vae_tiling=True")
        if not o.has("ffn_chunks"):
            tips.append("ffn_chunks=8")
        if any(getattr(c, "cudagraphs", False) for c in o.accelerations if c.technique == "compile"):
            tips.append("compile='blocks' (CUDA graphs keep static buffers)")
        tips.append(f"a shorter segment_frames (now {o.segment_length})")
        tips.append(f"a smaller render size (now {spec.width}x{spec.height})")
        return f"wan-animate ran out of GPU memory at {spec.width}x{spec.height}; reduce memory with: " + ", ".join(tips)

    def _frames(self, guidance: Any, persona: Any, keypoints: np.ndarray, spec: RenderSpec) -> Iterator[np.ndarray]:
        work = self.plan_clip(guidance, persona, keypoints, spec)
        for k in range(work.plan.segments):
            latents = self.denoise_clip_segment(work, k)
            yield from self.decode_clip_segment(work, k, latents)

    # ------------------------------------------------------------------ stages (the render queue)
    # frames() runs the three stages one after the other; the 3-stage render queue
    # (newsmotion_engine.render.queue) overlaps them across segments and clips: plan_clip on a CPU
    # thread, denoise_clip_segment on the GPU's main stream (in segment order: a continuation needs
    # the previous segment's latents), decode_clip_segment on a second stream with the encoder.
    def plan_clip(self, guidance: Any, persona: Any, keypoints: np.ndarray, spec: RenderSpec) -> ClipWork:
        """Stage 1 (CPU): load both sub-caches, build the face video, draw every segment's noise.

        Raises:
            BackendCacheError: a sub-cache is missing or stale (nothing is built here).
        """
        import torch

        self.load()
        self._check_spec(spec)
        T = int(np.asarray(keypoints).shape[0])
        plan = self._plan(T)
        t0 = time.perf_counter()
        g = self.load_guidance(guidance, spec, T)
        p = self.load_persona(persona, spec)
        faces = self.face_video(guidance, persona, keypoints, spec)
        h, w = spec.height // 8, spec.width // 8
        device = self.components.device
        if getattr(device, "type", str(device)) == "cuda":  # the clip's own peak (peak_vram_gib), not the process's
            torch.cuda.reset_peak_memory_stats(device)
        gen = torch.Generator("cpu").manual_seed(spec.seed)
        noises = [torch.randn((1, 16, plan.latent_frames + 1, h, w), generator=gen, dtype=torch.float32) for _ in range(plan.segments)]
        stats: dict[str, Any] = {"segments": plan.segments, "denoise_s": 0.0, "decode_s": 0.0, "cond_passes": 0,
                                 "uncond_passes": 0, "plain_cfg_passes": 0, "teacache_computed": 0, "teacache_skipped": 0,
                                 "prep_s": time.perf_counter() - t0}  # fmt: skip
        return ClipWork(plan=plan, frames=T, spec=spec, guidance=g, persona=p, faces=faces, noises=noises, stats=stats)

    def denoise_clip_segment(self, work: ClipWork, k: int) -> Any:
        """Stage 2 (GPU): denoise segment ``k`` of ``work`` (segments in order); its latents."""
        from newsmotion_engine.render.wan_animate import segment as S

        if k != work.denoised:
            raise ValueError(f"segment {k} denoised out of order (next is {work.denoised})")
        o = self.options
        start = work.plan.start(k)
        idx = [(start + j) % work.frames for j in range(work.plan.segment_frames)]
        t0 = time.perf_counter()
        with self._oom_explained(work.spec):
            latents, st = S.denoise_latents(self.components, work.guidance, work.persona, work.faces[idx], plan=work.plan,
                                            segment=k, noise=work.noises[k], steps=o.steps, guidance_scale=o.guidance_scale,
                                            previous=work.previous)  # fmt: skip
        work.timeline.append(("denoise", t0, time.perf_counter()))
        for key in st:
            if key in work.stats:
                work.stats[key] += st[key]
        work.previous = latents[:, :, 1:].cpu()
        work.denoised += 1
        return latents

    def decode_clip_segment(self, work: ClipWork, k: int, latents: Any) -> Iterator[np.ndarray]:
        """Stage 3 (GPU decode, on the caller's current stream): segment ``k``'s new frames (its
        first ``prev_frames`` repeat the previous segment's end; frames past the clip are dropped)."""
        from newsmotion_engine.render.wan_animate import segment as S

        t0 = time.perf_counter()
        with self._oom_explained(work.spec):
            video, decode_s = S.decode_frames(self.components, latents)
        work.timeline.append(("decode", t0, time.perf_counter()))
        work.stats["decode_s"] += decode_s
        if k == work.plan.segments - 1:
            self._finish(work)
        for frame in video[0 if k == 0 else self.options.prev_frames :]:
            if work.emitted >= work.frames:
                break
            work.emitted += 1
            yield np.ascontiguousarray(frame)

    @contextlib.contextmanager
    def _oom_explained(self, spec: RenderSpec) -> Iterator[None]:
        """CUDA out-of-memory -> :class:`WanAnimateOOMError` naming what reduces memory."""
        try:
            yield
        except Exception as exc:  # only CUDA OOM is translated; everything else propagates as is
            if type(exc).__name__ == "OutOfMemoryError":
                raise WanAnimateOOMError(self._oom_message(spec)) from exc
            raise

    def _finish(self, work: ClipWork) -> None:
        stats = dict(work.stats)
        plain = stats["plain_cfg_passes"]
        stats["cfg_flops_saved"] = round(1 - (stats["cond_passes"] + stats["uncond_passes"]) / plain, 4) if plain else 0.0
        for key in ("denoise_s", "decode_s", "prep_s"):
            stats[key] = round(stats[key], 3)
        device = self.components.device if self.components is not None else None
        if getattr(device, "type", None) == "cuda":
            import torch

            stats["peak_vram_gib"] = round(torch.cuda.max_memory_allocated(device) / 2**30, 3)
        self.last_render = stats


@dataclass
class ClipWork:
    """One clip between the render stages: its plan, loaded sub-caches, face video, per-segment
    noise, the previous segment's latents (continuation), stats and the GPU timeline
    (``(stage, start, end)`` host times, for the render queue's idle figures)."""

    plan: C.SegmentPlan
    frames: int
    spec: RenderSpec
    guidance: C.GuidanceArtifacts
    persona: C.PersonaArtifacts
    faces: np.ndarray
    noises: list[Any]
    stats: dict[str, Any]
    previous: Any = None
    denoised: int = 0
    emitted: int = 0
    timeline: list[tuple[str, float, float]] = field(default_factory=list)
