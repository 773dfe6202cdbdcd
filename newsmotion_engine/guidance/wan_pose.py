"""Wan-Animate's pose video style: the skeleton drawing Wan2.2-Animate was trained on.

Written from the official preprocessing (Wan2.2, ``wan/modules/animate/preprocess``:
``draw_aapose_by_meta_new`` with its defaults, i.e. ``draw_aapose_new`` at threshold 0.5,
stick width "v2", hands and head drawn), on a black background:

- **body**: 20 points made from COCO-WholeBody 133 by averaging pairs (x, y *and* confidence):
  OpenPose-18 (nose, neck = mid-shoulders, the arms, the legs, eyes, ears) plus a toe per foot
  (the mean of the big and small toe). 19 limbs, each a filled ellipse in its colour scaled by
  0.6 (opaque, later limbs over earlier ones), half-width ``max(int(min(W, H) / 200) - 1, 1)``;
  then each point a filled circle of that radius in its full colour;
- **hands** (points 91-111 left, 112-132 right): 20 bones per hand as lines coloured around the
  HSV hue circle, thickness ``max(max(int(min(W, H) / 200) - 1, 1) // 2, 1)`` (1 px up to a
  799-px short side), then a blue dot of that radius per point;
- **no face**: the 68 face landmarks are not drawn (the head is the nose, eyes and ears above).

A body point or limb is skipped when a confidence (the averaged one for the neck and toes) is
below 0.5; a hand bone or dot too, and also when its pixel coordinates truncate to 0 or less (as
the official code does). Pixel positions are truncated, not rounded, as there. Non-finite
coordinates count as absent.

:func:`draw_pose` in ``guidance/draw.py`` (DWPose look, face dots, 0.3 threshold, scaled widths)
stays the display drawing (studio, contact sheets); this module is what the ``wan-animate``
backend feeds the model.

Example::

    from newsmotion_engine.guidance.wan_pose import draw_wan_pose

    frame = draw_wan_pose(keypoints, 720, 1280)                     # uint8 [1280, 720, 3] RGB
    placed = draw_wan_pose(kp, 720, 1280, box=(0, 128, 720, 1152))  # kp normalized to that box
"""

from __future__ import annotations

import colorsys
import math
from collections.abc import Sequence

import cv2
import numpy as np

from newsmotion_engine import skeleton as sk

__all__ = ["WAN_THRESHOLD", "draw_wan_pose", "draw_wan_pose_video", "wan_body_points", "wan_pose_style", "wan_stroke_sizes"]

WAN_THRESHOLD = 0.5

# Each of Wan's 20 body points is the mean of two COCO-WholeBody points (the same index twice for
# a plain point): nose, neck, R shoulder/elbow/wrist, L shoulder/elbow/wrist, R hip/knee/ankle,
# L hip/knee/ankle, R eye, L eye, R ear, L ear, L toe, R toe.
_BODY_FROM_COCO = np.array([
    (0, 0), (6, 5), (6, 6), (8, 8), (10, 10), (5, 5), (7, 7), (9, 9), (12, 12), (14, 14), (16, 16),
    (11, 11), (13, 13), (15, 15), (2, 2), (1, 1), (4, 4), (3, 3), (17, 18), (20, 21),
])  # fmt: skip
_BODY_NAMES = ("nose", "neck", "right_shoulder", "right_elbow", "right_wrist", "left_shoulder", "left_elbow",
               "left_wrist", "right_hip", "right_knee", "right_ankle", "left_hip", "left_knee", "left_ankle",
               "right_eye", "left_eye", "right_ear", "left_ear", "left_toe", "right_toe")  # fmt: skip

# Limbs as pairs of the 20 body points: shoulders, arms, legs, head, feet (the official order).
_LIMBS = np.array([
    (1, 2), (1, 5), (2, 3), (3, 4), (5, 6), (6, 7), (1, 8), (8, 9), (9, 10), (1, 11), (11, 12), (12, 13),
    (1, 0), (0, 14), (14, 16), (0, 15), (15, 17), (13, 18), (10, 19),
])  # fmt: skip

# One colour per body point (RGB); limb i takes colour i too (so the two foot limbs take the 18th
# and 19th colours and the toe points the 19th and 20th, as the official zip pairs them).
_COLORS = (
    (255, 0, 0), (255, 85, 0), (255, 170, 0), (255, 255, 0), (170, 255, 0), (85, 255, 0), (0, 255, 0),
    (0, 255, 85), (0, 255, 170), (0, 255, 255), (0, 170, 255), (0, 85, 255), (0, 0, 255), (85, 0, 255),
    (170, 0, 255), (255, 0, 255), (255, 0, 170), (255, 0, 85), (200, 200, 0), (100, 100, 0),
)  # fmt: skip
_LIMB_SCALE = 0.6
_LIMB_COLORS = tuple(tuple(int(float(c) * _LIMB_SCALE) for c in _COLORS[i]) for i in range(len(_LIMBS)))

_HAND_EDGES = np.array(sk.HAND_EDGES)
# Hue i/20 at full saturation and value, times 255, left as floats: cv2 rounds them when it draws.
_HAND_COLORS = tuple(tuple(255.0 * c for c in colorsys.hsv_to_rgb(i / float(len(_HAND_EDGES)), 1.0, 1.0))
                     for i in range(len(_HAND_EDGES)))  # fmt: skip
_HAND_DOT = (0, 0, 255)
_HAND_MIN_PX = 0.01  # the official "eps": a hand point at pixel 0 (after truncation) is not drawn


def wan_stroke_sizes(width: int, height: int) -> dict[str, int]:
    """The pixel sizes at ``width`` x ``height``: ``limb_half_width`` (also the body point radius)
    and ``hand_width`` (hand line thickness and dot radius). 720x1280: 2 and 1."""
    base = int(min(int(width), int(height)) / 200)
    limb = max(base - 1, 1)
    return {"limb_half_width": limb, "hand_width": max(limb // 2, 1)}


def wan_body_points(keypoints: np.ndarray) -> np.ndarray:
    """Canonical ``[..., 133, 3]`` -> Wan's 20 body points ``[..., 20, 3]`` (pairs averaged,
    confidence included; non-finite points count as absent first)."""
    kp = _clean(keypoints)
    return (kp[..., _BODY_FROM_COCO[:, 0], :] + kp[..., _BODY_FROM_COCO[:, 1], :]) / 2


def _clean(keypoints: np.ndarray) -> np.ndarray:
    kp = np.array(keypoints, dtype=np.float64)
    if kp.shape[-2:] != (sk.NUM_KEYPOINTS, 3):
        raise ValueError(f"Wan pose drawing expects keypoints [..., 133, 3]; got shape {kp.shape}")
    bad = ~np.isfinite(kp).all(axis=-1)
    kp[bad] = 0.0
    return kp


def _box(box: Sequence[float] | None, width: int, height: int) -> tuple[float, float, float, float]:
    if box is None:
        return 0.0, 0.0, float(width), float(height)
    ox, oy, bw, bh = (float(v) for v in box)
    if not (math.isfinite(ox) and math.isfinite(oy) and bw > 0 and bh > 0):
        raise ValueError(f"box must be (x, y, width, height) with a positive size; got {tuple(box)}")
    return ox, oy, bw, bh


def draw_wan_pose(
    keypoints: np.ndarray,
    width: int,
    height: int,
    *,
    box: Sequence[float] | None = None,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """One frame of canonical keypoints drawn in Wan-Animate's style (see the module docstring).

    Args:
        keypoints: float ``[133, 3]``, x and y normalized to ``box`` (default: the whole frame).
        width, height: the canvas in pixels; the stroke sizes follow its shorter side.
        box: ``(x, y, w, h)`` in pixels where the keypoints' unit square lies on the canvas (e.g.
            the portrait's placement, :func:`~newsmotion_engine.render.placement.place_portrait`), so
            a canvas of another aspect ratio places the pose without stretching it.
        out: optional ``uint8 [height, width, 3]`` buffer to draw into (cleared first).

    Returns:
        ``uint8 [height, width, 3]`` RGB (``out`` itself when given).
    """
    width, height = int(width), int(height)
    if width < 1 or height < 1:
        raise ValueError(f"draw_wan_pose needs a positive size; got {width}x{height}")
    kp = _clean(keypoints)
    if kp.shape != (sk.NUM_KEYPOINTS, 3):
        raise ValueError(f"draw_wan_pose expects one frame of keypoints [133, 3]; got shape {kp.shape}")
    if out is None:
        canvas = np.zeros((height, width, 3), np.uint8)
    else:
        if out.shape != (height, width, 3) or out.dtype != np.uint8:
            raise ValueError(f"out must be uint8 [{height}, {width}, 3]; got {out.dtype} {list(out.shape)}")
        canvas = out
        canvas.fill(0)
    ox, oy, bw, bh = _box(box, width, height)
    kp[:, 0] = ox + kp[:, 0] * bw
    kp[:, 1] = oy + kp[:, 1] * bh
    sizes = wan_stroke_sizes(width, height)
    limb_w, hand_w = sizes["limb_half_width"], sizes["hand_width"]

    body = (kp[_BODY_FROM_COCO[:, 0]] + kp[_BODY_FROM_COCO[:, 1]]) / 2
    ok = body[:, 2] >= WAN_THRESHOLD
    for i, (a, b) in enumerate(_LIMBS):
        if not (ok[a] and ok[b]):
            continue
        (x1, y1), (x2, y2) = body[a, :2], body[b, :2]
        # The official geometry: centre and angle truncated, angle from the first point's side.
        length = ((y1 - y2) ** 2 + (x1 - x2) ** 2) ** 0.5
        angle = math.degrees(math.atan2(y1 - y2, x1 - x2))
        poly = cv2.ellipse2Poly((int((x1 + x2) / 2), int((y1 + y2) / 2)), (int(length / 2), limb_w), int(angle), 0, 360, 1)
        cv2.fillConvexPoly(canvas, poly, _LIMB_COLORS[i])
    for j in np.flatnonzero(ok):
        cv2.circle(canvas, (int(body[j, 0]), int(body[j, 1])), limb_w, _COLORS[j], -1)

    for start in (sk.LEFT_HAND_START, sk.RIGHT_HAND_START):
        hand = kp[start : start + 21]
        pts = [(int(x), int(y)) for x, y in hand[:, :2]]
        shown = [c >= WAN_THRESHOLD and x > _HAND_MIN_PX and y > _HAND_MIN_PX for (x, y), c in zip(pts, hand[:, 2])]
        for e, (a, b) in enumerate(_HAND_EDGES):
            if shown[a] and shown[b]:
                cv2.line(canvas, pts[a], pts[b], _HAND_COLORS[e], thickness=hand_w)
        for j in range(21):
            if shown[j]:
                cv2.circle(canvas, pts[j], hand_w, _HAND_DOT, -1)
    return canvas


def draw_wan_pose_video(keypoints: np.ndarray, width: int, height: int, *, box: Sequence[float] | None = None) -> np.ndarray:
    """``[T, 133, 3]`` -> uint8 ``[T, height, width, 3]``, each frame :func:`draw_wan_pose`."""
    kp = np.asarray(keypoints)
    if kp.ndim != 3 or kp.shape[1:] != (sk.NUM_KEYPOINTS, 3):
        raise ValueError(f"draw_wan_pose_video expects keypoints [T, 133, 3]; got shape {kp.shape}")
    out = np.empty((kp.shape[0], int(height), int(width), 3), np.uint8)
    for t in range(kp.shape[0]):
        draw_wan_pose(kp[t], width, height, box=box, out=out[t])
    return out


def wan_pose_style() -> dict:
    """What :func:`draw_wan_pose` draws, as plain data (JSON-able): the body points as pairs of
    COCO-WholeBody indices (averaged), their names, the limbs (pairs of body points), the point
    and limb colours, the hand bones, hues and dot colour, the threshold and the stroke-size rules."""
    return {
        "body_from_coco": _BODY_FROM_COCO.tolist(),
        "body_names": list(_BODY_NAMES),
        "limbs": _LIMBS.tolist(),
        "colors": [list(c) for c in _COLORS],
        "limb_colors": [list(c) for c in _LIMB_COLORS],
        "hand_starts": [sk.LEFT_HAND_START, sk.RIGHT_HAND_START],
        "hand_edges": _HAND_EDGES.tolist(),
        "hand_colors": [[round(c, 3) for c in col] for col in _HAND_COLORS],
        "hand_dot": list(_HAND_DOT),
        "face": None,
        "threshold": WAN_THRESHOLD,
        "limb_half_width": "max(int(min(W, H) / 200) - 1, 1)",
        "hand_width": "max(max(int(min(W, H) / 200) - 1, 1) // 2, 1)",
        "background": [0, 0, 0],
    }
