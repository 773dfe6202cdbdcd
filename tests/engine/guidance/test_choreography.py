"""The choreography of the canonical loops: format, determinism, seamlessness, and that each loop
moves the parts it claims to move."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

from newsmotion_engine import skeleton as sk
from newsmotion_engine.errors import NewsmotionError
from newsmotion_engine.guidance import choreography
from newsmotion_engine.guidance.catalogue import LOOP_IDS
from newsmotion_engine.guidance.choreography import (
    DEFAULT_FPS,
    DEFAULT_SECONDS,
    PALETTE_VERSION,
    author_loop,
    authoring_params,
)
from newsmotion_engine.guidance.rig import FRAME_HEIGHT, FRAME_WIDTH

FRAME = np.array([FRAME_WIDTH, FRAME_HEIGHT], dtype=np.float64)
B = sk.BODY
CHIN = sk.FACE_START + 8  # iBUG jaw point 8 is the chin
LEFT_MOUTH, RIGHT_MOUTH = sk.FACE_START + 54, sk.FACE_START + 48


@pytest.fixture(scope="module")
def loops() -> dict[str, np.ndarray]:
    return {loop_id: author_loop(loop_id) for loop_id in LOOP_IDS}


def px(kp: np.ndarray) -> np.ndarray:
    """Keypoint x, y in pixels of the 720x1280 authoring frame."""
    return kp[..., :2].astype(np.float64) * FRAME


@pytest.mark.parametrize("loop_id", LOOP_IDS)
def test_shape_dtype_range_and_presence(loops, loop_id):
    kp = loops[loop_id]
    assert kp.shape == (120, sk.NUM_KEYPOINTS, 3) and kp.dtype == np.float32
    assert np.isfinite(kp).all()
    conf = kp[..., 2]
    assert ((conf >= 0) & (conf <= 1)).all()
    confident = conf > 0.3
    assert ((kp[..., :2] >= 0) & (kp[..., :2] <= 1))[confident].all()
    # Waist up: body through the hips, face and both hands present in every frame; legs/feet absent.
    present = np.r_[0:13, sk.PARTS["face"], sk.PARTS["left_hand"], sk.PARTS["right_hand"]]
    assert (conf[:, present] >= 0.9).all(), "a body, face or hand point left the frame"
    assert (conf[:, 13:23] == 0).all()
    hips_y = kp[:, [B["left_hip"], B["right_hip"]], 1]
    assert (hips_y > 0.85).all() and (hips_y < 1.0).all()
    # Anatomy stays sane: head above shoulders above hips, the person's left on the image right.
    assert (kp[:, B["nose"], 1] < kp[:, B["left_shoulder"], 1]).all()
    assert (kp[:, B["left_shoulder"], 1] < kp[:, B["left_hip"], 1]).all()
    assert (kp[:, B["left_shoulder"], 0] > kp[:, B["right_shoulder"], 0]).all()
    assert (kp[:, B["left_eye"], 0] > kp[:, B["right_eye"], 0]).all()


def test_defaults():
    assert DEFAULT_FPS == 30 and DEFAULT_SECONDS == 4.0 and PALETTE_VERSION


def test_deterministic():
    for loop_id in ("welcome", "signoff"):
        assert np.array_equal(author_loop(loop_id), author_loop(loop_id))


def step_sizes(kp: np.ndarray) -> tuple[np.ndarray, float]:
    """Mean point displacement (px) of every frame-to-frame step, and of the wrap step T-1 -> 0."""
    xy = px(kp[:, kp[0, :, 2] > 0])
    steps = np.linalg.norm(np.diff(xy, axis=0), axis=-1).mean(axis=-1)
    seam = float(np.linalg.norm(xy[0] - xy[-1], axis=-1).mean())
    return steps, seam


@pytest.mark.parametrize("loop_id", LOOP_IDS)
@pytest.mark.parametrize("fps,frames", [(30, None), (24, 37)])
def test_seamless(loop_id, fps, frames):
    kp = author_loop(loop_id, fps=fps, frames=frames)
    steps, seam = step_sizes(kp)
    assert seam <= 1.5 * np.percentile(steps, 95)
    # The wrap step also matches its neighbours (no velocity jump at the seam).
    assert seam <= 1.5 * max(steps[0], steps[-1]) + 0.5


def test_periodic_spline_wraps_smoothly():
    # Keys away from phase 0 with different values either side of the wrap: the curve must still
    # join with matching value and slope across phase 1 -> 0, and not overshoot its keys.
    times = np.array([0.1, 0.35, 0.6, 0.9])
    values = np.array([2.0, -1.0, 5.0, 0.5])
    eps = 1e-6
    phase = np.array([1 - 2 * eps, 1 - eps, 0.0, eps])
    v = choreography._periodic_pchip(times, values, np.where(phase >= 1, phase - 1, phase))
    assert abs(v[1] - v[2]) < 1e-4
    slope_before, slope_after = (v[1] - v[0]) / eps, (v[3] - v[2]) / eps
    assert slope_before == pytest.approx(slope_after, rel=1e-3, abs=1e-3)
    dense = choreography._periodic_pchip(times, values, np.linspace(0, 1, 2001, endpoint=False))
    assert dense.min() >= values.min() - 1e-9 and dense.max() <= values.max() + 1e-9
    np.testing.assert_allclose(choreography._periodic_pchip(times, values, times), values)


def test_every_loop_starts_in_the_rest_pose(loops):
    # Any loop can cut to any other at a loop boundary: frame 0 is the same everywhere.
    first = np.stack([kp[0] for kp in loops.values()])
    np.testing.assert_allclose(first, first[:1].repeat(len(first), axis=0), atol=1e-6)


@pytest.mark.parametrize("loop_id", LOOP_IDS)
def test_nothing_is_frozen(loops, loop_id):
    xy = px(loops[loop_id])
    travel = np.ptp(xy, axis=0).max(axis=-1)  # per point, largest x or y range
    assert (travel[: B["left_hip"]] > 1.0).all(), "a head/arm body point never moves"
    assert (travel[sk.PARTS["face"]] > 1.0).all()


def test_loops_differ(loops):
    for a, b in itertools.combinations(LOOP_IDS, 2):
        diff = np.linalg.norm(px(loops[a]) - px(loops[b]), axis=-1).mean()
        assert diff > 5.0, f"{a} and {b} are nearly the same motion"


def test_left_gesture_uses_the_persons_left_arm_toward_image_right(loops):
    xy = px(loops["left_gesture"])
    lw, rw = xy[:, B["left_wrist"]], xy[:, B["right_wrist"]]
    left_travel = np.ptp(lw, axis=0).max()
    right_travel = np.ptp(rw, axis=0).max()
    assert left_travel > 120 and left_travel > 10 * right_travel
    assert lw[:, 0].max() - lw[0, 0] > 150  # outward = +x in the image for the person's left
    assert xy[:, B["nose"], 0].max() - xy[0, B["nose"], 0] > 20  # head turns toward it


def test_right_gesture_is_the_mirror(loops):
    left = px(loops["left_gesture"])
    right = px(loops["right_gesture"])
    rw, lw = right[:, B["right_wrist"]], left[:, B["left_wrist"]]
    np.testing.assert_allclose(rw[:, 0], FRAME_WIDTH - lw[:, 0], atol=0.5)
    np.testing.assert_allclose(rw[:, 1], lw[:, 1], atol=0.5)
    assert right[:, B["nose"], 0].min() - right[0, B["nose"], 0] < -20


def test_nod_moves_the_nose_vertically(loops):
    nose = px(loops["nod"])[:, B["nose"]]
    assert np.ptp(nose[:, 1]) > 20
    assert np.ptp(nose[:, 1]) > 3 * np.ptp(nose[:, 0])
    # Repeated: the nose goes down and up at least three times.
    y = nose[:, 1] - nose[:, 1].mean()
    dips = np.count_nonzero((y[1:-1] > y[:-2]) & (y[1:-1] >= y[2:]) & (y[1:-1] > 5))
    assert dips >= 3
    wrists = px(loops["nod"])[:, [B["left_wrist"], B["right_wrist"]]]
    assert np.ptp(wrists, axis=0).max() < 15  # the arms stay put


def test_deep_thought_brings_a_wrist_to_the_chin_slowly(loops):
    xy = px(loops["deep_thought"])
    dist = np.linalg.norm(xy[:, B["right_wrist"]] - xy[:, CHIN], axis=-1)
    assert dist.min() < 120 and dist.min() < 0.35 * dist[0]
    hand = xy[:, sk.PARTS["right_hand"]]
    assert np.linalg.norm(hand - xy[:, CHIN, None], axis=-1).min() < 40  # knuckles at the chin
    held = dist < dist.min() + 10
    assert held.mean() > 0.3  # it holds the pose a while (slow)
    steps, _ = step_sizes(loops["deep_thought"])
    welcome_steps, _ = step_sizes(loops["welcome"])
    assert np.median(steps) < np.median(welcome_steps)


def test_breaking_alert_raises_an_index_finger_and_leans_in(loops):
    xy = px(loops["breaking_alert"])
    rw_y = xy[:, B["right_wrist"], 1]
    peak = int(np.argmin(rw_y))
    assert rw_y[peak] < xy[peak, B["right_shoulder"], 1] - 50
    hand = xy[peak, sk.PARTS["right_hand"]]
    index_len = np.linalg.norm(hand[8] - hand[0])
    middle_len = np.linalg.norm(hand[12] - hand[0])
    assert index_len > 2 * middle_len
    assert hand[8, 1] < hand[0, 1] - 80  # index points up
    width = np.abs(xy[:, B["left_shoulder"], 0] - xy[:, B["right_shoulder"], 0])
    assert width.max() > 1.05 * width[0]  # the lean brings the anchor nearer the camera
    raised = rw_y < xy[:, B["right_shoulder"], 1]
    bumps = np.count_nonzero(np.diff(np.sign(np.diff(rw_y[raised]))) != 0)
    assert bumps >= 4  # emphatic beats while the hand is up


def test_welcome_opens_both_arms_and_smiles(loops):
    xy = px(loops["welcome"])
    lw, rw = xy[:, B["left_wrist"], 0], xy[:, B["right_wrist"], 0]
    assert lw.max() - lw[0] > 150 and rw[0] - rw.min() > 150
    mouth = xy[:, LEFT_MOUTH, 0] - xy[:, RIGHT_MOUTH, 0]
    assert mouth.max() > mouth[0] + 5
    lh = xy[:, sk.PARTS["left_hand"]]
    spread = np.linalg.norm(lh[:, 8] - lh[:, 20], axis=-1)  # index tip to pinky tip
    assert spread.max() > 2 * spread[0]  # palms open


def test_signoff_waves_then_bows(loops):
    xy = px(loops["signoff"])
    hand = xy[:, sk.PARTS["right_hand"]]
    raised = xy[:, B["right_wrist"], 1] < xy[:, B["right_shoulder"], 1]
    assert raised.sum() > 20
    direction = hand[:, 12] - hand[:, 0]
    angle = np.degrees(np.arctan2(direction[:, 0], -direction[:, 1]))[raised]
    swings = np.count_nonzero(np.diff(np.sign(np.diff(angle))) != 0)
    assert swings >= 3 and np.ptp(angle) > 15
    nose_y = xy[:, B["nose"], 1]
    last_raised = np.flatnonzero(raised).max()
    assert nose_y[last_raised:].max() - nose_y[0] > 12  # the bow comes after the wave


def test_fps_and_frames():
    kp60 = author_loop("welcome", fps=60)
    assert kp60.shape == (240, sk.NUM_KEYPOINTS, 3)
    # Same 4 s motion sampled twice as finely.
    np.testing.assert_allclose(kp60[::2], author_loop("welcome"), atol=1e-5)
    short = author_loop("nod", fps=24, frames=37)
    assert short.shape == (37, sk.NUM_KEYPOINTS, 3) and np.isfinite(short).all()
    assert author_loop("signoff", fps=25).shape == (100, sk.NUM_KEYPOINTS, 3)


def test_bad_arguments():
    with pytest.raises(NewsmotionError, match="unknown loop 'wave'.*welcome"):
        author_loop("wave")
    with pytest.raises(NewsmotionError, match="fps"):
        author_loop("nod", fps=0)
    with pytest.raises(NewsmotionError, match="frames"):
        author_loop("nod", frames=1)
    with pytest.raises(NewsmotionError, match="unknown loop"):
        authoring_params("../etc", 30, 120)


def test_authoring_params():
    params = authoring_params("welcome", 30, 120)
    text = json.dumps(params, sort_keys=True)
    assert json.loads(text) == params
    assert params["palette_version"] == PALETTE_VERSION and params["fps"] == 30 and params["frames"] == 120
    assert params["keys"]
    assert authoring_params("welcome", 30, 120) == params
    assert authoring_params("welcome", 60, 120) != params
    assert authoring_params("welcome", 30, 90) != params
    assert authoring_params("nod", 30, 120)["keys"] != params["keys"]


def test_the_idle_loop_starts_at_rest_breathes_and_blinks():
    idle = choreography.author_idle()
    assert idle.shape == author_loop("nod").shape and idle.dtype == np.float32
    np.testing.assert_array_equal(idle[0], author_loop("nod")[0])  # every loop starts at REST: joins at rest are seamless
    step = np.abs(np.diff(np.concatenate([idle, idle[:1]]), axis=0)[..., :2]).max()
    assert 0 < step < 0.005  # it moves (breath, drift, blinks), a little, and wraps without a jump
    right_eye = idle[:, sk.FACE_START + 36 : sk.FACE_START + 42, 1]
    opening = right_eye.max(axis=1) - right_eye.min(axis=1)
    assert opening.min() < 0.5 * opening[0]  # a blink: the eye more than half closed at some frame
