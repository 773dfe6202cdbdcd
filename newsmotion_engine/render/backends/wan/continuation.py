"""How a Wan segment after the first continues the previous one (both Wan backends; the
``continuation`` option):

- ``"frames"`` (default, as the models were trained and the stock pipelines do): the previous
  segment's last decoded frames, then zero frames, VAE-encoded (:func:`frames_continuation`);
- ``"latent"`` (opt-in, EXPERIMENTAL, not what the models were trained on): the previous segment's
  last denoised latent frames in the first segment's conditioning, no VAE encode at render time
  (:func:`latent_continuation`).

Both return the generation-side conditioning: the i2v mask (``prev_frames`` known) stacked on the
latents, ``[1, 20, T_lat, h, w]``.
"""

from __future__ import annotations

from typing import Any

from newsmotion_engine.render.backends.wan.encoders import i2v_mask
from newsmotion_engine.render.backends.wan.zero_tail import encode_then_zeros

__all__ = ["CONTINUATIONS", "DESCRIPTIONS", "frames_continuation", "latent_continuation"]

CONTINUATIONS = ("frames", "latent")
# What a backend's describe() says of each (its "continuation" entry).
DESCRIPTIONS = {
    "frames": "frames: the previous segment's last decoded frames, VAE-encoded (as trained)",
    "latent": "latent: the previous segment's last latents (EXPERIMENTAL, not as trained; no VAE encode)",
}


def frames_continuation(vae: Any, tail: Any, segment_frames: int) -> Any:
    """The previous segment's last decoded frames ``tail`` (``[1, 3, prev_frames, H, W]`` in [-1, 1],
    straight from the VAE decoder, no uint8 rounding), followed by zero frames up to
    ``segment_frames``, VAE-encoded (distribution mode, normalized), the mask in front -> float32
    ``[1, 20, T_lat, h, w]`` on the CPU (the copy synchronizes the stream it ran on). The encoder
    skips what the zero frames alone make (:mod:`.zero_tail`: the same latents)."""
    import torch

    with torch.no_grad():
        lat = encode_then_zeros(vae, tail, segment_frames, tail.device)
    mask = i2v_mask(lat.shape[2], lat.shape[3], lat.shape[4], tail.shape[2])
    return torch.cat([mask.to(lat), lat], dim=1)


def latent_continuation(cond0: Any, previous: Any, prev_frames: int) -> Any:
    """EXPERIMENTAL: the first segment's conditioning ``cond0`` (``[1, 20, T_lat, h, w]``: mask +
    latents of an all-zero video) whose first ``ceil(prev_frames / 4)`` latent frames are the
    previous segment's last denoised latent frames (``previous`` ``[1, 16, T, h, w]``, without the
    reference frame), the mask marking ``prev_frames`` known.

    The model reads that slot as the VAE encoding of ``prev_frames`` decoded frames
    (:func:`frames_continuation`): here latent frame 0 (trained: one pixel frame) holds a 4-frame
    latent, and with ``prev_frames=5`` the two latent frames cover the last 8 frames, not 5.
    """
    import torch

    n = (prev_frames - 1) // 4 + 1
    lat = cond0[:, 4:].clone()
    lat[:, :, :n] = previous[:, :, -n:].to(lat.dtype)
    mask = i2v_mask(lat.shape[2], lat.shape[3], lat.shape[4], prev_frames)
    return torch.cat([mask.to(lat), lat], dim=1)
