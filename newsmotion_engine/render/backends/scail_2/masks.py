"""SCAIL-2's mask conditioning: person mattes -> the 28-channel mask latents the DiT reads, and the
driving clip's matte.

The official code (zai-org/SCAIL-2 ``sample_video.py`` / ``wan/utils/scail_utils.py``,
``extract_and_compress_mask_to_latent``) reads a colour mask video (one colour per person; white
for a single person) and, without the VAE: thresholds each channel at pixel 225 (``> 0.765`` in
[-1, 1]) into 7 colour indicators (white, red, green, blue, yellow, magenta, cyan), area-resizes them
to the latent grid (three ceil-halvings), repeats the first frame 4 times and folds each latent
frame's 4 pixel frames into the channels: ``[4 x 7 = 28, T_lat, h, w]``. The driving mask is first
resized to half size (bilinear), as the driving video is. :func:`mask_latents` is that, for our
single-person mattes (white where the matte is at least half).

The driving clip's matte (:func:`driving_matte`): a canonical loop's clip is the warp render of the
driver portrait over the exact :data:`~newsmotion_engine.guidance.driver.DRIVER_BACKGROUND` grey,
so its matte is every pixel that is not that grey (exact); a user's clip or a custom loop's source
video is segmented per frame with mediapipe's selfie segmenter (the persona builder's), at 0.5.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["COLOURS", "MASK_CHANNELS", "ON_THRESHOLD", "driving_matte", "mask_latents", "white_mask"]

COLOURS = ("white", "red", "green", "blue", "yellow", "magenta", "cyan")
TEMPORAL = 4
MASK_CHANNELS = TEMPORAL * len(COLOURS)
ON_THRESHOLD = (225.0 - 127.5) / 127.5  # official _ON_THRESH: a channel is "on" above pixel 225


def white_mask(alpha: np.ndarray) -> np.ndarray:
    """uint8 alpha ``[..., H, W]`` -> the white-on-black RGB mask ``[..., H, W, 3]`` the official
    single-person mask files hold (white where alpha >= 128)."""
    on = (np.asarray(alpha) >= 128).astype(np.uint8) * 255
    return np.repeat(on[..., None], 3, axis=-1)


def mask_latents(rgb: np.ndarray, *, half: bool = False):
    """float32 ``[28, T_lat, h, w]`` tensor of uint8 colour masks ``[T, H, W, 3]`` (``T = 4k + 1``).

    ``half``: resize to half size first (bilinear, as the driving mask is); ``h``, ``w`` are the
    three ceil-halvings of the (halved) size, as the official code computes them."""
    import torch
    import torch.nn.functional as F

    x = torch.from_numpy(np.ascontiguousarray(rgb)).float().div_(127.5).sub_(1.0).permute(0, 3, 1, 2)  # [T, 3, H, W]
    if half:
        x = F.interpolate(x, scale_factor=0.5, mode="bilinear", align_corners=False)
    r, g, b = ((x[:, c : c + 1] > ON_THRESHOLD).float() for c in range(3))
    nr, ng, nb = 1 - r, 1 - g, 1 - b
    onehot = torch.cat([r * g * b, r * ng * nb, nr * g * nb, nr * ng * b, r * g * nb, r * ng * b, nr * g * b], dim=1)
    h, w = x.shape[2:]
    for _ in range(3):
        h, w = (h + 1) // 2, (w + 1) // 2
    onehot = F.interpolate(onehot, size=(h, w), mode="area")
    frames = onehot.shape[0]
    if (frames - 1) % TEMPORAL:
        raise ValueError(f"mask_latents needs 4k+1 frames, got {frames}")
    padded = torch.cat([onehot[:1].repeat(TEMPORAL, 1, 1, 1), onehot[1:]], dim=0)
    return padded.view((frames - 1) // TEMPORAL + 1, MASK_CHANNELS, h, w).permute(1, 0, 2, 3).contiguous()


def driving_matte(clip: Any) -> np.ndarray:
    """uint8 ``[N, H, W]`` person matte of a driving clip (:class:`~newsmotion_engine.guidance.driver.DrivingClip`)."""
    frames = np.asarray(clip.frames)
    if clip.origin == "driver-render":
        from newsmotion_engine.guidance.driver import DRIVER_BACKGROUND

        return (np.any(frames != np.array(DRIVER_BACKGROUND, np.uint8), axis=-1)).astype(np.uint8) * 255
    from newsmotion_engine.persona.matte import selfie_segmentation

    return np.stack([(selfie_segmentation(f) >= 0.5).astype(np.uint8) * 255 for f in frames])
