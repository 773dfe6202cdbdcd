"""Matte cleaning on synthetic images with known answers: a background fragment joined to the
person through a thin neck and one far away are cut, the person keeps its outline; edge colours
lose the old background (no halo); small background pockets in a segmented matte are filled,
real gaps stay; the bench's figures see both."""

from __future__ import annotations

import cv2
import numpy as np

from newsmotion_engine.bench.matte import matte_figures
from newsmotion_engine.persona.matte import cut_fragments, estimate_foreground, person_region, refine_edges
from newsmotion_engine.skeleton import BODY, FACE_START

H, W = 400, 240


def _landmarks() -> np.ndarray:
    """Head at (120, 90), shoulders at y 160, hips at y 330 (normalized to W x H)."""
    lm = np.zeros((133, 3), np.float32)

    def put(i, x, y):
        lm[i] = (x / W, y / H, 0.9)

    put(BODY["nose"], 120, 95)
    put(BODY["left_eye"], 130, 85)
    put(BODY["right_eye"], 110, 85)
    put(BODY["left_shoulder"], 165, 160)
    put(BODY["right_shoulder"], 75, 160)
    put(BODY["left_hip"], 155, 330)
    put(BODY["right_hip"], 85, 330)
    for k in range(17):  # jaw: the lower half of an ellipse, chin (8) at the bottom
        a = np.pi * k / 16
        put(FACE_START + k, 120 - 22 * np.cos(a), 92 + 28 * np.sin(a))
    for k in range(17, 27):  # brows across the forehead
        put(FACE_START + k, 100 + 4 * (k - 17), 75)
    for k in range(27, 68):  # eyes, nose, mouth: inside the face
        put(FACE_START + k, 110 + (k % 5) * 5, 85 + (k % 7) * 4)
    return lm


def _person() -> np.ndarray:
    person = np.zeros((H, W), np.uint8)
    cv2.ellipse(person, (120, 90), (32, 40), 0, 0, 360, 1, -1)
    cv2.rectangle(person, (70, 140), (170, H - 1), 1, -1)
    cv2.rectangle(person, (110, 120), (130, 140), 1, -1)  # neck
    return person


def test_fragments_joined_by_a_thin_neck_and_far_away_are_cut():
    person = _person()
    alpha = person.astype(np.float32)
    fragment = np.zeros_like(alpha)
    cv2.rectangle(fragment, (178, 200), (235, 260), 1, -1)  # a flag patch beside the arm
    cv2.rectangle(fragment, (170, 228), (178, 231), 1, -1)  # joined by a 4 px neck
    far = np.zeros_like(alpha)
    cv2.circle(far, (20, 30), 12, 1, -1)  # a blob in the corner, joined to nothing
    dirty = np.clip(alpha + fragment + far, 0, 1)
    clean = cut_fragments(dirty, _landmarks())
    kept = clean >= 0.5
    truth = person > 0
    assert (kept & truth).sum() / (kept | truth).sum() > 0.97  # the person keeps its outline
    assert clean[fragment > 0].mean() < 0.05 and clean[far > 0].max() < 0.05
    before = matte_figures((dirty * 255).astype(np.uint8), np.zeros((H, W, 3), np.uint8), np.zeros((H, W, 3), np.uint8), _landmarks())
    after = matte_figures((clean * 255).astype(np.uint8), np.zeros((H, W, 3), np.uint8), np.zeros((H, W, 3), np.uint8), _landmarks())
    assert before["fragments"] >= 1 and after["fragments"] == 0
    assert after["outside_fraction"] < before["outside_fraction"]


def test_person_region_covers_the_body_and_not_the_corners():
    region = person_region(_landmarks(), (H, W), 0.25)
    assert region[100, 120] and region[H - 1, 120] and region[30, 120]  # head, body down to the cut, hair
    assert not region[5, 5] and not region[H - 1, 2]
    assert person_region(None, (H, W)).all()


def test_edge_colours_lose_the_old_background():
    # A red person on a white wall; the matte's soft edge is 6 px wide and holds wall colour.
    truth = _person().astype(np.float32)
    soft = cv2.GaussianBlur(truth, (0, 0), 3.0)
    red, white = np.array([200.0, 30, 30]), np.array([250.0, 250, 250])
    photo = (soft[..., None] * red + (1 - soft[..., None]) * white).astype(np.uint8)
    fg = estimate_foreground(photo, soft)
    edge = (soft > 0.1) & (soft < 0.9)
    assert np.linalg.norm(fg[edge].astype(float) - red, axis=1).mean() < 0.5 * np.linalg.norm(photo[edge].astype(float) - red, axis=1).mean()
    assert (fg[soft >= 1.0] == photo[soft >= 1.0]).all()  # solid pixels untouched
    before = matte_figures((soft * 255).astype(np.uint8), photo, photo, _landmarks())
    after = matte_figures((soft * 255).astype(np.uint8), fg, photo, _landmarks())
    assert after["halo_width_px"] < 0.5 * before["halo_width_px"]


def test_refine_edges_snaps_a_soft_matte_to_the_photo_edge():
    # At canvas scale: a segmenter's blurry edge over a sharp colour edge.
    truth = np.zeros((1200, 720), np.float32)
    cv2.ellipse(truth, (360, 300), (96, 120), 0, 0, 360, 1, -1)
    cv2.rectangle(truth, (210, 420), (510, 1199), 1, -1)
    photo = np.where(truth[..., None] > 0, np.uint8([40, 40, 160]), np.uint8([235, 235, 235])).astype(np.uint8)
    photo = cv2.GaussianBlur(photo, (0, 0), 1.0)
    blurry = cv2.GaussianBlur(truth, (0, 0), 1.0)
    refined = refine_edges(photo, blurry)
    band = cv2.dilate(truth, np.ones((15, 15), np.uint8)) != cv2.erode(truth, np.ones((15, 15), np.uint8))
    assert np.abs(refined - truth)[band].mean() < 0.6 * np.abs(blurry - truth)[band].mean()


def test_small_pockets_are_filled_and_real_background_gaps_stay():
    from newsmotion_engine.persona.matte import POCKET_MAX, fill_pockets

    alpha = _person().astype(np.float32)
    alpha[200:206, 100:106] = 0.0  # a hole inside the body (a badge the segmenter missed)
    alpha[H - 12 :, 120:135] = 0.0  # a notch open to the bottom edge only (a glove)
    alpha[300:, 150:171] = 0.0  # a gap open to the right side of the body... still inside the frame
    big = (H - 250) * 30
    alpha[250:, 72:102] = 0.0  # a tall gap open to the bottom (under an arm): larger than a pocket
    assert big > POCKET_MAX * alpha.size > 12 * 15
    out = fill_pockets(alpha)
    assert (out[200:206, 100:106] == 1).all() and (out[H - 12 :, 120:135] == 1).all()
    assert (out[250:, 72:102] == 0).all()  # too large: real background, kept
    assert (out[:, :60] == 0).all() and (out[:40] == 0).all()  # the outside background: touches the frame's sides
    assert (out[300:, 150:171] == 0).all()  # joined to the background right of the body
    np.testing.assert_array_equal(fill_pockets(alpha, largest=0.0), alpha)  # nothing is that small


def test_a_filled_pocket_leaves_no_soft_rim():
    from newsmotion_engine.persona.matte import fill_pockets

    alpha = _person().astype(np.float32)
    hole = np.zeros_like(alpha, np.uint8)
    cv2.circle(hole, (120, 250), 6, 1, -1)
    soft = cv2.GaussianBlur(hole.astype(np.float32), (0, 0), 1.0)  # a soft edge around it
    alpha = np.minimum(alpha, 1.0 - soft)
    assert ((alpha > 0.05) & (alpha < 0.95))[235:266, 105:136].any()
    out = fill_pockets(alpha)
    assert (out[235:266, 105:136] >= 0.99).all()  # no partly transparent ring left to show the key colour
