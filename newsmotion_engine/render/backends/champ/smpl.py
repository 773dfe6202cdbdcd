"""A user's SMPL body model: reading the file, and posing it (linear blend skinning).

Champ's guidance maps (depth, normal, semantic) are renders of an SMPL body. The SMPL model file is
licensed (https://smpl.is.tue.mpg.de) and cannot ship with newsmotion: the ``champ`` backend takes
the user's file through ``-o smpl_model=PATH``.

File layout: what the official loader (``smplx.SMPL``, used by Champ's 4D-Humans preprocessing)
reads — a pickle (``basicModel_neutral_lbs_10_207_0_v1.0.0.pkl``, Python-2 era, some arrays stored
as chumpy objects and ``J_regressor`` as a scipy sparse matrix) or an ``.npz`` with the same keys:

==================  ===============  ==========================================
key                 shape            what
==================  ===============  ==========================================
``v_template``      [V, 3]           rest-pose vertices (metres, y up, z forward)
``shapedirs``       [V, 3, B]        shape blend shapes (B betas, usually 10)
``posedirs``        [V, 3, 207]      pose blend shapes (23 joints x 9)
``J_regressor``     [24, V]          joints from vertices
``kintree_table``   [2, 24]          row 0: parent of row 1's joint (root: -1)
``weights``         [V, 24]          skinning weights
``f``               [F, 3]           triangles (counter-clockwise seen from outside)
==================  ===============  ==========================================

The pickle is read with a restricted unpickler: only numpy arrays, scipy sparse matrices and
chumpy objects (rebuilt as plain arrays from their stored state, so chumpy is not needed) are
allowed; any other object in the file is refused (a pickle can otherwise run code).

Posing (:func:`pose_body`) is SMPL's linear blend skinning (Loper et al., "SMPL: A Skinned
Multi-Person Linear Model", SIGGRAPH Asia 2015): Rodrigues rotations, pose blend shapes,
forward kinematics along ``kintree_table``, skinning by ``weights``.
"""

from __future__ import annotations

import hashlib
import io
import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from newsmotion_engine.errors import BadInputError
from newsmotion_engine.render.base import BackendOptionError

__all__ = [
    "JOINTS",
    "NUM_JOINTS",
    "SMPL_KEYS",
    "SmplModel",
    "SmplModelMissingError",
    "kinematics",
    "load_smpl_model",
    "pose_body",
    "rodrigues",
    "smpl_missing_message",
]

NUM_JOINTS = 24
SMPL_KEYS = ("v_template", "shapedirs", "posedirs", "J_regressor", "kintree_table", "weights", "f")
# SMPL's 24 joints in order (the body's left is +x).
JOINTS = (
    "pelvis", "left_hip", "right_hip", "spine1", "left_knee", "right_knee", "spine2", "left_ankle",
    "right_ankle", "spine3", "left_foot", "right_foot", "neck", "left_collar", "right_collar", "head",
    "left_shoulder", "right_shoulder", "left_elbow", "right_elbow", "left_wrist", "right_wrist",
    "left_hand", "right_hand",
)  # fmt: skip
SMPL_DOWNLOAD = "https://smpl.is.tue.mpg.de (e.g. basicModel_neutral_lbs_10_207_0_v1.0.0.pkl)"


class SmplModelMissingError(BackendOptionError):
    """The champ backend was configured without an SMPL model file."""


def smpl_missing_message() -> str:
    """What the champ backend needs when no SMPL model file is given: the file, where, the option."""
    return (f"champ needs an SMPL body model file for its depth/normal/semantic guidance (licensed, not shipped): "
            f"download it from {SMPL_DOWNLOAD} and pass -o smpl_model=PATH")  # fmt: skip


@dataclass(frozen=True)
class SmplModel:
    """A loaded SMPL model (float32 numpy arrays; ``parents[0] == -1``); ``sha256`` is the file's."""

    path: Path
    sha256: str
    v_template: np.ndarray  # [V, 3]
    shapedirs: np.ndarray  # [V, 3, B]
    posedirs: np.ndarray  # [V, 3, 207]
    j_regressor: np.ndarray  # [24, V]
    parents: np.ndarray  # int64 [24]
    weights: np.ndarray  # [V, 24]
    faces: np.ndarray  # int64 [F, 3]

    @property
    def vertices(self) -> int:
        return int(self.v_template.shape[0])

    def rest_joints(self) -> np.ndarray:
        """float32 ``[24, 3]``: the mean shape's joints (betas = 0)."""
        return (self.j_regressor @ self.v_template).astype(np.float32)

    def part_labels(self) -> np.ndarray:
        """int64 ``[V]``: each vertex's body part, the joint with its largest skinning weight (as
        Champ's semantic renderer labels vertices)."""
        return np.argmax(self.weights, axis=1)


# ----------------------------------------------------------------------------- reading
class _Stored:
    """Stand-in for a chumpy object or a scipy sparse matrix in the pickle: keeps its state."""

    kind = "?"
    state: Any = None  # set by __setstate__ (unpickling does not call __init__)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __setstate__(self, state: Any) -> None:
        self.state = state


class _Chumpy(_Stored):
    kind = "chumpy"


class _Sparse(_Stored):
    kind = "sparse"


_NUMPY_ALLOWED = {
    ("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
    ("numpy", "ndarray"), ("numpy", "dtype"), ("numpy.core.multiarray", "scalar"),
    ("numpy._core.multiarray", "scalar"),
    ("_codecs", "encode"),  # how protocol-2 pickles written by Python 3 store bytes
}  # fmt: skip


class _SmplUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _NUMPY_ALLOWED:
            return super().find_class(module, name)
        if module.split(".")[0] == "chumpy":
            return _Chumpy
        if module.split(".")[0] == "scipy" and name in ("csc_matrix", "csr_matrix", "coo_matrix"):
            return type(name, (_Sparse,), {"format": name[:3]})
        if module == "copy_reg" and name == "_reconstructor" or module == "copyreg" and name == "_reconstructor":
            return _reconstructor
        if module in ("__builtin__", "builtins") and name == "object":
            return object
        raise pickle.UnpicklingError(f"the file holds a {module}.{name} object, which an SMPL model file does not")


def _reconstructor(cls: Any, base: Any, state: Any) -> Any:
    """Python 2's ``copy_reg._reconstructor`` for the allowed classes only."""
    if isinstance(cls, type) and issubclass(cls, _Stored):
        return cls()
    raise pickle.UnpicklingError(f"the file reconstructs a {cls!r} object, which an SMPL model file does not")


def _plain(value: Any, key: str, path: Path) -> np.ndarray:
    """An array from a pickled value: numpy as is, chumpy from its stored ``x``, sparse densified."""
    if isinstance(value, _Chumpy):
        state = value.state if isinstance(value.state, dict) else {}
        if "x" not in state:
            raise BadInputError(path, f"{key} is a chumpy expression, not a stored array; export the model as .npz")
        return np.asarray(state["x"])
    if isinstance(value, _Sparse):
        import scipy.sparse

        s = value.state if isinstance(value.state, dict) else {}
        shape = s.get("_shape") or s.get("shape")
        try:
            if value.format == "coo":
                m = scipy.sparse.coo_matrix((s["data"], (s["row"], s["col"])), shape=shape)
            else:
                cls = scipy.sparse.csc_matrix if value.format == "csc" else scipy.sparse.csr_matrix
                m = cls((s["data"], s["indices"], s["indptr"]), shape=shape)
        except (KeyError, ValueError, TypeError) as exc:
            raise BadInputError(path, f"{key} is a damaged sparse matrix ({exc})") from None
        return np.asarray(m.toarray())
    if hasattr(value, "toarray"):  # an npz never holds these; kept for safety
        return np.asarray(value.toarray())
    return np.asarray(value)


def _read_raw(path: Path) -> dict[str, Any]:
    data = path.read_bytes()
    if path.suffix.lower() == ".npz":
        try:
            with np.load(io.BytesIO(data), allow_pickle=False) as z:
                return {k: z[k] for k in z.files}
        except (ValueError, OSError) as exc:
            raise BadInputError(path, f"is not a readable .npz SMPL model ({exc})") from None
    try:
        raw = _SmplUnpickler(io.BytesIO(data), encoding="latin1").load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, IndexError) as exc:
        raise BadInputError(path, f"is not a readable SMPL model pickle ({exc})") from None
    if not isinstance(raw, dict):
        raise BadInputError(path, "is not an SMPL model (the pickle holds no dictionary)")
    return raw


def load_smpl_model(path: str | Path | None) -> SmplModel:
    """Read and check an SMPL model file (``.pkl`` or ``.npz``).

    Raises:
        SmplModelMissingError: ``path`` is None (the message says what is needed and where from).
        BadInputError: the file is missing, unreadable, lacks a key or has inconsistent shapes.
    """
    if path is None:
        raise SmplModelMissingError(smpl_missing_message())
    path = Path(path).expanduser()
    if not path.is_file():
        raise BadInputError(path, "SMPL model file not found (download it from https://smpl.is.tue.mpg.de)")
    raw = _read_raw(path)
    missing = [k for k in SMPL_KEYS if k not in raw]
    if missing:
        raise BadInputError(path, f"is not an SMPL model: missing {', '.join(missing)}")
    arr = {k: _plain(raw[k], k, path) for k in SMPL_KEYS}
    v = arr["v_template"]
    if v.ndim != 2 or v.shape[1] != 3 or v.shape[0] < 4:
        raise BadInputError(path, f"v_template has shape {list(v.shape)}, expected [V, 3]")
    n = v.shape[0]
    expect = {
        "shapedirs": (n, 3, None), "posedirs": (n, 3, (NUM_JOINTS - 1) * 9), "J_regressor": (NUM_JOINTS, n),
        "kintree_table": (2, NUM_JOINTS), "weights": (n, NUM_JOINTS), "f": (None, 3),
    }  # fmt: skip
    for key, shape in expect.items():
        got = arr[key].shape
        if len(got) != len(shape) or any(s is not None and s != g for s, g in zip(shape, got)):
            want = [s if s is not None else "*" for s in shape]
            raise BadInputError(path, f"{key} has shape {list(got)}, expected {want} (SMPL has 24 joints)")
    faces = arr["f"].astype(np.int64)
    if faces.size == 0 or faces.min() < 0 or faces.max() >= n:
        raise BadInputError(path, f"f indexes vertices outside 0..{n - 1}")
    kin = arr["kintree_table"].astype(np.int64)
    parents = np.full(NUM_JOINTS, -1, np.int64)
    for parent, child in zip(kin[0], kin[1]):
        if not 0 <= child < NUM_JOINTS:
            raise BadInputError(path, f"kintree_table names joint {child}, outside 0..23")
        parents[child] = -1 if parent >= NUM_JOINTS or parent < 0 else parent
    if parents[0] != -1 or any(parents[j] < 0 or parents[j] >= j for j in range(1, NUM_JOINTS)):
        raise BadInputError(path, "kintree_table is not SMPL's tree (joint 0 the root, each parent before its child)")
    return SmplModel(
        path=path, sha256=hashlib.sha256(path.read_bytes()).hexdigest(),
        v_template=v.astype(np.float32), shapedirs=arr["shapedirs"].astype(np.float32),
        posedirs=arr["posedirs"].astype(np.float32), j_regressor=arr["J_regressor"].astype(np.float32),
        parents=parents, weights=arr["weights"].astype(np.float32), faces=faces,
    )  # fmt: skip


# ----------------------------------------------------------------------------- posing
def rodrigues(axis_angle):
    """Rotation matrices ``[..., 3, 3]`` of axis-angle vectors ``[..., 3]`` (torch, differentiable)."""
    import torch

    angle = torch.sqrt((axis_angle * axis_angle).sum(-1, keepdim=True) + 1e-12)
    k = axis_angle / angle
    kx, ky, kz = k.unbind(-1)
    zero = torch.zeros_like(kx)
    K = torch.stack([zero, -kz, ky, kz, zero, -kx, -ky, kx, zero], -1).reshape(*k.shape[:-1], 3, 3)
    s, c = torch.sin(angle)[..., None], torch.cos(angle)[..., None]
    eye = torch.eye(3, dtype=axis_angle.dtype, device=axis_angle.device)
    return eye + s * K + (1 - c) * (K @ K)


def _levels(parents: np.ndarray) -> list[np.ndarray]:
    """The non-root joints grouped by depth in the tree (each group's parents are all earlier)."""
    depth = np.zeros(len(parents), np.int64)
    for j in range(1, len(parents)):
        depth[j] = depth[parents[j]] + 1
    return [np.flatnonzero(depth == d) for d in range(1, int(depth.max()) + 1)]


def kinematics(rot, rest_joints, parents):
    """World rotations ``[T, 24, 3, 3]`` and positions ``[T, 24, 3]`` of the joints for local
    rotations ``rot [T, 24, 3, 3]`` (torch, differentiable); one step per tree level."""
    import torch

    parents = np.asarray(parents)
    rel = rest_joints.clone()
    rel[1:] = rest_joints[1:] - rest_joints[torch.as_tensor(parents[1:])]
    R = rot[:, :1].expand(-1, NUM_JOINTS, -1, -1)
    P = rest_joints[None, :1].expand(rot.shape[0], NUM_JOINTS, -1)
    for group in _levels(parents):
        c, p = torch.as_tensor(group), torch.as_tensor(parents[group])
        Rp = R[:, p]
        R = R.index_copy(1, c, Rp @ rot[:, c])
        P = P.index_copy(1, c, P[:, p] + (Rp @ rel[c][None, :, :, None])[..., 0])
    return R, P


def pose_body(model: SmplModel, pose) -> tuple[np.ndarray, np.ndarray]:
    """Posed vertices ``[T, V, 3]`` and joints ``[T, 24, 3]`` (float32 numpy) of axis-angle
    ``pose`` ``[T, 24, 3]`` at the mean shape (betas = 0)."""
    import torch

    with torch.no_grad():
        pose_t = torch.as_tensor(np.asarray(pose), dtype=torch.float32)
        T = pose_t.shape[0]
        v = torch.from_numpy(model.v_template)
        rest = torch.from_numpy(model.rest_joints())
        rot = rodrigues(pose_t)  # [T, 24, 3, 3]
        pose_feature = (rot[:, 1:] - torch.eye(3)).reshape(T, -1)  # [T, 207]
        posedirs = torch.from_numpy(model.posedirs).reshape(-1, model.posedirs.shape[-1])  # [V*3, 207]
        v_posed = v + (pose_feature @ posedirs.T).reshape(T, -1, 3)
        R, P = kinematics(rot, rest, model.parents)  # [T, 24, 3, 3], [T, 24, 3]
        # Each joint's transform relative to the rest pose: x -> R_j x + (P_j - R_j J_j).
        t = P - (R @ rest[None, :, :, None])[..., 0]
        W = torch.from_numpy(model.weights)  # [V, 24]
        Rv = torch.einsum("vj,tjab->tvab", W, R)  # [T, V, 3, 3]
        verts = (Rv @ v_posed[..., None])[..., 0] + torch.einsum("vj,tja->tva", W, t)
        return verts.numpy().astype(np.float32), P.numpy().astype(np.float32)
