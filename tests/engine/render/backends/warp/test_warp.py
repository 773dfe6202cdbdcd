"""The CPU warp backend: identity, locality of motion, background, rigid face, loop closure."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from newsmotion_engine.errors import NewsmotionError
from newsmotion_engine.render import RenderSpec, get_backend, retarget
from newsmotion_engine.skeleton import BODY, FACE_START, RIGHT_HAND_START

W, H = 216, 384


def composite(persona, bg) -> np.ndarray:
    a = persona.person_mask.astype(np.float32)[..., None] / 255.0
    out = persona.portrait.astype(np.float32) * a + np.asarray(bg, np.float32) * (1 - a)
    return np.clip(out + 0.5, 0, 255).astype(np.uint8)


def render(persona, keypoints, spec=None, **config) -> list[np.ndarray]:
    backend = get_backend("warp", threads=1, **config)
    backend.load()
    spec = spec or RenderSpec(W, H)
    return list(backend.frames(None, persona, keypoints, spec))


def still(persona, frames: int = 2) -> np.ndarray:
    return np.repeat(persona.landmarks[None], frames, axis=0)


def test_identity_keypoints_give_the_composited_portrait(persona):
    frames = render(persona, still(persona, 3))
    assert len(frames) == 3
    expected = composite(persona, (0, 177, 64))
    for f in frames:
        assert f.shape == (H, W, 3) and f.dtype == np.uint8
        diff = np.abs(f.astype(int) - expected.astype(int))
        assert diff.mean() < 0.5 and np.percentile(diff, 99.9) <= 2


def test_background_colour_outside_the_person(persona):
    bg = (10, 20, 200)
    kp = still(persona, 1)
    kp[0, BODY["right_wrist"], 0] -= 25 / W  # some motion, so the remapped region is exercised
    f = render(persona, kp, RenderSpec(W, H, background=bg))[0]
    outside = persona.person_mask == 0
    # Far from the person (dilate the matte generously) the frame is exactly the background.
    near = cv2.dilate((~outside).astype(np.uint8), np.ones((61, 61), np.uint8)) > 0
    assert (f[~near] == bg).all()
    assert (f[:10, :10] == bg).all() and (f[:10, -10:] == bg).all()


def test_moving_a_wrist_moves_pixels_near_it_not_far_away(persona):
    kp = still(persona, 1)
    rw = BODY["right_wrist"]
    wx, wy = kp[0, rw, 0] * W, kp[0, rw, 1] * H
    kp[0, rw, 0] -= 30 / W
    kp[0, rw, 1] -= 30 / H
    moved = render(persona, kp, limb_reach=0)[0].astype(int)  # no soft limit on the arm
    base = render(persona, still(persona, 1))[0].astype(int)
    diff = np.abs(moved - base).sum(axis=2)
    yy, xx = np.mgrid[0:H, 0:W]
    dist = np.hypot(xx - wx, yy - wy)
    near = diff[dist < 15].mean()
    assert near > 30  # the hand region changed a lot
    lw = BODY["left_wrist"]
    lx, ly = persona.landmarks[lw, 0] * W, persona.landmarks[lw, 1] * H
    far = np.hypot(xx - lx, yy - ly) < 15  # the other hand: a thin-plate spline is global, but
    assert diff[far].mean() < 0.15 * near  # its effect this far away is a sub-pixel shift
    head = persona.face_mask > 128
    assert diff[head].mean() < 0.05 * near  # the head follows its own (unchanged) keypoints
    assert (diff[-3:] == 0).all()  # the bottom edge is anchored
    # The hand content itself travels towards the new wrist position.
    skin = np.array([220, 180, 150])
    near_new = np.hypot(xx - (wx - 30), yy - (wy - 30)) < 6
    assert np.abs(moved[near_new] - skin).sum(axis=1).mean() < np.abs(base[near_new] - skin).sum(axis=1).mean()


def test_arm_travel_is_softly_limited_without_layers(persona):
    """With ``layered_arms=False`` (one warped sheet) a hand dragged far across the frame moves
    only about ``limb_reach`` shoulder widths (a sheet cannot lift an arm off the torso; it must
    not smear it). Layered arms follow the whole way (tests/engine/render/backends/warp/test_limbs.py)."""
    rw = BODY["right_wrist"]
    hand = np.r_[rw, RIGHT_HAND_START : RIGHT_HAND_START + 21]
    kp = still(persona, 1)
    kp[0, hand, 0] += 40 / W
    lx = persona.landmarks[BODY["left_wrist"], 0] * W
    sw = np.linalg.norm((persona.landmarks[5, :2] - persona.landmarks[6, :2]) * (W, H))
    wx, wy = persona.landmarks[rw, :2] * (W, H)

    def hand_x(frame):
        band = frame[int(wy) - 6 : int(wy) + 7, : int(lx - 20)].astype(int)  # not the left hand
        skin = band[..., 0] > 190  # only the skin is that red (suit, sleeves, chroma green are not)
        return np.nonzero(skin)[1].max()  # the hand's leading edge

    base = hand_x(render(persona, still(persona, 1), layered_arms=False)[0])
    free = hand_x(render(persona, kp, limb_reach=0, layered_arms=False)[0]) - base
    limited = hand_x(render(persona, kp, limb_reach=0.3, layered_arms=False)[0]) - base
    assert 28 < free < 46  # the unlimited warp carries the hand (nearly) the whole 40 px
    assert 0.15 * sw < limited < 0.35 * sw  # the limited one about 0.3 shoulder widths


def test_face_moves_as_a_rigid_similarity(persona):
    """Rotate the head keypoints by 12 degrees about the nose while the shoulders shrug: the face
    pixels rotate with the head, undistorted by the shoulders' pull (compare against the
    composite rotated by the same similarity)."""
    kp = still(persona, 1)
    kp[0, [BODY["left_shoulder"], BODY["right_shoulder"]], 1] -= 14 / H
    kp[0, BODY["left_shoulder"], 0] += 8 / W
    head = np.r_[0:5, FACE_START : FACE_START + 68]
    pts = kp[0, head, :2] * (W, H)
    nose = pts[0].copy()
    a = np.deg2rad(12)
    rot = np.array([[np.cos(a), -np.sin(a)], [np.sin(a), np.cos(a)]])
    kp[0, head, :2] = ((pts - nose) @ rot.T + nose) / (W, H)
    f = render(persona, kp)[0].astype(int)
    M = cv2.getRotationMatrix2D((float(nose[0]), float(nose[1])), -12, 1.0)
    expected = cv2.warpAffine(composite(persona, (0, 177, 64)), M, (W, H), flags=cv2.INTER_LINEAR).astype(int)
    inner = cv2.erode(persona.face_mask, np.ones((9, 9), np.uint8)) > 128
    inner = cv2.warpAffine(inner.astype(np.uint8), M, (W, H), flags=cv2.INTER_NEAREST) > 0
    err_rigid = np.abs(f - expected)[inner].mean()
    err_static = np.abs(f - composite(persona, (0, 177, 64)).astype(int))[inner].mean()
    assert err_rigid < 2 and err_static > 5 * err_rigid  # without the face blend: ~5


def test_a_seamless_loop_closes_without_a_jump(persona, synth):
    loop = synth.make_loop(24, wave=1.2, nod=0.1)
    kp = retarget(loop.keypoints, persona.landmarks, persona_size=(W, H))
    closed = np.concatenate([kp, kp[:1]], axis=0)  # frame 24 == frame 0 of the next cycle
    frames = render(persona, closed)
    assert np.array_equal(frames[-1], frames[0])
    steps = [np.abs(frames[i + 1].astype(int) - frames[i].astype(int)).mean() for i in range(24)]
    assert max(steps) > 0.05  # it does move
    assert steps[-1] <= 2.5 * np.median(steps)  # the wrap-around step is an ordinary step


def test_output_size_differs_from_the_portrait(persona):
    spec = RenderSpec(256, 256)
    f = render(persona, still(persona, 1), spec)[0]
    assert f.shape == (256, 256, 3)
    # Fit by height, centred: the sides are background, the figure is in the middle.
    assert (f[:, :50] == (0, 177, 64)).all()
    assert (f[200:, 100:156] != (0, 177, 64)).any(axis=2).mean() > 0.5


def test_prepared_cache_does_not_go_stale_when_a_persona_changes(persona, synth):
    backend = get_backend("warp", threads=1)
    spec = RenderSpec(W, H)
    a = next(iter(backend.frames(None, persona, still(persona, 1), spec)))
    other = synth.make_persona(W, H, persona_id=persona.persona_id, seed=7)  # same id, new pixels
    b = next(iter(backend.frames(None, other, still(other, 1), spec)))
    assert not np.array_equal(a, b)
    np.testing.assert_allclose(b.astype(int), composite(other, (0, 177, 64)).astype(int), atol=3)


def test_bad_inputs_are_clear_errors(persona):
    backend = get_backend("warp", threads=1)
    with pytest.raises(NewsmotionError, match="shape"):
        backend.frames(None, persona, np.zeros((2, 17, 3)), RenderSpec(W, H))
    persona.person_mask = np.zeros_like(persona.person_mask)
    with pytest.raises(NewsmotionError, match="mask is empty"):
        backend.frames(None, persona, still(persona, 1), RenderSpec(W, H))
    with pytest.raises(NewsmotionError, match="grid_step"):
        get_backend("warp", grid_step=1)
