"""Retargeting a loop onto persona proportions."""

from __future__ import annotations

import numpy as np
import pytest

from newsmotion_engine.errors import NewsmotionError
from newsmotion_engine.render import retarget
from newsmotion_engine.skeleton import BODY, RIGHT_HAND_START

LS, RS = BODY["left_shoulder"], BODY["right_shoulder"]
RE, RW = BODY["right_elbow"], BODY["right_wrist"]
LE, LW = BODY["left_elbow"], BODY["left_wrist"]


def px(kp: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    return kp[..., :2] * np.asarray(size, dtype=np.float64)


def length(kp_px: np.ndarray, a: int, b: int) -> np.ndarray:
    return np.linalg.norm(kp_px[..., a, :] - kp_px[..., b, :], axis=-1)


def test_rest_frame_reproduces_the_persona_exactly(synth):
    make_loop, make_pose = synth.make_loop, synth.make_pose
    loop = make_loop(12)
    persona = make_pose(360, 640, shoulder_half=0.2, upper_arm=0.22)
    out = retarget(loop.keypoints, persona, persona_size=(360, 640))
    assert out.shape == loop.keypoints.shape and out.dtype == np.float32
    ok = persona[:, 2] > 0.3
    np.testing.assert_allclose(out[0, ok, :2], persona[ok, :2], atol=1e-5)
    np.testing.assert_array_equal(out[..., 2], loop.keypoints[..., 2])


def test_longer_arms_give_longer_retargeted_arms_anchored_at_the_persona_neck(synth):
    make_loop, make_pose = synth.make_loop, synth.make_pose
    loop = make_loop(20, wave=1.0)
    size = (720, 1280)
    short = make_pose(*size, upper_arm=0.14, forearm=0.12)
    long = make_pose(*size, upper_arm=0.21, forearm=0.18)
    a = px(retarget(loop.keypoints, short, persona_size=size), size)
    b = px(retarget(loop.keypoints, long, persona_size=size), size)
    # Bone lengths are the persona's in every frame (up to the loop's foreshortening ratio,
    # which is 1 here: the loop only rotates the forearm).
    np.testing.assert_allclose(length(a, RS, RE), 0.14 * 720 * np.hypot(0.15, 0.99), rtol=1e-3)
    np.testing.assert_allclose(length(b, RS, RE), 0.21 * 720 * np.hypot(0.15, 0.99), rtol=1e-3)
    np.testing.assert_allclose(length(b, RE, RW) / length(a, RE, RW), 0.18 / 0.12, rtol=1e-3)
    # Shoulder width is the persona's; the neck stays where the persona's neck is (plus the
    # loop's neck sway scaled by the shoulder-width ratio).
    neck_a = (a[:, LS] + a[:, RS]) / 2
    persona_neck = (px(short, size)[LS] + px(short, size)[RS]) / 2
    loop_px = px(loop.keypoints, size)
    loop_neck = (loop_px[:, LS] + loop_px[:, RS]) / 2
    scale = 0.14 / 0.17  # persona / loop shoulder half-width
    np.testing.assert_allclose(neck_a, persona_neck + scale * (loop_neck - loop_neck[0]), atol=1e-3)
    # The gesture is performed: the right wrist moves (and by more on the long-armed persona).
    travel_a = np.linalg.norm(a[:, RW] - a[0, RW], axis=-1).max()
    travel_b = np.linalg.norm(b[:, RW] - b[0, RW], axis=-1).max()
    assert travel_a > 30 and travel_b > travel_a * 1.3


def test_rotations_are_applied_relative_to_the_loops_rest(synth):
    """The loop turns the right forearm by up to 1.0 rad; the persona's forearm turns by the same
    angle from *its own* rest direction, even though the rest directions differ."""
    make_loop, make_pose = synth.make_loop, synth.make_pose
    loop = make_loop(21, wave=1.0, nod=0.0, sway=0.0)
    size = (720, 1280)
    persona = make_pose(*size)
    # Tilt the persona's right forearm at rest: a different rest direction than the loop's.
    p = px(persona, size)
    v = p[RW] - p[RE]
    c, s = np.cos(0.3), np.sin(0.3)
    tilted = persona.copy()
    tilted[RW, :2] = (p[RE] + [c * v[0] - s * v[1], s * v[0] + c * v[1]]) / size
    out = px(retarget(loop.keypoints, tilted, persona_size=size), size)
    lp = px(loop.keypoints, size)

    def angle(x, a, b):
        d = x[..., b, :] - x[..., a, :]
        return np.arctan2(d[..., 1], d[..., 0])

    loop_turn = angle(lp, RE, RW) - angle(lp[0], RE, RW)
    persona_turn = angle(out, RE, RW) - angle(out[0], RE, RW)
    np.testing.assert_allclose(persona_turn, loop_turn, atol=1e-6)
    assert np.abs(loop_turn).max() > 0.9


def test_canvas_aspect_is_respected(synth):
    """The same body on a square canvas and on a 9:16 canvas retargets to the same pixels."""
    make_loop, make_pose = synth.make_loop, synth.make_pose
    loop = make_loop(10)
    tall, square = (720, 1280), (1280, 1280)
    pose_tall = make_pose(*tall)
    # The same pixel body, placed in the middle of a 1280x1280 canvas.
    pose_sq = pose_tall.copy()
    pose_sq[:, 0] = (pose_tall[:, 0] * 720 + 280) / 1280
    out_tall = px(retarget(loop.keypoints, pose_tall, persona_size=tall), tall)
    out_sq = px(retarget(loop.keypoints, pose_sq, persona_size=square), square)
    np.testing.assert_allclose(out_sq - [280, 0], out_tall, atol=1e-2)


def test_missing_parts_fall_back_to_loop_proportions_scaled_by_shoulder_width(synth):
    make_loop, make_pose = synth.make_loop, synth.make_pose
    size = (720, 1280)
    loop = make_loop(16, wave=0.8)
    persona = make_pose(*size, shoulder_half=0.2)
    # The portrait ends above the elbows: arms and hands not visible.
    persona[[LE, LW, RE, RW], 2] = 0.0
    persona[91:, 2] = 0.0
    out = retarget(loop.keypoints, persona, persona_size=size)
    o, lp = px(out, size), px(loop.keypoints, size)
    scale = 0.2 / 0.17
    np.testing.assert_allclose(length(o, RE, RW), scale * length(lp, RE, RW), rtol=1e-4)
    np.testing.assert_allclose(length(o, RS, RE), scale * length(lp, RS, RE), rtol=1e-4)
    # The missing hand follows the retargeted wrist at the loop's proportions.
    np.testing.assert_allclose(
        o[:, RIGHT_HAND_START + 8] - o[:, RW], scale * (lp[:, RIGHT_HAND_START + 8] - lp[:, RW]), atol=1e-3
    )
    assert np.isfinite(out).all()
    # Confidence is the loop's: present parts stay present, legs stay absent.
    assert (out[:, RW, 2] == 1).all() and (out[:, BODY["left_knee"], 2] == 0).all()


def test_no_shoulders_is_a_clear_error(synth):
    make_loop, make_pose = synth.make_loop, synth.make_pose
    loop = make_loop(4)
    persona = make_pose(720, 1280)
    persona[LS, 2] = 0
    with pytest.raises(NewsmotionError, match="shoulders"):
        retarget(loop.keypoints, persona)
    bad_loop = loop.keypoints.copy()
    bad_loop[:, RS, 2] = 0
    with pytest.raises(NewsmotionError, match="shoulders"):
        retarget(bad_loop, make_pose(720, 1280))
    with pytest.raises(NewsmotionError, match="shape"):
        retarget(loop.keypoints[:, :100], make_pose(720, 1280))


def test_rest_mean_and_index(synth):
    make_loop, make_pose = synth.make_loop, synth.make_pose
    loop = make_loop(10)
    persona = make_pose(720, 1280)
    out_mean = retarget(loop.keypoints, persona, rest="mean")
    out_idx = retarget(loop.keypoints, persona, rest=5)
    ok = persona[:, 2] > 0.3
    np.testing.assert_allclose(out_idx[5, ok, :2], persona[ok, :2], atol=1e-5)
    assert not np.allclose(out_mean[0, ok, :2], persona[ok, :2], atol=1e-4)
    with pytest.raises(NewsmotionError):
        retarget(loop.keypoints, persona, rest="median")
