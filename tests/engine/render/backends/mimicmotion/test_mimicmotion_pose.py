"""MimicMotion's pose drawing against the official code's behaviour, pixel by pixel computed by hand
(``mimicmotion/dwpose/util.py``): a 2160-px canvas, BGR colours converted to RGB at the end, limb
colours scaled by the two scores then dimmed to 0.6, joints scaled by their score, the 0.3
threshold, the neck from the shoulders, hand bones and dots, grey face dots, no feet."""

from __future__ import annotations

import cv2
import numpy as np

from newsmotion_engine import skeleton as sk
from newsmotion_engine.render.backends.mimicmotion.pose import draw_mimicmotion_pose, dwpose_layout

S = 2160  # the official canvas' short side: no resize at this size


def _kp(**points):
    kp = np.zeros((sk.NUM_KEYPOINTS, 3), np.float32)
    for index, value in points.items():
        kp[int(index.lstrip("_"))] = value
    return kp


def _shoulders(r_conf=1.0, l_conf=1.0):
    return _kp(**{f"_{sk.BODY['right_shoulder']}": (0.4, 0.5, r_conf), f"_{sk.BODY['left_shoulder']}": (0.6, 0.5, l_conf)})


def test_limbs_are_bgr_colours_scaled_by_scores_and_dimmed():
    img = draw_mimicmotion_pose(_shoulders(), S, S)
    # Limb 0 (neck -> right shoulder): BGR (255, 0, 0) -> RGB (0, 0, 255), times 0.6 -> 153.
    assert tuple(img[1080, 972]) == (0, 0, 153)
    # Limb 1 (neck -> left shoulder): BGR (255, 85, 0) -> RGB (0, 51, 153).
    assert tuple(img[1080, 1188]) == (0, 51, 153)
    # Joints after the dimming, full colour: right shoulder BGR (255, 170, 0), left (85, 255, 0).
    assert tuple(img[1080, 864]) == (0, 170, 255) and tuple(img[1080, 1296]) == (0, 255, 85)
    assert tuple(img[500, 500]) == (0, 0, 0)


def test_confidence_scales_colours_and_the_threshold_drops_points():
    img = draw_mimicmotion_pose(_shoulders(r_conf=0.5), S, S)
    # Neck score 1 (both shoulders over 0.3); limb alpha 1 * 0.5: int(255 * 0.5) = 127, dimmed int(127 * 0.6) = 76.
    assert tuple(img[1080, 972]) == (0, 0, 76)
    assert tuple(img[1080, 864]) == (0, 85, 127)  # the joint: (255, 170, 0) * 0.5, not dimmed
    low = draw_mimicmotion_pose(_shoulders(r_conf=0.2), S, S)
    # Under 0.3: no right shoulder, so no neck (score 0) and no limb; the left shoulder's joint stays.
    assert tuple(low[1080, 864]) == (0, 0, 0) and tuple(low[1080, 972]) == (0, 0, 0) and tuple(low[1080, 1188]) == (0, 0, 0)
    assert tuple(low[1080, 1296]) == (0, 255, 85)
    layout = dwpose_layout(_shoulders(r_conf=0.2))
    assert layout.body_score[1] == 0.0 and layout.body_index[2] == -1 and layout.body_index[5] == 5


def test_hands_face_and_no_feet():
    w = sk.LEFT_HAND_START
    kp = _kp(**{f"_{w}": (0.3, 0.3, 1.0), f"_{w + 1}": (0.3, 0.4, 1.0), f"_{sk.FACE_START}": (0.7, 0.2, 1.0),
                f"_{sk.FACE_START + 1}": (0.7, 0.3, 0.5), f"_{sk.FEET['left_heel']}": (0.5, 0.9, 1.0)})  # fmt: skip
    img = draw_mimicmotion_pose(kp, S, S)
    assert tuple(img[648, 648]) == (255, 0, 0)  # hand dot: BGR (0, 0, 255) -> red
    assert tuple(img[756, 648]) == (0, 0, 255)  # bone 0: hue 0, (255, 0, 0) in the BGR canvas -> blue
    assert tuple(img[432, 1512]) == (255, 255, 255) and tuple(img[648, 1512]) == (127, 127, 127)  # face dots by score
    assert tuple(img[1944, 1080]) == (0, 0, 0)  # feet are not drawn
    # The other hand points sit at (0, 0) with score 0: not drawn (the official eps rule).
    assert int(img[:10, :10].sum()) == 0


def test_small_frames_are_the_2160_canvas_resized_and_boxes_place_the_pose():
    kp = _shoulders()
    kp[sk.BODY["nose"]] = (0.5, 0.3, 0.9)
    big = draw_mimicmotion_pose(kp, 2160, 3840)
    small = draw_mimicmotion_pose(kp, 576, 1024)
    assert np.array_equal(small, cv2.resize(big, (576, 1024)))
    # Keypoints normalized to a box: the point (0.5, 0.5) of box (100, 200, 1000, 1000) is pixel (600, 700).
    boxed = draw_mimicmotion_pose(_kp(**{f"_{sk.FACE_START}": (0.5, 0.5, 1.0)}), S, S, box=(100, 200, 1000, 1000))
    assert tuple(boxed[700, 600]) == (255, 255, 255) and boxed.sum() == boxed[690:711, 590:611].sum()
