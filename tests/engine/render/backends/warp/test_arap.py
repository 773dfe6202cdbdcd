"""The ARAP mesh solver: rigid motions are reproduced, handles are followed, meshes cover masks."""

from __future__ import annotations

import numpy as np
import pytest

from newsmotion_engine.render.backends.warp.arap import ArapMesh, grid_mesh


def bar(w: int = 120, h: int = 30, cell: int = 10):
    mask = np.zeros((h + 20, w + 20), bool)
    mask[10 : 10 + h, 10 : 10 + w] = True
    return grid_mesh(mask, cell)


def rigid(points: np.ndarray, degrees: float, centre, shift) -> np.ndarray:
    a = np.deg2rad(degrees)
    R = np.array([[np.cos(a), -np.sin(a)], [np.sin(a), np.cos(a)]])
    return (points - centre) @ R.T + np.asarray(centre) + np.asarray(shift)


def test_grid_mesh_covers_the_mask_with_consistent_triangles():
    mask = np.zeros((50, 70), bool)
    mask[5:40, 8:30] = True
    mask[20:25, 30:66] = True  # an L shape
    verts, tris = grid_mesh(mask, 8, origin=(100.0, 200.0))
    assert verts.dtype == np.float64 and tris.dtype == np.int32 and tris.max() < len(verts)
    assert np.unique(tris).size == len(verts)  # no unused vertex
    # Every mask pixel lies in some triangle's box (the mesh covers the mask).
    ys, xs = np.nonzero(mask)
    lo, hi = verts[tris].min(axis=1), verts[tris].max(axis=1)
    px = np.stack([xs + 100.0, ys + 200.0], axis=1)
    inside = ((px[:, None] >= lo[None]) & (px[:, None] <= hi[None])).all(axis=2).any(axis=1)
    assert inside.all()
    # Triangles have the same orientation (no flipped one) and non-zero area.
    e1 = verts[tris[:, 1]] - verts[tris[:, 0]]
    e2 = verts[tris[:, 2]] - verts[tris[:, 0]]
    cross = e1[:, 0] * e2[:, 1] - e1[:, 1] * e2[:, 0]
    assert (cross > 0).all() or (cross < 0).all()


@pytest.mark.parametrize("degrees", [30.0, 90.0, -120.0])
def test_a_rigidly_moved_bone_is_reproduced_from_the_rest_pose(degrees):
    """Handles along the bar's bone rotate about one end and shift: ARAP, started from the rest
    pose (not from the answer), converges to that rigid motion for every vertex."""
    verts, tris = bar()
    bone_y = verts[:, 1].mean()
    handles = np.nonzero(np.abs(verts[:, 1] - bone_y) < 6)[0]
    assert handles.size >= 5
    centre, shift = (10.0, bone_y), (15.0, -8.0)
    target = rigid(verts, degrees, centre, shift)
    mesh = ArapMesh(verts, tris, handles)
    x = mesh.solve(target[handles], verts, iterations=80)
    assert np.abs(x - target).max() < 0.75  # sub-pixel everywhere, also off the bone
    rough = mesh.solve(target[handles], verts, iterations=1)
    assert np.abs(rough - target).max() > 2 * np.abs(x - target).max()  # the iterations did it


def test_the_rigid_motion_is_a_fixed_point():
    verts, tris = bar()
    handles = np.array([0, 5, len(verts) - 1])
    target = rigid(verts, 47.0, (60.0, 25.0), (3.0, 4.0))
    x = ArapMesh(verts, tris, handles).solve(target[handles], target, iterations=3)
    np.testing.assert_allclose(x, target, atol=1e-6)


def test_bending_keeps_the_segments_rigid():
    """Left half fixed, right half's handles rotated about the middle: the far end of the bar is
    still rigid (its edge lengths keep their rest length) although the middle bends."""
    verts, tris = bar(160, 30, 10)
    bone_y = verts[:, 1].mean()
    on_bone = np.abs(verts[:, 1] - bone_y) < 6
    left = np.nonzero(on_bone & (verts[:, 0] < 60))[0]
    right = np.nonzero(on_bone & (verts[:, 0] > 110))[0]
    handles = np.concatenate([left, right])
    target = verts.copy()
    target[right] = rigid(verts[right], 60.0, (85.0, bone_y), (0, 0))
    x = ArapMesh(verts, tris, handles).solve(target[handles], verts, iterations=60)
    far = np.nonzero(verts[:, 0] > 130)[0]
    sub = [(a, b) for a in far for b in far if a < b]
    rest_len = np.array([np.linalg.norm(verts[a] - verts[b]) for a, b in sub])
    new_len = np.array([np.linalg.norm(x[a] - x[b]) for a, b in sub])
    assert np.abs(new_len - rest_len).max() < 0.05 * rest_len.max()
    # And the far end really turned (about 60 degrees).
    d0, d1 = verts[far].mean(0) - (85.0, bone_y), x[far].mean(0) - (85.0, bone_y)
    turn = np.degrees(np.arctan2(d1[1], d1[0]) - np.arctan2(d0[1], d0[0]))
    assert 50 < turn < 70


def test_an_empty_mesh_is_refused():
    with pytest.raises(ValueError, match="triangle"):
        ArapMesh(np.zeros((0, 2)), np.zeros((0, 3), np.int32), np.zeros(0, np.int64))
