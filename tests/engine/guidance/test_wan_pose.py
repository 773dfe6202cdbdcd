"""Wan-Animate's pose style (guidance/wan_pose.py) against pixels worked out by hand from the
official drawing rules: limb widths, 1-px hands, no face, the 0.5 threshold, black background."""

from __future__ import annotations

import numpy as np
import pytest

from newsmotion_engine.guidance.draw import draw_pose
from newsmotion_engine.guidance.wan_pose import draw_wan_pose, draw_wan_pose_video, wan_body_points, wan_pose_style, wan_stroke_sizes
from newsmotion_engine.skeleton import BODY, FACE_START, FEET, LEFT_HAND_START, NUM_KEYPOINTS

BLACK = (0, 0, 0)


def _kp(points: dict[int, tuple[float, float, float]], size: int) -> np.ndarray:
    """Keypoints from pixel positions on a ``size`` x ``size`` canvas (index -> (x, y, conf))."""
    kp = np.zeros((NUM_KEYPOINTS, 3))
    for i, (x, y, c) in points.items():
        kp[i] = (x / size, y / size, c)
    return kp


def test_tiny_canvas_pixels_by_hand():
    # 40 x 40: int(40 / 200) = 0, so the limb half-width and the hand width are both 1.
    n = 40
    points = {
        BODY["right_shoulder"]: (10.5, 10.5, 1.0),  # neck = mid-shoulders = (15.5, 10.5)
        BODY["left_shoulder"]: (20.5, 10.5, 1.0),
        BODY["right_knee"]: (35.5, 35.5, 0.4),  # below the threshold: not drawn
        BODY["left_knee"]: (30.5, 30.5, 0.6),  # drawn (no limb: its hip and ankle are absent)
        LEFT_HAND_START + 0: (5.5, 20.5, 1.0),  # wrist
        LEFT_HAND_START + 1: (15.5, 20.5, 1.0),  # thumb_cmc: bone 0 (wrist -> thumb), hue 0
        LEFT_HAND_START + 5: (5.5, 30.5, 1.0),  # index_mcp: bone 4 (wrist -> index), hue 0.2
    }
    for i in range(68):  # the whole face, confident, on one spot: never drawn
        points[FACE_START + i] = (30.5, 10.5, 1.0)
    img = draw_wan_pose(_kp(points, n), n, n)
    assert img.shape == (n, n, 3) and img.dtype == np.uint8
    px = lambda x, y: tuple(int(v) for v in img[y, x])  # noqa: E731

    # Limb neck -> right shoulder: centre int(13.0) = 13, an ellipse of half-width 1 in
    # (255, 0, 0) x 0.6, opaque: 3 px thick at its middle column.
    assert [px(13, y) for y in (8, 9, 10, 11, 12)] == [BLACK, (153, 0, 0), (153, 0, 0), (153, 0, 0), BLACK]
    # Limb neck -> left shoulder: centre 18, (255, 85, 0) x 0.6.
    assert [px(18, y) for y in (8, 9, 10, 11, 12)] == [BLACK, (153, 51, 0), (153, 51, 0), (153, 51, 0), BLACK]
    # Joints on top, full colour, radius 1 (a plus): neck (255, 85, 0), right shoulder
    # (255, 170, 0), left shoulder (85, 255, 0).
    assert px(15, 10) == px(15, 9) == px(15, 11) == px(14, 10) == px(16, 10) == (255, 85, 0)
    assert px(10, 10) == (255, 170, 0) and px(20, 10) == (85, 255, 0)
    assert px(9, 9) == BLACK  # the plus has no corners
    # Threshold 0.5: the 0.4 knee is absent, the 0.6 knee is drawn in its colour (0, 0, 255).
    assert px(35, 35) == BLACK and px(30, 30) == (0, 0, 255)
    # Hand bones are 1-px lines: bone 0 red along row 20, bone 4 (204, 255, 0) down column 5.
    assert [px(10, y) for y in (19, 20, 21)] == [BLACK, (255, 0, 0), BLACK]
    assert [px(x, 25) for x in (4, 5, 6)] == [BLACK, (204, 255, 0), BLACK]
    # Hand dots: blue, radius 1.
    assert px(15, 20) == px(16, 20) == px(15, 21) == (0, 0, 255)
    assert px(17, 20) == BLACK
    # No face: the spot where 68 confident landmarks sit stays black.
    assert px(30, 10) == BLACK
    # Black everywhere else: clear what was drawn, nothing may remain.
    rest = img.copy()
    rest[8:13, 8:23] = 0  # shoulders, neck, limbs
    rest[18:23, 3:18] = 0  # bone 0 and its dots
    rest[18:33, 3:8] = 0  # bone 4 and its dot
    rest[29:32, 29:32] = 0  # the knee
    assert not rest.any()


def test_stroke_sizes_follow_the_official_rule():
    # limb half-width max(int(min / 200) - 1, 1); hand width max(that // 2, 1).
    assert wan_stroke_sizes(64, 64) == {"limb_half_width": 1, "hand_width": 1}
    assert wan_stroke_sizes(720, 1280) == {"limb_half_width": 2, "hand_width": 1}
    assert wan_stroke_sizes(1280, 720) == {"limb_half_width": 2, "hand_width": 1}
    assert wan_stroke_sizes(1080, 1920) == {"limb_half_width": 4, "hand_width": 2}


def test_720x1280_limb_is_5_px_and_hand_line_1_px():
    n_w, n_h = 720, 1280
    kp = np.zeros((NUM_KEYPOINTS, 3))
    kp[BODY["right_shoulder"]] = (200.5 / n_w, 400.5 / n_h, 1)
    kp[BODY["left_shoulder"]] = (500.5 / n_w, 400.5 / n_h, 1)
    kp[LEFT_HAND_START] = (100.5 / n_w, 900.5 / n_h, 1)
    kp[LEFT_HAND_START + 1] = (300.5 / n_w, 900.5 / n_h, 1)
    img = draw_wan_pose(kp, n_w, n_h)
    limb_column = img[:, 275].any(axis=-1)  # between the right shoulder and the neck, and the hand bone
    assert np.flatnonzero(limb_column).tolist() == [398, 399, 400, 401, 402, 900]


def test_confidences_are_averaged_for_the_neck_and_toes():
    n = 64
    kp = _kp({BODY["right_shoulder"]: (20.5, 20.5, 0.4), BODY["left_shoulder"]: (40.5, 20.5, 0.6),
              FEET["left_big_toe"]: (10.5, 50.5, 0.8), FEET["left_small_toe"]: (20.5, 50.5, 0.8)}, n)  # fmt: skip
    body = wan_body_points(kp)
    assert body.shape == (20, 3)
    np.testing.assert_allclose(body[1], [30.5 / n, 20.5 / n, 0.5])  # neck: mean of the shoulders, conf 0.5
    np.testing.assert_allclose(body[18], [15.5 / n, 50.5 / n, 0.8])  # left toe: mean of big and small toe
    img = draw_wan_pose(kp, n, n)
    assert tuple(img[20, 30]) == (255, 85, 0)  # neck at conf 0.5 (>= 0.5): drawn
    assert tuple(img[20, 20]) == BLACK  # the 0.4 shoulder and its limb: not drawn
    assert tuple(img[20, 35]) == (153, 51, 0)  # neck -> left shoulder limb: drawn
    assert tuple(img[50, 15]) == (200, 200, 0)  # the toe point takes the 19th colour


def test_realistic_frame_is_sparser_than_the_display_drawing_and_has_no_face_dots():
    from newsmotion_engine.guidance.choreography import author_loop

    kp = author_loop("welcome")[0]
    wan = draw_wan_pose(kp, 720, 1280)
    display = draw_pose(kp, 720, 1280)
    assert (display == 255).all(axis=-1).any()  # the display drawing has white face dots ...
    assert not (wan == 255).all(axis=-1).any()  # ... Wan's style has none
    lit_wan, lit_display = wan.any(axis=-1).mean(), display.any(axis=-1).mean()
    assert 0 < lit_wan < 0.5 * lit_display


def test_box_places_the_unit_square_and_video_matches_frames():
    kp = np.zeros((2, NUM_KEYPOINTS, 3))
    kp[:, BODY["left_knee"]] = (0.5, 0.5, 1.0)
    video = draw_wan_pose_video(kp, 100, 60, box=(20, 10, 40, 40))
    assert video.shape == (2, 60, 100, 3)
    assert tuple(video[0, 30, 40]) == (0, 0, 255)  # (20 + 0.5 * 40, 10 + 0.5 * 40)
    assert np.array_equal(video[1], draw_wan_pose(kp[1], 100, 60, box=(20, 10, 40, 40)))
    nan = kp[0].copy()
    nan[BODY["left_knee"], 0] = np.nan
    assert not draw_wan_pose(nan, 100, 60).any()  # a non-finite point is absent


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match=r"133, 3\]; got shape \(17, 3\)"):
        draw_wan_pose(np.zeros((17, 3)), 10, 10)
    with pytest.raises(ValueError, match="positive size"):
        draw_wan_pose(np.zeros((NUM_KEYPOINTS, 3)), 0, 10)
    with pytest.raises(ValueError, match="box"):
        draw_wan_pose(np.zeros((NUM_KEYPOINTS, 3)), 10, 10, box=(0, 0, 0, 5))
    with pytest.raises(ValueError, match=r"\[T, 133, 3\]"):
        draw_wan_pose_video(np.zeros((NUM_KEYPOINTS, 3)), 10, 10)


def test_style_data_describes_the_drawing():
    style = wan_pose_style()
    assert style["threshold"] == 0.5 and style["face"] is None and style["background"] == [0, 0, 0]
    assert len(style["body_from_coco"]) == 20 and style["body_from_coco"][1] == [6, 5]  # the neck
    assert len(style["limbs"]) == 19 and style["limb_colors"][0] == [153, 0, 0]
    assert style["hand_colors"][4] == [204.0, 255.0, 0.0] and style["hand_dot"] == [0, 0, 255]
