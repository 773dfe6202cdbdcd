"""The canonical skeleton: COCO-WholeBody, 133 keypoints in DWPose order.

Layout (index ranges): body 0-16 (COCO 17), feet 17-22, face 23-90 (iBUG 68), left hand 91-111,
right hand 112-132. "Left" is the *person's* left (on the image's right for a person facing the
camera), as in COCO and mediapipe. A keypoint array is float32 ``[..., 133, 3]``: x and y
normalized to the frame (0..1, origin top-left), then a confidence in 0..1 (0 = not present).
"""

from __future__ import annotations

import numpy as np

SKELETON_NAME = "coco-wholebody-133"
NUM_KEYPOINTS = 133

BODY_NAMES = (
    "nose", "left_eye", "right_eye", "left_ear", "right_ear",
    "left_shoulder", "right_shoulder", "left_elbow", "right_elbow", "left_wrist", "right_wrist",
    "left_hip", "right_hip", "left_knee", "right_knee", "left_ankle", "right_ankle",
)
FEET_NAMES = ("left_big_toe", "left_small_toe", "left_heel", "right_big_toe", "right_small_toe", "right_heel")
HAND_POINT_NAMES = (
    "wrist",
    "thumb_cmc", "thumb_mcp", "thumb_ip", "thumb_tip",
    "index_mcp", "index_pip", "index_dip", "index_tip",
    "middle_mcp", "middle_pip", "middle_dip", "middle_tip",
    "ring_mcp", "ring_pip", "ring_dip", "ring_tip",
    "pinky_mcp", "pinky_pip", "pinky_dip", "pinky_tip",
)

# Part name -> slice into the 133 axis.
PARTS: dict[str, slice] = {
    "body": slice(0, 17),
    "feet": slice(17, 23),
    "face": slice(23, 91),
    "left_hand": slice(91, 112),
    "right_hand": slice(112, 133),
}

KEYPOINT_NAMES: tuple[str, ...] = (
    BODY_NAMES
    + FEET_NAMES
    + tuple(f"face_{i}" for i in range(68))
    + tuple(f"left_hand_{n}" for n in HAND_POINT_NAMES)
    + tuple(f"right_hand_{n}" for n in HAND_POINT_NAMES)
)
assert len(KEYPOINT_NAMES) == NUM_KEYPOINTS

# Body indices by name, for readable code elsewhere (``BODY["left_wrist"]`` == 9).
BODY = {name: i for i, name in enumerate(BODY_NAMES)}
FEET = {name: 17 + i for i, name in enumerate(FEET_NAMES)}
FACE_START = PARTS["face"].start
LEFT_HAND_START = PARTS["left_hand"].start
RIGHT_HAND_START = PARTS["right_hand"].start

# iBUG-68 face layout, as offsets inside the face part.
FACE68 = {
    "jaw": slice(0, 17),
    "right_brow": slice(17, 22),
    "left_brow": slice(22, 27),
    "nose_bridge": slice(27, 31),
    "nose_lower": slice(31, 36),
    "right_eye": slice(36, 42),
    "left_eye": slice(42, 48),
    "outer_lip": slice(48, 60),
    "inner_lip": slice(60, 68),
}

# Hand bones (parent, child) inside one 21-point hand.
HAND_EDGES: tuple[tuple[int, int], ...] = (
    (0, 1), (1, 2), (2, 3), (3, 4),
    (0, 5), (5, 6), (6, 7), (7, 8),
    (0, 9), (9, 10), (10, 11), (11, 12),
    (0, 13), (13, 14), (14, 15), (15, 16),
    (0, 17), (17, 18), (18, 19), (19, 20),
)


def empty_keypoints(frames: int | None = None) -> np.ndarray:
    """All-zero keypoints (confidence 0 = absent): ``[133, 3]`` or ``[frames, 133, 3]`` float32."""
    shape = (NUM_KEYPOINTS, 3) if frames is None else (frames, NUM_KEYPOINTS, 3)
    return np.zeros(shape, dtype=np.float32)


def part_confidence(keypoints: np.ndarray) -> dict[str, float]:
    """Mean confidence per part over all frames, e.g. ``{"body": 0.93, "left_hand": 0.0, ...}``."""
    kp = np.asarray(keypoints)
    return {name: float(kp[..., sl, 2].mean()) for name, sl in PARTS.items()}


def visible_parts(keypoints: np.ndarray, threshold: float = 0.3) -> list[str]:
    """Parts whose mean confidence reaches ``threshold`` (which parts a portrait actually shows)."""
    return [name for name, c in part_confidence(keypoints).items() if c >= threshold]
