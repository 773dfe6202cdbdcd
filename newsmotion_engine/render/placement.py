"""Where the persona's portrait sits on a render's frame: every backend places it the same way,
and the fidelity check projects landmarks through the same placement."""

from __future__ import annotations

__all__ = ["place_portrait"]


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
