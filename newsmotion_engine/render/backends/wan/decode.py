"""Decoding a Wan segment's latents (both Wan backends): the whole segment at once, or streamed
one latent frame at a time (:func:`stream_decode`, the same numbers) so a consumer's CPU work on
the first frames (the chroma matte, the infill, the encoder) runs while the GPU decodes the rest.

Latents here are ``[1, 16, 1 + T_lat, h, w]``: the reference-image latent frame first (skipped),
normalized as the denoiser sees them.
"""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

__all__ = ["DecodedChunk", "DecodedTail", "decode_latents", "decode_video", "stream_decode", "streaming_unsupported",
           "to_frames", "uint8_frames"]


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


def uint8_frames(video: torch.Tensor) -> torch.Tensor:
    """``[1, 3, T, H, W]`` in [-1, 1] -> uint8 ``[T, H, W, 3]`` where ``video`` is (elementwise:
    a chunk of frames rounds exactly as the whole video does)."""
    video = (video.float() / 2 + 0.5).clamp(0, 1)
    return (video[0].permute(1, 2, 3, 0) * 255).round().to(torch.uint8)


def to_frames(video: torch.Tensor) -> np.ndarray:
    """``[1, 3, T, H, W]`` in [-1, 1] -> uint8 ``[T, H, W, 3]`` on the host (a synchronous copy)."""
    return uint8_frames(video).cpu().numpy()


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
        message = f"decoding each Wan segment whole, not streamed: {reason}"
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
            frames = uint8_frames(video)
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


class DecodedTail:
    """A streamed segment's last ``frames`` decoded frames (what a ``"frames"`` continuation
    encodes), kept on the device as the chunks of :func:`stream_decode` come: only the chunks that
    hold them, the older ones dropped."""

    def __init__(self, frames: int) -> None:
        self.frames = frames
        self._videos: list[torch.Tensor] = []

    def add(self, video: torch.Tensor) -> None:
        """One chunk's ``video`` ``[1, 3, n, H, W]``, in decode order."""
        self._videos.append(video)
        while sum(int(v.shape[2]) for v in self._videos[1:]) >= self.frames:
            self._videos.pop(0)

    def video(self) -> torch.Tensor:
        """The last ``frames`` frames ``[1, 3, frames, H, W]`` of the chunks added so far."""
        joined = self._videos[0] if len(self._videos) == 1 else torch.cat(self._videos, dim=2)
        return joined[:, :, -self.frames :]
