"""Where the persona's portrait sits on a render's frame: every backend places it the same way,
and the fidelity check projects landmarks through the same placement."""

from __future__ import annotations

import numpy as np

__all__ = ["place_portrait", "to_frame_pixels"]


def place_portrait(portrait_hw: tuple[int, int], width: int, height: int) -> tuple[float, float, float, float]:
    """Where a portrait goes on a ``width`` x ``height`` frame: ``(ox, oy, w, h)`` in pixels.

    The portrait is scaled to fit entirely (no crop), centred horizontally and anchored to the
    bottom edge (the persona normalizer anchors the person bottom-centre, so the body stays on the
    frame's bottom edge whatever the aspect ratio).
    """
    ph, pw = portrait_hw
    k = min(width / pw, height / ph)
    w, h = pw * k, ph * k
    return (width - w) / 2.0, float(height - h), w, h


def to_frame_pixels(points: np.ndarray, placement: tuple[float, float, float, float]) -> np.ndarray:
    """``[..., >=2]`` points normalized to the portrait canvas (x by its width, y by its height)
    -> ``[..., 2]`` frame pixels, for a portrait placed at ``placement`` (:func:`place_portrait`)."""
    ox, oy, w, h = placement
    pts = np.asarray(points, np.float64)
    return np.stack([ox + pts[..., 0] * w, oy + pts[..., 1] * h], axis=-1)
