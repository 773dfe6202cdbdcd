import numpy as np
import pytest

from newsmotion_engine.render.musetalk.components import load_components
from newsmotion_engine.render.musetalk.config import MuseTalkOptions


@pytest.fixture(scope="package", autouse=True)
def one_torch_thread():
    """One intra-op thread: the tiny models are too small to gain from more, and on a loaded
    2-core machine more threads only wait on each other."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="package")
def tiny_opts():
    return MuseTalkOptions(preset="tiny", device="cpu", batch_size=4)


@pytest.fixture(scope="package")
def tiny(tiny_opts):
    return load_components(tiny_opts)


def synthetic_face(cx=120.0, cy=150.0, width=100.0, height=120.0, seed=0):
    """68 iBUG-layout points: a jawline arc (0..16) below the centre, the rest inside the face, nose 29 above the mouth."""
    rng = np.random.default_rng(seed)
    ang = np.linspace(np.pi * 0.05, np.pi * 0.95, 17)
    jaw = np.stack([cx - width / 2 * np.cos(ang), cy + height / 2 * np.sin(ang)], 1)
    rest = np.array([cx, cy]) + rng.uniform(-width / 4, width / 4, (51, 2))
    face = np.concatenate([jaw, rest])
    face[29] = [cx, cy - 10]
    face[31], face[33], face[35] = [cx - 12, cy], [cx, cy + 2], [cx + 12, cy]
    return face
