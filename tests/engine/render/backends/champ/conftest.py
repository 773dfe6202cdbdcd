"""The synthetic body in the SMPL file layout (newsmotion_engine/render/backends/champ/synthetic_body.py),
written as ``.npz`` or as a Python-2-style pickle whose ``shapedirs`` is a chumpy object and
``J_regressor`` a scipy sparse matrix, as the released pickle stores them."""

from __future__ import annotations

import pickle
import sys
import types
from pathlib import Path

import pytest

from newsmotion_engine.render.backends.champ.synthetic_body import make_smpl_arrays, write_synthetic_smpl

write_npz = write_synthetic_smpl


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
