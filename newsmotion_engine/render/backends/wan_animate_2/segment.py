"""One segment of the ``wan-animate-2`` backend, from cached tensors to decoded frames.

:func:`render_segment` is the shipped per-segment path: ``WanAnimate2Backend.frames`` calls it
for every segment, and the GPU benchmark's "ours" side calls it for what it times. The reference
K/V come from ``kv_source(segment)`` (the backend's :meth:`reference_kv`: extract now, FP8 file,
or LRU), so the three options share everything else.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from newsmotion_engine.accel.cfg import CFGStrategy
from newsmotion_engine.accel.teacache import reset_teacache, teacache_stats
from newsmotion_engine.render.backends.wan.continuation import frames_continuation, latent_continuation
from newsmotion_engine.render.backends.wan_animate_2 import denoise as D
from newsmotion_engine.render.backends.wan.artifacts import as_tensor
from newsmotion_engine.render.backends.wan_animate_2.caches import GuidanceArtifacts, PersonaArtifacts

__all__ = ["SegmentResult", "render_segment"]


@dataclass
class SegmentResult:
    """One segment: final latents ``[16, 1 + T_lat, h, w]`` (float32), the decoded video
    ``[1, 3, T, H, W]`` in [-1, 1] (device), its uint8 frames ``[T, H, W, 3]``, and statistics."""

    latents: torch.Tensor
    video: torch.Tensor
    frames: np.ndarray
    stats: dict[str, Any]


def _sync(device: Any) -> None:
    if getattr(device, "type", "cpu") == "cuda":
        torch.cuda.current_stream(device).synchronize()


def render_segment(
    components: Any,
    guidance: GuidanceArtifacts,
    persona: PersonaArtifacts,
    *,
    geom: D.Geometry,
    segment: int,
    noise: torch.Tensor,
    steps: int,
    guidance_scale: float,
    kv_source: Callable[[int], tuple[Any, str]],
    previous: SegmentResult | None = None,
    continuation: str = "latent",
    prev_frames: int = 1,
    generator: torch.Generator | None = None,
    decode_frames: int | None = None,
) -> SegmentResult:
    """Denoise and decode ``segment``. ``noise`` float32 ``[16, 1 + T_lat, h, w]``;
    ``kv_source(segment) -> (filled WanAnimate2KVCache, how)`` with ``how`` in ``extract`` /
    ``fp8-file`` / ``lru-hit``; ``previous`` required after the first segment. ``decode_frames``:
    decode only the segment's first frames that many (and a few more, up to a latent's 4), as
    :func:`~newsmotion_engine.render.backends.wan_animate_2.denoise.decode_segment` says; all by default."""
    dev, dtype = components.device, components.dtype
    if segment > 0 and previous is None:
        raise ValueError("render_segment: a continuation segment needs the previous segment's result")
    t0 = time.perf_counter()
    kv, how = kv_source(segment)
    _sync(dev)
    t1 = time.perf_counter()
    if segment == 0:
        gen = as_tensor(guidance.gen_condition).to(dev)
    elif continuation == "frames":
        gen = frames_continuation(components.vae, previous.video[:, :, -prev_frames:], geom.segment_frames)[0]
    else:
        gen = latent_continuation(as_tensor(guidance.gen_condition).to(dev)[None], previous.latents[None], prev_frames)[0]
    reference = torch.cat([as_tensor(persona.ref_latents).to(dev), gen.to(dev, torch.float32)], dim=1).to(dtype)
    use_cfg = guidance_scale > 1.0
    strategy = CFGStrategy(guidance_scale, steps, getattr(components, "cfg_schedule", None))
    reset_teacache(components.transformer)  # a new trajectory: nothing carries over (no-op without TeaCache)
    with torch.no_grad():
        latents = D.denoise_segment(
            components.transformer, components.new_scheduler(), noise.to(dev), reference, kv,
            prompt=as_tensor(persona.prompt_embeds).to(dev, dtype),
            negative=as_tensor(guidance.negative_embeds).to(dev, dtype) if use_cfg else None,
            image_tokens=as_tensor(persona.image_tokens).to(dev, dtype),
            steps=steps, cfg=strategy, geom=geom, generator=generator, dtype=dtype,
        )  # fmt: skip
        _sync(dev)
        t2 = time.perf_counter()
        video = D.decode_segment(components.vae, latents, decode_frames)
        frames = D.to_uint8_frames(video)
    t3 = time.perf_counter()
    tc = teacache_stats(components.transformer)
    stats = {"kv_s": t1 - t0, "kv_source": how, "denoise_s": t2 - t1, "decode_s": t3 - t2, **strategy.stats(),
             "teacache_computed": tc["computed"], "teacache_skipped": tc["skipped"]}  # fmt: skip
    return SegmentResult(latents=latents, video=video, frames=frames, stats=stats)
