"""Our denoising loop over the stock Wan-Animate components, fed from the caches.

It follows ``WanAnimatePipeline.__call__``'s per-segment loop (same inputs, same order of
operations, same CFG formula and unconditional inputs: negative prompt and a blanked face), but
takes precomputed latents and embeddings, and routes guidance through :class:`CFGStrategy` and
the denoiser calls through cache contexts that carry the step index (for TeaCache).
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from newsmotion_engine.accel.cfg import CFGStrategy

__all__ = ["DecodedChunk", "SegmentInputs", "decode_latents", "decode_video", "denoise_segment", "stream_decode",
           "streaming_unsupported", "to_frames"]


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


def _denormalized(vae: Any, latents: torch.Tensor) -> torch.Tensor:
    """The VAE's input: ``latents`` without the reference latent frame, denormalized, VAE dtype."""
    z = vae.config.z_dim
    lat = latents.to(vae.dtype)
    mean = torch.tensor(vae.config.latents_mean).view(1, z, 1, 1, 1).to(lat.device, lat.dtype)
    recip_std = 1.0 / torch.tensor(vae.config.latents_std).view(1, z, 1, 1, 1).to(lat.device, lat.dtype)
    lat = lat / recip_std + mean
    return lat[:, :, 1:]


def decode_video(vae: Any, latents: torch.Tensor) -> torch.Tensor:
    """Denormalize and decode (skipping the reference latent frame) -> ``[1, 3, T, H, W]`` in
    [-1, 1] (the VAE clamps), VAE dtype, on the VAE's device."""
    lat = _denormalized(vae, latents)
    with torch.no_grad():
        return vae.decode(lat, return_dict=False)[0]


def _to_uint8(video: torch.Tensor) -> torch.Tensor:
    """``[1, 3, T, H, W]`` in [-1, 1] -> uint8 ``[T, H, W, 3]`` where ``video`` is (elementwise:
    a chunk of frames rounds exactly as the whole video does)."""
    video = (video.float() / 2 + 0.5).clamp(0, 1)
    return (video[0].permute(1, 2, 3, 0) * 255).round().to(torch.uint8)


def to_frames(video: torch.Tensor) -> np.ndarray:
    """``[1, 3, T, H, W]`` in [-1, 1] -> uint8 ``[T, H, W, 3]`` on the host (a synchronous copy)."""
    return _to_uint8(video).cpu().numpy()


@dataclass
class DecodedChunk:
    """Frames of one latent frame's decode (:func:`stream_decode`): ``video`` ``[1, 3, n, H, W]``
    in [-1, 1] (VAE dtype, on the VAE's device: what a ``"frames"`` continuation reads) and
    ``frames``, the same as uint8 ``[n, H, W, 3]`` on the host, ready to read. ``decode_s``: the
    decoder's time for this chunk (CUDA: GPU time between two events around its kernels; CPU:
    wall time of the calls); ``last``: the segment's final chunk."""

    video: torch.Tensor
    frames: np.ndarray
    decode_s: float
    last: bool


_log = logging.getLogger(__name__)
_warned: set[str] = set()


def streaming_unsupported(vae: Any, latents: torch.Tensor) -> str | None:
    """Why :func:`stream_decode` cannot repeat ``vae.decode``'s maths latent frame by latent frame
    on this VAE (``None``: it can). It follows diffusers' ``AutoencoderKLWan._decode`` (its
    attributes are checked here; a test compares the two bit for bit)."""
    missing = [a for a in ("post_quant_conv", "decoder", "_cached_conv_counts", "config", "dtype") if not hasattr(vae, a)]
    if missing:
        return f"the VAE ({type(vae).__name__}) lacks {', '.join(missing)}"
    if "decode" in vars(vae) or "_decode" in vars(vae):
        return "the VAE's decode is replaced on the instance (a hook or wrapper)"
    if getattr(vae, "use_tiling", False):
        return "VAE tiling is on (tiled decode)"
    if getattr(vae.config, "patch_size", None) is not None:
        return "the VAE is patchified (patch_size set)"
    if latents.shape[0] != 1:
        return f"batch of {latents.shape[0]} latents"
    if "decoder" not in vae._cached_conv_counts:
        return "the VAE's conv counts have no 'decoder' entry"
    try:
        params = inspect.signature(vae.decoder.forward).parameters
    except (TypeError, ValueError):
        return "the VAE decoder's signature cannot be read"
    if not {"feat_cache", "feat_idx", "first_chunk"} <= set(params):
        return "the VAE decoder takes no feat_cache / feat_idx / first_chunk"
    return None


def stream_decode(vae: Any, latents: torch.Tensor, *, lookahead: int = 1) -> Iterator[DecodedChunk]:
    """:func:`decode_video` and :func:`to_frames`, one latent frame at a time: a
    :class:`DecodedChunk` per latent frame (1 pixel frame for the first, 4 for each after), the
    same numbers as the whole decode.

    The Wan VAE decodes causally: diffusers' ``_decode`` runs ``post_quant_conv`` over the
    latents, then the decoder on each latent frame in turn with a temporal feature cache
    (``first_chunk`` on the first), concatenates and clamps. This does the same with its own
    feature cache (so the VAE's module-level caches, cleared by every encode and decode on it,
    are untouched) and clamps each chunk (elementwise: the same as clamping the whole).

    On CUDA (the caller's current stream), with ``lookahead`` n: chunk ``i``'s uint8 frames are
    copied to pinned host memory behind an event, and chunk ``i`` is handed out only once chunks
    up to ``i + n`` are enqueued, so the consumer's CPU work on chunk ``i`` runs while the GPU
    decodes the next ones. ``lookahead`` at least the number of latent frames decodes the whole
    segment before the first chunk comes out. On the CPU chunks come out as they are decoded.

    A VAE this cannot follow (:func:`streaming_unsupported`) is decoded whole (one chunk), with
    the reason logged once.
    """
    if lookahead < 1:
        raise ValueError(f"stream_decode: lookahead {lookahead} (at least 1)")
    reason = streaming_unsupported(vae, latents)
    if reason is not None:
        message = f"wan-animate: decoding each segment whole, not streamed: {reason}"
        if message not in _warned:
            _warned.add(message)
            _log.warning(message)
        t0 = time.perf_counter()
        video = decode_video(vae, latents)
        frames = to_frames(video)  # synchronous
        yield DecodedChunk(video, frames, time.perf_counter() - t0, True)
        return
    cuda = latents.device.type == "cuda"
    pending: list[tuple] = []  # chunks issued, not handed out yet
    # Grad mode is set around the work, never across a yield (it would leak into the consumer).
    with torch.no_grad():
        x = vae.post_quant_conv(_denormalized(vae, latents))
    feat_cache: list[Any] = [None] * vae._cached_conv_counts["decoder"]
    n = x.shape[2]
    for i in range(n):
        t0 = time.perf_counter()
        with torch.no_grad():
            if cuda:
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
            out = vae.decoder(x[:, :, i : i + 1], feat_cache=feat_cache, feat_idx=[0], first_chunk=(i == 0))
            video = torch.clamp(out, min=-1.0, max=1.0)
            frames = _to_uint8(video)
            if cuda:
                end.record()
                host = torch.empty(frames.shape, dtype=frames.dtype, pin_memory=True)
                host.copy_(frames, non_blocking=True)
                ready = torch.cuda.Event()
                ready.record()
                pending.append((video, host, frames, (start, end), ready, 0.0, i == n - 1))
            else:
                pending.append((video, frames, frames, None, None, time.perf_counter() - t0, i == n - 1))
        while len(pending) > lookahead or (pending and i == n - 1):
            yield _ready_chunk(pending.pop(0))


def _ready_chunk(item: tuple) -> DecodedChunk:
    video, host, _device_frames, events, ready, seconds, last = item
    if ready is not None:
        ready.synchronize()  # its host copy has landed (and its decode kernels are done)
        seconds = events[0].elapsed_time(events[1]) / 1e3
    return DecodedChunk(video, host.numpy(), seconds, last)


def decode_latents(vae: Any, latents: torch.Tensor) -> np.ndarray:
    """Denormalize and decode (skipping the reference latent frame) -> uint8 ``[T, H, W, 3]``."""
    return to_frames(decode_video(vae, latents))
