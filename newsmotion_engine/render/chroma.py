"""Green screen for generated frames: matte the person in each frame a diffusion backend made and
composite it onto the exact chroma colour (``spec.background``), so its output keys as cleanly as
the warp backend's (which composites over the exact colour by construction).

Why a colour-difference matte, weights-free: the diffusion backends are conditioned on the
persona's reference image already composited over ``spec.background``, so what they paint behind
the person is that colour give or take the model's noise, shading and drift; a segmentation model
would need weights (mediapipe is not on the GPU machine, and the engine must import without it).
Per frame:

1. **Background estimate.** The frame's top band and the upper part of its side bands (where a
   presenter framed waist-up never reaches) are sampled; samples within :data:`NEAR` of the key
   colour give the frame's actual background colour (median) and its noise (a robust spread).
   With too few such samples the key colour itself is used. Then a per-pixel background field
   (:func:`background_field`): the pixels near that colour averaged by a wide normalized Gaussian,
   so slow shading and gradients are part of the background, filled in under the person.
2. **Soft matte.** Each pixel's distance to the field, ramped from ``lo`` (2 x the noise level,
   at least :data:`MIN_LO`) to ``lo + RAMP``: 0 = background, 1 = person.
3. **Clean-up.** Solid pieces smaller than :data:`MIN_PIECE` of the frame are dropped (noise
   specks); holes in the person that do not reach the frame edge are filled (key-coloured
   clothing, shadows in a sleeve); the matte is feathered by a one-pixel blur.
4. **Despill and composite.** On the edge band only, the key's dominant channel is limited to
   the larger of the other two (green fringes); then ``alpha * frame + (1 - alpha) * key``, with
   every pixel of alpha 0 exactly the key colour.

:func:`composite_frames` is applied by :meth:`DiffusersBackend.frames` to every diffusion
backend's output (option ``chroma="matte"``, the default; ``"off"`` yields the raw frames).

Example::

    out, alpha = chroma_composite(frame, (0, 177, 64))
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import cv2
import numpy as np

from newsmotion_engine.render.read_ahead import ordered_map

__all__ = ["CHROMA_MODES", "MattedFrame", "background_field", "chroma_composite", "composite_frames", "estimate_background",
           "matte_workers"]

CHROMA_MODES = ("matte", "off")
NEAR = 90.0  # border samples farther than this from the key colour are not background
MIN_LO = 14.0
RAMP = 36.0
MIN_PIECE = 0.002
BAND = 0.04


@dataclass(frozen=True)
class MattedFrame:
    """The composite, its alpha (uint8), and the background colour the frame was found to have."""

    rgb: np.ndarray
    alpha: np.ndarray
    background: tuple[float, float, float]
    noise: float


def estimate_background(frame: np.ndarray, key: tuple[int, int, int]) -> tuple[np.ndarray, float]:
    """(colour float32 [3], noise) of the frame's background, from its top and upper side bands."""
    h, w = frame.shape[:2]
    b = max(2, round(BAND * min(h, w)))
    f = frame.astype(np.float32)
    samples = np.concatenate([f[:b].reshape(-1, 3), f[: int(h * 0.6), :b].reshape(-1, 3), f[: int(h * 0.6), -b:].reshape(-1, 3)])
    k = np.asarray(key, np.float32)
    near = samples[np.linalg.norm(samples - k, axis=1) < NEAR]
    if len(near) < 0.1 * len(samples):
        return k, 0.0
    colour = np.median(near, axis=0)
    d = np.linalg.norm(near - colour, axis=1)
    return colour.astype(np.float32), float(1.4826 * np.median(np.abs(d - np.median(d))) + np.median(d))


def _clean(alpha: np.ndarray) -> np.ndarray:
    h, w = alpha.shape
    solid = (alpha >= 0.5).astype(np.uint8)
    count, labels, stats, _ = cv2.connectedComponentsWithStats(solid, connectivity=8)
    keep = np.zeros(count, bool)
    keep[1:] = stats[1:, cv2.CC_STAT_AREA] >= MIN_PIECE * h * w
    person = keep[labels]
    # Everything soft stays only next to a kept piece (an isolated faint speck goes).
    near = cv2.dilate(person.astype(np.uint8), np.ones((5, 5), np.uint8)).astype(bool)
    out = np.where(near, alpha, 0.0)
    out[person] = np.maximum(out[person], alpha[person])
    # Holes: background regions not connected to the frame's border are inside the person.
    bg = (out < 0.5).astype(np.uint8)
    n, lab = cv2.connectedComponents(bg, connectivity=4)
    border = np.unique(np.concatenate([lab[0], lab[-1], lab[:, 0], lab[:, -1]]))
    hole = (lab > 0) & ~np.isin(lab, border)
    out[hole] = 1.0
    return out


def background_field(frame: np.ndarray, colour: np.ndarray, loose: float) -> tuple[np.ndarray, np.ndarray]:
    """(per-pixel background colour float32 [H, W, 3], mask of the pixels it was fitted on): the
    pixels within ``loose`` of the frame's background colour, averaged by a wide normalized
    Gaussian (shading and gradients a model paints vary slowly), filled in under the person from
    a wider one and then the single colour."""
    h, w = frame.shape[:2]
    f = frame.astype(np.float32)
    m = (np.linalg.norm(f - colour, axis=-1) < loose).astype(np.float32)
    # The field varies slowly (sigma >= min(h, w) / 12), so it is fitted on a grid 8x coarser and
    # upsampled: the same field to within interpolation, ~100x less blurring than at full size.
    step = 8
    sh, sw = max(1, h // step), max(1, w // step)
    fs = cv2.resize(f * m[..., None], (sw, sh), interpolation=cv2.INTER_AREA)
    ms = cv2.resize(m, (sw, sh), interpolation=cv2.INTER_AREA)
    field = np.empty_like(fs)
    weight = np.zeros((sh, sw), np.float32)
    for sigma in (min(h, w) / 12, min(h, w) / 3):
        num = cv2.GaussianBlur(fs, (0, 0), sigma / step)
        den = cv2.GaussianBlur(ms, (0, 0), sigma / step)
        fill = (weight < 0.05) & (den > 0.05)
        field[fill] = num[fill] / den[fill][:, None]
        weight = np.maximum(weight, np.where(fill, den, 0))
    field[weight < 0.05] = colour
    field = cv2.resize(field, (w, h), interpolation=cv2.INTER_LINEAR)
    return field, m.astype(bool)


def chroma_composite(frame: np.ndarray, key: tuple[int, int, int]) -> MattedFrame:
    """Matte the person in ``frame`` (uint8 RGB ``[H, W, 3]``) and composite it onto ``key``."""
    f = frame.astype(np.float32)
    colour, noise = estimate_background(frame, key)
    field, fitted = background_field(frame, colour, max(2 * MIN_LO, 4.0 * noise) + 24.0)
    d = np.linalg.norm(f - field, axis=-1)
    if fitted.any():
        near = d[fitted]
        noise = float(np.median(near) + 1.4826 * np.median(np.abs(near - np.median(near))))
    lo = max(MIN_LO, 2.0 * noise)
    alpha = np.clip((d - lo) / RAMP, 0.0, 1.0)
    alpha = _clean(alpha)
    alpha = cv2.GaussianBlur(alpha, (3, 3), 0.8)
    alpha[alpha < 0.02] = 0.0
    alpha[alpha > 0.98] = 1.0
    k = np.asarray(key, np.float32)
    fg = f.copy()
    edge = (alpha > 0) & (alpha < 1)
    c = int(np.argmax(k))
    if k[c] > 0 and k[c] - np.delete(k, c).max() > 40:  # a saturated key has a spill channel
        others = np.delete(fg, c, axis=-1).max(axis=-1)
        fg[..., c] = np.where(edge, np.minimum(fg[..., c], others), fg[..., c])
    a = alpha[..., None]
    out = np.clip(np.rint(a * fg + (1 - a) * k), 0, 255).astype(np.uint8)
    out[alpha == 0] = np.asarray(key, np.uint8)
    return MattedFrame(out, np.rint(alpha * 255).astype(np.uint8), tuple(float(v) for v in colour), noise)


def matte_workers(cpus: int) -> int:
    """Threads matting frames at once on a machine of ``cpus`` cores: all but two, at least two
    (one core alone), at most 16."""
    return max(min(2, cpus), min(16, cpus - 2))


def composite_frames(frames: Iterable[np.ndarray], key: tuple[int, int, int], mode: str = "matte") -> Iterator[np.ndarray]:
    """``frames`` matted onto ``key`` one by one (``mode="off"``: as they are)."""
    if mode not in CHROMA_MODES:
        raise ValueError(f"chroma mode {mode!r}: use one of {', '.join(CHROMA_MODES)}")
    if mode == "off":
        yield from frames
        return
    # OpenCV and NumPy release the GIL: a few frames are matted at once on worker threads, a
    # bounded number ahead, so the frames still stream (the backend's next segment starts only
    # when the consumer asks for it) and a decoded segment's frames do not wait on one core. Two
    # cores are left to the thread feeding the GPU and the video encoder where there are many.
    for matted in ordered_map(lambda frame: chroma_composite(frame, key), frames, matte_workers(os.cpu_count() or 1), name="chroma"):
        yield matted.rgb
