"""The warp backend's speaking face: mouth shapes move the right pixels, a closed track leaves the
mouth as it was, blinks are deterministic per seed, head motion follows the speech's energy, and a
portrait without a mouth renders without lips and says so."""

from __future__ import annotations

import numpy as np
import pytest

from newsmotion_engine.render import RenderSpec, get_backend
from newsmotion_engine.render.backends.warp.face_motion import BLINK_MIN_S, FacePerformance, blink_track, head_motion
from newsmotion_engine.render.backends.warp.mouth import MouthShape, mouth_geometry, shape_mouth
from newsmotion_engine.skeleton import FACE_START
from tests.engine.render.viseme_tracks import speaking, track

W, H = 432, 768
SPEC = RenderSpec(W, H, fps=30)


@pytest.fixture(scope="module")
def big_face(request):
    """A drawn persona whose face is large enough for lips (mouth about 30 px wide)."""
    import importlib.util
    import sys
    from pathlib import Path

    path = Path(__file__).parents[2] / "conftest.py"
    spec = importlib.util.spec_from_file_location("render_conftest_for_lips", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod.make_persona(W, H, head=0.2, neck_y=0.55)


def _render(persona, visemes, frames, seed=0):
    warp = get_backend("warp", threads=1)
    kp = np.repeat(np.asarray(persona.landmarks, np.float64)[None], frames, axis=0)
    out = list(warp.frames(None, persona, kp, RenderSpec(W, H, fps=30, seed=seed), visemes=visemes))
    return out, warp


def _mouth_box(persona):
    """The mouth's patch: past the corners to the jaw, from the nose to below the chin."""
    lm = np.asarray(persona.landmarks)[FACE_START : FACE_START + 68, :2] * (W, H)
    mouth = lm[48:68]
    (x0, _), (x1, _) = mouth.min(axis=0), mouth.max(axis=0)
    w = x1 - x0
    return int(x0 - 0.7 * w), int(lm[33, 1] - 0.2 * w), int(x1 + 0.7 * w), int(max(lm[8, 1], mouth[:, 1].max()) + 0.7 * w)


def _rest_geometry(persona):
    lm = np.asarray(persona.landmarks, np.float64)
    rest_px = lm[:, :2] * (W, H)
    return rest_px, lm[:, 2] >= 0.3


def _lip_image(persona):
    """The persona's skin with red lips drawn on the outer lip contour and a dark seam."""
    import cv2

    rest_px, _ = _rest_geometry(persona)
    img = np.full((H, W, 3), (215, 175, 150), np.uint8)
    outer = rest_px[FACE_START + 48 : FACE_START + 60].astype(np.int32)
    cv2.fillPoly(img, [outer], (180, 40, 50))
    return img


def test_open_drops_the_lower_lip_and_darkens_the_inside(big_face):
    rest_px, ok = _rest_geometry(big_face)
    img = _lip_image(big_face)
    g = mouth_geometry(rest_px, ok, img)
    assert g is not None and 25 < g.width < 45
    out = img.copy()
    shape_mouth(img, out, g, MouthShape(open=1.0))
    changed = np.abs(out.astype(int) - img.astype(int)).sum(axis=2) > 30
    ys, xs = np.nonzero(changed)
    # Everything that changed is around the mouth, and the nose line above it is untouched.
    cx, cy = g.centre
    assert abs(xs.mean() - cx) < 0.1 * g.width
    assert ys.min() > rest_px[FACE_START + 33][1] - 2  # not above the subnasale
    # The inside is dark where the seam was; the lips' red reaches further down (the jaw dropped).
    assert out[int(round(cy)) + 2, int(round(cx))].mean() < 90
    red = lambda im: np.nonzero((im[..., 0] > 150) & (im[..., 1] < 80))[0]  # noqa: E731
    assert red(out).max() > red(img).max() + 0.15 * g.width


def test_wide_and_round_move_the_corners_out_and_in(big_face):
    rest_px, ok = _rest_geometry(big_face)
    img = _lip_image(big_face)
    g = mouth_geometry(rest_px, ok, img)
    width = lambda im: np.ptp(np.nonzero((im[..., 0] > 150) & (im[..., 1] < 80))[1])  # noqa: E731
    wide, rnd = img.copy(), img.copy()
    shape_mouth(img, wide, g, MouthShape(wide=1.0))
    shape_mouth(img, rnd, g, MouthShape(round=1.0))
    assert width(wide) > width(img) + 0.05 * g.width
    assert width(rnd) < width(img) - 0.07 * g.width


def test_a_closed_track_leaves_the_mouth_unchanged(big_face):
    frames = 40
    silent, _ = _render(big_face, None, frames)
    closed, warp = _render(big_face, track(np.zeros(frames)), frames)
    x0, y0, x1, y1 = _mouth_box(big_face)
    shut = blink_track(frames, 30.0, 0) > 0
    for t in range(frames):
        np.testing.assert_array_equal(closed[t][y0:y1, x0:x1], silent[t][y0:y1, x0:x1])
        if not shut[t]:
            np.testing.assert_array_equal(closed[t], silent[t])
    face = warp.describe()["last_render"]["face"]
    assert face["moved"] and face["nod_px_max"] == 0 and face["sway_deg_max"] == 0


def test_speech_moves_the_mouth_region_only_when_the_head_is_still(big_face):
    frames = 12
    silent, _ = _render(big_face, None, frames)
    o = np.zeros(frames)
    o[6] = 1.0
    spoken, _ = _render(big_face, track(o, energy=np.zeros(frames)), frames)
    diff = np.abs(spoken[6].astype(int) - silent[6].astype(int)).sum(axis=2) > 30
    x0, y0, x1, y1 = _mouth_box(big_face)
    assert diff[y0:y1, x0:x1].sum() > 50
    assert diff.sum() == diff[y0:y1, x0:x1].sum()
    np.testing.assert_array_equal(spoken[5], silent[5])


def test_blinks_are_natural_and_deterministic_per_seed():
    a, b, c = blink_track(1800, 30.0, 1), blink_track(1800, 30.0, 1), blink_track(1800, 30.0, 2)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    for closure in (a, c):
        shut = np.flatnonzero((closure >= 0.99)[1:] & (closure < 0.99)[:-1]) + 1
        assert 8 <= len(shut) <= 30  # a minute of talking
        gaps = np.diff(shut) / 30.0
        # Intervals of at least the minimum, except the quick second half of a double blink.
        assert ((gaps >= BLINK_MIN_S) | (gaps < 0.5)).all()
        assert 2 <= np.count_nonzero(closure[1:] > 0) / max(1, len(shut)) <= 12  # frames per blink


def test_a_blink_closes_the_eyes_in_the_render(big_face):
    closure = blink_track(200, 30.0, 3)
    shut = int(np.flatnonzero(closure >= 0.99)[0])
    frames = shut + 1  # a shorter clip keeps the same first blink
    np.testing.assert_array_equal(blink_track(frames, 30.0, 3), closure[:frames])
    out, _ = _render(big_face, track(np.zeros(frames)), frames, seed=3)
    silent, _ = _render(big_face, None, 1)
    diff = np.abs(out[shut].astype(int) - silent[0].astype(int)).sum(axis=2) > 20
    eyes = np.asarray(big_face.landmarks)[FACE_START + 36 : FACE_START + 48, :2] * (W, H)
    ys, xs = np.nonzero(diff)
    assert len(ys) > 10
    assert ys.min() >= eyes[:, 1].min() - 0.5 * np.ptp(eyes[:, 0]) and ys.max() <= eyes[:, 1].max() + 10


def test_head_motion_follows_the_energy():
    fps = 30.0
    silent_nod, silent_sway = head_motion(np.zeros(90), fps, 0)
    assert not silent_nod.any() and not silent_sway.any()
    e = np.zeros(90)
    e[30:45] = 1.0  # a loud syllable starting at 1 s
    nod, sway = head_motion(e, fps, 0)
    assert 0.3 < nod.max() <= 1 and 25 <= int(nod.argmax()) <= 36
    assert nod[:20].max() < 0.05 and np.abs(sway).max() <= 1
    np.testing.assert_array_equal(head_motion(e, fps, 0)[1], sway)


def test_speech_nods_the_head(big_face):
    frames = 30
    o = np.zeros(frames)
    e = np.zeros(frames)
    e[8:20] = 1.0
    spoken, warp = _render(big_face, track(o, energy=e), frames)
    silent, _ = _render(big_face, None, frames)
    face = warp.describe()["last_render"]["face"]
    assert face["nod_px_max"] > 1.0
    t = 12  # just after the onset: the face has dipped
    nose_row = int(np.asarray(big_face.landmarks)[FACE_START + 30, 1] * H)
    assert np.abs(spoken[t][nose_row - 20 : nose_row + 20].astype(int) - silent[t][nose_row - 20 : nose_row + 20]).max() > 30


def test_a_portrait_without_a_mouth_renders_without_lips(big_face):
    from dataclasses import replace

    lm = np.asarray(big_face.landmarks).copy()
    lm[FACE_START : FACE_START + 68, 2] = 0.0
    faceless = replace(big_face, landmarks=lm)
    frames = 10
    silent, _ = _render(faceless, None, frames)
    spoken, warp = _render(faceless, speaking(frames), frames)
    face = warp.describe()["last_render"]["face"]
    assert face["moved"] is False and "no confident mouth" in face["reason"]
    rest_px = lm[:, :2] * (W, H)
    perf = FacePerformance(rest_px, lm[:, 2] >= 0.3, silent[0], speaking(frames), 0)
    assert not perf.moves_lips and perf.eyes == []
