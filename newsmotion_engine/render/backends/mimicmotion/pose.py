"""MimicMotion's pose frames: our COCO-WholeBody keypoints drawn as the official code draws
DWPose output (``mimicmotion/dwpose/util.py`` ``draw_pose`` after ``dwpose_detector.py`` and
``wholebody.py``), the drawing the model was trained on.

The layout (:func:`dwpose_layout`). DWPose's detector returns the same 133 COCO-WholeBody points
as our canonical skeleton (:mod:`newsmotion_engine.skeleton`); the official code inserts a neck
(the shoulders' midpoint, score 1 when both shoulders score over 0.3, else 0) and reorders the 17
body points into OpenPose-18 order; the face is points 23-90 (68), the hands 91-111 (left) and
112-132 (right); the 6 foot points are dropped. So nothing is missing from our keypoints for this
drawing: loops carry face and hand points (authored ones at confidence 1, extracted ones with
mediapipe's). What differs from a DWPose run is the confidences: the drawing scales every colour by
them, and ours are the authoring or mediapipe confidences, not DWPose's heatmap scores.

The drawing (:func:`draw_mimicmotion_pose`), in the official order on a black canvas whose short
side is 2160 px (the official ``ref_w``), resized (bilinear) to the frame afterwards:

1. body limbs (the first 17 of OpenPose's 19: no ear-shoulder), skipped when either end scores
   under 0.3, each a filled ellipse of half-width 4 whose colour is scaled by the product of the
   two scores; then the whole canvas times 0.6;
2. body points scoring over 0.3, circles of radius 4, the colour scaled by the score;
3. hands: 20 bones as 2-px lines in hues around the HSV circle times ``int(s_a * s_b * 255)``, then
   a radius-4 dot ``(0, 0, int(s * 255))`` per point, both only where the pixel coordinates
   (truncated) are positive;
4. face: radius-3 grey dots ``int(s * 255)``, same rule.

The official canvas is BGR and converted to RGB at the end, so its "red" first limb comes out blue:
this module draws in that order and converts the same way. Coordinates are truncated as there.
Non-finite coordinates count as absent (score 0, position 0).
"""

from __future__ import annotations

import colorsys
import math
from collections.abc import Sequence
from dataclasses import dataclass

import cv2
import numpy as np

from newsmotion_engine import skeleton as sk

__all__ = ["DWPoseFrame", "dwpose_layout", "draw_mimicmotion_pose", "draw_mimicmotion_pose_video", "REF_SHORT_SIDE"]

REF_SHORT_SIDE = 2160  # the official draw_pose's ref_w: the canvas' short side before the resize
BODY_THRESHOLD = 0.3
EPS = 0.01
# OpenPose-18 order from COCO-WholeBody body indices (-1: the neck, made from the shoulders).
_OPENPOSE_FROM_COCO = np.array([0, -1, 6, 8, 10, 5, 7, 9, 12, 14, 16, 11, 13, 15, 2, 1, 4, 3])
# The official limbSeq (1-based there), first 17 drawn.
_LIMBS = np.array([(2, 3), (2, 6), (3, 4), (4, 5), (6, 7), (7, 8), (2, 9), (9, 10), (10, 11), (2, 12), (12, 13),
                   (13, 14), (2, 1), (1, 15), (15, 17), (1, 16), (16, 18)]) - 1  # fmt: skip
# The official colours, in the canvas' (BGR) channel order.
_COLORS = ((255, 0, 0), (255, 85, 0), (255, 170, 0), (255, 255, 0), (170, 255, 0), (85, 255, 0), (0, 255, 0),
           (0, 255, 85), (0, 255, 170), (0, 255, 255), (0, 170, 255), (0, 85, 255), (0, 0, 255), (85, 0, 255),
           (170, 0, 255), (255, 0, 255), (255, 0, 170), (255, 0, 85))  # fmt: skip
_HAND_EDGES = np.array(sk.HAND_EDGES)
_HAND_HUES = tuple(np.array(colorsys.hsv_to_rgb(i / float(len(_HAND_EDGES)), 1.0, 1.0)) for i in range(len(_HAND_EDGES)))
_STICK = 4
_BODY_RADIUS = 4
_HAND_LINE = 2
_HAND_RADIUS = 4
_FACE_RADIUS = 3
_LIMB_SCALE = 0.6
# ``(canvas * 0.6).astype(uint8)`` as a lookup table: the same values without a float copy of the
# 25-MB canvas.
_DIM = (np.arange(256) * _LIMB_SCALE).astype(np.uint8)


@dataclass(frozen=True)
class DWPoseFrame:
    """One person in the official detector's output layout (x, y normalized to the frame).

    ``body`` ``[18, 2]`` and ``body_score`` ``[18]`` in OpenPose order (neck included),
    ``body_index`` ``[18]`` (the point's row, -1 when its score is 0.3 or less: the official
    ``subset``), ``hands`` ``[2, 21, 2]`` / ``hand_scores`` ``[2, 21]`` (left, right), ``face``
    ``[68, 2]`` / ``face_scores`` ``[68]``."""

    body: np.ndarray
    body_score: np.ndarray
    body_index: np.ndarray
    hands: np.ndarray
    hand_scores: np.ndarray
    face: np.ndarray
    face_scores: np.ndarray


def _clean(keypoints: np.ndarray) -> np.ndarray:
    kp = np.array(keypoints, dtype=np.float64)
    if kp.shape != (sk.NUM_KEYPOINTS, 3):
        raise ValueError(f"MimicMotion pose drawing expects one frame of keypoints [133, 3]; got shape {kp.shape}")
    kp[~np.isfinite(kp).all(axis=-1)] = 0.0
    return kp


def dwpose_layout(keypoints: np.ndarray) -> DWPoseFrame:
    """Canonical keypoints ``[133, 3]`` (x, y normalized to the frame) -> the official layout
    (see the module docstring)."""
    kp = _clean(keypoints)
    body = kp[np.maximum(_OPENPOSE_FROM_COCO, 0)].copy()
    ls, rs = kp[sk.BODY["left_shoulder"]], kp[sk.BODY["right_shoulder"]]
    body[1, :2] = (ls[:2] + rs[:2]) / 2
    body[1, 2] = float(ls[2] > BODY_THRESHOLD and rs[2] > BODY_THRESHOLD)
    index = np.where(body[:, 2] > BODY_THRESHOLD, np.arange(18), -1)
    hands = np.stack([kp[sk.LEFT_HAND_START : sk.LEFT_HAND_START + 21], kp[sk.RIGHT_HAND_START : sk.RIGHT_HAND_START + 21]])
    face = kp[sk.FACE_START : sk.FACE_START + 68]
    return DWPoseFrame(body[:, :2], body[:, 2], index, hands[..., :2], hands[..., 2], face[:, :2], face[:, 2])


def _scaled(color: Sequence[float], alpha: float) -> list[int]:
    return [int(c * alpha) for c in color]


def _to_frame(keypoints: np.ndarray, width: int, height: int, box: Sequence[float] | None) -> np.ndarray:
    """Keypoints normalized to ``box`` (pixels ``(x, y, w, h)``; default the frame) -> normalized to the frame."""
    kp = _clean(keypoints)
    if box is not None:
        ox, oy, bw, bh = (float(v) for v in box)
        if not (math.isfinite(ox) and math.isfinite(oy) and bw > 0 and bh > 0):
            raise ValueError(f"box must be (x, y, width, height) with a positive size; got {tuple(box)}")
        kp[:, 0] = (ox + kp[:, 0] * bw) / width
        kp[:, 1] = (oy + kp[:, 1] * bh) / height
    return kp


def draw_mimicmotion_pose(keypoints: np.ndarray, width: int, height: int, *, box: Sequence[float] | None = None) -> np.ndarray:
    """One pose frame as MimicMotion was trained on (module docstring): uint8 RGB ``[height, width, 3]``.

    Args:
        keypoints: float ``[133, 3]``, x and y normalized to ``box`` (default: the whole frame).
        width, height: the frame (the model's native size, e.g. 576 x 1024).
        box: ``(x, y, w, h)`` in pixels where the keypoints' unit square lies on the frame (the
            portrait's placement), so the pose keeps its proportions on any frame.
    """
    width, height = int(width), int(height)
    if width < 1 or height < 1:
        raise ValueError(f"draw_mimicmotion_pose needs a positive size; got {width}x{height}")
    pose = dwpose_layout(_to_frame(keypoints, width, height, box))
    short = min(height, width)
    sr = (REF_SHORT_SIDE / short) if short != REF_SHORT_SIDE else 1
    canvas = np.zeros((int(height * sr), int(width * sr), 3), np.uint8)
    H, W = canvas.shape[:2]

    # Body limbs: confidence-scaled colours, then the whole canvas dimmed (official order).
    for i, (a, b) in enumerate(_LIMBS):
        conf = pose.body_score[[a, b]]
        if conf[0] < BODY_THRESHOLD or conf[1] < BODY_THRESHOLD:
            continue
        # The official code indexes the candidates through ``subset``: a score of exactly 0.3
        # passes the limb test but has index -1, i.e. the last point (kept for parity).
        pts = pose.body[[int(pose.body_index[a]), int(pose.body_index[b])]]
        Y, X = pts[:, 0] * float(W), pts[:, 1] * float(H)
        length = ((X[0] - X[1]) ** 2 + (Y[0] - Y[1]) ** 2) ** 0.5
        angle = math.degrees(math.atan2(X[0] - X[1], Y[0] - Y[1]))
        poly = cv2.ellipse2Poly((int(np.mean(Y)), int(np.mean(X))), (int(length / 2), _STICK), int(angle), 0, 360, 1)
        cv2.fillConvexPoly(canvas, poly, _scaled(_COLORS[i], conf[0] * conf[1]))
    canvas = cv2.LUT(canvas, _DIM)
    for i in range(18):
        if pose.body_index[i] == -1:
            continue
        x, y = pose.body[i]
        cv2.circle(canvas, (int(x * W), int(y * H)), _BODY_RADIUS, _scaled(_COLORS[i], pose.body_score[i]), thickness=-1)

    for peaks, scores in zip(pose.hands, pose.hand_scores):
        px = [(int(x * W), int(y * H)) for x, y in peaks]
        for ie, (a, b) in enumerate(_HAND_EDGES):
            (x1, y1), (x2, y2) = px[a], px[b]
            if x1 > EPS and y1 > EPS and x2 > EPS and y2 > EPS:
                score = int(scores[a] * scores[b] * 255)
                cv2.line(canvas, (x1, y1), (x2, y2), (_HAND_HUES[ie] * score).tolist(), thickness=_HAND_LINE)
        for (x, y), s in zip(px, scores):
            if x > EPS and y > EPS:
                cv2.circle(canvas, (x, y), _HAND_RADIUS, (0, 0, int(s * 255)), thickness=-1)

    for (x, y), s in zip(pose.face, pose.face_scores):
        x, y = int(x * W), int(y * H)
        if x > EPS and y > EPS:
            conf = int(s * 255)
            cv2.circle(canvas, (x, y), _FACE_RADIUS, (conf, conf, conf), thickness=-1)
    return cv2.cvtColor(cv2.resize(canvas, (width, height)), cv2.COLOR_BGR2RGB)


def draw_mimicmotion_pose_video(keypoints: np.ndarray, width: int, height: int, *, box: Sequence[float] | None = None) -> np.ndarray:
    """``[T, 133, 3]`` -> uint8 ``[T, height, width, 3]``, each frame :func:`draw_mimicmotion_pose`
    (frames drawn on a few threads: OpenCV releases the GIL)."""
    from concurrent.futures import ThreadPoolExecutor

    kp = np.asarray(keypoints)
    if kp.ndim != 3 or kp.shape[1:] != (sk.NUM_KEYPOINTS, 3):
        raise ValueError(f"draw_mimicmotion_pose_video expects keypoints [T, 133, 3]; got shape {kp.shape}")
    out = np.empty((kp.shape[0], int(height), int(width), 3), np.uint8)

    def draw(t: int) -> None:
        out[t] = draw_mimicmotion_pose(kp[t], width, height, box=box)

    with ThreadPoolExecutor(max_workers=4, thread_name_prefix="mimicmotion-pose") as pool:
        list(pool.map(draw, range(kp.shape[0])))
    return out
