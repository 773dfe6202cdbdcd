"""A synthetic body in the SMPL file layout, for checks and benchmarks where no SMPL file is at hand
(SMPL itself is licensed and cannot ship). 24 joints in SMPL's tree at roughly SMPL's rest
positions (T-pose, metres, y up, z forward, the body's left on +x), one box per bone skinned to the
joint that moves it, a head box with a nose bump (the furthest-forward head vertex), one marker
vertex per joint that ``J_regressor`` reads, small random blend shapes.

It poses and rasterizes like a real body, so guidance maps and timings exercise the whole path;
its maps are boxes, not a person: never use it for pictures.

    write_synthetic_smpl(Path("SMPL_SYNTH.npz"))
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

__all__ = ["make_smpl_arrays", "write_synthetic_smpl"]

PARENTS = np.array([-1, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 9, 9, 12, 13, 14, 16, 17, 18, 19, 20, 21])
REST = np.array([
    [0, 0, 0], [0.07, -0.09, 0], [-0.07, -0.09, 0], [0, 0.11, 0], [0.1, -0.47, 0], [-0.1, -0.47, 0],
    [0, 0.24, 0], [0.09, -0.87, -0.03], [-0.09, -0.87, -0.03], [0, 0.3, 0], [0.11, -0.92, 0.1],
    [-0.11, -0.92, 0.1], [0, 0.51, 0], [0.08, 0.42, 0], [-0.08, 0.42, 0], [0, 0.6, 0.03],
    [0.19, 0.46, 0], [-0.19, 0.46, 0], [0.45, 0.45, 0], [-0.45, 0.45, 0], [0.7, 0.45, 0],
    [-0.7, 0.45, 0], [0.78, 0.45, 0], [-0.78, 0.45, 0],
], np.float64)  # fmt: skip
# Half-thickness of the box of the bone ending at each joint (its parent -> it).
THICK = {1: 0.07, 2: 0.07, 3: 0.1, 4: 0.06, 5: 0.06, 6: 0.11, 7: 0.045, 8: 0.045, 9: 0.12, 10: 0.04, 11: 0.04,
         12: 0.05, 13: 0.05, 14: 0.05, 16: 0.05, 17: 0.05, 18: 0.045, 19: 0.045, 20: 0.035, 21: 0.035,
         22: 0.03, 23: 0.03}  # fmt: skip


def _box(a: np.ndarray, b: np.ndarray, half: float, depth: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """8 vertices and 12 outward counter-clockwise triangles of a box around segment a -> b."""
    d = b - a
    n = d / (np.linalg.norm(d) + 1e-12)
    up = np.array([0, 0, 1.0]) if abs(n[2]) < 0.9 else np.array([1.0, 0, 0])
    u = np.cross(n, up)
    u /= np.linalg.norm(u)
    w = np.cross(n, u)
    dz = half if depth is None else depth
    corners = [p + su * half * u + sw * dz * w for p in (a, b) for su in (-1, 1) for sw in (-1, 1)]
    v = np.array(corners)
    quads = [(0, 1, 3, 2), (4, 6, 7, 5), (0, 4, 5, 1), (2, 3, 7, 6), (0, 2, 6, 4), (1, 5, 7, 3)]
    tris = []
    centre = v.mean(0)
    for q in quads:
        for t in ((q[0], q[1], q[2]), (q[0], q[2], q[3])):
            p0, p1, p2 = v[list(t)]
            if np.dot(np.cross(p1 - p0, p2 - p0), (p0 + p1 + p2) / 3 - centre) < 0:
                t = (t[0], t[2], t[1])
            tris.append(t)
    return v, np.array(tris)


def make_smpl_arrays(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    verts, faces, owner = [], [], []

    def add(v, f, joint):
        faces.append(f + sum(len(x) for x in verts))
        verts.append(v)
        owner.extend([joint] * len(v))

    for j in range(1, 24):
        if j in THICK:
            v, f = _box(REST[PARENTS[j]], REST[j], THICK[j])
            add(v, f, PARENTS[j])
    head_top = REST[15] + np.array([0, 0.2, 0])
    v, f = _box(REST[15] - np.array([0, 0.06, 0]), head_top, 0.09, depth=0.1)
    add(v, f, 15)
    v, f = _box(REST[15] + np.array([0, -0.03, 0.08]), REST[15] + np.array([0, -0.01, 0.15]), 0.02)
    add(v, f, 15)  # the nose
    for j in (22, 23):  # hands past the hand joints
        v, f = _box(REST[j], REST[j] + np.array([np.sign(REST[j, 0]) * 0.08, 0, 0]), 0.03)
        add(v, f, j)
    for j in (10, 11):  # feet
        v, f = _box(REST[j] - np.array([0, 0, 0.08]), REST[j] + np.array([0, 0, 0.06]), 0.04)
        add(v, f, j)
    markers = len(owner)
    verts.append(REST.copy())  # one marker vertex per joint (in no face)
    owner.extend(range(24))
    v_template = np.concatenate(verts).astype(np.float64)
    V = len(v_template)
    weights = np.zeros((V, 24))
    weights[np.arange(V), owner] = 1.0
    J_regressor = np.zeros((24, V))
    J_regressor[np.arange(24), markers + np.arange(24)] = 1.0
    kintree = np.stack([np.where(PARENTS < 0, 4294967295, PARENTS), np.arange(24)]).astype(np.int64)
    return {
        "v_template": v_template, "shapedirs": rng.normal(0, 1e-3, (V, 3, 10)), "posedirs": rng.normal(0, 1e-4, (V, 3, 207)),
        "J_regressor": J_regressor, "kintree_table": kintree, "weights": weights, "f": np.concatenate(faces).astype(np.uint32),
    }  # fmt: skip


def write_synthetic_smpl(path: Path, **overrides) -> Path:
    """The synthetic body as an ``.npz`` at ``path`` (``overrides`` replace arrays)."""
    np.savez(path, **{**make_smpl_arrays(), **overrides})
    return path
