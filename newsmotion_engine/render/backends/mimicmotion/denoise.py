"""MimicMotion's sampling loop on diffusers components: overlapping windows with progressive
latent fusion, and the chunked temporal decode (the official ``MimicMotionPipeline.__call__`` and
``decode_latents``; its figure ``assets/figures/latent_fusion.png``).

The clip is ``F = N + 1`` frames: the reference frame's pose first, then the ``N`` driving poses.
Every window (:func:`window_indices`) is frame 0 plus ``tile - 1`` consecutive frames, windows
``tile - overlap`` apart, a last one aligned to the clip's end. At every step each window is
denoised by the UNet (CFG: an unconditional pass without CLIP embedding, reference latents or pose,
and a conditional one), and its noise prediction is added into the whole clip's with triangular
weights over the window's positions (``min(w, 2 - w)``, ``w = (i + 0.5) * 2 / tile``), then divided
by the summed weights: overlapping frames blend smoothly from one window to the next. One Euler
step then moves every frame. The initial noise is one window's noise repeated along the clip, as
the official pipeline draws it; the reference frame is decoded with the rest and dropped.

Exact savings over the official loop (same numbers up to float rounding): each window's PoseNet
features are computed once per render instead of at every step, and ``batch_cfg`` runs a window's
two CFG passes as one batch of two (the unconditional half gets zero pose features, which adds
exactly nothing). The prediction is accumulated in float32 (the official accumulates in the
model's dtype).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from newsmotion_engine.render.backends.mimicmotion.pose_net import pose_conditioning

__all__ = ["DenoiseInputs", "decode_frames", "denoise", "window_indices", "window_weights"]


def window_indices(frames: int, tile: int, overlap: int) -> list[list[int]]:
    """The official windows over ``frames`` frames (reference frame included): each starts with
    frame 0. A clip shorter than a window gets one window of its own length (the official
    pipeline needs ``frames >= tile``)."""
    tile = min(int(tile), int(frames))
    step = max(1, tile - int(overlap))
    indices = [[0, *range(i + 1, min(i + tile, frames))] for i in range(0, frames - tile + 1, step)]
    if indices[-1][-1] < frames - 1:
        indices.append([0, *range(frames - tile + 1, frames)])
    return indices


def window_weights(tile: int) -> torch.Tensor:
    """The fusion weights over a window's positions: a triangle peaking mid-window."""
    w = (torch.arange(tile, dtype=torch.float32) + 0.5) * 2.0 / tile
    return torch.minimum(w, 2 - w)


@dataclass
class DenoiseInputs:
    """What one clip's denoising reads (CPU tensors; moved to the device here)."""

    image_embeds: Any  # [1, 1, D]
    image_latents: Any  # [1, 4, h, w]
    pose_pixels: Any  # [F, 3, H, W] in [-1, 1], the reference pose first
    noise: Any  # [1, tile, 4, h, w]: one window's initial noise (repeated along the clip)
    added_time_ids: tuple[float, float, float]  # (fps - 1, motion bucket, noise augmentation)
    stats: dict[str, Any] = field(default_factory=dict)


def denoise(comps: Any, inputs: DenoiseInputs, *, steps: int, guidance_scale: float, tile: int, overlap: int,
            batch_cfg: bool = True) -> torch.Tensor:  # fmt: skip
    """The clip's denoised latents ``[1, F, 4, h, w]`` (float32, on the device). ``inputs.stats``
    gets ``windows``, ``unet_calls``, ``pose_net_s``, ``denoise_s``."""
    unet, device, dtype = comps.unet, comps.device, comps.dtype
    F = int(inputs.pose_pixels.shape[0])
    windows = window_indices(F, tile, overlap)
    tile = len(windows[0])
    weight = window_weights(tile).to(device)
    cfg = guidance_scale > 1.0
    t0 = time.perf_counter()
    scheduler = comps.new_scheduler()
    scheduler.set_timesteps(steps, device=device)

    noise = inputs.noise[:, :tile].to(device=device, dtype=torch.float32)
    latents = noise.repeat(1, F // tile + 1, 1, 1, 1)[:, :F] * scheduler.init_noise_sigma
    image_latents = inputs.image_latents.to(device=device, dtype=dtype)[:, None].expand(1, F, -1, -1, -1)
    embeds = inputs.image_embeds.to(device=device, dtype=dtype)
    time_ids = torch.tensor([inputs.added_time_ids], device=device, dtype=dtype)
    if cfg:  # unconditional: zero CLIP embedding, zero reference latents (the official negative)
        image_latents = torch.cat([torch.zeros_like(image_latents), image_latents])
        embeds = torch.cat([torch.zeros_like(embeds), embeds])
        time_ids = time_ids.repeat(2, 1)
    batch = 2 if cfg else 1

    t1 = time.perf_counter()
    with torch.no_grad():
        pose = [comps.pose_net(inputs.pose_pixels[idx].to(device=device, dtype=dtype)) for idx in windows]
    inputs.stats["pose_net_s"] = round(time.perf_counter() - t1, 3)

    calls = 0
    with torch.no_grad():
        for t in scheduler.timesteps:
            model_in = scheduler.scale_model_input(torch.cat([latents] * batch), t)
            model_in = torch.cat([model_in.to(dtype), image_latents], dim=2)
            pred = torch.zeros((batch, F, *latents.shape[2:]), device=device, dtype=torch.float32)
            count = torch.zeros(F, device=device, dtype=torch.float32)
            for idx, pose_latents in zip(windows, pose):
                if cfg and batch_cfg:
                    both = torch.cat([torch.zeros_like(pose_latents), pose_latents])
                    with pose_conditioning(unet, both):
                        out = unet(model_in[:, idx], t, encoder_hidden_states=embeds, added_time_ids=time_ids, return_dict=False)[0]
                    calls += 1
                else:
                    outs = []
                    if cfg:
                        outs.append(unet(model_in[:1, idx], t, encoder_hidden_states=embeds[:1], added_time_ids=time_ids[:1],
                                         return_dict=False)[0])  # fmt: skip
                    with pose_conditioning(unet, pose_latents):
                        outs.append(unet(model_in[batch - 1 :, idx], t, encoder_hidden_states=embeds[batch - 1 :],
                                         added_time_ids=time_ids[batch - 1 :], return_dict=False)[0])  # fmt: skip
                    out = torch.cat(outs)
                    calls += len(outs)
                pred[:, idx] += out.float() * weight[:, None, None, None]
                count[idx] += weight
            pred /= count[:, None, None, None]
            if cfg:
                uncond, cond = pred.chunk(2)
                pred = uncond + guidance_scale * (cond - uncond)
            latents = scheduler.step(pred, t, latents, return_dict=False)[0]
    if getattr(device, "type", "cpu") == "cuda":
        torch.cuda.synchronize(device)
    inputs.stats.update(windows=len(windows), unet_calls=calls, denoise_s=round(time.perf_counter() - t0, 3))
    return latents


def decode_frames(vae: Any, latents: torch.Tensor, chunk: int, stats: dict[str, Any] | None = None) -> Iterator[np.ndarray]:
    """uint8 RGB frames ``[H, W, 3]`` of ``latents`` (``[1, F, 4, h, w]``), decoded ``chunk``
    frames per temporal-decoder call as the official ``decode_latents`` (the chunks' boundaries
    shape the temporal decoder's output), converted as its output path does: ``(x / 2 + 0.5)``
    clamped, times 255, truncated to uint8. ``stats["decode_s"]`` accumulates."""
    flat = latents.flatten(0, 1) / vae.config.scaling_factor
    for i in range(0, flat.shape[0], chunk):
        t0 = time.perf_counter()
        part = flat[i : i + chunk]
        with torch.no_grad():
            video = vae.decode(part.to(vae.dtype), num_frames=int(part.shape[0])).sample
        frames = ((video.float() / 2 + 0.5).clamp(0, 1) * 255.0).to(torch.uint8).permute(0, 2, 3, 1).cpu().numpy()
        if stats is not None:
            stats["decode_s"] = round(stats.get("decode_s", 0.0) + time.perf_counter() - t0, 3)
        yield from frames
