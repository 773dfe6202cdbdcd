"""A tiny synthetic body in the SMPL file layout (SMPL itself is licensed and cannot ship): 24
joints in SMPL's tree at roughly SMPL's rest positions (T-pose, metres, y up, z forward, the
body's left on +x), one box per bone skinned to the joint that moves it, a head box with a nose
bump (the furthest-forward head vertex), one marker vertex per joint that ``J_regressor`` reads,
small random blend shapes. Written as ``.npz`` or as a Python-2-style pickle whose ``shapedirs``
is a chumpy object and ``J_regressor`` a scipy sparse matrix, as the released pickle stores them."""

from __future__ import annotations

import pickle
import sys
import types
from pathlib import Path

import numpy as np
import pytest

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


def write_npz(path: Path, **overrides) -> Path:
    np.savez(path, **{**make_smpl_arrays(), **overrides})
    return path


def write_pickle(path: Path) -> Path:
    """The released pickle's way: ``shapedirs`` a chumpy ``Ch`` (state ``{'x': array}``),
    ``J_regressor`` a scipy ``csc_matrix``; protocol 2, as Python 2 wrote it."""
    import scipy.sparse

    arrays = make_smpl_arrays()
    fake = types.ModuleType("chumpy.ch")

    class Ch:  # pickled by reference as chumpy.ch.Ch; its state is what chumpy stores
        def __init__(self, x):
            self.x = x

    Ch.__module__, Ch.__qualname__ = "chumpy.ch", "Ch"
    fake.Ch = Ch
    saved = {k: sys.modules.get(k) for k in ("chumpy", "chumpy.ch")}
    sys.modules["chumpy"] = types.ModuleType("chumpy")
    sys.modules["chumpy.ch"] = fake
    try:
        data = {**arrays, "shapedirs": Ch(arrays["shapedirs"]), "J_regressor": scipy.sparse.csc_matrix(arrays["J_regressor"])}
        path.write_bytes(pickle.dumps(data, protocol=2))
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v
    return path


@pytest.fixture(autouse=True)
def one_torch_thread():
    """The tiny models' ops are small: one thread is faster than two sharing a busy machine."""
    torch = pytest.importorskip("torch")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def smpl_npz(tmp_path) -> Path:
    return write_npz(tmp_path / "SMPL_SYNTH.npz")


@pytest.fixture
def smpl_pkl(tmp_path) -> Path:
    return write_pickle(tmp_path / "basicModel_synth.pkl")
