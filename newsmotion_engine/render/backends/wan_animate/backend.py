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
it per segment, build the face video (on a worker thread, beside that encode), then per
inference segment our denoising loop over the stock components (:mod:`.segment`) and the decode,
streamed one latent frame (four frames) at a time while the GPU decodes the next
(:func:`~newsmotion_engine.render.backends.wan.decode.stream_decode`: the same frames as the whole decode). A segment
after the first continues from the previous one as the model was trained
(``continuation="frames"``): the previous segment's last ``prev_frames`` decoded frames,
VAE-encoded with zero frames after them, the mask marking them known; the opt-in
``continuation="latent"`` (EXPERIMENTAL, not as trained) puts the previous segment's last latents
there instead and encodes nothing.

Face video: per frame, Wan's face crop (:func:`face_box`: the 68 landmarks' box at 1.3x its area,
room above the brows) of the ``warp`` backend's frames (which move the persona's own face along
the loop, so the landmarks are the retargeted keypoints), resized to the motion encoder's size.

Lifecycle, sub-cache locations and keys, ``prepare_*`` / ``load_*`` and the out-of-memory message
are :class:`~newsmotion_engine.render.backends.wan.diffusers_backend.DiffusersBackend`'s (shared with
wan-animate-2); this module holds what is wan-animate's own.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from newsmotion_engine.render.base import BackendNeeds, RenderSpec
from newsmotion_engine.render.backends.wan.diffusers_backend import DiffusersBackend, DiffusersOOMError
from newsmotion_engine.render.keyframes import clip_schedule, driving_keypoints
from newsmotion_engine.render.backends.wan_animate import caches as C
from newsmotion_engine.render.backends.wan_animate.config import NAME, WanAnimateOptions
from newsmotion_engine.skeleton import FACE_START
from newsmotion_engine.render.backends.wan import artifacts, continuation, encoders, segments
from newsmotion_engine.render.backends.wan import decode as wan_decode

__all__ = ["ClipWork", "WanAnimateBackend", "WanAnimateOOMError"]


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
        from newsmotion_engine.render.backends.wan_animate.components import load_render_components

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
            "continuation": continuation.DESCRIPTIONS[o.continuation],
        }

    # ------------------------------------------------------------------ caches
    def plan(self, frames: int) -> segments.SegmentPlan:
        return segments.plan_segments(frames, self.options.segment_length, self.options.prev_frames, fit=True)

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

    def _build_guidance(self, path: Path, guidance: Any, spec: RenderSpec, plan: segments.SegmentPlan, source: dict, params: dict) -> None:
        import torch

        from newsmotion_engine.render.backends.wan.components import load_text_encoder

        # No pose latents here: the pose video is drawn on the persona, so plan_clip encodes it.
        comps = self.components
        zeros = torch.zeros(1, 3, plan.segment_frames, spec.height, spec.width)
        cond0 = torch.cat([encoders.i2v_mask(plan.latent_frames, spec.height // 8, spec.width // 8, 0),
                           encoders.vae_encode(comps.vae, zeros, comps.device)], dim=1)  # fmt: skip
        tok, enc = load_text_encoder(self.options, comps.device)
        try:
            emb = encoders.encode_prompts(tok, enc, [params["prompt"], params["negative_prompt"]], comps.device)
        finally:
            del enc  # the text encoder lives only while building caches
            if comps.device.type == "cuda":
                torch.cuda.empty_cache()
        built = C.GuidanceArtifacts(cond0, emb[0:1], emb[1:2])
        C.write_guidance_artifacts(path, built, source=source, params=params, extra=self._cache_extra())

    def _build_persona(self, path: Path, persona: Any, spec: RenderSpec, source: dict, params: dict) -> None:
        import torch

        from newsmotion_engine.render.backends.wan_animate.components import load_image_encoder

        comps = self.components
        frame = artifacts.reference_frame(persona, spec.width, spec.height, spec.background)
        ref = encoders.vae_encode(comps.vae, encoders.to_video_tensor(frame[None]), comps.device)
        ref_latents = torch.cat([encoders.i2v_mask(1, spec.height // 8, spec.width // 8, 1), ref], dim=1)
        _, enc = load_image_encoder(self.options, comps.device)  # Wan's preprocessing, not the folder's processor
        try:
            tokens = encoders.encode_image_tokens(enc, frame, comps.device)
        finally:
            del enc
        C.write_persona_artifacts(path, C.PersonaArtifacts(ref_latents, tokens), source=source, params=params,
                                  extra=self._cache_extra())  # fmt: skip

    # ------------------------------------------------------------------ face video
    def face_video(self, guidance: Any, persona: Any, keypoints: np.ndarray, spec: RenderSpec) -> np.ndarray:
        """uint8 ``[T, S, S, 3]`` (``S`` the motion encoder's size, 512 for the released model):
        per frame, the box Wan's preprocessing cuts around the 68 face landmarks
        (:func:`face_box`) out of the warp backend's frame, resized to ``S`` x ``S`` as Wan does
        (bilinear, no aspect kept). The landmarks are the retargeted keypoints the warp frame was
        drawn from; a frame without a face takes the nearest frame's box."""
        import cv2

        from newsmotion_engine.render.base import get_backend
        from newsmotion_engine.render.placement import place_portrait

        size = int(self.components.transformer.config.motion_encoder_size)
        if self._warp is None:
            self._warp = get_backend("warp")
            self._warp.load()
        kp = np.asarray(keypoints, np.float64)
        ox, oy, pw, ph = place_portrait(np.asarray(persona.portrait).shape[:2], spec.width, spec.height)
        face = kp[:, FACE_START : FACE_START + 68]
        ok = face[..., 2] > 0  # every landmark there is (Wan's crop uses all 68, whatever their score)
        px = np.stack([ox + face[..., 0] * pw, oy + face[..., 1] * ph], axis=-1)
        boxes = [face_box(px[t][ok[t]], spec.width, spec.height) if ok[t].sum() >= 3 else None for t in range(kp.shape[0])]
        known = [t for t, b in enumerate(boxes) if b is not None]
        if not known:  # no face anywhere: the upper middle of the frame
            side = spec.width // 4
            x0, y0 = (spec.width - side) // 2, max(0, spec.height // 4 - side // 2)
            boxes = [(x0, x0 + side, y0, y0 + side)] * kp.shape[0]
        else:
            boxes = [boxes[min(known, key=lambda j, t=t: abs(j - t))] for t in range(kp.shape[0])]
        out = np.empty((kp.shape[0], size, size, 3), np.uint8)
        for t, frame in enumerate(self._warp.frames(guidance, persona, keypoints, spec)):
            x0, x1, y0, y1 = boxes[t]
            out[t] = cv2.resize(np.ascontiguousarray(frame[y0:y1, x0:x1]), (size, size), interpolation=cv2.INTER_LINEAR)
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

    # ------------------------------------------------------------------ stages
    # frames() runs them per clip: plan_clip once, then per segment (in order: a continuation
    # reads the previous segment's decoded tail) denoise_clip_segment and decode_clip_segment.
    def plan_clip(self, guidance: Any, persona: Any, keypoints: np.ndarray, spec: RenderSpec) -> ClipWork:
        """Stage 1 (CPU): load both sub-caches, build the face video (on a worker thread,
        ``face_video_s`` in the stats) while the pose video is drawn and VAE-encoded per segment
        (``pose_encode_s``), draw every segment's noise.

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
        h, w = spec.height // 8, spec.width // 8
        device = self.components.device
        if getattr(device, "type", str(device)) == "cuda":  # the clip's own peak (peak_vram_gib), not the process's
            torch.cuda.reset_peak_memory_stats(device)

        def timed_face_video() -> tuple[np.ndarray, float]:
            t = time.perf_counter()
            return self.face_video(guidance, persona, keypoints, spec), time.perf_counter() - t

        # The face video (CPU: the warp backend's frames, cropped) is built on a worker thread
        # while the pose video is drawn and VAE-encoded (GPU); its error, if any, is raised as is.
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="wan-animate-face") as pool:
            face_job = pool.submit(timed_face_video)
            t1 = time.perf_counter()
            # The pose video is drawn on the persona (the reference person): encoded per clip, not cached.
            pose = C.pose_frames(persona, keypoints, spec.width, spec.height)
            g = replace(g, pose_latents=C.encode_pose_latents(self.components.vae, pose, plan, device))
            pose_encode_s = time.perf_counter() - t1
            faces, face_video_s = face_job.result()
        gen = torch.Generator("cpu").manual_seed(spec.seed)
        noises = [torch.randn((1, 16, plan.latent_frames + 1, h, w), generator=gen, dtype=torch.float32) for _ in range(plan.segments)]
        stats: dict[str, Any] = {"segments": plan.segments, "continuation": self.options.continuation, "denoise_s": 0.0,
                                 "decode_s": 0.0, "continuation_encode_s": 0.0, "cond_passes": 0,
                                 "uncond_passes": 0, "plain_cfg_passes": 0, "teacache_computed": 0, "teacache_skipped": 0,
                                 "prep_s": time.perf_counter() - t0}  # fmt: skip
        stats["pose_encode_s"] = round(pose_encode_s, 3)
        stats["face_video_s"] = round(face_video_s, 3)  # beside the pose encode, not after it
        return ClipWork(plan=plan, frames=T, spec=spec, guidance=g, persona=p, faces=faces, noises=noises, stats=stats,
                        continuation=self.options.continuation)

    def denoise_clip_segment(self, work: ClipWork, k: int) -> Any:
        """Stage 2 (GPU): denoise segment ``k`` of ``work`` (segments in order); its latents.

        With ``continuation="frames"`` segment ``k > 0`` reads segment ``k - 1``'s decoded tail:
        :meth:`decode_clip_segment` of ``k - 1`` must have run first.
        """
        from newsmotion_engine.render.backends.wan_animate import segment as S

        if k != work.denoised:
            raise ValueError(f"segment {k} denoised out of order (next is {work.denoised})")
        conditioning = work.conditioning(k)
        o = self.options
        start = work.plan.start(k)
        idx = [(start + j) % work.frames for j in range(work.plan.segment_frames)]
        with self._oom_explained(work.spec):
            latents, st = S.denoise_latents(self.components, work.guidance, work.persona, work.faces[idx], plan=work.plan,
                                            segment=k, noise=work.noises[k], steps=o.steps, guidance_scale=o.guidance_scale,
                                            conditioning=conditioning)  # fmt: skip
        for key in st:
            if key in work.stats:
                work.stats[key] += st[key]
        if work.continuation == "latent" and k + 1 < work.plan.segments:
            work.set_conditioning(k + 1, continuation.latent_continuation(work.guidance.cond0_latents, latents[:, :, 1:].cpu(),
                                                                          work.plan.prev_frames))  # fmt: skip
        work.denoised += 1
        return latents

    def decode_clip_segment(self, work: ClipWork, k: int, latents: Any) -> Iterator[np.ndarray]:
        """Stage 3 (GPU decode, on the caller's current stream): segment ``k``'s new frames. Its
        first ``prev_frames`` frames (after the first segment) are the ones it continued from, the
        previous segment's last: not emitted again; frames past the clip are dropped.

        The decode streams (:func:`~newsmotion_engine.render.backends.wan.decode.stream_decode`): frames come out one latent frame's
        worth at a time while the GPU decodes the next, so the consumer's CPU work (infill, matte,
        encoder) overlaps the decode. The frames are exactly the whole decode's.

        With ``continuation="frames"`` the next segment's conditioning (this segment's decoded
        tail, VAE-encoded) is built here, from the decoder's output before uint8 rounding, before
        the segment's first frame is yielded: such a segment decodes whole first (the next
        denoise waits on its tail, not on the consumer); the clip's last segment streams.
        """
        plan = work.plan
        successor = work.continuation == "frames" and k + 1 < plan.segments
        # decode_s: the decoder's own time (CUDA: GPU time from events around each chunk's kernels,
        # so the consumer's CPU work between chunks is not counted; CPU: the calls' wall time).
        chunks = wan_decode.stream_decode(self.components.vae, latents, lookahead=int(latents.shape[2]) if successor else 1)
        skip = 0 if k == 0 else self.options.prev_frames
        tail = wan_decode.DecodedTail(plan.prev_frames)
        index = 0
        while True:
            with self._oom_explained(work.spec):
                chunk = next(chunks, None)
            if chunk is None:
                break
            work.stats["decode_s"] += chunk.decode_s
            if successor:
                tail.add(chunk.video)
                if chunk.last:
                    t1 = time.perf_counter()
                    with self._oom_explained(work.spec):
                        work.set_conditioning(k + 1, continuation.frames_continuation(self.components.vae, tail.video(), plan.segment_frames))
                    work.stats["continuation_encode_s"] += time.perf_counter() - t1
                    del tail
            if chunk.last and k == plan.segments - 1:
                self._finish(work)
            frames = chunk.frames
            del chunk
            for frame in frames:
                index += 1
                if index <= skip:
                    continue
                if work.emitted >= work.frames:
                    break
                work.emitted += 1
                yield np.ascontiguousarray(frame)

    def _finish(self, work: ClipWork) -> None:
        stats = dict(work.stats)
        plain = stats["plain_cfg_passes"]
        stats["cfg_flops_saved"] = round(1 - (stats["cond_passes"] + stats["uncond_passes"]) / plain, 4) if plain else 0.0
        for key in ("denoise_s", "decode_s", "continuation_encode_s", "prep_s"):
            stats[key] = round(stats[key], 3)
        device = self.components.device if self.components is not None else None
        if getattr(device, "type", None) == "cuda":
            import torch

            stats["peak_vram_gib"] = round(torch.cuda.max_memory_allocated(device) / 2**30, 3)
        self.last_render = stats


FACE_AREA_SCALE = 1.3  # Wan's preprocessing: the face crop has 1.3x the area of the landmarks' box


def face_box(points: np.ndarray, width: int, height: int) -> tuple[int, int, int, int] | None:
    """Wan's face crop (its preprocessing's ``get_face_bboxes``) around face landmarks ``points``
    (pixels ``[N, 2]``) on a ``width`` x ``height`` frame: the landmarks' box grown to
    :data:`FACE_AREA_SCALE` times its area at the same aspect ratio, the extra width split evenly
    left and right, three quarters of the extra height above (room above the brows) and one
    below; clipped to the frame and truncated to whole pixels. ``(x0, x1, y0, y1)``, or ``None``
    when the landmarks span no area."""
    lo, hi = points.min(axis=0), points.max(axis=0)
    w0, h0 = float(hi[0] - lo[0]), float(hi[1] - lo[1])
    if w0 <= 0 or h0 <= 0:
        return None
    grow = math.sqrt(FACE_AREA_SCALE)  # same aspect ratio: each side grows by sqrt(area scale)
    dw, dh = (grow - 1) * w0 / 2, (grow - 1) * h0 / 4
    box = (int(max(lo[0] - dw, 0)), int(min(hi[0] + dw, width)), int(max(lo[1] - 3 * dh, 0)), int(min(hi[1] + dh, height)))
    return box if box[1] > box[0] and box[3] > box[2] else None


@dataclass
class ClipWork:
    """One clip between the render stages: its plan, loaded sub-caches, face video, per-segment
    noise, the continuation mode and the next segment's conditioning, and stats.

    Continuation: segment ``k > 0`` denoises from a conditioning the previous segment left here
    (:meth:`set_conditioning`): with ``"frames"`` its decode stage builds it, with ``"latent"`` its
    denoise stage.
    """

    plan: segments.SegmentPlan
    frames: int
    spec: RenderSpec
    guidance: C.GuidanceArtifacts
    persona: C.PersonaArtifacts
    faces: np.ndarray
    noises: list[Any]
    stats: dict[str, Any]
    continuation: str = "frames"
    denoised: int = 0
    emitted: int = 0
    _next: tuple[int, Any] | None = field(default=None, init=False, repr=False)  # (segment, its conditioning)

    def set_conditioning(self, k: int, conditioning: Any) -> None:
        """Hand segment ``k``'s conditioning (float32 ``[1, 20, T_lat, h, w]`` on the CPU) over."""
        self._next = (k, conditioning)

    def ready(self, k: int) -> bool:
        """Whether segment ``k`` can denoise now (the first always can)."""
        return k == 0 or (self._next is not None and self._next[0] == k)

    def conditioning(self, k: int) -> Any:
        """Segment ``k``'s conditioning (``None`` for the first: the cached one).

        Raises:
            ValueError: segment ``k - 1`` has not left it (not decoded yet, with ``"frames"``).
        """
        if k == 0:
            return None
        if not self.ready(k):
            need = "decoded" if self.continuation == "frames" else "denoised"
            raise ValueError(f"segment {k} cannot denoise before segment {k - 1} was {need} "
                             f"(continuation={self.continuation!r} reads segment {k - 1}'s result)")  # fmt: skip
        return self._next[1]
