"""The rig: a waist-up news anchor's body, posed by a few parameters, as whole-body keypoints.

Pose parameters (``PARAMS``, each a per-frame array): torso lean/sway/turn, shoulder shrug, per
side upper-arm, forearm and hand angles with foreshortening, palm facing, finger curls; head
yaw/pitch/roll, mouth, smile, brows, blink. ``REST`` is the anchor's neutral pose: upright, hands
resting together in front of the waist. :func:`pose` turns them into keypoints
``[T, 133, 3]`` (see :mod:`newsmotion_engine.skeleton`) in pixels of the 720x1280 portrait frame,
by forward kinematics: torso from the hips up, arms as chains of angles, head as a rotated 3-D
face template projected orthographically (yaw compresses and shifts features, pitch moves them
vertically, roll rotates), hands from a template with per-finger curl.

Angles are degrees. Arm angles are measured from straight down, positive away from the body's
midline (outward), 180 = straight up, negative = across the body; they are relative to the torso,
so a torso sway carries the arms with it. Sides: ``l_`` is the *person's* left, on the image's
right.
"""

from __future__ import annotations

import math

import numpy as np

from newsmotion_engine import skeleton as sk

FRAME_WIDTH = 720
FRAME_HEIGHT = 1280

# Head height (crown to chin) is the unit; proportions are an adult's. The figure is sized so the
# gestures keep wrists and hands inside the narrow portrait frame.
_H = 195.0
RIG: dict[str, float] = {
    "hip_x": 360.0,             # hip centre (fixed: the anchor sits/stands at a desk)
    "hip_y": 1225.0,            # hips near the bottom of the frame
    "hip_half": 0.48 * _H,      # hip joint half-separation
    "torso": 2.35 * _H,         # hip centre to shoulder centre
    "shoulder_half": 0.76 * _H,
    "neck": 0.62 * _H,          # shoulder centre up to the head pivot (top of the spine)
    "upper_arm": 1.22 * _H,
    "forearm": 1.04 * _H,
    "hand": 0.7 * _H,           # wrist to middle fingertip
    "face_width": 0.6 * _H,     # jaw width; the face template's unit
    "lean_scale": 0.55,         # how much nearer (bigger) the upper body gets per sin(lean)
    "breath_shoulder": 0.014 * _H,  # shoulder rise at the top of a breath
    "breath_seconds": 4.0,      # about one breath per 4 s
    "blink_half_seconds": 0.09,
}

# Neutral pose. Units: degrees for angles; 0..1 for curls, mouth, smile, blink, brow; lengths are
# foreshortening factors (1 = segment parallel to the image plane); palm is -1 (back of the hand
# to camera) .. 1 (palm to camera), its magnitude is how much of the hand's width shows.
_SIDE_REST = {
    "upper": 8.0, "upper_len": 0.95, "fore": -64.0, "fore_len": 0.7, "wrist": -22.0,
    "hand_len": 0.62, "palm": -0.5, "curl": 0.45, "index": 0.4, "thumb": 0.35, "spread": 0.25,
}
REST: dict[str, float] = {
    "lean": 0.0, "sway": 0.0, "turn": 0.0, "shrug_l": 0.0, "shrug_r": 0.0,
    **{f"l_{k}": v for k, v in _SIDE_REST.items()},
    **{f"r_{k}": v for k, v in _SIDE_REST.items()},
    "yaw": 0.0, "pitch": 0.0, "roll": 0.0, "mouth": 0.0, "smile": 0.15, "blink": 0.0, "brow": 0.0,
}
PARAMS: tuple[str, ...] = tuple(REST)



# --------------------------------------------------------------------------------------------
# Templates: face (3-D, in face widths) and hand (2-D, in hand lengths).
# --------------------------------------------------------------------------------------------
def _face_template() -> dict[str, np.ndarray]:
    """iBUG-68 face in head coordinates: x to the image right, y down, z toward the camera; unit
    = jaw width, origin between the eyes. Returns the neutral points and per-expression offsets."""
    pts = np.zeros((68, 3))
    # Jaw 0-16: from the person's right (image left) ear, down round the chin, to the left ear.
    t = np.linspace(0.0, math.pi, 17)
    c, s = np.cos(t), np.sin(t)
    pts[0:17, 0] = -0.5 * np.sign(c) * np.abs(c) ** 0.8
    pts[0:17, 1] = 0.02 + 0.76 * s ** 1.3
    pts[0:17, 2] = -0.38 * np.abs(c) ** 1.5 + 0.06 * s
    # Brows: right 17-21 outer -> inner, left 22-26 inner -> outer (mirror).
    u = np.linspace(0.0, 1.0, 5)
    brow = np.stack([-0.42 + 0.29 * u, -0.09 - 0.06 * np.sin(math.pi * u) + 0.02 * u, -0.06 + 0.14 * u], axis=1)
    pts[17:22] = brow
    pts[22:27] = brow[::-1] * [-1, 1, 1]
    # Nose bridge 27-30 (top -> tip) and lower nose 31-35 (image left -> right).
    pts[27:31] = [[0, -0.03, 0.07], [0, 0.06, 0.12], [0, 0.15, 0.18], [0, 0.24, 0.24]]
    pts[31:36] = [[-0.09, 0.28, 0.1], [-0.045, 0.3, 0.14], [0, 0.31, 0.16], [0.045, 0.3, 0.14], [0.09, 0.28, 0.1]]
    # Eyes, iBUG order: right 36 outer, 37-38 upper lid, 39 inner, 40-41 lower lid; left mirrored
    # (42 inner, 43-44 upper, 45 outer, 46-47 lower).
    right_eye = np.array([[-0.285, 0.0, -0.06], [-0.235, -0.035, 0.0], [-0.165, -0.035, 0.01],
                          [-0.115, 0.005, 0.0], [-0.165, 0.03, 0.01], [-0.235, 0.03, 0.0]])
    pts[36:42] = right_eye
    pts[42:48] = right_eye[[3, 2, 1, 0, 5, 4]] * [-1, 1, 1]
    # Outer lip 48-59 (corner, upper lip to the other corner, lower lip back), inner lip 60-67.
    pts[48:60] = [[-0.18, 0.51, 0.03], [-0.12, 0.46, 0.09], [-0.05, 0.44, 0.12], [0, 0.45, 0.13],
                  [0.05, 0.44, 0.12], [0.12, 0.46, 0.09], [0.18, 0.51, 0.03], [0.12, 0.56, 0.08],
                  [0.06, 0.585, 0.1], [0, 0.59, 0.11], [-0.06, 0.585, 0.1], [-0.12, 0.56, 0.08]]
    pts[60:68] = [[-0.15, 0.51, 0.05], [-0.05, 0.495, 0.1], [0, 0.5, 0.11], [0.05, 0.495, 0.1],
                  [0.15, 0.51, 0.05], [0.05, 0.52, 0.1], [0, 0.525, 0.11], [-0.05, 0.52, 0.1]]

    mouth = np.zeros_like(pts)  # jaw drops: lower lip and chin move down, corners a little
    mouth[[55, 56, 57, 58, 59], 1] = [0.09, 0.11, 0.12, 0.11, 0.09]
    mouth[[65, 66, 67], 1] = [0.1, 0.11, 0.1]
    mouth[[48, 54, 60, 64], 1] = 0.03
    mouth[4:13, 1] = 0.09 * np.sin(np.linspace(0.15, math.pi - 0.15, 9)) ** 2
    smile = np.zeros_like(pts)  # corners out and up, lips stretch
    smile[[48, 60], 0], smile[[54, 64], 0] = -0.035, 0.035
    smile[[48, 54, 60, 64], 1] = -0.04
    smile[[49, 59, 61, 67], 0], smile[[53, 55, 63, 65], 0] = -0.015, 0.015
    smile[[49, 53, 55, 59], 1] = -0.015
    blink = np.zeros_like(pts)  # upper lids close onto the lower ones
    blink[[37, 38, 43, 44], 1] = 0.058
    blink[[40, 41, 46, 47], 1] = -0.006
    brow = np.zeros_like(pts)
    brow[17:27, 1] = -0.055
    ears = np.array([[0.52, 0.12, -0.5], [-0.52, 0.12, -0.5]])  # person's left (image right), right
    return {"points": pts, "mouth": mouth, "smile": smile, "blink": blink, "brow": brow, "ears": ears}


_FACE = _face_template()
# Head rotation pivot (top of the spine) in face coordinates: below the eyes and behind the face.
_HEAD_PIVOT = np.array([0.0, 0.62, -0.5])

# Hand template in hand lengths: u along the hand (wrist -> fingers), v toward the thumb side.
_MCP = np.array([[0.43, 0.15], [0.45, 0.04], [0.43, -0.06], [0.40, -0.15]])  # index..pinky
_PHALANX = np.array([[0.24, 0.14, 0.11], [0.26, 0.16, 0.12], [0.24, 0.15, 0.11], [0.19, 0.11, 0.10]])
_SPREAD_DEG = np.array([9.0, 1.0, -7.0, -16.0])
_FLEX_DEG = np.array([75.0, 95.0, 65.0])  # MCP, PIP, DIP flexion of a full curl
_THUMB_OPEN = np.array([[0.1, 0.12], [0.22, 0.27], [0.33, 0.37], [0.43, 0.45]])
_THUMB_FOLDED = np.array([[0.1, 0.1], [0.22, 0.16], [0.32, 0.08], [0.4, 0.0]])


def _hand_local(curl: np.ndarray, index: np.ndarray, thumb: np.ndarray, spread: np.ndarray) -> np.ndarray:
    """Hand points ``[T, 21, 2]`` in (u, v) hand coordinates for per-frame curls.

    A curling finger folds toward the palm, i.e. toward or away from the camera; in the image that
    shows as the finger's projected segments shortening and folding back (cos of the cumulative
    flexion), which is what a front view of a closing hand looks like.
    """
    frames = curl.shape[0]
    out = np.zeros((frames, 21, 2))
    t = thumb[:, None, None]
    out[:, 1:5] = (1 - t) * _THUMB_OPEN + t * _THUMB_FOLDED
    curls = np.stack([index, curl, curl, curl], axis=1)  # [T, 4] index, middle, ring, pinky
    ang = np.radians(_SPREAD_DEG)[None, :] * (0.4 + spread[:, None])  # [T, 4]
    direction = np.stack([np.cos(ang), np.sin(ang)], axis=-1)  # [T, 4, 2]
    cum = np.cumsum(np.radians(_FLEX_DEG))[None, None, :] * curls[:, :, None]  # [T, 4, 3]
    steps = _PHALANX[None] * np.cos(cum)  # projected length of each phalanx
    joints = _MCP[None, :, None, :] + np.cumsum(steps, axis=-1)[..., None] * direction[:, :, None, :]
    for f in range(4):
        base = 5 + 4 * f
        out[:, base] = _MCP[f]
        out[:, base + 1:base + 4] = joints[:, f]
    return out


# --------------------------------------------------------------------------------------------
# Forward kinematics.
# --------------------------------------------------------------------------------------------
def _rot2(vectors: np.ndarray, angle: np.ndarray) -> np.ndarray:
    """Rotate 2-D image vectors ``[T, ..., 2]`` by ``angle`` [T] radians (positive = clockwise on
    screen, i.e. +x toward +y, since y points down)."""
    c, s = np.cos(angle), np.sin(angle)
    extra = (None,) * (vectors.ndim - 2)
    c, s = c[(slice(None),) + extra], s[(slice(None),) + extra]
    x, y = vectors[..., 0], vectors[..., 1]
    return np.stack([c * x - s * y, s * x + c * y], axis=-1)


def _limb_dir(sign: float, angle_deg: np.ndarray) -> np.ndarray:
    """Unit image vector for an arm angle (0 = down, + outward) on a side (+1 left, -1 right)."""
    a = np.radians(angle_deg)
    return np.stack([sign * np.sin(a), np.cos(a)], axis=-1)


def pose(p: dict[str, np.ndarray]) -> np.ndarray:
    """Pose parameters (each ``[T]``) -> keypoints ``[T, 133, 3]`` in pixels (confidence 1)."""
    frames = p["lean"].shape[0]
    kp = np.zeros((frames, sk.NUM_KEYPOINTS, 3))
    lean = np.radians(p["lean"])
    sway = np.radians(p["sway"])  # positive sway tilts the upper body toward image right
    turn = np.radians(p["turn"])
    scale = 1.0 + RIG["lean_scale"] * np.sin(lean)  # nearer the camera = bigger
    hip = np.array([RIG["hip_x"], RIG["hip_y"]])

    # Hips barely move; shoulders ride the torso (sway about the hips, lean foreshortens it).
    hip_off = np.stack([RIG["hip_half"] * np.cos(0.5 * turn), np.zeros(frames)], axis=-1)
    kp[:, sk.BODY["left_hip"], :2] = hip + hip_off
    kp[:, sk.BODY["right_hip"], :2] = hip - hip_off
    up = _rot2(np.stack([np.zeros(frames), -RIG["torso"] * np.cos(lean)], axis=-1), sway)
    chest = hip + up + np.stack([np.zeros(frames), -p["breath"]], axis=-1)
    across = _rot2(np.stack([RIG["shoulder_half"] * scale * np.cos(turn), np.zeros(frames)], axis=-1), sway)
    torso_up = _rot2(np.tile([0.0, -1.0], (frames, 1)), sway)  # unit "up" along the torso

    shoulders = {}
    for side, sign in (("l", 1.0), ("r", -1.0)):
        shrug = (p[f"shrug_{side}"] * _H + 0.5 * p["breath"]) * scale
        shoulders[side] = chest + sign * across + torso_up * shrug[:, None]

    # Head: rotate the 3-D face template about the pivot, project, place the pivot on the neck.
    neck_top = chest + torso_up * (RIG["neck"] * scale)[:, None]
    fw = RIG["face_width"] * scale
    face = (_FACE["points"][None]
            + p["mouth"][:, None, None] * _FACE["mouth"] + p["smile"][:, None, None] * _FACE["smile"]
            + np.clip(p["blink"], 0, 1)[:, None, None] * _FACE["blink"]
            + p["brow"][:, None, None] * _FACE["brow"])
    ears = np.broadcast_to(_FACE["ears"], (frames, 2, 3))
    head = np.concatenate([face, ears], axis=1) - _HEAD_PIVOT
    yaw = np.radians(p["yaw"] + 0.5 * p["turn"])
    pitch = np.radians(p["pitch"] - 0.3 * p["lean"])  # the head dips a little with a lean
    cy, sy, cp, sp = np.cos(yaw)[:, None], np.sin(yaw)[:, None], np.cos(pitch)[:, None], np.sin(pitch)[:, None]
    x, y, z = head[..., 0], head[..., 1], head[..., 2]
    y, z = y * cp - z * sp, y * sp + z * cp  # pitch: positive lifts the face (chin up)
    x, z = x * cy + z * sy, -x * sy + z * cy  # yaw: positive turns the face toward image right
    roll = np.radians(p["roll"]) + sway  # the head rides the torso's sway
    head2d = _rot2(np.stack([x, y], axis=-1), roll) * fw[:, None, None] + neck_top[:, None, :]
    kp[:, sk.PARTS["face"], :2] = head2d[:, :68]
    kp[:, sk.BODY["nose"], :2] = head2d[:, 30]
    kp[:, sk.BODY["right_eye"], :2] = head2d[:, 36:42].mean(axis=1)
    kp[:, sk.BODY["left_eye"], :2] = head2d[:, 42:48].mean(axis=1)
    kp[:, sk.BODY["left_ear"], :2] = head2d[:, 68]
    kp[:, sk.BODY["right_ear"], :2] = head2d[:, 69]

    # Arms: shoulder -> elbow -> wrist -> hand, angles relative to the torso.
    for side, sign, start in (("l", 1.0, sk.LEFT_HAND_START), ("r", -1.0, sk.RIGHT_HAND_START)):
        g = {k: p[f"{side}_{k}"] for k in _SIDE_REST}
        shoulder = shoulders[side]
        upper_px = RIG["upper_arm"] * g["upper_len"] * scale
        fore_px = RIG["forearm"] * g["fore_len"] * scale
        elbow = shoulder + _rot2(_limb_dir(sign, g["upper"]), sway) * upper_px[:, None]
        wrist = elbow + _rot2(_limb_dir(sign, g["fore"]), sway) * fore_px[:, None]
        hand_angle = g["fore"] + g["wrist"]
        u_dir = _rot2(_limb_dir(sign, hand_angle), sway)
        a = np.radians(hand_angle)
        # Thumb side of a palm-forward hand: outward when hanging, inward when raised (mirror per side).
        v_dir = _rot2(np.stack([sign * np.cos(a), -np.sin(a)], axis=-1), sway)
        local = _hand_local(np.clip(g["curl"], 0, 1), np.clip(g["index"], 0, 1),
                            np.clip(g["thumb"], 0, 1), np.clip(g["spread"], 0, 1.2))
        size = (RIG["hand"] * scale)[:, None, None]
        hand = (wrist[:, None, :]
                + local[..., :1] * (g["hand_len"][:, None, None] * u_dir[:, None, :]) * size
                + local[..., 1:] * (g["palm"][:, None, None] * v_dir[:, None, :]) * size)
        kp[:, start:start + 21, :2] = hand
        kp[:, sk.BODY[f"{'left' if side == 'l' else 'right'}_shoulder"], :2] = shoulder
        kp[:, sk.BODY[f"{'left' if side == 'l' else 'right'}_elbow"], :2] = elbow
        kp[:, sk.BODY[f"{'left' if side == 'l' else 'right'}_wrist"], :2] = wrist

    present = np.ones(sk.NUM_KEYPOINTS, dtype=bool)
    present[13:23] = False  # knees, ankles, feet: below the frame of a waist-up shot
    kp[:, present, 2] = 1.0
    return kp


__all__ = ["FRAME_WIDTH", "FRAME_HEIGHT", "RIG", "REST", "PARAMS", "pose"]
