"""Our sampling loop over the stock Wan-Animate-2 components, fed from the caches.

It follows the stock modular pipeline's per-segment blocks (``WanAnimate2RefExtractStep``,
``WanAnimate2SegmentDenoiseInner``, ``WanAnimate2SegmentDecodeStep``): the same transformer calls
with the same arguments in the same order, CFG on the base schedule (negative prompt and
``is_uncondtion=True``, which skips block 9), flow-matching Euler steps — but it takes cached
tensors, lets the caller supply the reference K/V (extracted now, read from the FP8 file, or an
LRU hit), and routes guidance through :class:`~newsmotion_engine.accel.cfg.CFGStrategy`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from newsmotion_engine.accel.cfg import CFGStrategy

__all__ = ["Geometry", "decode_segment", "decoded_latent_frames", "denoise_segment", "extract_reference_kv", "geometry"]


@dataclass(frozen=True)
class Geometry:
    """Segment-invariant sizes (the stock ``WanAnimate2PrepareSegmentsStep``)."""

    segment_frames: int
    width: int
    height: int
    latent_frames: int
    latent_h: int
    latent_w: int

    @property
    def grid_ref(self) -> torch.Tensor:
        return torch.tensor([[self.latent_frames, self.latent_h // 2, self.latent_w // 2]], dtype=torch.long)

    @property
    def seq_len(self) -> int:
        return (self.latent_frames + 1) * (self.latent_h // 2) * (self.latent_w // 2)

    @property
    def seq_len_ref(self) -> int:
        return self.latent_frames * self.latent_h * self.latent_w // 4

    @property
    def noise_shape(self) -> tuple[int, int, int, int]:
        return (16, self.latent_frames + 1, self.latent_h, self.latent_w)


def geometry(segment_frames: int, width: int, height: int) -> Geometry:
    return Geometry(segment_frames, width, height, (segment_frames - 1) // 4 + 1, height // 8, width // 8)


def extract_reference_kv(transformer: Any, driving_condition: torch.Tensor, prompt_ref: torch.Tensor,
                         clip_context: torch.Tensor, geom: Geometry, cache: Any | None = None) -> Any:  # fmt: skip
    """The extract pass (``kv_cache_mode="extract"``) over one driving segment; returns the filled
    ``WanAnimate2KVCache``. ``driving_condition`` ``[20, T_lat, h, w]`` (its channels 4: are the
    hidden states), ``prompt_ref`` ``[1, 512, D]``, ``clip_context`` ``[1, N, 1280]``, all on the
    device in the transformer's dtype."""
    from diffusers.models.transformers.transformer_wan_animate_2 import WanAnimate2KVCache

    dtype = driving_condition.dtype
    cache = cache if cache is not None else WanAnimate2KVCache(transformer.config.num_layers)
    # Ignored by the model (the extract pass runs at a fixed timestep of 1); given as the stock step does.
    t_ref = torch.tensor([1000.0], device=driving_condition.device, dtype=dtype)
    transformer(
        [driving_condition[4:]],
        timestep=t_ref,
        encoder_hidden_states=[prompt_ref[0]],
        encoder_hidden_states_image=clip_context,
        condition_latents=[driving_condition],
        kv_cache=cache,
        kv_cache_mode="extract",
        seq_len=geom.seq_len_ref,
        offset_grid_sizes=geom.grid_ref,
    )
    return cache


def _forward(transformer: Any, latents: torch.Tensor, t: torch.Tensor, text: torch.Tensor, reference: torch.Tensor,
             kv_cache: Any, image_tokens: torch.Tensor, geom: Geometry, uncond: bool, dtype: torch.dtype) -> torch.Tensor:  # fmt: skip
    return transformer(
        [latents.to(dtype)],
        timestep=torch.stack([t]),
        encoder_hidden_states=[text[0]],
        condition_latents=[reference],
        kv_cache=kv_cache,
        kv_cache_mode="cached",
        seq_len=geom.seq_len,
        reference_grid_sizes=geom.grid_ref,
        origin_len=geom.segment_frames,
        origin_area=[geom.height, geom.width],
        is_uncondtion=uncond,
        encoder_hidden_states_image=image_tokens,
    ).sample[0]


def denoise_segment(transformer: Any, scheduler: Any, latents: torch.Tensor, reference_latents: torch.Tensor,
                    kv_cache: Any, *, prompt: torch.Tensor, negative: torch.Tensor | None, image_tokens: torch.Tensor,
                    steps: int, cfg: CFGStrategy, geom: Geometry, generator: torch.Generator | None = None,
                    dtype: torch.dtype) -> torch.Tensor:  # fmt: skip
    """``steps`` denoising steps of float32 ``latents`` ``[16, 1 + T_lat, h, w]`` against the
    filled ``kv_cache``; ``reference_latents`` ``[20, 1 + T_lat, h, w]`` (reference image slot +
    segment conditioning) in ``dtype``."""
    from newsmotion_engine.accel.teacache import teacache_context  # no-op contexts without TeaCache

    scheduler.set_timesteps(steps, device=latents.device)
    for i, t in enumerate(scheduler.timesteps):
        with teacache_context(transformer, "cond"):
            cond = _forward(transformer, latents, t, prompt, reference_latents, kv_cache, image_tokens, geom, False, dtype)
        uncond = None
        if cfg.needs_uncond(i):
            if negative is None:
                raise ValueError("CFG needs the negative prompt embeddings of the guidance cache")
            with teacache_context(transformer, "uncond"):
                uncond = _forward(transformer, latents, t, negative, reference_latents, kv_cache, image_tokens, geom, True, dtype)
        pred = cfg.combine(i, cond, uncond)
        latents = scheduler.step(pred.unsqueeze(0), t, latents.unsqueeze(0), return_dict=False, generator=generator)[0].squeeze(0)
    return latents


def decoded_latent_frames(latent_frames: int, frames: int | None) -> int:
    """How many of a segment's ``latent_frames`` to decode for its first ``frames`` (all for None):
    the Wan VAE decodes causally, one latent frame after another (1 frame, then 4 each), so the
    first ``n`` latents decode to exactly the first ``1 + 4 (n - 1)`` frames of the whole decode."""
    if frames is None:
        return latent_frames
    return min(latent_frames, max(1, -(-(frames - 1) // 4) + 1))


def decode_segment(vae: Any, latents: torch.Tensor, frames: int | None = None) -> torch.Tensor:
    """Decode ``[16, 1 + T_lat, h, w]`` (skipping the reference slot) -> ``[1, 3, T, H, W]`` in [-1, 1].
    ``frames``: only the segment's first ``frames`` are wanted (the clip's last segment usually
    runs past the clip's end): the Wan VAE decodes causally, one latent frame after another, so the
    first ``(frames - 1) // 4 + 1`` latents decode to exactly the first ``1 + 4 * that`` frames
    of the full decode, and the rest is never computed."""
    from diffusers.modular_pipelines.wan_animate_2.denoise import decode_vae

    z = latents.to(torch.float32)[:, 1:]
    return decode_vae(vae, z[:, : decoded_latent_frames(z.shape[1], frames)])
