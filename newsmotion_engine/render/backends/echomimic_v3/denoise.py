"""One segment's denoising, as the flash-pro pipeline samples it (official
``src/pipeline_wan_fun_inpaint_audio_2512.py``): noise + the segment's conditioning (mask +
masked-video latents) through the transformer with the reference image's CLIP tokens, the prompt
and the segment's audio windows; with guidance, a second pass with zero audio and
``pred = uncond + scale * (cond - uncond)``; the scheduler steps the latents.

``batch_cfg=True`` runs both passes as one batch of two (the same arithmetic; one launch of every
kernel instead of two); ``False`` is the official order, one pass after the other.

With the registry's ``TeaCache`` applied, each pass runs in its own cache context (``cond``,
``uncond``, or ``cond+uncond`` for the batch) and the state is reset at every segment.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from newsmotion_engine.accel.teacache import reset_teacache, teacache_context

__all__ = ["decode", "denoise_segment"]


def denoise_segment(transformer: Any, scheduler: Any, condition: torch.Tensor, image_tokens: torch.Tensor,
                    prompt_embeds: torch.Tensor, audio: torch.Tensor, *, sigmas: list[float], guidance: float,
                    batch_cfg: bool, seed: int, dtype: Any) -> torch.Tensor:  # fmt: skip
    """Denoised latents ``[1, 16, T_lat, h, w]`` (float32) of one segment.

    ``condition`` ``[1, 20, T_lat, h, w]``, ``image_tokens`` ``[1, N, 1280]``, ``prompt_embeds``
    ``[1, 512, D]``, ``audio`` ``[1, F, window, layers, channels]`` (``F = 4 (T_lat - 1) + 1``), all
    on the transformer's device; the initial noise is drawn on the CPU from ``seed`` (the same on
    every device). ``sigmas``: the steps' unshifted sigmas (the scheduler shifts them and ends at 0;
    the timesteps it derives are the official integer ones).
    """
    device = condition.device
    _, _, t_lat, h, w = condition.shape
    noise = torch.randn((1, 16, t_lat, h, w), generator=torch.Generator("cpu").manual_seed(seed))
    latents = noise.to(device)
    scheduler.set_timesteps(sigmas=np.asarray(sigmas, dtype=np.float64), device=device)
    guided = guidance > 1.0
    cond_in = condition.to(dtype)
    text, image, audio = prompt_embeds.to(dtype), image_tokens.to(dtype), audio.to(dtype)
    if guided and batch_cfg:
        text2, image2 = text.expand(2, -1, -1), image.expand(2, -1, -1)
        audio2 = torch.cat([audio, torch.zeros_like(audio)])
    reset_teacache(transformer)  # each segment is a new trajectory (a no-op without TeaCache)
    with torch.no_grad():
        for t in scheduler.timesteps:
            x = torch.cat([latents.to(dtype), cond_in], dim=1)
            ts = t.expand(1).to(device)
            uncond = None
            if guided and batch_cfg:
                with teacache_context(transformer, "cond+uncond"):
                    both = transformer(x.expand(2, -1, -1, -1, -1), ts.expand(2), text2, image2, audio2, return_dict=False)[0]
                pred, uncond = both.float().chunk(2)
            else:
                with teacache_context(transformer, "cond"):
                    pred = transformer(x, ts, text, image, audio, return_dict=False)[0].float()
                if guided:
                    with teacache_context(transformer, "uncond"):
                        uncond = transformer(x, ts, text, image, torch.zeros_like(audio), return_dict=False)[0].float()
            if uncond is not None:
                pred = uncond + guidance * (pred - uncond)
            latents = scheduler.step(pred, t, latents, return_dict=False)[0]
    return latents


def decode(vae: Any, latents: torch.Tensor) -> torch.Tensor:
    """Normalized latents -> ``[1, 3, F, H, W]`` pixels in [-1, 1] (the Wan VAE, in its own dtype:
    the render dtype, as the official inference runs it)."""
    from diffusers.modular_pipelines.wan_animate_2.denoise import decode_vae

    with torch.no_grad():
        return decode_vae(vae, latents)  # cast to the VAE's dtype there
