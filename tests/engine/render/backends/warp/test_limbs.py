"""Layered arms of the warp backend: rigid bones stay rigid, arms are drawn over the torso, the
torso behind an arm is filled, parts the portrait does not show are not animated and reported."""

from __future__ import annotations

import dataclasses

import cv2
import numpy as np

from newsmotion_engine.render import RenderSpec, RenderTelemetry, get_backend, render_clip
from newsmotion_engine.render.backends.warp.limbs import PART_NAMES, cut_arms
from newsmotion_engine.skeleton import BODY, RIGHT_HAND_START

W, H = 216, 384
GREEN = (0, 177, 64)
RIGHT_ARM = np.r_[BODY["right_elbow"], BODY["right_wrist"], RIGHT_HAND_START : RIGHT_HAND_START + 21]
RIGHT_FOREARM = np.r_[BODY["right_wrist"], RIGHT_HAND_START : RIGHT_HAND_START + 21]


def composite(persona) -> np.ndarray:
    a = persona.person_mask.astype(np.float32)[..., None] / 255.0
    return np.clip(persona.portrait * a + np.asarray(GREEN, np.float32) * (1 - a) + 0.5, 0, 255).astype(np.uint8)


def render(persona, keypoints, spec=None, **options):
    backend = get_backend("warp", threads=1, **options)
    return list(backend.frames(None, persona, keypoints, spec or RenderSpec(W, H))), backend


def rotate(kp: np.ndarray, idx: np.ndarray, pivot: int, degrees: float) -> tuple[np.ndarray, np.ndarray]:
    """``kp`` with points ``idx`` turned about keypoint ``pivot`` (image coordinates, y down:
    positive = clockwise on screen); also the 2x3 pixel matrix of that rotation."""
    out = kp.copy()
    c = kp[pivot, :2] * (W, H)
    M = cv2.getRotationMatrix2D((float(c[0]), float(c[1])), -degrees, 1.0)
    px = kp[idx, :2] * (W, H)
    out[idx, :2] = (px @ M[:, :2].T + M[:, 2]) / (W, H)
    return out, M


def arm_pixels(persona) -> np.ndarray:
    """The drawn right arm (sleeve + hand colours) of the synthetic figure, well inside its edge."""
    img = persona.portrait.astype(int)
    sleeve = (np.abs(img - (90 + 30, 30 + 30, 110 + 30)).max(axis=2) <= 32) | (img[..., 0] > 190)
    right = np.zeros_like(sleeve)
    right[:, : int(persona.landmarks[BODY["right_shoulder"], 0] * W) + 4] = True
    return cv2.erode((sleeve & right).astype(np.uint8), np.ones((5, 5), np.uint8)) > 0


def test_a_rigid_rotation_of_the_arm_moves_its_pixels_rigidly(persona):
    """The whole right arm turns 35 degrees outward about the shoulder: away from the shoulder the
    rendered arm equals the portrait rotated by that rigid motion (ARAP reproduces it)."""
    kp, M = rotate(persona.landmarks, RIGHT_ARM, BODY["right_shoulder"], 35.0)
    frame = render(persona, kp[None])[0][0].astype(int)
    expected = cv2.warpAffine(composite(persona), M, (W, H), flags=cv2.INTER_LINEAR).astype(int)
    arm = cv2.warpAffine(arm_pixels(persona).astype(np.uint8), M, (W, H), flags=cv2.INTER_NEAREST) > 0
    sh = persona.landmarks[BODY["right_shoulder"], :2] * (W, H)
    yy, xx = np.mgrid[0:H, 0:W]
    far = arm & (np.hypot(xx - sh[0], yy - sh[1]) > 25)
    assert far.sum() > 300
    err = np.abs(frame - expected)[far].mean()
    unmoved = np.abs(frame - composite(persona).astype(int))[far].mean()
    assert err < 6 and unmoved > 6 * err


def test_a_lifted_forearm_is_drawn_over_the_torso_and_leaves_no_hole(persona):
    """The right forearm swings 110 degrees up across the chest: the hand is drawn in front of the
    torso, the torso it uncovers is filled (torso colours, no background, no hole), and where the
    arm hung beside the body the background shows."""
    kp, M = rotate(persona.landmarks, RIGHT_FOREARM, BODY["right_elbow"], -110.0)
    frame = render(persona, kp[None])[0][0].astype(int)
    hand = kp[RIGHT_HAND_START + 9, :2] * (W, H)  # the middle finger's base, now over the chest
    hx, hy = int(round(hand[0])), int(round(hand[1]))
    patch = frame[hy - 2 : hy + 3, hx - 2 : hx + 3].reshape(-1, 3)
    assert (patch[:, 0] > 180).mean() > 0.8  # skin (red > 180), not the torso's blue suit
    torso_at_rest = persona.portrait[hy, hx].astype(int)
    assert torso_at_rest[2] > 120 and torso_at_rest[0] < 120  # it was torso there before
    # Where the forearm and hand were: inside the torso it is now torso-like, outside it green.
    old = cv2.erode((arm_pixels(persona)).astype(np.uint8), np.ones((3, 3), np.uint8)) > 0
    wr = persona.landmarks[BODY["right_wrist"], :2] * (W, H)
    el = persona.landmarks[BODY["right_elbow"], :2] * (W, H)
    yy, xx = np.mgrid[0:H, 0:W]
    below_elbow = old & (yy > el[1] + 8) & (yy < wr[1] + 25)
    green = np.abs(frame - np.asarray(GREEN)).max(axis=2) <= 3
    assert green[below_elbow].mean() > 0.5  # the arm hung outside the torso: background there
    torso = cv2.erode((persona.person_mask > 250).astype(np.uint8), np.ones((9, 9), np.uint8)) > 0
    torso &= np.abs(persona.portrait.astype(int) - (40 + 30, 60 + 30, 150 + 30)).max(axis=2) <= 35
    # No matte hole inside the torso (a stray pixel in the crook of the sharply bent elbow, where
    # the mesh folds over, is tolerated).
    assert green[torso].mean() < 0.002


def test_the_torso_behind_an_arm_is_filled_not_holed(persona):
    """``cut_arms`` directly: under the arm, inside the torso, the body image has the torso's
    colours (no background, no hole); beside the torso it is background."""
    alpha = persona.person_mask.astype(np.float32) / 255.0
    face = persona.face_mask.astype(np.float32) / 255.0
    rest = persona.landmarks[:, :2] * (W, H)
    layers, body, report = cut_arms(
        portrait=persona.portrait, alpha=alpha, face=face, rest_px=rest, rest_conf=persona.landmarks[:, 2],
        portrait_box=(0, 0, W, H), background=GREEN, threshold=0.3,
    )  # fmt: skip
    assert [layer.side for layer in layers] == ["left", "right"]
    assert report.animated == list(PART_NAMES) and report.not_animated == {}
    assert body.shape == (H, W, 3) and body.dtype == np.uint8
    # The layer (premultiplied RGBA crop) holds the arm: its alpha covers the drawn arm pixels.
    right = layers[1]
    ox, oy = right.origin
    a = np.zeros((H, W), np.uint8)
    a[oy : oy + right.layer.shape[0], ox : ox + right.layer.shape[1]] = right.layer[..., 3]
    arm = arm_pixels(persona)
    assert (a[arm] > 250).mean() > 0.95
    # Inside the torso under the arm's rim nothing is background-green; beside it the arm left.
    torso_poly = np.zeros((H, W), np.uint8)
    sh = rest[[BODY["right_shoulder"], BODY["left_shoulder"]]]
    hips = rest[[BODY["left_hip"], BODY["right_hip"]]]
    cv2.fillPoly(torso_poly, [np.round(np.concatenate([sh, hips])).astype(np.int32)], 1)
    inside = (torso_poly > 0) & (persona.person_mask > 250) & (a > 250)
    assert inside.sum() > 20
    diff_green = np.abs(body.astype(int) - np.asarray(GREEN)).max(axis=2)
    assert (diff_green[inside] > 40).all()
    fill = body[inside].astype(int)
    assert fill[:, 2].mean() > 130 and fill[:, 0].mean() < 110  # the suit's blue, not sleeve purple
    xx = np.arange(W)[None, :]
    outside = arm & (torso_poly == 0) & (a > 250) & (xx < sh[0, 0] - 6)  # clear of the torso's side
    outside = cv2.erode(outside.astype(np.uint8), np.ones((5, 5), np.uint8)) > 0
    assert outside.sum() > 20 and (diff_green[outside] <= 2).all()


def test_hands_the_portrait_does_not_show_are_not_animated_and_reported(synth):
    persona = synth.make_persona(W, H, hands=False)
    kp = persona.landmarks.copy()
    (frames, backend) = render(persona, kp[None])
    parts = backend.describe()["last_render"]["parts"]
    assert parts["animated"] == ["left_upper_arm", "left_forearm", "right_upper_arm", "right_forearm"]
    assert set(parts["not_animated"]) == {"left_hand", "right_hand"}
    assert "0 of 21 hand points" in parts["not_animated"]["right_hand"]


def test_arms_the_portrait_does_not_show_are_not_invented(synth):
    """No arm in the portrait (elbows, wrists, hands at confidence 0): moving them in the loop
    changes no pixel, and every arm part is reported as not animated."""
    persona = synth.make_persona(W, H, arms=False)
    kp, _ = rotate(persona.landmarks, RIGHT_ARM, BODY["right_shoulder"], 60.0)
    kp[RIGHT_ARM, 2] = 1.0  # the loop does move the arm
    (moved, backend), (still, _) = render(persona, kp[None]), render(persona, persona.landmarks[None])
    assert np.array_equal(moved[0], still[0])
    parts = backend.describe()["last_render"]["parts"]
    assert parts["animated"] == [] and set(parts["not_animated"]) == set(PART_NAMES)
    assert "right_elbow" in parts["not_animated"]["right_upper_arm"]


def test_a_forearm_cut_by_the_frame_rides_on_its_upper_arm(synth):
    """Wrists below the portrait's edge: the forearms are not animated (said so), what shows of
    them moves rigidly with the upper arm (the arm does not break at the elbow)."""
    persona = synth.make_persona(W, H, neck_y=0.85, hips_y=1.2)
    assert persona.landmarks[BODY["right_wrist"], 1] > 1.0
    (frames, backend) = render(persona, persona.landmarks[None])
    parts = backend.describe()["last_render"]["parts"]
    assert "right_upper_arm" in parts["animated"] and "right_forearm" not in parts["animated"]
    assert "outside the portrait" in parts["not_animated"]["right_forearm"]
    assert "moves rigidly with the right_upper_arm" in parts["not_animated"]["right_forearm"]


def test_layered_frames_have_the_output_size_and_dtype(persona, synth):
    loop = synth.make_loop(6, wave=1.5)
    from newsmotion_engine.render import retarget

    for spec in (RenderSpec(W, H), RenderSpec(256, 256), RenderSpec(320, 480)):
        kp = retarget(loop.keypoints, persona.landmarks, persona_size=(W, H))
        frames, backend = render(persona, kp, spec)
        assert len(frames) == 6
        for f in frames:
            assert f.shape == (spec.height, spec.width, 3) and f.dtype == np.uint8 and f.flags.c_contiguous
        assert not np.array_equal(frames[0], frames[3])  # the arm waves
        assert backend.stats["arms_ms"] > 0


def test_the_render_telemetry_says_which_parts_were_animated(tmp_path, synth):
    persona = synth.make_persona(W, H, hands=False)
    loop = synth.make_loop(4)
    out = tmp_path / "warp.mp4"
    tele = render_clip(loop, persona, get_backend("warp", threads=1), RenderSpec(W, H), out)
    stored = RenderTelemetry.read(out.with_suffix(".json"))
    assert stored.backend_info["last_render"]["parts"] == tele.backend_info["last_render"]["parts"]
    assert set(stored.backend_info["last_render"]["parts"]["not_animated"]) == {"left_hand", "right_hand"}


def test_the_parts_report_is_not_part_of_the_backends_identity(persona):
    """Which parts the last render animated is a run report: it must not change the input digest
    of the next render (a clip would otherwise never be 'current')."""
    from newsmotion_engine.render.job import backend_identity

    backend = get_backend("warp", threads=1)
    before = backend_identity(backend)
    list(backend.frames(None, persona, persona.landmarks[None], RenderSpec(W, H)))
    assert "last_render" in backend.describe() and backend_identity(backend) == before


def test_an_arm_whose_shoulder_lies_on_the_face_is_not_cut(synth):
    """A mislocated arm (its shoulder landmark on the face, as the extractor places the profile
    cameraman's): cutting along it would tear the jaw, so it is not animated and the reason says so."""
    persona = synth.make_persona(W, H)
    fx, fy = np.nonzero(persona.face_mask.T > 128)
    lm = persona.landmarks.copy()
    lm[BODY["left_shoulder"], :2] = (fx.mean() / W, fy.mean() / H)
    persona.landmarks = lm
    (frames, backend) = render(persona, lm[None])
    parts = backend.describe()["last_render"]["parts"]
    assert "left_upper_arm" not in parts["animated"] and "right_upper_arm" in parts["animated"]
    assert "lies on the face" in parts["not_animated"]["left_upper_arm"]
    # Nor does the body field follow its joints: a wave of that arm leaves the frame as it is
    # (the cameraman's wrist lies on his camera, which bent with it).
    wave, _ = rotate(lm, np.r_[BODY["left_elbow"], BODY["left_wrist"]], BODY["left_shoulder"], 50.0)
    moved = render(persona, np.stack([lm, wave]))[0]
    assert np.array_equal(moved[0], moved[1])


def test_with_one_arm_on_the_face_the_other_needs_its_hand_to_be_cut(synth):
    """The same misread body with no hands found: nothing confirms the right arm's elbow and
    wrist either (the cameraman's lie on his coat's pocket and his camera), so it is not cut, the
    report says why, and the body field follows only its shoulder — a wave of its elbow and wrist
    leaves the frame as it is. With its hand found, it is cut (the test above)."""
    persona = synth.make_persona(W, H, hands=False)
    fx, fy = np.nonzero(persona.face_mask.T > 128)
    lm = persona.landmarks.copy()
    lm[BODY["left_shoulder"], :2] = (fx.mean() / W, fy.mean() / H)
    persona.landmarks = lm
    frames, backend = render(persona, lm[None])
    parts = backend.describe()["last_render"]["parts"]
    assert parts["animated"] == []
    assert "unconfirmed" in parts["not_animated"]["right_upper_arm"] and "no right hand" in parts["not_animated"]["right_upper_arm"]
    assert parts["not_animated"]["right_forearm"] == "its parent part is not animated"
    assert parts["not_animated"]["right_hand"].startswith("not in the portrait")
    wave, _ = rotate(lm, np.r_[BODY["right_elbow"], BODY["right_wrist"]], BODY["right_shoulder"], 50.0)
    moved = render(persona, np.stack([lm, wave]))[0]
    assert np.array_equal(moved[0], moved[1])
    # A shoulder that moves still moves the body there.
    shrug = lm.copy()
    shrug[BODY["right_shoulder"], 1] -= 0.03
    assert not np.array_equal(moved[0], render(persona, shrug[None])[0][0])


def test_the_upper_arm_cut_stops_at_the_shoulder_joint(persona):
    """What lies past the shoulder joint toward the neck (a collar, a helmet ring) stays with the
    body: no arm layer pixel reaches more than SHOULDER_CAP radii past the joint, against the bone."""
    from newsmotion_engine.render.backends.warp.limbs import SHOULDER_CAP

    backend = get_backend("warp", threads=1)
    prep = backend.prepare(persona, RenderSpec(W, H))
    assert prep.arms
    for arm in prep.arms:
        (a, b) = arm.bones[0]
        u = (b - a) / np.linalg.norm(b - a)
        ys, xs = np.nonzero(arm.layer[..., 3] > 0)
        along = (xs + arm.origin[0] - a[0]) * u[0] + (ys + arm.origin[1] - a[1]) * u[1]
        radius = 0.25 * np.linalg.norm(prep.rest_px[BODY["left_shoulder"]] - prep.rest_px[BODY["right_shoulder"]])
        assert along.min() >= -SHOULDER_CAP * radius - 1.5


def test_an_arm_the_frame_cuts_is_held_back_before_its_cut_comes_into_view(synth):
    """Forearms below the frame: swinging the upper arm 60 degrees out would lift the cut end of
    the sleeve into view (a limb ending in mid-air). The swing is scaled down until the cut stays
    within the layer's apron and tolerance; the report and the telemetry say so."""
    from newsmotion_engine.render.backends.warp.limbs import pose_arm

    persona = synth.make_persona(W, H, neck_y=0.85, hips_y=1.2)
    kp, _ = rotate(persona.landmarks, RIGHT_ARM, BODY["right_shoulder"], 60.0)
    frames, backend = render(persona, kp[None])
    info = backend.describe()["last_render"]
    assert "bottom edge" in info["parts"]["limited"]["right_upper_arm"]
    assert 0.0 <= info["arm_motion_kept"]["right"]["mean"] < 1.0

    prep = backend.prepare(persona, RenderSpec(W, H))
    arm = next(a for a in prep.arms if a.side == "right")
    assert arm.edge_vertices.size > 0 and arm.origin[1] + arm.layer.shape[0] > H  # the apron: past the frame
    dst = np.where((kp[:, 2] > 0)[:, None], kp[:, :2] * prep.size + prep.offset, prep.rest_px)
    verts, kept = pose_arm(arm, prep.rest_px, dst)
    rest = arm.mesh.rest[arm.edge_vertices]

    def exposure(v: np.ndarray) -> float:
        return float(((v[arm.edge_vertices] - rest) * arm.edge_normals).sum(axis=1).max())

    assert 0.0 < kept < 1.0 and exposure(verts) <= arm.edge_tolerance + 1.0
    free = dataclasses.replace(arm, edge_vertices=np.zeros(0, np.int64), edge_normals=np.zeros((0, 2)))
    unlimited, kept_free = pose_arm(free, prep.rest_px, dst)
    assert kept_free == 1.0 and exposure(unlimited) > 1.5 * arm.edge_tolerance  # the full swing would show it


def test_the_upper_arms_cut_by_the_shoulder_moves_with_the_body(persona):
    """Near the shoulder the arm layer's cut runs through the body (chest, collar): its vertices
    there are attached to the body (1 at the inner cut and the cap, 0 on the bone and down at the
    elbow), and an arm swing leaves them where the body's warp puts them, so no seam opens."""
    from newsmotion_engine.render.backends.warp.limbs import _body_attachment, pose_arm

    bone = np.array([[100.0, 100.0], [100.0, 200.0]])  # shoulder -> elbow, straight down; the body lies at -x
    pts = np.array([[75.0, 100.0], [100.0, 130.0], [125.0, 110.0], [75.0, 195.0], [100.0, 93.0]])
    w = _body_attachment(pts, bone, 25.0, away=1.0)
    assert w[0] == 1.0 and w[1] == 0.0 and w[2] == 0.0 and w[3] == 0.0 and w[4] == 1.0
    backend = get_backend("warp", threads=1)
    prep = backend.prepare(persona, RenderSpec(W, H))
    arm = next(a for a in prep.arms if a.side == "right")
    assert arm.attached.size and (arm.attachment > 0).all() and (arm.attachment == 1.0).any()
    kp, _ = rotate(persona.landmarks, RIGHT_ARM, BODY["right_shoulder"], 35.0)
    dst = kp[:, :2] * (W, H)
    still = arm.mesh.rest[arm.attached]  # a body that does not move
    alone, _ = pose_arm(arm, prep.rest_px, dst)
    joined, _ = pose_arm(arm, prep.rest_px, dst, still)
    full = arm.attachment == 1.0
    assert np.allclose(joined[arm.attached[full]], still[full])
    free = np.setdiff1d(np.arange(len(arm.mesh.rest)), arm.attached)
    assert np.array_equal(joined[free], alone[free]) and np.abs(alone[arm.attached[full]] - still[full]).max() > 2.0


def test_the_body_warp_is_inverted_for_the_attached_vertices(persona):
    """``_forward_body`` reads the frame's backward map at the attached vertices: a map that
    samples 3 px to the left (the body moved 3 px right) moves them 3 px right."""
    from newsmotion_engine.render.backends.warp.warp import _forward_body

    prep = get_backend("warp", threads=1).prepare(persona, RenderSpec(W, H))
    arm = prep.arms[0]
    yy, xx = np.mgrid[0:H, 0:W].astype(np.float32)
    backward = np.dstack([xx - 3.0, yy])
    rest = arm.mesh.rest[arm.attached]
    inside = (rest[:, 0] >= 3) & (rest[:, 0] <= W - 1) & (rest[:, 1] >= 0) & (rest[:, 1] <= H - 1)
    assert np.allclose(_forward_body(backward, arm, 0, 0)[inside], rest[inside] + (3.0, 0.0), atol=1e-3)


def test_the_shoulder_attachment_changes_only_pixels_about_the_arm(persona, monkeypatch):
    """The attachment moves arm-layer vertices and the body under the arm's cut, nothing else:
    with it on or off, the frames differ around the swung arm and are identical above the
    shoulders (the head), so a change of the head's measured pose there is the extractor's."""
    import newsmotion_engine.render.backends.warp.limbs as limbs

    kp, _ = rotate(persona.landmarks, RIGHT_ARM, BODY["right_shoulder"], 35.0)
    seq = np.stack([persona.landmarks, kp])
    on = np.stack(render(persona, seq)[0]).astype(int)
    monkeypatch.setattr(limbs, "_body_attachment", lambda points, *a, **k: np.zeros(len(points)))
    off = np.stack(render(persona, seq)[0]).astype(int)
    ls, rs = persona.landmarks[BODY["left_shoulder"], :2] * (W, H), persona.landmarks[BODY["right_shoulder"], :2] * (W, H)
    above = int(min(ls[1], rs[1]) - 0.3 * np.linalg.norm(ls - rs))
    assert above > 20 and np.array_equal(on[:, :above], off[:, :above])
    assert np.abs(on[1] - off[1]).max() > 10
