"""One SCAIL-2 segment, from cached tensors to decoded frames: the sampling loop of the official
``SCAIL2Pipeline.generate`` (zai-org/SCAIL-2, ``wan-scail2`` branch) with diffusers' scheduler.

Per segment (:func:`render_segment`):

1. noise ``[16, T_lat, h, w]`` (float32, seeded);
2. a continued segment (not the first) gets *clean history*: the previous segment's last
   ``history_frames`` decoded frames, VAE-encoded (5 frames -> 2 latent frames), overwrite the
   first latent frames before every model call and after every scheduler step, and the 4 mask
   channels of the video input are 1 over them (the official ``history_mask``);
3. ``steps`` scheduler steps; each calls the DiT on the conditional text and, when
   ``guidance_scale > 1``, on the negative text, mixed as ``uncond + g * (cond - uncond)``
   (``batch_cfg``: both in one call, a batch of two);
4. the VAE decodes the final latents (float32, as Wan decodes).

The reference latents and masks, the CLIP tokens and the driving latents and masks are the same
for both passes (only the text differs), as in the official code.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

__all__ = ["SegmentInputs", "SegmentResult", "decode_latents", "denoise_segment", "render_segment", "to_uint8_frames"]


@dataclass
class SegmentInputs:
    """One segment's conditioning on the device (batch 1)."""

    text: torch.Tensor  # [1, 512, D]
    negative: torch.Tensor  # [1, 512, D]
    image: torch.Tensor  # [1, 257, 1280]
    reference: torch.Tensor  # [1, 16, 1, h, w]
    reference_mask: torch.Tensor  # [1, 28, 1, h, w]
    pose: torch.Tensor  # [1, 16, T_lat, h/2, w/2]
    driving_mask: torch.Tensor  # [1, 28, T_lat, h/2, w/2]


@dataclass
class SegmentResult:
    latents: torch.Tensor  # [16, T_lat, h, w] float32
    video: torch.Tensor  # [1, 3, T, H, W] in [-1, 1] (the VAE decoder's output)
    frames: np.ndarray  # uint8 [T, H, W, 3]
    stats: dict[str, Any]


def _with_history(latents: torch.Tensor, history: torch.Tensor | None) -> torch.Tensor:
    if history is None:
        return latents
    latents = latents.clone()
    latents[:, : history.shape[1]] = history.to(latents)
    return latents


def denoise_segment(transformer: Any, scheduler: Any, noise: torch.Tensor, inputs: SegmentInputs, *, steps: int,
                    guidance_scale: float, replace: bool, history: torch.Tensor | None = None,
                    batch_cfg: bool = False) -> tuple[torch.Tensor, dict[str, int]]:  # fmt: skip
    """Final latents ``[16, T_lat, h, w]`` (float32) and the pass counts. ``history``: clean latents
    ``[16, n, h, w]`` of the previous segment's tail, or None for a first segment."""
    device = noise.device
    scheduler.set_timesteps(steps, device=device)
    history_mask = None
    if history is not None:
        history_mask = torch.zeros(1, 4, *noise.shape[1:], device=device)
        history_mask[:, :, : history.shape[1]] = 1
    latents = _with_history(noise.float(), history)
    passes = {"cond_passes": 0, "uncond_passes": 0}
    cfg = guidance_scale > 1.0
    batched = cfg and batch_cfg
    both = lambda v: torch.cat([v, v]) if batched else v  # noqa: E731
    common = dict(image=both(inputs.image), reference=both(inputs.reference), reference_mask=both(inputs.reference_mask),
                  pose=both(inputs.pose), driving_mask=both(inputs.driving_mask),
                  history_mask=None if history_mask is None else both(history_mask), replace=replace)  # fmt: skip
    for t in scheduler.timesteps:
        x = _with_history(latents, history)[None]
        if batched:
            out = transformer(both(x), t.expand(2).to(device), text=torch.cat([inputs.text, inputs.negative]), **common).float()
            pred, uncond = out[:1], out[1:]
        else:
            pred = transformer(x, t.expand(1).to(device), text=inputs.text, **common).float()
            uncond = transformer(x, t.expand(1).to(device), text=inputs.negative, **common).float() if cfg else None
        passes["cond_passes"] += 1
        if uncond is not None:
            passes["uncond_passes"] += 1
            pred = uncond + guidance_scale * (pred - uncond)
        latents = scheduler.step(pred, t, latents[None], return_dict=False)[0][0]
        latents = _with_history(latents, history)
    return latents, passes


def decode_latents(vae: Any, latents: torch.Tensor) -> torch.Tensor:
    """``[16, T_lat, h, w]`` -> ``[1, 3, T, H, W]`` in [-1, 1] (de-normalized, VAE-decoded in the VAE's dtype)."""
    from diffusers.modular_pipelines.wan_animate_2.denoise import decode_vae

    return decode_vae(vae, latents[None].float())


def to_uint8_frames(video: torch.Tensor) -> np.ndarray:
    """``[1, 3, T, H, W]`` in [-1, 1] -> uint8 ``[T, H, W, 3]``."""
    v = (video.float() / 2 + 0.5).clamp(0, 1)
    return (v[0].permute(1, 2, 3, 0) * 255).round().to(torch.uint8).cpu().numpy()


def _sync(device: Any) -> None:
    if getattr(device, "type", "cpu") == "cuda":
        torch.cuda.synchronize(device)


def render_segment(components: Any, inputs: SegmentInputs, noise: torch.Tensor, *, steps: int, guidance_scale: float,
                   replace: bool, previous_tail: torch.Tensor | None = None, batch_cfg: bool = False) -> SegmentResult:  # fmt: skip
    """Denoise and decode one segment. ``previous_tail``: the previous segment's last decoded
    frames ``[1, 3, n, H, W]`` in [-1, 1] (None for the first segment); VAE-encoded here."""
    from newsmotion_engine.render.backends.wan.encoders import vae_encode

    device = components.device
    t0 = time.perf_counter()
    history = None
    if previous_tail is not None:
        history = vae_encode(components.vae, previous_tail, device)[0].to(device)
    with torch.no_grad():
        latents, passes = denoise_segment(components.transformer, components.new_scheduler(), noise.to(device), inputs,
                                          steps=steps, guidance_scale=guidance_scale, replace=replace, history=history,
                                          batch_cfg=batch_cfg)  # fmt: skip
        _sync(device)
        t1 = time.perf_counter()
        video = decode_latents(components.vae, latents)
        _sync(device)
    t2 = time.perf_counter()
    return SegmentResult(latents, video, to_uint8_frames(video), {"denoise_s": t1 - t0, "decode_s": t2 - t1, **passes})
