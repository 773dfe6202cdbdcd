"""What a still portrait's landmarks say about the photo: which points are really in view, and
which way is up.

**In view.** mediapipe's pose model always returns all 33 body points, guessing the ones the photo
does not show: on a head-and-shoulders crop it places hips and feet far below the image (y = 2 in
canvas units), some with a non-negligible visibility. Headshots are the most common anchor
portrait, so those guesses are not errors: :func:`out_of_view` marks every body/feet point lying
outside the portrait block (the canvas area the photo covers, widened by :data:`VIEW_MARGIN` of
its size) and every face/hand whose centre does, and the persona build stores them as "not
visible" (confidence 0, coordinates 0, the convention for undetected points). Face and hands are
judged as a whole because their points come from one detection each: a face whose chin is just
cut by the frame is still a face.

**Upright.** A phone photo whose EXIF orientation tag was lost in editing arrives sideways.
mediapipe finds a person at any rotation with full confidence (measured on the sample portrait
at 0/90/180/270 degrees), so the rotation cannot be read from the scores, but it can from the
geometry: :func:`up_vector` is the chin-to-brows axis of the face (else shoulders-to-head of the
body), and :func:`upright_turns` says how many counter-clockwise quarter turns bring it upright.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from newsmotion_engine.skeleton import BODY, BODY_NAMES, FACE68, FACE_START, FEET_NAMES, PARTS

__all__ = [
    "VIEW_MARGIN",
    "UPRIGHT_TOLERANCE_DEG",
    "view_params",
    "block_bounds",
    "out_of_view",
    "drop_out_of_view",
    "up_vector",
    "upright_turns",
    "describe_turns",
]

# A point up to this fraction of the block's width/height beyond the block still counts as in
# view: mediapipe puts a shoulder cut by the frame edge a few pixels outside it.
VIEW_MARGIN = 0.05
# The up axis must lie within this many degrees of a quarter-turn direction to act on it; a
# diagonal axis (a strongly tilted head) is left alone rather than guessed.
UPRIGHT_TOLERANCE_DEG = 30.0
# Points and parts judged per detection rather than per point (see the module docstring).
_WHOLE_PARTS = ("face", "left_hand", "right_hand")
_HEAD_POINTS = tuple(BODY[n] for n in ("nose", "left_eye", "right_eye", "left_ear", "right_ear"))
_MIN_CONF = 0.5


def view_params() -> dict[str, Any]:
    """The constants a persona's landmarks depend on (part of the persona cache's params)."""
    return {"view_margin": VIEW_MARGIN, "upright_tolerance_deg": UPRIGHT_TOLERANCE_DEG}


def block_bounds(offset_x: float, offset_y: float, width: float, height: float, canvas: tuple[int, int]) -> np.ndarray:
    """The portrait block ``[[x0, y0], [x1, y1]]`` normalized to a ``canvas`` (w, h), widened by
    :data:`VIEW_MARGIN` of the block's size on every side."""
    cw, ch = canvas
    lo = np.array([offset_x / cw, offset_y / ch])
    size = np.array([width / cw, height / ch])
    return np.stack([lo - VIEW_MARGIN * size, lo + size + VIEW_MARGIN * size])


def out_of_view(landmarks: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """bool ``[133]``: which of the present points (confidence > 0) lie outside ``bounds``
    (:func:`block_bounds`); body and feet point by point, face and hands by their centre."""
    lm = np.asarray(landmarks, dtype=np.float64)
    lo, hi = bounds

    def outside(xy: np.ndarray) -> np.ndarray:
        return ((xy < lo) | (xy > hi)).any(axis=-1)

    result = outside(lm[:, :2])
    for part in _WHOLE_PARTS:
        sl = PARTS[part]
        present = lm[sl, 2] > 0
        result[sl] = bool(present.any()) and bool(outside(lm[sl][present, :2].mean(axis=0)))
    return result & (lm[:, 2] > 0)


def drop_out_of_view(landmarks: np.ndarray, bounds: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """``(landmarks with out-of-view points zeroed, their names)``: body/feet point names and
    whole part names (``face``, ``left_hand``, ``right_hand``), for the cache's metadata."""
    gone = out_of_view(landmarks, bounds)
    out = np.array(landmarks, dtype=np.float32, copy=True)
    out[gone] = 0.0
    names = [n for i, n in enumerate((*BODY_NAMES, *FEET_NAMES)) if gone[i]]
    names += [part for part in _WHOLE_PARTS if gone[PARTS[part]].any()]
    return out, names


def up_vector(landmarks: np.ndarray, width: int, height: int) -> np.ndarray | None:
    """The person's "up" in image pixels (x right, y *up*), or None when neither a face nor a head
    over confident shoulders was found. Face first (chin to brow centre: the face mesh is fitted
    in a rotation-aligned crop, so it follows the face at any angle); else the body's head points
    (nose, eyes, ears) minus the shoulders' midpoint."""
    lm = np.asarray(landmarks, dtype=np.float64)
    px = lm[:, :2] * np.array([width, height])
    face = lm[FACE_START : FACE_START + 68]
    if float(face[:, 2].mean()) >= _MIN_CONF:
        pts = px[FACE_START : FACE_START + 68]
        brows = np.concatenate([pts[FACE68["right_brow"]], pts[FACE68["left_brow"]]]).mean(axis=0)
        up = brows - pts[FACE68["jaw"]][8]
    else:
        shoulders = [BODY["left_shoulder"], BODY["right_shoulder"]]
        head = [i for i in _HEAD_POINTS if lm[i, 2] >= _MIN_CONF]
        if not head or (lm[shoulders, 2] < _MIN_CONF).any():
            return None
        up = px[head].mean(axis=0) - px[shoulders].mean(axis=0)
    if float(np.hypot(*up)) < 1e-6:
        return None
    return np.array([up[0], -up[1]])


def upright_turns(landmarks: np.ndarray, width: int, height: int) -> int:
    """Counter-clockwise quarter turns (``np.rot90``'s ``k``: 0-3) that make the person upright:
    1 for a photo rotated 90 degrees clockwise (head on the right), 3 for one rotated counter-
    clockwise, 2 for upside down. 0 when upright, when there is no up axis, or when the axis is
    diagonal (within :data:`UPRIGHT_TOLERANCE_DEG` of no quarter-turn direction)."""
    up = up_vector(landmarks, width, height)
    if up is None:
        return 0
    theta = math.degrees(math.atan2(up[1], up[0]))  # 90 = upright
    turns = round((90.0 - theta) / 90.0)
    residual = (theta + 90.0 * turns - 90.0 + 180.0) % 360.0 - 180.0
    if abs(residual) > UPRIGHT_TOLERANCE_DEG:
        return 0
    return turns % 4


def describe_turns(turns: int) -> str:
    """How a photo was oriented, given the counter-clockwise quarter turns that made it upright."""
    return {0: "upright", 1: "rotated 90° clockwise", 2: "upside down", 3: "rotated 90° counter-clockwise"}[turns % 4]
