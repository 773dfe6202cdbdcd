"""One inference segment of the ``wan-animate`` backend, from cached tensors to decoded frames.

:func:`denoise_latents` is the shipped per-segment denoise: ``WanAnimateBackend.frames`` calls it
for every segment of a clip and decodes through :func:`~newsmotion_engine.render.backends.wan.decode.stream_decode`. :func:`render_segment`
is that denoise followed by the whole decode (:func:`decode_frames`, frame-for-frame the same as the
streamed one): the GPU benchmark's "ours" side times one segment through it. The denoise
assembles the segment's inputs from the guidance and persona artifacts and the segment's
conditioning (the first segment's cached one, or a continuation's, :mod:`..wan.continuation`),
builds the CFG strategy from the components' schedule (set by the ``CFGSchedule`` acceleration;
plain CFG without one), resets TeaCache's state (a new trajectory) and denoises
(:func:`denoise.denoise_segment`).

Example::

    result = render_segment(components, guidance_artifacts, persona_artifacts, face_frames,
                            plan=plan, segment=0, noise=noise, steps=4, guidance_scale=1.0)
    result.video      # uint8 [T, H, W, 3]
    result.stats      # denoise_s, decode_s, CFG passes, TeaCache computed / skipped
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from newsmotion_engine.accel.cfg import CFGStrategy
from newsmotion_engine.accel.teacache import reset_teacache, teacache_stats
from newsmotion_engine.render.backends.wan import decode as wan_decode
from newsmotion_engine.render.backends.wan_animate import denoise
from newsmotion_engine.render.backends.wan.encoders import to_video_tensor
from newsmotion_engine.render.backends.wan.segments import SegmentPlan
from newsmotion_engine.render.backends.wan_animate.caches import GuidanceArtifacts, PersonaArtifacts

__all__ = ["SegmentResult", "decode_frames", "denoise_latents", "render_segment"]


@dataclass
class SegmentResult:
    """One rendered segment: its final latents (float32, with the reference frame first), the
    decoded frames (uint8 ``[T, H, W, 3]``) and per-segment statistics."""

    latents: torch.Tensor
    video: np.ndarray
    stats: dict[str, Any]


def render_segment(
    components: Any,
    guidance: GuidanceArtifacts,
    persona: PersonaArtifacts,
    face_frames: np.ndarray,
    *,
    plan: SegmentPlan,
    segment: int,
    noise: torch.Tensor,
    steps: int,
    guidance_scale: float,
    conditioning: torch.Tensor | None = None,
) -> SegmentResult:
    """Denoise and decode segment ``segment`` of ``plan`` (:func:`denoise_latents`, then
    :func:`decode_frames`).

    Args:
        components: the backend's loaded components (``transformer``, ``vae``, ``device``,
            ``dtype``, ``new_scheduler()``, ``cfg_schedule``), accelerations already applied.
        guidance, persona: the loaded sub-cache tensors.
        face_frames: uint8 ``[plan.segment_frames, S, S, 3]`` face crops for this segment.
        noise: float32 ``[1, 16, 1 + T_lat, h, w]`` initial latents.
        steps, guidance_scale: sampling settings (guidance 1.0 = no unconditional pass).
        conditioning: float32 ``[1, 20, T_lat, h, w]`` (mask + latents) of a continuation segment
            (:mod:`..wan.continuation`, from the previous one);
            required for every segment after the first, which uses the cached one.
    """
    latents, stats = denoise_latents(components, guidance, persona, face_frames, plan=plan, segment=segment, noise=noise,
                                     steps=steps, guidance_scale=guidance_scale, conditioning=conditioning)  # fmt: skip
    video, decode_s = decode_frames(components, latents)
    return SegmentResult(latents=latents, video=video, stats={**stats, "decode_s": decode_s})


def denoise_latents(
    components: Any,
    guidance: GuidanceArtifacts,
    persona: PersonaArtifacts,
    face_frames: np.ndarray,
    *,
    plan: SegmentPlan,
    segment: int,
    noise: torch.Tensor,
    steps: int,
    guidance_scale: float,
    conditioning: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, Any]]:
    """The denoising half of :func:`render_segment`: final latents (on the device) and stats
    (``denoise_s``, CFG passes, TeaCache computed / skipped)."""
    dev, dtype = components.device, components.dtype
    if segment > 0 and conditioning is None:
        raise ValueError(f"render_segment: continuation segment {segment} needs its conditioning (the previous "
                         "segment's continuation)")  # fmt: skip
    cond = guidance.cond0_latents if segment == 0 else conditioning
    use_cfg = guidance_scale > 1.0
    inputs = denoise.SegmentInputs(
        reference_latents=torch.cat([persona.ref_latents, cond], dim=2).to(dev, torch.float32),
        pose_latents=guidance.pose_latents[segment : segment + 1].to(dev, dtype),
        face_pixels=to_video_tensor(face_frames).to(dev, dtype),
        prompt_embeds=guidance.prompt_embeds.to(dev, dtype),
        negative_embeds=guidance.negative_embeds.to(dev, dtype) if use_cfg else None,
        image_embeds=persona.image_tokens.to(dev, dtype),
    )
    strategy = CFGStrategy(guidance_scale, steps, getattr(components, "cfg_schedule", None))
    reset_teacache(components.transformer)  # a new trajectory: nothing carries over (no-op without TeaCache)
    t0 = time.perf_counter()
    with torch.no_grad():
        latents = denoise.denoise_segment(components.transformer, components.new_scheduler(), noise.to(dev), inputs,
                                          steps=steps, cfg=strategy, dtype=dtype,
                                          pyramid=getattr(components, "pyramid", None),
                                          new_scheduler=components.new_scheduler)  # fmt: skip
    if getattr(dev, "type", "cpu") == "cuda":
        torch.cuda.current_stream(dev).synchronize()
    tc = teacache_stats(components.transformer)
    stats = {"denoise_s": time.perf_counter() - t0, **strategy.stats(),
             "teacache_computed": tc["computed"], "teacache_skipped": tc["skipped"]}  # fmt: skip
    return latents, stats


def decode_frames(components: Any, latents: torch.Tensor) -> tuple[np.ndarray, float]:
    """The decoding half of :func:`render_segment`: uint8 ``[T, H, W, 3]`` frames and seconds."""
    t0 = time.perf_counter()
    video = wan_decode.decode_latents(components.vae, latents)  # ends in a copy to the host: synchronous
    return video, time.perf_counter() - t0
