"""Champ's sampling, as the official ``MultiGuidance2LongVideoPipeline`` (``pipelines/
pipeline_aggregation.py``) does it, on our components:

1. reference: the reference frame's VAE latent mean x 0.18215 and CLIP's projected embedding of
   the frame stretched to 224 x 224 (the Tier-2 sub-cache, :func:`encode_reference`); the
   reference UNet runs once at t = 0 and fills the attention bank;
2. guidance: each guidance video (``/ 255``, RGB) through its encoder, the four summed
   (:func:`encode_guidance`);
3. DDIM over the whole clip in context windows (:func:`context_windows`: the official ``uniform``
   schedule with stride 1 — 24-frame windows every 20 frames, wrapping around the end, which our
   seamless loops want), each window's prediction averaged where windows overlap, then CFG
   (unconditional: zero CLIP embedding, no reference);
4. decode frame by frame (:func:`decode_frames`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

__all__ = ["context_windows", "decode_frames", "encode_guidance", "encode_reference", "sample_latents"]

CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)


def context_windows(frames: int, context: int, overlap: int) -> list[list[int]]:
    """The official ``uniform`` context schedule at step 0 with stride 1 (closed loop): windows of
    ``context`` frames starting every ``context - overlap`` frames, indices modulo ``frames``;
    one window of every frame when the clip is not longer than ``context``."""
    if frames <= context:
        return [list(range(frames))]
    return [[j % frames for j in range(start, start + context)] for start in range(0, frames, context - overlap)]


def encode_reference(components: Any, frame: np.ndarray, width: int, height: int) -> tuple[Any, Any]:
    """``(ref_latents [1, 4, height/8, width/8], clip_embeds [1, 1, D])`` float32 CPU tensors of the
    reference ``frame`` (uint8 RGB, any size), as the official pipeline prepares them: PIL's Lanczos
    to the model's size for the VAE (``VaeImageProcessor``), PIL's default (bicubic) to 224 x 224
    for CLIP, then CLIP's mean / std."""
    import torch
    from PIL import Image

    dev = components.device
    image = Image.fromarray(frame)
    with torch.no_grad():
        vae_in = np.array(image.resize((width, height), Image.Resampling.LANCZOS))
        x = torch.from_numpy(vae_in).permute(2, 0, 1)[None].float().div(127.5).sub(1.0)
        lat = components.vae.encode(x.to(dev, components.vae.dtype)).latent_dist.mean * components.vae.config.scaling_factor
        size = components.image_encoder.config.image_size
        clip_img = np.asarray(image.resize((size, size), Image.Resampling.BICUBIC)).astype(np.float32) / 255.0
        clip_img = (clip_img - np.array(CLIP_MEAN, np.float32)) / np.array(CLIP_STD, np.float32)
        pix = torch.from_numpy(clip_img).permute(2, 0, 1)[None]
        emb = components.image_encoder(pix.to(dev, components.image_encoder.dtype)).image_embeds
    return lat.float().cpu(), emb[:, None].float().cpu()


def encode_guidance(components: Any, maps: dict[str, np.ndarray], chunk: int = 24) -> Any:
    """Sum of the guidance encoders' features of ``maps`` (type -> uint8 ``[T, H, W, 3]``) ->
    ``[T, C, H/8, W/8]`` on the device, encoded ``chunk`` frames at a time (every op is per frame)."""
    import torch

    encoders = components.guidance_encoders
    dev, dt = components.device, components.dtype
    total = None
    with torch.no_grad():
        for name, video in maps.items():
            parts = []
            for i in range(0, video.shape[0], chunk):
                x = torch.from_numpy(np.ascontiguousarray(video[i : i + chunk])).permute(0, 3, 1, 2).to(dev, dt) / 255.0
                parts.append(encoders[name](x))
            fea = torch.cat(parts)
            total = fea if total is None else total + fea
    return total


def sample_latents(components: Any, guidance_fea: Any, ref_latents: Any, clip_embeds: Any, *, steps: int,
                   guidance_scale: float, context: int, overlap: int, seed: int, official_reference: bool = False,
                   on_step: Callable[[int, int], None] | None = None) -> Any:  # fmt: skip
    """The clip's denoised latents ``[1, 4, T, h, w]`` (see the module docstring)."""
    import torch

    from newsmotion_engine.render.backends.champ.modules import GuidanceInjection

    c = components
    dev, dt = c.device, c.dtype
    T, _, h, w = guidance_fea.shape
    scheduler = c.new_scheduler()
    scheduler.set_timesteps(steps, device=dev)
    gen = torch.Generator(device="cpu").manual_seed(int(seed))
    latents = torch.randn((1, 4, T, h, w), generator=gen, dtype=torch.float32).to(dev) * scheduler.init_noise_sigma
    cfg = guidance_scale > 1.0
    cond = clip_embeds.to(dev, dt)
    context_embeds = torch.cat([torch.zeros_like(cond), cond]) if cfg else cond
    state = c.reference  # the bank the reference UNet's processors fill (installed at load)
    inject = GuidanceInjection(c.transformer)
    windows = context_windows(T, context, overlap)
    # each window's frame indices on the device once: a Python list index is a host-to-device copy
    # per use, four uses per window and step
    window_index = [torch.tensor(win, device=dev) for win in windows]
    rows = 2 if cfg else 1
    try:
        with torch.no_grad():
            # The reference UNet once, at t = 0: conditional only (module docstring of .modules), or as
            # the official pipeline runs it (both CFG halves; the unconditional half's bank goes unused).
            state.official = official_reference
            ref_in, ref_ctx = (ref_latents.repeat(rows, 1, 1, 1), context_embeds) if official_reference else (ref_latents, cond)
            c.reference_unet(ref_in.to(dev, dt), torch.zeros((), device=dev), encoder_hidden_states=ref_ctx, return_dict=False)
            for i, t in enumerate(scheduler.timesteps):
                pred_sum = torch.zeros((rows, *latents.shape[1:]), device=dev, dtype=torch.float32)
                counter = torch.zeros((1, 1, T, 1, 1), device=dev, dtype=torch.float32)
                for win in window_index:
                    x = latents[:, :, win].repeat(rows, 1, 1, 1, 1)
                    x = scheduler.scale_model_input(x, t).to(dt)
                    state.frames, state.uncond_rows = len(win), len(win) if cfg else 0
                    inject.features = guidance_fea[win].repeat(rows, 1, 1, 1)
                    # UNetMotionModel takes one context per frame (its callers repeat it, as AnimateDiff's pipeline does).
                    ctx = context_embeds.repeat_interleave(len(win), dim=0)
                    out = c.transformer(x, t, encoder_hidden_states=ctx, return_dict=False)[0]
                    pred_sum[:, :, win] += out.float()
                    counter[:, :, win] += 1
                pred = pred_sum / counter
                if cfg:
                    uncond, cond_pred = pred.chunk(2)
                    pred = uncond + guidance_scale * (cond_pred - uncond)
                latents = scheduler.step(pred, t, latents, eta=0.0).prev_sample
                if on_step:
                    on_step(i + 1, len(scheduler.timesteps))
    finally:
        inject.remove()
        state.clear()
    return latents


def decode_frames(components: Any, latents: Any) -> Iterator[np.ndarray]:
    """uint8 RGB frames of ``latents [1, 4, T, h, w]``, one VAE decode per frame (as the official
    ``decode_latents``)."""
    import torch

    vae = components.vae
    for f in range(latents.shape[2]):
        with torch.no_grad():
            img = vae.decode(latents[:, :, f].to(vae.dtype) / vae.config.scaling_factor).sample
        img = (img / 2 + 0.5).clamp(0, 1)[0].permute(1, 2, 0).float().cpu().numpy()
        yield (img * 255).astype(np.uint8)  # truncated, as the official save_videos_grid does
