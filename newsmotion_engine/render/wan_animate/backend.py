"""The ``wan-animate`` render backend: Wan2.2-Animate (diffusers components) driven by the clip's
pose video, the cached prompt embeddings, reference latents and image tokens.

Caches: the backend derives two sub-caches (see :mod:`.caches`) from the guidance and persona
caches. :meth:`WanAnimateBackend.prepare_guidance` / :meth:`WanAnimateBackend.prepare_persona`
build them (the only place the VAE encoder, image encoder and text encoder run) through
:func:`cachedir.ensure`; the CLI calls them before a render, Dagster's sub-cache assets call them
through the renderer resource. Renders only load: ``frames`` raises
:class:`~newsmotion_engine.render.base.BackendCacheError` (missing / stale / corrupt, naming what
to materialize) and builds nothing.

Per render (``frames``): load both sub-caches, draw the pose video (the retargeted keypoints in
Wan's training style, placed on the reference person: :func:`.caches.pose_frames`) and VAE-encode
it per segment, build the face video, then per inference segment
:func:`.segment.render_segment` (our denoising loop over the stock components, then decode),
streaming frames out one by one.

Face video: square crops around the retargeted face keypoints of the ``warp`` backend's frames
(which move the persona's own face along the loop), resized to the motion encoder's size, with a
fixed crop size per clip (no zoom jitter).

Lifecycle, sub-cache locations and keys, ``prepare_*`` / ``load_*`` and the out-of-memory message
are :class:`~newsmotion_engine.render.diffusers_backend.DiffusersBackend`'s (shared with
wan-animate-2); this module holds what is wan-animate's own.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from newsmotion_engine.render.base import BackendNeeds, RenderSpec
from newsmotion_engine.render.diffusers_backend import DiffusersBackend, DiffusersOOMError, check_size, loop_prompt
from newsmotion_engine.render.keyframes import clip_schedule, driving_keypoints
from newsmotion_engine.render.wan_animate import caches as C
from newsmotion_engine.render.wan_animate.config import NAME, WanAnimateOptions
from newsmotion_engine.skeleton import FACE_START

__all__ = ["ClipWork", "WanAnimateBackend", "WanAnimateOOMError", "check_size", "loop_prompt"]


class WanAnimateOOMError(DiffusersOOMError):
    """The GPU ran out of memory; the message names the settings that reduce memory."""


class WanAnimateBackend(DiffusersBackend):
    """See the module docstring. Construct through the registry (options validated first):
    ``get_backend("wan-animate", preset="tiny", steps=2)``, or ``WanAnimateBackend(options)``."""

    name = NAME
    needs = BackendNeeds(
        guidance=frozenset({"keypoints", "cond0_latents", "prompt_embeds"}),
        persona=frozenset({"portrait", "person_mask", "face_mask", "landmarks", "ref_latents", "image_tokens"}),
    )
    options_class = WanAnimateOptions
    caches = C
    oom_error = WanAnimateOOMError

    def __init__(self, options: WanAnimateOptions) -> None:
        super().__init__(options)
        self._warp: Any = None

    def _load_components(self) -> Any:
        from newsmotion_engine.render.wan_animate.components import load_render_components

        return load_render_components(self.options)

    def _settings(self) -> dict[str, Any]:
        o = self.options
        return {
            "steps": o.steps,
            "guidance_scale": o.guidance_scale,
            "segment_frames": o.segment_length,
            "prev_frames": o.prev_frames,
            # The prompts shape the cached embeddings: part of what a render's digest must see.
            "prompt": o.prompt,
            "negative_prompt": o.negative_prompt,
            "accelerations": o.accel_summary(),
            "pose_video": "retargeted keypoints drawn in Wan-Animate's training style on the reference person, "
                          "VAE-encoded per render",
            "face_video": "face crops of the warp backend's frames",
            "continuation": "latent (no VAE encode at render time)",
        }

    # ------------------------------------------------------------------ caches
    def plan(self, frames: int) -> C.SegmentPlan:
        return C.plan_segments(frames, self.options.segment_length, self.options.prev_frames, fit=True)

    @staticmethod
    def _driving(guidance: Any, spec: RenderSpec) -> np.ndarray:
        """The loop's keypoints this render is driven by: every frame, or the keyframes only
        (``spec.keyframes > 1``, the render-level sparse-keyframe stage)."""
        kp = np.asarray(guidance.keypoints)
        return driving_keypoints(kp, clip_schedule(kp.shape[0], spec))

    def _loop_frames(self, guidance: Any, spec: RenderSpec) -> int:
        return int(self._driving(guidance, spec).shape[0])

    def _guidance_dir(self, guidance: Any, spec: RenderSpec) -> Path:
        return C.guidance_artifacts_dir(Path(guidance.path), spec.width, spec.height, self._cache_root(), spec.keyframes)

    def _guidance_params_extra(self, spec: RenderSpec) -> dict[str, Any]:
        # The segment plan (cond0's length) follows the keyframe count: its own sub-cache.
        return {"keyframes": spec.keyframes} if spec.keyframes > 1 else {}

    def _build_guidance(self, path: Path, guidance: Any, spec: RenderSpec, plan: C.SegmentPlan, source: dict, params: dict) -> None:
        import torch

        from newsmotion_engine.render.wan_animate.components import load_text_encoder

        # No pose latents here: the pose video is drawn on the persona, so plan_clip encodes it.
        comps = self.components
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
        artifacts = C.GuidanceArtifacts(cond0, emb[0:1], emb[1:2])
        C.write_guidance_artifacts(path, artifacts, source=source, params=params, extra=self._cache_extra())

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
                                  extra=self._cache_extra())  # fmt: skip

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
    def _memory_tips(self, spec: RenderSpec) -> list[str]:
        tips = self._unused_memory_accelerations("fp8", "vae_tiling", "ffn_chunks")
        if any(getattr(c, "cudagraphs", False) for c in self.options.accelerations if c.technique == "compile"):
            tips.append("compile='blocks' (CUDA graphs keep static buffers)")
        return tips

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
        """Stage 1 (CPU): load both sub-caches, build the face video, draw the pose video and
        VAE-encode it per segment (on the GPU, through a copy of the VAE that does not share the
        decode stage's feature caches; ``pose_encode_s`` in the stats), draw every segment's noise.

        Raises:
            BackendCacheError: a sub-cache is missing or stale (nothing is built here).
        """
        from dataclasses import replace

        import torch

        self.load()
        self._check_spec(spec)
        T = int(np.asarray(keypoints).shape[0])
        plan = self.plan(T)
        t0 = time.perf_counter()
        g = self.load_guidance(guidance, spec, T)
        p = self.load_persona(persona, spec)
        faces = self.face_video(guidance, persona, keypoints, spec)
        h, w = spec.height // 8, spec.width // 8
        device = self.components.device
        if getattr(device, "type", str(device)) == "cuda":  # the clip's own peak (peak_vram_gib), not the process's
            torch.cuda.reset_peak_memory_stats(device)
        t1 = time.perf_counter()
        # The pose video is drawn on the persona (the reference person): encoded per clip, not cached.
        pose = C.pose_frames(persona, keypoints, spec.width, spec.height)
        g = replace(g, pose_latents=C.encode_pose_latents(self.components.vae, pose, plan, device))
        pose_encode_s = time.perf_counter() - t1
        gen = torch.Generator("cpu").manual_seed(spec.seed)
        noises = [torch.randn((1, 16, plan.latent_frames + 1, h, w), generator=gen, dtype=torch.float32) for _ in range(plan.segments)]
        stats: dict[str, Any] = {"segments": plan.segments, "denoise_s": 0.0, "decode_s": 0.0, "cond_passes": 0,
                                 "uncond_passes": 0, "plain_cfg_passes": 0, "teacache_computed": 0, "teacache_skipped": 0,
                                 "prep_s": time.perf_counter() - t0}  # fmt: skip
        stats["pose_encode_s"] = round(pose_encode_s, 3)
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
