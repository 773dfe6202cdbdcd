"""The champ backend's SMPL side on a synthetic body in the SMPL file layout: reading the file
(.npz and the released pickle's chumpy / sparse storage), refusing what is not an SMPL model,
skinning, the z-buffer, the guidance maps' encodings, and the 2D pose fit."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from newsmotion_engine.errors import BadInputError  # noqa: E402
from newsmotion_engine.render.backends.champ.fit import fit_pose, head_vertex  # noqa: E402
from newsmotion_engine.render.backends.champ.maps import guidance_frames, place_body, semantic_colours  # noqa: E402
from newsmotion_engine.render.backends.champ.raster import interpolate, rasterize  # noqa: E402
from newsmotion_engine.render.backends.champ.smpl import SmplModelMissingError, load_smpl_model, pose_body  # noqa: E402
from newsmotion_engine.skeleton import BODY, LEFT_HAND_START, NUM_KEYPOINTS, RIGHT_HAND_START  # noqa: E402


def test_npz_and_released_pickle_layout_read_the_same(smpl_npz, smpl_pkl):
    a, b = load_smpl_model(smpl_npz), load_smpl_model(smpl_pkl)
    for name in ("v_template", "shapedirs", "posedirs", "j_regressor", "weights", "faces", "parents"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
    assert a.parents[0] == -1 and list(a.parents[1:4]) == [0, 0, 0] and a.parents[15] == 12
    np.testing.assert_allclose(a.rest_joints()[16], [0.19, 0.46, 0], atol=1e-6)


def test_bad_smpl_files_are_refused_naming_the_file(tmp_path, smpl_npz):
    with pytest.raises(SmplModelMissingError, match=r"smpl\.is\.tue\.mpg\.de.*-o smpl_model=PATH"):
        load_smpl_model(None)
    with pytest.raises(BadInputError, match="not found"):
        load_smpl_model(tmp_path / "nope.pkl")
    data = dict(np.load(smpl_npz))
    del data["posedirs"]
    np.savez(tmp_path / "partial.npz", **data)
    with pytest.raises(BadInputError, match=r"partial\.npz.*missing posedirs"):
        load_smpl_model(tmp_path / "partial.npz")
    data = dict(np.load(smpl_npz))
    data["weights"] = data["weights"][:, :20]
    np.savez(tmp_path / "joints.npz", **data)
    with pytest.raises(BadInputError, match="weights has shape"):
        load_smpl_model(tmp_path / "joints.npz")
    # A pickle that would run code is refused before anything runs.
    (tmp_path / "evil.pkl").write_bytes(pickle.dumps({"v_template": __import__("os").getcwd}))
    with pytest.raises(BadInputError, match=r"evil\.pkl.*posix\.getcwd|evil\.pkl.*os"):
        load_smpl_model(tmp_path / "evil.pkl")


def test_skinning_moves_only_what_the_rotated_joint_carries(smpl_npz):
    model = load_smpl_model(smpl_npz)
    rest, joints = pose_body(model, np.zeros((1, 24, 3), np.float32))
    # Zero pose: the template (pose blend shapes vanish at identity rotations).
    np.testing.assert_allclose(rest[0], model.v_template, atol=1e-6)
    np.testing.assert_allclose(joints[0], model.rest_joints(), atol=1e-6)
    pose = np.zeros((1, 24, 3), np.float32)
    pose[0, 16] = [0, 0, -np.pi / 2]  # left shoulder: the arm from pointing +x to pointing down
    moved, joints = pose_body(model, pose)
    np.testing.assert_allclose(joints[0, 18], model.rest_joints()[16] + [-0.01, -0.26, 0], atol=1e-5)  # (0.26, -0.01) turned -90°
    carried = np.isin(model.part_labels(), [16, 18, 20, 22])
    assert np.abs(moved[0][~carried] - model.v_template[~carried]).max() < 1e-3  # pose blend shapes only (1e-4 scale)
    assert np.abs(moved[0][carried] - model.v_template[carried]).max() > 0.2


def test_zbuffer_keeps_the_nearest_triangle_and_covers_exactly():
    # Two overlapping squares (two triangles each); the nearer one (z=2) covers the farther (z=1).
    quad = lambda x0, y0, x1, y1, z: [[x0, y0, z], [x1, y0, z], [x1, y1, z], [x0, y1, z]]  # noqa: E731
    verts = np.array(quad(2, 2, 12, 12, 1.0) + quad(6, 6, 16, 16, 2.0), np.float32)
    faces = np.array([[0, 1, 2], [0, 2, 3], [4, 5, 6], [4, 6, 7]])
    frags = rasterize(verts, faces, 20, 20)
    assert frags.mask.sum() == 10 * 10 + 10 * 10 - 6 * 6  # pixel centres inside the union, no cracks on the diagonals
    assert (frags.face[8, 8] in (2, 3)) and frags.depth[8, 8] == pytest.approx(2.0)
    assert frags.face[3, 3] in (0, 1) and not frags.mask[0, 0] and not frags.mask[17, 17]
    # Interpolation reproduces a linear function of position.
    values = verts[:, :1] * 2.0
    out = interpolate(frags, faces, values)
    np.testing.assert_allclose(out[4, 5, 0], 2 * 5.5, atol=1e-4)


def test_several_frames_per_pass_give_each_frames_own_fragments(smpl_npz):
    """rasterize_frames (a GPU's path: a chunk of frames per pass) against rasterize frame by frame:
    the same bits, whatever the chunk; the chunk size follows the candidate budget."""
    from newsmotion_engine.render.backends.champ.raster import frames_per_chunk, rasterize_frames

    model = load_smpl_model(smpl_npz)
    pose = np.random.default_rng(0).normal(0, 0.3, (5, 24, 3)).astype(np.float32)
    verts, _ = pose_body(model, pose)
    px = verts * np.array([60, -60, 60], np.float32) + np.array([50, 90, 0], np.float32)  # overlapping parts, some off-frame
    one = [rasterize(px[t], model.faces, 100, 160) for t in range(5)]
    for chunk in (2, 5, None):
        many = list(rasterize_frames(px, model.faces, 100, 160, chunk=chunk))
        assert len(many) == 5
        for a, b in zip(one, many):
            assert np.array_equal(a.face, b.face) and np.array_equal(a.bary, b.bary) and np.array_equal(a.depth, b.depth)
    assert one[0].mask.sum() > 500 and (one[0].face < len(model.faces)).all()
    assert frames_per_chunk(px, model.faces) == 5  # a small body: the whole clip in one pass
    assert frames_per_chunk(px, model.faces, candidates=1) == 1


def test_chunked_guidance_maps_equal_the_per_frame_ones(smpl_npz, monkeypatch):
    import newsmotion_engine.render.backends.champ.maps as maps_module

    model = load_smpl_model(smpl_npz)
    pose = np.random.default_rng(1).normal(0, 0.2, (4, 24, 3)).astype(np.float32)
    kp = _project(model, pose, scale=110, offset=(100, 200), size=(200, 400))
    box = (0.0, 0.0, 200.0, 400.0)
    per_frame = list(guidance_frames(model, pose, kp, box, 200, 400, workers=2))
    monkeypatch.setattr(maps_module, "rasterizes_in_chunks", lambda device: True)  # the GPU's path, on the CPU
    chunked = list(guidance_frames(model, pose, kp, box, 200, 400, workers=2))
    assert len(chunked) == 4
    for a, b in zip(per_frame, chunked):
        assert all(np.array_equal(a[k], b[k]) for k in a)


def test_guidance_maps_encodings(smpl_npz):
    model = load_smpl_model(smpl_npz)
    colours = semantic_colours(model)
    labels = model.part_labels()
    import cv2

    viridis = cv2.applyColorMap(np.array([[150]], np.uint8), cv2.COLORMAP_VIRIDIS)[0, 0, ::-1] / 255.0
    np.testing.assert_allclose(colours[labels == 15][0], viridis, atol=1e-6)  # head: viridis(10 x 15), RGB
    # The rest pose facing the camera, placed by its own projected joints.
    pose = np.zeros((1, 24, 3), np.float32)
    kp = _project(model, pose, scale=110, offset=(100, 200), size=(200, 400))  # the whole T-pose in frame
    box = (0.0, 0.0, 200.0, 400.0)
    maps = next(guidance_frames(model, pose, kp, box, 200, 400))
    assert set(maps) == {"depth", "normal", "semantic_map", "dwpose"}
    assert all(m.shape == (400, 200, 3) and m.dtype == np.uint8 for m in maps.values())
    body = maps["semantic_map"].any(-1)
    assert (maps["depth"][~body] == 0).all() and (maps["normal"][~body] == 0).all()
    # Facing the camera: decoded normals point at the viewer on average, left and right balance.
    n = maps["normal"][body].astype(np.float32) / 255 * 2 - 1
    assert n[:, 2].mean() > 0.6 and abs(n[:, 0].mean()) < 0.1
    # Depth is grey, lit on the body (>= 0.2), and the nose (nearer than all but the toes) is among the brightest.
    d = maps["depth"][body]
    assert (d[:, 0] == d[:, 2]).all() and d[:, 0].min() >= 50
    p = place_body(model, pose, kp, box).verts[0, head_vertex(model)]
    y, x = int(p[1]), int(p[0])
    assert maps["depth"][y - 3 : y + 4, x - 3 : x + 4, 0].max() > np.percentile(d[:, 0], 95)


def _project(model, pose, *, scale, offset, size):
    """Keypoints [T, 133, 3] normalized to ``size`` of the body posed by ``pose`` under a
    weak-perspective camera (the fit's model)."""
    from newsmotion_engine.render.backends.champ.fit import JOINT_PAIRS

    verts, joints = pose_body(model, pose)
    T = pose.shape[0]
    kp = np.zeros((T, NUM_KEYPOINTS, 3), np.float32)

    def put(idx, p3):
        kp[:, idx, 0] = (p3[:, 0] * scale + offset[0]) / size[0]
        kp[:, idx, 1] = (-p3[:, 1] * scale + offset[1]) / size[1]
        kp[:, idx, 2] = 1.0

    for j, c in JOINT_PAIRS:
        put(c, joints[:, j])
    put(BODY["nose"], verts[:, head_vertex(model)])
    put(BODY["left_ear"], joints[:, 15] + [0.05, 0, 0])
    put(BODY["right_ear"], joints[:, 15] - [0.05, 0, 0])
    return kp


def test_fit_recovers_a_posed_body_from_its_2d_joints(smpl_npz):
    model = load_smpl_model(smpl_npz)
    T = 4
    true = np.zeros((T, 24, 3), np.float32)
    true[:, 16, 2] = np.linspace(-1.3, -0.6, T)  # left arm lowered, raised over the clip
    true[:, 17, 2] = np.linspace(1.3, 0.9, T)  # right arm lowered
    true[:, 18, 2] = -0.5  # left elbow bent in the picture plane
    kp = _project(model, true, scale=400, offset=(360, 500), size=(720, 1280))
    fit = fit_pose(model, kp, (720, 1280))
    assert fit.pose.shape == (T, 24, 3) and fit.error.shape == (T,)
    assert fit.error.max() < 0.03  # torso lengths
    _, got = pose_body(model, fit.pose)
    _, want = pose_body(model, true)
    # Wrists land where they were, in the picture plane (depth is not observed).
    for j in (20, 21):
        d = np.linalg.norm((got[:, j, :2] - got[:, 0, :2]) - (want[:, j, :2] - want[:, 0, :2]), axis=-1)
        assert d.max() < 0.04, (j, d)  # metres


def test_fit_needs_shoulders():
    kp = np.zeros((2, NUM_KEYPOINTS, 3), np.float32)
    kp[:, LEFT_HAND_START, 2] = kp[:, RIGHT_HAND_START, 2] = 1
    from newsmotion_engine.render.backends.champ.fit import target_points, _torso

    with pytest.raises(ValueError, match="shoulders"):
        _torso(*target_points(kp, 0.3))


def test_guidance_frames_drawn_on_threads_come_out_in_order_and_equal_one_by_one(smpl_npz):
    """The frames of a clip are drawn a few at a time on worker threads; handed out in the
    clip's order, each exactly as drawn alone on one thread."""
    model = load_smpl_model(smpl_npz)
    rng = np.random.default_rng(3)
    pose = (rng.normal(size=(20, 24, 3)) * 0.15).astype(np.float32)
    kp = _project(model, pose, scale=110, offset=(100, 200), size=(200, 400))
    box = (0.0, 0.0, 200.0, 400.0)
    threaded = list(guidance_frames(model, pose, kp, box, 200, 400, workers=4))
    alone = list(guidance_frames(model, pose, kp, box, 200, 400, workers=1))
    assert len(threaded) == len(alone) == 20
    for a, b in zip(threaded, alone):
        assert all(np.array_equal(a[t], b[t]) for t in a)
    assert not all(np.array_equal(threaded[0]["normal"], f["normal"]) for f in threaded[1:])  # the frames differ
