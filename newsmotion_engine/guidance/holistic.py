"""mediapipe Holistic -> the canonical 133-keypoint skeleton (see ``newsmotion_engine.skeleton``).

mediapipe 0.10.21's legacy ``solutions.holistic`` runs pose (33 landmarks), a 468-point face mesh
and two 21-point hands on one person. Only ``model_complexity=1`` is used: its pose weights ship in
the wheel, while 0 and 2 try to download a model and must never run here.

Mapping (all coordinates normalized to the frame, origin top-left; "left" is the person's left):

- body 0-16: the COCO-17 points are a subset of mediapipe pose's 33 (``_POSE_FOR_BODY``); their
  confidence is the pose landmark's ``visibility`` (times ``presence`` when mediapipe fills it in;
  0.10.21's holistic leaves it unset).
- feet 17-22: big toe = pose ``foot_index`` (the tip of the foot, between big and second toe),
  heel = pose ``heel``. Pose has no small toe, so it is *derived*: from the big toe, a fifth of the
  foot length back toward the heel and 0.3 foot lengths sideways, away from the other ankle
  (i.e. to the outside of the foot). Its confidence is half the weaker of big-toe and heel
  visibility, flagging it as an estimate.
- face 23-90: iBUG-68 points picked from the 468-point mesh by ``FACE68_FROM_MESH`` (see there
  for how it was built and checked); confidence ``PART_CONFIDENCE`` when the face was found.
- hands 91-132: mediapipe's hand landmark order is the COCO-WholeBody hand order (wrist, then
  thumb, index, middle, ring, pinky from base to tip). Holistic's ``left_hand_landmarks`` is the
  person's left hand: its graph (holistic_landmark/hand_landmarks_left_and_right_cpu.pbtxt) crops
  the left hand around pose landmarks 15/17/19 (LEFT_WRIST/LEFT_PINKY/LEFT_INDEX), the right
  one around 16/18/20, so each hand lands at the pose wrist of its own side (mediapipe's own
  holistic test expects the left hand on the image's right for a person facing the camera).
  Confidence ``PART_CONFIDENCE`` when the hand was found.

mediapipe's native code prints a dozen harmless lines when a graph starts (TFLite, absl), some from
worker threads after the constructor returned: a detector's whole life (creation to ``close()``)
runs inside :func:`newsmotion_engine.nativelog.filter_native_stderr`, which drops exactly those
lines and writes back anything else printed to stderr meanwhile when the detector closes.

A part that was not detected has confidence 0 and coordinates 0. Coordinates are not clipped: a
body point mediapipe places just outside the frame keeps its (out-of-range) position and, as a rule,
a low visibility.
"""

from __future__ import annotations

import contextlib
from types import TracebackType

import numpy as np

from newsmotion_engine.nativelog import filter_native_stderr
from newsmotion_engine.skeleton import (
    FACE_START,
    LEFT_HAND_START,
    NUM_KEYPOINTS,
    RIGHT_HAND_START,
)

__all__ = [
    "HolisticDetector",
    "detect_image",
    "results_to_keypoints",
    "mediapipe_version",
    "MEDIAPIPE_MODEL_COMPLEXITY",
    "PART_CONFIDENCE",
    "SMALL_TOE_CONFIDENCE_SCALE",
    "FACE68_FROM_MESH",
]

# The only pose model complexity whose weights ship in the mediapipe 0.10.21 wheel.
MEDIAPIPE_MODEL_COMPLEXITY = 1

# Face mesh and hand landmarks carry no per-point score; a detected part gets this fixed value.
PART_CONFIDENCE = 0.9

# The derived small toe's confidence is this times the weaker of big-toe and heel visibility.
SMALL_TOE_CONFIDENCE_SCALE = 0.5

# mediapipe pose index for each COCO body keypoint (skeleton.BODY_NAMES order).
_POSE_FOR_BODY = (
    0,  # nose
    2, 5,  # left_eye, right_eye (pose's eye centres, not the inner/outer corners)
    7, 8,  # ears
    11, 12,  # shoulders
    13, 14,  # elbows
    15, 16,  # wrists
    23, 24,  # hips
    25, 26,  # knees
    27, 28,  # ankles
)
# Pose indices used for the feet.
_POSE_LEFT_ANKLE, _POSE_RIGHT_ANKLE = 27, 28
_POSE_LEFT_HEEL, _POSE_RIGHT_HEEL = 29, 30
_POSE_LEFT_FOOT_INDEX, _POSE_RIGHT_FOOT_INDEX = 31, 32

# iBUG-68 point i (skeleton.FACE68 layout) <- face mesh vertex FACE68_FROM_MESH[i].
#
# How it was built: each iBUG contour was matched to the corresponding closed contour of the mesh
# (mediapipe's FACEMESH_FACE_OVAL, *_EYE, *_EYEBROW, LIPS and NOSE edge sets), walked in iBUG
# order, and the vertices nearest to iBUG's roughly even spacing along the contour were taken
# (arc-length fractions measured on a frontal face: skimage's astronaut). The table is then made
# mirror-symmetric with the mesh's own left/right vertex pairs (e.g. 33<->263, 61<->291), so a
# frontal face gives a symmetric 68-point face. Mesh orientation: low-numbered vertices such as 33
# (right eye outer corner) and 234 are on the person's right, i.e. the image's left.
FACE68_FROM_MESH: tuple[int, ...] = (
    # jaw 0-16: person's right ear (eye height, 127) down the face oval to the chin (152) and up
    # to the left ear (356); 127/356 sit at eye height as iBUG 1/17 do.
    127, 234, 93, 58, 172, 136, 149, 148, 152, 377, 378, 365, 397, 288, 323, 454, 356,
    # right brow 17-21 (outer -> inner), upper brow edge
    70, 63, 105, 66, 107,
    # left brow 22-26 (inner -> outer)
    336, 296, 334, 293, 300,
    # nose bridge 27-30: between the eyes (168) down the ridge to just above the tip (4)
    168, 197, 5, 4,
    # lower nose 31-35: right alar base, right nostril, subnasale (2), left nostril, left alar base
    98, 97, 2, 326, 327,
    # right eye 36-41: outer corner, upper lid x2, inner corner, lower lid x2
    33, 160, 158, 133, 153, 144,
    # left eye 42-47: inner corner, upper lid x2, outer corner, lower lid x2
    362, 385, 387, 263, 373, 380,
    # outer lip 48-59: right corner, upper lip to the left corner (291), lower lip back
    61, 39, 37, 0, 267, 269, 291, 321, 405, 17, 181, 91,
    # inner lip 60-67: right inner corner, upper inner, left inner corner (308), lower inner
    78, 81, 13, 311, 308, 402, 14, 178,
)
assert len(FACE68_FROM_MESH) == 68 and len(set(FACE68_FROM_MESH)) == 68


def mediapipe_version() -> str:
    """The installed mediapipe version (part of the extractor's cache key)."""
    from importlib.metadata import version

    return version("mediapipe")


def _landmarks_xy(landmark_list) -> np.ndarray:
    return np.array([(lm.x, lm.y) for lm in landmark_list.landmark], dtype=np.float32)


def _pose_confidence(landmark_list) -> np.ndarray:
    conf = []
    for lm in landmark_list.landmark:
        c = lm.visibility
        if lm.HasField("presence"):
            c *= lm.presence
        conf.append(c)
    return np.clip(np.array(conf, dtype=np.float32), 0.0, 1.0)


def _small_toe(
    toe: np.ndarray, heel: np.ndarray, ankle_self: np.ndarray, ankle_other: np.ndarray
) -> np.ndarray:
    """Estimate the small toe from big toe, heel and the two ankles (see the module docstring)."""
    foot = toe - heel
    length = float(np.linalg.norm(foot))
    if length < 1e-6:
        return toe.copy()
    u = foot / length
    side = ankle_self - ankle_other  # points to the outside of this foot
    lateral = side - float(side @ u) * u  # its part across the foot
    n = float(np.linalg.norm(lateral))
    lateral = lateral / n if n > 1e-6 else np.zeros(2, dtype=np.float32)
    return toe - 0.2 * foot + 0.3 * length * lateral


def results_to_keypoints(results) -> np.ndarray:
    """Map one mediapipe Holistic result (``Holistic.process`` output) to float32 ``[133, 3]``.

    Parts mediapipe did not return stay zero (confidence 0). No pose means no person: all zero.
    """
    kp = np.zeros((NUM_KEYPOINTS, 3), dtype=np.float32)
    pose = results.pose_landmarks
    if pose is not None:
        xy = _landmarks_xy(pose)
        conf = _pose_confidence(pose)
        idx = list(_POSE_FOR_BODY)
        kp[0:17, :2] = xy[idx]
        kp[0:17, 2] = conf[idx]

        for base, toe_i, heel_i, ank_self, ank_other in (
            (17, _POSE_LEFT_FOOT_INDEX, _POSE_LEFT_HEEL, _POSE_LEFT_ANKLE, _POSE_RIGHT_ANKLE),
            (20, _POSE_RIGHT_FOOT_INDEX, _POSE_RIGHT_HEEL, _POSE_RIGHT_ANKLE, _POSE_LEFT_ANKLE),
        ):
            kp[base + 0, :2] = xy[toe_i]
            kp[base + 0, 2] = conf[toe_i]
            kp[base + 1, :2] = _small_toe(xy[toe_i], xy[heel_i], xy[ank_self], xy[ank_other])
            kp[base + 1, 2] = SMALL_TOE_CONFIDENCE_SCALE * min(conf[toe_i], conf[heel_i])
            kp[base + 2, :2] = xy[heel_i]
            kp[base + 2, 2] = conf[heel_i]

    face = results.face_landmarks
    if face is not None:
        mesh = _landmarks_xy(face)
        kp[FACE_START : FACE_START + 68, :2] = mesh[list(FACE68_FROM_MESH)]
        kp[FACE_START : FACE_START + 68, 2] = PART_CONFIDENCE

    for start, hand in (
        (LEFT_HAND_START, results.left_hand_landmarks),
        (RIGHT_HAND_START, results.right_hand_landmarks),
    ):
        if hand is not None:
            kp[start : start + 21, :2] = _landmarks_xy(hand)
            kp[start : start + 21, 2] = PART_CONFIDENCE
    return kp


class HolisticDetector:
    """One mediapipe Holistic graph (model complexity 1, unrefined face), as a context manager.

    Args:
        static_image_mode: True for unrelated still images (detect every call); False for video
            frames in order (tracks between frames: faster and steadier).
        min_detection_confidence: person detection threshold (mediapipe's meaning).

    Example::

        with HolisticDetector() as det:
            for rgb in iter_frames("clip.mp4", fps=30):
                kp = det.detect(rgb)  # float32 [133, 3]

    mediapipe is imported on first construction, so the engine imports without it.
    """

    def __init__(self, static_image_mode: bool = False, min_detection_confidence: float = 0.5):
        self.static_image_mode = bool(static_image_mode)
        self.min_detection_confidence = float(min_detection_confidence)
        # The graph's worker threads log after the constructor returns: filter for its whole life.
        self._quiet = contextlib.ExitStack()
        self._quiet.enter_context(filter_native_stderr())
        try:
            import mediapipe as mp  # lazy: the GPU machine's engine runs without mediapipe

            self._holistic = mp.solutions.holistic.Holistic(
                static_image_mode=self.static_image_mode,
                model_complexity=MEDIAPIPE_MODEL_COMPLEXITY,
                smooth_landmarks=True,
                enable_segmentation=False,
                refine_face_landmarks=False,
                min_detection_confidence=self.min_detection_confidence,
                min_tracking_confidence=0.5,
            )
        except BaseException:
            self._quiet.close()
            raise

    def detect(self, rgb: np.ndarray) -> np.ndarray:
        """Keypoints of the most prominent person in an RGB uint8 ``[H, W, 3]`` frame, as float32
        ``[133, 3]`` (all zero when no person is found)."""
        if self._holistic is None:
            raise RuntimeError("HolisticDetector is closed")
        rgb = np.asarray(rgb)
        if rgb.dtype != np.uint8 or rgb.ndim != 3 or rgb.shape[2] != 3:
            raise ValueError(f"expected an RGB uint8 [H, W, 3] image, got {rgb.dtype} {rgb.shape}")
        return results_to_keypoints(self._holistic.process(np.ascontiguousarray(rgb)))

    def close(self) -> None:
        """Release the mediapipe graph (idempotent)."""
        if self._holistic is not None:
            try:
                self._holistic.close()
            finally:
                self._holistic = None
                self._quiet.close()

    def __enter__(self) -> HolisticDetector:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def detect_image(rgb: np.ndarray) -> np.ndarray:
    """Keypoints of the person in one still RGB uint8 image: float32 ``[133, 3]``.

    Example::

        kp = detect_image(np.asarray(Image.open("anchor.png").convert("RGB")))
    """
    with HolisticDetector(static_image_mode=True) as det:
        return det.detect(rgb)
