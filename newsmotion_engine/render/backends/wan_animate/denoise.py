"""Our denoising loop over the stock Wan-Animate components, fed from the caches.

It follows ``WanAnimatePipeline.__call__``'s per-segment loop (same inputs, same order of
operations, same CFG formula and unconditional inputs: negative prompt and a blanked face), but
takes precomputed latents and embeddings, and routes guidance through :class:`CFGStrategy` and
the denoiser calls through cache contexts that carry the step index (for TeaCache).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from newsmotion_engine.accel.cfg import CFGStrategy

__all__ = ["SegmentInputs", "denoise_segment"]


@dataclass
class SegmentInputs:
    """Everything one segment's denoiser calls read (on the compute device, compute dtype)."""

    reference_latents: torch.Tensor  # [1, 20, 1 + T_lat, h, w]: reference image + segment conditioning
    pose_latents: torch.Tensor  # [1, 16, T_lat, h, w]
    face_pixels: torch.Tensor  # [1, 3, T_seg, S, S] in [-1, 1]
    prompt_embeds: torch.Tensor  # [1, 512, D_text]
    negative_embeds: torch.Tensor | None  # [1, 512, D_text] (CFG only)
    image_embeds: torch.Tensor  # [1, N, D_img]


def _call(transformer: Any, context: str, step: int, steps: int, x: torch.Tensor, t: torch.Tensor,
          text: torch.Tensor, inputs: SegmentInputs, face: torch.Tensor) -> torch.Tensor:  # fmt: skip
    with transformer.cache_context(context, step_index=step, num_inference_steps=steps):
        return transformer(
            hidden_states=x,
            timestep=t,
            encoder_hidden_states=text,
            encoder_hidden_states_image=inputs.image_embeds,
            pose_hidden_states=inputs.pose_latents,
            face_pixel_values=face,
            return_dict=False,
        )[0]


def _run_steps(transformer: Any, scheduler: Any, latents: torch.Tensor, inputs: SegmentInputs, indices: range, *,
               steps: int, cfg: CFGStrategy, dtype: torch.dtype, on_step: Callable[[int], None] | None,
               last: dict[str, Any] | None = None) -> torch.Tensor:  # fmt: skip
    """Steps ``indices`` (global step numbers, for CFG and TeaCache) of ``scheduler``'s timesteps.
    ``last`` (if given) receives the final step's input latents, model prediction and sigma."""
    face_uncond = None
    for i in indices:
        t = scheduler.timesteps[i]
        x = torch.cat([latents, inputs.reference_latents], dim=1).to(dtype)
        ts = t.expand(latents.shape[0])
        cond = _call(transformer, "cond", i, steps, x, ts, inputs.prompt_embeds, inputs, inputs.face_pixels)
        uncond = None
        if cfg.needs_uncond(i):
            if inputs.negative_embeds is None:
                raise ValueError("CFG needs negative prompt embeddings in the guidance cache")
            if face_uncond is None:
                face_uncond = inputs.face_pixels * 0 - 1  # the stock pipeline's blanked face
            uncond = _call(transformer, "uncond", i, steps, x, ts, inputs.negative_embeds, inputs, face_uncond)
        pred = cfg.combine(i, cond, uncond)
        if last is not None:
            last.update(latents=latents, pred=pred, sigma=float(scheduler.sigmas[i]))
        latents = scheduler.step(pred, t, latents, return_dict=False)[0]
        if on_step is not None:
            on_step(i)
    return latents


def denoise_segment(
    transformer: Any,
    scheduler: Any,
    latents: torch.Tensor,
    inputs: SegmentInputs,
    *,
    steps: int,
    cfg: CFGStrategy,
    dtype: torch.dtype,
    on_step: Callable[[int], None] | None = None,
    pyramid: Any = None,
    new_scheduler: Callable[[], Any] | None = None,
) -> torch.Tensor:
    """Run ``steps`` denoising steps on float32 ``latents`` ``[1, 16, 1 + T_lat, h, w]``.

    ``pyramid``: a :class:`~newsmotion_engine.accel.pyramid.PyramidCascade` (EXPERIMENTAL): its
    first ``low_steps`` steps run at a lower resolution (see that module); ``new_scheduler``
    then gives the fresh scheduler of the full-resolution steps.
    """
    scheduler.set_timesteps(steps, device=latents.device)
    if pyramid is None:
        return _run_steps(transformer, scheduler, latents, inputs, range(steps), steps=steps, cfg=cfg, dtype=dtype, on_step=on_step)
    from newsmotion_engine.accel.pyramid import low_size
    from newsmotion_engine.accel.teacache import reset_teacache

    pyramid.check_steps(steps)
    if new_scheduler is None:
        raise ValueError("a pyramid cascade needs new_scheduler for its full-resolution steps")
    k = pyramid.low_steps
    full = latents.shape[-2:]
    patch = getattr(getattr(transformer, "config", None), "patch_size", None) or (1, 2, 2)
    size = low_size(*full, pyramid.factor, int(patch[-1]))
    low = _resize(latents, size)
    low = low / low.std()  # area resampling shrinks the noise's variance: back to unit
    last: dict[str, Any] = {}
    low = _run_steps(transformer, scheduler, low, _resized_inputs(inputs, size), range(k), steps=steps, cfg=cfg,
                     dtype=dtype, on_step=on_step, last=last)  # fmt: skip
    # The clean-latent estimate of the last low step, upsampled and re-noised to the next sigma
    # with the render's own noise: the flow-matching forward process x = (1 - s) x0 + s noise.
    x0 = last["latents"] - last["sigma"] * last["pred"].float()
    sched = new_scheduler()
    sched.set_timesteps(steps, device=latents.device)
    sched.set_begin_index(k)
    sigma = float(sched.sigmas[k])
    latents = (1.0 - sigma) * _resize(x0, full) + sigma * latents
    reset_teacache(transformer)  # its cached residual has the low resolution's shape
    return _run_steps(transformer, sched, latents, inputs, range(k, steps), steps=steps, cfg=cfg, dtype=dtype, on_step=on_step)


def _resize(x: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """``[B, C, T, h, w]`` -> ``[B, C, T, *size]``: area resampling down, bilinear up."""
    b, c, t, h, w = x.shape
    frames = x.permute(0, 2, 1, 3, 4).reshape(b * t, c, h, w)
    if size[0] <= h and size[1] <= w:
        out = torch.nn.functional.interpolate(frames.float(), size=size, mode="area")
    else:
        out = torch.nn.functional.interpolate(frames.float(), size=size, mode="bilinear", align_corners=False)
    return out.to(x.dtype).reshape(b, t, c, *size).permute(0, 2, 1, 3, 4).contiguous()


def _resized_inputs(inputs: SegmentInputs, size: tuple[int, int]) -> SegmentInputs:
    """The segment's inputs on the low-resolution grid (pose and reference latents resampled)."""
    return dataclasses.replace(inputs, reference_latents=_resize(inputs.reference_latents, size),
                               pose_latents=_resize(inputs.pose_latents, size))  # fmt: skip


