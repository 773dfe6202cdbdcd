"""DWPose-style pose-map drawing."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from newsmotion_engine import skeleton as sk
from newsmotion_engine.guidance.draw import (
    contact_sheet,
    draw_pose,
    draw_pose_video,
    png_bytes,
    stroke_sizes,
)
from newsmotion_engine.guidance.choreography import author_loop

B = sk.BODY
W, H = 360, 640  # small enough to be quick, large enough to see geometry


@pytest.fixture(scope="module")
def rest() -> np.ndarray:
    return author_loop("welcome", frames=12)[0]


def only(kp: np.ndarray, keep: slice | list[int]) -> np.ndarray:
    """Copy of one frame with every point outside ``keep`` at confidence 0."""
    out = kp.copy()
    mask = np.zeros(sk.NUM_KEYPOINTS, dtype=bool)
    mask[keep] = True
    out[~mask, 2] = 0.0
    return out


def at(kp: np.ndarray, index: int, width: int = W, height: int = H) -> tuple[int, int]:
    return int(round(kp[index, 0] * width)), int(round(kp[index, 1] * height))


def drawn_near(img: np.ndarray, xy: tuple[int, int], radius: int = 3) -> bool:
    x, y = xy
    return bool(img[max(y - radius, 0):y + radius + 1, max(x - radius, 0):x + radius + 1].any())


def test_shape_dtype_and_black_background(rest):
    img = draw_pose(rest, W, H)
    assert img.shape == (H, W, 3) and img.dtype == np.uint8
    assert img.any()
    # Nothing above the head or in the corners: black.
    assert not img[:40].any() and not img[:, :10].any() and not img[:, -10:].any()
    # A frame with nothing confident is all black.
    assert not draw_pose(only(rest, []), W, H).any()


def test_draws_at_wrists_neck_and_face(rest):
    img = draw_pose(rest, W, H)
    for name in ("left_wrist", "right_wrist", "left_elbow", "nose", "left_hip"):
        assert drawn_near(img, at(rest, B[name])), name
    neck = (rest[B["left_shoulder"], :2] + rest[B["right_shoulder"], :2]) / 2
    assert drawn_near(img, (int(round(neck[0] * W)), int(round(neck[1] * H))))
    # Far from every keypoint and limb (between the arm and the frame edge): nothing.
    assert not drawn_near(img, (W // 2, 20), radius=10)


def test_limb_colours_follow_openpose(rest):
    # Only the shoulders: two neck->shoulder limbs; the person's right one is red at 60 % opacity,
    # the left one orange (OpenPose limbs 0 and 1), and the neck joint is drawn in its colour.
    kp = only(rest, [B["left_shoulder"], B["right_shoulder"]])
    img = draw_pose(kp, W, H)
    rs = np.array(at(kp, B["right_shoulder"]))
    ls = np.array(at(kp, B["left_shoulder"]))
    neck = (rs + ls) / 2
    mid_right = np.rint((neck + rs) / 2).astype(int)
    mid_left = np.rint((neck + ls) / 2).astype(int)
    assert tuple(img[mid_right[1], mid_right[0]]) == (153, 0, 0)
    assert tuple(img[mid_left[1], mid_left[0]]) == (153, 51, 0)
    n = np.rint(neck).astype(int)
    assert tuple(img[n[1], n[0]]) == (255, 85, 0)


def test_limb_transparency_shows_earlier_limbs(rest):
    # The right forearm (drawn earlier) crosses the neck->right-hip limb (drawn later): where they
    # overlap the later limb is 60 % over the earlier one, as in OpenPose.
    kp = only(rest, [])
    pts = {"right_shoulder": (0.3, 0.3), "left_shoulder": (0.7, 0.3), "right_hip": (0.5, 0.9),
           "right_elbow": (0.3, 0.6), "right_wrist": (0.7, 0.6)}
    for name, xy in pts.items():
        kp[B[name]] = (*xy, 1.0)
    img = draw_pose(kp, W, H).astype(int)
    forearm = 0.6 * np.array((255, 255, 0))
    expected = 0.4 * forearm + 0.6 * np.array((0, 255, 0))
    assert np.abs(img[int(0.6 * H), int(0.5 * W)] - expected).max() <= 2
    assert np.abs(img[int(0.6 * H), int(0.4 * W)] - forearm).max() <= 2


def test_low_confidence_parts_are_not_drawn(rest):
    kp = rest.copy()
    kp[sk.PARTS["left_hand"], 2] = 0.2
    kp[B["left_wrist"], 2] = 0.2
    img = draw_pose(kp, W, H)
    full = draw_pose(rest, W, H)
    lh = rest[sk.PARTS["left_hand"]]
    # The left hand's fingertips are drawn in the full frame and gone when below threshold...
    tips = [4, 8, 12, 16, 20]
    assert any(drawn_near(full, at(lh, t)) for t in tips)
    differs = (img != full).any(axis=-1)
    ys, xs = np.nonzero(differs)
    assert len(xs) > 0
    # ...and nothing changes away from the left hand and left forearm.
    region = np.vstack([lh[:, :2], rest[B["left_elbow"], :2]]) * (W, H)
    (x0, y0), (x1, y1) = region.min(axis=0) - 8, region.max(axis=0) + 8
    assert ((xs >= x0) & (xs <= x1) & (ys >= y0) & (ys <= y1)).all()
    # The same data is drawn with a lower threshold.
    assert np.array_equal(draw_pose(kp, W, H, conf_threshold=0.1), full)


def test_face_dots_are_white_and_hands_rainbow(rest):
    face = draw_pose(only(rest, sk.PARTS["face"]), W, H)
    lit = face[face.any(axis=-1)]
    assert len(lit) > 50 and (lit == 255).all()
    hand = draw_pose(only(rest, sk.PARTS["right_hand"]), W * 2, H * 2)
    colours = {tuple(c) for c in hand[hand.any(axis=-1)]}
    assert (0, 0, 255) in colours  # the point dots
    hues = {c for c in colours if c != (0, 0, 255)}
    assert len(hues) >= 5  # one colour per bone around the hue circle


def test_out_buffer_is_reused_and_cleared(rest):
    buf = np.full((H, W, 3), 77, dtype=np.uint8)
    res = draw_pose(rest, W, H, out=buf)
    assert res is buf
    assert np.array_equal(buf, draw_pose(rest, W, H))
    with pytest.raises(ValueError, match="out must be"):
        draw_pose(rest, W, H, out=np.zeros((H, W + 1, 3), dtype=np.uint8))
    with pytest.raises(ValueError, match="133, 3"):
        draw_pose(rest[:100], W, H)


def test_nonfinite_points_are_skipped(rest):
    shoulders = only(rest, [B["left_shoulder"], B["right_shoulder"]])
    kp = only(rest, [B["left_shoulder"], B["right_shoulder"], B["left_elbow"]])
    assert not np.array_equal(draw_pose(kp, W, H), draw_pose(shoulders, W, H))
    kp[B["left_elbow"], :2] = np.nan  # confident but unusable: skipped like an absent point
    assert np.array_equal(draw_pose(kp, W, H), draw_pose(shoulders, W, H))


def test_video_and_resolutions():
    kp = author_loop("nod", frames=8)
    frames = list(draw_pose_video(kp, 90, 160))
    assert len(frames) == 8 and all(f.shape == (160, 90, 3) for f in frames)
    with pytest.raises(ValueError):
        next(draw_pose_video(kp[0], 90, 160))
    small, large = stroke_sizes(360, 640), stroke_sizes(1440, 2560)
    assert all(large[k] > small[k] for k in small)
    # Ink scales with the image: ~4x the pixels at twice the size (strokes widen too).
    a = np.count_nonzero(draw_pose(kp[0], 360, 640).any(axis=-1))
    b = np.count_nonzero(draw_pose(kp[0], 720, 1280).any(axis=-1))
    assert 3.0 < b / a < 5.0
    landscape = draw_pose(kp[0], 200, 100)
    assert landscape.shape == (100, 200, 3)


def test_contact_sheet():
    kp = author_loop("welcome", frames=24)
    sheet = contact_sheet(kp)
    assert sheet.shape == (320, 6 * 180, 3) and sheet.dtype == np.uint8
    assert contact_sheet(kp, 90, 160, count=4).shape == (160, 360, 3)
    # Tiles show different moments of the loop.
    tiles = [sheet[:, i * 180 + 1:(i + 1) * 180] for i in range(6)]
    assert not np.array_equal(tiles[0], tiles[2])
    assert np.array_equal(tiles[0], draw_pose(kp[0], 180, 320)[:, 1:])
    with pytest.raises(ValueError):
        contact_sheet(kp, count=0)


def test_png_bytes_round_trip(rest):
    img = draw_pose(rest, 64, 96)
    data = png_bytes(img)
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    back = cv2.cvtColor(cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB)
    assert np.array_equal(back, img)
    with pytest.raises(ValueError):
        png_bytes(img.astype(np.float32))
