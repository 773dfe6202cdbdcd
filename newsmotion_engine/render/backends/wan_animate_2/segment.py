"""One segment of the ``wan-animate-2`` backend, from cached tensors to denoised latents, and the
latent frames its decode needs.

:func:`denoise_from_caches` is the shipped per-segment denoise: ``WanAnimate2Backend.frames`` calls
it for every segment and decodes the result through :func:`decode_chunks` (streamed one latent
frame at a time, :func:`~newsmotion_engine.render.backends.wan.decode.stream_decode`: the same frames
as the whole decode). The reference K/V come from ``kv_source(segment)`` (the backend's
:meth:`reference_kv`: extract now, FP8 file, or LRU), so the three options share everything else.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from newsmotion_engine.accel.cfg import CFGStrategy
from newsmotion_engine.accel.teacache import reset_teacache, teacache_stats
from newsmotion_engine.render.backends.wan import decode as wan_decode
from newsmotion_engine.render.backends.wan.continuation import frames_continuation, latent_continuation
from newsmotion_engine.render.backends.wan_animate_2 import denoise as D
from newsmotion_engine.render.backends.wan.artifacts import as_tensor
from newsmotion_engine.render.backends.wan_animate_2.caches import GuidanceArtifacts, PersonaArtifacts

__all__ = ["DenoisedSegment", "decode_chunks", "denoise_from_caches"]


@dataclass
class DenoisedSegment:
    """One segment's final latents ``[16, 1 + T_lat, h, w]`` (float32, the reference slot first)
    and statistics (``kv_s``, ``kv_source``, ``denoise_s``, the CFG passes, TeaCache counts)."""

    latents: torch.Tensor
    stats: dict[str, Any]


def _sync(device: Any) -> None:
    if getattr(device, "type", "cpu") == "cuda":
        torch.cuda.current_stream(device).synchronize()


def denoise_from_caches(
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
    previous_latents: torch.Tensor | None = None,
    previous_tail: torch.Tensor | None = None,
    continuation: str = "latent",
    prev_frames: int = 1,
    generator: torch.Generator | None = None,
) -> DenoisedSegment:
    """Denoise ``segment``. ``noise`` float32 ``[16, 1 + T_lat, h, w]``;
    ``kv_source(segment) -> (filled WanAnimate2KVCache, how)`` with ``how`` in ``extract`` /
    ``fp8-file`` / ``lru-hit``. After the first segment, the previous one's result: its latents
    (``continuation="latent"``) or its last ``prev_frames`` decoded frames ``previous_tail``
    (``[1, 3, prev_frames, H, W]`` in [-1, 1], straight from the decoder: ``"frames"``)."""
    dev, dtype = components.device, components.dtype
    if segment > 0 and (previous_tail if continuation == "frames" else previous_latents) is None:
        raise ValueError(f"denoise_from_caches: segment {segment} continues ({continuation!r}) from the previous segment's "
                         f"{'decoded tail' if continuation == 'frames' else 'latents'}; none given")  # fmt: skip
    t0 = time.perf_counter()
    kv, how = kv_source(segment)
    _sync(dev)
    t1 = time.perf_counter()
    if segment == 0:
        gen = as_tensor(guidance.gen_condition).to(dev)
    elif continuation == "frames":
        gen = frames_continuation(components.vae, previous_tail[:, :, -prev_frames:], geom.segment_frames)[0]
    else:
        gen = latent_continuation(as_tensor(guidance.gen_condition).to(dev)[None], previous_latents[None], prev_frames)[0]
    reference = torch.cat([as_tensor(persona.ref_latents).to(dev), gen.to(dev, torch.float32)], dim=1).to(dtype)
    _sync(dev)
    t_cond = time.perf_counter()  # the conditioning (a "frames" continuation's VAE encode) is ready
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
    tc = teacache_stats(components.transformer)
    stats = {"kv_s": t1 - t0, "kv_source": how, "denoise_s": t2 - t1, "condition_s": t_cond - t1, **strategy.stats(),
             "teacache_computed": tc["computed"], "teacache_skipped": tc["skipped"]}  # fmt: skip
    return DenoisedSegment(latents=latents, stats=stats)


def decode_chunks(vae: Any, latents: torch.Tensor, frames: int | None = None, *, lookahead: int = 1) -> Iterator[wan_decode.DecodedChunk]:
    """Decode ``[16, 1 + T_lat, h, w]`` (skipping the reference slot) one latent frame at a time
    (:func:`~newsmotion_engine.render.backends.wan.decode.stream_decode`; ``lookahead`` as there):
    the segment's first ``frames`` (and a few more, up to a latent's 4), all by default; the
    same numbers as :func:`~newsmotion_engine.render.backends.wan_animate_2.denoise.decode_segment`."""
    n = D.decoded_latent_frames(int(latents.shape[1]) - 1, frames)
    yield from wan_decode.stream_decode(vae, latents[None, :, : 1 + n], lookahead=lookahead)
