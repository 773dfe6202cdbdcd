"""mediapipe Holistic -> 133 keypoints, on a real photo (skimage's astronaut, a frontal waist-up
portrait). Checks are geometric: sides, ordering, containment, mirror consistency."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from skimage import data

from newsmotion_engine.guidance.holistic import (
    FACE68_FROM_MESH,
    MEDIAPIPE_MODEL_COMPLEXITY,
    PART_CONFIDENCE,
    HolisticDetector,
    detect_image,
    mediapipe_version,
    results_to_keypoints,
)
from newsmotion_engine.skeleton import BODY, FACE68, FACE_START, FEET, PARTS

pytest.importorskip("mediapipe")


def _face(kp: np.ndarray, part: str) -> np.ndarray:
    sl = FACE68[part]
    return kp[FACE_START + sl.start : FACE_START + sl.stop]


# iBUG-68 mirror pairs: the point a horizontally flipped face puts at each index.
def _ibug_mirror() -> list[int]:
    m = list(range(68))
    pairs = [(i, 16 - i) for i in range(8)]
    pairs += [(17 + i, 26 - i) for i in range(5)]
    pairs += [(31, 35), (32, 34), (36, 45), (37, 44), (38, 43), (39, 42), (40, 47), (41, 46)]
    pairs += [(48, 54), (49, 53), (50, 52), (55, 59), (56, 58), (60, 64), (61, 63), (65, 67)]
    for a, b in pairs:
        m[a], m[b] = b, a
    return m


@pytest.fixture(scope="module")
def astronaut() -> np.ndarray:
    return data.astronaut()


@pytest.fixture(scope="module")
def kp(astronaut) -> np.ndarray:
    out = detect_image(astronaut)
    assert out.shape == (133, 3) and out.dtype == np.float32
    return out


def test_constants():
    assert MEDIAPIPE_MODEL_COMPLEXITY == 1
    assert mediapipe_version() == "0.10.21"
    assert len(FACE68_FROM_MESH) == 68 and len(set(FACE68_FROM_MESH)) == 68
    assert all(0 <= i < 468 for i in FACE68_FROM_MESH)


def test_body_found_with_high_confidence(kp):
    for name in ("nose", "left_eye", "right_eye", "left_shoulder", "right_shoulder"):
        assert kp[BODY[name], 2] > 0.9, name
    assert np.all(kp[:, 2] >= 0) and np.all(kp[:, 2] <= 1)


def test_person_left_is_image_right(kp):
    # A person facing the camera has their left side on the image's right.
    assert kp[BODY["left_shoulder"], 0] > kp[BODY["right_shoulder"], 0] + 0.2
    assert kp[BODY["left_eye"], 0] > kp[BODY["right_eye"], 0]
    assert kp[BODY["left_ear"], 0] > kp[BODY["right_ear"], 0]
    assert _face(kp, "left_eye")[:, 0].mean() > _face(kp, "right_eye")[:, 0].mean()


def test_nose_between_eyes_and_above_shoulders(kp):
    nose = kp[BODY["nose"]]
    assert kp[BODY["right_eye"], 0] < nose[0] < kp[BODY["left_eye"], 0]
    assert nose[1] > max(kp[BODY["left_eye"], 1], kp[BODY["right_eye"], 1])
    assert nose[1] < min(kp[BODY["left_shoulder"], 1], kp[BODY["right_shoulder"], 1])


def test_face_points_inside_face_box(kp):
    face = kp[PARTS["face"]]
    assert np.all(face[:, 2] == pytest.approx(PART_CONFIDENCE))
    nose = kp[BODY["nose"], :2]
    eye_dist = np.linalg.norm(kp[BODY["left_eye"], :2] - kp[BODY["right_eye"], :2])
    # The whole face lies within a few pose eye distances of the nose, and not all in one spot.
    assert np.all(np.abs(face[:, :2] - nose).max(axis=1) < 3.0 * eye_dist)
    width = face[:, 0].max() - face[:, 0].min()
    height = face[:, 1].max() - face[:, 1].min()
    assert 1.5 * eye_dist < width < 4 * eye_dist and 1.5 * eye_dist < height < 4 * eye_dist


def test_jaw_runs_right_ear_to_chin_to_left_ear(kp):
    jaw = _face(kp, "jaw")
    # Left to right across the image (person's right ear first; near the ears the contour runs
    # almost vertically, hence the small tolerance), down to the chin, back up.
    assert np.all(np.diff(jaw[:, 0]) > -0.003)
    assert jaw[0, 0] < jaw[4, 0] < jaw[8, 0] < jaw[12, 0] < jaw[16, 0]
    assert np.all(np.diff(jaw[:9, 1]) > 0) and np.all(np.diff(jaw[8:, 1]) < 0)
    # Chin is the lowest face point; jaw ends are level with the eyes (within an eye height).
    face = kp[PARTS["face"]]
    assert jaw[8, 1] == pytest.approx(face[:, 1].max())
    eyes_y = np.r_[_face(kp, "right_eye")[:, 1], _face(kp, "left_eye")[:, 1]].mean()
    eye_dist = np.linalg.norm(kp[BODY["left_eye"], :2] - kp[BODY["right_eye"], :2])
    assert abs(jaw[0, 1] - eyes_y) < 0.5 * eye_dist and abs(jaw[16, 1] - eyes_y) < 0.5 * eye_dist


def test_face_parts_in_anatomical_order(kp):
    for side in ("right", "left"):
        eye, brow = _face(kp, f"{side}_eye"), _face(kp, f"{side}_brow")
        assert eye[:, 1].min() > brow[:, 1].mean()  # eyes below brows
        assert brow[:, 0].min() < eye[:, 0].mean() < brow[:, 0].max()  # and under them
    bridge, lower = _face(kp, "nose_bridge"), _face(kp, "nose_lower")
    assert np.all(np.diff(bridge[:, 1]) > 0)  # bridge runs down
    assert np.all(np.diff(lower[:, 0]) > 0)  # lower nose runs right-to-left of the person
    lips = _face(kp, "outer_lip")
    assert lips[:, 1].min() > bridge[:, 1].max()  # mouth below the nose ridge
    assert lips[0, 0] < lips[3, 0] < lips[6, 0]  # right corner, top centre, left corner
    assert lips[9, 1] > lips[3, 1]  # bottom centre below top centre
    inner = _face(kp, "inner_lip")
    assert lips[0, 0] <= inner[0, 0] and inner[4, 0] <= lips[6, 0]
    # Eye outer corners outside inner corners.
    r, l = _face(kp, "right_eye"), _face(kp, "left_eye")
    assert r[0, 0] < r[3, 0] < l[0, 0] < l[3, 0]


def test_face_mesh_agrees_with_pose(kp):
    # Two independent models: pose eyes/nose vs the face mesh points we map.
    eye_dist = np.linalg.norm(kp[BODY["left_eye"], :2] - kp[BODY["right_eye"], :2])
    for side in ("right", "left"):
        centre = _face(kp, f"{side}_eye")[:, :2].mean(axis=0)
        assert np.linalg.norm(centre - kp[BODY[f"{side}_eye"], :2]) < 0.5 * eye_dist
    tip = _face(kp, "nose_bridge")[3, :2]
    assert np.linalg.norm(tip - kp[BODY["nose"], :2]) < 0.4 * eye_dist


def test_mirror_image_swaps_sides(astronaut, kp):
    flipped = detect_image(np.ascontiguousarray(astronaut[:, ::-1]))
    # Person-based labels: after a flip, the left shoulder is where the right one was (mirrored).
    for a, b in (("left_shoulder", "right_shoulder"), ("left_eye", "right_eye"), ("nose", "nose")):
        want = np.array([1 - kp[BODY[b], 0], kp[BODY[b], 1]])
        assert np.linalg.norm(flipped[BODY[a], :2] - want) < 0.03, a
    # The 68-point table is mirror-consistent: iBUG point i of the flipped face sits where the
    # mirror point of the original face is.
    face, face_f = kp[PARTS["face"]], flipped[PARTS["face"]]
    mirror = _ibug_mirror()
    want = np.stack([1 - face[mirror, 0], face[mirror, 1]], axis=1)
    err = np.linalg.norm(face_f[:, :2] - want, axis=1)
    assert err.max() < 0.015, (err.argmax(), err.max())


def test_missing_hands_are_zero(kp):
    # The astronaut's hands are out of frame / hidden: both hand parts absent.
    for part in ("left_hand", "right_hand"):
        assert np.all(kp[PARTS[part]] == 0)


def test_feet_are_derived_with_lower_confidence(kp):
    for side in ("left", "right"):
        big, small = kp[FEET[f"{side}_big_toe"]], kp[FEET[f"{side}_small_toe"]]
        heel = kp[FEET[f"{side}_heel"]]
        assert small[2] <= 0.5 * min(big[2], heel[2]) + 1e-6


def test_no_person_gives_all_zero():
    flat = np.full((256, 256, 3), 128, np.uint8)
    assert np.all(detect_image(flat) == 0)


def test_detector_rejects_wrong_images_and_closes():
    with HolisticDetector(static_image_mode=True) as det:
        with pytest.raises(ValueError, match="RGB uint8"):
            det.detect(np.zeros((32, 32), np.uint8))
        with pytest.raises(ValueError, match="RGB uint8"):
            det.detect(np.zeros((32, 32, 3), np.float32))
    with pytest.raises(RuntimeError, match="closed"):
        det.detect(np.zeros((32, 32, 3), np.uint8))


def _landmarks(points, visibility=None):
    from mediapipe.framework.formats import landmark_pb2

    lst = landmark_pb2.NormalizedLandmarkList()
    for i, (x, y) in enumerate(points):
        lm = lst.landmark.add(x=float(x), y=float(y), z=0.0)
        if visibility is not None:
            lm.visibility = float(visibility[i])
    return lst


def test_hand_and_body_mapping_from_results():
    # Synthetic results: each pose landmark at a distinct position, hands at their pose wrists
    # (mediapipe crops holistic's left hand around pose LEFT_WRIST=15, right around 16).
    rng = np.random.default_rng(0)
    pose_xy = rng.uniform(0.1, 0.9, size=(33, 2))
    vis = rng.uniform(0.2, 1.0, size=33)
    left_hand = pose_xy[15] + rng.normal(0, 0.01, size=(21, 2))
    left_hand[0] = pose_xy[15]
    right_hand = pose_xy[16] + rng.normal(0, 0.01, size=(21, 2))
    right_hand[0] = pose_xy[16]
    res = SimpleNamespace(
        pose_landmarks=_landmarks(pose_xy, vis),
        face_landmarks=None,
        left_hand_landmarks=_landmarks(left_hand),
        right_hand_landmarks=_landmarks(right_hand),
    )
    kp = results_to_keypoints(res)
    # Hands: order kept, person's left hand -> 91.., and its wrist is the pose left wrist.
    np.testing.assert_allclose(kp[PARTS["left_hand"], :2], left_hand, atol=1e-6)
    np.testing.assert_allclose(kp[PARTS["right_hand"], :2], right_hand, atol=1e-6)
    np.testing.assert_allclose(kp[91, :2], kp[BODY["left_wrist"], :2], atol=1e-6)
    np.testing.assert_allclose(kp[112, :2], kp[BODY["right_wrist"], :2], atol=1e-6)
    assert np.all(kp[PARTS["left_hand"], 2] == np.float32(PART_CONFIDENCE))
    # Body: COCO names <- mediapipe pose indices, confidence = visibility.
    mp_index = {"nose": 0, "left_eye": 2, "right_eye": 5, "left_shoulder": 11, "right_hip": 24,
                "left_ankle": 27, "right_ankle": 28}
    for name, i in mp_index.items():
        np.testing.assert_allclose(kp[BODY[name]], [*pose_xy[i], vis[i]], atol=1e-6)
    np.testing.assert_allclose(kp[FEET["left_big_toe"], :2], pose_xy[31], atol=1e-6)
    np.testing.assert_allclose(kp[FEET["right_heel"], :2], pose_xy[30], atol=1e-6)
    # Face absent -> zero.
    assert np.all(kp[PARTS["face"]] == 0)


def test_small_toe_is_outside_the_big_toe():
    # Frontal standing pose: ankles apart, feet pointing at the camera (toe just below heel).
    pose_xy = np.full((33, 2), 0.5)
    pose_xy[27], pose_xy[28] = (0.60, 0.80), (0.40, 0.80)  # left ankle on the image right
    pose_xy[29], pose_xy[30] = (0.60, 0.83), (0.40, 0.83)  # heels
    pose_xy[31], pose_xy[32] = (0.61, 0.88), (0.39, 0.88)  # foot index
    res = SimpleNamespace(pose_landmarks=_landmarks(pose_xy, np.ones(33)), face_landmarks=None,
                          left_hand_landmarks=None, right_hand_landmarks=None)
    kp = results_to_keypoints(res)
    assert kp[FEET["left_small_toe"], 0] > kp[FEET["left_big_toe"], 0]
    assert kp[FEET["right_small_toe"], 0] < kp[FEET["right_big_toe"], 0]
    assert kp[FEET["left_small_toe"], 2] == pytest.approx(0.5)
